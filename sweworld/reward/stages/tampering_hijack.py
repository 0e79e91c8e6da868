"""Test tampering from the code side: non-test code that imports or replaces the test
runner's internals, exits the interpreter at import time or skips at import, so that a test
run ends "green" before any test runs (see :mod:`sweworld.reward.stages.tampering`).
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import PurePosixPath

import sweworld.pyast as pyast
from sweworld.reward.candidate import Hunk
from sweworld.reward.stages.common_text import strip_comment
from sweworld.reward.types import ChangedFile

__all__ = [
    "code_part",
    "hijack_reasons",
    "parse_python",
]


def code_part(line: str) -> str:
    """``line`` without a trailing comment (shared with the semantic stage)."""
    return strip_comment(line)


def parse_python(text: str) -> ast.Module | None:
    """The module's syntax tree, or None when it does not parse (warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pyast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


_RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "unittest")
_HIJACK_LINE_RE = re.compile(
    r"^(?:import|from)\s+(?:_pytest|pluggy)\b"
    r"|^(?:sys\.exit|os\._exit|exit|quit)\s*\("
    r"|^raise\s+(?:SystemExit|KeyboardInterrupt|(?:unittest\.)?SkipTest)\b"
    r"|\ballow_module_level\s*="
    r"|\bsys\.modules\s*\[\s*['\"](?:pytest|_pytest|unittest)"
    r"|\b(?:pytest|_pytest|unittest)(?:\.\w+)+\s*=[^=]"
)


def _own_runner(path: str) -> bool:
    """The file belongs to a test runner's own source (pytest's, pluggy's): editing the
    runner is then the task. A ``__main__.py`` runs as a program, never on import: its exit
    is its job."""
    pure = PurePosixPath(path)
    return pure.name == "__main__.py" or any(
        p in ("_pytest", "pytest", "pluggy") for p in pure.parts[:-1]
    )


_EXITS = ("sys.exit", "os._exit", "exit", "quit")
_EXIT_EXCEPTIONS = ("SystemExit", "KeyboardInterrupt", "builtins.SystemExit")
_SKIP_EXCEPTIONS = ("unittest.SkipTest", "SkipTest", "pytest.skip.Exception", "skip.Exception")
_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* is Python 3.11+


def _main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (its body never runs on import)."""
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Compare) and "__main__" in ast.unparse(test)


def _import_time(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body`` that run at import: module level, through ``if`` /
    ``try`` / ``with`` / loops and class bodies (not functions, not a ``__main__`` guard)."""
    out: list[ast.stmt] = []
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _main_guard(node):
            continue
        out.append(node)
        blocks: list[list[ast.stmt]] = []
        if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
            blocks = [node.body, node.orelse]
        elif isinstance(node, ast.With | ast.AsyncWith | ast.ClassDef):
            blocks = [node.body]
        elif isinstance(node, _TRY):
            blocks = [node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody]
        for block in reversed(blocks):
            stack.extend(reversed(block))
    return out


def _hijack_ast(path: str, tree: ast.Module) -> list[str]:
    reasons: list[str] = []
    for node in _import_time(tree.body):  # runs at import, before any test
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call):
            name = ast.unparse(call.func)
            if name in _EXITS:
                reasons.append(f"exits the interpreter at import time in {path}")
            elif name.split(".")[-1] == "skip" and any(
                k.arg == "allow_module_level" for k in call.keywords
            ):
                reasons.append(f"skips every test that imports {path}")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = ast.unparse(exc)
            if name in _EXIT_EXCEPTIONS:
                reasons.append(f"exits the interpreter at import time in {path}")
            elif name in _SKIP_EXCEPTIONS:
                reasons.append(f"skips every test that imports {path}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if any(n and n.split(".")[0] in ("_pytest", "pluggy") for n in names):
                reasons.append(f"imports the test runner's internals in {path}")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                text = ast.unparse(target)
                root = text.split(".")[0].split("[")[0]
                if (root in _RUNNER_MODULES and "." in text) or re.match(
                    r"sys\.modules\[['\"](?:pytest|_pytest|unittest)", text
                ):
                    reasons.append(f"replaces part of the test runner ({text}) in {path}")
    return reasons


def hijack_reasons(changed: ChangedFile, hunks: list[Hunk]) -> list[str]:
    """Non-test code that takes over the test run (see the module docstring): the added
    code imports pytest's internals, assigns into pytest / unittest, or exits at import."""
    if not changed.is_python or changed.binary or _own_runner(changed.path):
        return []
    if changed.after is not None:
        after = parse_python(changed.after)
        if after is not None:
            found = set(_hijack_ast(changed.path, after))
            if changed.before is not None and (before := parse_python(changed.before)) is not None:
                found -= set(_hijack_ast(changed.path, before))
            return sorted(found)
    reasons = []
    for hunk in hunks:
        for text in hunk.added:
            code = code_part(text).rstrip()
            if code and _HIJACK_LINE_RE.search(code.lstrip() if code[0] != " " else code):
                reasons.append(f"takes over the test runner in {changed.path}: {code.strip()}")
    return reasons
