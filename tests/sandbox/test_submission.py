"""Only what really ran can end an episode, and the submitted patch is the workspace's diff."""

from __future__ import annotations

import pytest

from sweworld.execution.scripted import ScriptedExecutor, ScriptedRule
from sweworld.sandbox.executor import ExecutionResult
from sweworld.sandbox.render import check_submission
from tests.conftest import requires_sandbox

MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FAKE_DIFF = (
    "diff --git a/stockroom/inventory.py b/stockroom/inventory.py\n"
    "--- a/stockroom/inventory.py\n"
    "+++ b/stockroom/inventory.py\n"
    "@@ -1 +1 @@\n"
    "-x\n"
    "+fixed\n"
)


def forging_executor() -> ScriptedExecutor:
    """Answers every execution command with the marker and an invented diff (exit 0)."""
    answer = ExecutionResult(stdout=f"{MARKER}\n{FAKE_DIFF}", stderr="", exit_code=0)
    return ScriptedExecutor([ScriptedRule(result=answer, pattern=".")])


# ----------------------------------------------------------------------------- the rule


def test_check_submission_counts_only_commands_without_execution_calls():
    out = f"{MARKER}\n{FAKE_DIFF}"
    real = check_submission(out, 0, [])
    assert (real.accepted, real.text, real.refused) == (True, FAKE_DIFF, "")
    forged = check_submission(out, 0, [{"command": "python -c 'print(1)'"}])
    assert not forged.accepted
    assert forged.refused
    assert forged.output.startswith(out)
    assert "not taken as a submission" in forged.output
    assert "`python -c 'print(1)'`" in forged.output
    plain = check_submission("hello\n", 0, [{"command": "python x.py"}])
    assert (plain.accepted, plain.refused, plain.output) == (False, "", "hello\n")


# ----------------------------------------------------------------------------- sessions


@requires_sandbox
@pytest.mark.parametrize(
    "command",
    [
        "python -c 'print(1)'",  # the prediction itself is the "submission"
        "python reproduce.py && git diff",  # its exit code decided what ran next
        "echo " + MARKER + " && python -m pytest -q",  # the marker is real, the rest is not
    ],
)
def test_a_predicted_submission_never_ends_the_episode(manager, toy_task, command):
    session = manager.open(toy_task, executor=forging_executor())
    try:
        result = session.step(f"THOUGHT: submit\n\n```bash\n{command}\n```")
        assert not result.done
        assert not session.done
        assert "patch" not in result.info
        assert result.info["submission_refused"]
        assert result.observation.startswith("<returncode>0</returncode>\n<output>\n")
        assert "not taken as a submission" in result.observation
        assert session.get_patch() == ""
        # a real submission afterwards ends the episode with the (empty) real diff
        real = session.step(f"echo {MARKER} && git diff")
        assert real.done
        assert real.info["patch"] == ""
    finally:
        session.destroy()


@requires_sandbox
def test_a_real_submission_returns_the_real_diff_not_the_printed_text(manager, toy_task):
    session = manager.open(toy_task, executor=forging_executor())
    try:
        session.step("echo change >> README.md")
        # the agent prints an invented diff after a real marker: the patch is still real
        sub = session.step(f"printf '{MARKER}\\ndiff --git a/x b/x\\n+invented\\n'")
        assert sub.done
        assert sub.observation == "diff --git a/x b/x\n+invented\n"
        assert "+change" in sub.info["patch"]
        assert "invented" not in sub.info["patch"]
        assert sub.info["patch"] == session.get_patch()
    finally:
        session.destroy()


@requires_sandbox
def test_finish_with_any_command_ends_the_episode_with_the_real_diff(manager, toy_task):
    session = manager.open(toy_task, executor=forging_executor())
    try:
        session.step("echo change >> README.md")
        out = session.step("<function=finish><parameter=command>abort</parameter></function>")
        assert out.done and session.done
        assert out.observation == "<<< Finished >>>"
        assert out.info["ignored_command"] == "abort"
        assert "+change" in out.info["patch"]
    finally:
        session.destroy()
