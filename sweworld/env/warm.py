"""A warm pool: sessions opened ahead of time, per task, within a memory budget.

Opening a session costs the base checkout (once per task and manager), a copy-on-write
workspace (an overlay mount or a copy), a pids cgroup and a state folder. A trainer that
starts thousands of episodes on a few hundred tasks can pay that ahead of time:
:class:`WarmSessions` keeps up to ``per_task`` opened, never-stepped sessions per task and
refills them in a background thread as they are taken.

``acquire(task)`` returns a warm session when one is ready (a hit), else opens one in the
caller's thread (a miss; the task is then kept warm from then on). It plugs into an
episode as ``Episode(open_session=warm.acquire)`` or into a pool as
``EnvPool(warm=warm)``. A session is handed out once, and only fresh (never stepped, not
destroyed); the caller owns it from then on (the episode destroys it). ``close`` destroys
the sessions still waiting.

How many sessions stay warm is set by a memory budget: the footprint of one session is
measured once (the growth of this process's resident memory while opening one, plus its
state folder on disk: for the overlay backend the upper layer, a few KB; for the copy
backend the whole checkout), and ``capacity = memory_budget // footprint``, never more than
``per_task`` per task. The sandbox's own processes start at the first step, so a warm
session holds none.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweworld.env.episode import coerce_task

__all__ = ["Footprint", "WarmSessions", "process_rss_bytes", "tree_bytes"]

log = logging.getLogger(__name__)

#: The smallest footprint assumed for one session (the measured growth of resident memory
#: can be zero or negative: the allocator reuses freed pages).
MIN_FOOTPRINT_BYTES = 256 * 1024


def process_rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default), from ``/proc``; 0 when unknown."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as handle:
            resident = int(handle.read().split()[1])
        return resident * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_bytes(path: str | Path) -> int:
    """Disk space of the files under ``path`` (allocated blocks; links not followed)."""
    total = 0
    stack = [str(path)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += getattr(info, "st_blocks", 0) * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


@dataclass
class Footprint:
    """What one warm session costs: resident memory growth and disk, in bytes."""

    rss_bytes: int
    disk_bytes: int
    open_s: float

    @property
    def total_bytes(self) -> int:
        return max(MIN_FOOTPRINT_BYTES, self.rss_bytes + self.disk_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rss_bytes": self.rss_bytes,
            "disk_bytes": self.disk_bytes,
            "total_bytes": self.total_bytes,
            "open_s": round(self.open_s, 4),
        }


def _task_key(task: Any) -> tuple[str, str, str]:
    return (task.instance_id, task.repo, task.base_commit or "")


class WarmSessions:
    """Opened, never-stepped sessions per task, refilled in the background.

    Args:
        manager: the :class:`~sweworld.sandbox.manager.SessionManager` to open sessions
            with; None leaves the pool unbound until :meth:`bind` (an
            :class:`~sweworld.env.pool.EnvPool` binds it to its own manager and executor).
        executor: the executor of the sessions (the manager's default when None).
        config: the sessions' :class:`~sweworld.sandbox.session.SessionConfig`.
        tasks: tasks to keep warm from the start (more are added by :meth:`add` and by
            every :meth:`acquire` of a new task).
        per_task: most warm sessions per task.
        memory_budget_mb: memory (resident plus disk) the warm sessions may take in all.
        refill: refill in a background thread (False: only :meth:`fill` opens sessions).
    """

    def __init__(
        self,
        manager: Any = None,
        *,
        executor: Any = None,
        config: Any = None,
        tasks: Any = (),
        per_task: int = 2,
        memory_budget_mb: float = 1024.0,
        refill: bool = True,
    ):
        if per_task < 1:
            raise ValueError(f"per_task must be at least 1, got {per_task!r}")
        if not 0 < memory_budget_mb < math.inf:
            raise ValueError(f"memory_budget_mb must be positive, got {memory_budget_mb!r}")
        self.manager = manager
        self.executor = executor
        self.config = config
        self.per_task = int(per_task)
        self.memory_budget_bytes = int(memory_budget_mb * 1024 * 1024)
        self.refill = refill
        self.footprint: Footprint | None = None
        self._tasks: dict[tuple[str, str, str], Any] = {}
        self._idle: dict[tuple[str, str, str], collections.deque[Any]] = {}
        self._opening = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.hits = 0
        self.misses = 0
        self.opened = 0
        self.failures = 0
        self.last_error: str | None = None
        self.acquire_s: dict[str, list[float]] = {"warm": [], "cold": []}
        for task in tasks:
            self.add(task)

    # ------------------------------------------------------------------ setup

    @property
    def bound(self) -> bool:
        return self.manager is not None

    def bind(self, *, manager: Any, executor: Any = None, config: Any = None) -> None:
        """Give an unbound pool its manager, executor and session config (a pool that
        already has a manager keeps its own). A pool with a manager but no executor of its
        own takes ``executor`` and ``config`` too: its sessions would otherwise run on the
        manager's default executor, not the one the episodes were configured with (a
        simulated pool's warm sessions executing for real); sessions it opened before are
        destroyed."""
        stale: list[Any] = []
        with self._cond:
            if self.manager is None:
                self.manager = manager
            elif self.executor is not None or executor is None:
                return
            else:  # opened on the manager's default executor: not what the episodes run
                stale = [s for idle in self._idle.values() for s in idle]
                for idle in self._idle.values():
                    idle.clear()
            self.executor = executor if self.executor is None else self.executor
            self.config = config if self.config is None else self.config
            self._start()
            self._cond.notify_all()
        for session in stale:
            _destroy(session)

    def add(self, task: Any) -> None:
        """Keep ``task`` warm (``per_task`` sessions, within the capacity)."""
        task = coerce_task(task)
        with self._cond:
            self._check_open()
            key = _task_key(task)
            self._tasks.setdefault(key, task)
            self._idle.setdefault(key, collections.deque())
            self._start()
            self._cond.notify_all()

    @property
    def capacity(self) -> int:
        """How many sessions may be warm at once (unknown footprint: ``per_task`` per
        task)."""
        by_tasks = self.per_task * max(1, len(self._tasks))
        if self.footprint is None:
            return by_tasks
        return max(0, min(by_tasks, self.memory_budget_bytes // self.footprint.total_bytes))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the warm pool is closed")

    def _start(self) -> None:
        if not self.refill or self.manager is None or self._closed or not self._tasks:
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._refill_loop, name="sweworld-warm", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ opening

    def _open(self, task: Any) -> Any:
        if self.manager is None:
            raise RuntimeError(
                "the warm pool has no session manager: pass one, or give it to an EnvPool"
            )
        options: dict[str, Any] = {}
        if self.executor is not None:
            options["executor"] = self.executor
        if self.config is not None:
            options["config"] = self.config
        return self.manager.open(task, **options)

    def measure(self, task: Any) -> Footprint:
        """Measure one session's footprint on ``task`` (the first open, which also builds
        the base checkout, is not the one measured); the measured session is kept warm."""
        task = coerce_task(task)
        self.add(task)
        first = self._open(task)  # base checkout and imports out of the way
        rss0 = process_rss_bytes()
        started = time.perf_counter()
        try:
            second = self._open(task)
        except BaseException:
            _destroy(first)
            raise
        open_s = time.perf_counter() - started
        rss = max(0, process_rss_bytes() - rss0)
        disk = tree_bytes(second.state_dir)
        footprint = Footprint(rss, disk, open_s)
        with self._cond:
            self.footprint = footprint
            self.opened += 2
            if not self._keep(_task_key(task), first, second):
                return footprint
        self._trim()
        return footprint

    def _keep(self, key: tuple[str, str, str], *sessions: Any) -> bool:
        """Put freshly opened ``sessions`` in ``key``'s queue (the lock held); once closed,
        destroy them instead (``close`` already emptied the queues). Whether they were kept."""
        if self._closed:
            for session in sessions:
                _destroy(session)
            return False
        self._idle[key].extend(sessions)
        self._cond.notify_all()
        return True

    def _trim(self) -> None:
        """Destroy idle sessions beyond the capacity or ``per_task``."""
        extra = []
        with self._cond:
            for idle in self._idle.values():
                while len(idle) > self.per_task:
                    extra.append(idle.pop())
            while self._idle_count() > self.capacity:
                longest = max(self._idle.values(), key=len)
                extra.append(longest.pop())
        for session in extra:
            _destroy(session)

    def _idle_count(self) -> int:
        return sum(len(d) for d in self._idle.values())

    def _wanted(self) -> tuple[tuple[str, str, str], Any] | None:
        """The task most short of warm sessions, if the capacity allows one more."""
        if self._idle_count() + self._opening >= self.capacity:
            return None
        best = None
        for key, idle in self._idle.items():
            if len(idle) < self.per_task and (best is None or len(idle) < len(self._idle[best])):
                best = key
        return (best, self._tasks[best]) if best is not None else None

    def _refill_loop(self) -> None:
        backoff = 0.0  # seconds to wait after a failed open (doubles, at most 30 s)
        while True:
            with self._cond:
                if backoff and not self._closed:
                    self._cond.wait(timeout=backoff)
                while not self._closed and self._wanted() is None:
                    self._cond.wait()
                if self._closed:
                    return
                key, task = self._wanted()  # type: ignore[misc]
                measuring = self.footprint is None
                if not measuring:
                    self._opening += 1
            try:
                session = None if measuring else self._open(task)
                if measuring:
                    self.measure(task)
            except Exception as exc:
                if not measuring:
                    self._opening_done()
                self._failed(task, exc)
                backoff = min(30.0, max(0.5, backoff * 2))
                continue
            backoff = 0.0
            if session is None:
                continue
            with self._cond:
                self._opening -= 1
                self.opened += 1
                keep = not self._closed
                if keep:
                    self._idle[key].append(session)
                self._cond.notify_all()
            if not keep:
                _destroy(session)

    def _opening_done(self) -> None:
        with self._cond:
            self._opening -= 1

    def _failed(self, task: Any, exc: Exception) -> None:
        with self._cond:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        log.warning("warm pool: opening a session on %s failed: %s", task.instance_id, exc)

    def fill(self, timeout: float = 60.0) -> int:
        """Wait until every task has its warm sessions (or the capacity is reached, or
        ``timeout`` passed); without background refill, open them here. Returns how many
        sessions are warm."""
        deadline = time.monotonic() + timeout
        if not self.refill:
            while time.monotonic() < deadline:
                with self._cond:
                    wanted = self._wanted()
                if wanted is None:
                    break
                key, task = wanted
                if self.footprint is None:
                    self.measure(task)
                    continue
                session = self._open(task)
                with self._cond:
                    self.opened += 1
                    self._keep(key, session)
            return self.warm_count
        with self._cond:
            self._start()
            while not self._closed and time.monotonic() < deadline:
                if self._wanted() is None and self._opening == 0:
                    break
                if self.failures and self._idle_count() == 0 and self.last_error:
                    break
                self._cond.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            return self._idle_count()

    # ------------------------------------------------------------------ acquire

    def acquire(self, task: Any) -> Any:
        """A fresh session on ``task``: a warm one when ready, else one opened now."""
        started = time.perf_counter()
        task = coerce_task(task)
        key = _task_key(task)
        session = None
        stale = []
        with self._cond:
            self._check_open()
            if key not in self._tasks:
                self._tasks[key] = task
                self._idle[key] = collections.deque()
            idle = self._idle[key]
            while idle:
                candidate = idle.popleft()
                if getattr(candidate, "closed", False) or getattr(candidate, "steps", 0):
                    stale.append(candidate)  # never hand out a used session
                    continue
                session = candidate
                break
            self._start()
            self._cond.notify_all()
        for old in stale:
            _destroy(old)
        kind = "warm"
        if session is None:
            kind = "cold"
            session = self._open(task)
        with self._cond:
            if kind == "warm":
                self.hits += 1
            else:
                self.misses += 1
            times = self.acquire_s[kind]
            if len(times) < 100_000:
                times.append(time.perf_counter() - started)
        return session

    # ------------------------------------------------------------------ bookkeeping

    @property
    def warm_count(self) -> int:
        with self._cond:
            return self._idle_count()

    def stats(self) -> dict[str, Any]:
        """Hits, misses, sessions opened, the footprint, the capacity and the median time
        to get a session warm and cold."""
        with self._cond:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "opened": self.opened,
                "warm": self._idle_count(),
                "capacity": self.capacity,
                "failures": self.failures,
                "last_error": self.last_error,
                "footprint": self.footprint.to_dict() if self.footprint else None,
                "acquire_warm_s": _median(self.acquire_s["warm"]),
                "acquire_cold_s": _median(self.acquire_s["cold"]),
            }

    def close(self) -> None:
        """Stop refilling and destroy every session still waiting. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            sessions = [s for idle in self._idle.values() for s in idle]
            for idle in self._idle.values():
                idle.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for session in sessions:
            _destroy(session)

    def __enter__(self) -> WarmSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<WarmSessions tasks={len(self._tasks)} warm={self._idle_count()}>"


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _destroy(session: Any) -> None:
    try:
        session.destroy()
    except Exception:
        log.exception("destroying warm session %s failed", getattr(session, "id", "?"))
