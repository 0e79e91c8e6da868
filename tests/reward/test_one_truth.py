"""One state, one truth (issue 20): on every toy task, a simulated test run of the task's
tests on a submitted state and the reward of that state agree.

For each candidate (the gold patch, a change in the right file that is not the fix, an empty
patch), the outcome executor (oracle mode) with the reward as its judge, as the default
world builds it, runs the task's
FAIL_TO_PASS / PASS_TO_PASS test files on the candidate's state with the task's test patch
applied (the grader's state), and the default reward (the learned verdict) scores the same
candidate: every graded test passing in the simulated run goes with "resolved", and a graded
test failing with "unresolved". The reward's own report of the tests agrees with its
decision too.
"""

from __future__ import annotations

import pytest

from sweworld.execution.log_parsers import parse_pytest_log
from sweworld.reward.model import RewardModel
from sweworld.tasks import test_list
from sweworld.tasks.patches import patch_hunks
from sweworld.transition.outcome.executor import OutcomeExecutor

pytestmark = pytest.mark.slow


def _first_file(patch: str) -> str:
    return next(iter(patch_hunks(patch)))


def _candidates(session, task) -> dict[str, str]:
    """name -> patch text, made in the session with real edits."""
    out: dict[str, str] = {"empty": ""}
    out["gold"] = task.patch
    path = _first_file(task.patch)  # a change in the right file that is not the fix
    session.run(f"printf '\\n\\ndef _unused_helper():\\n    return None\\n' >> {path}")
    out["wrong"] = session.get_patch()
    session.run(f"git checkout -q -- {path}")
    return out


def _simulated_graded(manager, task, patch: str, judge) -> dict[str, str]:
    """The graded tests' statuses in a simulated run of their files on patch + test patch."""
    graded = [*test_list(task, "FAIL_TO_PASS"), *test_list(task, "PASS_TO_PASS")]
    files = sorted({t.split("::", 1)[0] for t in graded})
    with manager.open(task, executor=OutcomeExecutor(mode="oracle", judge=judge)) as s:
        for name, text in (("candidate", patch), ("tests", task.test_patch)):
            if text.strip():
                s.write_file(f"/tmp/{name}.diff", text)
                applied = s.run(f"git apply /tmp/{name}.diff")
                assert applied.exit_code == 0, applied.stdout + applied.stderr
        run = s.run("python -m pytest -rA " + " ".join(files))
        info = run.info["execution_calls"][-1]["info"]
        assert info["graded"]["tests"] == len(set(graded)), info
        assert info["graded"]["judge"] in ("decided", "remembered"), info  # the reward's
    statuses = parse_pytest_log(run.stdout)
    return {t: statuses.get(t, "MISSING") for t in graded}


def _agent_run(manager, task, patch: str, judge) -> dict[str, str]:
    """The graded tests an agent's own run (candidate applied, no test patch) shows."""
    graded = {*test_list(task, "FAIL_TO_PASS"), *test_list(task, "PASS_TO_PASS")}
    files = sorted({t.split("::", 1)[0] for t in graded})
    with manager.open(task, executor=OutcomeExecutor(mode="oracle", judge=judge)) as s:
        if patch.strip():
            s.write_file("/tmp/candidate.diff", patch)
            assert s.run("git apply /tmp/candidate.diff").exit_code == 0
        run = s.run("python -m pytest -rA " + " ".join(files))
    return {t: v for t, v in parse_pytest_log(run.stdout).items() if t in graded}


def test_simulated_tests_and_reward_agree_on_every_toy_task(manager, toy_tasks) -> None:
    reward = RewardModel(mode="oracle", stages=("syntax", "semantic"), manager=manager)
    seen = {True: 0, False: 0}
    for task in toy_tasks:
        with manager.open(task) as s:
            candidates = _candidates(s, task)
        for name, patch in candidates.items():
            result = reward.score(task, patch)
            graded = [*test_list(task, "FAIL_TO_PASS"), *test_list(task, "PASS_TO_PASS")]
            report = result.report.get(task.instance_id, {}).get("tests_status", {})
            if report:  # the reward's own report agrees with its decision
                failing = report["FAIL_TO_PASS"]["failure"] + report["PASS_TO_PASS"]["failure"]
                assert (not failing) == result.resolved, (task.instance_id, name, report)
            if name == "empty":
                assert not result.resolved
                continue
            simulated = _simulated_graded(manager, task, patch, reward.judge)
            all_pass = all(v == "PASSED" for v in simulated.values())
            assert all_pass == result.resolved, (task.instance_id, name, simulated, result.info)
            assert set(simulated) == set(graded)
            shown = _agent_run(manager, task, patch, reward.judge)
            if result.resolved:  # every graded test the agent's run collects passes
                assert shown and all(v == "PASSED" for v in shown.values()), (name, shown)
            seen[result.resolved] += 1
    # both sides of the agreement were exercised
    assert seen[True] >= 1 and seen[False] >= 1, seen


def test_the_judge_takes_a_task_row_as_well_as_a_task(toy_tasks) -> None:
    """The benchmarks hand the judge the record's task row (a mapping): the same decision."""
    task = toy_tasks[0]
    reward = RewardModel(mode="oracle")
    try:
        assert reward.judge(task, task.patch) is True
        assert reward.judge(task.to_row(), task.patch) is True
        assert reward.judge(dict(task.to_row()), "") is False  # empty: decisive, unresolved
    finally:
        reward.close()
