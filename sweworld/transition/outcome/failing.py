"""Tests that fail whatever the code under test does (exact, read from the test's source).

A test fails for sure when its body, before anything that may skip, xfail, stop the run,
return or raise otherwise, reaches a statement that always raises: ``assert`` of a false
literal, ``raise X(...)``, ``pytest.fail(...)``, ``self.fail(...)`` in a ``TestCase`` (or
a ``TestCase``'s ``setUp`` does). Agents write such tests to reproduce an issue (``assert
0`` to see the output, a test that re-raises what the issue shows).

Claimed only where nothing but the test's own code decides its outcome:

* the test asks for no fixture (only its ``parametrize`` names, which must be exactly its
  arguments), carries only ``pytest.mark`` decorators (no ``usefixtures``; :mod:`.marks`
  reads the skip / xfail ones first) and is no generator;
* its module names nothing that may skip, xfail, interrupt or set a test up outside the
  test (:data:`_MODULE_WORDS`: ``skip``, ``SkipTest``, ``exit``, ``setup_module``,
  ``setUpClass``, ``usefixtures``, an autouse fixture, a hook, a star import, ...) outside
  the decorators that :mod:`.marks` reads, and neither does a ``conftest.py`` above it nor
  the root's ini files (:func:`governed`);
* a ``TestCase`` is ``unittest``'s.

The exception shown (``E   Name``) is claimed only where the failing statement comes first
and evaluates nothing that may raise first (a builtin exception class with literal
arguments, a literal assertion message); otherwise the failure is claimed and its class is
left to the model (""). Costs are linear in the module's size.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Sequence

from sweworld.transition.facts.simulation import dotted_name
from sweworld.transition.outcome.fixtures_ast import arg_names, is_mark

__all__ = ["ModuleFacts", "always_fails", "governed", "module_words"]

#: identifiers whose presence in a test module (outside the decorators :mod:`.marks`
#: reads) may change a test's outcome before or instead of its own code: skips and xfails
#: (also through a helper or an alias), the session's or the process's end, set-up code
#: outside the test, fixtures applied by name, marks on parameters, uncollected tests
_MODULE_WORDS = frozenset({
    "skip", "skipif", "skipTest", "SkipTest", "xfail", "importorskip", "exit", "_exit",
    "quit", "KeyboardInterrupt", "SystemExit", "signal", "raise_signal", "kill", "abort",
    "fork", "add_marker", "applymarker", "usefixtures", "autouse", "marks", "setup",
    "setup_module", "setup_function", "setup_method", "setup_class", "setUpClass",
    "setUpModule", "__test__", "__unittest_skip__", "__unittest_expecting_failure__",
    "pytest_plugins", "hookwrapper", "set_trace", "breakpoint", "post_mortem",
    "expectedFailure", "failureException", "globals", "setattr", "delattr", "teardown",
    "teardown_module", "teardown_function", "teardown_method", "teardown_class",
})  # fmt: skip
#: words of a ``conftest.py`` above the test, or of the root's ini files, that may change
#: a test's outcome (an autouse fixture, a hook, a plugin, fixtures applied to all)
_CONFTEST_WORDS = ("autouse", "pytest_", "import *", "usefixtures",
                   "hookwrapper", "wrapper=True")  # fmt: skip
_INI_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
              "pyproject.toml")  # fmt: skip
#: plugins an ini's ``-p`` may load without changing a test's outcome
_HARMLESS_PLUGINS = frozenset({"pytester"})
#: marks pytest registers itself (others are errors where the ini asks for strict markers)
_BUILTIN_MARKS = frozenset(
    {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
)
#: misspellings of ``parametrize`` pytest refuses at collection
_MISSPELT = frozenset({"mark:parameterize", "mark:parametrise", "mark:parameterise"})
#: builtin exception classes a literal ``raise X(...)`` shows as itself (not those whose
#: constructor needs given arguments, nor OSError's, which picks a subclass by errno)
_PLAIN_RAISED = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type)
    and issubclass(value, Exception)
    and not issubclass(value, (UnicodeError, OSError, SyntaxError))
    and "ExceptionGroup" not in name
    and not name.startswith("_")
)
#: statements that end or suspend a test, or may raise something that is not a failure
_STOPPING = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.While, ast.Raise)
_NOT_FAILURES = ("skip", "xfail", "exit", "interrupt", "outcome", "signal")


def dotted(node: ast.expr) -> str:
    """``a.b.c`` of a name or attribute chain, of a call's function for a call ("" for
    anything else)."""
    return dotted_name(node.func if isinstance(node, ast.Call) else node) or ""


def module_words(tree: ast.Module) -> set[str]:
    """The identifiers a module uses (names, attributes, keywords, imports, definitions)
    outside its functions' and classes' decorators and its ``pytestmark`` assignments, plus
    ``def pytest_`` for a hook and ``import *`` for a star import: what
    :data:`_MODULE_WORDS` is looked up in. One walk of the tree."""
    words: set[str] = set()
    stack: list[ast.AST] = []
    for node in tree.body:
        if _is_main_block(node):
            continue  # not run when pytest imports the module
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
            isinstance(sub, (ast.Raise, ast.Assert, ast.Delete)) for sub in ast.walk(node)
        ):
            words.add("raise")  # the import may fail (a collection error), or unbind a test
        stack.append(node)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.add(node.name)
            if node.name.startswith("pytest_"):
                words.add("def pytest_")
            for deco in node.decorator_list:  # the marks used: "mark:NAME"
                name = dotted(deco)
                if ".mark." in f".{name}":
                    words.add("mark:" + name.rsplit(".", 1)[-1])
            children = [c for c in ast.iter_child_nodes(node) if c not in node.decorator_list]
            stack.extend(children)
            continue
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            for sub in ast.walk(node.value):  # read by the marks; the mark names count
                name = dotted(sub) if isinstance(sub, (ast.Attribute, ast.Call)) else ""
                if ".mark." in f".{name}":
                    words.add("mark:" + name.rsplit(".", 1)[-1])
            continue
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            words.add(node.arg)
        elif isinstance(node, ast.alias):
            words.update({node.name.rsplit(".", 1)[-1], node.asname or ""})
            if node.name == "*":
                words.add("import *")
        stack.extend(ast.iter_child_nodes(node))
    return words


def _is_main_block(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (a script's own entry, which pytest does not run)."""
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def governed(text_of: Callable[[str], str | None], path: str, words: Iterable[str]) -> bool:
    """Whether code other than a test's own may decide the outcome of the tests of the
    module at ``path`` whose identifiers are ``words`` (:func:`module_words`): a word of
    :data:`_MODULE_WORDS` in it, a word of :data:`_CONFTEST_WORDS` in a ``conftest.py``
    above it, a package above it that may skip or fail on import, or an ini file at the
    root that applies fixtures to every test, loads a plugin (``-p``) or refuses the
    module's own marks (strict markers)."""
    words = set(words)
    if not _MODULE_WORDS.isdisjoint(words) or {"def pytest_", "import *", "raise"} & words:
        return True
    if _MISSPELT & words:
        return True  # pytest refuses a misspelt parametrize at collection
    parts = path.split("/")[:-1]
    conftests = ["/".join([*parts[:i], "conftest.py"]) for i in range(len(parts) + 1)]
    if any(w in (text_of(c) or "") for c in conftests for w in _CONFTEST_WORDS):
        return True
    packages = ["/".join([*parts[:i], "__init__.py"]) for i in range(1, len(parts) + 1)]
    if any(w in (text_of(p) or "") for p in packages for w in ("skip", "exit", "raise")):
        return True  # a package that skips or fails on import
    custom = {w[5:] for w in words if w.startswith("mark:") and w[5:] not in _BUILTIN_MARKS}
    folders = ["/".join(parts[:i]) for i in range(len(parts) + 1)]
    for ini in (f"{f}/{name}" if f else name for f in folders for name in _INI_FILES):
        text = _pytest_section(text_of(ini) or "")
        if text and _ini_governs(text, custom):
            return True
    return False


#: the headers of pytest's section in an ini, cfg or toml file
_SECTIONS = ("[pytest]", "[tool:pytest]", "[tool.pytest.ini_options]", "[tool.pytest]")


def _pytest_section(text: str) -> str:
    """The lines of pytest's own section of a configuration file (tox's, mypy's, coverage's
    sections say nothing to pytest), "" where there is none."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped.replace(" ", "") in _SECTIONS
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


def _ini_governs(text: str, custom: set[str]) -> bool:
    """Whether an ini file's settings may change a test's outcome or stop its collection:
    fixtures for every test, a plugin it loads (``-p``; disabling one is harmless, but for
    ``unittest``), a ``-m`` / ``-k`` selection, pytest 9's ``strict``, warnings as errors
    or strict markers where the module uses marks the file does not name."""
    if "usefixtures" in text or "required_plugins" in text:
        return True
    if re.search(r"(?m)^\s*strict\w*\s*=", text):  # pytest 9's strict options
        return True
    if re.search(r"(?:^|[\s\"',\[])-[mk](?:[\s\"',]|$)", text):
        return True
    plugins = re.findall(r"-p[\s\"',]+([\w:.-]+)", text)
    if any(p == "no:unittest" or not (p.startswith("no:") or p in _HARMLESS_PLUGINS)
           for p in plugins):  # fmt: skip
        return True
    strict_marks = "--strict" in text or re.search(r"(?m)error\b", text) is not None
    return strict_marks and any(mark not in text for mark in custom)


class _Body:
    """One test's reading: which statements surely run through (computed once, bottom
    up, for every node of the function), and what the class and module bind."""

    def __init__(
        self,
        funcs: Sequence[ast.FunctionDef],
        unittest: bool,
        bound: set[str],
        through: dict[int, bool],
    ):
        self.unittest = unittest
        self.bound = bound
        self._through = through  # shared by the tests of a module: a setUp is read once
        for func in funcs:
            if id(func) not in through:
                self._index(func)
                through[id(func)] = True

    def _index(self, func: ast.FunctionDef) -> None:
        order: list[ast.AST] = []
        stack: list[ast.AST] = list(func.body)
        while stack:  # pre-order; children are decided before their parents below
            node = stack.pop()
            order.append(node)
            stack.extend(ast.iter_child_nodes(node))
        for node in reversed(order):
            bad = isinstance(node, _STOPPING) or (
                isinstance(node, ast.Call) and _stops(dotted(node.func))
            )
            self._through[id(node)] = not bad and all(
                self._through.get(id(c), True) for c in ast.iter_child_nodes(node)
            )

    def runs_through(self, node: ast.AST) -> bool:
        """Whether a statement that does not fail surely hands on to the next one: nothing
        in it returns, yields, awaits, loops with ``while``, raises or calls something
        that may skip or stop (its module names none of those otherwise)."""
        return self._through.get(id(node), False)

    def fails_first(self, body: Sequence[ast.stmt]) -> str | None:
        """The exception class the first statement of ``body`` that surely fails shows
        ("" where not known, or where a statement runs before it), when every statement
        before it surely runs through; None when no such statement."""
        ran = False  # a statement before that evaluates something (not a docstring)
        for node in body:
            failed = self.failing(node)
            if failed is not None:
                return "" if ran else failed
            if not self.runs_through(node):
                return None
            ran = ran or not _inert(node, self.bound)
        return None

    def failing(self, node: ast.stmt) -> str | None:
        """The exception class a statement surely raises as a test failure ("": one
        whose class is not known), None when it may not."""
        if isinstance(node, ast.Assert):
            test, msg = node.test, node.msg
            if not isinstance(test, ast.Constant) or test.value:
                return None
            return "AssertionError" if msg is None or isinstance(msg, ast.Constant) else ""
        if isinstance(node, ast.Raise):
            return self._raised(node)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call, name = node.value, dotted(node.value.func)
            literal = not call.keywords and (
                not call.args or (len(call.args) == 1 and isinstance(_const(call.args[0]), str))
            )
            if name == "pytest.fail" and "pytest" in self.bound:
                return "Failed" if literal else ""
            if self.unittest and name == "self.fail":
                return "AssertionError" if literal else ""
            return None
        if isinstance(node, ast.Try) and not node.finalbody:
            first = self.fails_first(node.body)
            handlers = [self.fails_first(h.body) for h in node.handlers]
            if first is None or any(n is None for n in handlers):
                return None
            # a handler's exception chains to the body's, which pytest shows first, where it
            # raises with no cause or ``from`` the exception it caught
            chained = all(
                r.cause is None or (isinstance(r.cause, ast.Name) and r.cause.id == h.name)
                for h in node.handlers
                for r in ast.walk(h)
                if isinstance(r, ast.Raise)
            )
            return first if chained else ""
        if isinstance(node, ast.If) and self.runs_through(node.test):
            names = {self.fails_first(node.body), self.fails_first(node.orelse)}
            if None in names:
                return None
            return "" if len(names) > 1 or not isinstance(node.test, ast.Constant) else names.pop()
        return None

    def _raised(self, node: ast.Raise) -> str | None:
        """``raise X(...)``: ``X`` where a builtin exception class with literal arguments
        (under its own name: ``IOError`` shows as ``OSError``), "" for another class, None
        for a bare ``raise`` or what may be a skip, an xfail or an exit."""
        if node.exc is None:
            return None
        name = dotted(node.exc)
        if not name or any(word in name.lower() for word in _NOT_FAILURES):
            return None
        call = node.exc if isinstance(node.exc, ast.Call) else None
        literal = call is None or (
            all(isinstance(a, ast.Constant) for a in call.args) and not call.keywords
        )
        if name in _PLAIN_RAISED and name not in self.bound and literal and node.cause is None:
            return getattr(builtins, name).__name__
        return ""


def _const(node: ast.expr) -> object:
    """A literal's value (``None`` stands for anything else too)."""
    return node.value if isinstance(node, ast.Constant) else None


def _inert(node: ast.stmt, bound: set[str]) -> bool:
    """A statement that evaluates nothing that may raise: ``pass``, a docstring or other
    literal, ``print`` of literals (where the module does not rebind ``print``)."""
    if isinstance(node, ast.Pass):
        return True
    if not isinstance(node, ast.Expr):
        return False
    value = node.value
    if isinstance(value, ast.Constant):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "print"
        and "print" not in bound
        and all(isinstance(a, ast.Constant) for a in value.args)
        and not value.keywords
    )


def _stops(name: str) -> bool:
    """A call that may skip, xfail or stop (its last name is a module word)."""
    return name.rsplit(".", 1)[-1] in _MODULE_WORDS


def _own_arguments(func: ast.FunctionDef, method: bool, unittest: bool) -> bool:
    """Whether the test asks for nothing but its parameters (``self`` of a method,
    arguments with defaults, the names literal ``parametrize`` marks give, not
    ``indirect``): no fixture's code can then skip or xfail it first. The marks must name
    exactly its arguments, each once, with a literal, non-empty list of values (rows of the
    names' length; no ``pytest.param``): pytest refuses the others at collection, and an
    empty list skips. A ``TestCase`` method takes no parameters."""
    if func.args.vararg or func.args.kwarg or func.args.posonlyargs:
        return False
    given: list[str] = []
    for deco in func.decorator_list:
        if not (isinstance(deco, ast.Call) and dotted(deco.func).endswith("mark.parametrize")):
            continue
        if unittest or deco.keywords or len(deco.args) != 2:
            return False
        names, values = _const(deco.args[0]), deco.args[1]
        if not isinstance(names, str) or not isinstance(values, (ast.List, ast.Tuple)):
            return False
        listed = [n.strip() for n in names.split(",") if n.strip()]
        if not listed or not values.elts:
            return False
        for value in values.elts:
            if any(isinstance(n, ast.Call) for n in ast.walk(value)):
                return False  # pytest.param(...): marks, ids, its own arity
            if len(listed) > 1 and not (
                isinstance(value, (ast.List, ast.Tuple)) and len(value.elts) == len(listed)
            ):
                return False
        given += listed
    wanted = arg_names(func, method=method)
    return len(given) == len(set(given)) and set(given) == set(wanted)


#: what a ``unittest.TestCase`` subclass may define for its tests to be read as
#: ``unittest`` runs them
_CASE_METHODS = ("setUp",)


class ModuleFacts:
    """What :func:`always_fails` needs of a test module, computed once per module: the
    names its top level binds, whether ``TestCase`` / ``unittest.TestCase`` there is
    ``unittest``'s (imported from it and bound no other way), and the readings of its
    functions (shared by its tests)."""

    def __init__(self, tree: ast.Module, bound: set[str]):
        self.bound = bound
        bindings: dict[str, int] = {}
        from_unittest = False
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "unittest":
                from_unittest |= any(a.name == "TestCase" and not a.asname for a in node.names)
            for sub in ast.walk(node):
                name = None
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = sub.name
                elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                    name = sub.id
                elif isinstance(sub, ast.alias):
                    name = sub.asname or sub.name.split(".", 1)[0]
                if name in ("TestCase", "unittest"):
                    bindings[name] = bindings.get(name, 0) + 1
        self.testcase = from_unittest and bindings.get("TestCase") == 1
        self.unittest = bindings.get("unittest") == 1 and any(
            isinstance(n, ast.Import) and any(a.name == "unittest" and not a.asname
                                              for a in n.names)
            for n in tree.body
        )  # fmt: skip
        self.through: dict[int, bool] = {}
        self.bodies: dict[int, tuple[str | None, bool, bool]] = {}
        self.plain: dict[int, bool] = {}


def _plain_case(cls: ast.ClassDef, bound: set[str]) -> bool:
    """A ``TestCase`` subclass that defines only test methods, ``setUp`` and a ``tearDown``
    that evaluates nothing that may raise (an error there pytest would show first); no
    override of ``fail``, ``run``, ``failureException``; no class-level code."""
    for node in cls.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.FunctionDef) and (
            node.name.startswith("test") or node.name in _CASE_METHODS
        ):
            continue
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == "tearDown"
            and not node.decorator_list
            and all(_inert(n, bound) for n in node.body)
        ):
            continue
        return False
    return True


def always_fails(
    func: ast.FunctionDef,
    classes: Sequence[ast.ClassDef],
    setup: ast.stmt | None,
    module: ModuleFacts,
    inherited: Sequence[ast.expr] = (),
) -> tuple[int, str] | None:
    """``(line, exception class)`` of a test that fails whatever the code under test does
    ("" for a class not known), None when it may not (see the module). ``classes``: the
    test's classes, outermost first; ``setup``: its class's ``setUp``, if any; ``module``:
    its module's :class:`ModuleFacts`; ``inherited``: the marks its classes' and module's
    ``pytestmark`` give it. The caller checks first that nothing governs the module
    (:func:`governed`) and reads the marks."""
    decorators = [*func.decorator_list, *(d for c in classes for d in c.decorator_list)]
    if not all(is_mark(d) for d in decorators):
        return None
    applied = [*decorators, *inherited]
    if any(dotted(d).endswith(("mark.usefixtures", "mark.parametrize")) for d in inherited):
        return None  # fixtures, or parameters (and their marks), from elsewhere
    if any(dotted(d).endswith("mark.usefixtures") for d in applied):
        return None
    bases = [dotted(b) for c in classes for b in c.bases]
    unittest = bool(bases)
    if any(b not in ("TestCase", "unittest.TestCase") for b in bases):
        return None
    if ("TestCase" in bases and not module.testcase) or (
        "unittest.TestCase" in bases and not module.unittest
    ):
        return None  # another TestCase than unittest's
    for cls in classes if unittest else ():
        if id(cls) not in module.plain:  # read once for all the class's tests
            module.plain[id(cls)] = _plain_case(cls, module.bound)
        if not module.plain[id(cls)]:
            return None
    if not _own_arguments(func, method=bool(classes), unittest=unittest):
        return None
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(func)):
        return None
    funcs = [func]
    if unittest and isinstance(setup, ast.FunctionDef):
        if setup.decorator_list or not setup.args.args:
            return None
        funcs.insert(0, setup)
    if classes and not func.args.args:
        return None  # a method without self: TypeError, not its own failure
    reading = _Body(funcs, unittest, module.bound, module.through)
    ran = False  # the set-up evaluated something before the test's body
    for body in (f.body for f in funcs):
        key = id(body)
        if key not in module.bodies:  # a class's setUp is read once for all its tests
            module.bodies[key] = (
                reading.fails_first(body),
                all(reading.runs_through(node) for node in body),
                not all(_inert(node, module.bound) for node in body),
            )
        failed, through, evaluates = module.bodies[key]
        if failed is not None:
            return func.lineno, "" if ran else failed
        if not through:
            return None
        ran = ran or evaluates
    return None
