"""Candidate patches (N per task) for best-of-N verification, and their labels.

:func:`load_candidates` reads, and merges in the order given:

* **SWE-bench predictions**: ``preds.json`` as a dict ``instance_id -> {instance_id,
  model_name_or_path, model_patch}`` or a list of such dicts (``.json`` / ``.json.gz``);
* **JSONL** (``.jsonl`` / ``.jsonl.gz`` / ``.ndjson``): one such dict per line. The patch
  is read from ``candidate_patch``, else ``model_patch``, else ``patch`` (in that order: an
  SWR example row carries the task's gold ``patch`` beside its ``candidate_patch``). An
  optional ``resolved`` (or ``label``) is the label;
* **mini-swe-agent trajectories**: one ``*.traj.json`` file, a directory holding them (at
  any depth), or a ``.tar.gz`` / ``.tgz`` / ``.tar`` of such a directory. The patch is
  ``info.submission``; the instance id the file's ``instance_id`` or, when absent, the file
  name. When the directory or archive also holds the official harness reports
  (``logs/<id>/report.json``) their ``resolved`` becomes the label and ``tests_status``
  goes to ``meta``. A directory or archive without trajectories is read through its
  ``preds.json``.

Several candidates per instance are kept in order; exact duplicate patches are dropped only
with ``dedupe=True``. Errors are :class:`CandidateLoadError` (a ``ValueError``) naming the
file and the line, item or member, or ``FileNotFoundError``.

:func:`write_predictions` writes the selected patches back in SWE-bench's predictions format,
and :func:`load_verified_labelled` builds the labelled SWE-bench Verified benchmark from the
shared data (see its docstring).
"""

from __future__ import annotations

import gzip
import json
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from sweworld.tasks.loaders import iter_json_lines
from sweworld.tasks.schema import Task, parse_test_list

__all__ = [
    "MINI_SWE_AGENT_SOURCE",
    "Candidate",
    "CandidateLoadError",
    "candidate_stats",
    "load_candidates",
    "load_verified_labelled",
    "write_predictions",
]

MINI_SWE_AGENT_SOURCE = "mini-swe-agent-gemini3"
VERIFIED_FILE = "swebench_verified_resolved_patches.jsonl.gz"
LITE_FILE = "swebench_lite.jsonl.gz"
MINI_SWE_AGENT_FILE = "mini-swe-agent-gemini3-verified.tar.gz"

_PATCH_KEYS = ("candidate_patch", "model_patch", "patch")
_LABEL_KEYS = ("resolved", "label")
_CONSUMED = frozenset(("instance_id", "model_name_or_path", "source", *_PATCH_KEYS, *_LABEL_KEYS))
_TRAJ_SUFFIX = ".traj.json"
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson")
_JSON_SUFFIXES = (".json", ".json.gz")
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
# Task fields taken from SWE-bench Lite when the Verified instance is also in Lite.
_LITE_FIELDS = ("test_patch", "version", "environment_setup_commit", "hints_text", "created_at")


class CandidateLoadError(ValueError):
    """A candidate file that cannot be read, or a record in it that is not a candidate."""


@dataclass
class Candidate:
    """One candidate patch for one task.

    Attributes:
        instance_id: the task's id.
        patch: the unified diff ("" for an empty or missing patch).
        source: who produced it (model name, leaderboard system, or the file name).
        label: True / False when known to resolve / not resolve the task, else None.
        meta: whatever else the record said (origin, tests_status, exit status, ...).
    """

    instance_id: str
    patch: str
    source: str = ""
    label: bool | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------


def load_candidates(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    dedupe: bool = False,
) -> dict[str, list[Candidate]]:
    """Candidates per instance id from one or several files / directories (merged in order).

    With ``dedupe``, a candidate whose patch is exactly that of an earlier candidate of the
    same instance is dropped; the kept one lists the dropped ones in
    ``meta["duplicates"]`` (source and label) and gets ``meta["label_conflict"] = True``
    when their labels disagree (its own label is kept).
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out: dict[str, list[Candidate]] = {}
    for path in paths:
        for candidate in _iter_path(Path(path)):
            out.setdefault(candidate.instance_id, []).append(candidate)
    return _dedupe(out) if dedupe else out


def write_predictions(
    selected: Mapping[str, str | Candidate | None],
    path: str | os.PathLike[str],
    model_name: str = "sweworld-verify",
) -> Path:
    """Write SWE-bench predictions: a JSON dict keyed by instance id of
    ``{instance_id, model_name_or_path, model_patch}`` (one such object per line when the
    path ends in ``.jsonl``). Values may be patches, candidates, or None (no patch)."""
    rows: dict[str, dict[str, Any]] = {}
    for instance_id, value in selected.items():
        patch = value.patch if isinstance(value, Candidate) else value
        if patch is not None and not isinstance(patch, str):
            raise TypeError(f"{instance_id}: expected a patch string, got {type(patch).__name__}")
        rows[instance_id] = {
            "instance_id": instance_id,
            "model_name_or_path": model_name,
            "model_patch": patch,
        }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.name.lower().endswith(".jsonl"):
        text = "".join(json.dumps(row) + "\n" for row in rows.values())
    else:
        text = json.dumps(rows, indent=2) + "\n"
    out.write_text(text, encoding="utf-8")
    return out


def candidate_stats(
    candidates: Mapping[str, Sequence[Candidate]], tasks: Iterable[Task] | None = None
) -> dict[str, Any]:
    """Counts over a candidate set: tasks, candidates, positives / negatives / unlabelled,
    tasks with >= 2 candidates, tasks with both labels (``mixed``), by source and (when
    ``tasks`` give the repositories) per repository."""
    repo_of = {task.instance_id: task.repo for task in tasks or ()}

    def empty() -> dict[str, int]:
        keys = ("tasks", "candidates", "positives", "negatives", "unlabelled", "ge2", "mixed")
        return dict.fromkeys(keys, 0)

    total = empty()
    per_repo: dict[str, dict[str, int]] = {}
    by_source: dict[str, dict[str, int]] = {}
    for instance_id, group in candidates.items():
        buckets = [total]
        if repo_of:
            buckets.append(per_repo.setdefault(repo_of.get(instance_id, "?"), empty()))
        labels = [c.label for c in group]
        pos = sum(1 for label in labels if label is True)
        neg = sum(1 for label in labels if label is False)
        for bucket in buckets:
            bucket["tasks"] += 1
            bucket["candidates"] += len(group)
            bucket["positives"] += pos
            bucket["negatives"] += neg
            bucket["unlabelled"] += len(group) - pos - neg
            bucket["ge2"] += int(len(group) >= 2)
            bucket["mixed"] += int(pos > 0 and neg > 0)
        for candidate in group:
            counts = by_source.setdefault(candidate.source, {"candidates": 0, "positives": 0})
            counts["candidates"] += 1
            counts["positives"] += int(candidate.label is True)
    result: dict[str, Any] = dict(total)
    result["by_source"] = dict(sorted(by_source.items()))
    if repo_of:
        result["per_repo"] = dict(sorted(per_repo.items()))
    return result


# ------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------


def _iter_path(path: Path) -> Iterator[Candidate]:
    if path.is_dir():
        yield from _iter_dir(path)
        return
    if not path.exists():
        raise FileNotFoundError(f"candidate source {str(path)!r} does not exist")
    name = path.name.lower()
    if name.endswith(_TRAJ_SUFFIX):
        data = _load_json(path, _read_text(path))
        yield _from_trajectory(data, path.name, str(path), path.parent.name, {})
    elif name.endswith(_TAR_SUFFIXES):
        yield from _iter_tar(path)
    elif name.endswith(_JSONL_SUFFIXES):
        yield from _iter_jsonl(path)
    elif name.endswith(_JSON_SUFFIXES):
        yield from _iter_json(path, _load_json(path, _read_text(path)))
    else:
        raise CandidateLoadError(
            f"{path}: unknown candidate format; expected SWE-bench predictions (.json, "
            ".json.gz, .jsonl, .jsonl.gz), a mini-swe-agent trajectory (*.traj.json), a "
            "directory of trajectories, or a .tar.gz of one"
        )


def _read_text(path: Path) -> str:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read()
        return path.read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise CandidateLoadError(f"{path}: cannot read ({exc})") from None


def _load_json(where: Any, text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CandidateLoadError(
            f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        raise CandidateLoadError(f"{where}: not UTF-8 ({exc})") from None


# ------------------------------------------------------------------------------------------
# Prediction rows
# ------------------------------------------------------------------------------------------


def _label(value: Any, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CandidateLoadError(f"{where}: label must be true, false, 0, 1 or null; got {value!r}")


def _from_row(
    row: Any, where: str, default_source: str, instance_id: str | None = None
) -> Candidate:
    if not isinstance(row, Mapping):
        raise CandidateLoadError(f"{where}: expected an object, got {type(row).__name__}")
    iid = row.get("instance_id") or instance_id
    if not isinstance(iid, str) or not iid:
        raise CandidateLoadError(f"{where}: missing or empty 'instance_id'")
    key = next((k for k in _PATCH_KEYS if k in row), None)
    if key is None:
        raise CandidateLoadError(
            f"{where}: no patch field (expected one of {', '.join(_PATCH_KEYS)}); "
            f"keys: {sorted(row)}"
        )
    patch = row[key]
    meta: dict[str, Any] = {"origin": where}
    if patch is None:
        patch = ""
        meta["patch_is_None"] = True
    elif not isinstance(patch, str):
        raise CandidateLoadError(f"{where}: {key!r} must be a string, got {type(patch).__name__}")
    label_key = next((k for k in _LABEL_KEYS if k in row), None)
    label = _label(row[label_key], where) if label_key else None
    source = row.get("model_name_or_path") or row.get("source") or default_source
    meta.update({k: v for k, v in row.items() if k not in _CONSUMED})
    return Candidate(instance_id=iid, patch=patch, source=str(source), label=label, meta=meta)


def _looks_like_row(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("instance_id"), str) and any(
        isinstance(data.get(k), str) or (k in data and data[k] is None) for k in _PATCH_KEYS
    )


def _looks_like_trajectory(data: Mapping[str, Any]) -> bool:
    info = data.get("info")
    return isinstance(info, Mapping) and ("submission" in info or "messages" in data)


def _iter_json(path: Path, data: Any, label: str | None = None) -> Iterator[Candidate]:
    where = label or str(path)
    source = path.name
    if isinstance(data, list):
        for index, row in enumerate(data):
            yield _from_row(row, f"{where} item {index}", source)
    elif isinstance(data, Mapping):
        if _looks_like_trajectory(data):
            yield _from_trajectory(data, path.name, where, path.parent.name, {})
        elif _looks_like_row(data):
            yield _from_row(data, where, source)
        else:
            for key, row in data.items():
                yield _from_row(row, f"{where} key {key!r}", source, instance_id=str(key))
    else:
        raise CandidateLoadError(
            f"{where}: expected SWE-bench predictions (a dict keyed by instance id or a list "
            f"of objects), got {type(data).__name__}"
        )


def _iter_jsonl(path: Path) -> Iterator[Candidate]:
    for where, row in iter_json_lines(path, error=CandidateLoadError):
        yield _from_row(row, where, path.name)


# ------------------------------------------------------------------------------------------
# mini-swe-agent trajectories and reports
# ------------------------------------------------------------------------------------------


def _instance_from_name(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base[: -len(_TRAJ_SUFFIX)] if base.lower().endswith(_TRAJ_SUFFIX) else base


def _from_trajectory(
    data: Any, name: str, where: str, default_source: str, reports: Mapping[str, Any]
) -> Candidate:
    if not isinstance(data, Mapping) or not isinstance(data.get("info"), Mapping):
        raise CandidateLoadError(f"{where}: not a mini-swe-agent trajectory (no 'info' object)")
    info = data["info"]
    iid = data.get("instance_id") or _instance_from_name(name)
    if not isinstance(iid, str) or not iid:
        raise CandidateLoadError(f"{where}: no instance id")
    submission = info.get("submission")
    meta: dict[str, Any] = {"origin": where, "exit_status": info.get("exit_status")}
    if submission is None:
        submission = ""
        meta["patch_is_None"] = True
    elif not isinstance(submission, str):
        raise CandidateLoadError(f"{where}: info.submission must be a string")
    config = info.get("config")
    model = config.get("model") if isinstance(config, Mapping) else None
    model_name = model.get("model_name") if isinstance(model, Mapping) else None
    if isinstance(info.get("model_stats"), Mapping):
        meta["model_stats"] = dict(info["model_stats"])
    label = None
    report = reports.get(iid)
    if report is not None:
        label = _label(report.get("resolved"), f"report.json of {iid}")
        meta["tests_status"] = report.get("tests_status")
        meta["patch_successfully_applied"] = report.get("patch_successfully_applied")
    return Candidate(
        instance_id=iid,
        patch=submission,
        source=str(model_name or default_source),
        label=label,
        meta=meta,
    )


def _report_entry(data: Any, instance_id: str, where: str) -> dict[str, Any]:
    """The instance's entry of a harness report.json (flat, or keyed by instance id)."""
    if isinstance(data, Mapping):
        if "resolved" in data:
            return dict(data)
        entry = data.get(instance_id)
        if isinstance(entry, Mapping) and "resolved" in entry:
            return dict(entry)
        if len(data) == 1:
            only = next(iter(data.values()))
            if isinstance(only, Mapping) and "resolved" in only:
                return dict(only)
    raise CandidateLoadError(f"{where}: not a SWE-bench harness report (no 'resolved')")


def _report_id(name: str) -> str:
    """``.../logs/<id>/report.json`` -> ``<id>``."""
    parts = name.replace("\\", "/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _iter_dir(path: Path) -> Iterator[Candidate]:
    trajectories = sorted(p for p in path.rglob(f"*{_TRAJ_SUFFIX}") if p.is_file())
    if trajectories:
        reports: dict[str, Any] = {}
        for report in sorted(path.rglob("report.json")):
            iid = _report_id(report.as_posix())
            reports[iid] = _report_entry(_load_json(report, _read_text(report)), iid, str(report))
        for traj in trajectories:
            data = _load_json(traj, _read_text(traj))
            yield _from_trajectory(data, traj.name, str(traj), path.name, reports)
        return
    files = [path / "preds.json"] if (path / "preds.json").is_file() else []
    if not files:
        files = sorted(
            p
            for p in path.iterdir()
            if p.is_file() and p.name.lower().endswith((*_JSONL_SUFFIXES, *_JSON_SUFFIXES))
        )
    if not files:
        raise CandidateLoadError(
            f"{path}: directory holds no *.traj.json trajectories, no preds.json and no "
            ".json / .jsonl prediction files"
        )
    for file in files:
        yield from _iter_path(file)


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> bytes:
    handle: IO[bytes] | None = tar.extractfile(member)
    if handle is None:
        raise CandidateLoadError(f"{where}: cannot read member")
    with handle:
        return handle.read()


def _iter_tar(path: Path) -> Iterator[Candidate]:
    trajectories: list[tuple[str, Any]] = []
    reports: dict[str, Any] = {}
    preds: list[tuple[str, Any]] = []
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name
                lower = name.lower()
                where = f"{path}:{name}"
                if lower.endswith(_TRAJ_SUFFIX):
                    trajectories.append((name, _load_json(where, _read_member(tar, member, where))))
                elif lower.endswith("/report.json") or lower == "report.json":
                    iid = _report_id(name)
                    data = _load_json(where, _read_member(tar, member, where))
                    reports[iid] = _report_entry(data, iid, where)
                elif lower.endswith("preds.json"):
                    preds.append((name, _load_json(where, _read_member(tar, member, where))))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise CandidateLoadError(f"{path}: not a readable tar archive ({exc})") from None
    if trajectories:
        default_source = path.name
        for name, data in trajectories:
            yield _from_trajectory(data, name, f"{path}:{name}", default_source, reports)
        return
    if not preds:
        raise CandidateLoadError(f"{path}: archive holds no *.traj.json and no preds.json")
    for name, data in preds:
        for candidate in _iter_json(Path(name), data, label=f"{path}:{name}"):
            report = reports.get(candidate.instance_id)
            if report is not None and candidate.label is None:
                candidate.label = _label(report.get("resolved"), f"{path}:{name}")
                candidate.meta["tests_status"] = report.get("tests_status")
            yield candidate


# ------------------------------------------------------------------------------------------
# Deduplication
# ------------------------------------------------------------------------------------------


def _dedupe(groups: dict[str, list[Candidate]]) -> dict[str, list[Candidate]]:
    out: dict[str, list[Candidate]] = {}
    for instance_id, group in groups.items():
        kept: dict[str, Candidate] = {}
        for candidate in group:
            first = kept.get(candidate.patch)
            if first is None:
                kept[candidate.patch] = candidate
                continue
            first.meta.setdefault("duplicates", []).append(
                {"source": candidate.source, "label": candidate.label}
            )
            if None not in (first.label, candidate.label) and first.label != candidate.label:
                first.meta["label_conflict"] = True
        out[instance_id] = list(kept.values())
    return out


# ------------------------------------------------------------------------------------------
# The labelled SWE-bench Verified benchmark (shared data)
# ------------------------------------------------------------------------------------------


def _read_jsonl_gz(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if line.strip():
            row = _load_json(f"{path} line {lineno}", line)
            if not isinstance(row, dict):
                raise CandidateLoadError(f"{path} line {lineno}: expected an object")
            rows.append(row)
    return rows


def _read_mini_swe_agent(path: Path) -> tuple[dict[str, Candidate], dict[str, dict[str, Any]]]:
    """Submissions (as candidates, labelled by the reports) and reports of the tarball."""
    runs: dict[str, Candidate] = {}
    reports: dict[str, dict[str, Any]] = {}
    for candidate in _iter_tar(path):
        candidate.source = MINI_SWE_AGENT_SOURCE
        runs[candidate.instance_id] = candidate
        if candidate.label is not None:
            reports[candidate.instance_id] = {
                "resolved": candidate.label,
                "tests_status": candidate.meta.get("tests_status") or {},
            }
    return runs, reports


def _test_lists(tests_status: Mapping[str, Any], key: str) -> list[str]:
    part = tests_status.get(key) or {}
    return [*part.get("success", []), *part.get("failure", [])]


def load_verified_labelled(
    shared_dir: str | os.PathLike[str], *, dedupe: bool = False
) -> tuple[list[Task], dict[str, list[Candidate]]]:
    """The labelled best-of-N benchmark on SWE-bench Verified, from the shared data folder.

    Tasks come from ``swebench_verified_resolved_patches.jsonl.gz`` (problem statement,
    gold patch, base commit, repo). Those rows have no test lists, so ``FAIL_TO_PASS`` /
    ``PASS_TO_PASS`` are the tests the official harness graded in the mini-swe-agent run
    (``tests_status`` of ``logs/<id>/report.json``: success + failure lists). ``test_patch``,
    ``version``, ``environment_setup_commit``, ``hints_text`` and ``created_at`` come from
    ``swebench_lite.jsonl.gz`` when the instance is also in Lite (else empty / None).
    ``Task.meta`` records ``in_lite``, ``test_lists_from`` and, for Lite instances,
    ``test_lists_match_lite``.

    Candidates per task, in this order: the mini-swe-agent submission (source
    ``mini-swe-agent-gemini3``, label = the report's ``resolved``, ``tests_status`` in
    ``meta``), then each ``resolved_by`` entry (label True, source = the leaderboard
    system's name, e.g. ``20240628_autocoderover-v20240620``). ``dedupe`` as for
    :func:`load_candidates`.

    Raises ``FileNotFoundError`` when the Verified file or the mini-swe-agent archive is
    missing (the Lite file is optional).
    """
    root = Path(shared_dir)
    verified_path = root / VERIFIED_FILE
    runs_path = root / MINI_SWE_AGENT_FILE
    for required in (verified_path, runs_path):
        if not required.is_file():
            raise FileNotFoundError(f"shared data file not found: {required}")
    lite_path = root / LITE_FILE
    lite = (
        {row["instance_id"]: row for row in _read_jsonl_gz(lite_path)}
        if lite_path.is_file()
        else {}
    )
    runs, reports = _read_mini_swe_agent(runs_path)

    tasks: list[Task] = []
    candidates: dict[str, list[Candidate]] = {}
    for lineno, row in enumerate(_read_jsonl_gz(verified_path), start=1):
        where = f"{verified_path} line {lineno}"
        resolved_by = row.get("resolved_by") or []
        iid = row.get("instance_id")
        if not isinstance(iid, str) or not isinstance(resolved_by, list):
            raise CandidateLoadError(f"{where}: expected instance_id and a resolved_by list")
        task_row = {k: v for k, v in row.items() if k != "resolved_by"}
        meta: dict[str, Any] = {"in_lite": iid in lite, "test_lists_from": None}
        report = reports.get(iid)
        if report is not None:
            status = report["tests_status"]
            task_row["FAIL_TO_PASS"] = _test_lists(status, "FAIL_TO_PASS")
            task_row["PASS_TO_PASS"] = _test_lists(status, "PASS_TO_PASS")
            meta["test_lists_from"] = "mini-swe-agent report.json tests_status"
        lite_row = lite.get(iid)
        if lite_row is not None:
            for key in _LITE_FIELDS:
                if lite_row.get(key) is not None:
                    task_row[key] = lite_row[key]
            if report is not None:
                meta["test_lists_match_lite"] = all(
                    sorted(task_row[key]) == sorted(parse_test_list(lite_row.get(key)) or [])
                    for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
                )
        task = Task.from_row(task_row, source="swebench", where=where)
        task.meta = {**task.meta, **meta}
        tasks.append(task)

        group: list[Candidate] = []
        run = runs.get(iid)
        if run is not None:
            group.append(run)
        for index, entry in enumerate(resolved_by):
            entry_where = f"{where} resolved_by[{index}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("patch"), str):
                raise CandidateLoadError(f"{entry_where}: expected an object with a 'patch'")
            entry_meta: dict[str, Any] = {"origin": entry_where}
            if entry.get("updated_spans") is not None:
                entry_meta["updated_spans"] = entry["updated_spans"]
            group.append(
                Candidate(
                    instance_id=iid,
                    patch=entry["patch"],
                    source=str(entry.get("name") or "resolved_by"),
                    label=True,
                    meta=entry_meta,
                )
            )
        candidates[iid] = group
    return tasks, (_dedupe(candidates) if dedupe else candidates)
