"""Tests that fail whatever the code under test does (exact, read from the test's source).

A test fails for sure when its body, before anything that may skip, xfail, stop the run or
return, reaches a statement that always raises: ``assert`` of a false literal, ``raise
X(...)``, ``pytest.fail(...)``, ``self.fail(...)`` in a ``TestCase`` (or a ``TestCase``'s
``setUp`` does). Agents write such tests to reproduce an issue (``assert 0`` to see the
output, a test that re-raises what the issue shows). Claimed only where nothing but the
test's own code runs first: no fixture it asks for, no autouse fixture, hook or plugin in
its module or a ``conftest.py`` above it, no decorator but marks (:mod:`.marks` reads the
skip / xfail marks first). Costs are linear in the test's body.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from sweworld.transition.facts.simulation import dotted_name
from sweworld.transition.outcome.fixtures_ast import Dynamic, arg_names, is_mark, parametrized

__all__ = ["always_fails", "hooked", "runs_through"]


def dotted(node: ast.expr) -> str:
    """``a.b.c`` of a name or attribute chain, of a call's function for a call ("" for
    anything else)."""
    return dotted_name(node.func if isinstance(node, ast.Call) else node) or ""


#: calls that may end a test before a later statement fails it (a skip, an xfail, a mark
#: added at run time, the session's or the process's end, a debugger)
_STOPPERS = frozenset({
    "skip", "skipTest", "xfail", "importorskip", "exit", "_exit", "abort", "kill", "fork",
    "add_marker", "applymarker", "execv", "execve", "execl", "execle", "execlp", "execvp",
    "execvpe", "set_trace", "breakpoint", "post_mortem",
})  # fmt: skip
#: words in a raised exception's name that pytest does not count as a failure
_NOT_FAILURES = ("skip", "xfail", "exit", "interrupt", "outcome")
_CATCH_ALL = ("Exception", "BaseException")


def runs_through(node: ast.stmt) -> bool:
    """Whether a statement that does not fail surely hands on to the next one: no
    ``return`` / ``yield`` / ``await``, no ``while`` loop, no call that may skip, xfail or
    stop (:data:`_STOPPERS`) anywhere in it."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.While)):
            return False
        if isinstance(sub, ast.Call) and dotted(sub.func).rsplit(".", 1)[-1] in _STOPPERS:
            return False
    return True


def _raised_name(node: ast.expr) -> str | None:
    """The class a ``raise`` statement raises (``X`` of ``raise X`` / ``raise m.X(...)``),
    None when it is not a plain name or may be a skip / xfail / exit."""
    name = dotted(node)
    if not name or any(word in name.lower() for word in _NOT_FAILURES):
        return None
    return name.rsplit(".", 1)[-1]


def _failing(node: ast.stmt, unittest: bool) -> str | None:
    """The exception class a statement surely raises as a test failure (``""``: one
    whose class is not known), None when it may not: ``assert`` of a false literal,
    ``raise X(...)``, ``pytest.fail(...)``, ``self.fail(...)`` in a ``TestCase``, a
    ``try`` whose body and every handler fail, an ``if`` whose branches both fail."""
    if isinstance(node, ast.Assert):
        test = node.test
        return "AssertionError" if isinstance(test, ast.Constant) and not test.value else None
    if isinstance(node, ast.Raise):
        return _raised_name(node.exc) if node.exc is not None else None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        name = dotted(node.value.func)
        if name == "pytest.fail":
            return "Failed"
        return "AssertionError" if unittest and name == "self.fail" else None
    if isinstance(node, ast.Try) and not node.finalbody:
        names = [_fails_first(node.body, unittest)]
        names += [_fails_first(h.body, unittest) for h in node.handlers]
        if any(n is None for n in names):
            return None
        if any(h.type is None or dotted(h.type) in _CATCH_ALL for h in node.handlers):
            names = names[1:]  # what the body raises is caught: a handler's exception shows
        return names[0] if len(set(names)) == 1 else ""
    if isinstance(node, ast.If):
        names = [_fails_first(node.body, unittest), _fails_first(node.orelse, unittest)]
        if any(n is None for n in names) or not runs_through(ast.Expr(node.test)):
            return None
        return names[0] if len(set(names)) == 1 else ""
    return None


def _fails_first(body: Sequence[ast.stmt], unittest: bool) -> str | None:
    """What :func:`_failing` says of the first statement of ``body`` that surely fails,
    when every statement before it surely runs through (None: none such)."""
    for node in body:
        failed = _failing(node, unittest)
        if failed is not None:
            return failed
        if not runs_through(node):
            return None
    return None


#: words of a module or conftest whose fixtures or hooks may skip, xfail or change a test
#: it holds or governs (then no test there is claimed to fail)
_HOOK_WORDS = (
    "autouse", "pytest_runtest_", "pytest_collection_modifyitems", "pytest_itemcollected",
    "pytest_pyfunc_call", "pytest_plugins", "hookwrapper", "wrapper=True",
    "pytest_configure",
)  # fmt: skip


def hooked(text_of: Callable[[str], str | None], path: str, text: str) -> bool:
    """Whether the test module at ``path`` or a ``conftest.py`` above it holds an autouse
    fixture, a run-time hook or a plugin (:data:`_HOOK_WORDS`): its tests' outcomes may
    then be changed by code that is not theirs."""
    parts = path.split("/")[:-1]
    conftests = ["/".join([*parts[:i], "conftest.py"]) for i in range(len(parts) + 1)]
    return any(
        word in body
        for body in (text, *(text_of(c) or "" for c in conftests))
        for word in _HOOK_WORDS
    )


def _own_arguments(func: ast.FunctionDef, method: bool) -> bool:
    """Whether the test asks for nothing but its parameters (``self`` of a method, arguments
    with defaults, the names a literal ``parametrize`` mark gives, not ``indirect``): no
    fixture's code can then skip or xfail it first."""
    if func.args.vararg or func.args.kwarg:
        return False
    try:
        given = parametrized(func.decorator_list)
    except Dynamic:
        return False
    return all(name in given for name in arg_names(func, method=method))


def always_fails(
    func: ast.FunctionDef, classes: Sequence[ast.ClassDef], setup: ast.stmt | None = None
) -> tuple[int, str] | None:
    """``(line, exception class)`` of a test that fails whatever the code under test does
    (the class is "" where the branches raise different ones), None when it may not.

    Its body (after a docstring), or a ``TestCase``'s ``setup`` (its ``setUp``), reaches a
    statement that surely fails (see :func:`_failing`) with nothing before it that may
    skip, xfail, stop or return. Only tests whose decorators and ``classes``' decorators are
    all ``pytest.mark`` marks (the caller reads the skip / xfail ones first), that ask for
    no fixture (:func:`_own_arguments`) and are not generators; the caller checks that no
    autouse fixture or hook governs the module (:func:`hooked`)."""
    decorators = [*func.decorator_list, *(d for c in classes for d in c.decorator_list)]
    if not all(is_mark(d) for d in decorators):
        return None
    if not _own_arguments(func, method=bool(classes)):
        return None
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(func)):
        return None
    unittest = any(dotted(b) in ("TestCase", "unittest.TestCase") for c in classes for b in c.bases)
    bodies = [func.body]
    if unittest and isinstance(setup, ast.FunctionDef) and not setup.decorator_list:
        bodies.insert(0, setup.body)
    for body in bodies:
        failed = _fails_first(body, unittest)
        if failed is not None:
            return func.lineno, failed
        if not all(runs_through(node) for node in body):
            return None
    return None
