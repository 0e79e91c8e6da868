"""A server process that cannot outlive the process that launched it.

``python lifeline.py COMMAND...`` runs ``COMMAND`` as its child, in its own process group
(the launcher starts the lifeline with ``start_new_session``, so the lifeline leads a group
that holds the server and every worker the server forks), and reads its stdin: a pipe whose
write end only the launcher holds. The launcher never writes to it, so the read returns
only when that end closes: when the launcher stops the server, or when it dies in any way
(SIGKILL, an out-of-memory kill, a crash of the interpreter). The lifeline then ends the
whole group: SIGTERM, and SIGKILL after :data:`GRACE_S` seconds.

Unlike ``PR_SET_PDEATHSIG`` this follows the launching *process*, not the thread that
forked (a server started from a worker thread is not killed when that thread ends), and it
reaches the server's own children too.

Otherwise the lifeline is transparent: it ignores the group's SIGTERM itself (the server
gets it and shuts down), waits for the server, SIGKILLs what is left of the group (workers
that outlived the server), and exits as the server did (its status, or the same signal).
The server's stdin is ``/dev/null``, as before. It imports nothing but the standard
library, so it runs under any Python without loading sweworld.

A launcher that ``fork()``s without ``exec`` (multiprocessing's ``fork`` start method)
hands the pipe's write end to the forked child too: the server then lives until both are
gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

#: Seconds between the SIGTERM and the SIGKILL of the group once the launcher is gone.
GRACE_S = 10.0


def processes(*, parent: int | None = None, group: int | None = None) -> list[int]:
    """The pids, this process's left out, whose parent is ``parent`` and whose process group
    is ``group`` (either may be None: any), read from ``/proc/<pid>/stat`` (Linux)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # state ppid pgrp ...
        except OSError:
            continue
        if len(fields) < 3:
            continue
        if (parent is None or int(fields[1]) == parent) and (
            group is None or int(fields[2]) == group
        ):
            found.append(int(entry))
    return found


def _kill_rest_of_group() -> None:
    """SIGKILL every other member of this process group (the server's workers after the
    server exited: one that ignored SIGTERM would otherwise be left for good)."""
    for pid in processes(group=os.getpgrp()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _end_group(child: subprocess.Popen, grace: float) -> None:
    """SIGTERM the group, SIGKILL it when ``child`` has not exited within ``grace``."""
    try:
        os.killpg(0, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(0, signal.SIGKILL)  # the server's workers too; this process with them


def _watch_launcher(child: subprocess.Popen, grace: float) -> None:
    """Block until stdin reaches its end (the launcher closed it or died), then end the
    group."""
    try:
        while os.read(0, 4096):
            pass  # the launcher writes nothing; anything written is ignored
    except OSError:
        pass  # a closed or broken stdin is the launcher gone too
    _end_group(child, grace)


def main(argv: list[str]) -> int:
    """Run ``argv`` until it exits or the launcher goes; the server's exit status."""
    if not argv:
        print("usage: lifeline.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    if os.getsid(0) != os.getpid():  # lead a session and group of its own: the group
        try:  # it ends must never hold its launcher or the launcher's other children
            os.setsid()
        except OSError:  # already a group leader (exec'd by a shell with job control)
            print("lifeline: must be started in a new session", file=sys.stderr, flush=True)
            return 2
    # Python handlers, not SIG_IGN: an ignored signal would stay ignored in the server after
    # exec, and the group's SIGTERM must reach it. The lifeline itself lives until the
    # server has exited.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"lifeline: cannot start {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    grace = float(os.environ.get("SWEWORLD_LIFELINE_GRACE_S", GRACE_S))
    threading.Thread(target=_watch_launcher, args=(child, grace), daemon=True).start()
    code = child.wait()
    _kill_rest_of_group()  # the server is gone: so are its workers
    if code < 0:  # die of the same signal, so the launcher sees what the server saw
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's cannot be set (nor need be)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
