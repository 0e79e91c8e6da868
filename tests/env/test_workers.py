"""Worker pools that shrink when idle, and calls with a deadline (sweworld.env.workers).

Thread counts are read from the pool itself and from ``threading.enumerate()`` (the names
the pool gives its threads); waits are polls with generous bounds, never exact timings.
"""

from __future__ import annotations

import threading
import time

import pytest

from sweworld.env import stepping
from sweworld.env.workers import CallTimeout, IdleThreadPool, call_with_deadline, idle_seconds


def _named(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def _wait_until(check, limit: float = 20.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_a_burst_of_work_grows_the_pool_and_idle_threads_exit():
    pool = IdleThreadPool(32, idle_s=0.3, thread_name_prefix="t-burst")
    gate = threading.Event()
    futures = [pool.submit(gate.wait, 10) for _ in range(20)]
    assert _wait_until(lambda: pool.thread_count == 20)  # one thread per blocked call
    assert _named("t-burst") == 20
    gate.set()
    assert all(f.result(10) is True for f in futures)
    assert _wait_until(lambda: pool.thread_count == 0)  # idle past 0.3 s: all gone
    assert _wait_until(lambda: _named("t-burst") == 0)
    # the pool still works after shrinking to nothing, and grows again
    assert pool.submit(lambda x: x * 2, 21).result(10) == 42
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(print)


def test_max_workers_bounds_the_threads_and_every_call_still_runs():
    pool = IdleThreadPool(3, idle_s=0.2, thread_name_prefix="t-bound")
    seen: list[int] = []
    lock = threading.Lock()
    peak = 0

    def work(i: int) -> int:
        nonlocal peak
        with lock:
            peak = max(peak, _named("t-bound"))
            seen.append(i)
        time.sleep(0.01)
        return i

    results = [f.result(20) for f in [pool.submit(work, i) for i in range(60)]]
    assert results == list(range(60)) and sorted(seen) == list(range(60))
    assert peak <= 3
    assert _wait_until(lambda: pool.thread_count == 0)
    pool.shutdown()


def test_exceptions_cancellation_and_shutdown_with_queued_work():
    pool = IdleThreadPool(1, idle_s=5.0, thread_name_prefix="t-shut")
    gate = threading.Event()
    first = pool.submit(gate.wait, 10)
    queued = [pool.submit(lambda: 1) for _ in range(3)]
    failing = pool.submit(lambda: 1 / 0)
    assert queued[0].cancel()  # not started yet: cancelled, never run
    gate.set()
    assert first.result(10) is True
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    assert [f.result(10) for f in queued[1:]] == [1, 1]
    gate.clear()
    pool.submit(gate.wait, 10)
    left = pool.submit(lambda: 2)
    pool.shutdown(wait=False, cancel_futures=True)
    assert left.cancelled()
    gate.set()
    assert _wait_until(lambda: pool.thread_count == 0)


def test_the_process_wide_step_and_async_pools_shrink_when_idle(monkeypatch):
    monkeypatch.setenv("SWEWORLD_WORKER_IDLE_S", "0.3")
    assert idle_seconds() == 0.3
    monkeypatch.setattr(stepping, "_step_workers", None)
    monkeypatch.setattr(stepping, "_async_workers", None)
    steps, asyncs = stepping.step_pool(), stepping.async_pool()
    assert steps.idle_s == asyncs.idle_s == 0.3
    gate = threading.Event()
    futures = [steps.submit(gate.wait, 10) for _ in range(16)]
    futures += [asyncs.submit(gate.wait, 10) for _ in range(16)]
    assert _wait_until(lambda: steps.thread_count == 16 and asyncs.thread_count == 16)
    gate.set()
    assert all(f.result(10) for f in futures)
    assert _wait_until(lambda: steps.thread_count == 0 and asyncs.thread_count == 0)
    steps.shutdown()
    asyncs.shutdown()


def test_idle_seconds_ignores_values_that_are_not_a_positive_number(monkeypatch):
    for bad in ("x", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("SWEWORLD_WORKER_IDLE_S", bad)
        assert idle_seconds() == 60.0
    with pytest.raises(ValueError, match="idle_s"):
        IdleThreadPool(1, idle_s=0)
    with pytest.raises(ValueError, match="max_workers"):
        IdleThreadPool(0)


def test_a_call_past_its_deadline_raises_and_its_thread_is_left_to_finish():
    pool = IdleThreadPool(4, idle_s=0.3, thread_name_prefix="t-deadline")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallTimeout, match=r"the policy's act\(\) did not return within 0.2 s"):
        call_with_deadline(pool, lambda: release.wait(30), 0.2, "the policy's act()")
    assert time.monotonic() - started < 10  # returned at the deadline, not after 30 s
    assert call_with_deadline(pool, lambda: "ok", 5.0, "fast") == "ok"
    assert call_with_deadline(pool, lambda: threading.current_thread(), None, "inline") is (
        threading.current_thread()
    )  # no deadline: on the calling thread
    with pytest.raises(KeyError):
        call_with_deadline(pool, lambda: {}["missing"], 5.0, "raising")
    release.set()
    assert _wait_until(lambda: pool.thread_count == 0)  # the stuck thread ended, then exited
    pool.shutdown()
