"""RayEnvPool on a local Ray cluster started by this module (one cluster for all tests)."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from sweworld.data.policies import ScriptedPolicy  # noqa: E402
from sweworld.env import EpisodeBusy, EpisodeError, EpisodeFinished, StepOutcome  # noqa: E402
from sweworld.env.pool import PoolError, RolloutResult  # noqa: E402
from sweworld.env.ray_pool import RayEnvPool  # noqa: E402
from tests.conftest import requires_sandbox  # noqa: E402

pytestmark = [pytest.mark.slow, requires_sandbox]

PROJECT = Path(__file__).resolve().parents[2]
FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


@pytest.fixture(scope="module")
def cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def demo_actions() -> list[str]:
    lines = (PROJECT / "data/toy/demo_actions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _sessions_left(runtime_root: Path) -> list[str]:
    folder = runtime_root / "sessions"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _step_scripts(pool: RayEnvPool, scripts: list[list[str]]) -> list[StepOutcome]:
    """Step each slot through its script (None once it is done); the last outcome per slot."""
    last: list[StepOutcome | None] = [None] * pool.size
    for turn in range(max(map(len, scripts))):
        actions = [
            s[turn] if turn < len(s) and not pool.episodes[i].done else None
            for i, s in enumerate(scripts)
        ]
        for slot, outcome in enumerate(pool.step(actions)):
            if actions[slot] is None:
                assert outcome is None
            else:
                assert isinstance(outcome, StepOutcome)
                last[slot] = outcome
    assert all(outcome is not None for outcome in last)
    return last  # type: ignore[return-value]


def test_episodes_on_two_actors_are_graded_with_their_own_patches(
    cluster, toy_task, demo_actions, tmp_path
):
    """4 episodes on 2 actors: slots 0 and 2 run the demo fix, 1 and 3 an edit of their own;
    each gets its own patch and the real reward grades it."""
    runtime = tmp_path / "runtime"
    scripts = []
    for slot in range(4):
        if slot % 2 == 0:
            scripts.append(demo_actions)
        else:
            scripts.append([f"echo '# slot {slot}' >> stockroom/textutil.py", FINISH])
    with RayEnvPool(
        size=4,
        n_actors=2,
        executor="local",
        reward="real",
        max_steps=20,
        manager={"runtime_root": runtime},
    ) as pool:
        assert pool.n_actors == 2
        resets = pool.reset([toy_task] * 4, seeds=[0, 1, 2, 3])
        ids = [info["episode_id"] for _, info in resets]
        assert len(set(ids)) == 4
        assert [i.split(".")[0] for i in ids] == ["a0", "a1", "a0", "a1"]  # slot i -> actor i % 2
        assert all(
            "stockroom" in prompt or toy_task.problem_statement[:40] in prompt
            for prompt, _ in resets
        )
        assert pool.live_sessions() == 4
        last = _step_scripts(pool, scripts)
        for slot, outcome in enumerate(last):
            assert outcome.terminated and not outcome.truncated
            info = outcome.info
            assert info["reason"] == "submitted", info
            assert info["episode_id"] == ids[slot]
            if slot % 2 == 0:
                assert info["reward"]["resolved"] is True and outcome.reward == 1.0
                assert "strip(separator)" in info["patch"] and "# slot" not in info["patch"]
            else:
                assert info["reward"]["resolved"] is False and outcome.reward == 0.0
                assert f"# slot {slot}" in info["patch"]
                assert f"# slot {4 - slot}" not in info["patch"]  # no cross-talk (1 vs 3)
                assert "strip(separator)" not in info["patch"]
        assert [e.reason for e in pool.episodes] == ["submitted"] * 4
        again = pickle.loads(pickle.dumps(last[0]))  # outcomes cross processes as they are
        assert isinstance(again, StepOutcome) and tuple(again) == tuple(last[0])
        assert pool.episodes[0].steps == len(demo_actions)
        assert pool.episodes[0].trajectory().submission == last[0].info["patch"]
        assert pool.live_sessions() == 0  # sessions are freed when episodes end
        actors = list(pool._actors.handles)
    assert _sessions_left(runtime) == []
    for actor in actors:  # close() killed the actors
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.live_sessions.remote(), timeout=30)


def test_bad_input_gives_clear_errors(cluster, toy_task, tmp_path):
    runtime = tmp_path / "runtime"
    pool = RayEnvPool(
        size=2, n_actors=2, executor="none", reward="none", max_steps=3,
        manager={"runtime_root": runtime},
    )  # fmt: skip
    try:
        with pytest.raises(PoolError, match="reset\\(\\) before step") as caught:
            pool.step(["ls", "ls"])
        assert sorted(caught.value.errors) == [0, 1]
        with pytest.raises(ValueError, match="expected 2 items \\(one per slot\\), got 3"):
            pool.reset([toy_task] * 3)
        row = toy_task.to_row()
        del row["repo"]
        with pytest.raises(PoolError, match="repo") as caught:  # refused before it is sent
            pool.reset([toy_task, row])
        assert list(caught.value.errors) == [1] and caught.value.results[0] is not None
        with pytest.raises(TypeError, match="one item per slot"):
            pool.step("ls")
        with pytest.raises(ValueError, match="unknown executor"):
            RayEnvPool(size=1, executor="no-such-executor")
        pool.reset([toy_task, toy_task])
        with pytest.raises(ValueError, match="expected 2 items"):
            pool.step(["ls"])
        out = pool.step(["ls", None])
        assert out[1] is None and not out[0].done and "stockroom" in out[0].observation
        pool.step(["ls", None])
        end = pool.step(["ls", None])[0]  # slot 0 reaches its limit while slot 1 waits
        assert end.truncated and end.info["reason"] == "max_steps"
        with pytest.raises(PoolError, match="slot 0: its episode ended") as caught:
            pool.step(["ls", "ls"])
        assert isinstance(caught.value.errors[0], EpisodeFinished)
        assert caught.value.results[1].info["step"] == 1  # the other slot stepped

        async def go():
            await pool.areset([toy_task, toy_task])
            return await pool.astep(["echo hi", FINISH])

        first, second = asyncio.run(go())
        assert "hi" in first.observation and not first.done
        assert second.terminated and second.info["reason"] == "submitted"
    finally:
        pool.close()
    assert _sessions_left(runtime) == []
    with pytest.raises(EpisodeError, match="closed"):
        pool.reset([toy_task, toy_task])


class _Flaky:
    """A policy that raises at its second action (a bug in one agent)."""

    def reset(self, task, first_observation):
        self.n = 0

    def act(self, observation):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("policy bug")
        return "echo flaky > /testbed/flaky.txt"


def test_rollouts_run_policies_here_and_episodes_in_actors(
    cluster, toy_task, demo_actions, tmp_path
):
    runtime = tmp_path / "runtime"
    policies = iter(
        [ScriptedPolicy(demo_actions), _Flaky(), ScriptedPolicy(["echo x > /testbed/x.txt"])]
    )
    bad_row = {"instance_id": "broken"}  # a task row missing its fields
    with RayEnvPool(
        size=2, n_actors=2, executor="local", reward="real", manager={"runtime_root": runtime}
    ) as pool:
        results = pool.rollout([toy_task, bad_row, toy_task, toy_task], lambda: next(policies))
        assert pool.live_sessions() == 0
        assert not any(e.started for e in pool.episodes)  # the slots are left as they were
    assert _sessions_left(runtime) == []
    assert all(isinstance(r, RolloutResult) for r in results)
    solved, broken, flaky, stopped = results
    assert solved.reason == "submitted" and solved.resolved is True and solved.reward == 1.0
    assert solved.steps == len(demo_actions) and "strip(separator)" in solved.patch
    assert solved.trajectory.submission == solved.patch and "flaky" not in solved.patch
    assert broken.reason == "error" and "repo" in broken.error
    assert flaky.reason == "error" and "policy bug" in flaky.error and flaky.steps == 1
    assert stopped.reason == "policy_stopped" and stopped.resolved is None
    assert "x.txt" in stopped.patch and stopped.steps == 1


def test_a_failed_or_slow_actor_ends_its_episodes_never_hangs(cluster, toy_task, tmp_path):
    runtime = tmp_path / "runtime"
    with RayEnvPool(
        size=2,
        n_actors=2,
        executor="none",
        reward="none",
        max_steps=5,
        manager={"runtime_root": runtime},
        call_timeout_s=60.0,
    ) as pool:
        pool.reset([toy_task, toy_task])
        ray.kill(pool._actors.handles[1], no_restart=True)  # actor 1 dies (node lost, OOM, ...)
        alive, dead = pool.step(["ls", "ls"])
        assert not alive.done
        assert dead.terminated and dead.info["reason"] == "error"
        assert "actor 1 failed" in dead.info["error"]
        pool.call_timeout_s = 2.0
        slow, _ = pool.step(["sleep 8", None])  # overruns the 2 s call deadline
        pool.call_timeout_s = 60.0
        assert slow.terminated and slow.info["reason"] == "error"
        assert "did not answer within 2 s" in slow.info["error"]
        # the slots start again on fresh actors
        pool.reset([toy_task, toy_task])
        out = pool.step(["ls", FINISH])
        assert "stockroom" in out[0].observation and out[1].info["reason"] == "submitted"
        # actor 0 is killed with a live session: close collects it
        ray.kill(pool._actors.handles[0], no_restart=True)
    assert _sessions_left(runtime) == []


def test_actors_send_execution_to_a_model_endpoint(cluster, toy_task, tmp_path):
    """executor="simulated" with model "openai:URL#MODEL": every actor asks one server (a
    real HTTP server speaking the OpenAI chat API, standing in for vLLM)."""
    from sweworld.models import ReplayLM
    from tests.model_fixtures import ChatServer

    answer = json.dumps({"stdout": "served by the endpoint\n", "stderr": "", "exit_code": 0})
    server = ChatServer(ReplayLM(lambda messages: answer))
    runtime = tmp_path / "runtime"
    slug = "python -c 'from stockroom.textutil import slugify; print(slugify(\"{}\"))'"
    try:
        with RayEnvPool(
            size=4, n_actors=2, executor="simulated", lm=f"openai:{server.url}#swt",
            reward="none", manager={"runtime_root": runtime},
        ) as pool:  # fmt: skip
            assert pool.config.model == f"openai:{server.url}#swt"
            pool.reset([toy_task] * 4)
            out = pool.step([slug.format(i) for i in range(4)])  # not computable: the model
            assert all("served by the endpoint" in o.observation for o in out), out
            assert all(o.info["execution_calls"] for o in out)
        assert server.count >= 4 and {b["model"] for b in server.bodies} == {"swt"}
    finally:
        server.close()
    assert _sessions_left(runtime) == []


def test_one_call_of_a_pool_at_a_time(cluster, toy_task, tmp_path):
    with RayEnvPool(
        size=1, executor="none", reward="none", manager={"runtime_root": tmp_path / "rt"}
    ) as pool:
        pool.reset([toy_task])

        async def two_at_once():
            return await asyncio.gather(
                pool.astep(["sleep 1"]), pool.astep(["ls"]), return_exceptions=True
            )

        first, second = asyncio.run(two_at_once())
        assert isinstance(first[0], StepOutcome) and first[0].info["exit_code"] == 0
        assert isinstance(second, EpisodeBusy)


def test_each_actor_keeps_its_own_warm_sessions(cluster, toy_task, tmp_path):
    import time

    from sweworld.env.warm import WarmSessions

    runtime = tmp_path / "runtime"
    with pytest.raises(ValueError, match="unbound"):
        RayEnvPool(size=1, executor="none", warm=WarmSessions(object()))
    template = WarmSessions(per_task=1, memory_budget_mb=512)
    with RayEnvPool(
        size=2, n_actors=2, executor="none", reward="none", warm=template,
        manager={"runtime_root": runtime},
    ) as pool:  # fmt: skip
        pool.reset([toy_task, toy_task])  # cold: the actors learn the task
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(s["warm"] for s in pool.warm_stats()):
            time.sleep(0.2)
        pool.reset([toy_task, toy_task])  # warm
        stats = pool.warm_stats()
        assert [s["misses"] for s in stats] == [1, 1] and [s["hits"] for s in stats] == [1, 1]
        assert all(s["capacity"] >= 1 for s in stats)
        out = pool.step(["ls", FINISH])
        assert "stockroom" in out[0].observation and out[1].info["reason"] == "submitted"
    assert template.manager is None  # the template itself stays unbound
    assert _sessions_left(runtime) == []


def test_an_action_ray_cannot_send_fails_its_own_slot_or_rollout(cluster, toy_task, tmp_path):
    import threading

    unsendable = {"name": "bash", "arguments": {"command": threading.Lock()}}

    class _Unsendable:
        """Steps once, then answers with an action that cannot be pickled."""

        def reset(self, task, first_observation):
            self.n = 0

        def act(self, observation):
            self.n += 1
            return "ls" if self.n == 1 else unsendable

    runtime = tmp_path / "runtime"
    with RayEnvPool(
        size=2, n_actors=2, executor="none", reward="none", manager={"runtime_root": runtime}
    ) as pool:
        pool.reset([toy_task, toy_task])
        with pytest.raises(PoolError, match="cannot be sent") as caught:
            pool.step([unsendable, "ls"])
        assert list(caught.value.errors) == [0] and isinstance(caught.value.errors[0], TypeError)
        assert caught.value.results[1].info["step"] == 1  # the other slot stepped
        assert [e.steps for e in pool.episodes] == [0, 1]
        results = pool.rollout([toy_task, toy_task], _Unsendable)
        assert [(r.reason, r.steps) for r in results] == [("error", 1), ("error", 1)]
        assert all("cannot be sent" in r.error for r in results)
        assert pool.live_sessions() == 2  # the slots' own; the rollouts' episodes are gone
    assert _sessions_left(runtime) == []


class _Stuck:
    """Acts once, then never returns (until the test releases it)."""

    def __init__(self, release) -> None:
        self.release = release

    def reset(self, task, first_observation):
        self.n = 0

    def act(self, observation):
        self.n += 1
        if self.n == 1:
            return "echo stuck > /testbed/stuck.txt"
        self.release.wait(120)
        return None


def test_a_policy_that_never_returns_ends_its_rollout_and_the_others_go_on(
    cluster, toy_task, tmp_path
):
    import threading
    import time

    release = threading.Event()
    policies = iter([_Stuck(release), ScriptedPolicy(["ls", "echo fine > /testbed/fine.txt"])])
    runtime = tmp_path / "runtime"
    try:
        with RayEnvPool(
            size=2,
            n_actors=1,
            executor="none",
            reward="none",
            manager={"runtime_root": runtime},
            policy_timeout_s=2.0,
        ) as pool:
            started = time.monotonic()
            stuck, fine = pool.rollout([toy_task, toy_task], lambda: next(policies))
            assert time.monotonic() - started < 60
            assert pool.live_sessions() == 0
    finally:
        release.set()
    assert _sessions_left(runtime) == []
    assert stuck.reason == "error" and stuck.steps == 1
    assert stuck.error == "CallTimeout: the policy's act() did not return within 2 s"
    assert fine.reason == "policy_stopped" and fine.steps == 2 and "fine.txt" in fine.patch
