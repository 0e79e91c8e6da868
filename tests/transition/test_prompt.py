"""The SWT prompt: messages, target text, training examples."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.sandbox.workspace import WorkspaceChanges
from sweworld.tasks import load_tasks
from sweworld.transition.context import (
    ContextConfig,
    HistoryItem,
    SWTContext,
    build_context,
)
from sweworld.transition.prompt import (
    build_messages,
    render_target,
    system_prompt,
)
from sweworld.transition.types import Prediction, WorkspaceView

PROJECT = Path(__file__).resolve().parents[2]
TOY_REPO = PROJECT / "data" / "toy" / "repo"
GOLD_ONLY_LINE = "slug.strip(separator)"  # appears in the gold patch of the slugify task only


@pytest.fixture(scope="module")
def slug_task():
    tasks = load_tasks(PROJECT / "data" / "toy" / "tasks.jsonl")
    return next(t for t in tasks if "slugify" in t.patch)


@pytest.fixture
def view(tmp_path) -> WorkspaceView:
    base, root = tmp_path / "base", tmp_path / "ws"
    shutil.copytree(TOY_REPO, base)
    shutil.copytree(TOY_REPO, root)
    path = root / "stockroom" / "textutil.py"
    path.write_text(path.read_text().replace('"[^a-z0-9]"', '"[^a-z0-9]+"'))
    changes = WorkspaceChanges(written=("stockroom/textutil.py",))
    return WorkspaceView(root, tmp=tmp_path, base=base, cwd="/testbed", changes=lambda: changes)


def _context(view, task, mode="blind", **kw) -> SWTContext:
    request = ExecutionRequest(
        argv=("python", "-m", "pytest", "tests/test_textutil.py::test_slugify_simple_words"),
        env={"PYTHONHASHSEED": "0"},
    )
    return build_context(
        request,
        view,
        task=task,
        history=[HistoryItem("python -c 'import stockroom'", 0, "")],
        config=ContextConfig(mode=mode),
        **kw,
    )


def test_messages_shape_and_section_order(view, slug_task):
    ctx = _context(view, slug_task)
    messages = build_messages(ctx)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "/testbed" in system and "JSON" in system
    assert '{"stdout": "...", "stderr": "...", "exit_code": 0}' in system
    assert "reasoning" not in system
    order = [
        "<problem_statement>",
        "<changes>",
        "<previous_commands>",
        "<executed_code>",
        "<related_code>",
        "<command>",
    ]
    positions = [user.index(tag) for tag in order]
    assert positions == sorted(positions)
    for tag in order:
        assert tag.replace("<", "</") in user
    assert "$ python -m pytest tests/test_textutil.py::test_slugify_simple_words" in user
    assert "PYTHONHASHSEED=0" in user
    assert "cwd: /testbed" in user
    assert "def slugify(" in user  # related signatures reach the prompt
    assert '"[^a-z0-9]+"' in user  # the agent's edit
    assert "<stdin>" not in user and "<facts>" not in user  # empty sections are left out


def test_with_reasoning(view, slug_task):
    ctx = _context(view, slug_task)
    system = build_messages(ctx, with_reasoning=True)[0]["content"]
    assert '{"reasoning": "...", "stdout"' in system
    assert system == system_prompt(with_reasoning=True)
    assert build_messages(ctx, with_reasoning=True)[1] == build_messages(ctx)[1]


def test_blind_messages_never_show_the_gold_patch(view, slug_task):
    blind = json.dumps(build_messages(_context(view, slug_task)))
    assert GOLD_ONLY_LINE not in blind
    assert "<gold_patch>" not in blind and "<test_patch>" not in blind and "<tests>" not in blind
    assert "test_slugify_collapses_separators" not in blind

    oracle_messages = build_messages(_context(view, slug_task, mode="oracle"))
    oracle = oracle_messages[1]["content"]
    assert GOLD_ONLY_LINE in oracle
    assert "<gold_patch>" in oracle and "NOT applied" in oracle
    assert "<test_patch>" in oracle and "test_slugify_collapses_separators" in oracle
    assert "FAIL_TO_PASS" in oracle and "PASS_TO_PASS" in oracle
    positions = [
        oracle.index(t)
        for t in ("<problem_statement>", "<gold_patch>", "<test_patch>", "<tests>", "<changes>")
    ]
    assert positions == sorted(positions)


def test_empty_changes_are_said(tmp_path, slug_task):
    base = tmp_path / "base"
    shutil.copytree(TOY_REPO, base)
    plain = WorkspaceView(base, base=base, changes=lambda: WorkspaceChanges())
    ctx = build_context(ExecutionRequest(argv=("python", "-c", "print(1)")), plain)
    user = build_messages(ctx)[1]["content"]
    assert "<changes>\n(no changes: /testbed is at the base commit)\n</changes>" in user
    assert "<problem_statement>" not in user


def test_messages_are_deterministic(view, slug_task):
    a = build_messages(_context(view, slug_task, mode="oracle"), with_reasoning=True)
    b = build_messages(_context(view, slug_task, mode="oracle"), with_reasoning=True)
    assert a == b


def test_render_target():
    pred = Prediction(stdout="héllo\n", stderr="warn\n", exit_code=1, reasoning="because")
    text = render_target(pred)
    assert text == '{"stdout":"héllo\\n","stderr":"warn\\n","exit_code":1}'
    assert list(json.loads(text)) == ["stdout", "stderr", "exit_code"]
    with_r = render_target(pred, with_reasoning=True)
    assert list(json.loads(with_r)) == ["reasoning", "stdout", "stderr", "exit_code"]
    assert Prediction.from_dict(json.loads(with_r)) == pred
    assert Prediction.from_dict(json.loads(text)) == Prediction("héllo\n", "warn\n", 1)


def test_reasoning_is_asked_for_in_the_system_prompt(view, slug_task):
    ctx = _context(view, slug_task, mode="oracle")
    assert "reasoning" in build_messages(ctx, with_reasoning=True)[0]["content"]
