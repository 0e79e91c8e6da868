"""rLLM's SWE environment interface on sweworld.

rLLM is not on the package index: these tests drive the env the way rLLM's agent execution
engine does (``from_dict`` on a dataset row merged with ``env_args``, ``reset``, ``step`` with
the ``<function=...>`` text its SWE agent produces, ``compute_final_reward``, ``close``, each
call in a worker thread of the engine's pool) on the toy task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time

import pytest

from sweworld.env import EpisodeBusy, EpisodeError, EpisodeFinished
from sweworld.env.r2egym_env import Action
from sweworld.env.rllm_env import SWEEnv
from sweworld.sandbox.render import R2E_CONTINUE_MSG, R2E_FINISHED

FIX = (
    "<function=file_editor>\n  <parameter=command>str_replace</parameter>\n"
    "  <parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
    '  <parameter=old_str>    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
    "</parameter>\n"
    '  <parameter=new_str>    slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n'
    "    return slug.strip(separator)</parameter>\n</function>"
)
SEARCH = (
    "<function=search>\n  <parameter=search_term>def slugify</parameter>\n"
    "  <parameter=path>/testbed/stockroom</parameter>\n</function>"
)
TESTS = (
    "<function=execute_bash>\n  <parameter=cmd>python -m pytest tests/test_textutil.py -q"
    "</parameter>\n</function>"
)
SUBMIT = "<function=finish>\n  <parameter=command>submit</parameter>\n</function>"


def swe_agent_response(call: str) -> str:
    """What rLLM's SWE agent passes to ``env.step``: the call re-serialised by R2E-Gym's
    ``Action.to_xml_string`` after its parser read it from the model's response."""
    return Action.from_string(f"Let me continue.\n\n{call}").to_xml_string()


def env_args(manager, **options) -> dict:
    options.setdefault("executor", "local")
    options.setdefault("reward", "real")
    options.setdefault("max_steps", 20)
    return {"sweworld": options, "manager": manager, "scaffold": "r2egym", "step_timeout": 60}


def run_like_rllms_engine(env: SWEEnv, calls: list[str]) -> tuple[list, float]:
    """reset, step until done, compute_final_reward, close: each in the engine's thread
    pool, from an event loop, as rLLM's ``AgentExecutionEngine`` runs a trajectory."""

    async def trajectory():
        loop = asyncio.get_running_loop()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        try:
            observation, info = await loop.run_in_executor(pool, env.reset)
            steps = [(observation, 0.0, False, info)]
            for call in calls:
                step = await loop.run_in_executor(pool, env.step, swe_agent_response(call))
                steps.append(step)
                if step[2]:
                    break
            reward = await loop.run_in_executor(pool, env.compute_final_reward)
            await loop.run_in_executor(pool, env.close)
            return steps, reward
        finally:
            pool.shutdown()

    return asyncio.run(trajectory())


def test_from_dict_on_a_swebench_row(toy_task, manager):
    row = toy_task.to_row()
    assert set(row) >= {"instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS"}
    env = SWEEnv.from_dict({**row, **env_args(manager)})
    assert env.entry["instance_id"] == toy_task.instance_id
    assert "manager" not in env.entry and "sweworld" not in env.entry
    assert env.step_timeout == 60 and env.scaffold == "r2egym" and env.idx is None
    as_json = SWEEnv.from_dict(json.dumps({**row, "sweworld": {"reward": "none"}}))
    assert as_json.entry == row
    assert SWEEnv.is_multithread_safe() is True
    picked = SWEEnv(dataset=[row, row], idx=1, manager=manager)
    assert picked.idx == 1 and picked.entry == row


def test_a_toy_episode_through_rllms_loop_is_resolved(toy_task, manager):
    env = SWEEnv.from_dict({**toy_task.to_row(), **env_args(manager)})
    steps, reward = run_like_rllms_engine(env, [SEARCH, FIX, TESTS, SUBMIT, SEARCH])
    first, info = steps[0][0], steps[0][3]
    assert first.startswith("slugify() leaves repeated dashes")  # the issue; the agent wraps it
    assert info["instance_id"] == toy_task.instance_id
    observations = [s[0] for s in steps[1:]]
    assert all(isinstance(o, str) for o in observations)
    assert observations[0].startswith("Execution output of [search]:\nFound 1 matches")
    assert observations[2].startswith("Exit code: 0\nExecution output of [execute_bash]:\n")
    assert "9 passed" in observations[2]
    assert observations[-1] == R2E_FINISHED and len(observations) == 4  # done at submit
    assert [s[1] for s in steps[1:]] == [0.0] * 4  # the reward is compute_final_reward's
    last_info = steps[-1][3]
    assert last_info["reason"] == "submitted" and "slug.strip(separator)" in last_info["patch"]
    assert reward == 1.0
    assert env.env is None  # closed


def test_final_reward_of_an_episode_the_trainer_cut_short(toy_task, manager):
    env = SWEEnv.from_dict({**toy_task.to_row(), **env_args(manager, dense=True)})
    env.reset()
    _, reward, done, info = env.step(swe_agent_response(FIX))
    assert not done and reward == info["signals"]["dense"] == pytest.approx(-0.01)
    assert env.compute_final_reward() == 1.0  # the fix, graded without a submission
    assert env.reward_debug["resolved"] is True and env.reward_debug["source"] == "real"
    assert not env.env.done  # grading did not end the episode
    env.close()
    strict = SWEEnv.from_dict(
        {**toy_task.to_row(), **env_args(manager, score_unsubmitted=False, reward="real")}
    )
    strict.reset()
    strict.step(FIX)
    assert strict.compute_final_reward() == 0.0 and strict.reward_debug["status"] == "not_scored"
    strict.close()


def test_envs_in_threads_share_nothing(toy_task, manager):
    """Four envs stepped from four threads: two fix the bug, two write a note; each patch
    holds only its own change and each reward is its own."""

    def rollout(i: int):
        env = SWEEnv.from_dict({**toy_task.to_row(), **env_args(manager)})
        note = (
            "<function=file_editor>\n  <parameter=command>create</parameter>\n"
            f"  <parameter=path>/testbed/note_{i}.txt</parameter>\n"
            f"  <parameter=file_text>thread {i}</parameter>\n</function>"
        )
        env.reset()
        env.step(note)
        if i % 2 == 0:
            env.step(FIX)
        *_, info = env.step(SUBMIT)
        reward = env.compute_final_reward()
        env.close()
        return info["patch"], reward

    open_before = {s.id for s in manager.sessions}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(rollout, range(4)))
    for i, (patch, reward) in enumerate(results):
        notes = [j for j in range(4) if f"note_{j}.txt" in patch]
        assert notes == [i]
        assert ("slug.strip(separator)" in patch) == (i % 2 == 0)
        assert reward == (1.0 if i % 2 == 0 else 0.0)
    assert {s.id for s in manager.sessions} == open_before  # no leaked sandbox


def test_bad_input(toy_task, manager):
    row = toy_task.to_row()
    with pytest.raises(ValueError, match="instance_id"):
        SWEEnv.from_dict({k: v for k, v in row.items() if k != "instance_id"})
    with pytest.raises(ValueError, match="JSON"):
        SWEEnv.from_dict("{not json")
    with pytest.raises(ValueError):
        SWEEnv.from_dict(["a", "list"])
    with pytest.raises(ValueError, match="unknown episode option"):
        SWEEnv.from_dict({**row, "sweworld": {"no_such_option": 1}})
    with pytest.raises(ValueError, match="scaffold"):
        SWEEnv(entry=row, scaffold="openhands")
    with pytest.raises(EpisodeError, match="needs a task"):
        SWEEnv()
    with pytest.raises(IndexError):
        SWEEnv(dataset=[row], idx=3)

    env = SWEEnv.from_dict({**row, **env_args(manager, reward="none", max_steps=5)})
    with pytest.raises(EpisodeError, match="reset"):
        env.step(SEARCH)
    with pytest.raises(EpisodeError, match="reset"):
        env.compute_final_reward()
    env.reset()
    obs, _, done, info = env.step("```bash\ntouch /testbed/x\n```")  # mini-swe-agent's
    assert obs == R2E_CONTINUE_MSG and not done and info["action_error"] == "parse"
    obs, _, done, _ = env.step("<function=open_file>\n<parameter=path>x</parameter>\n</function>")
    assert "Unknown tool 'open_file'" in obs and not done
    *_, done, info = env.step(SUBMIT)
    assert done and info["patch"] == ""  # nothing the bad actions named ran
    with pytest.raises(EpisodeFinished):
        env.step(SEARCH)
    assert env.compute_final_reward() == 0.0  # reward "none"
    env.reset()  # the same env starts again, on a fresh sandbox
    assert env.total_steps == 0 and env.env.get_patch() == ""
    env.close()


def test_sweagent_scaffold_and_one_env_from_two_threads(toy_task, manager):
    env = SWEEnv.from_dict(
        {**toy_task.to_row(), **env_args(manager, reward="none"), "scaffold": "sweagent"}
    )
    env.reset()
    assert [c.name for c in env.env.commands] == ["file_editor", "execute_bash", "finish"]
    view = (
        "<function=str_replace_editor>\n  <parameter=command>view</parameter>\n"
        "  <parameter=path>/testbed/stockroom/textutil.py</parameter>\n</function>"
    )
    obs, *_ = env.step(view)
    assert obs.startswith("Execution output of [file_editor]:\n")
    sleep = "<function=bash>\n  <parameter=command>sleep 1.5</parameter>\n</function>"
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        slow = pool.submit(env.step, sleep)
        while env.env.episode.steps < 2:  # the slow step has started
            time.sleep(0.01)
        with pytest.raises(EpisodeBusy):
            env.step(view)
        assert slow.result()[0].startswith("Exit code: 0\nExecution output of [execute_bash]")
    assert env.step("<function=submit>\n</function>")[2] is True
    env.close()
