"""The factory's ``tasks.jsonl``: the verified task rows, appended one at a time under a
lock, each instance once, and read back on resume with a torn last line cut first (a run
killed mid-write; :func:`cut_torn_tail` serves the mutant log too). Used by
:mod:`sweworld.data.factory.pipeline`, which re-exports it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sweworld.data.store import cut_torn_tail

__all__ = ["append_task_row", "cut_torn_tail", "written_task_ids"]


_lock = threading.Lock()


def written_task_ids(path: Path) -> set[str]:
    """The instance ids of the rows already in ``tasks.jsonl`` (created when missing). A torn
    last line (a run killed mid-write) is cut first, so that the next row starts a line of
    its own instead of being glued to it and lost."""
    path.touch()
    cut_torn_tail(path)
    ids = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                ids.add(str(json.loads(line)["instance_id"]))
            except (ValueError, KeyError, TypeError):
                continue
    return ids


def append_task_row(path: Path, row: dict[str, Any], made: set[str]) -> bool:
    """Append a verified task row to ``tasks.jsonl`` unless its instance is already there (a
    run killed between the row and its unit's ``done`` rebuilds the task on resume)."""
    with _lock:
        if row["instance_id"] in made:
            return False
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        made.add(row["instance_id"])
        return True
