"""Issue texts for factory tasks: the failing behaviour as a user would report it.

Written from what the buggy state really printed (the failing tests' ids, the assertion or
exception lines of the ``pytest -rA`` log) and from the failing tests' own code (a call of
the library with literal arguments, when there is one). Never from the mutation: no line of
the text contains the changed source line, before or after the change.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sweworld.pyast as pyast

__all__ = ["ReproCall", "error_lines", "find_repro_call", "problem_statement"]

_SUMMARY_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$")
_MAX_LINE = 300


@dataclass(frozen=True)
class ReproCall:
    """A call of the library found in a failing test: ``code`` (the call's source, literal
    arguments only), ``imports`` (the lines that make its names importable)."""

    code: str
    imports: tuple[str, ...]


def error_lines(log: str, test_id: str, limit: int = 4) -> list[str]:
    """What the log says went wrong in ``test_id``: its short-summary message, else the
    ``E`` lines of its failure section (at most ``limit``)."""
    lines = log.splitlines()
    out: list[str] = []
    header = re.compile(r"^_{3,} (.*) _{3,}$")
    name = test_id.split("::", 1)[-1]
    inside = False
    for line in lines:
        match = header.match(line)
        if match:
            inside = match.group(1).strip() in (name, name.replace("::", "."))
            continue
        if inside and line.startswith("E  "):
            text = line[1:].strip()
            if text:
                out.append(text[:_MAX_LINE])
            if len(out) >= limit:
                break
    if out:
        return out
    for line in lines:
        match = _SUMMARY_RE.match(line.strip())
        if match and match.group(1) == test_id and match.group(2):
            return [match.group(2)[:_MAX_LINE]]
    return []


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def find_repro_call(
    test_source: str, test_id: str, library_names: Sequence[str]
) -> ReproCall | None:
    """The first call in the failing test whose function comes from the library (an
    attribute of an imported library module, or a name imported from it) and whose
    arguments are all literals; None when there is none."""
    try:
        tree = pyast.parse(test_source)
    except SyntaxError:
        return None
    func_name = test_id.split("::")[-1].split("[", 1)[0]
    roots = set(library_names)
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in roots:
                    imports[alias.asname or alias.name.split(".")[0]] = ast.unparse(node)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in roots
        ):
            for alias in node.names:
                imports[alias.asname or alias.name] = ast.unparse(node)
    target = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func_name:
            target = node
            break
    if target is None:
        return None
    for node in ast.walk(target):
        if not isinstance(node, ast.Call):
            continue
        head = node.func
        while isinstance(head, ast.Attribute):
            head = head.value
        if not isinstance(head, ast.Name) or head.id not in imports:
            continue
        args = [*node.args, *(k.value for k in node.keywords)]
        if any(isinstance(a, ast.Starred) for a in node.args) or not all(map(_literal, args)):
            continue
        if any(k.arg is None for k in node.keywords):
            continue
        return ReproCall(code=ast.unparse(node), imports=(imports[head.id],))
    return None


def _humanize(test_id: str) -> str:
    name = test_id.split("::")[-1].split("[", 1)[0].removeprefix("test_").removeprefix("test")
    return name.replace("_", " ").strip() or test_id


def problem_statement(
    *,
    package: str,
    failing: Sequence[str],
    log: str,
    repro: ReproCall | None,
    forbidden: Sequence[str] = (),
) -> str:
    """The issue text of a task: ``failing`` test ids, the buggy run's ``log``, a call that
    shows the behaviour (``repro``). Lines holding
    any ``forbidden`` text (the mutated source line, before and after) are left out."""
    first = failing[0]
    title = f"`{package}`: wrong behaviour in {_humanize(first)}"
    parts = [
        title,
        "",
        f"Some behaviour of `{package}` is broken: the library's own tests for it fail.",
    ]
    if repro is not None:
        parts += ["", "To reproduce:", "", "```python", *repro.imports, repro.code, "```"]
    parts += ["", f"Failing tests ({len(failing)}):", ""]
    for test in failing[:5]:
        parts.append(f"- `{test}`")
    if len(failing) > 5:
        parts.append(f"- ... and {len(failing) - 5} more")
    shown_errors = 0
    for test in failing[:3]:
        errors = error_lines(log, test)
        if errors:
            if shown_errors == 0:
                parts += ["", "The failures say:", ""]
            parts += ["```", f"{test}", *errors, "```"]
            shown_errors += 1
    parts += ["", "Expected: these calls behave as the documentation and the tests describe."]
    keep = [s.strip() for s in forbidden if len(s.strip()) >= 6]
    lines = [line for line in parts if not any(bad in line for bad in keep)]
    return "\n".join(lines).strip() + "\n"
