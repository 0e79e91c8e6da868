"""What the :class:`~sweworld.transition.simulated.SimulatedExecutor` keeps between and
within steps: the per-session memory, the prediction cache, and one step's deadline."""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sweworld.sandbox.executor import ExecutionResult
from sweworld.transition.types import Prediction


class StepTimeout(Exception):
    """The step's deadline passed (raised inside the worker at a stage boundary)."""


class StepDeadline:
    """One step's deadline and the hand-over between the worker thread and the caller: the
    worker may commit (cache, ledger, history) only while the caller has not given up.
    ``facts`` and ``attempts`` hold what the worker has found so far (for the answer given
    when the deadline passes)."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout  # seconds allowed (what a timed-out answer names)
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.lock = threading.Lock()
        self.state = "running"  # running | committing | timed_out
        self.stage = "start"
        self.facts: Any = None
        self.attempts: list[dict[str, Any]] = []
        self.done = threading.Event()
        self.result: ExecutionResult | None = None
        self.error: BaseException | None = None
        self.stalled = False  # the caller gave up and the worker still runs (counted)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self, stage: str) -> None:
        self.stage = stage
        if self.state == "timed_out" or (self.deadline is not None and self.remaining() <= 0):
            raise StepTimeout(stage)

    def commit(self) -> bool:
        """Whether the worker may write its answer (False: the caller returned already)."""
        with self.lock:
            if self.state == "timed_out":
                return False
            self.state = "committing"
            return True

    def give_up(self) -> bool:
        """Whether the caller may answer without the worker (False: it is committing)."""
        with self.lock:
            if self.state == "running":
                self.state = "timed_out"
                return True
            return False


@dataclass
class SessionMemory:
    """What the simulator remembers about one session."""

    history: list[Any] = field(default_factory=list)  # HistoryItem, newest last
    ledger: dict[tuple[str, str], str] = field(default_factory=dict)  # (state, test) -> status


class PredictionCache:
    """A bounded, thread-safe LRU of predictions by key."""

    def __init__(self, max_items: int = 10_000):
        self.max_items = max_items
        self._items: OrderedDict[str, tuple[Prediction, dict]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def get(self, key: str) -> tuple[Prediction, dict] | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, pred: Prediction, info: dict) -> None:
        with self._lock:
            self._items[key] = (pred, info)
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)


#: Step workers given up at their deadline and still finishing (a model call stops at the
#: next token after the deadline). The process waits for them at exit, up to
#: :data:`EXIT_GRACE_S` in all: a thread still inside torch when the interpreter finalizes
#: aborts the process ("terminate called without an active exception", exit 134).
_STALLED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
EXIT_GRACE_S = 30.0


@atexit.register
def _join_stalled_workers() -> None:
    end = time.monotonic() + EXIT_GRACE_S
    for worker in list(_STALLED):
        worker.join(max(0.0, end - time.monotonic()))


def keep_until_exit(worker: threading.Thread) -> None:
    """Have the process wait (up to :data:`EXIT_GRACE_S`) for ``worker`` at exit."""
    _STALLED.add(worker)
