"""R2E-Gym's ``finish`` tool (``submit`` is its alias): ends the episode."""

from __future__ import annotations

from sweworld.sandbox.tools.base import ToolContext, ToolResult, ToolSpec, printed

__all__ = ["FINISHED", "SPEC", "UNKNOWN_COMMAND", "finish"]

SPEC = ToolSpec(name="finish", optional=("command", "result"))
FINISHED = "<<<Finished>>>"
UNKNOWN_COMMAND = "Unknown command '{command}'. Only `submit` is supported."


def finish(ctx: ToolContext, params: dict[str, str]) -> ToolResult:
    """``command`` must be ``submit`` (the default when absent); ``result`` goes to info."""
    params = SPEC.check(params)
    command = params.get("command", "submit").strip() or "submit"
    if command != "submit":
        return ToolResult(printed(UNKNOWN_COMMAND.format(command=command)), exit_code=1)
    return ToolResult(printed(FINISHED), done=True, info={"result": params.get("result", "")})
