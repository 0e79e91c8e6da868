"""Hybrid executor logs (real and simulated side by side) -> SWT records with predictions."""

from __future__ import annotations

import json

import pytest

from sweworld.data.hybrid_logs import HybridLogSkip, convert_hybrid_log, read_hybrid_log
from tests.conftest import requires_sandbox


@requires_sandbox
@pytest.mark.slow
def test_a_real_shadow_log_becomes_records(tmp_path, manager, toy_tasks):
    from sweworld.execution.local import LocalExecutor
    from sweworld.execution.scripted import ScriptedExecutor
    from sweworld.sandbox.executor import ExecutionResult
    from sweworld.transition.hybrid import Always, HybridExecutor

    log = tmp_path / "hybrid.jsonl"
    rules = [{"pattern": "print", "stdout": "41\n", "exit_code": 0}]
    simulated = ScriptedExecutor(rules, default=ExecutionResult(stdout="", stderr="?", exit_code=3))
    hybrid = HybridExecutor(simulated, LocalExecutor(), policy=Always(True), shadow=True, log=log)
    task = toy_tasks[0]
    with manager.open(task, executor=hybrid) as session:
        session.step('python -c "print(6 * 7)"')
        session.step("python -m pytest -rA tests/test_textutil.py")
    out = tmp_path / "out"
    stats = convert_hybrid_log(log, {task.instance_id: task}, out)
    assert (stats.lines, stats.records, stats.with_prediction, stats.skipped) == (2, 2, 2, {})
    rows = [json.loads(x) for x in (out / "records" / "swt.jsonl").read_text().splitlines()]
    first, second = rows
    assert (first["stdout"], first["exit_code"], first["step"]) == ("42\n", 0, 0)
    assert json.loads(first["prediction"]) == {
        "stdout": "41\n",
        "stderr": "",
        "exit_code": 0,
        "source": None,
    }
    assert json.loads(second["prediction"])["exit_code"] == 3
    assert second["step"] == 1 and second["ran_tests"] and second["command_kind"] == "pytest"
    statuses = json.loads(second["test_statuses"])
    assert len(statuses) == 9 and set(statuses.values()) == {"PASSED"}
    assert json.loads(second["history"])[0]["output"] == "42\n"
    assert all(r["state_source"] == "trajectory" and r["repo"] == task.repo for r in rows)
    meta = json.loads(first["meta"])
    assert meta["verified"] is False and meta["agree"]["exit_code"] is True
    assert json.loads(first["context_blind"])["command"] == first["command"]
    assert convert_hybrid_log(log, {task.instance_id: task}, out).records == 0  # done once


def test_lines_without_truth_or_task_are_skipped_with_reasons(tmp_path, toy_tasks):
    task = toy_tasks[0]
    real = {"stdout": "ok\n", "stderr": "", "exit_code": 0, "info": {}}
    # answers of an executor that did not run the command: error messages, not truths
    env_failed = {
        "stdout": "",
        "stderr": "sweworld: the environment could not be built\n",
        "exit_code": 1,
        "info": {"status": "env_failed", "executed": False, "reason": "pip failed"},
    }
    not_started = {
        **env_failed,
        "exit_code": 126,
        "info": {"status": "exec_failed", "executed": False},
    }
    lines = [
        "{torn",
        json.dumps({"no": "command"}),
        json.dumps({"command": "python a.py", "task": task.instance_id, "simulated": real}),
        json.dumps({"command": "python a.py", "task": "other__repo-1", "real": real}),
        json.dumps({"command": "python a.py", "task": task.instance_id, "real": {"stdout": 1}}),
        json.dumps({"command": "python a.py", "task": task.instance_id, "real": env_failed}),
        json.dumps({"command": "python a.py", "task": task.instance_id, "real": not_started}),
        json.dumps({"command": "python a.py", "task": task.instance_id, "real": real}),
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n\n")
    items = list(read_hybrid_log(log, {task.instance_id: task}, modes=("blind",)))
    skips = [i.reason.split(":")[0] for i in items if isinstance(i, HybridLogSkip)]
    assert skips == [
        "invalid JSON",
        "not a hybrid log line (no command)",
        "no real result (the command was simulated only)",
        "unknown task 'other__repo-1'",
        "malformed real result (needs stdout, stderr and an integer exit_code)",
        "the real side did not run the command",
        "the real side did not run the command",
    ]
    (record,) = [i for i in items if not isinstance(i, HybridLogSkip)]
    assert record.stdout == "ok\n" and record.prediction == "" and record.context_oracle == ""
