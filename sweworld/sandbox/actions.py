"""Parsing agent actions.

Accepted forms:

* **R2E-Gym / OpenHands XML function calls**: ``<function=NAME>`` followed by
  ``<parameter=KEY>VALUE</parameter>`` elements; values are stripped as R2E-Gym strips
  them; a missing ``</function>`` (a response cut at that stop sequence) is tolerated.
* **mini-swe-agent responses**: prose with exactly one fenced ```` ```bash ```` block (its
  regular expression); zero or several blocks give mini-swe-agent's own format error.
* **a raw bash command**: any other non-empty text.
* **a mapping**: ``{"function"|"name": ..., "parameters"|"arguments": {...}}`` (arguments
  may be a JSON string, as in OpenAI tool calls; ``{"type": "function", "function": {...}}``
  works too) or ``{"bash"|"command": "..."}``.

Aliases: ``str_replace_editor`` -> ``file_editor``, ``bash`` -> ``execute_bash`` (parameter
``command`` -> ``cmd``), ``submit`` -> ``finish`` (``command=submit``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sweworld.sandbox.render import R2E_CONTINUE_MSG, render_mini_swe_agent_format_error

__all__ = [
    "ACTION_FORMATS",
    "EMPTY_ACTION_MESSAGE",
    "FUNCTION_ALIASES",
    "FUNCTION_RE",
    "MAX_ACTION_CHARS",
    "MINI_SWE_AGENT_ACTION_RE",
    "PARAMETER_RE",
    "Action",
    "ActionParseError",
    "find_bash_blocks",
    "find_function",
    "find_parameters",
    "parse_action",
]

ActionFormat = Literal["auto", "r2e", "mini_swe_agent", "bash"]
ACTION_FORMATS: tuple[str, ...] = ("auto", "r2e", "mini_swe_agent", "bash")

FUNCTION_ALIASES: dict[str, str] = {
    "str_replace_editor": "file_editor",
    "bash": "execute_bash",
    "submit": "finish",
}

#: R2E-Gym's expressions (``Action.from_string``), and mini-swe-agent's
#: (``DefaultAgent.parse_action``). They define what is accepted; the parsers below find
#: the same matches in one pass (the expressions themselves backtrack quadratically on
#: unterminated tags or blocks, e.g. ``'<parameter=a>' * 20000``).
FUNCTION_RE = re.compile(r"<function\s*=\s*([^>]*)>")
PARAMETER_RE = re.compile(r"<parameter\s*=\s*([^>]+)>(.*?)</parameter>", re.DOTALL)
MINI_SWE_AGENT_ACTION_RE = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_FUNCTION_END = "</function>"
_PARAMETER_END = "</parameter>"
_FENCE_OPEN = "```bash"
_FENCE_CLOSE = "\n```"
_SPACES_RE = re.compile(r"\s*")

#: Longest action text (or JSON arguments string) parsed; longer ones are refused.
MAX_ACTION_CHARS = 1_000_000

EMPTY_ACTION_MESSAGE = (
    "No action found in your response. Send exactly one action, in one of these forms:\n"
    "1. a function call:\n"
    "<function=execute_bash>\n"
    "  <parameter=cmd>ls -la</parameter>\n"
    "</function>\n"
    "   (tools: file_editor, search, execute_bash, finish)\n"
    "2. exactly one bash code block:\n"
    "```bash\n"
    "ls -la\n"
    "```\n"
    "3. a plain bash command."
)


class ActionParseError(ValueError):
    """The agent's response holds no usable action. ``str(error)`` is meant for the agent."""

    def __init__(self, message: str, *, n_actions: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.n_actions = n_actions


@dataclass
class Action:
    """One parsed action.

    ``kind == "function"``: a tool call (``function`` and ``parameters``);
    ``kind == "bash"``: a shell command (``command``; ``function`` is ``""``).
    """

    kind: Literal["function", "bash"]
    function: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    command: str = ""
    raw: str = ""

    def to_xml(self) -> str:
        """R2E-Gym's ``<function=NAME>`` form (a bash action becomes ``execute_bash``)."""
        if self.kind == "bash":
            name, params = "execute_bash", {"cmd": self.command}
        else:
            name, params = self.function, self.parameters
        lines = [f"<function={name}>"]
        lines += [f"  <parameter={key}>{value}</parameter>" for key, value in params.items()]
        lines.append("</function>")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "bash":
            return {"kind": "bash", "command": self.command}
        return {"kind": "function", "function": self.function, "parameters": dict(self.parameters)}


def _apply_aliases(name: str, params: dict[str, str]) -> tuple[str, dict[str, str]]:
    name = FUNCTION_ALIASES.get(name, name)
    params = dict(params)
    if name == "execute_bash" and "cmd" not in params and "command" in params:
        params["cmd"] = params.pop("command")
    if name == "finish" and "command" not in params:
        params["command"] = "submit"
    return name, params


def _value_to_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


class _Finder:
    """``text.find(needle, i)`` for non-decreasing ``i``, each character scanned once.

    A search that found nothing from ``i`` finds nothing from any later position, and one
    that found ``j`` finds ``j`` again from any position up to ``j``: both are remembered.
    """

    def __init__(self, text: str, needle: str) -> None:
        self.text = text
        self.needle = needle
        self.start = -1
        self.found = -1

    def find(self, i: int) -> int:
        if self.start != -1 and i >= self.start and (self.found == -1 or i <= self.found):
            return self.found
        self.start = i
        self.found = self.text.find(self.needle, i)
        return self.found


def _equals_end(text: str, i: int) -> int:
    """Position after ``\\s*=`` at ``i``, or -1 when there is no ``=`` there."""
    i = _SPACES_RE.match(text, i).end()  # type: ignore[union-attr]
    return i + 1 if text.startswith("=", i) else -1


def find_function(text: str) -> tuple[str, int] | None:
    """The first ``FUNCTION_RE`` match: (the name, stripped; the end of the tag) or None.

    Linear in ``len(text)``.
    """
    gt = _Finder(text, ">")
    i = text.find("<function")
    while i != -1:
        value = _equals_end(text, i + len("<function"))
        if value != -1:
            close = gt.find(value)
            if close == -1:
                return None  # no ">" anywhere after: no later tag can match either
            return text[value:close].strip(), close + 1
        i = text.find("<function", i + 1)
    return None


def find_parameters(text: str) -> list[tuple[str, str]]:
    """``PARAMETER_RE.findall(text)`` with keys and values stripped, in linear time."""
    gt = _Finder(text, ">")
    end_tag = _Finder(text, _PARAMETER_END)
    found: list[tuple[str, str]] = []
    i = text.find("<parameter")
    while i != -1:
        key = _equals_end(text, i + len("<parameter"))
        if key != -1:
            close = gt.find(key)
            if close == -1:
                break  # no ">" after this tag, nor after any later one
            if close > key:  # "\\s*([^>]+)" needs at least one character before ">"
                end = end_tag.find(close + 1)
                if end == -1:
                    break  # no "</parameter>" after this tag, nor after any later one
                found.append((text[key:close].strip(), text[close + 1 : end].strip()))
                i = text.find("<parameter", end + len(_PARAMETER_END))
                continue
        i = text.find("<parameter", i + 1)
    return found


def find_bash_blocks(text: str) -> list[str]:
    """``MINI_SWE_AGENT_ACTION_RE.findall(text)`` in linear time (blocks not stripped).

    The expression's match at a ```` ```bash ```` is decided by the whitespace run ``W``
    after it: ``\\s*\\n`` ends at the last newline of ``W`` (greedy) and the block at the
    first ``\\n```` `` after that; failing that, at the previous newline of ``W`` when
    ``W`` itself ends with ``\\n```` ``.
    """
    close = _Finder(text, _FENCE_CLOSE)
    blocks: list[str] = []
    i = text.find(_FENCE_OPEN)
    while i != -1:
        run_start = i + len(_FENCE_OPEN)
        run_end = _SPACES_RE.match(text, run_start).end()  # type: ignore[union-attr]
        last_nl = text.rfind("\n", run_start, run_end)
        if last_nl != -1:
            end = close.find(last_nl + 1)
            body_start = last_nl + 1
            if end == -1 and text.startswith(_FENCE_CLOSE, last_nl):
                previous_nl = text.rfind("\n", run_start, last_nl)
                if previous_nl != -1:
                    body_start, end = previous_nl + 1, last_nl
            if end != -1:
                blocks.append(text[body_start:end])
                i = text.find(_FENCE_OPEN, end + len(_FENCE_CLOSE))
                continue
        i = text.find(_FENCE_OPEN, i + 1)
    return blocks


def _check_size(text: str | bytes, what: str) -> None:
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(
            f"{what} is {len(text):,} characters long; the limit is {MAX_ACTION_CHARS:,}. "
            "Send a shorter action: write a large file in several steps, or generate it with "
            "a command."
        )


def _parse_xml(text: str, function: tuple[str, int]) -> Action:
    name, tag_end = function
    end = text.find(_FUNCTION_END, tag_end)
    body = text[tag_end : end if end != -1 else len(text)]
    if not name:
        raise ActionParseError(
            "The function call has no function name. Write it as <function=NAME>, e.g.\n"
            "<function=execute_bash>\n  <parameter=cmd>ls</parameter>\n</function>"
        )
    params: dict[str, str] = dict(find_parameters(body))
    name, params = _apply_aliases(name, params)
    return Action(kind="function", function=name, parameters=params, raw=text)


def _parse_fenced(text: str) -> Action:
    blocks = find_bash_blocks(text)
    if len(blocks) != 1:
        raise ActionParseError(
            render_mini_swe_agent_format_error(len(blocks)), n_actions=len(blocks)
        )
    return Action(kind="bash", command=blocks[0].strip(), raw=text)


def _parse_mapping(data: Mapping[str, Any], raw: str) -> Action:
    inner = data.get("function")
    if isinstance(inner, Mapping):  # {"type": "function", "function": {"name", "arguments"}}
        return _parse_mapping(inner, raw)
    name = data.get("function", data.get("name"))
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise ActionParseError(f"Invalid function name {name!r}: expected a non-empty string.")
        args: Any = data.get("parameters", data.get("arguments", {}))
        if args is None:
            args = {}
        if isinstance(args, str):
            if not args.strip():
                args = {}
            else:
                _check_size(args, f"The arguments string of {name}")
                try:
                    args = json.loads(args)
                except RecursionError:
                    raise ActionParseError(
                        f"The arguments of {name} are nested too deeply. Send them as a flat "
                        'JSON object, e.g. {"command": "view", "path": "/testbed"}.'
                    ) from None
                except json.JSONDecodeError as exc:
                    raise ActionParseError(
                        f"The arguments of {name} are not valid JSON ({exc.msg} at position "
                        f"{exc.pos}). Send them as a JSON object, e.g. "
                        '{"command": "view", "path": "/testbed"}.'
                    ) from None
        if not isinstance(args, Mapping):
            raise ActionParseError(
                f"The arguments of {name} must be a JSON object mapping parameter names to "
                f"values, not {type(args).__name__}."
            )
        params: dict[str, str] = {}
        for key, value in args.items():
            converted = _value_to_str(value)
            if converted is not None:
                params[str(key)] = converted
        fn, params = _apply_aliases(name.strip(), params)
        return Action(kind="function", function=fn, parameters=params, raw=raw)
    for key in ("bash", "command", "cmd"):
        if key in data:
            command = data[key]
            if not isinstance(command, str) or not command.strip():
                raise ActionParseError(f"The '{key}' entry must be a non-empty command string.")
            return Action(kind="bash", command=command.strip(), raw=raw)
    raise ActionParseError(
        "Unrecognised action object with keys "
        f"{sorted(map(str, data))}. Expected {{'function': NAME, 'parameters': {{...}}}} "
        "(or 'name'/'arguments') or {'bash': COMMAND}.\n\n" + EMPTY_ACTION_MESSAGE
    )


def parse_action(text: str | Mapping[str, Any], format: ActionFormat = "auto") -> Action:
    """Parse one agent action.

    Args:
        text: the model's response text, or an already structured call (a mapping).
        format: ``"auto"`` (XML function call, else bash fences, else raw bash), ``"r2e"``
            (a function call is required: otherwise the error message is R2E-Gym's own
            reminder), ``"mini_swe_agent"`` (exactly one ```` ```bash ```` block is
            required) or ``"bash"`` (the whole text is the command).

    Raises:
        ActionParseError: empty or unusable input; the message tells the agent what to send.
    """
    if format not in ACTION_FORMATS:
        raise ValueError(f"unknown action format {format!r}; expected one of {ACTION_FORMATS}")
    if isinstance(text, Mapping):
        try:
            raw = json.dumps(text, default=str)
        except (TypeError, ValueError, RecursionError):
            raw = f"<{type(text).__name__} with keys {sorted(map(str, text))[:20]}>"
        _check_size(raw, "The action")
        return _parse_mapping(text, raw)
    if isinstance(text, bytes):
        _check_size(text, "Your response")
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ActionParseError(
            f"Unsupported action of type {type(text).__name__}.\n\n" + EMPTY_ACTION_MESSAGE
        )
    _check_size(text, "Your response")

    if format == "bash":
        if not text.strip():
            raise ActionParseError(EMPTY_ACTION_MESSAGE)
        return Action(kind="bash", command=text.strip(), raw=text)
    if format == "mini_swe_agent":
        return _parse_fenced(text)
    function = find_function(text)
    if format == "r2e":
        if function is None:
            raise ActionParseError(R2E_CONTINUE_MSG)
        return _parse_xml(text, function)

    if not text.strip():
        raise ActionParseError(EMPTY_ACTION_MESSAGE)
    if function is not None:
        return _parse_xml(text, function)
    if _FENCE_OPEN in text or text.lstrip().startswith("THOUGHT"):
        return _parse_fenced(text)
    return Action(kind="bash", command=text.strip(), raw=text)
