"""RecordingExecutor: every execution call becomes an SWT record whose contexts are the
simulator's, built from the state at that call, with the truth's answer."""

from __future__ import annotations

import json

from sweworld.data.record import RecordingExecutor, context_config
from sweworld.data.record import test_statuses as statuses_in
from sweworld.execution.scripted import ScriptedExecutor, ScriptedRule
from sweworld.sandbox.executor import ExecutionResult
from tests.conftest import requires_sandbox


def _answers() -> ScriptedExecutor:
    return ScriptedExecutor(
        [
            ScriptedRule(
                pattern="pytest",
                result=ExecutionResult(
                    stdout="PASSED tests/test_a.py::test_one\nFAILED tests/test_a.py::test_two\n",
                    exit_code=1,
                ),
            ),
            ScriptedRule(pattern=".", result=ExecutionResult(stdout="hello\n", exit_code=0)),
        ]
    )


def test_statuses_only_for_test_runs():
    out = "PASSED tests/test_a.py::test_one\nFAILED tests/test_a.py::test_two\n"
    assert statuses_in("python -m pytest -rA", out, None) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
    }
    assert statuses_in("python x.py", out, None) == {}


def test_context_config_uses_the_embedded_budgets():
    from sweworld.transition.simulated import EMBEDDED_BUDGETS

    cfg = context_config("blind")
    assert cfg.mode == "blind"
    assert cfg.problem_tokens == EMBEDDED_BUDGETS["problem_tokens"]
    assert context_config("oracle", model="other").mode == "oracle"


@requires_sandbox
def test_each_call_is_recorded_with_the_state_it_ran_in(manager, toy_task):
    records = []
    rec = RecordingExecutor(_answers(), records.append, source="test", meta={"run": 1})
    session = manager.open(toy_task, executor=rec)
    try:
        rec.begin_step(0)
        session.step("python -c 'print(1)'")
        rec.begin_step(1)
        session.step("echo '# edited' >> stockroom/__init__.py")  # a file operation: no call
        rec.begin_step(2, consistent=False)
        out = session.step("python -m pytest -rA tests; python -c 'print(2)'")
    finally:
        session.destroy()
    assert "hello" in str(out)
    assert [(r.step, r.call) for r in records] == [(0, 0), (2, 0), (2, 1)]
    first, tests, last = records
    assert first.diff == ""
    assert "+# edited" in tests.diff and "stockroom/__init__.py" in tests.diff
    assert tests.command_kind == "pytest" and tests.ran_tests
    assert tests.statuses() == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
    }
    assert tests.exit_code == 1 and not tests.consistent and first.consistent
    history = json.loads(tests.history)
    assert [h["command"] for h in history] == ["python -c 'print(1)'"]
    assert json.loads(last.history)[-1]["exit_code"] == 1
    oracle, blind = tests.context("oracle"), tests.context("blind")
    assert oracle.mode == "oracle" and blind.mode == "blind"
    assert "+# edited" in blind.diff
    assert blind.gold_patch == "" and oracle.gold_patch  # blind reads nothing of the fix
    assert tests.repo == toy_task.repo and tests.instance_id == toy_task.instance_id
    assert json.loads(tests.task)["instance_id"] == toy_task.instance_id
    assert json.loads(first.meta)["run"] == 1
    assert len({r.id for r in records}) == 3
    assert rec.records == records


@requires_sandbox
def test_a_predictor_answer_is_recorded_beside_the_truth(manager, toy_task):
    records = []
    guess = ScriptedExecutor(
        [ScriptedRule(pattern=".", result=ExecutionResult(stdout="guess\n", exit_code=3))]
    )
    rec = RecordingExecutor(_answers(), records.append, source="test", predictor=guess)
    session = manager.open(toy_task, executor=rec)
    try:
        out = session.step("python -c 'print(1)'")
    finally:
        session.destroy()
    assert "hello" in str(out)  # the agent sees the truth, never the prediction
    pred = json.loads(records[0].prediction)
    assert (pred["stdout"], pred["exit_code"]) == ("guess\n", 3)
    assert records[0].stdout == "hello\n"
