"""The outcome executor stops at the step's deadline: every loop whose length the input
decides checks it, a step stopped there claims nothing (exit 126, ``info["timed_out"]``)
and leaves the session's ledger as it was."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweworld.sandbox.executor import NO_EXECUTOR_EXIT_CODE, ExecutionRequest
from sweworld.transition import deadline as deadline_module
from sweworld.transition.deadline import StepOverrun, check_deadline, step_deadline
from sweworld.transition.outcome.executor import OutcomeExecutor

#: the stages in the order a test run first reaches them (the graded tests' state, made
#: after the step's features, goes through the changed files and the import graph again)
STAGES = [
    "reading the state",
    "collecting the tests",
    "the changed files' definitions",
    "the import graph",
    "the graded tests' features",
    "the tests' features",
    "deciding the tests",
]


def test_the_deadline_is_the_steps_own() -> None:
    check_deadline("no step")  # outside a step: never raises
    with step_deadline(time.monotonic() - 1):
        with pytest.raises(StepOverrun, match="during the import graph") as raised:
            check_deadline("the import graph")
        assert raised.value.stage == "the import graph"
        seen: list[BaseException] = []

        def other_thread() -> None:  # another step's thread has no deadline of this one
            try:
                check_deadline("elsewhere")
            except StepOverrun as exc:
                seen.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert seen == []
    with step_deadline(None):
        check_deadline("no deadline")
    check_deadline("after the step")


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> SimpleNamespace:
    """A base with a chain of 30 modules and a test file of 300 tests; a workspace in which
    every module changed."""
    root = tmp_path_factory.mktemp("big")
    base, ws = root / "base", root / "ws"
    (base / "pkg").mkdir(parents=True)
    (base / "tests").mkdir()
    (base / "pkg" / "__init__.py").write_text("")
    for i in range(30):
        head = f"from pkg import m{i + 1}\n" if i < 29 else ""
        (base / "pkg" / f"m{i}.py").write_text(head + "def f(x):\n    return x + 1\n")
    tests = "from pkg.m0 import f\n\n" + "".join(
        f"def test_{i}():\n    assert f({i}) == {i + 1}\n\n" for i in range(300)
    )
    (base / "tests" / "test_big.py").write_text(tests)
    shutil.copytree(base, ws)
    changed = [f"pkg/m{i}.py" for i in range(30)]
    for rel in changed:
        path = ws / rel
        path.write_text(path.read_text().replace("x + 1", "x + 2"))
    ids = [f"tests/test_big.py::test_{i}" for i in range(300)]
    task = {"instance_id": "big-1", "repo": "big/big", "base_commit": "0" * 40, "patch": "",
            "FAIL_TO_PASS": json.dumps(ids[:5]), "PASS_TO_PASS": json.dumps(ids[5:10])}  # fmt: skip
    return SimpleNamespace(base=base, ws=ws, changed=changed, task=task)


def _request(big: SimpleNamespace, deadline: float | None) -> ExecutionRequest:
    changes = SimpleNamespace(written=big.changed, deleted=[])
    return ExecutionRequest(
        argv=("python", "-m", "pytest", "tests/test_big.py", "-rA"), workspace=Path(big.ws),
        base=Path(big.base), task=big.task, session_id="s1", changes=lambda: changes,
        deadline=deadline,
    )  # fmt: skip


def test_a_step_stops_at_every_checkpoint_in_order_and_claims_nothing(big, monkeypatch):
    """A clock that ticks once per check: a deadline of k ticks stops the step at its k-th
    check. As k grows the step stops at each stage in turn, then answers."""
    executor = OutcomeExecutor(mode="oracle")
    ticks = iter(range(10**9))
    stopped_at: list[str] = []
    for k in range(0, 400):
        monkeypatch.setattr(deadline_module, "monotonic", lambda: float(next(ticks)))
        start = next(ticks) + 1  # the clock's value at the step's first check
        result = executor.execute(_request(big, float(start + k)))
        monkeypatch.undo()
        if result.info["route"] != "timeout":
            break
        assert result.exit_code == NO_EXECUTOR_EXIT_CODE and result.stdout == ""
        assert result.info["timed_out"] is True
        assert "did not finish within the step's deadline" in result.stderr
        assert "no result is claimed" in result.stderr
        assert executor._ledger("s1").steps == 0  # a step stopped at its deadline is not seen
        if not stopped_at or stopped_at[-1] != result.info["stage"]:
            stopped_at.append(result.info["stage"])
    else:
        raise AssertionError("the step never answered")
    assert list(dict.fromkeys(stopped_at)) == STAGES
    assert stopped_at[-1] == "deciding the tests"
    assert result.info["route"] == "outcome-model" and result.info["tests"] == 300
    assert executor._ledger("s1").steps == 1


def test_no_deadline_and_a_far_one_answer_the_same(big) -> None:
    executor = OutcomeExecutor(mode="oracle")
    free = executor.execute(_request(big, None))
    executor.forget("s1")
    bounded = executor.execute(_request(big, time.monotonic() + 3600))
    assert free.info["route"] == bounded.info["route"] == "outcome-model"
    assert (free.stdout, free.exit_code) == (bounded.stdout, bounded.exit_code)


def test_a_step_stopped_at_its_deadline_marks_no_install(big) -> None:
    executor = OutcomeExecutor(mode="oracle")
    request = _request(big, time.monotonic() - 1)
    stopped = executor.execute(
        ExecutionRequest(**{**request.__dict__, "argv": ("pytest", "tests/install_test.py")})
    )
    assert stopped.info["route"] == "timeout"
    ledger = executor._ledger("s1")
    assert (ledger.steps, ledger.installed) == (0, False)


def test_the_judge_runs_outside_the_steps_deadline(big, monkeypatch) -> None:
    """The judge (the reward) is asked only with time left, then not stopped midway: a
    decision cut short would be remembered for the diff."""
    seen: list[str] = []

    def judge(task, patch) -> bool:
        with monkeypatch.context() as clock:  # the deadline, were it seen, has passed
            clock.setattr(deadline_module, "monotonic", lambda: float("inf"))
            try:
                check_deadline("the judge")
                seen.append("no deadline")
            except StepOverrun:
                seen.append("stopped")
        return True

    executor = OutcomeExecutor(mode="oracle", judge=judge)
    result = executor.execute(_request(big, time.monotonic() + 3600))
    assert seen == ["no deadline"]
    assert result.info["route"] == "outcome-model" and result.info["graded"]["judge"] == "decided"


def test_collection_stops_inside_a_huge_test_file(tmp_path, monkeypatch) -> None:
    """Collection checks the deadline between files and every 64 definitions of a file: a
    step over a file of 2,000 tests can stop at some 30 points inside its collection (it
    could stop only after the whole collection before), and none of them claims a result."""
    from sweworld.transition.outcome.collect import collect_tests

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_many.py").write_text(
        "".join(f"def test_{i}():\n    assert {i}\n\n" for i in range(2000))
    )
    from sweworld.transition.types import WorkspaceView

    view = WorkspaceView(tmp_path, base=tmp_path)
    ticks: list[int] = []  # a clock that ticks once per check
    monkeypatch.setattr(deadline_module, "monotonic", lambda: (ticks.append(1), len(ticks))[1])
    with step_deadline(float("inf")):
        found = collect_tests(view, ("pytest", "tests"), "/testbed")
    assert found is not None and len(found.ids) == 2000
    checks = len(ticks)
    assert checks >= 2000 // 64
    for k in (1, checks // 2, checks):  # stopped at the k-th check: raised, not swallowed
        ticks.clear()
        with step_deadline(float(k)), pytest.raises(StepOverrun, match="collecting the tests"):
            collect_tests(view, ("pytest", "tests"), "/testbed")
