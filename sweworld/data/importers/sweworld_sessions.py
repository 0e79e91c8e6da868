"""sweworld's own recordings -> records and :class:`~sweworld.data.schema.Trajectory` objects.

Two things sweworld writes:

* **record folders** (:class:`~sweworld.data.store.RecordStore`): ``<out>/records/swt.jsonl``
  and ``swr.jsonl``, one schema row per line. Each row is rebuilt with
  :func:`~sweworld.data.schema.record_from_dict` (columns a later version added are
  ignored) and yielded as an :class:`~sweworld.data.schema.SWTRecord` or
  :class:`~sweworld.data.schema.SWRRecord`, ready to be written again. A row of another
  schema family or major version, a row missing a column, a value of the wrong type and a
  repeated id are skips.
* **trajectories** (``trajectories.jsonl``, written by the collect mode): one
  ``dataclasses.asdict(Trajectory)`` per line, rebuilt as :class:`Trajectory` objects (with
  their :class:`~sweworld.data.schema.TrajectoryStep` steps), so that they can be replayed.

``path`` may be such a folder (``<out>``, or ``<out>/records``), one of the files, or a
folder holding several ``<out>`` folders.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from sweworld.data.importers.readers import first_json_object, iter_jsonl
from sweworld.data.importers.skip import Skip
from sweworld.data.schema import (
    SCHEMA_VERSION,
    SWRRecord,
    SWTRecord,
    Trajectory,
    TrajectoryStep,
    record_from_dict,
    record_id,
)

__all__ = ["NAME", "detect", "read", "record_row", "schema_compatible", "trajectory_from_dict"]

NAME = "sweworld"

RECORD_FILES = {"swt.jsonl": "swt", "swr.jsonl": "swr"}
TRAJECTORY_FILE = "trajectories.jsonl"
DETECT_SCAN_LIMIT = 2000

_TYPES: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "bool": bool}


def schema_compatible(version: Any) -> bool:
    """A row written under ``version`` reads with this schema: same family, same major."""
    if not isinstance(version, str) or "/" not in version:
        return False
    family, _, major = version.partition("/")
    ours_family, _, ours_major = SCHEMA_VERSION.partition("/")
    return family == ours_family and major.split(".")[0] == ours_major.split(".")[0]


def _files(root: Path, limit: int | None = None) -> Iterator[Path]:
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if limit is not None and seen > limit:
                return
            if name in RECORD_FILES or name == TRAJECTORY_FILE:
                yield Path(folder) / name


def _is_trajectory_row(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj) and {"source", "instance_id", "repo", "task", "steps"} <= set(obj)  # type: ignore[arg-type]


def _is_record_row(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj) and "schema_version" in obj and "id" in obj and "instance_id" in obj  # type: ignore[operator]


def detect(path: str | os.PathLike[str]) -> bool:
    """A sweworld record folder or file, or a ``trajectories.jsonl`` of the collect mode."""
    path = Path(path)
    if path.is_file():
        obj = first_json_object(path)
        if path.name == TRAJECTORY_FILE or path.name.endswith(".jsonl"):
            return _is_trajectory_row(obj) or (path.name in RECORD_FILES and _is_record_row(obj))
        return False
    if path.is_dir():
        return any(True for _ in _files(path, DETECT_SCAN_LIMIT))
    return False


def record_row(kind: str, row: Any, where: str) -> SWTRecord | SWRRecord | Skip:
    """A stored record row validated and rebuilt (or why it cannot be)."""
    if not isinstance(row, Mapping):
        return Skip(where, f"expected a JSON object, got {type(row).__name__}")
    version = row.get("schema_version")
    if not schema_compatible(version):
        return Skip(where, f"schema_version {version!r} is not readable as {SCHEMA_VERSION}")
    cls = SWTRecord if kind == "swt" else SWRRecord
    for f in fields(cls):
        if f.name not in row:
            if f.default is MISSING and f.default_factory is MISSING:
                return Skip(where, f"missing column {f.name!r}")
            continue
        expected = _TYPES.get(f.type if isinstance(f.type, str) else f.type.__name__)
        value = row[f.name]
        if expected is not None and (
            not isinstance(value, expected) or (expected is int and isinstance(value, bool))
        ):
            return Skip(where, f"column {f.name!r} is {type(value).__name__}, not {f.type}")
    return record_from_dict(kind, row)


def trajectory_from_dict(row: Any, where: str) -> Trajectory | Skip:
    """A :class:`Trajectory` from ``dataclasses.asdict`` of one (or why it cannot be)."""
    if not isinstance(row, Mapping):
        return Skip(where, f"expected a JSON object, got {type(row).__name__}")
    for key, kind in (("source", str), ("instance_id", str), ("repo", str), ("task", Mapping)):
        if not isinstance(row.get(key), kind):
            return Skip(where, f"trajectory without a valid {key!r}")
    if not isinstance(row.get("steps"), list):
        return Skip(where, "trajectory without a 'steps' list")
    names = {f.name for f in fields(TrajectoryStep)}
    steps: list[TrajectoryStep] = []
    for index, raw in enumerate(row["steps"]):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("command"), str):
            return Skip(f"{where} step {index}", "step without a text 'command'")
        exit_code = raw.get("exit_code")
        if exit_code is not None and (
            not isinstance(exit_code, int) or isinstance(exit_code, bool)
        ):
            return Skip(f"{where} step {index}", "step whose exit_code is not an integer")
        for key in ("output", "action"):
            if not isinstance(raw.get(key, ""), str):
                return Skip(f"{where} step {index}", f"step whose {key!r} is not text")
        if not isinstance(raw.get("stderr"), (str, type(None))):
            return Skip(f"{where} step {index}", "step whose 'stderr' is not text")
        steps.append(TrajectoryStep(**{k: v for k, v in raw.items() if k in names}))
    report = row.get("report")
    if report is not None and not (
        isinstance(report, Mapping) and isinstance(report.get("resolved"), bool)
    ):
        return Skip(where, "trajectory whose report has no boolean 'resolved'")
    meta = row.get("meta") or {}
    submission = row.get("submission") or ""
    if not isinstance(meta, Mapping) or not isinstance(submission, str):
        return Skip(where, "trajectory whose meta or submission has the wrong type")
    meta = dict(meta)
    if not meta.get("trajectory_id"):  # several runs of one instance (collect policies)
        meta["trajectory_id"] = str(meta.get("unit") or "") or record_id(
            row["instance_id"], submission, *(s.action or s.command for s in steps)
        )
    return Trajectory(
        source=row["source"],
        instance_id=row["instance_id"],
        repo=row["repo"],
        task=dict(row["task"]),
        steps=steps,
        submission=submission,
        report=dict(report) if report is not None else None,
        meta=meta,
    )


def read(
    path: str | os.PathLike[str], **_options: Any
) -> Iterator[SWTRecord | SWRRecord | Trajectory | Skip]:
    """Records and trajectories of a sweworld output, one line in memory at a time.

    Yields :class:`SWTRecord` rows too (an SWT example needs no replay: it is written as it
    is), besides :class:`SWRRecord` rows and :class:`Trajectory` objects.
    """
    root = Path(path)
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = list(_files(root))
        if not files:
            yield Skip(str(root), "no swt.jsonl, swr.jsonl or trajectories.jsonl below")
            return
    else:
        yield Skip(str(root), "no such file or folder")
        return
    seen: dict[str, set[str]] = {"swt": set(), "swr": set()}
    for file in files:
        kind = RECORD_FILES.get(file.name)
        if kind is None and file.name != TRAJECTORY_FILE:
            first = first_json_object(file)
            if _is_trajectory_row(first):
                kind = None
            elif _is_record_row(first):
                kind = "swt" if "command" in first else "swr"  # type: ignore[operator]
        for where, value in iter_jsonl(file):
            if isinstance(value, Skip):
                yield value
                continue
            if kind is None:
                yield trajectory_from_dict(value, where)
                continue
            record = record_row(kind, value, where)
            if isinstance(record, Skip):
                yield record
            elif record.id in seen[kind]:
                yield Skip(where, f"duplicate {kind} record id {record.id}")
            else:
                seen[kind].add(record.id)
                yield record
