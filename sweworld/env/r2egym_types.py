"""R2E-Gym's ``Action`` and ``Observation`` as :mod:`sweworld.env.r2egym_env` reproduces
them: an action parsed from R2E-Gym's XML function-call format (or a tool-call mapping), and
the observation string R2E-Gym renders for it. Re-exported by ``r2egym_env``."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from sweworld.sandbox.actions import find_function, find_parameters
from sweworld.sandbox.render import (
    R2E_BASH_FUNCTIONS,
    R2E_CONTINUE_MSG,
    R2E_DIVIDER,
    R2E_FINISH_FUNCTIONS,
    R2E_FINISHED,
    R2E_NUM_LINES,
    R2E_TRUNCATION_NOTICE,
    r2egym_exit_code,
)

__all__ = ["Action", "Observation", "as_action"]

# --------------------------------------------------------------------------- action


class Action:
    """An R2E-Gym function call: ``function_name`` and its string ``parameters``.

    ``str(action)`` is the ``<function=...>`` text (one ``<parameter=...>`` line each);
    :meth:`from_string` reads that text back (in time linear in its length); an action
    with an empty ``function_name`` stands for a response without a call.
    """

    def __init__(
        self, function_name: str, parameters: Mapping[str, Any] | None = None, function_id=None
    ):
        self.function_name = function_name or ""
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.function_id = function_id

    @classmethod
    def from_string(cls, action_str: str) -> Action:
        """The first ``<function=NAME>`` of ``action_str`` and every ``<parameter=K>V</parameter>``
        after it up to ``</function>`` (names and values stripped); no call gives ``""``."""
        found = find_function(action_str or "")
        if found is None:
            return cls("", {})
        name, tag_end = found
        end = action_str.find("</function>", tag_end)
        body = action_str[tag_end : end if end != -1 else len(action_str)]
        return cls(name, dict(find_parameters(body)))

    def to_xml_string(self) -> str:
        lines = [f"<function={self.function_name}>"]
        lines += [f"  <parameter={k}>{v}</parameter>" for k, v in self.parameters.items()]
        lines.append("</function>")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_xml_string()

    def __repr__(self) -> str:
        return f"Action({self.function_name!r}, {self.parameters!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return (self.function_name, self.parameters) == (other.function_name, other.parameters)

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function_name, "parameters": dict(self.parameters)}

    def to_bashcmd(self) -> str:
        """The tool's command line (``file_editor view --path '/testbed/x.py'``), as R2E-Gym
        runs its tool scripts; ``finish`` is an ``echo``, no call is ``""``."""
        if not self.function_name:
            return ""
        if self.function_name in R2E_FINISH_FUNCTIONS:
            return "echo '<<<Finished>>>'"
        parts = [shlex.quote(self.function_name)]
        if "command" in self.parameters:
            parts.append(shlex.quote(str(self.parameters["command"])))
        for key, value in self.parameters.items():
            if key != "command":
                parts += [f"--{key}", shlex.quote(str(value))]
        return " ".join(parts)


def as_action(action: Any) -> tuple[Action, str | dict[str, Any]]:
    """``(the Action, what the episode is given)`` for an Action-like object or text."""
    if hasattr(action, "function_name") and hasattr(action, "parameters"):
        name = str(action.function_name or "")
        params = action.parameters if isinstance(action.parameters, Mapping) else {}
        obj = Action(name, params)
        # structured, so a value holding "</parameter>" survives; no call -> R2E's reminder
        return obj, ({"function": name, "parameters": dict(params)} if name.strip() else "")
    if isinstance(action, str):
        return Action.from_string(action), action
    if isinstance(action, Mapping):
        name = action.get("function", action.get("name", ""))
        params = action.get("parameters", action.get("arguments", {}))
        name = name if isinstance(name, str) else ""
        return Action(name, params if isinstance(params, Mapping) else {}), dict(action)
    raise TypeError(
        "an R2E-Gym action is an Action (function_name, parameters), its "
        f"'<function=...>' text or a tool-call mapping, not {type(action).__name__}"
    )


# --------------------------------------------------------------------------- observation


class Observation:
    """What ``RepoEnv.step`` returns: R2E-Gym's attributes, and ``str()`` the text the agent
    reads.

    Attributes:
        bash_output: the tool's output (after the observation's header).
        error_code: the exit status as R2E-Gym's runtime reports it (``"0"``,
            ``"Error: Exit code N"``, ``"-1"``).
        action: the :class:`Action` that produced it.
        num_lines: lines kept at each end of a long ``execute_bash`` output.
        text: the rendered observation when it came from an episode (then ``str()`` is
            exactly that); None renders it from the fields above.
    """

    def __init__(
        self,
        bash_output: str,
        error_code: Any,
        action: Action,
        num_lines: int = R2E_NUM_LINES,
        text: str | None = None,
    ):
        self.bash_output = bash_output
        self.error_code = error_code
        self.action = action
        self.num_lines = num_lines
        self.text = text

    @classmethod
    def from_episode(
        cls, text: str, exit_code: int, action: Action, tool: str | None
    ) -> Observation:
        """Wrap an episode's rendered observation, recovering the tool output from it."""
        code = r2egym_exit_code(exit_code)
        output = text
        if not action.function_name or tool in R2E_FINISH_FUNCTIONS:
            output = ""
        elif tool:
            head = f"Execution output of [{tool}]:\n"
            if tool in R2E_BASH_FUNCTIONS:
                head = f"Exit code: {code}\n{head}"
            if text.startswith(head):
                output = text[len(head) :]
        return cls(output, code, action, text=text)

    def render(self) -> str:
        """R2E-Gym's layout of ``bash_output`` for ``action`` (ignoring ``text``)."""
        name = self.action.function_name if self.action is not None else ""
        if not name:
            return R2E_CONTINUE_MSG
        if name in R2E_FINISH_FUNCTIONS:
            return R2E_FINISHED
        output = self.bash_output or ""
        if name not in R2E_BASH_FUNCTIONS:
            return f"Execution output of [{name}]:\n{output}"
        lines = output.splitlines()
        if len(lines) > 2 * self.num_lines:
            middle = [R2E_DIVIDER, R2E_TRUNCATION_NOTICE, R2E_DIVIDER]
            output = "\n".join([*lines[: self.num_lines], *middle, *lines[-self.num_lines :]])
        return f"Exit code: {self.error_code}\nExecution output of [{name}]:\n{output}"

    def __str__(self) -> str:
        return self.text if self.text is not None else self.render()
