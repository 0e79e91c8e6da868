"""The first observation of an episode: the task, in the format the agent family expects.

Pure functions of the task row. Three formats:

* ``r2egym``: a system message describing the four tools (``file_editor``, ``search``,
  ``execute_bash``, ``finish``) and the ``<function=...><parameter=...>`` call format, then
  the issue inside ``<github_issue>`` tags, as R2E-Gym's agents are prompted (the wording
  is sweworld's own);
* ``mini``: mini-swe-agent's shape: one bash block per answer, the working directory
  ``/testbed``, and the submission line ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``;
* ``plain``: the problem statement alone.

:func:`prompt_messages` gives them as chat messages (system + user);
:func:`first_observation` as one string (what a text environment returns from ``reset``).
"""

from __future__ import annotations

from typing import Any

from sweworld.sandbox.tools import SPECS
from sweworld.sandbox.types import clean_text

__all__ = ["TOOL_DOCS", "first_observation", "prompt_messages", "tool_schemas"]

#: One line per tool and per parameter (sweworld's wording).
TOOL_DOCS: dict[str, tuple[str, dict[str, str]]] = {
    "file_editor": (
        "View, create and edit files. `view` prints a file with line numbers (or lists a "
        "directory two levels deep); `create` writes a new file; `str_replace` replaces "
        "one exact, unique occurrence of `old_str`; `insert` adds `new_str` after line "
        "`insert_line`; `undo_edit` reverts the last edit of the file.",
        {
            "command": "one of view, create, str_replace, insert, undo_edit",
            "path": "absolute path, e.g. /testbed/pkg/module.py",
            "file_text": "content of the new file (create)",
            "old_str": "exact text to replace, whitespace included (str_replace)",
            "new_str": "replacement text (str_replace) or text to insert (insert)",
            "insert_line": "line number after which to insert (insert)",
            "view_range": "[first, last] lines to view; last -1 means to the end (view)",
            "concise": "true for a skeleton of a long file (view)",
        },
    ),
    "search": (
        "Find a term in a file (with line numbers) or in every file under a directory.",
        {
            "search_term": "the text to look for",
            "path": "a file or directory (default: the working directory)",
        },
    ),
    "execute_bash": (
        "Run a bash command in /testbed and see its output and exit code. Long outputs are "
        "shortened; commands have a time limit.",
        {"cmd": "the command line"},
    ),
    "finish": (
        "End the episode and submit the current state of the repository as the fix.",
        {
            "command": "submit",
            "result": "optional final message",
        },
    ),
}

_CALL_FORMAT = """\
Call exactly one tool per answer, in this format and with nothing after it:

<function=TOOL_NAME>
<parameter=PARAMETER_NAME>value</parameter>
<parameter=OTHER_PARAMETER>
a value may span
several lines
</parameter>
</function>

Write your reasoning before the call. Give every required parameter."""

_R2E_INSTANCE = """\
Here is an issue reported on the repository in /testbed:
<github_issue>
{problem_statement}
</github_issue>

Change the non-test files of the repository so that the issue is resolved. When you are \
done, call finish with command submit."""

_MINI_SYSTEM = """\
You are a software engineer working in a bash shell. Answer with your reasoning and then \
exactly one bash code block:

```bash
your command here
```

Every command runs in a new subshell in /testbed: `cd` and exported variables do not \
carry over, so chain them (`cd dir && cmd`). Do not start interactive programs or editors."""

_MINI_INSTANCE = """\
<pr_description>
{problem_statement}
</pr_description>

The repository is checked out in /testbed. Make the smallest change to the non-test files \
that resolves the description above. Reproduce the problem first, fix it, and check the fix.

When you are done, submit your work by answering with a command that runs nothing else:

```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
```"""


def _tool_block(index: int, name: str) -> str:
    spec = SPECS[name]
    description, params = TOOL_DOCS[name]
    lines = [f"[tool {index}] {name}", description, "Parameters:"]
    for param in spec.required + tuple(p for p in spec.optional if p in params):
        need = "required" if param in spec.required else "optional"
        lines.append(f"  - {param} ({need}): {params.get(param, '')}".rstrip(": "))
    return "\n".join(lines)


def r2egym_system_prompt() -> str:
    """The system message of the ``r2egym`` format: the tools and the call format."""
    blocks = [_tool_block(i, name) for i, name in enumerate(TOOL_DOCS, start=1)]
    return (
        "You are an agent that resolves issues in a Python repository, using the tools "
        "below in a sandboxed checkout at /testbed.\n\n"
        + "\n\n".join(blocks)
        + "\n\n"
        + _CALL_FORMAT
    )


def tool_schemas() -> list[dict[str, Any]]:
    """The tools as OpenAI-style function schemas (for trainers that pass ``tools=``)."""
    schemas = []
    for name, (description, params) in TOOL_DOCS.items():
        spec = SPECS[name]
        props = {
            p: {"type": "string", "description": params.get(p, "")}
            for p in spec.required + tuple(p for p in spec.optional if p in params)
        }
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": list(spec.required),
                    },
                },
            }
        )
    return schemas


def _problem(task: Any) -> str:
    text = getattr(task, "problem_statement", None)
    if text is None and isinstance(task, dict):
        text = task.get("problem_statement")
    # valid Unicode, as observations are: a lone surrogate (legal in a JSON row's escapes)
    # would fail a tokenizer's or a JSON writer's UTF-8 encoding
    return clean_text(str(text or "")).strip() or "(the task has no problem statement)"


def prompt_messages(task: Any, prompt_format: str = "r2egym") -> list[dict[str, str]]:
    """The task as chat messages (``system`` then ``user``) in ``prompt_format``."""
    problem = _problem(task)
    if prompt_format == "r2egym":
        return [
            {"role": "system", "content": r2egym_system_prompt()},
            {"role": "user", "content": _R2E_INSTANCE.format(problem_statement=problem)},
        ]
    if prompt_format == "mini":
        return [
            {"role": "system", "content": _MINI_SYSTEM},
            {"role": "user", "content": _MINI_INSTANCE.format(problem_statement=problem)},
        ]
    if prompt_format == "plain":
        return [{"role": "user", "content": problem}]
    raise ValueError(f"unknown prompt format {prompt_format!r}; use r2egym, mini or plain")


def first_observation(task: Any, prompt_format: str = "r2egym") -> str:
    """The task as one string: the messages' contents, separated by a blank line."""
    return "\n\n".join(m["content"] for m in prompt_messages(task, prompt_format))


def bounded_prompt(
    task: Any, prompt_format: str, limit: int
) -> tuple[str, list[dict[str, str]], bool]:
    """``(first observation, messages, cut)`` with the observation at most ``limit``
    characters: when the whole prompt is longer, the problem statement is cut (head and
    tail around a visible marker) so that the instructions around it stay whole; only a
    template longer than ``limit`` by itself is cut as text. ``task`` is a Task (or
    anything with ``model_copy``) or a row mapping."""
    from sweworld.env.stepping import truncate_text

    messages = prompt_messages(task, prompt_format)
    prompt = "\n\n".join(m["content"] for m in messages)
    if len(prompt) <= limit:
        return prompt, messages, False
    problem = _problem(task)
    room = max(limit - (len(prompt) - len(problem)), 200)
    problem, _ = truncate_text(problem, room)
    if isinstance(task, dict):
        task = {**task, "problem_statement": problem}
    else:
        task = task.model_copy(update={"problem_statement": problem})
    messages = prompt_messages(task, prompt_format)
    prompt, _ = truncate_text("\n\n".join(m["content"] for m in messages), limit)
    return prompt, messages, True
