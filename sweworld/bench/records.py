"""Reading the records a benchmark evaluates, from one or several dataset folders."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["load_records"]


def load_records(
    folders: Iterable[str], kind: str, split: str = "test"
) -> tuple[list[Any], dict[str, Any]]:
    """Records of ``kind`` (``swt`` / ``swr``) in ``split`` of every folder (finalized, or
    record files), a record id seen twice kept once, and counts: per folder, duplicates."""
    from sweworld.data.store import load_split

    out: list[Any] = []
    seen: set[str] = set()
    counts: dict[str, Any] = {"per_folder": {}, "duplicates": 0}
    for folder in folders:
        records = load_split(folder, kind, split)
        counts["per_folder"][str(folder)] = len(records)
        for record in records:
            if record.id in seen:
                counts["duplicates"] += 1
                continue
            seen.add(record.id)
            out.append(record)
    return out, counts
