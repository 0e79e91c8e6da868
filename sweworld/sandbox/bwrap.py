"""Running one shell command in a bubblewrap sandbox, with limits and executor interception.

The sandbox sees a minimal root: the host's ``/usr`` (and ``/bin``, ``/lib*``) read-only, a
synthetic ``/etc`` (``passwd``, ``hosts``, the dynamic-linker cache), ``/testbed`` (the
session's workspace, writable), ``/tmp`` (the session's private tmp, writable), an ephemeral
``/root`` and ``/dev/shm`` (small tmpfs mounts), and the shim folder ``/.sweworld``. There is no
network, no view of host processes (pid namespace), and everything else is read-only. Limits:
wall time (executor time is not counted), CPU seconds, address space, file size, output bytes
per stream, processes, and disk (the workspace's quota; see :mod:`sweworld.sandbox.limits`).
The launch chain gets no host environment (see :mod:`sweworld.sandbox.launch`). ``launch``
and ``limits`` were split out of this module; their names are re-exported here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.sandbox.bwrap_pump import OutputPump, RawRun
from sweworld.sandbox.launch import (
    BASE_ENV,
    SANDBOX_PATH,
    SandboxUnavailable,
    bwrap_path,
    launcher_env,
    nsenter_path,
    root_args,
)
from sweworld.sandbox.limits import (
    PidsCgroup,
    SandboxLimits,
    descriptor_message,
    out_of_descriptors,
)
from sweworld.sandbox.shims import CTL, SERVER_SCRIPT
from sweworld.sandbox.workspace import remove_tree

log = logging.getLogger(__name__)

_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()
_spawned: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()


def spawn(argv: Sequence[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **options)`` started from one of sweworld's long-lived
    spawner threads.

    ``bwrap --die-with-parent`` (``PR_SET_PDEATHSIG``) fires when the *thread* that forked
    it exits, not the process: a sandbox started from a short-lived thread (a trainer's
    worker, an asyncio executor thread) was killed when that thread ended, and the command
    then in flight ended with exit 137. The spawner threads live as long as the process.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="sweworld-spawn"
            )
    proc = _spawner.submit(subprocess.Popen, list(argv), **options).result()
    with _spawner_lock:
        _spawned.add(proc)
    return proc


def kill_spawned() -> int:
    """SIGKILL every process :func:`spawn` started that is still running (the sandboxes;
    a sandbox's commands die with it); the number signalled. Other child processes of this
    one (a closing session's ``rm``) are left alone."""
    with _spawner_lock:
        live = [p for p in _spawned if p.returncode is None]
    killed = 0
    for proc in live:
        # no poll(): reaping here would free the pid while its owner may still signal it
        # (a killed sandbox stays a zombie, its pid reserved, until the owner waits)
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)
                killed += 1
    return killed


class SandboxRunner(OutputPump):
    """Runs the commands of one session in a warm sandbox.

    The sandbox (bubblewrap + a small bash server, see ``shims._SERVER``) starts on the first
    command and then serves one command per request, so a step costs a ``bash -c`` rather
    than a whole namespace setup. Each command still starts from a clean shell (fresh
    environment, its own process group killed when it ends); only the working directory is
    carried between steps, by the session. A timeout, an output flood or a dead server stops
    the sandbox; the next command starts a new one. Not thread-safe: the session serialises
    its steps.
    """

    def __init__(
        self,
        *,
        mounts: Mapping[str, Path],
        ctl_dir: Path,
        ctl_bind: Path | None = None,
        limits: SandboxLimits,
        cgroup: PidsCgroup | None = None,
        mount_ns_fd: int | None = None,
        read_only: Sequence[Path | tuple[Path, str]] = (),
        env: Mapping[str, str] | None = None,
        intercept: bool = True,
    ):
        """``mounts`` maps sandbox paths (``/testbed``, ``/tmp``) to host folders as seen from
        the mount namespace ``mount_ns_fd`` (the workspace's), or from this process's own.

        ``read_only`` host folders appear read-only at the same path, or at the sandbox path
        of a ``(host, inside)`` pair (a Python environment and its base interpreter); ``env``
        adds or replaces variables; ``intercept=False`` leaves out the execution shims, for
        a sandbox that runs commands for real. ``ctl_dir`` is the control folder from this
        process, ``ctl_bind`` the same folder in ``mount_ns_fd``'s namespace (default:
        ``ctl_dir``). Nothing of this process's own environment
        reaches the sandbox: the launch chain runs with :func:`launcher_env`.
        """
        self.mounts = dict(mounts)
        self.read_only = tuple(read_only)
        self.env = dict(env or {})
        self.intercept = intercept
        self.mount_ns_fd = mount_ns_fd
        self.ctl_dir = ctl_dir
        self.ctl_bind = ctl_bind or ctl_dir
        self.limits = limits
        self.cgroup = cgroup
        self.log_path = ctl_dir.parent / f"{ctl_dir.name}.log"  # host-only, not in the bind
        self._proc: subprocess.Popen | None = None
        self._fds: dict[str, int] = {}
        self._status = b""
        self._seq = 0
        self.starts = 0
        bwrap_path()

    # -------------------------------------------------------------- server lifecycle

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _bwrap_args(self) -> list[str]:
        lim = self.limits
        args = [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sweworld",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # /dev and /root are tmpfs mounts of bubblewrap's own (memory, half the RAM by
            # default): bounded, and /dev read-only but for /dev/shm
            "--size",
            str(lim.scratch_mb << 20),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(lim.scratch_mb << 20),
            "--tmpfs",
            "/root",
            *root_args(self.intercept),
        ]
        for item in self.read_only:
            host, inside = item if isinstance(item, tuple) else (item, str(item))
            args += ["--ro-bind", str(host), inside]
        for inside, host in self.mounts.items():
            args += ["--bind", str(host), inside]
        args += ["--bind", str(self.ctl_bind), CTL, "--remount-ro", "/", "--clearenv"]
        env = {
            **BASE_ENV,
            "SWEWORLD_CPU": str(lim.cpu_seconds),
            "SWEWORLD_MEM": str(lim.memory_mb * 1024),
            "SWEWORLD_FSIZE": str(lim.file_mb * 1024),
            **self.env,
        }
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += ["--chdir", "/"]
        return args

    def _start(self) -> None:
        """Start the warm sandbox; on any failure nothing is left open (descriptors, a
        half-started process) and :class:`SandboxUnavailable` says what ran out."""
        try:
            self._launch()
        except SandboxUnavailable:
            self.stop()
            raise
        except OSError as exc:
            self.stop()
            if out_of_descriptors(exc):
                raise SandboxUnavailable(
                    descriptor_message("could not start the session's sandbox", exc)
                ) from exc
            raise SandboxUnavailable(f"could not start the sandbox: {exc}") from exc

    def _launch(self) -> None:
        if self.ctl_dir.exists():
            remove_tree(self.ctl_dir)
        for sub in ("req", "steps"):
            (self.ctl_dir / sub).mkdir(parents=True, exist_ok=True)
        for fifo in ("requests", "exec"):
            os.mkfifo(self.ctl_dir / fifo, 0o600)
        # The sandbox can write in the control folder (rename `req`, put a symlink to a host
        # folder in its place): the host reaches its subfolders only through descriptors
        # opened here, before anything runs in the sandbox, never by path again.
        for sub in ("req", "steps"):
            self._fds[sub] = os.open(
                self.ctl_dir / sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            )
        args_fd = os.memfd_create("sweworld-bwrap-args", 0)
        try:
            os.write(args_fd, b"".join(a.encode() + b"\0" for a in self._bwrap_args()))
            os.lseek(args_fd, 0, os.SEEK_SET)
            # Options travel through a memfd so the sandbox's /proc/1/cmdline shows no host
            # paths.
            inner = limited_command(self.limits.max_processes, f"exec bash {SERVER_SCRIPT}")
            argv = [bwrap_path(), "--args", str(args_fd), *inner]
            pass_fds = [args_fd]
            if self.mount_ns_fd is not None:
                argv = [nsenter_path(), f"--mount=/proc/self/fd/{self.mount_ns_fd}", *argv]
                pass_fds.append(self.mount_ns_fd)
            if self.cgroup is not None:
                argv = [
                    "/bin/sh",
                    "-c",
                    'echo $$ > "$0" && exec "$@"',
                    str(self.cgroup.procs_file),
                    *argv,
                ]
            with open(self.log_path, "wb") as log_file:
                # env: bwrap's own pid-1 reaper keeps the environment it is started with,
                # and the sandbox can read it at /proc/1/environ.
                self._proc = spawn(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log_file,
                    pass_fds=pass_fds,
                    start_new_session=True,
                    env=launcher_env(),
                    cwd="/",  # the cgroup wrapper's shell exports PWD: no host path in it
                )
        finally:
            os.close(args_fd)
        self._status = b""
        fd = self._proc.stdout.fileno()
        os.set_blocking(fd, False)
        if self._read_status(deadline=time.monotonic() + 30, want=b"ready") is None:
            text = self.log_path.read_bytes().decode(errors="replace").strip()
            raise SandboxUnavailable(f"the sandbox did not start: {text or 'no output'}")
        flags = os.O_NONBLOCK | os.O_NOFOLLOW
        self._fds["exec_r"] = os.open(self.ctl_dir / "exec", os.O_RDONLY | flags)
        self._fds["exec_w"] = os.open(self.ctl_dir / "exec", os.O_WRONLY | flags)
        self._fds["requests"] = os.open(self.ctl_dir / "requests", os.O_WRONLY | flags)
        self.starts += 1
        log.debug("sandbox %s started", self.ctl_dir.name)

    def _read_status(self, deadline: float, want: bytes) -> bytes | None:
        """Block (until ``deadline``) for the next status line starting with ``want``."""
        fd = self._proc.stdout.fileno()
        while True:
            while b"\n" in self._status:
                line, self._status = self._status.split(b"\n", 1)
                if line.startswith(want):
                    return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            poller = select.poll()  # not select(): descriptors may exceed FD_SETSIZE
            poller.register(fd, select.POLLIN)
            if not poller.poll(remaining * 1000):
                return None
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._status += chunk

    def stop(self) -> None:
        """Kill the sandbox (its pid namespace takes every process with it)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _kill(proc)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}

    def remove_files(self) -> None:
        """Stop and delete the control folder and the log (when the session ends)."""
        self.stop()
        remove_tree(self.ctl_dir)
        self.log_path.unlink(missing_ok=True)

    close = stop

    # -------------------------------------------------------------- one command

    def run(
        self,
        command: str,
        cwd: str,
        *,
        on_call: Callable[[int, str], dict] | None = None,
        timeout: float | None = None,
        merge_stderr: bool = False,
    ) -> RawRun:
        """Run ``command`` with bash in the sandbox, starting in ``cwd``.

        ``on_call(req_dir_fd, req_id)`` serves one intercepted execution command and returns
        a record of it; it runs on this thread while the sandbox waits. ``merge_stderr`` sends
        stderr into stdout, interleaved as a terminal shows them.
        """
        limit = self.limits.timeout if timeout is None else timeout
        if not self.alive or not self._control_intact():
            self.stop()
            self._start()
        self._seq += 1
        step = str(self._seq)
        steps_fd, req_fd = self._fds["steps"], self._fds["req"]
        step_fd: int | None = None
        try:
            os.mkdir(step, dir_fd=steps_fd)
            step_fd = os.open(step, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=steps_fd)
            result = self._run_step(step_fd, command, cwd, on_call, limit, merge_stderr)
        except OSError as exc:
            # The request may be half sent: stop the sandbox so the next command starts clean.
            if step_fd is not None:
                os.close(step_fd)
            self.stop()  # the next start removes the whole control folder
            if out_of_descriptors(exc):
                raise SandboxUnavailable(
                    descriptor_message("could not run the command", exc)
                ) from exc
            raise SandboxUnavailable(f"could not run the command: {exc}") from exc
        try:
            result.cwd = _read_small(step_fd, "cwd_out")
        finally:
            os.close(step_fd)
        try:
            shutil.rmtree(step, ignore_errors=True, dir_fd=steps_fd)  # never follows a symlink
            if result.calls:  # the shims have exited: their request folders can go
                with os.scandir(req_fd) as entries:
                    names = [entry.name for entry in entries]
                for name in names:
                    shutil.rmtree(name, ignore_errors=True, dir_fd=req_fd)
        except RecursionError:  # folders nested too deep: the next start removes them all
            self.stop()
        if result.timed_out or result.truncated:
            self.stop()
        return result

    def _run_step(
        self,
        step_fd: int,
        command: str,
        cwd: str,
        on_call: Callable[[int, str], dict] | None,
        limit: float,
        merge_stderr: bool,
    ) -> RawRun:
        _write_new(step_fd, "cmd", encode_text(command))
        _write_new(step_fd, "cwd", encode_text(cwd))
        streams = ["out"] if merge_stderr else ["out", "err"]
        if merge_stderr:
            _write_new(step_fd, "merge", b"")
        fds: dict[str, int] = {}
        flags = os.O_NONBLOCK | os.O_NOFOLLOW
        try:
            for name in streams:
                os.mkfifo(name, 0o600, dir_fd=step_fd)
                fds[name] = os.open(name, os.O_RDONLY | flags, dir_fd=step_fd)
                # A writer of our own keeps the read end from seeing EOF before the command
                # opens it; it is closed when the server reports the command done.
                fds[name + "_keep"] = os.open(name, os.O_WRONLY | flags, dir_fd=step_fd)
            os.write(self._fds["requests"], f"{self._seq}\n".encode())
            return self._pump(fds, streams, on_call, limit)
        finally:
            for fd in fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _control_intact(self) -> bool:
        """Whether the control folder is as the host made it (the sandbox may have renamed
        or replaced its entries; then the next command starts a fresh sandbox)."""
        try:
            if not stat.S_ISFIFO(os.lstat(self.ctl_dir / "requests").st_mode):
                return False
            for sub in ("req", "steps"):
                if not os.path.samestat(os.lstat(self.ctl_dir / sub), os.fstat(self._fds[sub])):
                    return False
            return True
        except (OSError, KeyError):
            return False


def limited_command(max_processes: int, script: str) -> list[str]:
    """The command bubblewrap starts: ``script`` under RLIMIT_NPROC = ``max_processes``.

    Set inside the sandbox, i.e. inside its own user namespace, the limit counts only this
    sandbox's processes (the kernel counts per user per user namespace) and binds every
    sandbox whose user is not the host's root (root is exempt: its sessions rely on the
    pids cgroup)."""
    return ["bash", "-c", f"ulimit -u {int(max_processes)} 2>/dev/null; {script}"]


def encode_text(text: str) -> bytes:
    """UTF-8 bytes of ``text``; undecodable bytes smuggled as surrogate escapes (file names
    read with ``os.fsdecode``) are restored, any other lone surrogate becomes ``?``. Never
    raises."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace")


def _write_new(dir_fd: int, name: str, data: bytes) -> None:
    """Create file ``name`` in ``dir_fd`` (never through a symlink) and write ``data``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_small(dir_fd: int, name: str) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 65536).decode(errors="replace").rstrip("\n")
        return text or None
    finally:
        os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    if proc.returncode is not None:  # reaped: its pid (and group id) may be another's now
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


__all__ = [
    "BASE_ENV",
    "SANDBOX_PATH",
    "PidsCgroup",
    "RawRun",
    "SandboxLimits",
    "SandboxRunner",
    "SandboxUnavailable",
    "bwrap_path",
    "encode_text",
    "launcher_env",
    "limited_command",
    "nsenter_path",
]
