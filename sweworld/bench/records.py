"""Reading the records a benchmark evaluates, from one or several dataset folders.

A finalized folder (``<out>/swt``, ``<out>/swr``: DatasetDicts) is read by
:func:`sweworld.data.store.load_split`; a folder of record files (``<out>/records/*.jsonl``,
not finalized) is read line by line here, so that one row with a missing or unreadable field
is counted (``bad_rows``, by reason) and left out instead of failing the whole load.
A folder that does not exist or is no dataset raises :class:`DataError` (a clear message
for the command line, exit 2).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

__all__ = ["DataError", "load_records", "missing_fields", "wrong_types"]

#: The JSON value types each column type of the schema accepts (a bool is no integer).
_JSON_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,)}


class DataError(ValueError):
    """A dataset folder that does not exist or holds no records of the kind asked for."""


def missing_fields(kind: str, row: dict[str, Any]) -> list[str]:
    """The required fields (no default in the schema) that ``row`` lacks or holds as null."""
    from sweworld.data.schema import RECORD_TYPES

    cls = RECORD_TYPES[kind]
    required = [
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    ]
    return [name for name in required if row.get(name) is None]


def wrong_types(kind: str, row: dict[str, Any]) -> list[str]:
    """The fields of ``row`` whose value is not of the schema's type (``exit_code: str``);
    absent and null fields are :func:`missing_fields`' business."""
    from sweworld.data.schema import RECORD_TYPES

    out = []
    for f in fields(RECORD_TYPES[kind]):
        value = row.get(f.name)
        if value is None:
            continue
        name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        accepted = _JSON_TYPES.get(name)
        if accepted is None:
            continue
        if not isinstance(value, accepted) or (name == "int" and isinstance(value, bool)):
            out.append(f"{f.name}: {type(value).__name__}")
    return out


def _record_file_rows(folder: Path, kind: str, split: str, bad: Counter[str]) -> list[Any]:
    from sweworld.data.schema import record_from_dict, split_of

    out = []
    path = folder / "records" / f"{kind}.jsonl"
    if not path.is_file():
        return out
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                bad["unreadable row (not JSON)"] += 1
                continue
            if not isinstance(row, dict):
                bad["unreadable row (not an object)"] += 1
                continue
            missing = missing_fields(kind, row)
            if missing:
                bad[f"missing field: {', '.join(missing)}"] += 1
                continue
            wrong = wrong_types(kind, row)
            if wrong:
                bad[f"wrong type: {', '.join(wrong)}"] += 1
                continue
            try:
                record = record_from_dict(kind, row)
            except (TypeError, ValueError) as exc:
                bad[f"bad row: {str(exc).splitlines()[0][:80]}"] += 1
                continue
            if split == "all" or split == split_of(str(record.repo)):
                out.append(record)
    return out


def load_records(
    folders: Iterable[str], kind: str, split: str = "test"
) -> tuple[list[Any], dict[str, Any]]:
    """Records of ``kind`` (``swt`` / ``swr``) in ``split`` of every folder (finalized, or
    record files), a record id seen twice kept once, and counts: per folder, duplicates,
    ``bad_rows`` (reason -> rows left out). :class:`DataError` for a folder that does not
    exist or is not a dataset."""
    from sweworld.data.store import load_split

    out: list[Any] = []
    seen: set[str] = set()
    bad: Counter[str] = Counter()
    counts: dict[str, Any] = {"per_folder": {}, "duplicates": 0}
    for name in folders:
        folder = Path(name)
        if not folder.is_dir():
            raise DataError(f"{folder}: no such dataset folder")
        finalized = (folder / kind / "dataset_dict.json").is_file() or (
            folder / "dataset_dict.json"
        ).is_file()
        if not finalized and (folder / "records").is_dir():
            records = _record_file_rows(folder, kind, split, bad)
        else:
            try:
                records = load_split(folder, kind, split)
            except FileNotFoundError as exc:
                raise DataError(str(exc)) from None
            except Exception as exc:  # a damaged dataset: said with its folder, not a bare
                # "_data_files" or "Expected to read 3000 metadata bytes"
                first = (str(exc).splitlines() or [""])[0][:200]
                raise DataError(
                    f"{folder}: cannot read its {kind} dataset ({type(exc).__name__}: {first})"
                ) from None
        counts["per_folder"][str(folder)] = len(records)
        for record in records:
            if record.id in seen:
                counts["duplicates"] += 1
                continue
            seen.add(record.id)
            out.append(record)
    counts["bad_rows"] = dict(bad)
    return out, counts
