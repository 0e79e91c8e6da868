"""Reading test modules and conftests for fixtures: what a body binds, which fixtures it
defines and with which arguments, its parametrize and outcome marks, and what makes it
impossible to settle from the AST (raised as :class:`Dynamic`). Used by
:mod:`sweworld.transition.outcome.fixtures`; nothing here decides a status."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = [
    "IMPORTED",
    "Dynamic",
    "arg_names",
    "bound_names",
    "check_outcome_marks",
    "evaluated",
    "fixture_scope",
    "is_mark",
    "module_checks",
    "parametrized",
    "pytestmark_of",
]

# marks that keep a setup error from being an ERROR (the test is skipped or xfailed first)
_OUTCOME_MARKS = frozenset(["skip", "skipif", "xfail"])
# calls at import time that skip or end a whole module (or fail its collection)
_MODULE_EXITS = frozenset(["skip", "importorskip", "xfail", "exit", "fail", "SkipTest"])
# names through which code may bind module attributes the AST does not show
_REFLECTIVE = frozenset(["globals", "locals", "vars", "exec", "eval", "setattr", "__import__",
                         "__dict__", "__builtins__", "modules"])  # fmt: skip
_HARMLESS_HOOKS = frozenset(["pytest_addoption"])
_BUILTINS = frozenset([*dir(builtins), "__file__", "__name__", "__doc__", "__spec__",
                       "__loader__", "__package__", "__path__", "__cached__"])  # fmt: skip


class Dynamic(Exception):
    """A source of fixtures that the AST cannot settle."""


IMPORTED = ("imported",)  # a name bound by an import: possibly a fixture, deps unknown


def _is_fixture_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id in ("fixture", "yield_fixture")
    if isinstance(target, ast.Attribute):
        return target.attr in ("fixture", "yield_fixture")
    return False


def arg_names(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> list[str]:
    """The arguments pytest fills with fixtures: without defaults, without ``self``."""
    args = node.args
    if args.posonlyargs:  # pytest passes none of them (the test fails, it does not error)
        raise Dynamic("positional-only arguments")
    positional = [*args.posonlyargs, *args.args]
    if args.defaults:
        positional = positional[: len(positional) - len(args.defaults)]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static and positional:
        positional = positional[1:]
    keyword = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return [a.arg for a in [*positional, *keyword]]


def is_mark(node: ast.expr) -> bool:
    """``pytest.mark.x``, ``mark.x`` or a call of one (it leaves the signature alone)."""
    target = node.func if isinstance(node, ast.Call) else node
    while isinstance(target, ast.Attribute):
        if target.attr == "mark":
            return True
        target = target.value
    return False


def _plain(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Raise for a decorator that may change the arguments pytest sees (``mock.patch``
    fills some; a custom wrapper may hide them)."""
    for deco in node.decorator_list:
        if not (is_mark(deco) or _is_fixture_decorator(deco)) and not (
            isinstance(deco, ast.Name) and deco.id in ("staticmethod", "classmethod")
        ):
            raise Dynamic("a decorator that may change the signature")


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for deco in node.decorator_list:
        if not _is_fixture_decorator(deco):
            continue
        if isinstance(deco, ast.Call):
            for kw in deco.keywords:
                if kw.arg == "name":
                    if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        return kw.value.value
                    raise Dynamic("a fixture named by an expression")
        return node.name
    return None


def bound_names(node: ast.AST) -> Iterator[str]:
    """Every name ``node`` may bind (nested blocks and bodies included: it overstates)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Load):
            yield inner.id
        elif isinstance(inner, ast.alias):
            yield (inner.asname or inner.name).split(".")[0]
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield inner.name
        elif isinstance(inner, (ast.Global, ast.Nonlocal)):
            yield from inner.names
        elif isinstance(inner, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and inner.name:
            yield inner.name
        elif isinstance(inner, ast.MatchMapping) and inner.rest:
            yield inner.rest


def evaluated(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.AST]:
    """The parts of a ``def`` or ``class`` statement run where it stands (not the body of a
    ``def``): decorators, defaults, annotations, bases."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    return [*node.decorator_list, node.args, *([node.returns] if node.returns else [])]


def _executed(body: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body`` that run when it is executed (function bodies left out)."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(evaluated(node))
        elif isinstance(node, ast.Lambda):
            stack.append(node.args)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def module_checks(tree: ast.Module) -> set[str]:
    """Raise for a module (a test module or a conftest) whose bindings or collection the AST
    cannot settle: reflection (``globals()``, ``setattr``, ``sys.modules``) in code that runs
    at import (module and class bodies, decorators, defaults, and the body of any function
    of the module that code names; a test's ``monkeypatch.setattr`` runs later), a module-level
    skip, raise, exit or undefined name, a ``parametrize`` that may fail the collection;
    answer the names its functions declare ``global``. One walk of the tree."""
    declared: set[str] = set()
    bound = set(_BUILTINS)
    reflective = None  # reflection inside function bodies: it matters only if one runs
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id in _REFLECTIVE:
                reflective = reflective or node.id
            if not isinstance(node.ctx, ast.Load):
                bound.add(node.id)
        elif isinstance(node, ast.Attribute):
            if node.attr in _REFLECTIVE:
                reflective = reflective or node.attr
        elif isinstance(node, ast.keyword):
            if node.arg == "allow_module_level":
                raise Dynamic("a module-level skip")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
            if node.decorator_list:
                names = parametrized(node.decorator_list)
                if names and not names <= set(arg_names(node, method=False)):
                    raise Dynamic("parametrize names that are not the function's arguments")
        elif isinstance(node, ast.ClassDef):
            bound.add(node.name)
            marks = [*node.decorator_list, *pytestmark_of(node.body)]
            if any(isinstance(m, ast.Call) and _called(m) == "parametrize" for m in marks):
                raise Dynamic("a class-level parametrize")
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
            bound.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    marks = pytestmark_of(tree.body)
    if any(isinstance(m, ast.Call) and _called(m) == "parametrize" for m in marks):
        raise Dynamic("a module-level parametrize")
    functions = {
        n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for node in _executed(tree.body):  # what runs at import
        if isinstance(node, ast.Name) and node.id in _REFLECTIVE:
            raise Dynamic(f"reflection ({node.id})")
        if isinstance(node, ast.Attribute) and node.attr in _REFLECTIVE:
            raise Dynamic(f"reflection ({node.attr})")
        if isinstance(node, ast.Name) and node.id in functions and reflective:
            # a function of the module used at import (called, or as a decorator) may run
            # the reflection in its body
            raise Dynamic(f"reflection ({reflective}) reachable at import")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            raise Dynamic(f"a module that fails at import ({node.id!r} is not defined)")
        if isinstance(node, ast.Raise):
            raise Dynamic("a module that may raise at import")
        if isinstance(node, ast.Call) and _called(node) in _MODULE_EXITS:
            raise Dynamic("a module that may skip at import")
    return declared


def _harmless_decorator(deco: ast.expr) -> bool:
    return is_mark(deco) or (
        isinstance(deco, ast.Name) and deco.id in ("staticmethod", "classmethod")
    )


def fixture_scope(
    body: Sequence[ast.stmt], *, method: bool, conftest: bool = False
) -> dict[str, Any]:
    """Fixture name -> its arguments (or :data:`IMPORTED`) for one module or class body.

    What the last binding of a name is decides (as pytest reads the module's attributes); a
    name bound any way but a fixture ``def`` (an import, an assignment, a conditional block,
    a decorator that may make a fixture) may be a fixture whose arguments are unknown."""
    out: dict[str, Any] = {}
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name == "pytest_generate_tests":
                raise Dynamic("pytest_generate_tests")
            if stmt.name.startswith("pytest_") and stmt.name not in _HARMLESS_HOOKS:
                raise Dynamic(f"a hook ({stmt.name})")
            for part in evaluated(stmt):
                out.update(dict.fromkeys(bound_names(part), IMPORTED))
            name = _fixture_name(stmt)
            if name is not None:
                _plain(stmt)
                if stmt.name != name and stmt.name in out:
                    out[stmt.name] = IMPORTED
                out[name] = tuple(arg_names(stmt, method=method))
            elif stmt.name in out or not all(map(_harmless_decorator, stmt.decorator_list)):
                out[stmt.name] = IMPORTED  # a wrapper may make a fixture of it
            continue
        if isinstance(stmt, ast.ClassDef):
            for part in evaluated(stmt):
                out.update(dict.fromkeys(bound_names(part), IMPORTED))
            if stmt.name in out or stmt.decorator_list:
                out[stmt.name] = IMPORTED
            continue
        for inner in ast.walk(stmt):
            if isinstance(inner, ast.ImportFrom) and any(a.name == "*" for a in inner.names):
                raise Dynamic("a star import")
            if isinstance(inner, ast.Name) and inner.id == "pytest_plugins":
                raise Dynamic("pytest_plugins")
            if conftest and isinstance(inner, ast.Name) and inner.id.startswith("collect_ignore"):
                raise Dynamic("collect_ignore")
            if isinstance(inner, ast.Call) and _is_fixture_decorator(inner):
                raise Dynamic("a fixture made by a call")
        out.update(dict.fromkeys(bound_names(stmt), IMPORTED))
    return out


def check_outcome_marks(marks: Iterable[ast.expr]) -> None:
    """Raise for a skip / skipif / xfail mark: pytest skips or xfails before it sets up."""
    for mark in marks:
        target: ast.expr = mark
        while True:
            if isinstance(target, ast.Call):
                target = target.func
            elif isinstance(target, ast.Attribute):
                if target.attr in _OUTCOME_MARKS:
                    raise Dynamic(f"a {target.attr} mark")
                target = target.value
            else:
                break


def parametrized(decorators: Iterable[ast.expr]) -> set[str]:
    """Argument names given by ``parametrize`` marks (raises for what is not literal)."""
    names: set[str] = set()
    for deco in decorators:
        if not isinstance(deco, ast.Call):
            continue
        func = deco.func
        if not (isinstance(func, ast.Attribute) and func.attr == "parametrize"):
            continue
        if any(kw.arg == "indirect" or kw.arg is None for kw in deco.keywords):
            raise Dynamic("indirect parametrization")
        if any(isinstance(a, ast.Starred) for a in deco.args):
            raise Dynamic("parametrize arguments that are not literals")
        first = (
            deco.args[0]
            if deco.args
            else next((kw.value for kw in deco.keywords if kw.arg == "argnames"), None)
        )
        try:
            value = ast.literal_eval(first) if first is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise Dynamic("parametrize names that are not literals") from None
        if isinstance(value, str):
            names |= {n.strip() for n in value.split(",") if n.strip()}
        elif isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value):
            names |= set(value)
        else:
            raise Dynamic("parametrize names that are not literals")
    return names


def pytestmark_of(body: Sequence[ast.stmt]) -> list[ast.expr]:
    """The marks of a module's or class's ``pytestmark`` (raises for any binding of it but
    one plain assignment of marks)."""
    found: list[ast.expr] | None = None
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == "pytestmark"
            and found is None
        ):
            value = stmt.value
            found = list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
            if not all(is_mark(m) for m in found):
                raise Dynamic("a pytestmark that is not a list of marks")
        elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
            "pytestmark" in set(bound_names(stmt))
        ):
            raise Dynamic("a pytestmark bound another way")
    return found or []
