"""Where sweworld keeps its caches and its live sessions."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """Persistent cache (base checkouts, mirrors, models): ``$SWEWORLD_CACHE`` or
    ``$XDG_CACHE_HOME/sweworld`` (``~/.cache/sweworld``)."""
    env = os.environ.get("SWEWORLD_CACHE")
    if env:
        path = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(xdg) / "sweworld"
    path.mkdir(parents=True, exist_ok=True)
    return path


def runtime_dir() -> Path:
    """Live session state (overlay layers, private /tmp dirs): ``$SWEWORLD_RUNTIME_DIR`` or
    ``<tmp>/sweworld-<uid>``. Nothing here outlives the sessions that made it."""
    env = os.environ.get("SWEWORLD_RUNTIME_DIR")
    path = Path(env) if env else Path(tempfile.gettempdir()) / f"sweworld-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def control_dir() -> Path:
    """Per-step control files of the sandboxes (FIFOs, the command, its cwd): small and hot,
    so on a tmpfs when there is one: ``$SWEWORLD_CONTROL_DIR``, else ``/dev/shm/sweworld-<uid>``,
    else ``<runtime dir>/ctl``. Keeping them off the disk keeps a step's latency independent
    of disk load."""
    env = os.environ.get("SWEWORLD_CONTROL_DIR")
    if env:
        path = Path(env)
    elif os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        path = Path("/dev/shm") / f"sweworld-{os.getuid()}"
    else:
        path = runtime_dir() / "ctl"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
