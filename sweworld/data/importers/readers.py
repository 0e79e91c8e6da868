"""What the importers share: bounded, streaming readers of JSON and JSON Lines, task rows by
instance id, and capped texts.

Every reader here turns bad input into a :class:`~sweworld.data.importers.Skip` (a value,
never an exception): a line longer than the bound is skipped without being held in memory,
invalid JSON names its file and line, an unreadable file is one skip.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from sweworld.data.importers.skip import Skip

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_OUTPUT_CHARS",
    "cap_text",
    "first_json_object",
    "iter_jsonl",
    "load_task_rows",
    "open_binary",
    "read_json",
    "task_row",
]

#: Longest JSON Lines record read (one trajectory per line can be large: steps and outputs).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Largest whole JSON file read (a ``.traj``, a ``preds.json``, a report).
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Longest step output kept; longer outputs keep head and tail and are marked truncated.
MAX_OUTPUT_CHARS = 200_000

_CHUNK = 1 << 20


def open_binary(path: Path) -> IO[bytes]:
    """The file, gunzipped when its name ends with ``.gz``."""
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def _decode(where: str, raw: bytes) -> Any | Skip:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        return Skip(where, f"invalid JSON ({exc.msg}; line {exc.lineno} column {exc.colno})")
    except UnicodeDecodeError:
        return Skip(where, "invalid JSON (not UTF-8 text)")
    except RecursionError:
        return Skip(where, "invalid JSON (nested too deeply)")


def iter_jsonl(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of a JSON Lines file (``.gz`` too), where
    ``value`` is the decoded JSON or a :class:`Skip` (invalid JSON, a line over
    ``max_line_bytes``: consumed in chunks, never held whole). Linear in the file."""
    try:
        handle = open_binary(path)
    except OSError as exc:
        yield str(path), Skip(str(path), f"cannot read ({exc})")
        return
    lineno = 0
    try:
        with handle:
            while True:
                line = handle.readline(max_line_bytes + 1)
                if not line:
                    return
                lineno += 1
                where = f"{path} line {lineno}"
                if len(line) > max_line_bytes and not line.endswith(b"\n"):
                    while True:  # drop the rest of the over-long line
                        rest = handle.readline(_CHUNK)
                        if not rest or rest.endswith(b"\n"):
                            break
                    yield where, Skip(where, f"line longer than {max_line_bytes} bytes")
                    continue
                if not line.strip():
                    continue
                yield where, _decode(where, line)
    except (OSError, EOFError, zlib.error) as exc:
        yield f"{path} line {lineno + 1}", Skip(f"{path} line {lineno + 1}", f"cannot read ({exc})")


def read_json(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> Any | Skip:
    """The JSON value of a whole file (``.gz`` too), or a :class:`Skip` saying why not."""
    try:
        with open_binary(path) as handle:
            raw = handle.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        return Skip(str(path), f"cannot read ({exc})")
    if len(raw) > max_bytes:
        return Skip(str(path), f"file larger than {max_bytes} bytes")
    return _decode(str(path), raw)


def first_json_object(path: Path, *, max_bytes: int = 1 << 20) -> dict[str, Any] | None:
    """The first JSON object of a ``.json`` / ``.jsonl`` file (its first line for JSON Lines,
    the first element of a top-level list), read from at most ``max_bytes``; None when the
    start of the file is not one. For format detection."""
    try:
        with open_binary(path) as handle:
            head = handle.read(max_bytes)
    except (OSError, EOFError, zlib.error):
        return None
    text = head.decode("utf-8", errors="replace").lstrip()
    decoder = json.JSONDecoder()
    if text.startswith("["):
        text = text[1:].lstrip()
    try:
        value, _ = decoder.raw_decode(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def load_task_rows(source: str | Path | None) -> tuple[dict[str, dict[str, Any]], Skip | None]:
    """Task rows (``Task.to_row()``) by instance id from a task file or dataset (anything
    :func:`sweworld.tasks.loaders.iter_tasks` reads), and a skip when it could not be read
    completely (the rows read before the error are kept)."""
    rows: dict[str, dict[str, Any]] = {}
    if source is None or source == "":
        return rows, None
    from sweworld.tasks.loaders import iter_tasks

    try:
        for task in iter_tasks(source):
            rows[task.instance_id] = task.to_row()
    except Exception as exc:  # a task file that fails half-way: keep what was read
        return rows, Skip(str(source), f"task file not fully read ({exc})")
    return rows, None


def task_row(
    instance_id: str, tasks: Mapping[str, Mapping[str, Any]], **known: Any
) -> dict[str, Any]:
    """The task row of ``instance_id`` from ``tasks`` when there, else a minimal row from what
    the source itself tells (``known``: repo, base_commit, problem_statement, ...; the
    repository from a SWE-bench style id when not given)."""
    if instance_id in tasks:
        return dict(tasks[instance_id])
    from sweworld.tasks.fields import repo_from_instance_id

    row: dict[str, Any] = {"instance_id": instance_id}
    row.update({k: v for k, v in known.items() if v not in (None, "")})
    if not row.get("repo"):
        row["repo"] = repo_from_instance_id(instance_id) or ""
    return row


def cap_text(text: str, limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (head and tail kept), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return text[:half] + "\n...\n" + text[-half:], True
