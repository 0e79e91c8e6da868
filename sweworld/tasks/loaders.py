"""Load tasks from files, ``datasets.save_to_disk`` folders and the Hugging Face hub.

``source`` may be:

* a ``.json`` file (a list of rows, a dict of rows keyed by instance id, or one row),
  ``.json.gz``, ``.jsonl`` / ``.jsonl.gz`` (one row per line), ``.parquet``;
* a folder written by ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or
  any other folder, whose supported files are read in name order;
* a hub dataset name such as ``princeton-nlp/SWE-bench_Lite`` (only for strings shaped
  ``owner/name`` that are not existing paths).

Parquet, saved datasets and the hub need the optional packages of ``sweworld[data]``;
they are imported only when such a source is read.
"""

from __future__ import annotations

import difflib
import gzip
import json
import os
import re
import socket
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from sweworld.tasks.schema import Task, TaskValidationError

__all__ = [
    "HubUnavailableError",
    "MissingDependencyError",
    "TaskLoadError",
    "TaskNotFoundError",
    "get_task",
    "iter_json_lines",
    "iter_tasks",
    "load_tasks",
    "read_json_lines",
]

DATA_EXTRA_HINT = "pip install 'sweworld[data]'"
_HUB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_FILE_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".ndjson", ".json", ".parquet")
_HUB_PROBE_TIMEOUT_S = 3.0


class TaskLoadError(ValueError):
    """A source that cannot be read, or a row in it that is not a valid task."""


class MissingDependencyError(ImportError):
    """An optional package needed for this kind of source is not installed."""


class HubUnavailableError(TaskLoadError):
    """The Hugging Face hub cannot be reached (and offline mode is not on)."""


class TaskNotFoundError(KeyError):
    """No task with the requested instance id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------


def iter_tasks(
    source: str | os.PathLike[str],
    *,
    split: str | None = None,
    source_format: str | None = None,
    limit: int | None = None,
) -> Iterator[Task]:
    """Yield tasks from ``source`` one at a time (see the module docstring for sources).

    ``split`` picks a split of a saved ``DatasetDict`` or a hub dataset (default
    ``"test"``); it is ignored for plain files. ``source_format`` forces the row mapping
    (``"swebench"``, ``"swegym"``, ``"swesmith"``, ``"r2egym"``; default: detect per row).
    ``limit`` stops after that many tasks.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if limit == 0:
        return
    for count, (where, row) in enumerate(_iter_rows(source, split=split), start=1):
        try:
            task = Task.from_row(row, source=source_format, where=where)
        except TaskValidationError as exc:
            raise TaskLoadError(str(exc)) from None
        yield task
        if limit is not None and count >= limit:
            return


def load_tasks(
    source: str | os.PathLike[str],
    *,
    split: str | None = None,
    source_format: str | None = None,
    limit: int | None = None,
) -> list[Task]:
    """All tasks of ``source`` as a list; arguments as for :func:`iter_tasks`."""
    return list(iter_tasks(source, split=split, source_format=source_format, limit=limit))


def get_task(
    source: str | os.PathLike[str],
    instance_id: str,
    *,
    split: str | None = None,
    source_format: str | None = None,
) -> Task:
    """The task called ``instance_id`` in ``source``.

    Raises :class:`TaskNotFoundError` (a ``KeyError``) naming the closest ids when absent.
    """
    seen: list[str] = []
    for task in iter_tasks(source, split=split, source_format=source_format):
        if task.instance_id == instance_id:
            return task
        seen.append(task.instance_id)
    raise TaskNotFoundError(_not_found_message(source, instance_id, seen))


def _not_found_message(source: Any, instance_id: str, ids: list[str]) -> str:
    close = difflib.get_close_matches(instance_id, ids, n=5, cutoff=0.6)
    needle = instance_id.lower()
    for candidate in ids:
        if len(close) >= 5:
            break
        if candidate not in close and (needle in candidate.lower() or candidate.lower() in needle):
            close.append(candidate)
    message = f"no task {instance_id!r} in {str(source)!r} ({len(ids)} tasks)"
    if close:
        message += "; did you mean: " + ", ".join(repr(c) for c in close) + "?"
    elif ids:
        message += "; ids look like: " + ", ".join(repr(c) for c in ids[:3])
    return message


# ------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------


def _iter_rows(source: str | os.PathLike[str], *, split: str | None) -> Iterator[tuple[str, Any]]:
    path = Path(source).expanduser()
    if path.is_dir():
        yield from _iter_dir(path, split=split)
        return
    if path.is_file():
        yield from _iter_file(path)
        return
    text = os.fspath(source)
    if _looks_like_hub_name(text):
        yield from _iter_hub(text, split=split)
        return
    raise FileNotFoundError(
        f"task source {text!r} is not an existing file or folder"
        + (
            ""
            if "/" in text or text.endswith(_FILE_SUFFIXES)
            else " (hub datasets are named 'owner/name', e.g. 'princeton-nlp/SWE-bench_Lite')"
        )
    )


def _looks_like_hub_name(text: str) -> bool:
    return bool(_HUB_NAME_RE.match(text)) and not text.lower().endswith(_FILE_SUFFIXES)


def _iter_file(path: Path) -> Iterator[tuple[str, Any]]:
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        yield from _iter_jsonl(path)
    elif name.endswith((".json", ".json.gz")):
        yield from _iter_json(path)
    elif name.endswith(".parquet"):
        yield from _iter_parquet(path)
    else:
        raise TaskLoadError(
            f"{path}: unsupported file type; expected one of "
            ".json, .json.gz, .jsonl, .jsonl.gz, .parquet, or a datasets.save_to_disk folder"
        )


def _iter_dir(path: Path, *, split: str | None) -> Iterator[tuple[str, Any]]:
    if any((path / marker).exists() for marker in ("dataset_info.json", "dataset_dict.json")):
        yield from _iter_saved_dataset(path, split=split)
        return
    files = sorted(
        p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_FILE_SUFFIXES)
    )
    if not files:
        raise TaskLoadError(
            f"{path}: folder holds no task files (.json, .jsonl, .jsonl.gz, .parquet) "
            "and is not a datasets.save_to_disk folder"
        )
    for file in files:
        yield from _iter_file(file)


# ------------------------------------------------------------------------------------------
# Formats
# ------------------------------------------------------------------------------------------


def _open_text(path: Path) -> TextIO:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def read_json_lines(
    lines: Iterable[str], source: str, *, error: type[Exception] = TaskLoadError
) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of JSON Lines text (a file handle, stdin,
    a list of lines), where ``where`` is ``"<source> line <n>"``. Invalid JSON raises
    ``error`` with that location."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {lineno}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise error(f"{where}: invalid JSON (nested too deeply)") from None
        yield where, value


def iter_json_lines(
    path: Path, *, error: type[Exception] = TaskLoadError
) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of a JSON Lines file (``.gz`` too), where
    ``where`` names the file and line (:func:`read_json_lines`). Unreadable files and
    invalid JSON raise ``error`` with that location."""
    try:
        with _open_text(path) as handle:
            yield from read_json_lines(handle, str(path), error=error)
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise error(f"{path}: cannot read ({exc})") from None


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    for where, row in iter_json_lines(path):
        if not isinstance(row, dict):
            raise TaskLoadError(
                f"{where}: expected a JSON object per line, got {type(row).__name__}"
            )
        yield where, row


def _iter_json(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        with _open_text(path) as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise TaskLoadError(
            f"{path} line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from None
    except RecursionError:
        raise TaskLoadError(f"{path}: invalid JSON (nested too deeply)") from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise TaskLoadError(f"{path}: cannot read ({exc})") from None
    if isinstance(data, list):
        for index, row in enumerate(data):
            where = f"{path} item {index}"
            if not isinstance(row, dict):
                raise TaskLoadError(f"{where}: expected an object, got {type(row).__name__}")
            yield where, row
    elif isinstance(data, dict):
        if _looks_like_row(data):
            yield str(path), data
            return
        for key, row in data.items():
            where = f"{path} key {key!r}"
            if not isinstance(row, dict):
                raise TaskLoadError(
                    f"{where}: expected a task object (the file is a dict keyed by "
                    f"instance id), got {type(row).__name__}"
                )
            if "instance_id" not in row:
                row = {"instance_id": key, **row}
            yield where, row
    else:
        raise TaskLoadError(
            f"{path}: expected a list of task rows, a dict keyed by instance id, "
            f"or one row; got {type(data).__name__}"
        )


def _looks_like_row(data: Mapping[str, Any]) -> bool:
    keys = ("instance_id", "problem_statement", "repo_name", "parsed_commit_content", "patch")
    return any(key in data and not isinstance(data[key], dict) for key in keys)


def _iter_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {path.name} needs pyarrow, which is not installed: {DATA_EXTRA_HINT}"
        ) from exc
    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types
        raise TaskLoadError(f"{path}: not a readable parquet file ({exc})") from None
    index = 0
    for batch in parquet.iter_batches(batch_size=256):
        for row in batch.to_pylist():
            yield f"{path} row {index}", row
            index += 1


def _import_datasets(purpose: str) -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            f"{purpose} needs the 'datasets' package, which is not installed: {DATA_EXTRA_HINT}"
        ) from exc
    return datasets


def _pick_split(dataset: Any, split: str | None, where: str) -> tuple[Any, str | None]:
    if not hasattr(dataset, "keys") or not callable(dataset.keys):
        return dataset, None  # a single Dataset
    names = list(dataset.keys())
    if split is not None:
        if split not in names:
            raise TaskLoadError(f"{where}: no split {split!r}; available: {', '.join(names)}")
        return dataset[split], split
    if "test" in names:
        return dataset["test"], "test"
    if len(names) == 1:
        return dataset[names[0]], names[0]
    raise TaskLoadError(f"{where}: several splits ({', '.join(names)}); pass split=")


def _iter_saved_dataset(path: Path, *, split: str | None) -> Iterator[tuple[str, Any]]:
    datasets = _import_datasets(f"reading the saved dataset {path}")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise TaskLoadError(f"{path}: cannot load with datasets.load_from_disk ({exc})") from None
    dataset, chosen = _pick_split(loaded, split, str(path))
    label = f"{path}[{chosen}]" if chosen else str(path)
    for index, row in enumerate(dataset):
        yield f"{label} row {index}", row


# ------------------------------------------------------------------------------------------
# Hub
# ------------------------------------------------------------------------------------------


def _hub_offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _hub_probe_target() -> tuple[str, int]:
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        proxy = os.environ.get(var)
        if proxy:
            parsed = urlparse(proxy if "://" in proxy else "http://" + proxy)
            if parsed.hostname:
                return parsed.hostname, parsed.port or 8080
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    default_port = 443 if endpoint.scheme != "http" else 80
    return endpoint.hostname or "huggingface.co", endpoint.port or default_port


def _hub_reachable(timeout: float = _HUB_PROBE_TIMEOUT_S) -> bool:
    """One TCP connect to the hub (or the HTTPS proxy), bounded by ``timeout``."""
    host, port = _hub_probe_target()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _iter_hub(name: str, *, split: str | None) -> Iterator[tuple[str, Any]]:
    datasets = _import_datasets(f"loading the hub dataset {name!r}")
    if not _hub_offline() and not _hub_reachable():
        host, port = _hub_probe_target()
        raise HubUnavailableError(
            f"cannot reach the Hugging Face hub ({host}:{port}) to load {name!r}. "
            "If the dataset is in your local cache, set HF_DATASETS_OFFLINE=1 and "
            "HF_HUB_OFFLINE=1; otherwise download it where there is network "
            "(datasets.load_dataset(...).save_to_disk(path) or to_json(path)) and pass that path."
        )
    chosen = split or "test"
    try:
        dataset = datasets.load_dataset(name, split=chosen)
    except Exception as exc:
        raise TaskLoadError(
            f"cannot load hub dataset {name!r} split {chosen!r}: {type(exc).__name__}: {exc}"
        ) from None
    for index, row in enumerate(dataset):
        yield f"{name}[{chosen}] row {index}", row
