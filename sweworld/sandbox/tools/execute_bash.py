"""R2E-Gym's ``execute_bash`` tool, in process.

The command runs through ``ToolContext.run_bash`` (the session's sandbox); its outcome is
printed exactly as ``r2egym/agenthub/tools/execute_bash.py`` prints a finished
``subprocess.run``: ``[STDOUT]`` and ``[STDERR]`` sections (each stripped), preceded by
``Error executing command:`` when the exit code is not zero. A first token from
``ToolConfig.blocked_bash_commands`` is refused with R2E-Gym's message and exit code 1; a
command that timed out gives R2E-Gym's runtime message and exit code -1.
"""

from __future__ import annotations

from sweworld.sandbox.tools.base import ToolContext, ToolError, ToolResult, ToolSpec, printed
from sweworld.sandbox.types import BashOutcome

__all__ = [
    "BLOCKED_MESSAGE",
    "ERROR_PREFIX",
    "SPEC",
    "TIMEOUT_MESSAGE",
    "execute_bash",
    "format_outcome",
]

SPEC = ToolSpec(name="execute_bash", required=("cmd",), aliases={"command": "cmd"})
BLOCKED_MESSAGE = "Bash command '{token}' is not allowed. Please use a different command or tool."
TIMEOUT_MESSAGE = "The command took too long to execute (>{timeout}s)"
ERROR_PREFIX = "Error executing command:\n"


def format_outcome(stdout: str, stderr: str, exit_code: int) -> str:
    """What R2E-Gym's execute_bash script prints for a finished command."""
    body = printed("[STDOUT]\n", f"{stdout.strip()} \n", "[STDERR]\n", stderr.strip())
    if exit_code != 0:
        return printed(ERROR_PREFIX) + body
    return body


def execute_bash(ctx: ToolContext, params: dict[str, str]) -> ToolResult:
    """Run one ``execute_bash`` call. Usage errors raise :class:`~.base.ToolError`."""
    params = SPEC.check(params)
    cmd = params["cmd"]
    tokens = cmd.strip().split()
    if not tokens:
        raise ToolError(
            "The 'cmd' parameter of execute_bash is empty. Pass the bash command to run, "
            "e.g. <parameter=cmd>ls -la</parameter>."
        )
    if tokens[0] in ctx.config.blocked_bash_commands:
        return ToolResult(
            printed(BLOCKED_MESSAGE.format(token=tokens[0])),
            exit_code=1,
            info={"blocked": tokens[0]},
        )
    outcome: BashOutcome = ctx.run_bash(cmd)
    info = dict(outcome.info)
    if outcome.timed_out:
        timeout = info.get("timeout", ctx.config.cmd_timeout)
        if isinstance(timeout, float) and timeout.is_integer():
            timeout = int(timeout)
        info["timed_out"] = True
        return ToolResult(TIMEOUT_MESSAGE.format(timeout=timeout), exit_code=-1, info=info)
    return ToolResult(
        format_outcome(outcome.stdout, outcome.stderr, outcome.exit_code),
        exit_code=outcome.exit_code,
        info=info,
    )
