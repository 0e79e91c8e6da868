"""Importers: each reads one format of agent runs or predictions into
:class:`~sweworld.data.schema.Trajectory` objects (replayed into SWT examples by
:mod:`sweworld.data.importing`) and :class:`~sweworld.data.schema.SWRRecord` labels.

Each importer module defines ``NAME``, ``detect(path) -> bool`` (whether a file or folder is
in its format) and ``read(path, **options) -> Iterator[Trajectory | SWRRecord | Skip]``.
:data:`IMPORTERS` maps a format name to its module; :func:`detect_format` picks one.

Imports: what :mod:`sweworld.data` may import, and data's own modules.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from sweworld.data.importers.skip import Skip

__all__ = ["IMPORTERS", "Skip", "detect_format", "get_importer"]

IMPORTERS: dict[str, str] = {
    "mini-swe-agent": "sweworld.data.importers.mini_swe_agent",
    "swe-agent": "sweworld.data.importers.swe_agent",
    "r2e-gym": "sweworld.data.importers.r2e",
    "swebench": "sweworld.data.importers.swebench_preds",
    "sweworld": "sweworld.data.importers.sweworld_sessions",
}


def get_importer(name: str) -> ModuleType:
    try:
        return importlib.import_module(IMPORTERS[name])
    except KeyError:
        known = ", ".join(sorted(IMPORTERS))
        raise ValueError(f"unknown import format {name!r} (known: {known})") from None


def detect_format(path: str | Path) -> str:
    """The name of the first importer that recognises ``path``; ValueError if none does."""
    path = Path(path)
    for name in IMPORTERS:
        try:
            module = get_importer(name)
        except ImportError:
            continue
        if module.detect(path):
            return name
    raise ValueError(
        f"{path}: unknown format (known: {', '.join(IMPORTERS)}); pass --format to choose one"
    )
