"""The Episode core on the toy task: stepping, end reasons, rewards, bad input, concurrency.

Real sandbox sessions throughout; ``executor="local"`` and ``reward="real"`` where the point
is a graded episode (real pytest on the toy repository, about a second), ``executor="none"``
and ``reward="none"`` where execution is not the point.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from sweworld.data.schema import Trajectory, TrajectoryStep
from sweworld.env import (
    Episode,
    EpisodeBusy,
    EpisodeConfig,
    EpisodeError,
    EpisodeFinished,
    EpisodeRewarder,
    coerce_task,
)
from sweworld.env import episode as episode_module
from sweworld.sandbox.executor import ExecutionResult
from tests.conftest import PROJECT

DEMO = [
    json.loads(line)
    for line in (PROJECT / "data" / "toy" / "demo_actions.jsonl").read_text().splitlines()
    if line.strip()
]
FIX = next(a for a in DEMO if "str_replace" in a)
FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"
F2P = "tests/test_textutil.py::test_slugify_collapses_separators"
PYTEST_RA = "python -m pytest tests/test_textutil.py -rA"
ADD_F2P_TEST = (
    "cat >> tests/test_textutil.py <<'EOF'\n\n\n"
    "def test_slugify_collapses_separators():\n"
    '    assert slugify("Hello,  World!") == "hello-world"\n'
    "EOF"
)


@pytest.fixture
def episodes(manager):
    """Make episodes on the suite's session manager; close them all at the end."""
    made: list[Episode] = []

    def make(task=None, **options) -> Episode:
        options.setdefault("executor", "none")
        options.setdefault("reward", "none")
        ep = Episode(task, manager=manager, **options)
        made.append(ep)
        return ep

    yield make
    for ep in made:
        ep.close()


def create_file(path: str, text: str) -> str:
    return (
        "<function=file_editor>\n<parameter=command>create</parameter>\n"
        f"<parameter=path>{path}</parameter>\n<parameter=file_text>{text}</parameter>\n</function>"
    )


class SleepyExecutor:
    """Answers every execution command after ``delay`` seconds (ignores deadlines)."""

    name = "sleepy"

    def __init__(self, delay: float, gate: threading.Event | None = None):
        self.delay = delay
        self.gate = gate
        self.started = threading.Event()

    def execute(self, request):
        self.started.set()
        if self.gate is not None:
            self.gate.wait(30)
        time.sleep(self.delay)
        return ExecutionResult(stdout="done\n", exit_code=0, info={"executor": self.name})


class RaisingExecutor:
    name = "raising"

    def execute(self, request):
        raise RuntimeError("the executor's backend is down")


class RaisingRewardModel:
    def score(self, *args, **kwargs):
        raise RuntimeError("the reward model crashed")

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- basics


def test_reset_gives_the_prompt_and_step_the_5_tuple(episodes, toy_task):
    ep = episodes(toy_task)
    prompt, info = ep.reset(seed=7)
    assert toy_task.problem_statement.strip()[:60] in prompt
    assert "<function=" in prompt
    assert info["instance_id"] == toy_task.instance_id
    assert info["seed"] == 7
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert ep.session is not None

    obs, reward, terminated, truncated, step_info = ep.step("ls stockroom")
    assert "textutil.py" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert step_info["exit_code"] == 0 and step_info["step"] == 1
    assert step_info["command"] == "ls stockroom" and step_info["tool"] == "bash"
    assert "reason" not in step_info and not ep.done


def test_demo_actions_resolve_the_toy_task_with_the_real_reward(episodes, toy_task):
    ep = episodes(toy_task, executor="local", reward="real", max_steps=20)
    ep.reset()
    for action in DEMO:
        out = ep.step(action)
        if out.done:
            break
    assert out.terminated and not out.truncated
    assert out.info["reason"] == "submitted" and out.info["submitted"] is True
    assert out.reward == 1.0
    reward = out.info["reward"]
    assert reward["resolved"] is True and reward["source"] == "real"
    report = reward["evidence"]["real"]["report"][toy_task.instance_id]
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == [F2P]
    assert "slug.strip(separator)" in out.info["patch"]
    assert ep.session is None  # freed at the end

    trajectory = ep.trajectory()
    assert isinstance(trajectory, Trajectory)
    assert trajectory.instance_id == toy_task.instance_id
    assert len(trajectory.steps) == out.info["steps"] == len(DEMO)
    assert all(isinstance(s, TrajectoryStep) for s in trajectory.steps)
    assert trajectory.steps[0].command == DEMO[0] and trajectory.steps[0].exit_code == 0
    assert trajectory.steps[-1].action == DEMO[-1]
    assert trajectory.submission == out.info["patch"]
    assert trajectory.report == {"resolved": True, "source": "real"}
    assert trajectory.meta["reason"] == "submitted"
    assert trajectory.meta["rewards"][-1] == 1.0
    json.dumps(trajectory.meta)  # the record is JSON-ready


def test_submitting_no_change_is_graded_unresolved(episodes, toy_task):
    ep = episodes(toy_task, executor="local", reward="real")
    ep.reset()
    out = ep.step(FINISH)
    assert out.terminated and out.reward == 0.0
    assert out.info["reward"]["resolved"] is False
    assert out.info["patch"] == ""


# ---------------------------------------------------------------------------- end reasons


def test_max_steps_truncates(episodes, toy_task):
    ep = episodes(toy_task, max_steps=2)
    ep.reset()
    assert not ep.step("ls").done
    out = ep.step("ls")
    assert out.truncated and not out.terminated
    assert out.info["reason"] == "max_steps" == ep.reason


def test_wall_time_truncates_with_timeout(episodes, toy_task):
    ep = episodes(toy_task, max_wall_s=0.2)
    ep.reset()
    time.sleep(0.3)
    out = ep.step("ls")
    assert out.truncated and out.info["reason"] == "timeout"


def test_token_budget_truncates(episodes, toy_task):
    ep = Episode(toy_task, executor="none", reward="none", max_tokens=10_000, token_counter=len)
    try:
        prompt, _ = ep.reset()
        ep.config = ep.config.replace(max_tokens=len(prompt) + 500)
        assert not ep.step("echo hi").done
        out = ep.step("seq 1 1000")  # ~3,900 characters of output
        assert out.truncated and out.info["reason"] == "max_tokens"
        assert out.info["tokens"] > len(prompt) + 500
    finally:
        ep.close()


def test_unsubmitted_patch_is_scored_unless_disabled(episodes, toy_task):
    ep = episodes(toy_task, executor="local", reward="real", max_steps=1)
    ep.reset()
    out = ep.step(FIX)
    assert out.truncated and out.info["reason"] == "max_steps"
    assert out.info["submitted"] is False
    assert out.info["reward"]["resolved"] is True  # graded although not submitted

    ep = episodes(toy_task, executor="local", reward="real", max_steps=1, score_unsubmitted=False)
    ep.reset()
    out = ep.step(FIX)
    assert out.info["reward"]["status"] == "not_scored" and out.reward == 0.0
    assert "slug.strip" in out.info["patch"]


def test_swr_exact_stages_give_their_verdicts(episodes, toy_task):
    stages = ("syntax", "typecheck", "semantic")
    ep = episodes(toy_task, reward="swr", swr_stages=stages)
    ep.reset()
    ep.step(FIX)
    out = ep.step(FINISH)
    swr = out.info["reward"]["evidence"]["swr"]
    assert out.info["reward"]["source"] == "swr"
    # the learned verdict weighs the stages' evidence: the demo's (right) fix is resolved
    assert swr["status"] == "resolved"
    assert tuple(swr["stages"]) == stages
    assert {s["verdict"] for s in swr["stages"].values()} == {"pass"}
    assert out.reward == 1.0

    broken = FIX.replace("return slug.strip(separator)", "return slug.strip(separator")
    ep = episodes(toy_task, reward="swr", swr_stages=stages)
    ep.reset()
    ep.step(broken)
    out = ep.step(FINISH)
    swr = out.info["reward"]["evidence"]["swr"]
    assert swr["status"] == "unresolved"
    assert swr["stages"]["syntax"]["verdict"] == "fail"
    assert out.info["reward"]["resolved"] is False and out.reward == 0.0


# ---------------------------------------------------------------------------- dense signals


@pytest.mark.parametrize("dense", [False, True])
def test_a_test_run_that_fixes_a_fail_to_pass_test_is_a_positive_signal(episodes, toy_task, dense):
    ep = episodes(toy_task, executor="local", dense=dense, step_penalty=0.01, test_weight=0.5)
    ep.reset()
    ep.step(ADD_F2P_TEST)  # the agent writes the test (the task's test patch is hidden)
    before = ep.step(PYTEST_RA)
    assert F2P not in before.info["signals"]["tests_fixed"]  # it fails before the fix
    assert before.info["signals"]["tests_passing"] == pytest.approx(9 / 10)
    ep.step(FIX)
    after = ep.step(PYTEST_RA)
    signals = after.info["signals"]
    assert signals["tests_delta"] == pytest.approx(1 / 10)
    assert signals["tests_fixed"] == [F2P] and signals["tests_broken"] == []
    assert signals["tests_passing"] == 1.0
    assert signals["dense"] == pytest.approx(0.5 * 0.1 - 0.01)
    assert after.reward == (pytest.approx(0.04) if dense else 0.0)


# ---------------------------------------------------------------------------- bad actions


def test_long_observations_are_cut(episodes, toy_task):
    ep = episodes(toy_task, max_observation_chars=300)
    ep.reset()
    out = ep.step("seq 1 5000")
    assert len(out.observation) <= 300
    assert out.info["observation_truncated"] is True
    assert "characters cut by sweworld" in out.observation
    assert "\n5000\n" in out.observation[-100:]  # the tail is kept


def test_oversized_non_text_and_foreign_actions_run_nothing(episodes, toy_task):
    ep = episodes(toy_task, max_action_chars=200, action_format="r2e")
    ep.reset()
    out = ep.step("touch /testbed/long.txt # " + "x" * 500)
    assert out.info["action_error"] == "too_long" and "limit is 200" in out.observation
    call = {"function": "file_editor", "command": "create", "path": "/testbed/big.txt"}
    out = ep.step({**call, "file_text": "x" * 500})  # a tool-call mapping is measured too
    assert out.info["action_error"] == "too_long"
    for bad in (123, None, b"ls"):
        out = ep.step(bad)
        assert out.info["action_error"] == "type" and "must be text" in out.observation
    out = ep.step("```bash\ntouch /testbed/bash_block.txt\n```")  # mini's format, r2e wanted
    assert out.info["action_error"] == "parse" and "function call" in out.observation
    assert not out.done and out.info["exit_code"] == -1
    out = ep.step(FINISH)
    assert out.terminated and out.info["patch"] == ""  # none of them ran


def test_steps_after_the_end_raise_until_reset(episodes, toy_task):
    ep = episodes(toy_task)
    ep.reset()
    ep.step(FINISH)
    with pytest.raises(EpisodeFinished, match="reset"):
        ep.step("ls")
    ep.reset()
    assert ep.steps == 0 and not ep.done
    assert not ep.step("ls").done


def test_reset_without_a_task_and_step_before_reset(episodes, toy_task):
    with pytest.raises(EpisodeError, match="needs a task"):
        episodes().reset()
    ep = episodes(toy_task)
    with pytest.raises(EpisodeError, match=r"reset\(\) before step"):
        ep.step("ls")
    ep.close()
    with pytest.raises(EpisodeError, match="closed"):
        ep.reset()


def test_task_rows_missing_fields_are_named(episodes, toy_task):
    for missing in ("instance_id", "repo"):
        row = toy_task.to_row()
        del row[missing]
        with pytest.raises(ValueError, match=missing):
            Episode(row, executor="none", reward="none")
        with pytest.raises(ValueError, match=missing):
            episodes().reset(row)
    with pytest.raises(ValueError, match="JSON task row"):
        coerce_task(toy_task.instance_id)
    with pytest.raises(ValueError, match="int"):
        coerce_task(42)
    assert coerce_task(json.dumps(toy_task.to_row())).instance_id == toy_task.instance_id


# ---------------------------------------------------------------------------- failures


def test_one_episode_from_two_threads_is_refused_without_corruption(episodes, toy_task):
    gate = threading.Event()
    executor = SleepyExecutor(0.0, gate)
    ep = episodes(toy_task, executor=executor)
    ep.reset()
    results: list = []
    worker = threading.Thread(target=lambda: results.append(ep.step("python -c 'print(1)'")))
    worker.start()
    assert executor.started.wait(30)
    with pytest.raises(EpisodeBusy):
        ep.step("ls")
    with pytest.raises(EpisodeBusy):
        ep.reset()
    gate.set()
    worker.join(30)
    assert results and "done" in results[0].observation
    assert ep.steps == 1  # the refused call changed nothing
    out = ep.step(FINISH)
    assert out.info["steps"] == 2 and out.terminated


def test_a_failing_executor_is_shown_or_ends_the_episode(episodes, toy_task):
    ep = episodes(toy_task, executor=RaisingExecutor())
    ep.reset()
    out = ep.step("python -c 'print(1)'")
    assert not out.done
    assert "backend is down" in out.observation and "backend is down" in out.info["executor_error"]
    assert not ep.step("ls").done  # the agent goes on

    ep = episodes(toy_task, executor=RaisingExecutor(), end_on_executor_error=True)
    ep.reset()
    out = ep.step("python -c 'print(1)'")
    assert out.terminated and out.info["reason"] == "error"
    assert "executor failed" in out.info["error"] and out.reward == 0.0
    assert ep.session is None


def test_a_failing_reward_terminates_with_the_error(episodes, toy_task, manager):
    config = EpisodeConfig(executor="none", reward="swr")
    rewarder = EpisodeRewarder(config, reward_model=RaisingRewardModel(), manager=manager)
    ep = Episode(toy_task, config, manager=manager, rewarder=rewarder)
    try:
        ep.reset()
        out = ep.step(FINISH)
        assert out.terminated and out.info["reason"] == "error"
        assert "reward model crashed" in out.info["error"]
        assert out.info["reward"]["status"] == "error" and out.reward == 0.0
    finally:
        ep.close()


def test_a_step_past_its_deadline_ends_the_episode_without_hanging(episodes, toy_task, monkeypatch):
    monkeypatch.setattr(episode_module, "STEP_GRACE_S", 0.5)
    ep = episodes(toy_task, executor=SleepyExecutor(4.0), step_timeout_s=0.25)
    ep.reset()
    session = ep.session
    started = time.monotonic()
    out = ep.step("python -c 'print(1)'")
    assert time.monotonic() - started < 3.0  # the backstop (2 * 0.25 + 0.5 s), not 4 s
    assert out.terminated and out.info["reason"] == "error"
    assert "did not finish" in out.info["error"]
    assert ep.session is None
    deadline = time.monotonic() + 30
    while session.state_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not session.state_dir.exists()  # destroyed once the stuck step let go


# ---------------------------------------------------------------------------- many, close


def test_sixteen_async_episodes_in_one_loop_are_independent(manager, toy_task):
    async def main() -> list:
        eps = [
            Episode(toy_task, executor="none", reward="none", manager=manager) for _ in range(16)
        ]
        try:
            await asyncio.gather(*(ep.areset() for ep in eps))
            await asyncio.gather(
                *(
                    ep.astep(create_file(f"/testbed/ep_{i}.txt", f"episode {i}"))
                    for i, ep in enumerate(eps)
                )
            )
            return await asyncio.gather(*(ep.astep(FINISH) for ep in eps))
        finally:
            for ep in eps:
                ep.close()

    outs = asyncio.run(main())
    assert len({o.info["episode_id"] for o in outs}) == 16
    for i, out in enumerate(outs):
        assert out.terminated and out.info["steps"] == 2
        patch = out.info["patch"]
        assert f"ep_{i}.txt" in patch and f"+episode {i}" in patch
        assert patch.count("diff --git") == 1  # no other episode's file


def test_close_leaves_no_session_behind(tmp_path, toy_task):
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=tmp_path)
    try:
        ep = Episode(toy_task, executor="none", reward="none", manager=manager)
        ep.reset()
        ep.step("touch made.txt")
        assert any(manager.sessions_dir.iterdir())
        ep.close()
        ep.close()  # idempotent
        assert list(manager.sessions_dir.iterdir()) == []
        assert manager.sessions == []
    finally:
        manager.close_all()


class _GarbageLM:
    """A model that answers, but never with a valid prediction."""

    model_name = "garbage"

    def generate(self, requests):
        from sweworld.models.base import Generation

        return [[Generation(text="not json at all")] * r.n for r in requests]

    def count_tokens(self, text: str) -> int:
        return len(text) // 4

    def close(self) -> None:
        pass


class _DownLM(_GarbageLM):
    """A model whose server is down."""

    def generate(self, requests):
        from sweworld.models.base import LMUnavailable

        raise LMUnavailable("connection refused: the model server is down")


def test_a_simulator_fallback_is_not_an_executor_failure_but_a_dead_model_is(episodes, toy_task):
    from sweworld.transition.simulated import SimulatedExecutor

    command = "python -c 'import stockroom; print(stockroom.__name__)'"
    garbage = SimulatedExecutor(lm=_GarbageLM(), step_timeout=30)
    ep = episodes(toy_task, executor=garbage, end_on_executor_error=True)
    ep.reset()
    out = ep.step(command)
    sources = [call["info"].get("source") for call in out.info["execution_calls"]]
    assert sources == ["fallback"]  # the model was asked and its answers were invalid
    assert not out.done, out.info  # the honest fallback answer; the episode goes on
    assert "executor_error" not in out.info

    down = SimulatedExecutor(lm=_DownLM(), step_timeout=30)
    ep = episodes(toy_task, executor=down, end_on_executor_error=True)
    ep.reset()
    out = ep.step(command)
    assert out.terminated and out.info["reason"] == "error"
    assert "server is down" in out.info["error"]


def test_raw_observations_and_a_per_step_timeout(episodes, toy_task):
    ep = episodes(toy_task, observation_format="raw")
    ep.reset()
    out = ep.step("echo hello; echo oops >&2; exit 3")
    assert out.observation == "hello\noops\n" and out.info["exit_code"] == 3  # unrendered
    out = ep.step("sleep 5; echo late", timeout=0.5)
    assert out.info["exit_code"] == -1 and out.info.get("timed_out") and not out.done
    with pytest.raises(ValueError, match="timeout"):
        ep.step("ls", timeout=-1)
    out = ep.step("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1")  # mini 2.x: needs 0
    assert not out.done
    out = ep.step("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    assert out.terminated and out.info["reason"] == "submitted"
    assert out.observation == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n"


def test_end_grades_and_closes_a_running_episode(episodes, toy_task):
    ep = episodes(toy_task, observation_format="raw")
    with pytest.raises(EpisodeError, match="reset"):
        ep.end()
    ep.reset()
    refused = ep.step("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; python -V; true")
    assert not refused.done and refused.info["submission_refused"]  # executor output
    ep.step("echo 'x = 1' > newmod.py")
    with pytest.raises(ValueError, match="reason"):
        ep.end("bored")
    out = ep.end("max_steps")  # e.g. the agent framework's own step limit
    assert out.truncated and not out.terminated and out.observation == ""
    assert out.info["reason"] == "max_steps" and "+x = 1" in out.info["patch"]
    assert ep.done and ep.session is None and ep.patch == out.info["patch"]
    assert ep.rewards[-1] == out.reward == ep.final.value
    with pytest.raises(EpisodeFinished):
        ep.end()
    with pytest.raises(EpisodeFinished):
        ep.step("ls")

    ep.reset()
    out = ep.end("error", error="the agent gave up")
    assert out.terminated and out.info["reason"] == "error"
    assert out.info["error"] == "the agent gave up"
    assert out.info["reward"]["status"] == "not_scored" and ep.session is None


def test_snapshot_restore_and_fork(episodes, toy_task):
    ep = episodes(toy_task)
    ep.reset()
    ep.step("echo one > /testbed/a.txt")
    snap = ep.snapshot()
    ep.step("echo two > /testbed/a.txt")
    assert "two" in ep.session.read_file("/testbed/a.txt")
    branch = ep.fork()
    try:
        ep.restore(snap)
        assert ep.steps == 1 and len(ep.trajectory().steps) == 1
        assert ep.session.read_file("/testbed/a.txt") == "one\n"
        assert branch.steps == 2 and branch.session.read_file("/testbed/a.txt") == "two\n"
        out = branch.step("rm /testbed/a.txt")
        assert not out.done and branch.steps == 3
        assert ep.session.read_file("/testbed/a.txt") == "one\n"  # the fork shares nothing
        with pytest.raises(KeyError):
            ep.restore("no-such-snapshot")
    finally:
        branch.close()
    ep.end("max_steps")
    with pytest.raises(EpisodeFinished):
        ep.snapshot()


def test_an_episode_configured_for_a_world_service_is_not_run_here(toy_task):
    with pytest.raises(ValueError, match="world service"):
        Episode(toy_task, world="http://127.0.0.1:9")
