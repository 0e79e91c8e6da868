"""Deadlines that stop work: a step's own ``timeout`` reaches every executor (simulated and
real) and the message names it; a policy that never returns ends its rollout, not the pool.

Real sandbox sessions on the toy task; the simulated executor's model is a ReplayLM that
answers after 30 s (a stand-in for a slow model server: the point is what the executor does
with the deadline). Bounds on elapsed time are generous (several times the deadline).
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from sweworld.data.policies import ScriptedPolicy
from sweworld.env import Episode
from sweworld.env.pool import EnvPool
from sweworld.models.replay import ReplayLM
from sweworld.transition.simulated import SimulatedExecutor
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox

SLOW_ANSWER = json.dumps({"stdout": "late\n", "stderr": "", "exit_code": 0})
PYTHON = "python -c 'import stockroom; print(1)'"  # needs the model (not settled exactly)


def _call(command: str) -> str:
    return f"<function=execute_bash>\n<parameter=cmd>{command}</parameter>\n</function>"


@pytest.fixture
def slow_episode(manager, toy_task):
    """An episode whose simulated executor has the default 300 s step deadline and a model
    that takes 30 s."""
    sim = SimulatedExecutor(ReplayLM([SLOW_ANSWER], delay=30.0), step_timeout=300)
    episode = Episode(toy_task, manager=manager, executor=sim, reward="none")
    episode.reset()
    yield episode
    episode.close()


@pytest.mark.parametrize("action", [PYTHON, _call(PYTHON)], ids=["bash", "r2e-call"])
def test_a_step_timeout_stops_a_simulated_command_and_is_named(slow_episode, action):
    started = time.monotonic()
    out = slow_episode.step(action, timeout=2)
    elapsed = time.monotonic() - started
    assert elapsed < 15, elapsed  # the step's 2 s, not the model's 30 s nor the 300 s default
    assert not out.done and out.info["timed_out"] is True
    call = out.info["execution_calls"][0]["info"]
    assert call["timed_out"] is True and call["timeout_s"] <= 2
    assert "did not finish within" in out.observation and "300" not in out.observation
    assert "the step's deadline" in out.observation
    # the episode goes on: a file operation right after is answered at once
    assert "stockroom" in slow_episode.step("ls", timeout=2).observation


def test_a_step_timeout_stops_a_plain_command_and_names_its_own_limit(slow_episode):
    out = slow_episode.step("sleep 30", timeout=1.5)
    assert out.info["timed_out"] is True and out.info["exit_code"] == -1
    assert "did not finish within 1.5 s" in out.observation
    out = slow_episode.step(_call("sleep 30"), timeout=1)
    assert "The command took too long to execute (>1s)" in out.observation


def test_a_step_timeout_stops_a_real_python_run(manager, toy_task):
    episode = Episode(
        toy_task, manager=manager, executor="local", reward="none", observation_format="raw"
    )
    try:
        episode.reset()
        episode.step("python -c 'pass'")  # the task's environment is built here (once)
        started = time.monotonic()
        out = episode.step("python -c 'import time; time.sleep(60)'", timeout=3)
        # stopped, not slept through: a generous bound on a loaded machine, not a timing
        assert time.monotonic() - started < 45
        call = out.info["execution_calls"][0]["info"]
        assert call.get("status") == "timeout", call
        # the step's own limit (about 3 s), not the executor's default 900 s
        within = re.search(r"did not finish within ([0-9.]+) s", out.observation)
        assert within is not None and float(within.group(1)) <= 3.0, out.observation
    finally:
        episode.close()


# ---------------------------------------------------------------------- rollout policy


class _StuckPolicy:
    """Acts once, then never returns (until released at the end of the test)."""

    def __init__(self, release: threading.Event):
        self.release = release
        self.calls = 0

    def reset(self, task, observation) -> None:
        pass

    def act(self, observation):
        self.calls += 1
        if self.calls == 1:
            return "echo started > /testbed/started.txt"
        self.release.wait(120)
        return None


def test_a_policy_that_never_returns_ends_its_rollout_and_the_pool_goes_on(toy_task, manager):
    release = threading.Event()
    policies = iter([_StuckPolicy(release), ScriptedPolicy(["ls", "echo done"])])
    try:
        with EnvPool(
            size=2, executor="none", reward="none", manager=manager, policy_timeout_s=60
        ) as pool:
            started = time.monotonic()
            results = pool.rollout(
                [toy_task, toy_task], lambda: next(policies), policy_timeout_s=1.0
            )
            assert time.monotonic() - started < 30
            assert pool.policy_timeout_s == 60  # the call's own deadline did not change it
    finally:
        release.set()
    # the rollouts run concurrently: which task got the stuck policy is the threads' choice
    stuck, fine = sorted(results, key=lambda r: r.reason != "error")
    assert stuck.reason == "error" and stuck.steps == 1
    assert stuck.error == "the policy's act() did not return within 1 s"
    assert stuck.info["reason"] == "error" and stuck.info["error"] == stuck.error
    assert stuck.trajectory is not None and stuck.trajectory.meta["reason"] == "error"
    assert fine.reason == "policy_stopped" and fine.steps == 2 and fine.error is None


def test_policy_deadlines_are_checked(manager):
    with pytest.raises(ValueError, match="policy_timeout_s"):
        EnvPool(size=1, executor="none", reward="none", manager=manager, policy_timeout_s=0)
    with EnvPool(
        size=1, executor="none", reward="none", manager=manager, policy_timeout_s=None
    ) as pool:
        assert pool.policy_timeout_s is None
        with pytest.raises(ValueError, match="policy_timeout_s"):
            pool.rollout([], lambda: None, policy_timeout_s=float("inf"))
