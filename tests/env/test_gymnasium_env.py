"""The Gymnasium adapter, driven by gymnasium's own make, checker, wrappers and vector env."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.wrappers import TimeLimit  # noqa: E402

from sweworld.env import EpisodeError, EpisodeFinished  # noqa: E402
from sweworld.env.gymnasium_env import (  # noqa: E402
    ENV_ID,
    SWEWorldEnv,
    UnicodeText,
    split_measurements,
)
from sweworld.env.gymnasium_wrappers import DenseReward, ShapedOutcome  # noqa: E402
from tests.conftest import PROJECT, requires_sandbox  # noqa: E402

pytestmark = requires_sandbox

FAST = {"executor": "none", "reward": "none"}
SUBMIT = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"
#: The one warning check_env gives for any env made by gymnasium.make (CartPole too): the
#: made env is wrapped (OrderEnforcing, PassiveEnvChecker).
WRAPPED_WARNING = "is different from the unwrapped version"


def demo_actions() -> list[str]:
    lines = (PROJECT / "data/toy/demo_actions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def checked(env) -> list[str]:
    """Run check_env on ``env``; the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught]


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_sweworld_registers_the_id_without_importing_gymnasium():
    # gymnasium imported after sweworld: the import hook registers the id
    out = run_python(
        "import sys, sweworld\n"
        "assert 'gymnasium' not in sys.modules\n"
        "import gymnasium\n"
        f"env = gymnasium.make({ENV_ID!r}, task='sweworld__stockroom-1', executor='none')\n"
        "print(type(env.unwrapped).__name__, env.spec.max_episode_steps)\n"
        "env.close()\n"
    )
    assert out.split() == ["SWEWorldEnv", "None"]  # no time limit in the registration
    # gymnasium imported first
    out = run_python(
        "import gymnasium\n"
        f"assert {ENV_ID!r} not in gymnasium.envs.registry\n"
        "import sweworld\n"
        f"print(gymnasium.envs.registry[{ENV_ID!r}].entry_point)\n"
    )
    assert out.strip() == "sweworld.env.gymnasium_env:SWEWorldEnv"


def test_check_env_passes_without_fixable_warnings(toy_task):
    env = gymnasium.make(ENV_ID, task=toy_task, **FAST)
    try:
        caught = checked(env)
        assert [w for w in caught if WRAPPED_WARNING not in w] == []
        assert checked(env.unwrapped) == []  # the env itself: not one warning
    finally:
        env.close()


def test_check_env_with_real_execution_and_reward(toy_task):
    env = gymnasium.make(ENV_ID, task=toy_task, executor="local", reward="real")
    try:
        assert [w for w in checked(env) if WRAPPED_WARNING not in w] == []
    finally:
        env.close()


def test_check_env_with_the_defaults(toy_task):
    """The acceptance line: the outcome world, SWR reward (random actions are one word,
    answered by the sandbox: no model call)."""
    env = gymnasium.make(ENV_ID, task=toy_task)
    try:
        assert env.unwrapped.config.executor == "outcome"
        assert env.unwrapped.config.reward == "swr"
        assert [w for w in checked(env) if WRAPPED_WARNING not in w] == []
    finally:
        env.close()


def test_shared_backends_survive_gymnasium_spec_copies(toy_task, tmp_path):
    """gymnasium deep-copies specs (wrappers, check_env's re-makes): a shared manager and
    executor are shared by the copies, not copied."""
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.registry import make_executor

    manager = SessionManager(runtime_root=tmp_path)
    executor = make_executor("none")
    env = DenseReward(
        gymnasium.make(ENV_ID, task=toy_task, manager=manager, executor=executor, reward="none")
    )
    try:
        assert [w for w in checked(env) if WRAPPED_WARNING not in w] == []
        again = gymnasium.make(env.spec)  # the wrappers come back too
        assert isinstance(again, DenseReward)
        assert again.unwrapped.episode.manager is manager
        assert again.unwrapped.episode.executor is executor
        assert len(manager.sessions) == 1  # check_env closed the envs it made; env is live
        again.reset()
        assert len(manager.sessions) == 2
        again.close()
        env.close()
        assert manager.sessions == []
    finally:
        env.close()
        manager.close_all()


def test_spaces_hold_any_text_within_the_bounds(toy_task):
    env = SWEWorldEnv(toy_task, max_observation_chars=500, max_action_chars=300, **FAST)
    try:
        assert env.observation_space == UnicodeText(500, min_length=0)
        assert "héllo ✓ \x00 日本" in env.observation_space
        assert "x" * 501 not in env.observation_space
        assert "" not in env.action_space and b"ls" not in env.action_space
        env.action_space.seed(0)
        assert env.action_space.sample() in env.action_space
        obs, _ = env.reset()  # the prompt is longer than 500 characters: cut to the bound
        assert obs in env.observation_space
        obs, *_ = env.step("printf '%0.s日' $(seq 2000)")
        assert obs in env.observation_space and "日" in obs
    finally:
        env.close()


def test_time_limit_wrapper_truncates(toy_task):
    env = TimeLimit(gymnasium.make(ENV_ID, task=toy_task, **FAST), max_episode_steps=2)
    try:
        env.reset(seed=0)
        _, _, terminated, truncated, info = env.step("ls")
        assert (terminated, truncated) == (False, False)
        _, reward, terminated, truncated, info = env.step("ls")
        assert (terminated, truncated) == (False, True)
        assert "reward" not in info  # cut from outside: the episode itself was not graded
        shaped = ShapedOutcome(TimeLimit(gymnasium.make(ENV_ID, task=toy_task, **FAST), 1))
        try:
            shaped.reset()
            _, reward, _, truncated, info = shaped.step("ls")
            assert truncated and info["shaped_outcome"] == "timeout"
            assert reward == pytest.approx(shaped.timeout) and shaped.timeout < 0
        finally:
            shaped.close()
    finally:
        env.close()


def test_dense_reward_adds_the_step_signal(toy_task):
    env = DenseReward(gymnasium.make(ENV_ID, task=toy_task, executor="local", reward="none"))
    try:
        env.reset()
        _, reward, *_, info = env.step("ls")
        assert info["signals"]["dense"] == pytest.approx(-0.01) and reward == pytest.approx(-0.01)
        # running the task's tests raises the fraction seen passing: a positive signal
        _, reward, *_, info = env.step("python -m pytest -rA tests/test_textutil.py")
        assert info["signals"]["tests_delta"] > 0
        assert reward == pytest.approx(info["signals"]["dense"]) and reward > 0
    finally:
        env.close()
    custom = DenseReward(gymnasium.make(ENV_ID, task=toy_task, **FAST), step_penalty=0.25)
    try:
        custom.reset()
        assert custom.step("ls")[1] == pytest.approx(-0.25)
    finally:
        custom.close()
    with pytest.raises(ValueError, match="dense=True"):
        DenseReward(SWEWorldEnv(toy_task, dense=True, **FAST))


def test_reset_options_switch_tasks(toy_tasks):
    env = SWEWorldEnv(toy_tasks[0], **FAST)
    try:
        _, info = env.reset()
        assert info["instance_id"] == toy_tasks[0].instance_id
        prompt, info = env.reset(options={"task": toy_tasks[1].to_row()})
        assert info["instance_id"] == toy_tasks[1].instance_id
        assert toy_tasks[1].problem_statement.strip()[:60] in prompt
        _, info = env.reset()  # keeps the task it was switched to
        assert info["instance_id"] == toy_tasks[1].instance_id
        _, info = env.reset(options={"task": toy_tasks[2].instance_id})  # by instance id
        assert info["instance_id"] == toy_tasks[2].instance_id
        assert env.step("git log --oneline")[0].count("\n") >= 1
    finally:
        env.close()


def test_tasks_file_draws_a_task_per_reset_from_the_seed():
    env = SWEWorldEnv(tasks_file=str(PROJECT / "data/toy/tasks.jsonl"), **FAST)
    try:
        first = env.reset(seed=7)[1]["instance_id"]
        assert env.reset(seed=7)[1]["instance_id"] == first
        drawn = {env.reset()[1]["instance_id"] for _ in range(12)}
        assert len(drawn) > 1
    finally:
        env.close()


def test_bad_input_is_a_clear_error(toy_task):
    env = SWEWorldEnv(**FAST)
    try:
        with pytest.raises(EpisodeError, match="needs a task"):
            env.reset()
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(options={"tsak": toy_task})
        with pytest.raises(ValueError):
            env.reset(options={"task": {"instance_id": "x"}})  # a row missing fields
        with pytest.raises(KeyError, match="did you mean"):
            env.reset(options={"task": "sweworld__stockroom-9"})
        with pytest.raises(EpisodeError, match="reset"):
            env.step("ls")
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown episode option"):
        SWEWorldEnv(toy_task, max_stpes=3)
    with pytest.raises(ValueError, match="render_mode"):
        SWEWorldEnv(toy_task, render_mode="human")


def test_step_after_the_end_raises(toy_task):
    env = gymnasium.make(ENV_ID, task=toy_task, **FAST)
    try:
        env.reset()
        _, _, terminated, truncated, info = env.step(SUBMIT)
        assert terminated and not truncated and info["reason"] == "submitted"
        with pytest.raises(EpisodeFinished, match="reset"):
            env.step("ls")
        env.reset()  # and a reset starts the next one
        assert env.step("ls")[2] is False
    finally:
        env.close()


def test_a_failing_reward_ends_the_episode_in_error(toy_task):
    from sweworld.env import EpisodeRewarder

    class BrokenRewarder(EpisodeRewarder):
        def score(self, *args, **kwargs):
            raise RuntimeError("reward backend down")

    env = ShapedOutcome(
        gymnasium.make(ENV_ID, task=toy_task, executor="none", rewarder=BrokenRewarder())
    )
    try:
        env.reset()
        _, reward, terminated, truncated, info = env.step(SUBMIT)
        assert (terminated, truncated, info["reason"]) == (True, False, "error")
        assert "reward backend down" in info["error"]
        assert info["shaped_outcome"] == "error" and reward == pytest.approx(env.error)
    finally:
        env.close()


def test_full_toy_episode_to_a_resolved_real_reward(toy_task):
    env = ShapedOutcome(
        gymnasium.make(ENV_ID, task=toy_task, executor="local", reward="real", render_mode="ansi")
    )
    try:
        prompt, _ = env.reset(seed=0)
        assert "<github_issue>" in prompt
        for action in demo_actions():
            _, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert (terminated, truncated, info["reason"]) == (True, False, "submitted")
        assert info["reward"]["value"] == 1.0 and info["reward"]["resolved"] is True
        assert info["reward"]["evidence"]["real"]["status"] == "resolved"
        assert "textutil.py" in info["patch"]
        steps = info["steps"]
        assert info["shaped_outcome"] == "success"
        assert reward == pytest.approx(1.0 - env.step_penalty * steps)
        assert "wall_s" not in info and "wall_s" in env.unwrapped.timings
        assert "ended: submitted" in env.render()
        trajectory = env.unwrapped.trajectory()
        assert len(trajectory.steps) == steps and trajectory.meta["seed"] == 0
    finally:
        env.close()


def test_close_leaves_nothing_behind(toy_task, tmp_path):
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=tmp_path)
    try:
        env = gymnasium.make(ENV_ID, task=toy_task, manager=manager, **FAST)
        env.reset()
        env.step("touch new_file.txt")
        assert len(manager.sessions) == 1
        env.close()
        env.close()  # twice is fine
        assert manager.sessions == []
        assert not any(manager.sessions_dir.iterdir())
        with pytest.raises(EpisodeError, match="closed"):
            env.reset()
    finally:
        manager.close_all()
    own = SWEWorldEnv(toy_task, **FAST)  # the env's own manager is closed with it
    own.reset()
    inner = own.episode.manager
    assert len(inner.sessions) == 1
    own.close()
    assert inner.sessions == []


def test_vector_env_runs_and_autoresets(toy_task):
    envs = gymnasium.make_vec(
        ENV_ID, num_envs=2, vectorization_mode="sync", task=toy_task, max_steps=2, **FAST
    )
    try:
        obs, _ = envs.reset(seed=1)
        assert len(obs) == 2 and all(o in envs.single_observation_space for o in obs)
        envs.step(("ls", "git status"))
        _, _, terminated, truncated, info = envs.step(("ls", "ls"))
        assert list(truncated) == [True, True] and list(terminated) == [False, False]
        assert list(info["reason"]) == ["max_steps", "max_steps"]
    finally:
        envs.close()


def test_split_measurements_copies_and_collects():
    info = {
        "latency_s": 0.5,
        "execution_calls": [{"command": "pytest", "latency_s": 0.2, "info": {"cache_hit": 1}}],
        "reward": {"value": 1.0, "latency_s": 3.0},
    }
    kept, found = split_measurements(info)
    assert kept == {
        "execution_calls": [{"command": "pytest", "info": {}}],
        "reward": {"value": 1.0},
    }
    assert found == {
        "latency_s": 0.5,
        "execution_calls.0.latency_s": 0.2,
        "execution_calls.0.info.cache_hit": 1,
        "reward.latency_s": 3.0,
    }
    assert kept["reward"] is not info["reward"]
