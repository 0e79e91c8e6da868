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
import contextlib
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.transition.outcome.fixtures_ast import (
    IMPORTED,
    Dynamic,
    arg_names,
    bound_names,
    check_outcome_marks,
    evaluated,
    fixture_scope,
    is_mark,
    module_checks,
    parametrized,
    pytestmark_of,
)
from sweworld.transition.outcome.programs import parse_source

__all__ = [
    "BUILTIN_FIXTURES",
    "HARNESS_PLUGINS",
    "LISTED_FIXTURES",
    "SetupError",
    "environment_plugins",
    "setup_errors",
]

#: pytest's own fixtures as pytest 7's "available fixtures" line lists them (the renderer
#: prints this line).
LISTED_FIXTURES = (
    "cache", "capfd", "capfdbinary", "caplog", "capsys", "capsysbinary", "doctest_namespace",
    "monkeypatch", "pytestconfig", "record_property", "record_testsuite_property",
    "record_xml_attribute", "recwarn", "tmp_path", "tmp_path_factory", "tmpdir",
    "tmpdir_factory",
)  # fmt: skip
#: pytest's own fixtures (a superset over pytest 6-8: a name here is never called missing).
BUILTIN_FIXTURES = frozenset(
    [*LISTED_FIXTURES, "request", "capteesys", "record_xml_property", "subtests"]
)

#: Fixture names the pytest plugins of a SWE-bench harness environment provide, where the
#: environment's install recipe is known to install no pytest plugin (the harness installs
#: requests with ``python -m pip install .`` and pytest only; its tests' ``httpbin``
#: fixture comes from pytest-httpbin, which is not installed).
HARNESS_PLUGINS: Mapping[str, frozenset[str]] = {"psf/requests": frozenset()}

_MAX_DEPTH = 64
_MAX_CLASSES = 16  # nested classes of a node id, classes of one hierarchy
# ``-p name`` in a command, an ini file or a TOML list (``["-p", "x"]``); ``-p no:x`` is fine
_PLUGIN_OPTION = re.compile(r"(?<![\w-])-p[\s\"',]*(?!no:)[\w.]")
# options that change where fixtures, plugins or the configuration come from
_OTHER_CONFIG = re.compile(
    r"(?<![\w-])(?:-c|--config-file|--noconftest|--confcutdir|--rootdir|-o|--override-ini"
    r"|--pyargs|--import-mode|-P|--runxfail)(?![\w-])|PYTEST_ADDOPTS|PYTEST_PLUGINS"
)
_INI_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
              "pyproject.toml")  # fmt: skip


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


class _Body:
    """Where the names of one module or class body are bound: the last top-level ``def`` or
    ``class`` of each name, and the names bound any other way (whose value is unknown)."""

    def __init__(self, body: Sequence[ast.stmt]):
        self.defs: dict[str, ast.stmt] = {}
        self.other: set[str] = set()
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[stmt.name] = stmt
                for part in evaluated(stmt):
                    self.other.update(bound_names(part))
            else:
                self.other.update(bound_names(stmt))

    def get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        node = self.defs.get(name)
        if name in self.other or not isinstance(node, kind):
            raise Dynamic(f"{name!r} is not plainly defined")
        return node


def _is_generator(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return False


_ClassPath = tuple[list[dict[str, Any]], frozenset[str], _Body]


class _Module:
    """One test module read for fixtures: its scope, classes and parametrize marks."""

    def __init__(self, tree: ast.Module, text: str):
        self.tree = tree
        self.lines = text.splitlines()  # for the reports' ``def`` lines
        declared = module_checks(tree)
        self.scope = fixture_scope(tree.body, method=False)
        self.scope.update(dict.fromkeys(declared, IMPORTED))
        marks = pytestmark_of(tree.body)
        check_outcome_marks(marks)
        self.params = frozenset(parametrized(marks))
        self.body = _Body(tree.body)
        self._paths: dict[tuple[str, ...], _ClassPath | None] = {}

    def classes(self, names: tuple[str, ...]) -> _ClassPath:
        """For the classes ``names`` (outermost first): their scopes (innermost first), the
        names their parametrize marks give and the body of the innermost (bases merged)."""
        if names not in self._paths:
            self._paths[names] = None  # raised below: undecided for every test in it
            if not names:
                self._paths[names] = ([], self.params, self.body)
            else:
                scopes, params, body = self.classes(names[:-1])
                cls = body.get(names[-1], ast.ClassDef)
                if not cls.name.startswith("Test"):
                    raise Dynamic("a class pytest does not collect")
                mro = self._mro(cls, nested=len(names) > 1)
                merged: dict[str, Any] = {}
                members: list[ast.stmt] = []
                found = set(params)
                for klass in mro:  # most derived first
                    merged = {**fixture_scope(klass.body, method=True), **merged}
                    members[:0] = klass.body  # a base's members first: the derived win
                    marks = [*klass.decorator_list, *pytestmark_of(klass.body)]
                    if not all(map(is_mark, klass.decorator_list)) or klass.keywords:
                        raise Dynamic("a class decorator or metaclass")
                    check_outcome_marks(marks)
                    found |= parametrized(marks)
                members_body = _Body(members)
                if {"__init__", "__new__"} & (members_body.defs.keys() | members_body.other):
                    raise Dynamic("a class with a constructor (pytest does not collect it)")
                self._paths[names] = ([merged, *scopes], frozenset(found), members_body)
        found_path = self._paths[names]
        if found_path is None:
            raise Dynamic("an undecided class")
        return found_path

    def find(self, parts: Sequence[str]) -> tuple[Any, list[dict[str, Any]], frozenset[str]]:
        """The test function of a node id's inner parts, the class scopes around it
        (innermost first) and the names its parametrize marks give."""
        if len(parts) > _MAX_CLASSES:
            raise Dynamic("classes nested too deep")
        scopes, params, body = self.classes(tuple(parts[:-1]))
        func = body.get(parts[-1], ast.FunctionDef)  # async tests: not run by plain pytest
        if not func.name.startswith("test") or _is_generator(func):
            raise Dynamic("a function pytest does not run as a plain test")
        if not all(
            is_mark(d) or (isinstance(d, ast.Name) and d.id == "staticmethod")
            for d in func.decorator_list
        ):
            raise Dynamic("a decorator that may change the test")
        check_outcome_marks(func.decorator_list)
        return func, scopes, params | parametrized(func.decorator_list)

    def _mro(self, cls: ast.ClassDef, *, nested: bool) -> list[ast.ClassDef]:
        """``cls`` and its bases in method resolution order, for a hierarchy of module
        classes without shared bases (depth-first is then Python's order)."""
        out: list[ast.ClassDef] = []
        stack = [cls]
        while stack:
            klass = stack.pop()
            if any(k is klass for k in out) or len(out) >= _MAX_CLASSES:
                raise Dynamic("a class hierarchy with shared bases, a cycle or too many")
            out.append(klass)
            bases = []
            for base in klass.bases:
                if isinstance(base, ast.Name) and base.id == "object":
                    continue
                if nested or not isinstance(base, ast.Name):
                    raise Dynamic("a base class from elsewhere")  # unittest.TestCase included
                found = self.body.get(base.id, ast.ClassDef)
                if found.lineno >= klass.lineno:
                    raise Dynamic("a base class defined after its subclass")
                bases.append(found)
            stack.extend(reversed(bases))
        return out


def _plain_path(path: str) -> bool:
    """A relative path under the rootdir to a ``.py`` file (no ``..``, ``.``, ``//``,
    backslash or NUL: nothing outside the workspace is read)."""
    return (
        path.endswith(".py")
        and path.count("/") <= _MAX_DEPTH
        and not any(
            step in ("", ".", "..") or "\\" in step or "\0" in step for step in path.split("/")
        )
    )


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
            raise Dynamic("a fixture graph too deep")
        memo[key] = None  # a cycle back here: pytest's own error, not decided as missing
        try:
            memo[key] = _resolve_once(name, chain, start, provided, memo, depth)
        except BaseException:
            del memo[key]  # not an answer: the memo is shared by the module's tests
            raise
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
        if found is IMPORTED:
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
    if plugins is None:
        return {}
    command = " ".join(str(a) for a in argv)
    if _PLUGIN_OPTION.search(command) or _OTHER_CONFIG.search(command):
        return {}
    modules: dict[str, _Module | None] = {}
    conftests: dict[str, dict[str, Any] | None] = {}
    memos: dict[tuple[str, tuple[str, ...], frozenset[str]], dict] = {}

    def module(path: str) -> _Module | None:
        if path not in modules:
            modules[path] = None
            text = read(path)
            tree = parse_source(text, path)
            with contextlib.suppress(Dynamic, RecursionError):
                modules[path] = _Module(tree, text) if tree is not None and text else None
        return modules[path]

    def conftest(directory: str) -> dict[str, Any] | None:
        """The fixtures of ``directory``'s conftest ({} for none); None: undecided (also
        when an ini file there may load a plugin)."""
        if directory not in conftests:
            conftests[directory] = None
            prefix = directory + "/" if directory else ""
            for ini in _INI_FILES:
                if _PLUGIN_OPTION.search(read(prefix + ini) or ""):
                    return None
            text = read(prefix + "conftest.py")
            if text is None:
                conftests[directory] = {}
                return conftests[directory]
            tree = parse_source(text, prefix + "conftest.py")
            try:
                if tree is not None:
                    declared = module_checks(tree)
                    scope = fixture_scope(tree.body, method=False, conftest=True)
                    scope.update(dict.fromkeys(declared, IMPORTED))
                    conftests[directory] = scope
            except (Dynamic, RecursionError):
                pass
        return conftests[directory]

    # a conftest's hooks may act on every test of the session (``pytest_collection_
    # modifyitems`` skipping them): every conftest on the tests' paths must be settled
    paths = {p for p in (str(t).partition("::")[0] for t in test_ids) if _plain_path(p)}
    directories = {""}
    for path in paths:
        directory = posixpath.dirname(path)
        while directory and directory not in directories:
            directories.add(directory)
            directory = posixpath.dirname(directory)
    if any(conftest(d) is None for d in sorted(directories)):
        return {}
    out: dict[str, SetupError] = {}
    for test_id in test_ids:
        path, _, rest = str(test_id).partition("::")
        parts = rest.split("[", 1)[0].split("::") if rest else []
        if not parts or not _plain_path(path):
            continue  # only plain relative paths under the rootdir
        mod = module(path)
        if mod is None:
            continue
        try:
            func, class_scopes, params = mod.find(parts)
            chain: list[Mapping[str, Any]] = [dict.fromkeys(params, ()), *class_scopes, mod.scope]
            directory = posixpath.dirname(path)
            while True:
                scope = conftest(directory)
                if scope is None:
                    raise Dynamic("a conftest that cannot be read")
                chain.append(scope)
                if not directory:
                    break
                directory = posixpath.dirname(directory)
            wanted = arg_names(func, method=bool(class_scopes))
            memo = memos.setdefault((path, tuple(parts[:-1]), params), {})
            for name in wanted:
                missing = _resolve(name, chain, 0, plugins, memo)
                if missing is not None:
                    lines = mod.lines
                    line = lines[func.lineno - 1] if func.lineno <= len(lines) else ""
                    out[test_id] = SetupError(missing[0], missing[1], func.lineno, line.strip())
                    break
        except (Dynamic, RecursionError):
            continue
    return out
