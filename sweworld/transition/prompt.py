"""The SWT prompt: one format for training and inference, versioned.

:func:`build_messages` turns an :class:`~sweworld.transition.context.SWTContext` into chat
messages (a system message and one user message whose sections always come in the same
order, each between ``<name>`` and ``</name>`` lines); :func:`render_target` writes what the
model must answer (compact JSON, keys ``stdout``, ``stderr``, ``exit_code``, with
``reasoning`` first when asked).

Change :data:`PROMPT_VERSION` whenever the text a model sees changes: a model is trained
for one version.
"""

from __future__ import annotations

import json
from typing import Any

from sweworld.transition.context import SWTContext
from sweworld.transition.types import Prediction

__all__ = [
    "PROMPT_VERSION",
    "SECTIONS",
    "build_messages",
    "render_target",
    "swt_json_schema",
    "system_prompt",
]

PROMPT_VERSION = "swt-v1"

_SYSTEM = (
    "You simulate one command run in a Linux sandbox. /testbed holds the repository of a "
    "Python project, with its dependencies installed; the user message describes the state "
    "of its code: the problem being worked on, the changes made so far, the code the command "
    "executes (with line numbers) and the code it imports. Predict exactly what the real run "
    "would print to stdout and to stderr (tracebacks, test reports, warnings, summary lines) "
    "and the exit code it would return.\n"
    "Answer with one JSON object and nothing else: "
)
_FORMAT = '{"stdout": "...", "stderr": "...", "exit_code": 0}'
_FORMAT_REASONING = '{"reasoning": "...", "stdout": "...", "stderr": "...", "exit_code": 0}'
_REASONING_NOTE = (
    '\nIn "reasoning", first work out briefly what the command does and what happens when it '
    "runs; then give its output."
)

# (tag, context field, note shown as the section's first line, always shown)
SECTIONS: tuple[tuple[str, str, str, bool], ...] = (
    ("problem_statement", "problem", "", False),
    (
        "gold_patch",
        "gold_patch",
        "(The reference fix, for reference only: it is NOT applied to /testbed unless the "
        "changes below contain it.)",
        True,
    ),
    (
        "test_patch",
        "test_patch",
        "(The tests that check the fix, for reference only: NOT applied to /testbed.)",
        True,
    ),
    ("tests", "tests", "", True),
    ("changes", "diff", "(git diff of /testbed against the base commit)", True),
    ("previous_commands", "history", "(most recent last)", False),
    ("executed_code", "executed_code", "", False),
    ("related_code", "related_code", "(outlines: bodies shown where room allowed)", False),
    ("facts", "facts", "(computed exactly from the workspace)", False),
    ("command", "command", "", True),
    ("stdin", "stdin", "", False),
)
_ORACLE_TAGS = frozenset({"gold_patch", "test_patch", "tests"})
_EMPTY = {
    "changes": "(no changes: /testbed is at the base commit)",
    "gold_patch": "(empty)",
    "test_patch": "(empty)",
    "tests": "(none listed)",
}


def swt_json_schema(*, with_reasoning: bool = False) -> dict:
    """The answer's JSON schema (``{stdout, stderr, exit_code}``, ``reasoning`` first when
    asked), for backends with structured output: the answer is then well formed by
    construction."""
    properties: dict = {}
    if with_reasoning:
        properties["reasoning"] = {"type": "string"}
    properties["stdout"] = {"type": "string"}
    properties["stderr"] = {"type": "string"}
    properties["exit_code"] = {"type": "integer"}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def system_prompt(*, with_reasoning: bool = False) -> str:
    """The system message: what the model is and the answer format."""
    if with_reasoning:
        return _SYSTEM + _FORMAT_REASONING + _REASONING_NOTE
    return _SYSTEM + _FORMAT


def _command_section(context: SWTContext) -> str:
    lines = [f"cwd: {context.cwd}"]
    if context.env:
        lines.append("environment variables set by the agent:")
        lines.extend(context.env.split("\n"))
    lines.append(f"$ {context.command}")
    return "\n".join(lines)


def _user_message(context: SWTContext) -> str:
    oracle = context.mode == "oracle"
    blocks: list[str] = []
    for tag, name, note, always in SECTIONS:
        if tag in _ORACLE_TAGS and not oracle:
            continue
        body = _command_section(context) if tag == "command" else getattr(context, name)
        if not body:
            if not always:
                continue
            body = _EMPTY.get(tag, "(none)")
            note = ""
        inner = f"{note}\n{body}" if note else body
        blocks.append(f"<{tag}>\n{inner.rstrip(chr(10))}\n</{tag}>")
    blocks.append("Predict the command's stdout, stderr and exit code as the JSON object.")
    return "\n\n".join(blocks)


def build_messages(context: SWTContext, *, with_reasoning: bool = False) -> list[dict[str, str]]:
    """The chat messages for one prediction: ``[system, user]``."""
    return [
        {"role": "system", "content": system_prompt(with_reasoning=with_reasoning)},
        {"role": "user", "content": _user_message(context)},
    ]


def render_target(pred: Prediction, *, with_reasoning: bool = False) -> str:
    """The answer text: compact JSON, keys ``stdout``, ``stderr``, ``exit_code`` (with
    ``reasoning`` first when ``with_reasoning``), non-ASCII kept as is."""
    data: dict[str, Any] = {}
    if with_reasoning:
        data["reasoning"] = pred.reasoning
    data["stdout"] = pred.stdout
    data["stderr"] = pred.stderr
    data["exit_code"] = int(pred.exit_code)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
