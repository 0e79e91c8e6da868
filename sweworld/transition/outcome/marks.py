"""What a test's marks decide before it runs (exact, read from the test's source).

pytest evaluates ``skip`` / ``skipif`` / ``xfail`` marks itself, so some outcomes follow
from the source alone, whatever the code under test does:

* ``@pytest.mark.skip(reason=...)`` or ``skip("...")``, ``skipif(True, reason=...)``,
  ``@unittest.skip("...")`` on a ``TestCase``: SKIPPED;
* ``@pytest.mark.xfail`` (no condition, or ``True`` with a reason; no ``raises``): XFAIL,
  the test's expected failure (see :func:`apply_marks`; an unexpected pass, XPASS, is not
  predicted); ``--runxfail`` turns these marks off;
* a test whose body starts with ``pytest.skip("...")``: SKIPPED, unless the model says its
  setup errs (the call runs after the fixtures);
* with ``--pdb``, ``unittest.skip`` is left to the model (pytest before 7.2 ran a skipped
  TestCase's ``tearDown`` under the debugger);
* a test no mark decides whose own body surely fails (:mod:`.failing`): FAILED, with the
  exception it raises.

Marks are read as pytest orders them: the function's own (bottom decorator first), its
classes', then the module's ``pytestmark`` (the last assignment of each body); every
``skipif`` before any ``skip``, a ``skip`` before an ``xfail``. The last definition of a
name is the one that runs. Each decided test carries what pytest's short summary shows of
it: the line (the function's first line, its first decorator's, or the ``pytest.skip``
call's; none for a ``skip`` that only a class or module applies) and the reason.

Left to the model (nothing claimed): a condition or reason that is not a literal, a
boolean condition without ``reason=`` (an error in pytest), ``raises=``, marks that may
come from elsewhere (a class with a base other than ``object`` / ``TestCase``, a mark
through a variable, ``pytest.param(..., marks=...)``), ``async def`` tests. Costs are
linear: each file's definitions are indexed once.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from sweworld.transition.outcome.failing import (
    ModuleFacts,
    always_fails,
    dotted,  # one reader of names
    governed,
    module_words,
)
from sweworld.transition.outcome.programs import parse_source

__all__ = [
    "Marked",
    "apply_marks",
    "command_marks",
    "marked_outcomes",
    "summary_details",
    "summary_message",
]

_MAX_IDS = 5_000
_PLAIN_BASES = frozenset({"object", "TestCase", "unittest.TestCase"})


class Marked(NamedTuple):
    """What a test's marks decide: ``outcome`` is ``skip``, ``xfail``, ``xfail-strict``,
    ``xfail-notrun`` (not run: "[NOTRUN]" in the summary), ``skip-call`` (a
    ``pytest.skip`` call first in the body) or ``fail`` (the body surely fails; ``reason``
    is the exception's class, "" where not known); ``line`` (1-based; 0: none shown) and
    ``reason`` are what pytest's short summary shows of a skip, ``reason`` also of an
    xfail."""

    outcome: str
    line: int = 0
    reason: str = ""


class _Unknown(Exception):
    """The marks may decide something this module does not read: leave the test alone."""


def _mark_name(node: ast.expr) -> tuple[str, ast.Call | None]:
    """The mark a decorator or ``pytestmark`` item is (``pytest.mark.NAME`` or
    ``mark.NAME``: ``NAME``; ``unittest.skip(...)``: ``unittest.skip``) and its call;
    ``("", None)`` for anything else."""
    call = node if isinstance(node, ast.Call) else None
    name = dotted(node)
    for prefix in ("pytest.mark.", "mark."):
        if name.startswith(prefix) and "." not in name[len(prefix) :]:
            return name[len(prefix) :], call
    if name == "unittest.skip" and call is not None:
        return "unittest.skip", call
    return "", None


def _literal(node: ast.expr | None) -> ast.Constant | None:
    return node if isinstance(node, ast.Constant) else None


def _keyword(call: ast.Call | None, name: str) -> ast.expr | None:
    if call is None:
        return None
    return next((k.value for k in call.keywords if k.arg == name), None)


def _reason(node: ast.expr | None, default: str) -> str:
    """A literal reason (``default`` when none is given); :class:`_Unknown` otherwise."""
    if node is None:
        return default
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise _Unknown("a reason that is not a literal")


def _condition(call: ast.Call | None) -> bool:
    """Whether a ``skipif`` / ``xfail`` call's condition surely holds (no condition: it
    does); :class:`_Unknown` for a condition that is not a literal, several conditions or
    a boolean without ``reason=`` (pytest reports that as an error)."""
    if call is None or not call.args:
        if _keyword(call, "condition") is not None:
            raise _Unknown("a condition keyword")
        return True
    if len(call.args) > 1 or any(k.arg is None for k in call.keywords):
        raise _Unknown("several conditions or **kwargs")
    value = _literal(call.args[0])
    if value is None or not isinstance(value.value, bool):
        raise _Unknown("a condition that is not a literal boolean")
    if _keyword(call, "reason") is None:
        raise _Unknown("a boolean condition without a reason: an error in pytest")
    return value.value


#: the keywords each mark takes (another, or ``**kwargs``, is left to the model)
_KEYWORDS = {
    "skip": {"reason"},
    "skipif": {"reason", "condition"},
    "xfail": {"reason", "condition", "run", "strict", "raises"},
}
#: decorators of a test that are not marks
_NOT_MARKS = ("staticmethod", "classmethod", "patch", "mock.patch", "unittest.mock.patch")


def _known_marks(marks: Sequence[ast.expr]) -> list[tuple[str, ast.Call | None]]:
    """The marks read: any item that is not a plain ``pytest.mark`` mark (a mark through a
    variable, another library's skip decorator) or has an unknown keyword makes it all
    unknown (it may skip first); other marks (``parametrize``, ``slow``) are kept by name."""
    named = []
    for node in marks:
        name, call = _mark_name(node)
        if not name:
            name = dotted(node)
            if name.startswith(_NOT_MARKS):
                continue
            raise _Unknown(f"a decorator or mark not read: {name or '?'}")
        allowed = _KEYWORDS.get(name)
        keywords = call.keywords if call is not None and allowed is not None else []
        if any(k.arg is None or k.arg not in allowed for k in keywords):  # type: ignore[operator]
            raise _Unknown("a keyword the mark does not take, or **kwargs")
        named.append((name, call))
    return named


def _decide(marks: Sequence[ast.expr], runxfail: bool, pdb: bool) -> tuple[str, str, str] | None:
    """``(outcome, reason, mark name)`` the marks (in pytest's order) fix, or None when they
    fix nothing; :class:`_Unknown` when they may fix something unread."""
    named = _known_marks(marks)
    for name, call in named:  # every skipif before any skip
        if name == "skipif" and _condition(call):
            return "skip", _reason(_keyword(call, "reason"), ""), name
    for name, call in named:
        if name == "unittest.skip":
            if pdb or call is None or len(call.args) != 1 or call.keywords:
                raise _Unknown("unittest.skip under --pdb, or unusual arguments")
            return "skip", _reason(call.args[0], ""), name
        if name == "skip":
            if call is not None and (call.args and _keyword(call, "reason") is not None):
                raise _Unknown("skip with a condition: an error in pytest")
            if call is not None and len(call.args) > 1:
                raise _Unknown("skip with several arguments")
            given = _keyword(call, "reason") or (call.args[0] if call and call.args else None)
            return "skip", _reason(given, "unconditional skip"), name
    if runxfail:  # the marks are off, but pytest still evaluates their conditions
        for name, call in named:
            if name == "xfail":
                _condition(call)
        return None
    for name, call in named:
        if name != "xfail":
            continue
        if _keyword(call, "raises") is not None:
            raise _Unknown("xfail(raises=...)")
        if not _condition(call):
            continue
        run, strict = _literal(_keyword(call, "run")), _literal(_keyword(call, "strict"))
        if (_keyword(call, "run") is not None and run is None) or (
            _keyword(call, "strict") is not None and strict is None
        ):
            raise _Unknown("run= or strict= that is not a literal")
        reason = _reason(_keyword(call, "reason"), "")
        if run is not None and run.value is False:
            return "xfail-notrun", reason, name
        outcome = "xfail-strict" if strict is not None and strict.value is True else "xfail"
        return outcome, reason, name
    return None


def _pytestmarks(body: Sequence[ast.stmt]) -> list[ast.expr]:
    """The marks the last ``pytestmark = ...`` of a module or class body applies;
    :class:`_Unknown` where ``pytestmark`` is set any other way (in a ``try`` block, by
    ``append``, ``+=``)."""
    marks: list[ast.expr] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # their own scopes
        plain = (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "pytestmark"
        )
        if plain:
            value = node.value  # type: ignore[union-attr]
            marks = list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
        elif any(
            (isinstance(sub, ast.Name) and sub.id == "pytestmark")
            or (isinstance(sub, ast.Attribute) and sub.attr == "pytestmark")
            for sub in ast.walk(node)
        ):
            raise _Unknown("pytestmark set another way")
    return marks


def _skip_call(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The body's first statement (after a docstring) when it is ``pytest.skip("...")``
    with one literal reason."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    if dotted(call.func) != "pytest.skip" or call.keywords or len(call.args) != 1:
        return None
    reason = _literal(call.args[0])
    return call if reason is not None and isinstance(reason.value, str) else None


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a statement may bind in its scope (assignments, imports, and definitions
    inside ``if`` / ``try`` / ``for`` / ``with`` blocks)."""
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, ast.alias):
            names.add((sub.asname or sub.name).split(".", 1)[0])
    return names


class _Scope:
    """A module's or class's definitions by name (the last one of each name: the one that
    runs) and the marks its ``pytestmark`` applies, computed once."""

    def __init__(self, body: Sequence[ast.stmt]):
        self.defs: dict[str, ast.stmt] = {}
        #: every name the body binds at its top level
        self.bound: set[str] = set()
        #: what failing.py reads of a module (set for modules, not classes)
        self.facts: ModuleFacts | None = None
        for node in body:
            names = _bound_names(node)
            self.bound |= names
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs[node.name] = node
                continue
            for name in names:  # a later binding of any kind: not known
                self.defs.pop(name, None)
        try:
            self.marks: list[ast.expr] | None = _pytestmarks(body)
        except _Unknown:
            self.marks = None
        self.children: dict[str, _Scope] = {}

    def child(self, node: ast.ClassDef) -> _Scope:
        if node.name not in self.children:
            self.children[node.name] = _Scope(node.body)
        return self.children[node.name]


def _is_mark_like(node: ast.expr) -> bool:
    """A decorator that is, or may be, a mark of the function's own."""
    name = dotted(node)
    return bool(_mark_name(node)[0]) or ".mark." in f".{name}" or "." not in name


def _uses_param_marks(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and _mark_name(deco)[0] == "parametrize":
            for node in ast.walk(deco):
                is_param = isinstance(node, ast.Call) and dotted(node.func).endswith("param")
                if is_param and _keyword(node, "marks") is not None:  # type: ignore[arg-type]
                    return True
    return False


def _marked(module: _Scope, names: list[str], runxfail: bool, pdb: bool) -> Marked | None:
    scopes, scope = [module], module
    chain: list[ast.ClassDef] = []
    for name in names[:-1]:
        node = scope.defs.get(name)
        if not isinstance(node, ast.ClassDef):
            return None
        if any(dotted(b) not in _PLAIN_BASES for b in node.bases) or node.keywords:
            raise _Unknown("marks may be inherited")
        chain.append(node)
        scope = scope.child(node)
        scopes.append(scope)
    func = scope.defs.get(names[-1]) if names else None
    if not isinstance(func, ast.FunctionDef):  # async tests need a plugin: not read
        return None
    if _uses_param_marks(func):
        raise _Unknown("pytest.param(..., marks=...)")
    marks: list[ast.expr] = list(reversed(func.decorator_list))
    for cls, body in zip(reversed(chain), reversed(scopes[1:]), strict=True):
        if body.marks is None:
            raise _Unknown("a class pytestmark not read")
        marks += body.marks + list(reversed(cls.decorator_list))  # decorators append
    if module.marks is None:
        raise _Unknown("the module's pytestmark not read")
    marks += module.marks
    if any(_mark_name(m)[0] == "unittest.skip" for m in marks) and not any(
        dotted(b) in ("TestCase", "unittest.TestCase") for c in chain for b in c.bases
    ):
        raise _Unknown("unittest.skip outside a TestCase")
    first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
    decided = _decide(marks, runxfail, pdb)
    if decided is not None and decided[0] == "skip":
        # pytest's summary drops the line of a skip mark the test has from a class or
        # module ``pytestmark`` when the function carries no mark of its own
        own = any(_is_mark_like(d) for d in func.decorator_list)
        line = 0 if decided[2] == "skip" and not own else first
        return Marked("skip", line, decided[1])
    call = _skip_call(func)
    if call is not None and (decided is None or decided[0] != "xfail-notrun"):
        # the call runs first in the test (after its setup; a test not run never gets there)
        return Marked("skip-call", call.lineno, call.args[0].value)  # type: ignore[attr-defined]
    if decided is None and module.facts is not None:  # facts: nothing else governs it
        setup = scope.defs.get("setUp")
        inherited = marks[len(func.decorator_list) :]
        failing = always_fails(func, chain, setup, module.facts, inherited)
        return None if failing is None else Marked("fail", *failing)
    if decided is None:
        return None
    return Marked(decided[0], first, decided[1])


def _compiles(text: str, path: str) -> bool:
    """Whether the module compiles, warnings as errors (what parses may still not compile:
    a ``__future__`` import after another, ``await`` outside an async function; a warning
    such as an invalid escape sequence is an error where the ini turns warnings into
    errors)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(text, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, Warning, RecursionError, MemoryError):
        return False
    return True


def marked_outcomes(
    text_of: Callable[[str], str | None],
    test_ids: Sequence[str],
    *,
    runxfail: bool = False,
    pdb: bool = False,
) -> dict[str, Marked]:
    """``{test id: Marked}`` for the tests whose marks fix their outcome (see the module);
    ids are ``path::[Class::]name[params]`` relative to the workspace. At most
    :data:`_MAX_IDS` ids are looked at; each file is parsed (a shared, cached tree) and
    indexed once. Never raises for what the files hold."""
    out: dict[str, Marked] = {}
    modules: dict[str, _Scope | None] = {}
    memo: dict[tuple[str, str], Marked | None] = {}
    for test in test_ids[:_MAX_IDS]:
        path, _, rest = test.partition("::")
        if not rest or not path.endswith(".py"):
            continue
        if path not in modules:
            text = text_of(path) or ""
            tree = parse_source(text, path)
            modules[path] = None if tree is None else _Scope(tree.body)
            if tree is not None and not (
                governed(text_of, path, module_words(tree)) or not _compiles(text, path)
            ):  # failing.py may read its tests (compiled last: the dearest check)
                modules[path].facts = ModuleFacts(tree, modules[path].bound)
        module = modules[path]
        if module is None:
            continue
        key = (path, rest.split("[", 1)[0])  # the parameters of one function share it
        if key not in memo:
            try:
                memo[key] = _marked(module, key[1].split("::"), runxfail, pdb)
            except Exception:  # _Unknown, RecursionError, anything the files provoke
                memo[key] = None
        decided = memo[key]
        if decided is not None:
            out[test] = decided
    return out


def apply_marks(status: str, marked: Marked) -> str:
    """The status a test shows when the model predicted ``status`` and its marks decided
    ``marked``: SKIPPED for a skip mark, and for a ``pytest.skip`` call unless the model
    says the test's setup errs; XFAIL for an xfail whatever the model said (a test is
    marked xfail because it fails: real runs of the held-out repositories show 35 with
    xfailed tests for 2 with xpassed ones, the model's pass for such a test is not informed
    by the mark, and its SKIPPED is the training labels' fold of XFAIL). A strict xfail
    that passes (FAILED "[XPASS(strict)]") or a fixture's skip is not predicted."""
    if marked.outcome == "skip-call":
        return status if status == "ERROR" else "SKIPPED"
    if marked.outcome == "fail":  # a setup error the model predicts comes first
        return status if status == "ERROR" else "FAILED"
    if marked.outcome == "skip":
        return "SKIPPED"
    # the model's SKIPPED is no skip of its own here: its labels fold XFAIL into SKIPPED
    return "XFAIL"


def summary_message(status: str, marked: Marked, pytest_version: str = "") -> str | None:
    """The message pytest's short summary gives a marked test shown as ``status`` (None:
    none of the marks'); a test not run says "[NOTRUN]", after "reason: " before pytest
    8.4."""
    from sweworld.transition.outcome.pytest_terminal import version_tuple

    if status != "XFAIL":
        return None
    if marked.outcome == "xfail-notrun":
        old = pytest_version and version_tuple(pytest_version) < (8, 4)
        return f"{'reason: ' if old else ''}[NOTRUN] {marked.reason}"
    return marked.reason or None


def command_marks(
    text_of: Callable[[str], str | None],
    test_ids: Sequence[str],
    options: Any,
    addopts: Sequence[str] = (),
) -> dict[str, Marked]:
    """:func:`marked_outcomes` for a pytest command whose options (a
    :class:`~sweworld.transition.facts.pytest_args.PytestOptions` or None) say whether
    ``--runxfail`` and ``--pdb`` are given, with ``addopts`` (the ini's ``addopts`` and
    ``$PYTEST_ADDOPTS``, as arguments); nothing with ``-p no:skipping`` (pytest does not
    evaluate the marks then)."""
    from sweworld.transition.facts.pytest_args import parse_pytest_args

    added = parse_pytest_args(list(addopts)) if addopts else None
    every = [o for o in (options, added) if o is not None]
    if any("no:skipping" in o.plugins for o in every):  # marks not evaluated
        return {}
    runxfail, pdb = any(o.runxfail for o in every), any(o.pdb for o in every)
    return marked_outcomes(text_of, test_ids, runxfail=runxfail, pdb=pdb)


def summary_details(
    statuses: Mapping[str, str], marked: Mapping[str, Marked], pytest_version: str = ""
) -> dict[str, dict[str, Any]]:
    """What :func:`~sweworld.transition.outcome.render.render_pytest` shows of the marked
    tests in its short summary: ``skips`` (line and reason of each skipped one) and
    ``messages`` (an xfail's reason, as ``pytest_version`` words it)."""
    shown = [(t, s) for t, s in statuses.items() if t in marked]
    return {
        "skips": {t: (marked[t].line, marked[t].reason) for t, s in shown if s == "SKIPPED"},
        "messages": {t: summary_message(s, marked[t], pytest_version) for t, s in shown},
    }
