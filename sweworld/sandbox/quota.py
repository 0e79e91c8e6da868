"""The session's disk quota and snapshot limit, as the agent and the caller see them.

The overlay backend's quota is enforced by the kernel (a ``size=`` tmpfs holds everything a
session writes, see :mod:`sweworld.sandbox.overlay`): a write past it fails with ``ENOSPC``
and the command's own error says "No space left on device". These helpers add sweworld's
plain-words note to the step's output while the disk is full, and, on the ``copy`` backend
(no mounts without root, so no kernel quota), are the only enforcement there is: usage is
measured after each step, the step's output says the quota is exceeded, and file-editor
writes are refused until files are removed. That check is after the fact (one command can
write past the quota before it is seen) and walks the whole copy after every step.
"""

from __future__ import annotations

import os
from typing import Any

MIB = 1 << 20
# file_editor commands that write; refused on the copy backend while over the quota
WRITING_COMMANDS = frozenset({"create", "str_replace", "insert", "undo_edit"})


class SnapshotLimitReached(ValueError):
    """A session has taken as many snapshots as its limit allows."""


class PatchTooLarge(ValueError):
    """A session's patch is longer than its commands' output limit (``max_output_bytes``):
    the agent wrote more changed text than a patch may carry."""


def memory_available_bytes() -> int | None:
    """The kernel's ``MemAvailable`` (what can still be allocated without swapping), or
    None where ``/proc/meminfo`` cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_disk_budget_mb() -> int | None:
    """The default total of all sessions' disks (:class:`SessionManager`'s
    ``disk_budget_bytes``, the world service's ``--disk-budget-mb``): half of the memory
    available now (a session's disk is a tmpfs: RAM), or None where that is unknown."""
    available = memory_available_bytes()
    return None if available is None else max(1, available // 2 // MIB)


def default_disk_mb() -> int:
    """The default quota: ``$SWEWORLD_DISK_MB`` or 1024 (1 GiB)."""
    return _env_int("SWEWORLD_DISK_MB", 1024)


def default_scratch_mb() -> int:
    """The size of each scratch tmpfs of a sandbox (``/root``, ``/dev/shm``):
    ``$SWEWORLD_SCRATCH_MB`` or 64."""
    return _env_int("SWEWORLD_SCRATCH_MB", 64)


def session_memory_mb(disk_mb: int | None = None, scratch_mb: int | None = None) -> int:
    """The most RAM one overlay session's agent can fill, in MiB: its disk quota, its
    64 MiB control tmpfs and its sandbox's two scratch tmpfs mounts (the defaults:
    ``$SWEWORLD_DISK_MB`` and ``$SWEWORLD_SCRATCH_MB``)."""
    disk = default_disk_mb() if disk_mb is None else disk_mb
    scratch = default_scratch_mb() if scratch_mb is None else scratch_mb
    return disk + 64 + 2 * scratch


def default_max_snapshots() -> int:
    """The default snapshot limit per session: ``$SWEWORLD_MAX_SNAPSHOTS`` or 64."""
    return _env_int("SWEWORLD_MAX_SNAPSHOTS", 64)


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"${name} must be a whole number, not {text!r}") from None
    if value < 1:
        raise ValueError(f"${name} must be at least 1, not {value}")
    return value


def over_quota(workspace: Any) -> bool:
    """Whether the session's disk is full (overlay: under 64 KiB left) or, on the copy
    backend, past its quota."""
    try:
        if workspace.kernel_quota:
            return workspace.free_bytes() < 64 * 1024
        return workspace.quota_used() > workspace.quota_bytes
    except OSError:
        return False


def refused_edit(workspace: Any, tool: str, params: Any) -> str | None:
    """The error a file-editor write gets on the copy backend while the session is over its
    quota (None: go ahead). The overlay backend needs none: the kernel refuses the write and
    the tool reports it in plain words."""
    if tool != "file_editor" or workspace.kernel_quota:
        return None
    if str(params.get("command", "")) not in WRITING_COMMANDS or not over_quota(workspace):
        return None
    return "ERROR: " + quota_message(workspace).strip()


def control_full(workspace: Any) -> bool:
    """Whether the workspace's control tmpfs (writable from inside the sandbox) is nearly
    full: then the session restarts its sandboxes, which empties it."""
    ctl_fs = getattr(workspace, "ctl_root", None)
    if ctl_fs is None:
        return False
    try:
        st = os.statvfs(ctl_fs)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 16 << 20 or st.f_favail < 1024


def quota_message(workspace: Any) -> str:
    """What the agent reads when the session's disk quota is exceeded."""
    quota = workspace.quota_bytes / MIB
    if workspace.kernel_quota:
        return (
            f"\nsweworld: disk quota exceeded: this session's disk ({quota:g} MiB for /testbed "
            "and /tmp together) is full, so writes fail with 'No space left on device'. "
            "Remove files you do not need (`rm`) to free space; what a snapshot saved "
            "stays counted.\n"
        )
    used = workspace.quota_used() / MIB
    return (
        f"\nsweworld: disk quota exceeded: this session has written {used:.0f} MiB, more "
        f"than its {quota:g} MiB quota. File edits are refused until you remove files "
        "(`rm`) to get back under it.\n"
    )


__all__ = [
    "WRITING_COMMANDS",
    "PatchTooLarge",
    "SnapshotLimitReached",
    "control_full",
    "default_disk_budget_mb",
    "default_disk_mb",
    "default_max_snapshots",
    "default_scratch_mb",
    "memory_available_bytes",
    "over_quota",
    "quota_message",
    "refused_edit",
    "session_memory_mb",
]
