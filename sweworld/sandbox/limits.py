"""Resource limits of a sandbox: per-command limits and the per-session process limit.

The process limit has two mechanisms. Every sandbox sets ``RLIMIT_NPROC`` inside its own
user namespace (the kernel counts processes per user *per user namespace*, so the limit is
the session's own and does not count the host user's other processes); this binds any
sandbox whose user is not the host's root. Root is exempt from ``RLIMIT_NPROC``, so a
session of a root process also gets a pids cgroup (v1 ``pids`` hierarchy, or v2 with
``pids`` in ``subtree_control``). When a cgroup hierarchy exists but the session's cgroup
cannot be made (out of file descriptors, permissions), the session is refused rather than
opened without a limit.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from sweworld.sandbox.launch import SandboxUnavailable
from sweworld.sandbox.quota import default_disk_mb, default_max_snapshots, default_scratch_mb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one command.

    Attributes:
        timeout: wall-clock seconds for the command, not counting time spent in the executor.
        cpu_seconds: CPU time per process (``ulimit -t``).
        memory_mb: address space per process (``ulimit -v``).
        file_mb: largest file a command may write (``ulimit -f``).
        max_output_bytes: stdout and stderr are each cut here and the command is stopped.
        max_processes: processes at once per session (``RLIMIT_NPROC`` in the sandbox's user
            namespace, and a pids cgroup where the host offers one).
        max_command_bytes: longest command (UTF-8 bytes) a step may run; a longer one is
            refused before anything runs. Linux caps one argument at 128 KiB, and the
            sandbox's shell receives the command as one.
        max_execution_calls: execution calls (``python``, ``pytest``, ...) one command may
            hand to the executor; later ones are refused (exit 126) without reaching it.
        max_executor_seconds: executor time one command may use; once spent, its later
            execution calls are refused. Executor time does not count against ``timeout``,
            so without these two a loop of calls (``for i in $(seq 10000); do python ...``)
            held a step for calls x executor latency (hours with a simulated executor).
        disk_mb: the session's disk quota: everything it writes (``/testbed``'s changes,
            ``/tmp``, ``/root``, its snapshots' saved layers) in MiB; default
            ``$SWEWORLD_DISK_MB`` or 1024. Kernel-enforced on the overlay backend (a tmpfs:
            memory, see :mod:`sweworld.sandbox.overlay`); checked after each step on copy.
        scratch_mb: size of each ephemeral tmpfs a sandbox has of its own (``/root`` and
            ``/dev/shm``; the rest of ``/dev`` is read-only), in MiB (64, or
            ``$SWEWORLD_SCRATCH_MB``): with ``disk_mb``, what
            a session can write is bounded.
        max_snapshots: snapshots one session may take (``$SWEWORLD_MAX_SNAPSHOTS`` or 64);
            one more raises :class:`~sweworld.sandbox.quota.SnapshotLimitReached`.
    """

    timeout: float = 90.0
    cpu_seconds: int = 300
    memory_mb: int = 8192
    file_mb: int = 1024
    max_output_bytes: int = 2_000_000
    max_processes: int = 512
    max_command_bytes: int = 100_000
    max_execution_calls: int = 64
    max_executor_seconds: float = 900.0
    disk_mb: int = field(default_factory=default_disk_mb)
    scratch_mb: int = field(default_factory=default_scratch_mb)
    max_snapshots: int = field(default_factory=default_max_snapshots)


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` is the process (EMFILE) or the system (ENFILE) running out of files."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def descriptor_message(what: str, exc: OSError) -> str:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"{what}: out of file descriptors ({exc.strerror}; this process may open {soft}, "
        f"hard limit {hard}). Each live session holds about ten; destroy sessions you no "
        "longer need or raise the limit (`ulimit -n`)."
    )


class PidsCgroup:
    """A pids cgroup (v2, or v1's pids hierarchy) for one session, where the host allows it."""

    def __init__(self, path: Path):
        self.path = path

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def parent() -> Path | None:
        """The folder sweworld's session cgroups go in, or None without a usable hierarchy."""
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return None
        for line in mounts:
            parts = line.split()
            if len(parts) < 4:
                continue
            mnt, fstype, opts = parts[1], parts[2], parts[3].split(",")
            if fstype == "cgroup" and "pids" in opts:
                candidate = Path(mnt) / "sweworld"
            elif fstype == "cgroup2":
                controllers = Path(mnt, "cgroup.subtree_control")
                try:
                    if "pids" not in controllers.read_text().split():
                        continue
                except OSError:
                    continue
                candidate = Path(mnt) / "sweworld"
            else:
                continue
            try:
                candidate.mkdir(exist_ok=True)
                if fstype == "cgroup2":
                    (candidate / "cgroup.subtree_control").write_text("+pids")
                return candidate
            except OSError:
                continue
        if os.geteuid() == 0:
            log.warning(
                "no pids cgroup can be created here; root's sessions have no process limit "
                "(RLIMIT_NPROC does not bind root), only the wall-clock limit"
            )
        return None

    @classmethod
    def create(cls, name: str, max_processes: int) -> PidsCgroup | None:
        """The session's cgroup; None where the host has no usable hierarchy. Raises
        :class:`SandboxUnavailable` (and leaves nothing behind) when a hierarchy exists but
        this cgroup cannot be made: a session is never opened without its process limit."""
        parent = cls.parent()
        if parent is None:
            return None
        path = parent / name
        try:
            path.mkdir(exist_ok=True)
            (path / "pids.max").write_text(str(max_processes))
        except OSError as exc:
            cls(path).remove(wait=False)
            if out_of_descriptors(exc):
                raise SandboxUnavailable(
                    descriptor_message("could not open a session", exc)
                ) from exc
            raise SandboxUnavailable(
                f"could not create the session's pids cgroup {path}: {exc}"
            ) from exc
        return cls(path)

    @classmethod
    def remove_named(cls, name: str) -> bool:
        """Remove a session's cgroup if it exists (cleanup after a crash); True if removed."""
        parent = cls.parent()
        if parent is not None and (parent / name).is_dir():
            return cls(parent / name).remove(wait=False)
        return False

    @classmethod
    def stale(cls) -> list[str]:
        """Names of session cgroups with no process left in them."""
        parent = cls.parent()
        if parent is None:
            return []
        names = []
        try:
            entries = list(os.scandir(parent))
        except OSError:
            return []
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                procs = Path(entry.path, "cgroup.procs").read_text().split()
            except OSError:
                continue
            if not procs:
                names.append(entry.name)
        return names

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def remove(self, *, wait: bool = True) -> bool:
        """Remove the (emptied) cgroup; waits up to 0.5 s for dying processes to leave."""
        for _ in range(50 if wait else 1):
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return False
            except OSError:
                if wait:
                    time.sleep(0.01)
        return False


__all__ = ["PidsCgroup", "SandboxLimits", "descriptor_message", "out_of_descriptors"]
