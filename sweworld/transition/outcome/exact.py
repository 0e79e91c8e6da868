"""The outcome executor's exact answers: what Python or pytest does for certain, computed
from the workspace without the model (``info["route"] == "exact"`` or ``"informational"``).

* :func:`exact_answer`: a script that does not exist (exit 2, the interpreter's message),
  a script or ``-c`` program that does not compile (exit 1, its ``SyntaxError``);
* :func:`broken_import_answer`: a module the command imports does not compile;
* :func:`informational_answer`: pytest's ``--help`` / ``--version`` / ``--markers`` (exit
  0, no tests), and its fixture listings where the targets exist (exit 0);
* :func:`runner_absent_answer`: pytest in an environment that has none (SymPy's harness
  image): "No module named pytest" (exit 1) or "command not found" (exit 127); Python 2,
  which SWE-bench's images do not have (Python 3 only, ``python`` is Python 3): "command
  not found" (exit 127), until the session installs packages.

Each returns None where it does not apply, and records in ``info`` what it answered.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.transition.outcome.state import FileState

__all__ = [
    "broken_import_answer",
    "exact_answer",
    "informational_answer",
    "missing_target_answer",
    "runner_absent_answer",
]


def exact_answer(
    request: ExecutionRequest, kind: str, state: FileState, info: dict[str, Any]
) -> ExecutionResult | None:
    """The answers that are exact and cheap: a script that does not exist, a script or
    ``-c`` program that does not compile (the interpreter's own message)."""
    from sweworld.transition.facts import format_syntax_error, parse_command

    if kind not in ("python_script", "python_c", "sympy_test", "django_runtests"):
        return None
    parsed = parse_command(tuple(request.argv))
    if kind == "python_c":
        source, shown = parsed.code, "<string>"
    elif parsed.script and parsed.script != "-":
        where, source = state.sandbox_text(parsed.script, request.cwd)
        rel = state.relative(parsed.script, request.cwd)
        shown = f"/testbed/{rel}" if rel else posixpath.join(request.cwd, parsed.script)
        if source is None and where != "outside":
            info.update(route="exact", text_source="exact")
            message = f"python: can't open file {shown!r}: [Errno 2] No such file or directory\n"
            return ExecutionResult("", message, 2)
    else:
        return None
    if source is None:
        return None
    error, _ = format_syntax_error(source, shown)
    if error is None:
        return None
    info.update(route="exact", text_source="exact", exception=error.error_type)
    return ExecutionResult("", error.text, 1)


def broken_import_answer(
    step: Any, state: FileState, kind: str, info: dict[str, Any]
) -> ExecutionResult | None:
    """A module the command imports does not compile, and Python stops there (exact): a
    script or ``-c`` program that imports it (through its imports, nearest first) ends
    with the ``SyntaxError``, exit 1; pytest whose own package (``_pytest``, the
    repository's when it is pytest's) is the module, or is a module of pytest's package
    that it surely imports at start-up (a changed plugin of pytest's repository), cannot
    start, exit 1. A test module that does not compile is a collection error: the model decides
    those."""
    from sweworld.transition.facts import format_syntax_error

    if kind in ("python_script", "python_c"):
        broken = [p for p in step.unparsable if not p.startswith("<")]
    elif kind == "pytest":
        broken = [p for p in step.unparsable if "_pytest" in p.split("/")[:-1]]
        broken += [
            p
            for p in _runner_modules(state, step.changed_files, step.info.pytest)
            if p not in broken and _fails_to_parse(state, p)
        ]
    else:
        return None
    for rel in sorted(broken, key=lambda p: (step.reach.get(p, 0), p))[:5]:
        text = state.text(rel)
        error = format_syntax_error(text, f"/testbed/{rel}")[0] if text else None
        if error is None:
            continue
        info.update(route="exact", text_source="exact", exception=error.error_type,
                    reason=f"{rel} does not compile")  # fmt: skip
        return ExecutionResult("", "Traceback (most recent call last):\n" + error.text, 1)
    return None


def _runner_modules(state: FileState, changed: list[str], options: Any = None) -> list[str]:
    """The changed files that are modules pytest surely imports whenever it starts, on
    pytest's own repository (whose checkout is the runner): the plugins its configuration
    package names in ``essential_plugins`` / ``default_plugins`` and the modules that
    package imports, as the state's ``_pytest/config/__init__.py`` reads; less the plugins
    the command blocks (``-p no:NAME``; blocking ``cacheprovider`` blocks ``stepwise``)."""
    from sweworld.transition.outcome.features import scan_imports

    own = [p for p in changed if p.endswith(".py") and "_pytest" in p.split("/")[:2]]
    if not own:
        return []
    root = "src/_pytest/" if own[0].startswith("src/") else "_pytest/"
    config = state.text(f"{root}config/__init__.py") or ""
    names = set()
    for block in re.findall(r"^(?:essential|default)_plugins\s*=[^(]*\(([^)]*)\)", config, re.M):
        names.update(re.findall(r"[\"']([A-Za-z_]\w*)[\"']", block))
    names.update(
        m.split(".")[1]
        for m in scan_imports(f"{root}config/__init__.py", config)
        if m.startswith("_pytest.")
    )
    blocked = {p[3:] for p in getattr(options, "plugins", ()) if p.startswith("no:")}
    if "cacheprovider" in blocked:
        blocked.add("stepwise")
    names -= blocked
    started = {f"{root}{n}.py" for n in names} | {f"{root}{n}/__init__.py" for n in names}
    return [p for p in own if p in started]


def _fails_to_parse(state: FileState, rel: str) -> bool:
    """``rel`` does not compile (a leading byte-order mark is Python's, not an error)."""
    from sweworld.transition.outcome.programs import parse_source

    text = state.text(rel)
    return text is not None and parse_source(text.removeprefix("\ufeff"), rel) is None


def missing_target_answer(
    message: str, layout: dict[str, Any], task: Any, argv: list[str]
) -> ExecutionResult:
    """pytest given a file target that does not exist: its session header, no test run,
    and its usage error (``message``, worded as the task's release words it) on stderr,
    exit 4 (exact)."""
    from sweworld.transition.facts import parse_command
    from sweworld.transition.outcome.pytest_terminal import command_layout
    from sweworld.transition.outcome.render import render_pytest

    options = parse_command(tuple(argv)).pytest
    stdout = render_pytest({}, **{**command_layout(options, argv, task), **layout})
    return ExecutionResult(stdout, message.rstrip("\n") + "\n\n", 4)


#: pytest options that list what pytest knows instead of running tests: ``--markers``
#: exits 0 before collecting; the fixture listings collect (a target that does not exist
#: is exit 4) and exit 0 whatever a module's collection error
_MARKER_LISTING = frozenset({"--markers"})
_FIXTURE_LISTINGS = frozenset({"--fixtures", "--funcargs", "--fixtures-per-test"})


def _pytest_flags(argv: Sequence[str]) -> set[str]:
    return {a for a in argv if a.startswith("--") and "=" not in a}


def informational_answer(
    request: ExecutionRequest,
    kind: str,
    info: dict[str, Any],
    collected: FileState | None = None,
) -> ExecutionResult | None:
    """pytest's ``--help``, ``--version`` and ``--markers``: exit 0 without collecting a
    test; with ``collected`` (the state, once the command's targets are known to exist),
    the fixture listings (``--fixtures``, ``--fixtures-per-test``): exit 0, unless a
    changed ``conftest.py`` does not compile (pytest cannot start then). The text (which
    differs between versions) is not written. ``--setup-plan`` / ``--setup-only`` collect
    and can fail: the model decides those."""
    from sweworld.transition.facts import parse_command

    if kind != "pytest":
        return None
    if collected is not None and any(
        p.endswith("conftest.py") and _fails_to_parse(collected, p) for p in collected.changed
    ):
        return None
    options = parse_command(tuple(request.argv)).pytest
    if options is None:
        return None
    flags = _pytest_flags(request.argv)
    listing = flags & (_FIXTURE_LISTINGS if collected is not None else _MARKER_LISTING)
    if not (listing or (collected is None and (options.help or options.version))):
        return None
    info.update(route="informational", tests=0, text_source="none")
    return ExecutionResult("", "", 0)


#: a Python 2 interpreter named on its own (a path may name anything)
_PYTHON2 = re.compile(r"python2(\.\d+)?")


def runner_absent_answer(
    request: ExecutionRequest, kind: str, installed: bool, info: dict[str, Any]
) -> ExecutionResult | None:
    """pytest in a task environment known to have none (the harness image of a repository
    that runs another runner, :data:`~sweworld.tasks.swebench_specs.HARNESS_WITHOUT_PYTEST`)
    and that the session has not installed packages into (``installed``): the interpreter
    finds no module (``python -m pytest``: exit 1) or the shell no command (``pytest``:
    exit 127), as the recorded runs in SymPy's image show. ``python2`` (``python2.7``)
    before the session installs packages: the shell finds no command (exit 127)."""
    from sweworld.tasks.environment import task_environment
    from sweworld.transition.outcome.pytest_terminal import python_executable

    argv0 = request.argv[0] if request.argv else ""
    if _PYTHON2.fullmatch(argv0) and not installed:
        info.update(route="exact", text_source="exact", reason="no Python 2 in the environment")
        return ExecutionResult("", f"bash: line 1: {argv0}: command not found\n", 127)
    if kind != "pytest" or installed or request.task is None:
        return None
    try:
        if task_environment(request.task).pytest_installed:
            return None
    except Exception:  # a malformed task row: nothing is known
        return None
    info.update(route="exact", text_source="exact", tests=0,
                reason="the task's environment has no pytest")  # fmt: skip
    if posixpath.basename(argv0).startswith("python"):
        message = f"{python_executable(request.task, argv0)}: No module named pytest\n"
        return ExecutionResult("", message, 1)
    why = "No such file or directory" if "/" in argv0 else "command not found"
    return ExecutionResult("", f"bash: line 1: {argv0}: {why}\n", 127)
