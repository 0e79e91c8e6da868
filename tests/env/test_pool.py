"""EnvPool: vectorised reset/step, rollouts, threads and asyncio at 64 episodes, isolation."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import threading
from pathlib import Path

import pytest

from sweworld.data.policies import ScriptedPolicy
from sweworld.env import EpisodeFinished, StepOutcome
from sweworld.env.batching import BatchingLM
from sweworld.env.pool import EnvPool, PoolError, RolloutResult
from sweworld.models.replay import ReplayLM
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox

PROJECT = Path(__file__).resolve().parents[2]
FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


@pytest.fixture(scope="module")
def demo_actions() -> list[str]:
    lines = (PROJECT / "data/toy/demo_actions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture
def own_manager(tmp_path):
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=tmp_path / "runtime")
    yield manager
    manager.close_all()


def _children() -> set[int]:
    """Processes whose parent is this process (sandbox servers, their launchers)."""
    me = str(os.getpid())
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            out.add(int(entry))
    return out


def _leftovers(manager) -> list[str]:
    sessions = sorted(p.name for p in manager.sessions_dir.iterdir())
    controls = [
        p.name for p in manager.control_root.iterdir() if p.name.startswith(f"{os.getpid()}-")
    ]
    return sessions + controls


def test_vectorised_reset_and_step_with_skips_and_the_real_reward(toy_task, own_manager):
    with EnvPool(size=2, manager=own_manager, executor="local", reward="real", max_steps=5) as pool:
        first = pool.reset([toy_task, toy_task], seeds=[1, 2])
        assert [info["seed"] for _, info in first] == [1, 2]
        assert all("stockroom" in prompt or "slugify" in prompt for prompt, _ in first)
        out = pool.step(["echo one > /testbed/one.txt", None])
        assert isinstance(out[0], StepOutcome) and out[1] is None
        assert pool.episodes[0].steps == 1 and pool.episodes[1].steps == 0
        out = pool.step([FINISH, FINISH])
        assert all(o.terminated and not o.truncated for o in out)
        assert "one.txt" in out[0].info["patch"] and out[1].info["patch"] == ""
        assert out[0].info["reward"]["source"] == "real"
        assert out[0].info["reason"] == "submitted"
        with pytest.raises(PoolError) as caught:  # a step after the end, in slot 0 only
            pool.step([FINISH, None])
        assert isinstance(caught.value.errors[0], EpisodeFinished)
        with pytest.raises(ValueError, match="expected 2"):
            pool.step([FINISH])
    assert _leftovers(own_manager) == []


def test_rollout_of_the_demo_resolves_the_toy_task(toy_task, own_manager, demo_actions):
    with EnvPool(
        size=2, manager=own_manager, executor="local", reward="real", max_steps=20
    ) as pool:
        results = pool.rollout([toy_task] * 3, lambda: ScriptedPolicy(demo_actions))
    assert [r.reason for r in results] == ["submitted"] * 3
    assert all(isinstance(r, RolloutResult) and r.resolved and r.reward == 1.0 for r in results)
    assert all(r.steps == len(demo_actions) for r in results)
    assert all("slug.strip(separator)" in r.patch for r in results)
    assert len(results[0].trajectory.steps) == len(demo_actions)
    assert results[0].info["reward"]["evidence"]["real"]["resolved"] is True
    assert _leftovers(own_manager) == []


def test_64_episodes_from_64_threads_no_cross_talk_no_leak(toy_task, tmp_path):
    """The acceptance test: each episode writes its own marker, sees only its own, and its
    patch holds only its own; after close no session folder and no process is left."""
    from sweworld.sandbox.manager import SessionManager

    before = _children()
    manager = SessionManager(runtime_root=tmp_path / "runtime")
    size = 64
    pool = EnvPool(size=size, manager=manager, executor="none", reward="none", max_steps=10)
    try:
        pool.reset([toy_task] * size)
        # All 64 first steps must be in flight at the same moment (a barrier of 64 threads).
        barrier = threading.Barrier(size, timeout=60)
        threads: set[str] = set()
        lock = threading.Lock()

        def together(step):
            def run(action):
                with lock:
                    threads.add(threading.current_thread().name)
                if action.startswith("echo token"):
                    barrier.wait()
                return step(action)

            return run

        for ep in pool.episodes:
            ep.step = together(ep.step)  # type: ignore[method-assign]
        tokens = [f"token-{i}-{os.urandom(4).hex()}" for i in range(size)]
        pool.step([f"echo {t} > /testbed/marker_{i}.txt" for i, t in enumerate(tokens)])
        listed = pool.step(["ls /testbed; cat /testbed/marker_*.txt"] * size)
        for i, outcome in enumerate(listed):
            markers = [w for w in outcome.observation.split() if w.startswith("marker_")]
            assert markers == [f"marker_{i}.txt"], (i, outcome.observation)
            assert tokens[i] in outcome.observation
            assert sum(t in outcome.observation for t in tokens) == 1
        final = pool.step([FINISH] * size)
        patches = [o.info["patch"] for o in final]
        assert len(set(patches)) == size
        for i, patch in enumerate(patches):
            assert f"marker_{i}.txt" in patch and tokens[i] in patch
            assert set(re.findall(r"marker_\d+", patch)) == {f"marker_{i}"}
        assert len(threads) == size and not barrier.broken
    finally:
        pool.close()
    assert manager.sessions == []
    assert _leftovers(manager) == []
    assert _children() - before == set()
    manager.close_all()


def test_asyncio_64_episodes_in_one_loop(toy_task, own_manager):
    size = 64

    async def main(pool: EnvPool) -> list[StepOutcome]:
        await pool.areset([toy_task] * size)
        out = await pool.astep(
            [f"echo {i} > /testbed/n.txt && cat /testbed/n.txt" for i in range(size)]
        )
        for i, outcome in enumerate(out):
            assert f"\n{i}\n" in outcome.observation
        return await pool.astep([FINISH] * size)

    with EnvPool(size=size, manager=own_manager, executor="none", reward="none") as pool:
        final = asyncio.run(main(pool))
    assert all(o.terminated for o in final)
    assert len({o.info["patch"] for o in final}) == size
    assert _leftovers(own_manager) == []


class _Flaky:
    """A policy that raises at its second action (a bug in one agent)."""

    def reset(self, task, first_observation):
        self.n = 0

    def act(self, observation):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("policy bug")
        return "echo flaky > /testbed/flaky.txt"


def test_a_failing_episode_does_not_affect_the_others(toy_task, own_manager, demo_actions):
    counter = itertools.count()

    def factory():
        return _Flaky() if next(counter) == 1 else ScriptedPolicy(demo_actions)

    bad_row = {"instance_id": "broken"}  # a task row missing its fields
    with EnvPool(size=3, manager=own_manager, executor="local", reward="real") as pool:
        results = pool.rollout([toy_task, toy_task, bad_row, toy_task], factory)
    reasons = [r.reason for r in results]
    assert reasons.count("error") == 2 and reasons.count("submitted") == 2
    errors = [r.error for r in results if r.reason == "error"]
    assert any("policy bug" in e for e in errors)
    assert any("repo" in e or "field" in e for e in errors)
    assert all(r.resolved for r in results if r.reason == "submitted")
    assert all("flaky" not in r.patch for r in results if r.reason == "submitted")
    assert _leftovers(own_manager) == []


def test_a_policy_that_stops_early_is_not_scored(toy_task, own_manager):
    with EnvPool(size=1, manager=own_manager, executor="none", reward="real") as pool:
        [result] = pool.rollout([toy_task], lambda: ScriptedPolicy(["echo x > /testbed/x.txt"]))
    assert result.reason == "policy_stopped" and result.steps == 1
    assert "x.txt" in result.patch and result.resolved is None


def test_max_steps_truncates_rollouts(toy_task, own_manager):
    with EnvPool(size=2, manager=own_manager, executor="none", reward="none") as pool:
        results = pool.rollout([toy_task] * 2, lambda: ScriptedPolicy(["true"] * 10), max_steps=3)
    assert [(r.reason, r.steps) for r in results] == [("max_steps", 3)] * 2
    assert pool.config.max_steps == 50  # the pool's own config is untouched


def test_simulated_pool_shares_one_batched_model(toy_task, own_manager):
    answer = json.dumps({"stdout": "simulated hello\n", "stderr": "", "exit_code": 0})
    lm = ReplayLM(lambda messages: answer, delay=0.05)
    size = 8
    with EnvPool(size=size, manager=own_manager, lm=lm, executor="simulated", reward="none",
                 batch_wait_s=0.02) as pool:  # fmt: skip
        assert isinstance(pool.lm, BatchingLM) and pool.lm.wrapped is lm
        assert all(ep.executor is pool.executor for ep in pool.episodes)
        assert pool.executor.lm is pool.lm
        pool.reset([toy_task] * size)
        slug = "python -c 'from stockroom.textutil import slugify; print(slugify(\"{}\"))'"
        out = pool.step([slug.format(i) for i in range(size)])  # not computable: the model
        assert all("simulated hello" in o.observation for o in out)
        stats = pool.lm.stats
        assert stats.requests >= size
        assert stats.batches < stats.requests and stats.largest_batch > 1
    assert lm.calls  # the caller's model is not closed by the pool, and was used
    assert lm.generate([lm.calls[0]])[0][0].text == answer


def test_closed_pool_and_bad_sizes(toy_task, own_manager):
    with pytest.raises(ValueError, match="size"):
        EnvPool(size=0, manager=own_manager, executor="none")
    pool = EnvPool(size=1, manager=own_manager, executor="none", reward="none")
    pool.close()
    pool.close()
    with pytest.raises(Exception, match="closed"):
        pool.reset([toy_task])
