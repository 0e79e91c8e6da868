"""One language model shared by many episodes, with their requests merged into batches.

:class:`BatchingLM` wraps any :class:`~sweworld.models.base.LM`. Many threads call its
``generate`` at once (one per episode of a pool); requests that arrive within
``batch_wait_s`` of each other (at most ``max_batch`` of them) are merged into ONE call of
the wrapped model, and each caller gets back exactly its own generations, in order.

- **Errors go to the right caller.** The LM protocol fails a whole call when any request
  in it fails; when a merged call fails, each caller's requests are retried on their own
  (one call per caller), so a prompt that is too long fails its own episode and no other.
  A model that is unreachable (:class:`~sweworld.models.base.LMUnavailable`) or too slow
  (:class:`~sweworld.models.base.LMTimeout`) fails every caller of the batch at once.
- **A deadline per call.** ``generate(requests, max_time=S)`` waits at most ``S`` seconds
  (plus ``grace_s``) and then raises :class:`LMTimeout`; a request still queued when its
  caller gave up is dropped, never sent. Without ``max_time`` the deadline is
  ``timeout_s``. When the wrapped model takes a time budget (``max_time``, as the
  in-process transformers model does), a merged call gets the longest budget of its
  callers.
- **Everything else passes through**: ``name``, ``context_window``, ``count_tokens``,
  ``choice_logprobs`` (not batched), ``exact_tokens`` and any other attribute are the
  wrapped model's; ``close`` stops the dispatcher and closes the wrapped model when the
  wrapper owns it.

``max_concurrent`` batches run at once (default 1: an in-process model computes one batch
at a time, and requests that arrive meanwhile form the next, larger batch; an
OpenAI-compatible server such as vLLM batches on its side, so several calls in flight keep
it busy).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.env.workers import IdleThreadPool, idle_seconds
from sweworld.models.base import GenerationRequest, LMError, LMTimeout, LMUnavailable

__all__ = ["BatchStats", "BatchingLM"]

log = logging.getLogger(__name__)

#: Seconds ``close`` waits for the model calls in flight before it lets them go (their
#: callers are answered at once; a model that never returns must not hang ``close``).
CLOSE_WAIT_S = 5.0


@dataclass
class BatchStats:
    """What a :class:`BatchingLM` has done so far."""

    calls: int = 0  # generate() calls from callers
    requests: int = 0  # requests in those calls
    batches: int = 0  # calls of the wrapped model (merged)
    largest_batch: int = 0  # most requests in one call of the wrapped model
    isolated_retries: int = 0  # callers retried alone after their merged call failed
    dropped: int = 0  # calls whose caller gave up before they were sent
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "requests": self.requests,
            "batches": self.batches,
            "largest_batch": self.largest_batch,
            "mean_batch": round(self.mean_batch, 2),
            "isolated_retries": self.isolated_retries,
            "dropped": self.dropped,
        }


@dataclass
class _Pending:
    requests: list[GenerationRequest]
    max_time: float | None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


def _settle(
    future: concurrent.futures.Future, result: Any = None, exc: BaseException | None = None
) -> None:
    """Answer a caller unless it was answered already (``close`` fails the calls in flight;
    the model's late answer is then dropped)."""
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def _takes_max_time(lm: Any) -> bool:
    import inspect

    try:
        return "max_time" in inspect.signature(lm.generate).parameters
    except (TypeError, ValueError):
        return False


class BatchingLM:
    """Merges concurrent ``generate`` calls into batched calls of one wrapped LM.

    Args:
        lm: the wrapped :class:`~sweworld.models.base.LM` (an instance).
        max_batch: most requests merged into one call of the wrapped model (a single
            caller's call is never split).
        batch_wait_s: how long the first request of a batch waits for others.
        max_concurrent: merged calls in flight at once (1 for an in-process model).
        timeout_s: deadline of a call that gives no ``max_time``.
        grace_s: extra seconds a caller with ``max_time`` waits (the model's own budget
            check and queueing).
        close_wrapped: ``close`` also closes the wrapped model.
    """

    def __init__(
        self,
        lm: Any,
        *,
        max_batch: int = 32,
        batch_wait_s: float = 0.005,
        max_concurrent: int = 1,
        timeout_s: float = 600.0,
        grace_s: float = 5.0,
        close_wrapped: bool = True,
    ):
        if lm is None or not callable(getattr(lm, "generate", None)):
            raise TypeError(f"BatchingLM wraps an LM with generate(); got {lm!r}")
        if isinstance(lm, BatchingLM):
            raise TypeError("the LM is already a BatchingLM")
        if max_batch < 1 or max_concurrent < 1:
            raise ValueError("max_batch and max_concurrent must be at least 1")
        if not (
            0 <= batch_wait_s < math.inf and 0 < timeout_s < math.inf and 0 <= grace_s < math.inf
        ):
            raise ValueError(
                "batch_wait_s and grace_s must be finite and >= 0, timeout_s finite > 0"
            )
        self.wrapped = lm
        self.max_batch = int(max_batch)
        self.batch_wait_s = float(batch_wait_s)
        self.max_concurrent = int(max_concurrent)
        self.timeout_s = float(timeout_s)
        self.grace_s = float(grace_s)
        self.close_wrapped = close_wrapped
        self.stats = BatchStats()
        self._wrapped_takes_max_time = _takes_max_time(lm)
        self._queue: collections.deque[_Pending] = collections.deque()
        self._cond = threading.Condition()
        self._slots = threading.Semaphore(self.max_concurrent)
        self._closed = False
        self._running: dict[int, list[_Pending]] = {}  # batches sent to the model, by id
        self._dispatcher: threading.Thread | None = None
        self._workers = IdleThreadPool(  # threads idle for a while exit
            self.max_concurrent, idle_s=idle_seconds(), thread_name_prefix="sweworld-lm-batch"
        )

    # ------------------------------------------------------------------ pass-through

    @property
    def name(self) -> str:
        return str(getattr(self.wrapped, "name", type(self.wrapped).__name__))

    @property
    def context_window(self) -> int:
        return int(getattr(self.wrapped, "context_window", 0))

    def count_tokens(self, text: str) -> int:
        return self.wrapped.count_tokens(text)

    def choice_logprobs(self, messages: Any, choices: Sequence[str], *, prefix: str = "") -> Any:
        """The wrapped model's ``choice_logprobs`` (not batched)."""
        from sweworld.models.base import lm_choice_logprobs

        return lm_choice_logprobs(self.wrapped, messages, choices, prefix=prefix)

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class does not define (exact_tokens, info, ...).
        if name.startswith("__") or name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"BatchingLM({self.wrapped!r}, max_batch={self.max_batch})"

    def __enter__(self) -> BatchingLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ generate

    def generate(
        self, requests: Sequence[GenerationRequest], *, max_time: float | None = None
    ) -> list[list[Any]]:
        """For each request, its ``n`` generations, computed in a batch shared with other
        callers. Raises what the wrapped model raised for these requests, or
        :class:`LMTimeout` when the deadline passed first."""
        requests = list(requests)
        if not requests:
            return []
        pending = _Pending(requests, max_time)
        with self._cond:
            if self._closed:
                raise LMError(f"{self.name}: the batching wrapper was closed")
            self.stats.calls += 1
            self.stats.requests += len(requests)
            self._queue.append(pending)
            self._ensure_dispatcher()
            self._cond.notify_all()
        wait = self.timeout_s
        if max_time is not None and math.isfinite(max_time):  # inf / NaN: no budget of its own
            wait = min(self.timeout_s, max(0.0, max_time)) + self.grace_s
        try:
            return pending.future.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            if pending.future.cancel():  # still queued: never sent
                with self._cond:
                    self.stats.dropped += 1
            raise LMTimeout(f"{self.name}: no answer within {wait:.1f} s (batched call)") from None
        except concurrent.futures.CancelledError:
            raise LMError(f"{self.name}: the batching wrapper was closed") from None

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None or not self._dispatcher.is_alive():
            self._dispatcher = threading.Thread(
                target=self._dispatch_loop, name="sweworld-lm-dispatch", daemon=True
            )
            self._dispatcher.start()

    def _dispatch_loop(self) -> None:
        while True:
            self._slots.acquire()  # a free slot first: requests pile up while busy
            batch = self._next_batch()
            if batch is None:
                self._slots.release()
                return
            with self._cond:
                self._running[id(batch)] = batch
            try:
                self._workers.submit(self._run, batch)
            except RuntimeError:  # closed meanwhile
                with self._cond:
                    self._running.pop(id(batch), None)
                self._slots.release()
                for item in batch:  # set running already: answer, or its caller waits
                    _settle(
                        item.future, exc=LMError(f"{self.name}: the batching wrapper was closed")
                    )
                return

    def _next_batch(self) -> list[_Pending] | None:
        """Wait for a first call, then up to ``batch_wait_s`` for more (``max_batch``
        requests at most); None once closed."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + self.batch_wait_s
            while not self._closed:
                if sum(len(p.requests) for p in self._queue) >= self.max_batch:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch: list[_Pending] = []
            size = 0
            while self._queue:
                item = self._queue[0]
                if batch and size + len(item.requests) > self.max_batch:
                    break
                self._queue.popleft()
                if not item.future.set_running_or_notify_cancel():
                    continue  # its caller gave up
                batch.append(item)
                size += len(item.requests)
            return batch

    def _call(self, items: list[_Pending]) -> list[list[Any]]:
        requests = [r for item in items for r in item.requests]
        if self._wrapped_takes_max_time:
            budgets = [item.max_time for item in items]
            budget = None if any(b is None for b in budgets) else max(budgets)  # type: ignore[type-var]
            out = self.wrapped.generate(requests, max_time=budget)
        else:
            out = self.wrapped.generate(requests)
        out = list(out)
        if len(out) != len(requests):
            raise LMError(
                f"{self.name}: the model returned {len(out)} results for {len(requests)} requests"
            )
        with self._cond:
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(requests))
            if len(self.stats.batch_sizes) < 100_000:
                self.stats.batch_sizes.append(len(requests))
        return out

    def _run(self, batch: list[_Pending]) -> None:
        try:
            if not batch:
                return
            try:
                results = self._call(batch)
            except Exception as exc:
                if len(batch) == 1 or isinstance(exc, (LMTimeout, LMUnavailable)):
                    for item in batch:
                        _settle(item.future, exc=exc)
                    return
                log.info(
                    "batched call of %d failed (%s); retrying each caller alone", len(batch), exc
                )
                with self._cond:
                    self.stats.isolated_retries += len(batch)
                for item in batch:
                    if item.future.done():  # answered meanwhile (closed)
                        continue
                    try:
                        _settle(item.future, self._call([item]))
                    except Exception as own:
                        _settle(item.future, exc=own)
                return
            position = 0
            for item in batch:
                count = len(item.requests)
                _settle(item.future, results[position : position + count])
                position += count
        except BaseException as exc:  # never leave a caller waiting
            for item in batch:
                _settle(item.future, exc=exc)
        finally:
            with self._cond:
                self._running.pop(id(batch), None)
            self._slots.release()

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Fail queued calls and the calls the model is computing (their callers get an
        :class:`LMError` at once), stop the dispatcher, close the wrapped model (if owned).
        A model call still running after ``CLOSE_WAIT_S`` seconds is left to finish on its
        own (its answer dropped): a model that never returns does not hang ``close``."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            running = [item for batch in self._running.values() for item in batch]
            self._cond.notify_all()
        closed = LMError(f"{self.name}: the batching wrapper was closed")
        for item in queued:
            if item.future.set_running_or_notify_cancel():
                _settle(item.future, exc=closed)
        for item in running:
            _settle(item.future, exc=closed)
        self._workers.shutdown(wait=False)
        deadline = time.monotonic() + CLOSE_WAIT_S
        with self._cond:
            while self._running and time.monotonic() < deadline:
                self._cond.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            still = len(self._running)
        if still:
            log.warning(
                "%s: %d model call(s) still running at close; left to finish", self.name, still
            )
        if self._dispatcher is not None:
            self._dispatcher.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.close_wrapped:
            close = getattr(self.wrapped, "close", None)
            if callable(close):
                close()
