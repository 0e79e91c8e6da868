"""The real reward end to end on the toy tasks: base 0, gold 1, wrong 0, honest statuses."""

from __future__ import annotations

import pytest

from sweworld.execution.envs import EnvBuilder, EnvRecipe
from sweworld.execution.local import LocalExecutor
from sweworld.reward.real import real_reward
from tests.conftest import requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def local():
    executor = LocalExecutor(timeout=120)
    yield executor
    executor.close()


def wrong_patch(task) -> str:
    """A patch that applies but does not fix anything: it only edits the README."""
    return (
        "diff --git a/README.md b/README.md\n"
        "--- a/README.md\n"
        "+++ b/README.md\n"
        "@@ -1 +1,2 @@\n"
        f" {_first_line(task)}\n"
        "+A note that fixes nothing.\n"
    )


def _first_line(task) -> str:
    from sweworld.tasks.toy import toy_data_dir

    return (toy_data_dir() / "repo" / "README.md").read_text().splitlines()[0]


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_base_gold_and_wrong_patch(manager, toy_tasks, local, index):
    task = toy_tasks[index]
    base = real_reward(task, None, manager=manager, executor=local)
    assert base.status == "unresolved", base.info
    assert base.resolved is False and base.reward == 0.0
    for test in task.FAIL_TO_PASS:  # the FAIL_TO_PASS tests really fail before ...
        assert base.statuses.get(test) in (None, "FAILED", "ERROR"), (test, base.log[-2000:])
    for test in task.PASS_TO_PASS:
        assert base.statuses[test] == "PASSED"

    gold = real_reward(task, task.patch, manager=manager, executor=local)
    assert gold.status == "resolved", gold.info
    assert gold.resolved is True and gold.reward == 1.0, gold.log[-3000:]
    for test in task.FAIL_TO_PASS + task.PASS_TO_PASS:  # ... and pass after
        assert gold.statuses[test] == "PASSED"
    entry = gold.report[task.instance_id]
    assert entry["patch_successfully_applied"] is True
    assert entry["tests_status"]["FAIL_TO_PASS"]["failure"] == []

    wrong = real_reward(task, wrong_patch(task), manager=manager, executor=local)
    assert wrong.status == "unresolved"
    assert wrong.resolved is False
    assert wrong.report[task.instance_id]["tests_status"]["FAIL_TO_PASS"]["failure"]


def test_patch_that_does_not_apply(manager, toy_task, local):
    bad = (
        "diff --git a/nowhere.py b/nowhere.py\n--- a/nowhere.py\n+++ b/nowhere.py\n"
        "@@ -1 +1 @@\n-x\n+y\n"
    )
    result = real_reward(toy_task, bad, manager=manager, executor=local)
    assert result.status == "patch_failed"
    entry = result.report[toy_task.instance_id]
    assert entry["resolved"] is False and entry["patch_successfully_applied"] is False


def test_a_candidate_cannot_weaken_the_tests(manager, toy_task, local):
    # Deleting the test file in the candidate is undone before the task's tests are applied.
    cheat = (
        "diff --git a/tests/test_textutil.py b/tests/test_textutil.py\n"
        "deleted file mode 100644\n"
        "--- a/tests/test_textutil.py\n"
        "+++ /dev/null\n"
    )
    text = (manager.checkout(toy_task).path / "tests/test_textutil.py").read_text()
    n = len(text.splitlines())
    cheat += f"@@ -1,{n} +0,0 @@\n" + "".join(f"-{line}\n" for line in text.splitlines())
    result = real_reward(toy_task, cheat, manager=manager, executor=local)
    assert result.status == "unresolved"
    assert result.resolved is False


def test_hanging_tests_time_out(manager, toy_task):
    hang = toy_task.patch.replace(
        "+    return slug.strip(separator)", "+    while True:\n+        pass"
    ).replace("@@ -16,14 +16,18 @@", "@@ -16,14 +16,19 @@")
    executor = LocalExecutor(timeout=5)
    try:
        result = real_reward(toy_task, hang, manager=manager, executor=executor, timeout=60)
    finally:
        executor.close()
    assert result.status == "timeout", (result.info, result.log[-1000:])
    assert result.resolved is False
    assert result.report[toy_task.instance_id]["sweworld_status"] == "timeout"


def test_environment_that_cannot_be_built(manager, toy_task, tmp_path):
    builder = EnvBuilder(tmp_path / "envs", default=EnvRecipe(install=("exit 7",)))
    executor = LocalExecutor(builder=builder)
    try:
        result = real_reward(toy_task, toy_task.patch, manager=manager, executor=executor)
    finally:
        executor.close()
    assert result.status == "env_failed"
    assert result.resolved is False  # never a silent pass, never a test failure
    assert result.report[toy_task.instance_id]["sweworld_status"] == "env_failed"


def test_a_run_that_reached_no_real_executor_is_exec_failed(manager, toy_task):
    """The gold patch with nothing to run the tests: never graded as test failures."""
    from sweworld.sandbox.executor import NoExecutor

    result = real_reward(toy_task, toy_task.patch, manager=manager, executor=NoExecutor())
    assert result.status == "exec_failed" and result.resolved is False
    entry = result.report[toy_task.instance_id]
    assert entry["sweworld_status"] == "exec_failed" and "tests_status" not in entry
    assert result.info["reason"]


def test_tests_listed_in_reset_files_are_restored_before_they_run(manager, toy_task, local):
    """A task whose tests exist at the base (no test patch: the task factory's) names them
    in ``reset_files``; a candidate that rewrites them to pass is then not resolved."""
    from sweworld.tasks.schema import Task

    row = {**toy_task.to_row(), "test_patch": "", "setup_patch": toy_task.test_patch}
    row["instance_id"] = toy_task.instance_id + "-tests-at-base"
    ids = toy_task.FAIL_TO_PASS + toy_task.PASS_TO_PASS
    body = "".join(f"def {i.split('::')[1]}():\n    pass\n\n\n" for i in ids)
    path = toy_task.test_files()[0]
    cheat_lines = body.rstrip("\n").split("\n")
    # a rewrite of the whole test file (as its state after the test patch) into stubs
    after = Task.from_row(row)
    cheat = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
    session = manager.open(after, executor=None)
    try:
        old = session.read_file(f"/testbed/{path}").splitlines()
    finally:
        session.destroy()
    cheat += f"@@ -1,{len(old)} +1,{len(cheat_lines)} @@\n"
    cheat += "".join(f"-{line}\n" for line in old) + "".join(f"+{line}\n" for line in cheat_lines)
    unprotected = real_reward(after, cheat, manager=manager, executor=local)
    assert unprotected.status == "resolved" and unprotected.resolved is True  # the hole
    protected = Task.from_row({**row, "reset_files": [path]})
    result = real_reward(protected, cheat, manager=manager, executor=local)
    assert result.status == "unresolved" and result.resolved is False
    assert real_reward(protected, toy_task.patch, manager=manager, executor=local).resolved
