"""The world service's uvicorn server and its exit signals.

The first SIGTERM or SIGINT drains the world (new requests get 503, the steps in flight
finish within ``drain_timeout_s``), then uvicorn stops and the app's shutdown closes every
episode and session. A second signal stops at once: the requests in flight are answered 503
(JSON) on the event loop, the sandboxes are killed, the sessions are closed best-effort
within ``force_timeout_s``, and the process exits with :data:`FORCED_EXIT`.

The signal handler only queues the signal (Python runs it between two bytecodes of the main
thread, perhaps inside the event loop's ``with world._lock:``); a relay thread acts on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

from sweworld.serve.lifeline import processes

__all__ = ["FORCED_EXIT", "draining_server"]

log = logging.getLogger("sweworld.serve.world")

#: Exit status after a second signal (the process did not shut down gracefully).
FORCED_EXIT = 1


def _child_pids() -> list[int]:
    """The processes whose parent is this one (the sessions' sandbox servers)."""
    return processes(parent=os.getpid())


def _kill_children() -> None:
    for pid in _child_pids():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _uvicorn_server_class() -> type:
    import uvicorn

    class _DrainingServer(uvicorn.Server):
        """uvicorn's server whose first exit signal drains the world before stopping and
        whose second stops the process at once (:meth:`_force_stop`)."""

        def __init__(
            self, config: Any, world: Any, tracker: Any = None, force_timeout_s: float = 5.0
        ) -> None:
            super().__init__(config)
            self.world = world
            self.tracker = tracker
            self.force_timeout_s = force_timeout_s
            self._drain_started = False
            self._forced = False
            # the signal handler only queues the signal (SimpleQueue.put is reentrant);
            # the relay thread does the work (locks, threads, logging)
            self._signals: queue.SimpleQueue[int] = queue.SimpleQueue()
            self._loop: asyncio.AbstractEventLoop | None = None
            self._relay: threading.Thread | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            self.start_signal_relay(asyncio.get_running_loop())
            await super().startup(sockets)
            # asyncio set the kernel's queue to the accept burst (uvicorn's backlog): make it
            # long again, the burst stays short
            from sweworld.serve.world.connections import LISTEN_BACKLOG

            for sock in sockets or ():
                with contextlib.suppress(OSError):
                    sock.listen(LISTEN_BACKLOG)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Python runs this in the main thread between two bytecodes, perhaps inside the
            # event loop's `with world._lock:` (a plain lock): taking a lock, starting a
            # thread or logging here could hang the loop for good. Hand the signal over.
            self._signals.put(sig)

        def start_signal_relay(self, loop: asyncio.AbstractEventLoop | None) -> None:
            """Start the thread that acts on the signals :meth:`handle_exit` queued (with
            ``loop``, the event loop that answers the requests in flight on a second one)."""
            self._loop = loop
            if self._relay is None:
                self._relay = threading.Thread(
                    target=self._relay_signals, name="sweworld-signals", daemon=True
                )
                self._relay.start()

        def _relay_signals(self) -> None:
            while not self._forced:
                sig = self._signals.get()
                try:
                    self._on_signal(sig)
                except BaseException:  # the relay must outlive a failure: stop at once
                    log.exception("signal %d: acting on it failed; stopping now", sig)
                    self.should_exit = self.force_exit = True

        def _on_signal(self, sig: int) -> None:
            if self._drain_started:  # a second signal: stop now
                self.should_exit = self.force_exit = True
                if not self._forced:
                    self._forced = True
                    self._force_stop(sig)
                return
            self._drain_started = True
            self.world.start_draining()
            log.warning("signal %d: draining (new requests get 503)", sig)
            threading.Thread(target=self._drain, name="sweworld-drain", daemon=True).start()

        def _drain(self) -> None:
            if not self.world.wait_idle(self.world.config.drain_timeout_s):
                log.warning(
                    "drain: calls still running after %.0f s; stopping anyway",
                    self.world.config.drain_timeout_s,
                )
            self.should_exit = True

        def _force_stop(self, sig: int) -> None:
            """A second signal: answer every request in flight 503 (JSON) on the event
            loop, kill the sandboxes (a step in flight returns), close the sessions (best
            effort, at most ``force_timeout_s``: unmount, remove their folders), exit."""
            log.warning("signal %d again: stopping now (closing sessions, at most %.0f s)",
                        sig, self.force_timeout_s)  # fmt: skip
            answered = threading.Event()

            def abort() -> None:
                try:
                    if self.tracker is not None:
                        self.tracker.abort_all("the service stopped (a second signal)")
                finally:
                    answered.set()

            try:
                if self._loop is None:
                    raise RuntimeError("no event loop")
                self._loop.call_soon_threadsafe(abort)
            except RuntimeError:  # no loop (or it closed): nothing to answer
                answered.set()
            threading.Thread(
                target=self._exit_now, args=(answered,), name="sweworld-exit", daemon=True
            ).start()

        def _exit_now(self, answered: threading.Event) -> None:
            from sweworld.sandbox.bwrap import kill_spawned

            deadline = time.monotonic() + self.force_timeout_s
            answered.wait(1.0)
            _kill_children()
            manager = getattr(self.world, "manager", None)
            if manager is not None:
                closer = threading.Thread(target=manager.close_all, daemon=True)
                closer.start()
                # a step that was still starting its sandbox when the signal came starts it
                # now: kill the sandboxes again until the sessions are closed (each waits for
                # its step); the closing's own helpers (`rm`) are not sandboxes and live
                while closer.is_alive() and time.monotonic() < deadline:
                    closer.join(min(0.1, max(0.0, deadline - time.monotonic())))
                    kill_spawned()
                if closer.is_alive():
                    log.warning("exit: sessions still closing after %.0f s; `sweworld gc` "
                                "removes what is left", self.force_timeout_s)  # fmt: skip
            log.warning("world service stopped by a second signal")
            for handler in logging.getLogger().handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(FORCED_EXIT)

    return _DrainingServer


def draining_server(
    config: Any, world: Any, tracker: Any = None, force_timeout_s: float = 5.0
) -> Any:
    """A uvicorn ``Server`` whose first SIGTERM / SIGINT drains ``world`` (503 to new
    requests, steps in flight finish), then stops; the app's shutdown closes everything.
    A second signal answers the requests in flight 503 (through ``tracker``, a
    :class:`~sweworld.serve.world.connections.ConnectionTracker`), closes the sessions
    best-effort within ``force_timeout_s`` and exits with :data:`FORCED_EXIT`."""
    return _uvicorn_server_class()(config, world, tracker, force_timeout_s)
