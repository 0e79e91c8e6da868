"""Worker threads that go away when idle, and calls with a deadline.

:class:`IdleThreadPool` is a ``concurrent.futures.Executor`` like ``ThreadPoolExecutor``
(threads started on demand up to ``max_workers``), except that a thread with no work for
``idle_s`` seconds exits. The process-wide step and async pools were sized for bursts
(1,024 and 512 threads) and, as ``ThreadPoolExecutor`` never shrinks, kept every thread a
burst started for the life of the process; these shrink back to nothing when idle.

:func:`call_with_deadline` runs a call on such a pool and stops waiting for it at a
deadline (:class:`CallTimeout`): what a rollout uses for a policy's ``act``, which is the
trainer's code and cannot be interrupted; its thread is left to finish on its own, and
exits once idle.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_IDLE_S", "CallTimeout", "IdleThreadPool", "call_with_deadline", "idle_seconds"]

#: Seconds a worker thread waits for work before it exits (``$SWEWORLD_WORKER_IDLE_S``).
DEFAULT_IDLE_S = 60.0


def idle_seconds() -> float:
    """The idle period of the process-wide pools: ``$SWEWORLD_WORKER_IDLE_S`` or
    :data:`DEFAULT_IDLE_S` (a value that is not a positive number is ignored)."""
    try:
        value = float(os.environ.get("SWEWORLD_WORKER_IDLE_S", DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S
    return value if 0 < value < float("inf") else DEFAULT_IDLE_S


class CallTimeout(TimeoutError):
    """A call given to :func:`call_with_deadline` did not return in time."""


_Item = tuple[concurrent.futures.Future, Callable[..., Any], tuple, dict]


class IdleThreadPool(concurrent.futures.Executor):
    """Up to ``max_workers`` daemon threads, started when work waits and no thread is free,
    each exiting after ``idle_s`` seconds without work.

    A thread never exits while work is queued, so every submitted call runs. Threads are
    daemons: a call that never returns (a stuck model server, a policy in an endless loop)
    does not keep the process alive at exit.
    """

    def __init__(
        self,
        max_workers: int,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        thread_name_prefix: str = "sweworld-worker",
    ):
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
        if not 0 < idle_s < float("inf"):
            raise ValueError(f"idle_s must be a positive number of seconds, got {idle_s!r}")
        self.max_workers = max_workers
        self.idle_s = float(idle_s)
        self._prefix = thread_name_prefix
        self._cond = threading.Condition()
        self._work: deque[_Item] = deque()
        self._threads: set[threading.Thread] = set()
        self._idle = 0  # threads waiting for work
        self._shutdown = False
        self._names = itertools.count(1)

    @property
    def thread_count(self) -> int:
        """Threads alive now (busy or waiting for work)."""
        with self._cond:
            return len(self._threads)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.append((future, fn, args, kwargs))
            if len(self._work) > self._idle and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._worker, name=f"{self._prefix}_{next(self._names)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._cond.notify()
        return future

    def _next(self) -> _Item | None:
        """The next piece of work, or None when this thread should exit (idle too long,
        or shut down with nothing queued)."""
        me = threading.current_thread()
        with self._cond:
            while not self._work:
                if self._shutdown:
                    self._threads.discard(me)
                    return None
                self._idle += 1
                woken = self._cond.wait(self.idle_s)
                self._idle -= 1
                if not woken and not self._work:
                    self._threads.discard(me)
                    return None
            return self._work.popleft()

    def _worker(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            del item, future, fn, args, kwargs  # drop references while idle

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new work; queued work still runs unless ``cancel_futures``; ``wait`` joins
        the threads (those still running a call that never returns are not waited for
        past that call)."""
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                while self._work:
                    self._work.popleft()[0].cancel()
            threads = list(self._threads)
            self._cond.notify_all()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


def call_with_deadline(
    pool: concurrent.futures.Executor, fn: Callable[[], Any], timeout: float | None, what: str
) -> Any:
    """``fn()`` run on ``pool``, its result or its exception; :class:`CallTimeout` naming
    ``what`` when it did not return within ``timeout`` seconds (None: no deadline, and it
    runs on the calling thread). A call that timed out is left to finish on its own."""
    if timeout is None:
        return fn()
    future = pool.submit(fn)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()  # not started yet (the pool was busy): never run it
        raise CallTimeout(f"{what} did not return within {timeout:g} s") from None
