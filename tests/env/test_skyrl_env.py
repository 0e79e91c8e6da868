"""The SkyRL adapter, stepped through skyrl_gym's own ``make`` / ``init`` / ``step``."""

from __future__ import annotations

import json

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

from sweworld.env import EpisodeError, EpisodeFinished  # noqa: E402
from sweworld.env.skyrl_env import (  # noqa: E402
    ENV_ID,
    SWEWorldSkyRLEnv,
    register_skyrl_env,
    skyrl_dataset_row,
)
from sweworld.tasks.toy import toy_tasks_path  # noqa: E402

FAST = {"executor": "none", "reward": "none"}


def _extras(task, max_turns=20):
    """What SkyRL's generator passes: the row without prompt and env_class, plus max_turns."""
    row = skyrl_dataset_row(task)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = max_turns
    return row["prompt"], extras


def _demo_actions():
    path = toy_tasks_path().parent / "demo_actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _call(name, **params):
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<function={name}>\n{body}</function>"


def test_registered_and_made_by_skyrl_gym(manager, toy_task):
    register_skyrl_env()  # idempotent
    assert ENV_ID in skyrl_gym.registry
    prompt, extras = _extras(toy_task)
    env = skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras=extras, manager=manager)
    try:
        assert isinstance(env, BaseTextEnv) and isinstance(env, SWEWorldSkyRLEnv)
        assert env.spec.id == ENV_ID
        assert env.max_turns == 20
        messages, meta = env.init(prompt)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert toy_task.problem_statement.strip()[:40] in messages[1]["content"]
        assert meta["instance_id"] == toy_task.instance_id
    finally:
        env.close()


def test_full_toy_episode_real_reward(manager, toy_task):
    prompt, extras = _extras(toy_task)
    env = skyrl_gym.make(
        ENV_ID, env_config={"executor": "local", "reward": "real"}, extras=extras, manager=manager
    )
    try:
        env.init(prompt)
        outputs = [env.step(action) for action in _demo_actions()]
    finally:
        env.close()
    *middle, last = outputs
    for out in middle:
        assert out["done"] is False and out["reward"] == 0.0
        assert out["observations"][0]["role"] == "user" and out["observations"][0]["content"]
    assert "hello---world-" in middle[4]["observations"][0]["content"]  # the real bug, run
    assert last["done"] is True and last["observations"] == []
    assert last["reward"] == 1.0
    meta = last["metadata"]
    assert meta["reason"] == "submitted" and meta["reward"]["resolved"] is True
    assert meta["reward"]["source"] == "real"
    assert "stockroom/textutil.py" in meta["patch"]
    assert env.get_metrics() == {"steps": len(outputs), "resolved": 1.0, "submitted": 1.0}


def test_max_turns_from_generator_truncates(manager, toy_task):
    prompt, extras = _extras(toy_task, max_turns=2)
    env = skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras=extras, manager=manager)
    try:
        env.init(prompt)
        first = env.step("ls")
        second = env.step("ls")
        assert first["done"] is False
        assert second["done"] is True and second["metadata"]["reason"] == "max_steps"
        with pytest.raises(EpisodeFinished):
            env.step("ls")
        env.init(prompt)  # a new episode on the same env
        assert env.step("ls")["done"] is False
    finally:
        env.close()


def test_task_forms_in_extras(manager, toy_task, tmp_path):
    row = toy_task.to_row()
    forms = [
        {"task": row},
        {"task": json.dumps(row)},
        {"extra_info": {"task": row}},
        dict(row),  # the dataset row is the task row itself
    ]
    for extras in forms:
        env = SWEWorldSkyRLEnv(dict(FAST), extras, manager=manager)
        assert env.task.instance_id == toy_task.instance_id
        env.close()
    env = SWEWorldSkyRLEnv(
        {**FAST, "tasks": str(toy_tasks_path())},
        {"instance_id": toy_task.instance_id},
        manager=manager,
    )
    assert env.task.instance_id == toy_task.instance_id
    env.close()


def test_dictconfig_env_config_and_dataset_prompt(manager, toy_task):
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({**FAST, "prompt_format": "mini", "use_dataset_prompt": True})
    _, extras = _extras(toy_task)
    env = skyrl_gym.make(ENV_ID, env_config=cfg, extras=extras, manager=manager)
    try:
        mine = [{"role": "user", "content": "my own prompt"}]
        messages, _ = env.init(mine)
        assert messages == mine
        env.use_dataset_prompt = False
        messages, _ = env.init(mine)
        assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in messages[-1]["content"]  # mini format
    finally:
        env.close()


def test_postprocessed_action_restores_cut_stop_sequence(manager, toy_task):
    prompt, extras = _extras(toy_task)
    env = skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras=extras, manager=manager)
    try:
        env.init(prompt)
        cut = _call("file_editor", command="view", path="/testbed/README.md")
        cut = cut.removesuffix("</function>")  # as a stop sequence leaves it
        out = env.step(cut)
        assert out["postprocessed_action"].endswith("</function>")
        assert "Execution output of [file_editor]" in out["observations"][0]["content"]
        assert env.step("ls")["postprocessed_action"] is None
    finally:
        env.close()


def test_bad_input(manager, toy_task):
    _, extras = _extras(toy_task)
    with pytest.raises(ValueError, match="no task"):
        skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras={"max_turns": 3}, manager=manager)
    with pytest.raises(ValueError):  # a task row missing its fields
        skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras={"task": {"instance_id": "x"}})
    with pytest.raises(ValueError, match="unknown episode option"):
        skyrl_gym.make(ENV_ID, env_config={"executer": "none"}, extras=extras, manager=manager)
    env = skyrl_gym.make(
        ENV_ID, env_config={**FAST, "action_format": "r2e"}, extras=extras, manager=manager
    )
    try:
        with pytest.raises(EpisodeError, match="reset"):
            env.step("ls")  # before init
        env.init(None)
        out = env.step("Let me look.\n```bash\nls\n```")  # mini-swe-agent's format
        assert out["done"] is False and out["metadata"].get("action_error") == "parse"
        out = env.step(12345)  # not text
        assert out["done"] is False and out["metadata"].get("action_error") == "type"
    finally:
        env.close()


def test_episodes_share_no_state(manager, toy_task):
    prompt, extras = _extras(toy_task)
    first = skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras=dict(extras), manager=manager)
    second = skyrl_gym.make(ENV_ID, env_config=dict(FAST), extras=dict(extras), manager=manager)
    try:
        first.init(prompt)
        second.init(prompt)
        created = first.step(
            _call("file_editor", command="create", path="/testbed/only_first.txt", file_text="x")
        )
        assert "created" in created["observations"][0]["content"].lower()
        seen = second.step(_call("file_editor", command="view", path="/testbed/only_first.txt"))
        assert "does not exist" in seen["observations"][0]["content"]
        assert first.episode.session.id != second.episode.session.id
    finally:
        first.close()
        second.close()


class BrokenExecutor:
    """An executor whose backend is down (every call raises)."""

    name = "broken"

    def execute(self, request):
        raise RuntimeError("the model server is down")


def test_failing_executor_and_reward_end_with_the_reason(manager, toy_task):
    from sweworld.env import EpisodeConfig, EpisodeRewarder

    prompt, extras = _extras(toy_task)
    env = skyrl_gym.make(
        ENV_ID,
        env_config={"reward": "real", "end_on_executor_error": True},
        extras=extras,
        manager=manager,
        executor=BrokenExecutor(),
    )
    try:
        env.init(prompt)
        out = env.step("python -V")
        assert out["done"] is True and out["reward"] == 0.0
        assert out["metadata"]["reason"] == "error"
        assert "model server is down" in out["metadata"]["error"]
    finally:
        env.close()
    broken = EpisodeRewarder(
        EpisodeConfig(reward="real"), manager=manager, real_executor="no_such_executor"
    )
    env = skyrl_gym.make(
        ENV_ID, env_config={"executor": "none"}, extras=extras, manager=manager, rewarder=broken
    )
    try:
        env.init(prompt)
        out = env.step(_call("finish", command="submit"))
        assert out["done"] is True and out["reward"] == 0.0
        assert out["metadata"]["reason"] == "error"
        assert "reward failed" in out["metadata"]["error"]
    finally:
        env.close()
