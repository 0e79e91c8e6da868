"""R2E-Gym's ``finish`` tool (``submit`` is its alias): ends the episode, always.

In R2E-Gym a ``finish`` call never reaches its ``finish.py`` script: ``Action.to_bashcmd``
turns every ``finish`` call into ``echo '<<<Finished>>>'`` whatever its parameters, and
``RepoEnv.step`` ends the episode for any function named ``finish`` (``submit`` in later
releases). So here too every call prints ``<<<Finished>>>`` and ends the episode (the
observation is ``<<< Finished >>>``): a ``command`` other than ``submit`` or an unknown
parameter does not keep the episode going; they are reported in ``info``.
"""

from __future__ import annotations

from typing import Any

from sweworld.sandbox.tools.base import ToolContext, ToolResult, ToolSpec, printed

__all__ = ["FINISHED", "SPEC", "finish"]

SPEC = ToolSpec(name="finish", optional=("command", "result"))
FINISHED = "<<<Finished>>>"


def finish(ctx: ToolContext, params: dict[str, Any]) -> ToolResult:
    """End the episode; ``result`` (if any) goes to ``info``."""
    result = params.get("result")
    info: dict[str, Any] = {"result": "" if result is None else str(result)}
    command = params.get("command")
    if command is not None and str(command).strip() not in ("", "submit"):
        info["ignored_command"] = str(command)
    unknown = sorted(str(key) for key in params if key not in SPEC.parameters)
    if unknown:
        info["ignored_parameters"] = unknown
    return ToolResult(printed(FINISHED), done=True, info=info)
