"""Hostile inputs to the Episode core: actions a model or a framework could send that must
not crash, hang or leak (unprintable tool-call mappings, a reward backend that never
answers, ``close`` racing ``reset``, test logs built to make the dense signal's parsers slow).

Real sandbox sessions with ``executor="none"`` and ``reward="none"`` unless the point is the
reward.
"""

from __future__ import annotations

import threading
import time

import pytest

from sweworld.env import Episode, EpisodeConfig, EpisodeError, EpisodeRewarder, signals

FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


@pytest.fixture
def episodes(manager):
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


def _nested(depth: int) -> dict:
    action: dict = {}
    inner = action
    for _ in range(depth):
        inner["x"] = {}
        inner = inner["x"]
    return action


@pytest.mark.parametrize(
    "action",
    [
        pytest.param(_nested(100_000), id="nested-100k-deep"),
        pytest.param({"name": "execute_bash", "arguments": {"cmd": 10**5000}}, id="huge-int"),
        pytest.param({"name": "execute_bash", "arguments": {"cmd": ["x"] * 10**6}}, id="wide"),
    ],
)
def test_unprintable_or_oversized_tool_call_mappings_are_answered_not_raised(
    episodes, toy_task, action
):
    ep = episodes(toy_task)
    ep.reset()
    out = ep.step(action)
    assert out.info["action_error"] in ("too_long", "too_deep", "parse")
    assert "Nothing was run" in out.observation
    assert not out.done and ep.steps == 1 and len(ep.rewards) == 1
    assert len(ep.trajectory().steps) == 1
    assert "hi" in ep.step("echo hi").observation  # still usable


def test_a_self_referential_mapping_is_answered(episodes, toy_task):
    ep = episodes(toy_task)
    ep.reset()
    action: dict = {"name": "execute_bash"}
    action["arguments"] = action
    out = ep.step(action)
    assert not out.done and out.observation
    assert ep.steps == 1


def test_a_reward_backend_that_never_answers_ends_the_step_by_its_deadline(episodes, toy_task):
    release = threading.Event()

    class HangingRewardModel:
        def score(self, *args, **kwargs):
            release.wait(120)
            raise RuntimeError("released")

        def close(self) -> None:
            pass

    rewarder = EpisodeRewarder(EpisodeConfig(reward="swr"), reward_model=HangingRewardModel())
    rewarder.deadline_s = 1.0
    ep = episodes(toy_task, reward="swr", rewarder=rewarder)
    ep.reset()
    started = time.monotonic()
    try:
        out = ep.step(FINISH)
    finally:
        release.set()
    assert time.monotonic() - started < 15
    assert out.terminated and out.info["reason"] == "error"
    assert "did not answer within" in out.info["error"]
    assert out.reward == 0.0 and ep.session is None


def test_close_while_reset_opens_a_session_leaves_none_open(manager, toy_task):
    opening = threading.Event()
    go_on = threading.Event()
    opened = []

    def slow_open(task):
        opening.set()
        go_on.wait(10)
        session = manager.open(task)
        opened.append(session)
        return session

    ep = Episode(toy_task, manager=manager, executor="none", reward="none", open_session=slow_open)
    errors = []

    def reset():
        try:
            ep.reset()
        except EpisodeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=reset)
    worker.start()
    assert opening.wait(10)
    ep.close()
    go_on.set()
    worker.join(20)
    assert not worker.is_alive()
    assert ep.session is None
    assert errors and "closed" in str(errors[0])
    assert len(opened) == 1 and opened[0].closed
    with pytest.raises(EpisodeError, match="closed"):
        ep.reset()


@pytest.mark.parametrize(
    "repo, unit",
    [
        ("sympy/sympy", "_"),  # one long line: quadratic in the SWE-bench sympy regex
        ("sympy/sympy", "_ "),
        ("sympy/sympy", "_" * 500 + "\n"),  # lines just short enough to be read
        ("django/django", "a ... Testing against Django installed in x\n"),  # multi-line
    ],
)
def test_the_dense_signal_reads_adversarial_test_logs_in_bounded_time(repo, unit):
    tracker = signals.TestTracker(tests=("sympy/a.py:test_a", "test_a"), repo=repo)
    log = unit * (400_000 // len(unit))
    started = time.perf_counter()
    delta, changes = tracker.update(log)
    assert time.perf_counter() - started < 1.0
    assert delta == 0.0 and changes == {"fixed": [], "broken": []}


def test_the_dense_signal_still_reads_real_status_lines():
    tracker = signals.TestTracker(tests=("test_a",), repo="sympy/sympy")
    noise = "_" * 50_000 + "\n"
    delta, changes = tracker.update(noise + "test_a ok\n")
    assert delta == 1.0 and changes["fixed"] == ["test_a"]


def test_r2egym_compute_reward_mid_episode_is_bounded_by_the_reward_deadline(manager, toy_task):
    from sweworld.env.r2egym_env import EnvArgs, RepoEnv

    release = threading.Event()

    class HangingRewardModel:
        def score(self, *args, **kwargs):
            release.wait(120)
            raise RuntimeError("released")

        def close(self) -> None:
            pass

    rewarder = EpisodeRewarder(
        EpisodeConfig(reward="swr"), reward_model=HangingRewardModel(), deadline_s=1.0
    )
    env = RepoEnv(
        EnvArgs(ds=toy_task.to_row()),
        manager=manager,
        rewarder=rewarder,
        executor="none",
        reward="swr",
    )
    try:
        env.reset()
        started = time.monotonic()
        try:
            value = env.compute_reward()
        finally:
            release.set()
        assert time.monotonic() - started < 15
        assert value == 0.0 and "did not answer within" in env.last_reward.error
        obs, _, done, _ = env.step(
            "<function=execute_bash>\n<parameter=cmd>echo hi</parameter>\n</function>"
        )
        assert not done and "hi" in str(obs)  # the episode goes on
    finally:
        env.close()


def test_task_rows_nested_too_deeply_are_a_value_error(toy_task):
    from sweworld.env import coerce_task

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError):
        coerce_task(deep)
    with pytest.raises(ValueError):
        coerce_task({**toy_task.to_row(), "FAIL_TO_PASS": deep})


@pytest.mark.parametrize("prompt_format", ["r2egym", "mini", "plain"])
def test_a_lone_surrogate_in_the_issue_does_not_reach_the_prompt(toy_task, prompt_format):
    from sweworld.env.prompts import first_observation, prompt_messages

    task = toy_task.model_copy(update={"problem_statement": "broken \ud800 text"})
    prompt = first_observation(task, prompt_format)
    prompt.encode("utf-8")  # a tokenizer or a JSON writer must be able to encode it
    for message in prompt_messages(task, prompt_format):
        message["content"].encode("utf-8")
    assert "broken" in prompt and "text" in prompt


def test_a_lone_surrogate_in_the_issue_does_not_reach_the_adapters_issue_text(toy_task):
    from sweworld.env.r2egym_env import task_instruction
    from sweworld.env.trl_env import _issue_text

    task = toy_task.model_copy(update={"problem_statement": "[ISSUE]broken \ud800 text[/ISSUE]"})
    assert "broken" in task_instruction(task.problem_statement).encode("utf-8").decode()
    assert "broken" in _issue_text(task).encode("utf-8").decode()


def test_rllm_from_dict_with_json_nested_too_deeply_is_a_value_error(toy_task):
    from sweworld.env.rllm_env import OPTIONS_KEY, SWEEnv

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="not a JSON task row"):
        SWEEnv.from_dict(deep)
    with pytest.raises(ValueError, match="not JSON options"):
        SWEEnv.from_dict({**toy_task.to_row(), OPTIONS_KEY: deep})
    with pytest.raises(ValueError, match="not JSON options"):
        SWEEnv.from_dict({**toy_task.to_row(), OPTIONS_KEY: "{bad"})


@pytest.mark.parametrize(
    "option",
    [
        {"step_timeout_s": float("inf")},  # every step failed with OverflowError
        {"step_timeout_s": 1e300},
        {"step_timeout_s": "5"},  # TypeError
        {"max_wall_s": float("nan")},
        {"max_observation_chars": 200.5},  # slicing with a float failed on a long output
        {"max_action_chars": 1e6},
        {"max_tokens": 0.5},
        {"max_steps": True},
    ],
)
def test_config_values_that_would_fail_at_run_time_are_refused_up_front(option):
    with pytest.raises(ValueError, match=next(iter(option))):
        EpisodeConfig(**option)


def test_a_week_long_step_deadline_still_runs(episodes, toy_task):
    ep = episodes(toy_task, executor="local", step_timeout_s=7 * 24 * 3600.0)
    ep.reset()
    assert "hi" in ep.step("echo hi").observation
