from __future__ import annotations

import pytest

from sweworld.sandbox.render import render_r2egym
from sweworld.sandbox.tools import ToolConfig, run_tool
from sweworld.sandbox.types import BashOutcome


def bash(sandbox, *outcomes, **params):
    if outcomes:
        sandbox.bash.outcomes = list(outcomes)
    return run_tool("execute_bash", sandbox.ctx, params)


def test_success_layout(sandbox):
    r = bash(sandbox, BashOutcome(stdout="hello\nworld\n", stderr="", exit_code=0), cmd="echo hi")
    assert sandbox.bash.commands == ["echo hi"]
    assert r.exit_code == 0
    assert r.output == "[STDOUT]\n\nhello\nworld \n\n[STDERR]\n\n\n"
    assert render_r2egym("execute_bash", r.output, r.exit_code) == (
        "Exit code: 0\nExecution output of [execute_bash]:\n"
        "[STDOUT]\n\nhello\nworld \n\n[STDERR]\n\n\n"
    )


def test_failure_layout(sandbox):
    outcome = BashOutcome(
        stdout="  partial \n", stderr="Traceback...\nValueError: x\n", exit_code=1
    )
    r = bash(sandbox, outcome, cmd="python x.py")
    assert r.exit_code == 1
    assert r.output == (
        "Error executing command:\n\n"
        "[STDOUT]\n\npartial \n\n"
        "[STDERR]\n\nTraceback...\nValueError: x\n"
    )
    assert render_r2egym("execute_bash", r.output, r.exit_code).startswith(
        "Exit code: Error: Exit code 1\n"
        "Execution output of [execute_bash]:\n"
        "Error executing command:"
    )


def test_command_alias_and_bash_tool_name(sandbox):
    r = run_tool("bash", sandbox.ctx, {"command": "ls"})
    assert sandbox.bash.commands == ["ls"]
    assert r.output.startswith("[STDOUT]")


def test_timeout(sandbox):
    r = bash(sandbox, BashOutcome(stdout="partial", exit_code=-1, timed_out=True), cmd="sleep 999")
    assert r.output == "The command took too long to execute (>90s)"
    assert r.exit_code == -1
    assert r.info["timed_out"] is True
    assert render_r2egym("execute_bash", r.output, r.exit_code) == (
        "Exit code: -1\nExecution output of [execute_bash]:\n"
        "The command took too long to execute (>90s)"
    )
    sandbox.ctx.config = ToolConfig(cmd_timeout=30)
    r = bash(sandbox, BashOutcome(exit_code=-1, timed_out=True), cmd="sleep 999")
    assert r.output == "The command took too long to execute (>30s)"
    r = bash(sandbox, BashOutcome(exit_code=-1, timed_out=True, info={"timeout": 12.0}), cmd="x")
    assert r.output == "The command took too long to execute (>12s)"


@pytest.mark.parametrize(
    "cmd", ["pip install requests", "  ipython", "jupyter notebook", "nohup x &"]
)
def test_blocked_commands(sandbox, cmd):
    r = bash(sandbox, cmd=cmd)
    token = cmd.split()[0]
    assert (
        r.output
        == f"Bash command '{token}' is not allowed. Please use a different command or tool.\n"
    )
    assert r.exit_code == 1
    assert sandbox.bash.commands == []


def test_blocked_list_is_configurable_and_only_checks_the_first_token(sandbox):
    r = bash(sandbox, cmd="python -m pip install x")
    assert sandbox.bash.commands == ["python -m pip install x"]
    assert r.exit_code == 0
    sandbox.ctx.config = ToolConfig(blocked_bash_commands=("rm",))
    r = bash(sandbox, cmd="rm -rf /")
    assert r.output == "Bash command 'rm' is not allowed. Please use a different command or tool.\n"
    r = bash(sandbox, cmd="pip list")
    assert r.exit_code == 0


def test_ansi_codes_and_carriage_returns_are_removed_on_success_only(sandbox):
    ok = BashOutcome(stdout="\x1b[32mPASSED\x1b[0m\r\n", exit_code=0)
    assert bash(sandbox, ok, cmd="pytest").output == "[STDOUT]\n\nPASSED \n\n[STDERR]\n\n\n"
    bad = BashOutcome(stdout="\x1b[31mFAILED\x1b[0m\n", exit_code=1)
    assert "\x1b[31mFAILED\x1b[0m" in bash(sandbox, bad, cmd="pytest").output


@pytest.mark.parametrize("params", [{}, {"cmd": ""}, {"cmd": "   "}, {"cmd": "ls", "timeout": "5"}])
def test_parameter_errors(sandbox, params):
    r = run_tool("execute_bash", sandbox.ctx, params)
    assert r.output.startswith("ERROR: ")
    assert r.exit_code == 2
    assert sandbox.bash.commands == []


def test_parameter_error_messages(sandbox):
    r = run_tool("execute_bash", sandbox.ctx, {})
    assert r.output == (
        "ERROR: Missing required parameter 'cmd' for execute_bash. "
        "Expected: execute_bash(cmd (required)).\n"
    )
    r = run_tool("execute_bash", sandbox.ctx, {"cmd": " "})
    assert r.output == (
        "ERROR: The 'cmd' parameter of execute_bash is empty. Pass the bash command to run, "
        "e.g. <parameter=cmd>ls -la</parameter>.\n"
    )


def test_unknown_tool_and_unexpected_failures(sandbox):
    r = run_tool("python", sandbox.ctx, {"code": "1"})
    assert r.output.startswith(
        "ERROR: Unknown tool 'python'. Available tools: file_editor, search, execute_bash, finish."
    )
    assert "execute_bash(cmd (required))" in r.output
    assert r.exit_code == 2

    def broken(command):
        raise RuntimeError("sandbox exploded")

    sandbox.ctx.run_bash = broken
    r = run_tool("execute_bash", sandbox.ctx, {"cmd": "ls"})
    assert r.output == "ERROR: Unhandled exception: sandbox exploded\n"
    assert r.exit_code == 1
