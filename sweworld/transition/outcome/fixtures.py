"""Fixtures a test asks for that its run cannot provide: an exact fact of pytest's setup.

pytest resolves every argument of a test function (and in turn every argument of the
fixtures it uses) to a fixture visible from the test: the test's class, its module, the
``conftest.py`` files from the test's directory up to the rootdir, pytest's own fixtures and
those of the installed plugins. A name found nowhere errors the test at setup (``fixture 'X'
not found``); a fixture that overrides a name it also asks for (``def httpbin(httpbin)``)
needs an outer definition, and without one pytest reports ``recursive dependency involving
fixture 'X' detected``. Either way the test's status is ERROR and the run exits 1.

Decided from the AST only where every source of fixtures is known: the workspace's files,
and the plugins the task's environment installs (:data:`HARNESS_PLUGINS`). Anything dynamic
leaves the test undecided: star imports, ``pytest_plugins``, ``-p`` plugins, fixtures
registered by assignment or defined conditionally, ``pytest_generate_tests``, base classes
from elsewhere, parametrize names that are not literals or are indirect.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUILTIN_FIXTURES",
    "HARNESS_PLUGINS",
    "SetupError",
    "environment_plugins",
    "setup_errors",
]

#: pytest's own fixtures (a superset over pytest 6-8: a name here is never called missing).
BUILTIN_FIXTURES = frozenset(
    [
        "cache",
        "capfd",
        "capfdbinary",
        "caplog",
        "capsys",
        "capsysbinary",
        "capteesys",
        "doctest_namespace",
        "monkeypatch",
        "pytestconfig",
        "record_property",
        "record_testsuite_property",
        "record_xml_attribute",
        "recwarn",
        "request",
        "subtests",
        "tmp_path",
        "tmp_path_factory",
        "tmpdir",
        "tmpdir_factory",
    ]
)

#: Fixture names the pytest plugins of a SWE-bench harness environment provide, where the
#: environment's install recipe is known to install no pytest plugin (the harness installs
#: requests with ``python -m pip install .`` and pytest only; its tests' ``httpbin``
#: fixture comes from pytest-httpbin, which is not installed).
HARNESS_PLUGINS: Mapping[str, frozenset[str]] = {"psf/requests": frozenset()}

_MAX_DEPTH = 64
_PLUGIN_OPTION = re.compile(r"(?:^|\s)-p\s*(?!no:)[\w.]")


@dataclass(frozen=True)
class SetupError:
    """Why a test errors at setup: the fixture, whether the cause is a recursive override,
    and the test function's ``def`` line (number and text) for the report."""

    fixture: str
    recursive: bool
    line: int
    signature: str

    @property
    def message(self) -> str:
        """pytest's one-line reason."""
        if self.recursive:
            return f"recursive dependency involving fixture '{self.fixture}' detected"
        return f"fixture '{self.fixture}' not found"


def environment_plugins(task: Any) -> frozenset[str] | None:
    """The fixture names the plugins of ``task``'s environment provide, or None when they
    are not known (then nothing is decided)."""
    if task is None:
        return None
    repo = task.get("repo") if isinstance(task, Mapping) else getattr(task, "repo", None)
    return HARNESS_PLUGINS.get(str(repo or "").strip().lower())


class _Dynamic(Exception):
    """A source of fixtures that the AST cannot settle."""


_IMPORTED = ("imported",)  # a name bound by an import: possibly a fixture, deps unknown


def _is_fixture_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id in ("fixture", "yield_fixture")
    if isinstance(target, ast.Attribute):
        return target.attr in ("fixture", "yield_fixture")
    return False


def _arg_names(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> list[str]:
    """The arguments pytest fills with fixtures: without defaults, without ``self``."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    if args.defaults:
        positional = positional[: len(positional) - len(args.defaults)]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static and positional:
        positional = positional[1:]
    keyword = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return [a.arg for a in [*positional, *keyword]]


def _is_mark(node: ast.expr) -> bool:
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
        if not (_is_mark(deco) or _is_fixture_decorator(deco)) and not (
            isinstance(deco, ast.Name) and deco.id in ("staticmethod", "classmethod")
        ):
            raise _Dynamic("a decorator that may change the signature")


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for deco in node.decorator_list:
        if not _is_fixture_decorator(deco):
            continue
        if isinstance(deco, ast.Call):
            for kw in deco.keywords:
                if kw.arg == "name":
                    if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        return kw.value.value
                    raise _Dynamic("a fixture named by an expression")
        return node.name
    return None


def _scope(body: Sequence[ast.stmt], *, method: bool) -> dict[str, Any]:
    """Fixture name -> its arguments (or :data:`_IMPORTED`) for one module or class body."""
    out: dict[str, Any] = {}
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name == "pytest_generate_tests":
                raise _Dynamic("pytest_generate_tests")
            name = _fixture_name(stmt)
            if name is not None:
                _plain(stmt)
                out[name] = tuple(_arg_names(stmt, method=method))
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.name == "*":
                    raise _Dynamic("a star import")
                out.setdefault(alias.asname or alias.name, _IMPORTED)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                out.setdefault(alias.asname or alias.name.split(".")[0], _IMPORTED)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in targets):
                raise _Dynamic("pytest_plugins")
            if stmt.value is not None and any(
                isinstance(n, ast.Call) and _is_fixture_decorator(n) for n in ast.walk(stmt.value)
            ):
                raise _Dynamic("a fixture made by assignment")
        elif not isinstance(stmt, ast.ClassDef):
            # if / try / with / for: what it may bind counts as available, deps unknown
            for inner in ast.walk(stmt):
                if isinstance(inner, ast.ImportFrom) and any(a.name == "*" for a in inner.names):
                    raise _Dynamic("a star import")
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    for alias in inner.names:
                        out.setdefault((alias.asname or alias.name).split(".")[0], _IMPORTED)
                elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = _fixture_name(inner)
                    if name is not None:
                        out.setdefault(name, _IMPORTED)
                elif isinstance(inner, ast.Name) and inner.id == "pytest_plugins":
                    raise _Dynamic("pytest_plugins")
    return out


def _parametrized(decorators: Iterable[ast.expr]) -> set[str]:
    """Argument names given by ``parametrize`` marks (raises for what is not literal)."""
    names: set[str] = set()
    for deco in decorators:
        if not isinstance(deco, ast.Call):
            continue
        func = deco.func
        if not (isinstance(func, ast.Attribute) and func.attr == "parametrize"):
            continue
        if any(kw.arg == "indirect" for kw in deco.keywords):
            raise _Dynamic("indirect parametrization")
        first = (
            deco.args[0]
            if deco.args
            else next((kw.value for kw in deco.keywords if kw.arg == "argnames"), None)
        )
        try:
            value = ast.literal_eval(first) if first is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise _Dynamic("parametrize names that are not literals") from None
        if isinstance(value, str):
            names |= {n.strip() for n in value.split(",") if n.strip()}
        elif isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value):
            names |= set(value)
        else:
            raise _Dynamic("parametrize names that are not literals")
    return names


def _pytestmark(body: Sequence[ast.stmt]) -> list[ast.expr]:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            value = stmt.value
            return list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return []


class _Module:
    """One test module read for fixtures: its scope, classes and parametrize marks."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.scope = _scope(tree.body, method=False)
        self.marks = _pytestmark(tree.body)
        self.classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}

    def find(self, parts: Sequence[str]) -> tuple[Any, list[dict[str, Any]], set[str]]:
        """The test function of a node id's inner parts, the class scopes around it
        (innermost first) and the names its parametrize marks give."""
        params = _parametrized(self.marks)
        scopes: list[dict[str, Any]] = []
        body: Sequence[ast.stmt] = self.tree.body
        classes = self.classes
        for name in parts[:-1]:
            cls = classes.get(name)
            if cls is None:
                raise _Dynamic("a class the module does not define")
            merged: dict[str, Any] = {}
            members: list[ast.stmt] = []
            for klass in self._mro(cls):
                merged = {**_scope(klass.body, method=True), **merged}
                members += klass.body
                params |= _parametrized([*klass.decorator_list, *_pytestmark(klass.body)])
            scopes.insert(0, merged)
            body = members
            classes = {s.name: s for s in members if isinstance(s, ast.ClassDef)}
        func = next(
            (s for s in body
             if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == parts[-1]),
            None,
        )  # fmt: skip
        if func is None:
            raise _Dynamic("a test the module does not define")
        _plain(func)
        params |= _parametrized(func.decorator_list)
        return func, scopes, params

    def _mro(self, cls: ast.ClassDef, depth: int = 0) -> list[ast.ClassDef]:
        if depth > 16:
            raise _Dynamic("a deep class hierarchy")
        out = [cls]
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id == "object":
                continue
            if isinstance(base, ast.Name) and base.id in self.classes:
                out += self._mro(self.classes[base.id], depth + 1)
                continue
            raise _Dynamic("a base class from elsewhere")  # unittest.TestCase included
        return out


def _parse(text: str | None) -> ast.Module | None:
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _resolve(
    name: str,
    chain: Sequence[Mapping[str, Any]],
    start: int,
    provided: frozenset[str],
    memo: dict[tuple[str, int], tuple[str, bool] | None],
    depth: int = 0,
) -> tuple[str, bool] | None:
    """The first unavailable fixture on ``name``'s path from ``chain[start:]`` (and whether
    a recursive override is why), or None when everything resolves (``memo`` keeps each
    name's answer, so shared dependencies are resolved once)."""
    key = (name, start)
    if key not in memo:
        if depth > _MAX_DEPTH:
            raise _Dynamic("a fixture graph too deep")
        memo[key] = None  # a cycle back here: pytest's own error, not decided as missing
        memo[key] = _resolve_once(name, chain, start, provided, memo, depth)
    return memo[key]


def _resolve_once(
    name: str,
    chain: Sequence[Mapping[str, Any]],
    start: int,
    provided: frozenset[str],
    memo: dict[tuple[str, int], tuple[str, bool] | None],
    depth: int,
) -> tuple[str, bool] | None:
    for index in range(start, len(chain)):
        found = chain[index].get(name)
        if found is None:
            continue
        if found is _IMPORTED:
            return None
        for dep in found:
            if dep == name:  # an override asking for the definition it hides
                missing = _resolve(dep, chain, index + 1, provided, memo, depth + 1)
                if missing is not None:
                    return (name, True) if missing[0] == name else missing
            else:
                missing = _resolve(dep, chain, 0, provided, memo, depth + 1)
                if missing is not None:
                    return missing
        return None
    if name in BUILTIN_FIXTURES or name in provided:
        return None
    return name, False


def setup_errors(
    read: Callable[[str], str | None],
    test_ids: Sequence[str],
    plugins: frozenset[str] | None,
    *,
    argv: Sequence[str] = (),
) -> dict[str, SetupError]:
    """The tests of ``test_ids`` (node ids relative to the rootdir, the repository root)
    that certainly error at setup on a missing or recursive fixture, with the reason.

    ``read(path)`` returns a file's text (None when absent); ``plugins`` is the set of
    fixture names the environment's plugins provide (None: unknown, nothing is decided);
    ``argv`` the command (a ``-p`` plugin leaves everything undecided)."""
    if plugins is None or _PLUGIN_OPTION.search(" ".join(argv)):
        return {}
    for ini in ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"):
        if _PLUGIN_OPTION.search(read(ini) or ""):
            return {}
    modules: dict[str, _Module | None] = {}
    texts: dict[str, list[str]] = {}
    conftests: dict[str, dict[str, Any] | None] = {}

    def module(path: str) -> _Module | None:
        if path not in modules:
            tree = _parse(read(path))
            try:
                modules[path] = _Module(tree) if tree is not None else None
            except _Dynamic:
                modules[path] = None
        return modules[path]

    def conftest(directory: str) -> dict[str, Any] | None:
        if directory not in conftests:
            path = posixpath.join(directory, "conftest.py") if directory else "conftest.py"
            text = read(path)
            tree = _parse(text) if text is not None else None
            try:
                conftests[directory] = (
                    {} if text is None else (_scope(tree.body, method=False) if tree else None)
                )
            except _Dynamic:
                conftests[directory] = None
        return conftests[directory]

    out: dict[str, SetupError] = {}
    for test_id in test_ids:
        path, _, rest = test_id.partition("::")
        parts = rest.split("[", 1)[0].split("::") if rest else []
        mod = module(path)
        if not parts or mod is None:
            continue
        chain: list[Mapping[str, Any]] = []
        try:
            func, class_scopes, params = mod.find(parts)
            chain = [*class_scopes, mod.scope]
            directory = posixpath.dirname(path)
            while True:
                scope = conftest(directory)
                if scope is None:
                    raise _Dynamic("a conftest that cannot be read")
                chain.append(scope)
                if not directory:
                    break
                directory = posixpath.dirname(directory)
            wanted = [a for a in _arg_names(func, method=bool(class_scopes)) if a not in params]
            memo: dict[tuple[str, int], tuple[str, bool] | None] = {}
            for name in wanted:
                missing = _resolve(name, chain, 0, plugins, memo)
                if missing is not None:
                    lines = texts.setdefault(path, (read(path) or "").splitlines())
                    line = lines[func.lineno - 1] if func.lineno <= len(lines) else ""
                    out[test_id] = SetupError(missing[0], missing[1], func.lineno, line.strip())
                    break
        except (_Dynamic, RecursionError):
            continue
    return out
