"""One sandboxed command's run, read as it happens (:class:`OutputPump`, a part of
:class:`sweworld.sandbox.bwrap.SandboxRunner`): its stdout and stderr up to the output cap,
the server's status line that ends it, and the execution calls it makes, each served by the
session (within the command's limits of calls and executor time) while its clock stops;
:class:`RawRun`, what the run gave.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sweworld.sandbox.shims import answer_call

__all__ = ["OutputPump", "RawRun"]


@dataclass
class RawRun:
    """Bytes and status of one sandboxed command."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    cwd: str | None = None
    wall_s: float = 0.0
    executor_s: float = 0.0
    calls: list[dict] = field(default_factory=list)
    calls_refused: int = 0  # execution calls past the command's limits, not served


class OutputPump:
    """The reading loop of a :class:`~sweworld.sandbox.bwrap.SandboxRunner` (which sets
    every attribute named here)."""

    limits: Any
    _proc: Any
    _fds: dict[str, int]
    _seq: int
    _status: bytes

    def _pump(
        self,
        fds: dict[str, int],
        streams: list[str],
        on_call: Callable[[int, str], dict] | None,
        limit: float,
    ) -> RawRun:
        result = RawRun(stdout=b"", stderr=b"", exit_code=0)
        start = time.monotonic()
        cap = self.limits.max_output_bytes
        bufs = {name: bytearray() for name in streams}
        status_fd = self._proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        for name in streams:
            sel.register(fds[name], selectors.EVENT_READ, name)
        sel.register(status_fd, selectors.EVENT_READ, "status")
        sel.register(self._fds["exec_r"], selectors.EVENT_READ, "exec")
        pending_exec = b""
        open_streams = set(streams)
        done_at: float | None = None
        target = f"done {self._seq} ".encode()
        try:
            while open_streams:
                now = time.monotonic()
                if done_at is None:
                    remaining = limit - (now - start - result.executor_s)
                    if remaining <= 0:
                        result.timed_out = True
                        result.exit_code = -1
                        break
                else:
                    remaining = 1.0 - (now - done_at)  # drain what the command left
                    if remaining <= 0:
                        break
                for key, _ in sel.select(timeout=min(max(remaining, 0), 0.25)):
                    what = key.data
                    if what == "status":
                        try:
                            chunk = os.read(status_fd, 4096)
                        except BlockingIOError:
                            continue
                        if not chunk:  # the server died (killed from inside, or crashed)
                            sel.unregister(status_fd)
                            if done_at is None:
                                result.exit_code = 137
                                done_at = time.monotonic()
                                self._release(fds, streams)
                            continue
                        self._status += chunk
                        while b"\n" in self._status:
                            line, self._status = self._status.split(b"\n", 1)
                            if line.startswith(target):
                                result.exit_code = int(line[len(target) :] or b"1")
                                done_at = time.monotonic()
                                self._release(fds, streams)
                    elif what == "exec":
                        try:
                            chunk = os.read(key.fd, 4096)
                        except BlockingIOError:
                            continue
                        pending_exec += chunk
                        while b"\n" in pending_exec:
                            line, pending_exec = pending_exec.split(b"\n", 1)
                            if self._over_call_limits(result):
                                result.calls_refused += 1
                                answer_call(
                                    self._fds["req"],
                                    line.decode(errors="replace").strip(),
                                    "",
                                    self._call_limit_message(),
                                    126,
                                )
                                continue
                            t0 = time.monotonic()
                            record = self._serve(
                                on_call, self._fds["req"], line.decode(errors="replace")
                            )
                            result.executor_s += time.monotonic() - t0
                            if record is not None:
                                result.calls.append(record)
                    else:
                        try:
                            chunk = os.read(key.fd, 65536)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            sel.unregister(key.fd)
                            open_streams.discard(what)
                            continue
                        buf = bufs[what]
                        room = cap - len(buf)
                        buf += chunk[: max(room, 0)]
                        if len(chunk) > room:
                            result.truncated = True
                            result.exit_code = -1
                            open_streams.clear()
                            break
        finally:
            sel.close()
        result.wall_s = time.monotonic() - start
        result.stdout = bytes(bufs["out"])
        result.stderr = bytes(bufs.get("err", b""))
        return result

    def _over_call_limits(self, result: RawRun) -> bool:
        lim = self.limits
        served = len(result.calls) + result.calls_refused
        return served >= lim.max_execution_calls or result.executor_s >= lim.max_executor_seconds

    def _call_limit_message(self) -> str:
        lim = self.limits
        return (
            "sweworld: not run: this command reached its limit of execution calls "
            f"({lim.max_execution_calls} calls or {lim.max_executor_seconds:g} s of "
            "execution); run fewer in one command.\n"
        )

    @staticmethod
    def _release(fds: dict[str, int], streams: list[str]) -> None:
        for name in streams:
            fd = fds.pop(name + "_keep", None)
            if fd is not None:
                os.close(fd)

    @staticmethod
    def _serve(on_call: Callable[[int, str], dict] | None, req_fd: int, req_id: str) -> dict | None:
        req_id = req_id.strip()
        if not req_id:
            return None
        if on_call is None:
            answer_call(req_fd, req_id, "", "sweworld: no executor is attached\n", 126)
            return None
        return on_call(req_fd, req_id)
