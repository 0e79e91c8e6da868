"""Prompt budgets are bounded at the source: cutting a 50 MB text to a few hundred tokens
reads (tokenises) a bounded number of characters, whatever the text's size, and gives the
same result as reading it all wherever the bound cannot matter.

Boundedness is shown by counting the characters the token counter is given, not by timing.
"""

from __future__ import annotations

import random

import pytest

from sweworld.models import budget as budget_module
from sweworld.models.base import approx_tokens
from sweworld.models.budget import (
    CHARS_PER_TOKEN_BOUND,
    LineTokens,
    Part,
    fit_parts,
    truncate_chars,
    truncate_text,
)

MB = 1 << 20


class CountingCounter:
    """chars / 4, like the default counter, recording how many characters it read."""

    def __init__(self) -> None:
        self.read = 0

    def __call__(self, text: str) -> int:
        self.read += len(text)
        return approx_tokens(text)


def _lines_text(size: int) -> str:
    line = "the quick brown fox jumps over the lazy dog 0123456789\n"
    return line * (size // len(line))


@pytest.mark.parametrize("budget", [50, 300, 2000])
def test_cutting_50_mb_of_lines_reads_a_bounded_amount(budget):
    text = _lines_text(50 * MB)
    counter = CountingCounter()
    out, cut = truncate_text(text, budget, LineTokens(counter))
    assert approx_tokens(out) <= budget
    bound = 8 * CHARS_PER_TOKEN_BOUND * budget + 10_000  # the two ends, re-counted a little
    assert counter.read < bound, (counter.read, bound)
    total = text.count("\n")
    kept = out.count("\n")  # kept lines (each followed by a newline) + the marker's line
    assert f"... [{cut} lines cut] ..." in out
    assert cut == total - kept  # every line of the 50 MB is accounted for


def test_one_50_mb_line_and_50_mb_parts_read_a_bounded_amount():
    text = "x" * (50 * MB)
    counter = CountingCounter()
    tok = LineTokens(counter)
    out, cut = truncate_chars(text, 300, tok)
    assert approx_tokens(out) <= 300 and cut > 49 * MB and out.startswith("xxx")
    assert counter.read < 100 * CHARS_PER_TOKEN_BOUND * 300
    counter.read = 0
    out, cut = truncate_text(text, 300, tok)
    assert out == "... [1 lines cut] ..." and cut == 1  # whole lines only, as before
    counter.read = 0
    parts = [Part("file a", _lines_text(50 * MB), "a"), Part("file b", "short\n", "b")]
    out, _ = fit_parts(parts, 400, tok)
    assert "file a" in out and "file b" in out and "short" in out
    assert approx_tokens(out) <= 400
    assert counter.read < 20 * CHARS_PER_TOKEN_BOUND * 400


def test_the_bound_changes_nothing_where_the_ends_hold_more_than_the_budget(monkeypatch):
    rng = random.Random(7)
    cases = []
    for _ in range(40):
        budget = rng.choice([20, 60, 150])
        lines = [
            "".join(rng.choice("ab cd\t{}") for _ in range(rng.randint(0, 70)))
            for _ in range(rng.randint(100, 600))
        ]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        if len(text) > 2 * CHARS_PER_TOKEN_BOUND * budget:
            cases.append((text, budget))
    assert len(cases) > 20
    bounded = [truncate_text(t, b, LineTokens(approx_tokens)) for t, b in cases]
    monkeypatch.setattr(budget_module, "CHARS_PER_TOKEN_BOUND", 10**9)  # read everything
    whole = [truncate_text(t, b, LineTokens(approx_tokens)) for t, b in cases]
    assert bounded == whole


def test_the_swt_and_swr_prompts_of_a_50_mb_problem_statement_are_bounded(tmp_path):
    from sweworld.reward.swr.prompt import SWRPromptConfig, build_swr_prompt
    from sweworld.sandbox.executor import ExecutionRequest
    from sweworld.tasks.schema import Task
    from sweworld.transition.context import ContextConfig, build_context
    from sweworld.transition.types import WorkspaceView

    problem = _lines_text(50 * MB)
    task = Task(
        instance_id="big__issue-1",
        repo="big/issue",
        base_commit="0" * 40,
        problem_statement=problem,
    )
    (tmp_path / "tmp").mkdir()
    request = ExecutionRequest(
        argv=("python", "-c", "print(1)"), workspace=tmp_path, tmp=tmp_path / "tmp", task=task
    )
    counter = CountingCounter()
    config = ContextConfig(count_tokens=counter)
    context = build_context(request, WorkspaceView.from_request(request), config=config)
    assert "lines cut" in context.problem
    assert len(context.problem) < 4 * config.budget("problem") + 200
    assert counter.read < 5 * MB  # every field and every budget round, not the 50 MB
    counter = CountingCounter()
    prompt = build_swr_prompt(task, "", mode="blind", config=SWRPromptConfig(count_tokens=counter))
    assert sum(len(m["content"]) for m in prompt.messages) < 200_000
    assert counter.read < 5 * MB
