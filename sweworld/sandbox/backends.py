"""Workspace backends: which one this process can use, and the factory that makes one.

The two backends live beside each other: :class:`~sweworld.sandbox.workspace.CopyWorkspace`
(a full copy, works anywhere) in :mod:`sweworld.sandbox.workspace` and
:class:`~sweworld.sandbox.overlay.OverlayWorkspace` (a kernel overlay mount, root or
``CAP_SYS_ADMIN``) in :mod:`sweworld.sandbox.overlay`, which builds on the first. This module
imports both, so neither imports the other back.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from sweworld.sandbox.overlay import OverlayWorkspace
from sweworld.sandbox.workspace import CopyWorkspace, Workspace, WorkspaceError, remove_tree

__all__ = ["BACKENDS", "make_workspace", "overlay_available", "resolve_backend"]

BACKENDS = ("overlay", "copy")


@functools.lru_cache(maxsize=8)
def overlay_available(scratch: str) -> bool:
    """Probe once (per scratch folder) whether this process may mount overlays there."""
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=scratch))
    try:
        (probe / "lower").mkdir()
        ws = OverlayWorkspace(probe / "lower", probe / "state", quota_bytes=1 << 20)
        ws.destroy()
        return True
    except (WorkspaceError, OSError):
        return False
    finally:
        remove_tree(probe)


def resolve_backend(name: str, scratch: Path) -> str:
    """``auto`` -> ``overlay`` where it can be mounted, else ``copy``."""
    if name == "auto":
        return "overlay" if overlay_available(str(scratch)) else "copy"
    if name not in BACKENDS:
        raise WorkspaceError(f"unknown workspace backend {name!r}; use auto, overlay or copy")
    if name == "overlay" and not overlay_available(str(scratch)):
        raise WorkspaceError(
            "the overlay backend needs permission to mount (root or CAP_SYS_ADMIN) and an "
            "upper directory on a filesystem overlayfs supports; use backend='copy'"
        )
    return name


def make_workspace(
    backend: str, lower: Path, state_dir: Path, *, quota_bytes: int | None = None
) -> Workspace:
    """Create a workspace of the given (resolved) backend with a disk quota (default
    ``$SWEWORLD_DISK_MB`` or 1 GiB)."""
    if quota_bytes is None:
        from sweworld.sandbox.quota import default_disk_mb

        quota_bytes = default_disk_mb() << 20
    if backend == "overlay":
        return OverlayWorkspace(lower, state_dir, quota_bytes=quota_bytes)
    return CopyWorkspace(lower, state_dir, quota_bytes=quota_bytes)
