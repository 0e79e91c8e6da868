"""Hostile input for the rollout machinery: EnvPool, BatchingLM, WarmSessions under
concurrency, closing at bad moments, models that hang, and per-slot lists that are not."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sweworld.env import batching
from sweworld.env.batching import BatchingLM
from sweworld.env.pool import EnvPool
from sweworld.env.warm import WarmSessions
from sweworld.models.base import BaseLM, Generation, GenerationRequest, LMError
from tests.conftest import requires_sandbox

REQUEST = GenerationRequest(messages=[{"role": "user", "content": "hello"}])


class HangingLM(BaseLM):
    """A real LM whose calls never return until ``release`` is set."""

    name = "hanging"
    context_window = 4096

    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Event()

    def generate(self, requests):
        self.entered.set()
        self.release.wait()
        return [[Generation(text="late", model=self.name)] for _ in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.fixture
def manager(tmp_path):
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=tmp_path / "runtime")
    yield manager
    manager.close_all()


# ---------------------------------------------------------------------- BatchingLM


def test_close_with_a_model_that_never_returns_answers_its_callers_and_returns(monkeypatch):
    monkeypatch.setattr(batching, "CLOSE_WAIT_S", 0.5)
    lm = HangingLM()
    wrapper = BatchingLM(lm, timeout_s=60.0)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            wrapper.generate([REQUEST])
        except BaseException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert lm.entered.wait(5)
    closer = threading.Thread(target=wrapper.close, daemon=True)
    started = time.monotonic()
    closer.start()
    caller.join(2)
    closer.join(5)
    try:
        assert not caller.is_alive(), "the caller waited for the hung model after close"
        assert not closer.is_alive(), "close() hung on a model call that never returns"
        assert time.monotonic() - started < 3
        assert len(errors) == 1 and isinstance(errors[0], LMError)
        assert "closed" in str(errors[0])
    finally:
        lm.release.set()
    with pytest.raises(LMError, match="closed"):
        wrapper.generate([REQUEST])


def test_infinite_deadlines_are_refused_or_mean_no_budget():
    lm = HangingLM()
    lm.release.set()
    with pytest.raises(ValueError):
        BatchingLM(lm, timeout_s=float("inf"))
    with pytest.raises(ValueError):
        BatchingLM(lm, batch_wait_s=float("nan"))
    with BatchingLM(lm, timeout_s=5.0) as wrapper:  # a caller's inf budget: the wrapper's own
        assert wrapper.generate([REQUEST], max_time=float("inf"))[0][0].text == "late"
        assert wrapper.generate([REQUEST], max_time=float("nan"))[0][0].text == "late"


# ---------------------------------------------------------------------- EnvPool


@requires_sandbox
def test_a_string_is_not_a_list_of_per_slot_actions(toy_task, manager):
    with EnvPool(size=2, manager=manager, executor="none", reward="none") as pool:
        for bad in ("ls", b"ls", {0: "ls", 1: "ls"}, 7):
            with pytest.raises(TypeError, match="one item per slot"):
                pool.reset(bad)
        pool.reset(iter([toy_task, toy_task]))  # any other iterable is one item per slot
        for bad in ("ls", b"ls", {"a": 1, "b": 2}):
            with pytest.raises(TypeError, match="one item per slot"):
                pool.step(bad)
        assert [ep.steps for ep in pool.episodes] == [0, 0]  # nothing ran
        out = pool.step(a for a in ("true", None))
        assert out[0] is not None and out[1] is None


class _SlowStopper:
    """Thinks 0.2 s, then stops."""

    def reset(self, task, observation):
        pass

    def act(self, observation):
        time.sleep(0.2)
        return None


@requires_sandbox
def test_close_during_a_rollout_stops_it_and_frees_every_session(toy_task, manager):
    pool = EnvPool(size=2, manager=manager, executor="local", reward="none")
    results: list = []
    runner = threading.Thread(
        target=lambda: results.extend(pool.rollout([toy_task] * 40, _SlowStopper))
    )
    runner.start()
    time.sleep(0.6)
    started = time.monotonic()
    pool.close()
    closed_in = time.monotonic() - started
    runner.join(10)
    assert not runner.is_alive()
    assert closed_in < 5, f"close() ran the remaining rollouts first ({closed_in:.1f} s)"
    assert len(results) == 40
    stopped = [r for r in results if r.reason == "error"]
    assert len(stopped) >= 30 and all("closed" in (r.error or "") for r in stopped)
    assert all(r.instance_id == toy_task.instance_id for r in results)
    assert not manager.sessions and not list(manager.sessions_dir.iterdir())
    with pytest.raises(Exception, match="closed"):
        pool.rollout([toy_task], _SlowStopper)


@requires_sandbox
def test_pool_cycles_leak_no_fds_threads_or_sessions(toy_task, manager):
    def cycle() -> None:
        with EnvPool(size=4, manager=manager, executor="local", reward="none") as pool:
            pool.reset([toy_task] * 4)
            pool.step(["echo hi"] * 4)

    cycle()
    fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    for _ in range(10):
        cycle()
    assert len(os.listdir("/proc/self/fd")) <= fds + 2
    assert threading.active_count() <= threads + 2
    assert not manager.sessions and not list(manager.sessions_dir.iterdir())


# ---------------------------------------------------------------------- WarmSessions


@requires_sandbox
@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_closing_a_warm_pool_while_it_measures_leaves_no_session(toy_task, manager, delay):
    warm = WarmSessions(manager, tasks=[toy_task], per_task=2)
    time.sleep(delay)
    warm.close()
    assert warm.warm_count == 0
    assert not manager.sessions, "sessions opened by the refill thread outlived close()"


@requires_sandbox
def test_a_failed_second_open_while_measuring_frees_the_first(toy_task, manager):
    opened = []
    real_open = manager.open

    def flaky_open(task, **options):
        if opened:
            raise OSError("no space left on device")
        session = real_open(task, **options)
        opened.append(session)
        return session

    manager.open = flaky_open
    with WarmSessions(manager, per_task=2, refill=False) as warm:
        with pytest.raises(OSError):
            warm.measure(toy_task)
        assert opened and opened[0].closed
        assert not manager.sessions


@requires_sandbox
def test_a_warm_pool_with_its_own_manager_runs_the_pools_executor(toy_task, manager):
    import json

    from sweworld.models.replay import ReplayLM

    answer = json.dumps({"stdout": "simulated hello\n", "stderr": "", "exit_code": 0})
    lm = ReplayLM(lambda messages: answer)
    with WarmSessions(manager, per_task=1) as warm:
        warm.add(toy_task)
        warm.fill(timeout=30)  # opened before any pool: on the manager's default executor
        with EnvPool(size=1, lm=lm, executor="simulated", reward="none", warm=warm) as pool:
            pool.reset([toy_task])
            assert pool.episodes[0].session.executor is pool.executor
            # not computable without running it: the model answers when simulated
            [out] = pool.step(["python -c 'from stockroom.textutil import slugify; print(1)'"])
            assert "simulated hello" in out.observation, out.observation


def test_a_warm_budget_must_be_finite():
    for budget in (float("inf"), float("nan"), 0, -1):
        with pytest.raises(ValueError, match="memory_budget_mb"):
            WarmSessions(memory_budget_mb=budget)
