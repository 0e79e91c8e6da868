"""What a benchmark run writes beside its figures, and writing them as they come.

:func:`provenance`: the machine (host, CPU count, memory, Python, torch, the sweworld
commit), the data folders (their ``summary.json`` when present) and the command line.
:class:`JsonReport`: a dict rewritten to its file (atomically: a temporary file renamed)
each time a part is added, so that a long run killed at any point keeps its finished parts.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["JsonReport", "provenance"]


def _memory_gib() -> float | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages / 2**30, 1)


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _data_summary(path: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": str(Path(path).resolve())}
    summary = Path(path) / "summary.json"
    if summary.is_file():
        try:
            data = json.loads(summary.read_text(encoding="utf-8"))
        except ValueError as exc:
            entry["summary_error"] = str(exc)
        else:
            entry["schema_version"] = data.get("schema_version")
            entry["heldout_repos"] = data.get("heldout_repos")
            for kind in ("swt", "swr"):
                if isinstance(data.get(kind), dict):
                    entry[f"{kind}_splits"] = data[kind].get("splits")
    return entry


def provenance(data: Sequence[str], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Machine, data and command line of a run (see the module docstring)."""
    try:
        import torch

        torch_version: str | None = torch.__version__
        threads: int | None = torch.get_num_threads()
    except ImportError:
        torch_version, threads = None, None
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "machine": {
            "host": platform.node(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "python": platform.python_version(),
            "torch": torch_version,
            "torch_threads": threads,
        },
        "sweworld_commit": _commit(),
        "data": [_data_summary(d) for d in data],
    }


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None, tuples lists, unknown objects strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


class JsonReport:
    """A report dict saved to ``path`` (None: kept in memory only) after every change."""

    def __init__(self, path: str | os.PathLike[str] | None, **initial: Any):
        self.path = Path(path) if path else None
        self.data: dict[str, Any] = dict(initial)
        self.save()

    def set(self, key: str, value: Any) -> None:
        """Set a top-level key and save."""
        self.data[key] = value
        self.save()

    def put(self, keys: Sequence[str], value: Any) -> None:
        """Set a nested key (``["swt", "embedded", "oracle"]``) and save."""
        node = self.data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(_clean(self.data), indent=2, sort_keys=False) + "\n")
        os.replace(tmp, self.path)
