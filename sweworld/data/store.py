"""Writing records as they come, resuming, and turning them into split ``datasets``.

A long import or collection writes each record to ``<out>/records/<kind>.jsonl`` the moment
it exists (one JSON object per line, flushed), and each finished unit of work (a trajectory,
a task) to ``<out>/records/done.jsonl`` with its counts, so that a run killed at any point
loses at most the unit in progress; run again with the same ``--out``, it skips the done
units and the records already written. :func:`finalize` then builds, for each kind, a
``datasets.DatasetDict`` with a ``train`` and a ``test`` split **by repository**
(:func:`~sweworld.data.schema.split_of`) saved with ``save_to_disk`` at ``<out>/<kind>``
(``datasets.load_from_disk`` reads it; ``push_to_hub`` publishes it), and ``summary.json``:
counts per repository and split, and every skipped unit with its reason.

Layout of ``<out>``::

    records/swt.jsonl  records/swr.jsonl  records/done.jsonl  records/skipped.jsonl
    swt/  swr/          (DatasetDict folders, after finalize)
    summary.json
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sweworld.data.schema import (
    DEFAULT_HELDOUT_REPOS,
    SCHEMA_VERSION,
    SWRRecord,
    SWTRecord,
    features,
    record_from_dict,
    split_of,
)

__all__ = ["RecordStore", "finalize", "iter_records", "load_split"]

KINDS = ("swt", "swr")


class RecordStore:
    """Append-only record files under ``<out>/records`` with resume.

    Thread-safe: several workers may add records at once. ``is_done(unit)`` tells whether a
    unit of work finished in an earlier run; ``seen(id)`` whether a record id was written.
    """

    def __init__(self, out: str | os.PathLike[str]):
        self.out = Path(out)
        self.dir = self.out / "records"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._ids: dict[str, set[str]] = {k: set() for k in KINDS}
        self._done: dict[str, dict[str, Any]] = {}
        for kind in KINDS:
            for row in _read_jsonl(self.dir / f"{kind}.jsonl"):
                self._ids[kind].add(str(row.get("id")))
        for row in _read_jsonl(self.dir / "done.jsonl"):
            self._done[str(row.get("unit"))] = row
        for name in (*KINDS, "done", "skipped"):
            cut_torn_tail(self.dir / f"{name}.jsonl")
        self._files = {
            name: open(self.dir / f"{name}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            for name in (*KINDS, "done", "skipped")
        }

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, name: str, row: dict[str, Any]) -> None:
        f = self._files[name]
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()

    def seen(self, kind: str, record_id: str) -> bool:
        with self._lock:
            return record_id in self._ids[kind]

    def add(self, record: SWTRecord | SWRRecord) -> bool:
        """Write ``record`` unless its id was written before; True when written."""
        kind = record.kind
        with self._lock:
            if record.id in self._ids[kind]:
                return False
            self._ids[kind].add(record.id)
            self._write(kind, record.to_dict())
            return True

    def is_done(self, unit: str) -> bool:
        with self._lock:
            return unit in self._done

    def done(self, unit: str, **counts: Any) -> None:
        """Mark a unit of work finished (its records are all written)."""
        row = {"unit": unit, **counts}
        with self._lock:
            self._done[unit] = row
            self._write("done", row)

    def skip(self, unit: str, reason: str, **extra: Any) -> None:
        """Record a unit (or a part of one) left out, with why: counted in the summary."""
        row = {"unit": unit, "reason": reason, **extra}
        with self._lock:
            self._write("skipped", row)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {k: len(v) for k, v in self._ids.items()}


def cut_torn_tail(path: Path) -> None:
    """Drop a torn last line (a run killed mid-write) so that the next row appended starts a
    line of its own instead of being glued to the torn text and lost. Reads only the tail."""
    if not path.is_file():
        return
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            start = max(0, pos - 65536)
            f.seek(start)
            chunk = f.read(pos - start)
            if pos == end and chunk.endswith(b"\n"):
                return  # the last line is whole
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                f.truncate(start + newline + 1)
                return
            pos = start
        f.truncate(0)


def _read_jsonl(path: Path, unreadable: Counter[str] | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a run killed mid-write) is ignored, and
    counted in ``unreadable`` (by file name) when given, as is any line not a JSON object."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                row = None
            if isinstance(row, dict):
                yield row
            elif unreadable is not None:
                unreadable[path.name] += 1


def iter_records(out: str | os.PathLike[str], kind: str) -> Iterator[SWTRecord | SWRRecord]:
    """The records written so far under ``<out>/records`` (before or without finalize)."""
    for row in _read_jsonl(Path(out) / "records" / f"{kind}.jsonl"):
        yield record_from_dict(kind, row)


def _summary_counts(rows: Iterable[dict[str, Any]], heldout: Iterable[str]) -> dict[str, Any]:
    held = set(heldout)
    per_repo: dict[str, int] = Counter()
    for row in rows:
        per_repo[row["repo"]] += 1
    return {
        "total": sum(per_repo.values()),
        "per_repo": {
            repo: {"n": n, "split": split_of(repo, held)} for repo, n in sorted(per_repo.items())
        },
    }


def finalize(
    out: str | os.PathLike[str],
    *,
    heldout: Iterable[str] = DEFAULT_HELDOUT_REPOS,
    extra_summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build ``<out>/swt`` and ``<out>/swr`` (DatasetDicts split by repository) from the
    record files, write ``<out>/summary.json`` and return it."""
    import datasets

    out = Path(out)
    heldout = tuple(heldout)
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "heldout_repos": list(heldout),
    }
    unreadable: Counter[str] = Counter()
    for kind in KINDS:
        rows = []
        by_split: dict[str, list[dict[str, Any]]] = defaultdict(list)
        feats = features(kind)
        for row in _read_jsonl(out / "records" / f"{kind}.jsonl", unreadable):
            try:
                clean = record_from_dict(kind, row).to_dict()
            except TypeError:  # a row missing a column: counted, never the end of the run
                unreadable[f"{kind}.jsonl"] += 1
                continue
            rows.append(clean)
            by_split[split_of(clean["repo"], heldout)].append(clean)
        dd = datasets.DatasetDict(
            {
                split: datasets.Dataset.from_dict(
                    {name: [r[name] for r in by_split.get(split, [])] for name in feats},
                    features=feats,
                )
                for split in ("train", "test")
                if by_split.get(split)  # datasets cannot reload an empty split
            }
        )
        target = out / kind
        if target.exists():
            shutil.rmtree(target)
        if dd:
            dd.save_to_disk(str(target))
        summary[kind] = _summary_counts(rows, heldout)
        summary[kind]["splits"] = {s: len(dd[s]) if s in dd else 0 for s in ("train", "test")}
        if kind == "swt":
            summary[kind]["state_source"] = dict(Counter(r.get("state_source") for r in rows))
            summary[kind]["command_kind"] = dict(Counter(r.get("command_kind") for r in rows))
        else:
            summary[kind]["resolved"] = dict(Counter(str(r.get("resolved")) for r in rows))
    skipped = list(_read_jsonl(out / "records" / "skipped.jsonl", unreadable))
    summary["skipped"] = {
        "total": len(skipped),
        "by_reason": dict(Counter(str(r.get("reason")) for r in skipped)),
    }
    summary["done_units"] = sum(1 for _ in _read_jsonl(out / "records" / "done.jsonl", unreadable))
    summary["unreadable_lines"] = dict(unreadable)
    if extra_summary:
        summary.update(extra_summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def load_split(path: str | os.PathLike[str], kind: str, split: str = "test") -> list[Any]:
    """Records of one split (``train``, ``test`` or ``all``) of a finalized dataset folder
    (``<out>`` or ``<out>/<kind>``), or of the record files when it was not finalized (then
    split by :data:`DEFAULT_HELDOUT_REPOS`). A split with no record is not stored: ``[]``."""
    import datasets

    path = Path(path)
    folder = path / kind if (path / kind).is_dir() else path
    if (folder / "dataset_dict.json").is_file():
        dd = datasets.load_from_disk(str(folder))
        names = list(dd) if split == "all" else [split]
        return [record_from_dict(kind, row) for name in names if name in dd for row in dd[name]]
    if (path / "records").is_dir():
        if (path / "summary.json").is_file():  # finalized, but no record of this kind
            return []
        return [r for r in iter_records(path, kind) if split in ("all", split_of(r.repo))]
    raise FileNotFoundError(f"{path}: neither a finalized {kind} dataset nor a records folder")
