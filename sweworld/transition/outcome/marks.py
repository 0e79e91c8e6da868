"""What a test's marks decide before it runs (exact, read from the test's source).

pytest evaluates ``skip`` / ``skipif`` / ``xfail`` marks itself, so some outcomes follow
from the source alone, whatever the code under test does:

* ``@pytest.mark.skip``, ``@unittest.skip(...)``, ``skipif`` whose condition is the literal
  ``True``, and a test whose body starts with ``pytest.skip(...)``: SKIPPED;
* ``@pytest.mark.xfail`` (no condition, or the literal ``True``; no ``raises``): XFAIL,
  the test's expected failure (see :func:`apply_marks`; an unexpected pass, XPASS, is not
  predicted); ``--runxfail`` turns these marks off;
* with ``--pdb``, ``unittest.skip`` is left to the model (pytest before 7.2 ran a skipped
  TestCase's ``tearDown`` under the debugger).

Marks are taken from the test function, its enclosing classes and the ``pytestmark`` of
the classes and the module. Each decided test also carries what pytest's short summary
shows of it: the line it names (the function's first line, its first decorator's, or the
line of a ``pytest.skip`` call) and the reason. A condition that is not a literal,
``raises=``, or a mark applied through a variable or ``pytest.param(..., marks=...)`` is
left to the model.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sweworld.transition.outcome.programs import parse_source

__all__ = ["Marked", "apply_marks", "marked_outcomes", "summary_message"]


class Marked(NamedTuple):
    """What a test's marks decide: ``outcome`` is ``skip``, ``xfail``, ``xfail-strict`` or
    ``xfail-notrun`` (not run: "[NOTRUN]" in the summary); ``line`` (1-based; 0: none
    shown) and ``reason`` are what pytest's short summary shows of a skip, ``reason`` also
    of an xfail."""

    outcome: str
    line: int = 0
    reason: str = ""


_MAX_IDS = 5_000


def _mark_name(node: ast.expr) -> tuple[str, ast.Call | None]:
    """The mark a decorator or ``pytestmark`` item names (``skip``, ``skipif``, ``xfail``,
    ``unittest.skip``) and its call, or ``("", None)``."""
    call = node if isinstance(node, ast.Call) else None
    func = call.func if call is not None else node
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    parts.reverse()
    if len(parts) >= 2 and parts[-2] == "mark" and parts[-1] in ("skip", "skipif", "xfail"):
        return parts[-1], call
    if parts in (["unittest", "skip"], ["skip"]) and call is not None:
        return "unittest.skip", call
    return "", None


def _literal_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _keyword(call: ast.Call | None, name: str) -> ast.expr | None:
    if call is None:
        return None
    return next((k.value for k in call.keywords if k.arg == name), None)


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_mark(node: ast.expr) -> bool:
    """A decorator that is a pytest mark (``@pytest.mark.NAME`` or ``@mark.NAME(...)``)."""
    func = node.func if isinstance(node, ast.Call) else node
    while isinstance(func, ast.Attribute):
        if isinstance(func.value, (ast.Name, ast.Attribute)) and (
            (isinstance(func.value, ast.Name) and func.value.id == "mark")
            or (isinstance(func.value, ast.Attribute) and func.value.attr == "mark")
        ):
            return True
        func = func.value
    return False


def _decide(marks: Sequence[ast.expr], runxfail: bool, pdb: bool) -> tuple[str, str, str] | None:
    """The outcome the marks (nearest first) fix and its reason, or None. Any skip that
    surely applies wins (pytest evaluates skips first); an unknown skip condition leaves it
    all to the model."""
    xfail: tuple[str, str, str] | None = None
    for node in marks:
        name, call = _mark_name(node)
        if name == "unittest.skip" and pdb:
            return None
        if name in ("skip", "unittest.skip"):
            given = _keyword(call, "reason") or (call.args[0] if call and call.args else None)
            reason = _text(given)
            return "skip", reason if reason is not None else "unconditional skip", name
        if name == "skipif":
            condition = call.args[0] if call is not None and call.args else None
            if condition is None or not _literal_true(condition):
                return None  # may skip: not for this module to say
            reason = _text(_keyword(call, "reason"))
            return "skip", reason if reason is not None else "condition: True", name
        if name == "xfail" and xfail is None and not runxfail:
            if call is not None:
                if (call.args and not _literal_true(call.args[0])) or _keyword(call, "raises"):
                    return None
                if _keyword(call, "condition") is not None:
                    return None
            run, strict = _keyword(call, "run"), _keyword(call, "strict")
            if run is not None and not isinstance(run, ast.Constant):
                return None
            if strict is not None and not isinstance(strict, ast.Constant):
                return None
            reason = _text(_keyword(call, "reason")) or ""
            if run is not None and run.value is False:  # type: ignore[attr-defined]
                xfail = "xfail-notrun", reason, name
            elif strict is not None and strict.value is True:  # type: ignore[attr-defined]
                xfail = "xfail-strict", reason, name
            else:
                xfail = "xfail", reason, name
    return xfail


def _pytestmarks(body: Sequence[ast.stmt]) -> list[ast.expr]:
    """The marks a ``pytestmark = ...`` statement of a module or class body applies."""
    marks: list[ast.expr] = []
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            marks += list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return marks


def _skip_call(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The body's first statement (after a docstring) when it is ``pytest.skip(...)``."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    f = call.func
    if (
        isinstance(f, ast.Attribute)
        and f.attr == "skip"
        and (isinstance(f.value, ast.Name) and f.value.id == "pytest")
    ):
        return call
    return None


def _find(tree: ast.Module, names: list[str]) -> list[ast.AST] | None:
    """The chain of definitions (classes, then the function) ``names`` names, or None."""
    chain: list[ast.AST] = []
    scope: list[ast.stmt] = tree.body
    for name in names:
        found = next(
            (
                n
                for n in scope
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == name
            ),
            None,
        )
        if found is None:
            return None
        chain.append(found)
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return chain


def marked_outcomes(
    text_of: Callable[[str], str | None],
    test_ids: Sequence[str],
    *,
    runxfail: bool = False,
    pdb: bool = False,
) -> dict[str, Marked]:
    """``{test id: Marked}`` for the tests whose marks fix their outcome (see the module);
    ids are ``path::[Class::]name[params]`` relative to the workspace. At most
    :data:`_MAX_IDS` ids are looked at; each file is parsed once (a shared, cached tree)."""
    out: dict[str, Marked] = {}
    trees: dict[str, ast.Module | None] = {}
    for test in test_ids[:_MAX_IDS]:
        path, _, rest = test.partition("::")
        if not rest or not path.endswith(".py"):
            continue
        if path not in trees:
            trees[path] = parse_source(text_of(path), path)
        tree = trees[path]
        if tree is None:
            continue
        chain = _find(tree, rest.split("[", 1)[0].split("::"))
        if not chain or not isinstance(chain[-1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        func = chain[-1]
        marks: list[ast.expr] = list(func.decorator_list)
        for node in reversed(chain[:-1]):  # nearest first: the classes, then the module
            marks += node.decorator_list  # type: ignore[attr-defined]
            marks += _pytestmarks(node.body)  # type: ignore[attr-defined]
        marks += _pytestmarks(tree.body)
        first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
        decided = _decide(marks, runxfail, pdb)
        if decided is not None:
            # pytest's summary drops the line of a skip mark the test has from a class or
            # module ``pytestmark`` when the function carries no mark of its own
            own = any(_is_mark(d) for d in func.decorator_list)
            line = 0 if decided[2] == "skip" and not own else first
            out[test] = Marked(decided[0], line, decided[1])
            continue
        call = _skip_call(func)
        if call is not None:
            given = _keyword(call, "reason") or _keyword(call, "msg")
            reason = _text(given if given is not None else (call.args[0] if call.args else None))
            out[test] = Marked("skip", call.lineno, reason or "")
    return out


def apply_marks(status: str, marked: Marked) -> str:
    """The status a test shows when the model predicted ``status`` and its marks decided
    ``marked``: SKIPPED for a skip; XFAIL for an xfail whatever the model said (a test is
    marked xfail because it fails: real runs of the held-out repositories show 35 with
    xfailed tests for 2 with xpassed ones, and the model's pass for such a test is not
    informed by the mark)."""
    if marked.outcome == "skip":
        return "SKIPPED"
    return "XFAIL"


def summary_message(status: str, marked: Marked) -> str | None:
    """The message pytest's short summary gives a marked test shown as ``status`` (None:
    none of the marks')."""
    if status != "XFAIL":
        return None
    if marked.outcome == "xfail-notrun":
        return f"[NOTRUN] {marked.reason}"
    return marked.reason or None
