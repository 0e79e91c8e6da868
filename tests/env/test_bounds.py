"""Prompts and observations are bounded at the source: a 50 MB problem statement does not
make a 50 MB first observation, prompt message, trajectory or model prompt."""

from __future__ import annotations

import pytest

from sweworld.env import Episode
from sweworld.env.prompts import bounded_prompt, first_observation
from sweworld.env.stepping import MAX_PROBLEM_CHARS, bound_task
from tests.conftest import requires_sandbox

MB = 1 << 20


def _big(task, size: int = 50 * MB):
    body = "line of the issue text\n" * (size // 23)
    return task.model_copy(update={"problem_statement": "START\n" + body + "END\n"})


def test_bound_task_keeps_head_and_tail_around_a_visible_marker(toy_task):
    big = _big(toy_task)
    bounded = bound_task(big)
    text = bounded.problem_statement
    assert len(text) <= MAX_PROBLEM_CHARS
    assert text.startswith("START") and text.rstrip().endswith("END")
    assert "characters cut by sweworld" in text
    assert bound_task(toy_task) is toy_task  # a task that fits is left as it is
    assert big.problem_statement.startswith("START")  # the caller's task is not changed


@pytest.mark.parametrize("fmt", ["r2egym", "mini", "plain"])
def test_the_first_observation_fits_max_observation_chars_with_its_instructions(toy_task, fmt):
    big = bound_task(_big(toy_task))
    prompt, messages, cut = bounded_prompt(big, fmt, 20_000)
    assert cut and len(prompt) <= 20_000
    assert prompt == "\n\n".join(m["content"] for m in messages)
    assert "START" in prompt and "END" in prompt and "characters cut by sweworld" in prompt
    if fmt == "mini":  # the instructions after the issue are still whole
        assert prompt.rstrip().endswith("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
    small, _, small_cut = bounded_prompt(toy_task, fmt, 20_000)
    assert not small_cut and small == first_observation(toy_task, fmt)
    assert bounded_prompt({"problem_statement": "x" * 50_000}, fmt, 1000)[0].count("x") < 1000


@requires_sandbox
def test_an_episode_on_a_50_mb_issue_is_bounded_everywhere(toy_task, manager):
    with Episode(_big(toy_task), manager=manager, executor="none", reward="none") as episode:
        prompt, info = episode.reset()
        limit = episode.config.max_observation_chars
        assert len(prompt) <= limit and info["observation_truncated"] is True
        assert sum(len(m["content"]) for m in info["messages"]) <= limit
        assert len(episode.task.problem_statement) <= MAX_PROBLEM_CHARS
        episode.step("ls")
        row = episode.trajectory().task
        assert len(row["problem_statement"]) <= MAX_PROBLEM_CHARS
        assert episode.tokens < limit  # counted on the bounded prompt
