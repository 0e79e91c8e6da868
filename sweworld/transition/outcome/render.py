"""Text from a predicted outcome, in the format of the real tool.

* :func:`render_pytest`: a pytest run (session header, collected count, per-file progress
  lines, a ``FAILURES`` section with each failing test's source lines and the predicted
  exception, the short test summary with ``-rA``-style lines when the command asked for
  them, and the final counts line). The summary lines are the ones SWE-bench's pytest
  parser reads (:func:`sweworld.execution.log_parsers.parse_pytest_log`), so a rendered log
  reads back to exactly the predicted statuses.
* :func:`render_traceback`: a Python traceback for a script that raises, with a real frame
  from the script when its source is known.

Nothing here decides anything: the outcome comes from the model.
"""

from __future__ import annotations

import ast
import posixpath
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import sweworld.pyast as pyast
from sweworld.execution.log_render import render_django_log
from sweworld.transition.outcome.fixtures import LISTED_FIXTURES
from sweworld.transition.outcome.pytest_terminal import (
    DEFAULT_PYTEST,
    DEFAULT_PYTHON,
    WIDTH,
    banner,
    progress_lines,
    session_header,
    summary_line,
    verbose_lines,
    version_tuple,
)

__all__ = [
    "render_django",
    "render_other_runner",
    "render_pytest",
    "render_sympy",
    "render_traceback",
    "render_unittest",
    "unittest_name",
]

_COUNT_WORDS = (
    ("FAILED", "failed"),
    ("PASSED", "passed"),
    ("SKIPPED", "skipped"),
)
#: after "deselected" in pytest's counts line (its order: failed, passed, skipped,
#: deselected, xfailed, xpassed, error)
_XCOUNT_WORDS = (
    ("XFAIL", "xfailed"),
    ("XPASS", "xpassed"),
)
_LETTER = {"PASSED": ".", "FAILED": "F", "ERROR": "E", "SKIPPED": "s", "XFAIL": "x", "XPASS": "X"}


def _test_source(source: str | None, test_id: str) -> tuple[list[str], int]:
    """The source lines of the test function of ``test_id`` (and its first line number).
    The module's tree is parsed once for all its failing tests (a shared, read-only tree)."""
    if not source:
        return [], 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pyast.parse_shared(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], 0
    names = test_id.split("[", 1)[0].split("::")[1:]  # a parameter id may hold "::"
    body: Sequence[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in names:
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == name
            ),
            None,
        )
        if node is None:
            return [], 0
        body = getattr(node, "body", [])
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [], 0
    lines = source.splitlines()
    start, end = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
    return lines[start - 1 : min(end, start + 40)], start


def _failure_section(test_id: str, exception: str, source: str | None) -> list[str]:
    base, bracket, params = test_id.partition("[")  # a parameter id may hold "::"
    name = ".".join(base.split("::")[1:]) + bracket + params  # pytest: Class.test[param]
    out = [banner(name, "_"), ""]
    lines, start = _test_source(source, test_id)
    fail_at = start
    if lines:
        # the failing line: the last assert (or the last line) of the test
        idx = max(
            (i for i, text in enumerate(lines) if text.strip().startswith("assert")),
            default=len(lines) - 1,
        )
        indent = len(lines[0]) - len(lines[0].lstrip())
        for i, text in enumerate(lines[: idx + 1]):
            prefix = ">" if i == idx else " "
            out.append(f"{prefix}   {text[indent:]}" if text.strip() else "")
        fail_at = start + idx
        out.append(f"E       {exception}")
    else:
        out.append(f"E       {exception}")
    out += ["", f"{test_id.split('::', 1)[0]}:{fail_at}: {exception}"]
    return out


def _debugger_section(test_id: str, exception: str, source: str | None, rootdir: str) -> list[str]:
    """What ``--pdb`` prints at the first failure when the debugger reads the end of its
    input at once (stdin is not a terminal): the traceback, the post-mortem prompt, and no
    ``FAILURES`` section after it (pytest quits at the prompt)."""
    section = _failure_section(test_id, exception, source)
    path = test_id.split("::", 1)[0]
    where = section[-1][len(path) + 1 :].partition(":")[0]  # "path:line: exc"
    failing = next((t[1:].strip() for t in section if t.startswith(">")), "")
    func = test_id.split("[", 1)[0].split("::")[-1]
    return [
        banner("traceback", ">"),
        *section[1:],
        *_debugger_prompt(f"> {rootdir}/{path}({where}){func}()", failing),
    ]


def _debugger_prompt(frame: str, line: str) -> list[str]:
    """The debugger's entry and its prompt, answered by the end of stdin; ``frame`` and
    ``line`` (pdb's ``>`` and ``->`` lines) are left out when empty."""
    return [
        banner("entering PDB", ">"),
        "",
        banner("PDB post_mortem (IO-capturing turned off)", ">"),
        *([frame] if frame else []),
        *([f"-> {line}"] if line else []),
        "(Pdb) ",
        "",
    ]


def _setup_error_section(test_id: str, error: Any, rootdir: str) -> list[str]:
    """pytest's ERRORS block of a test whose fixture cannot be resolved."""
    path, _, rest = test_id.partition("::")
    name = ".".join(rest.split("::")) if rest else path
    where = f"{rootdir}/{path}"
    return [
        banner(f"ERROR at setup of {name}", "_"),
        f"file {where}, line {error.line}",
        f"      {error.signature}",
        f"E       {error.message}",
        f">       available fixtures: {', '.join(LISTED_FIXTURES)}",
        ">       use 'pytest --fixtures [testpath]' for help on them.",
        "",
        f"{where}:{error.line}",
    ]


def render_pytest(
    statuses: Mapping[str, str],
    *,
    exceptions: Mapping[str, str] | None = None,
    setup_errors: Mapping[str, Any] | None = None,
    sources: Mapping[str, str | None] | None = None,
    report_chars: str = "",
    quiet: bool = False,
    python: str = DEFAULT_PYTHON,
    pytest_version: str = DEFAULT_PYTEST,
    rootdir: str = "/testbed",
    collection_errors: Sequence[str] = (),
    duration: float = 0.12,
    deselected: int = 0,
    debugger: bool = False,
    inifile: str | None = None,
    testpaths: Sequence[str] = (),
    collected: int | None = None,
    maxfail: int = 0,
    verbose: str | None = None,
    cachedir: bool = True,
    tb: str | None = None,
    quieter: bool = False,
    skips: Mapping[str, tuple[int, str]] | None = None,
    messages: Mapping[str, str | None] | None = None,
) -> str:
    """pytest's output for ``statuses`` (``{test id: PASSED|FAILED|ERROR|SKIPPED|XFAIL|
    XPASS}``, in run order; XFAIL and XPASS do not fail the run). ``report_chars``: the
    ``-r`` letters (``A`` lists every test);
    ``collection_errors``: files whose collection failed (an interrupted run);
    ``deselected``: tests collected but not selected (``-k``, ``-m``, ``--deselect``);
    ``setup_errors``: tests that error at setup on a fixture (a
    :class:`~sweworld.transition.outcome.fixtures.SetupError` each), shown in ``ERRORS``;
    ``debugger``: the run had ``--pdb`` and stopped at its last test, a failure, where the
    debugger quit (pytest's "Quitting debugger" exit); ``inifile``: the configuration file
    pytest read (a sandbox path), ``testpaths``: the ini's testpaths when they stood for the
    command's arguments, both named in the header as ``pytest_version`` writes them;
    ``collected``: the tests selected to run when the run stopped before the end (``-x``,
    ``--pdb``; default: those in ``statuses``); ``maxfail``: ``--maxfail`` (``-x``: 1; 0:
    none), so the N-th failure ends the run with pytest's "stopping after N failures";
    ``verbose``: ``-v``, with the interpreter's path its header names (a line per test),
    and its cache folder unless ``cachedir`` is False (``-p no:cacheprovider``); ``tb``:
    ``--tb`` (``no``: no traceback sections);
    ``quieter``: ``-qq`` (no counts line either); ``skips``: a skipped test's line and
    reason, which its short-summary line shows folded with equal ones (``SKIPPED [n]
    path:line: reason``); ``messages``: a test's short-summary message where it is not the
    failure's exception (an xfail's reason)."""
    exceptions = exceptions or {}
    setup_errors = {t: e for t, e in (setup_errors or {}).items() if statuses.get(t) == "ERROR"}
    sources = sources or {}
    out: list[str] = []
    verbose = None if quiet else verbose
    if not quiet:
        out += session_header(
            python, pytest_version, rootdir, inifile, testpaths, verbose, cachedir
        )
    n_err = len(collection_errors)
    selected = max(collected or 0, len(statuses))
    n_all = selected + deselected
    count_line = f"collected {n_all} item{'s' if n_all != 1 else ''}"
    if n_err:
        count_line += f" / {n_err} error{'s' if n_err != 1 else ''}"
    if deselected:
        count_line += f" / {deselected} deselected / {selected} selected"
    if not quiet:
        out += [f"collecting ... {count_line}" if verbose else count_line, ""]
    by_file: dict[str, list[str]] = {}
    for test, status in statuses.items():
        by_file.setdefault(test.split("::", 1)[0], []).append(_LETTER.get(status, "."))
    stopped = next(reversed(statuses), None) if debugger else None
    if stopped is not None and statuses[stopped] not in ("FAILED", "ERROR"):
        stopped = None
    failures = sum(v in ("FAILED", "ERROR") for v in statuses.values())
    halted = maxfail > 0 and failures >= maxfail and not stopped  # pytest stops the session
    # the debugger cuts the last line, and so does a stop before the last test (with -v the
    # test's own line is written whole first)
    if verbose:
        out += verbose_lines(statuses, selected, stopped is not None)
    else:
        cut = stopped is not None or (halted and len(statuses) < selected)
        out += progress_lines(by_file, selected, quiet, cut=cut)
    if quiet and not by_file:  # -q: a blank line where the run's letters would be
        out.append("")
    if stopped in setup_errors:  # pytest's fixture lookup raised, inside pytest itself
        out += [banner("traceback", ">"), *_setup_error_section(stopped, setup_errors[stopped],
                                                                 rootdir)[1:]]  # fmt: skip
        out += _debugger_prompt("", "")
    elif stopped:  # the run ends in the debugger, inside the progress line
        exc = exceptions.get(stopped, "AssertionError")
        source = sources.get(stopped.split("::")[0])
        out += _debugger_section(stopped, exc, source, rootdir)
    if by_file and not quiet:  # a blank line ends the run's lines (none with -q)
        out.append("")
    listed = {t: e for t, e in setup_errors.items() if t != stopped}  # not shown twice
    sections = tb != "no"  # --tb=no: no ERRORS, FAILURES or PASSES sections
    if sections and (collection_errors or listed):
        out.append(banner("ERRORS"))
        for path in collection_errors:
            exc = exceptions.get(path, "ImportError")
            out += [banner(f"ERROR collecting {path}", "_"), f"E   {exc}"]
        for test, error in listed.items():
            out += _setup_error_section(test, error, rootdir)
    failing = [t for t, s in statuses.items() if s in ("FAILED", "ERROR") and t not in setup_errors]
    if sections and failing and not stopped:
        out.append(banner("FAILURES"))
        for test in failing:
            out += _failure_section(
                test, exceptions.get(test, "AssertionError"), sources.get(test.split("::")[0])
            )
    # without -r: "fE" from pytest 5.4, no summary lines before
    chars = report_chars or ("fE" if version_tuple(pytest_version) >= (5, 4) else "")
    if sections and "P" in _report_letters(chars) and "PASSED" in statuses.values():
        out.append(banner("PASSES"))  # -rP / -rA: the passed tests' captured output
    summary: list[str] = []
    skips, messages = skips or {}, messages or {}
    for group in _summary_groups(chars):
        folded: dict[tuple[str, int, str], int] = {}
        for test, status in statuses.items():
            if status != group:
                continue
            if status == "SKIPPED" and test in skips:
                where = (test.split("::", 1)[0], *skips[test])
                folded[where] = folded.get(where, 0) + 1
                continue
            exc: str | None = exceptions.get(test, "AssertionError")
            if status not in ("FAILED", "ERROR") or test in setup_errors:
                exc = None  # pytest names a fixture error without a message
            message = messages.get(test)
            if status == "XFAIL" and message and version_tuple(pytest_version) < (7, 2):
                summary += [f"XFAIL {test}", f"  {message}"]  # the reason on a line of its own
                continue
            summary.append(summary_line(status, test, exc if message is None else message))
        summary += [
            f"SKIPPED [{n}] {p}{f':{line}' if line else ''}: {why or 'Skipped'}"
            for (p, line, why), n in folded.items()
        ]
    if "ERROR" in _summary_groups(chars):
        summary += [f"ERROR {path}" for path in collection_errors]
    if summary:
        out += [banner("short test summary info"), *summary]
    counts = {s: 0 for s, _ in _COUNT_WORDS}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    counts["ERROR"] = counts.get("ERROR", 0) + n_err
    parts = [f"{counts[s]} {w}" for s, w in _COUNT_WORDS if counts.get(s)]
    if deselected:  # pytest's order: failed, passed, skipped, deselected, ..., errors
        parts.append(f"{deselected} deselected")
    parts += [f"{counts[s]} {w}" for s, w in _XCOUNT_WORDS if counts.get(s)]
    if counts["ERROR"]:
        parts.append(f"{counts['ERROR']} error{'s' if counts['ERROR'] != 1 else ''}")
    text = ", ".join(parts) if parts else "no tests ran"
    if collection_errors:
        out.append(
            banner(f"Interrupted: {n_err} error{'s' if n_err != 1 else ''} during collection", "!")
        )
    elif stopped:
        out.append(banner("_pytest.outcomes.Exit: Quitting debugger", "!"))
    elif halted:
        out.append(banner(f"stopping after {failures} failures", "!"))
    if not quieter:  # -qq: no counts line
        final = f"{text} in {duration:.2f}s"
        out.append(final if quiet else banner(final))
    return "\n".join(out) + "\n"


def _report_letters(chars: str) -> str:
    """The ``-r`` letters as pytest reads them: ``a`` sets ``sxXEf`` (every outcome but the
    passed ones), ``A`` sets ``PpsxXEf``, ``N`` sets none, the old upper-case ``F`` / ``S``
    stand for ``f`` / ``s``; each once."""
    letters = ""
    for c in chars:
        c = {"F": "f", "S": "s"}.get(c, c)
        if c == "a":
            letters = "sxXEf"
        elif c == "A":
            letters = "PpsxXEf"
        elif c == "N":
            letters = ""
        elif c not in letters:
            letters += c
    return letters


def _summary_groups(chars: str) -> list[str]:
    """The statuses the short summary lists, in the order of the ``-r`` letters
    (:func:`_report_letters`; ``P`` is the PASSES section, not summary lines)."""
    groups = {"f": "FAILED", "E": "ERROR", "s": "SKIPPED", "x": "XFAIL", "X": "XPASS",
              "p": "PASSED"}  # fmt: skip
    return [groups[c] for c in _report_letters(chars) if c in groups]


def unittest_name(test_id: str) -> str:
    """unittest's name of a pytest id, as Django's runner and ``-v`` print it:
    ``tests/app/test_x.py::Case::test_y`` -> ``test_y (app.test_x.Case)`` (``root`` stripped
    by the caller: Django's labels are relative to its ``tests`` folder)."""
    path, _, rest = test_id.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    module = module.replace("/", ".")
    parts = rest.split("::") if rest else []
    method = parts[-1] if parts else module
    owner = ".".join([module, *parts[:-1]])
    return f"{method} ({owner})"


def render_django(statuses: Mapping[str, str], root: str = "tests/") -> str:
    """Django's ``runtests.py --verbosity 2`` output for ``statuses`` keyed by pytest ids
    (named as Django names them, relative to ``root``; the shared log renderer's format,
    which SWE-bench's Django parser reads back)."""
    named = {
        unittest_name(t[len(root) :] if root and t.startswith(root) else t): s
        for t, s in statuses.items()
    }
    return render_django_log(named)


def render_unittest(
    statuses: Mapping[str, str],
    *,
    verbose: bool = False,
    exceptions: Mapping[str, str] | None = None,
    duration: float = 0.001,
) -> str:
    """``python -m unittest``'s output (it writes to stderr) for ``statuses`` keyed by pytest
    ids: a dot line (or one ``name ... ok`` line per test with ``-v``), a section per
    failure, ``Ran N tests`` and ``OK`` / ``FAILED (failures=.., errors=..)``."""
    exceptions = exceptions or {}
    words = {"PASSED": "ok", "FAILED": "FAIL", "ERROR": "ERROR", "SKIPPED": "skipped ''"}
    letters = {"PASSED": ".", "FAILED": "F", "ERROR": "E", "SKIPPED": "s"}
    out: list[str] = []
    if verbose:
        out += [f"{unittest_name(t)} ... {words.get(s, 'ok')}" for t, s in statuses.items()]
    else:
        out.append("".join(letters.get(s, ".") for s in statuses.values()))
    for test, status in statuses.items():
        if status not in ("FAILED", "ERROR"):
            continue
        path = test.partition("::")[0]
        method = test.split("::")[-1]
        exc = exceptions.get(test, "AssertionError")
        out += [
            "",
            "=" * 70,
            f"{'FAIL' if status == 'FAILED' else 'ERROR'}: {unittest_name(test)}",
            "-" * 70,
            "Traceback (most recent call last):",
            f'  File "/testbed/{path}", line 1, in {method}',
            exc,
        ]
    failures = sum(s == "FAILED" for s in statuses.values())
    errors = sum(s == "ERROR" for s in statuses.values())
    skipped = sum(s == "SKIPPED" for s in statuses.values())
    n = len(statuses)
    out += ["", "-" * 70, f"Ran {n} test{'s' if n != 1 else ''} in {duration:.3f}s", ""]
    details = [f"{w}={c}" for w, c in (("failures", failures), ("errors", errors)) if c]
    details += [f"skipped={skipped}"] if skipped else []
    verdict = "FAILED" if failures or errors else "OK"
    out.append(f"{verdict} ({', '.join(details)})" if details else verdict)
    return "\n".join(out) + "\n"


def render_sympy(
    statuses: Mapping[str, str],
    *,
    verbose: bool = False,
    exceptions: Mapping[str, str] | None = None,
    duration: float = 0.05,
) -> str:
    """SymPy's ``bin/test`` output for ``statuses`` keyed by pytest ids: per file a line of
    result letters and ``[OK]`` / ``[FAIL]`` (one ``name ok|F|E`` line per test with
    ``--verbose``), a ``path:name`` header and traceback per failure, the ``tests finished``
    line, and ``DO *NOT* COMMIT!`` after a failure. SWE-bench's SymPy parser reads the
    failures (both forms) and, in the verbose form, the passes back."""
    exceptions = exceptions or {}
    letter = {"PASSED": ".", "FAILED": "F", "ERROR": "E", "SKIPPED": "s"}
    word = {"PASSED": "ok", "FAILED": "F", "ERROR": "E", "SKIPPED": "s"}
    out = [banner("test process starts"), "", "ground types:       python", ""]
    by_file: dict[str, list[tuple[str, str]]] = {}
    for test, status in statuses.items():
        path, _, rest = test.partition("::")
        by_file.setdefault(path, []).append((rest.split("::")[-1] or path, status))
    for path, items in by_file.items():
        bad = any(s in ("FAILED", "ERROR") for _, s in items)
        if verbose:
            out.append(f"{path}[{len(items)}] ")
            out += [f"{name} {word.get(s, 'ok')}" for name, s in items]
        else:
            head = f"{path}[{len(items)}] {''.join(letter.get(s, '.') for _, s in items)}"
            out.append(f"{head:<{WIDTH - 6}}[{'FAIL' if bad else 'OK'}]")
    failing = [(t, s) for t, s in statuses.items() if s in ("FAILED", "ERROR")]
    if failing:
        out.append("")
    for test, _status in failing:
        path, _, rest = test.partition("::")
        name = rest.split("::")[-1] or path
        out += [
            banner(f"{path}:{name}", "_"),
            "Traceback (most recent call last):",
            f'  File "/testbed/{path}", line 1, in {name}',
            exceptions.get(test, "AssertionError"),
        ]
    counts = (
        ("PASSED", "passed"),
        ("FAILED", "failed"),
        ("SKIPPED", "skipped"),
        ("ERROR", "exceptions"),
    )
    parts = [f"{n} {w}" for s, w in counts if (n := sum(v == s for v in statuses.values()))]
    out += ["", banner(f"tests finished: {', '.join(parts)}, in {duration:.2f} seconds")]
    if failing:
        out.append("DO *NOT* COMMIT!")
    return "\n".join(out) + "\n"


def _frame_line(source: str | None) -> tuple[int, str]:
    """The line of a script a predicted exception is shown at: its last top-level
    statement that calls something (the last statement when none does)."""
    if not source:
        return 1, ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 1, ""
    candidates = [n for n in tree.body if any(isinstance(c, ast.Call) for c in ast.walk(n))]
    node = (candidates or tree.body or [None])[-1]
    if node is None:
        return 1, ""
    lines = source.splitlines()
    return node.lineno, lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""


def render_other_runner(
    kind: str,
    argv: Sequence[str],
    script: str | None,
    statuses: Mapping[str, str],
    exception: str,
) -> tuple[str, str]:
    """``(stdout, stderr)`` of Django's (``django_runtests``), unittest's (``unittest``) or
    SymPy's (``sympy_test``) run of ``argv`` with ``statuses``; a failure shows
    ``exception``. Django and unittest report on stderr, SymPy's runner on stdout."""
    verbose = any(a in ("-v", "--verbose") or a.startswith("--verbosity") for a in argv)
    exceptions = dict.fromkeys(statuses, exception)
    if kind == "django_runtests":
        root = posixpath.dirname(posixpath.normpath(script or "tests/runtests.py"))
        return "", render_django(statuses, root=f"{root}/" if root else "")
    if kind == "unittest":
        return "", render_unittest(statuses, verbose=verbose, exceptions=exceptions)
    return render_sympy(statuses, verbose=verbose, exceptions=exceptions), ""


def render_traceback(
    exception: str, *, script: str = "", source: str | None = None, message: str = ""
) -> str:
    """A Python traceback of ``exception`` raised by ``script`` (``-c`` for ``python -c``,
    whose frame CPython names ``<string>``)."""
    filename = "<string>" if script in ("", "-c") else script
    if script == "-":
        filename = "<stdin>"
    line, text = _frame_line(source)
    out = ["Traceback (most recent call last):", f'  File "{filename}", line {line}, in <module>']
    if text and not filename.startswith("<"):
        out.append(f"    {text}")
    out.append(f"{exception}: {message}" if message else exception)
    return "\n".join(out) + "\n"


def script_path(script: str, cwd: str) -> str:
    """The path a traceback names for a script run from ``cwd`` (absolute since 3.9)."""
    return posixpath.normpath(posixpath.join(cwd, script))
