"""SimulatedExecutor and HybridExecutor in real sessions, with scripted model answers."""

from __future__ import annotations

import json
import subprocess
import sys

from sweworld.models.base import LMError
from sweworld.models.replay import ReplayLM
from sweworld.transition.hybrid import EveryK, HybridExecutor, Matching, compare
from sweworld.transition.simulated import SimulatedExecutor
from tests.conftest import PROJECT, requires_sandbox

pytestmark = requires_sandbox


def answer(stdout="", stderr="", exit_code=0) -> str:
    return json.dumps({"stdout": stdout, "stderr": stderr, "exit_code": exit_code})


def last_call(outcome) -> dict:
    return outcome.info["execution_calls"][-1]["info"]


def test_exact_answers_need_no_model(manager, toy_task):
    lm = ReplayLM([])  # any model call would raise: none may happen
    with manager.open(toy_task, executor=SimulatedExecutor(lm)) as s:
        missing = s.run("python nothere.py")
        assert missing.exit_code == 2 and "can't open file '/testbed/nothere.py'" in missing.stderr
        assert last_call(missing)["source"] == "exact"
        s.run("echo 'def f(:' > broken.py")
        broken = s.run("python broken.py")
        assert broken.exit_code == 1 and "SyntaxError" in broken.stderr
        assert last_call(broken)["simulated"] is True
        hint = s.run("python")
        assert last_call(hint)["source"] == "hint" and hint.exit_code == 2
    assert lm.calls == []
    # What never paid on real data is the model's to answer (python --version, a program
    # the small interpreter could run).
    lm = ReplayLM([answer("Python 3.9.20\n"), answer("hi\n")])
    with manager.open(toy_task, executor=SimulatedExecutor(lm)) as s:
        assert s.run("python --version").stdout == "Python 3.9.20\n"
        printed = s.run("python -c 'print(\"hi\")'")
        assert printed.stdout == "hi\n" and last_call(printed)["source"] == "model"
    assert len(lm.calls) == 2


def test_same_state_same_answer_and_a_new_state_asks_again(manager, toy_task):
    lm = ReplayLM([answer("one\n"), answer("two\n"), answer("three\n")])
    sim = SimulatedExecutor(lm)
    cmd = "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'"
    with manager.open(toy_task, executor=sim) as s:
        first = s.run(cmd)
        again = s.run(cmd)
        assert first.stdout == again.stdout == "one\n"
        assert last_call(again)["cache_hit"] is True
        s.run("echo '# touched' >> stockroom/textutil.py")
        assert s.run(cmd).stdout == "two\n"  # the state changed: a new prediction
        s.run("sed -i '$ d' stockroom/textutil.py")  # back to the base state
        assert s.run(cmd).stdout == "one\n"  # ... and back to its prediction
    with manager.open(toy_task, executor=sim) as other:  # same state in another session
        assert other.run(cmd).stdout == "one\n"
    assert len(lm.calls) == 2


def test_invalid_predictions_are_resampled_then_fall_back(manager, toy_task):
    tb = (
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        "ValueError: bad\n"
    )
    lm = ReplayLM(["not json at all", answer(stderr=tb, exit_code=0), answer("ok\n")])
    with manager.open(toy_task, executor=SimulatedExecutor(lm)) as s:
        out = s.run("python -c 'import stockroom; print(\"ok\")'")
        assert out.stdout == "ok\n"
        info = last_call(out)
        assert info["source"] == "model" and len(info["attempts"]) == 3
        assert info["attempts"][0]["issues"] == ["unparsable"]
        assert info["attempts"][1]["issues"]  # a traceback with exit code 0 was rejected
        assert [a["temperature"] for a in info["attempts"]] == [0.0, 0.7, 0.7]
    garbage = ReplayLM(["{{{", "nope", "[]"])
    with manager.open(toy_task, executor=SimulatedExecutor(garbage)) as s:
        out = s.run("python -c 'import stockroom'")
        assert last_call(out)["source"] == "fallback" and last_call(out)["fallback"] is True


def test_a_model_that_is_down_gives_a_bounded_clear_answer(manager, toy_task):
    def down(messages):
        raise LMError("connection refused: the model server is down")

    with manager.open(toy_task, executor=SimulatedExecutor(ReplayLM(down))) as s:
        out = s.run("python -c 'import stockroom'")
        info = last_call(out)
        assert info["source"] == "fallback"
        assert "down" in info["attempts"][0]["error"]
        assert s.run("echo usable").stdout == "usable\n"


def test_ledger_keeps_test_statuses_consistent_on_one_state(manager, toy_task):
    test = toy_task.PASS_TO_PASS[0]  # exists at the base (FAIL_TO_PASS tests come later)
    passed = answer(f"PASSED {test}\n========== 1 passed in 0.01s ==========\n", exit_code=0)
    failed = answer(f"FAILED {test}\n========== 1 failed in 0.01s ==========\n", exit_code=1)
    lm = ReplayLM([failed, failed, passed, failed])
    sim = SimulatedExecutor(lm)
    with manager.open(toy_task, executor=sim) as s:
        s.write_file(
            f"/testbed/{test.split('::')[0]}", s.read_file(f"/testbed/{test.split('::')[0]}")
        )  # same content
        first = s.run(f"python -m pytest -rA '{test}'")
        assert "FAILED" in first.stdout
        # Another command on the same state: its first answer contradicts the ledger
        # (PASSED), so it is resampled until it agrees.
        lm2_answers = [passed, failed]
        sim._lm = ReplayLM(lm2_answers)
        second = s.run(f"python -m pytest -rA -q '{test}'")
        assert "FAILED" in second.stdout
        issues = last_call(second)["attempts"][0]["issues"]
        assert "ledger_conflict" in issues


def test_snapshot_restore_and_fork_carry_the_simulators_memory(manager, toy_task):
    sim = SimulatedExecutor(ReplayLM(lambda m: answer("x\n")))
    with manager.open(toy_task, executor=sim) as s:
        s.run("python -c 'print(1)'")
        snap = s.snapshot()
        s.run("python -c 'print(2)'")
        assert len(sim.snapshot_session(s.id).history) == 2
        child = s.fork()
        try:
            assert len(sim.snapshot_session(child.id).history) == 2
            s.restore(snap)
            assert len(sim.snapshot_session(s.id).history) == 1
        finally:
            child.destroy()
        assert child.id not in sim._memory


def test_hybrid_routes_and_logs_side_by_side(manager, toy_task, tmp_path):
    from sweworld.execution.local import LocalExecutor

    real = LocalExecutor(timeout=60)
    sim = SimulatedExecutor(ReplayLM(lambda m: answer("simulated\n")))
    log = tmp_path / "calibration.jsonl"
    hybrid = HybridExecutor(sim, real, policy=EveryK(2), shadow=True, log=log)
    try:
        with manager.open(toy_task, executor=hybrid) as s:
            cmd = "python -c 'import os; print(\"real\" if os.getpid() else 0)'"
            first = s.run(cmd)
            second = s.run(cmd)
    finally:
        real.close()
    assert first.stdout == "real\n" and second.stdout == "simulated\n"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["route"] for r in records] == ["real", "simulated"]
    assert all({"real", "simulated", "agree"} <= set(r) for r in records)
    assert records[0]["agree"]["exit_code"] is True
    assert records[0]["agree"]["line_similarity"] == 0.0
    assert Matching("pytest").use_real(type("R", (), {"command": "python -m pytest"})(), 0)


def test_compare_metrics():
    from sweworld.sandbox.executor import ExecutionResult as R

    real = R("PASSED t::a\nFAILED t::b - x\n", "Traceback...\nValueError: no\n", 1)
    good = R("PASSED t::a\nFAILED t::b\n", "ValueError: no\n", 1)
    bad = R("PASSED t::a\nPASSED t::b\n", "", 0)
    assert compare(real, good) == {
        "exit_code": True,
        "exception": True,
        "tests": 1.0,
        "line_similarity": compare(real, good)["line_similarity"],
    }
    worse = compare(real, bad)
    assert worse["exit_code"] is False and worse["tests"] == 0.5 and worse["exception"] is False


def test_cli_simulate_with_a_replayed_model(tmp_path):
    answers = tmp_path / "answers.jsonl"
    summary = "============================== 55 passed in 0.92s ==============================\n"
    answers.write_text(json.dumps({"text": answer(summary)}) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweworld",
            "simulate",
            "--id",
            "sweworld__stockroom-1",
            "--command",
            "python -m pytest tests -rA",
            "--model",
            f"replay:{answers}",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stdout"] == summary and result["exit_code"] == 0
    assert result["info"]["simulated"] is True
    assert result["info"]["calls"][0]["info"]["source"] == "model"
