"""R2E-Gym's tools (file_editor, search, execute_bash, finish), implemented in process.

:func:`run_tool` is the entry point: it never raises. Unknown tools, bad parameters and any
tool failure come back as an ``ERROR: ...`` output that tells the agent what is expected.
Outputs of successful calls get R2E-Gym's runtime clean-up (ANSI colour codes and carriage
returns removed), so ``ToolResult.output`` is exactly what R2E-Gym's observation shows.
The tool functions are in :data:`TOOLS` and in the submodules (``file_editor.file_editor``).

Imports: the sandbox's own modules and :mod:`sweworld.tasks` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sweworld.sandbox.render import strip_ansi_cr
from sweworld.sandbox.tools import execute_bash, file_editor, finish, search
from sweworld.sandbox.tools.base import (
    ToolConfig,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    printed,
    valid_text,
)

__all__ = [
    "SPECS",
    "TOOLS",
    "TOOL_ALIASES",
    "ToolConfig",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "run_tool",
]

ToolFn = Callable[[ToolContext, dict[str, str]], ToolResult]

TOOLS: dict[str, ToolFn] = {
    "file_editor": file_editor.file_editor,
    "search": search.search,
    "execute_bash": execute_bash.execute_bash,
    "finish": finish.finish,
}
SPECS: dict[str, ToolSpec] = {
    "file_editor": file_editor.SPEC,
    "search": search.SPEC,
    "execute_bash": execute_bash.SPEC,
    "finish": finish.SPEC,
}
#: Other names agents use for the same tools (SWE-agent / SWE-smith / OpenHands).
TOOL_ALIASES: dict[str, str] = {
    "str_replace_editor": "file_editor",
    "bash": "execute_bash",
    "submit": "finish",
}


def _error(message: str, exit_code: int) -> ToolResult:
    message = valid_text(message)
    return ToolResult(printed(f"ERROR: {message}"), exit_code=exit_code, info={"error": message})


def run_tool(name: str, ctx: ToolContext, params: Mapping[str, Any] | None) -> ToolResult:
    """Run tool ``name`` with ``params``; never raises.

    Returns the tool's :class:`ToolResult`; for an unknown tool or invalid parameters an
    ``ERROR: ...`` output with exit code 2; for an unexpected failure R2E-Gym's
    ``ERROR: Unhandled exception: ...`` with exit code 1. Lone surrogates in string
    parameters and in the output become U+FFFD: what crosses this boundary is valid UTF-8.
    """
    canonical = TOOL_ALIASES.get(name, name)
    tool = TOOLS.get(canonical)
    if tool is None:
        available = ", ".join(TOOLS)
        return _error(
            f"Unknown tool '{name}'. Available tools: {available}. Parameters: "
            + "; ".join(spec.describe() for spec in SPECS.values())
            + ".",
            exit_code=2,
        )
    if params is not None and not isinstance(params, Mapping):
        return _error(
            f"The parameters of {name} must be a mapping of names to values, not "
            f"{type(params).__name__}. Expected: {SPECS[canonical].describe()}.",
            exit_code=2,
        )
    args: dict[str, Any] = {
        key: valid_text(value) if isinstance(value, str) else value
        for key, value in (params or {}).items()
    }
    if canonical == "finish" and name == "submit" and "command" not in args:
        args["command"] = "submit"
    try:
        result = tool(ctx, args)
    except ToolError as exc:
        return _error(exc.message, exc.exit_code)
    except Exception as exc:  # a tool must never take the session down
        return _error(f"Unhandled exception: {exc}", exit_code=1)
    if result.exit_code == 0 and result.output:
        result.output = strip_ansi_cr(result.output)
    result.output = valid_text(result.output)
    return result
