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

__all__ = [
    "HARNESS_PYTHON_RELEASES",
    "header_versions",
    "render_django",
    "render_pytest",
    "render_sympy",
    "render_traceback",
    "render_unittest",
    "unittest_name",
]

_WIDTH = 80
_SUMMARY_ORDER = ("PASSED", "SKIPPED", "XFAIL", "ERROR", "FAILED")
_COUNT_WORDS = (
    ("FAILED", "failed"),
    ("PASSED", "passed"),
    ("SKIPPED", "skipped"),
)
_LETTER = {"PASSED": ".", "FAILED": "F", "ERROR": "E", "SKIPPED": "s"}

#: The Python release of each major.minor in the SWE-bench harness images, as their pytest
#: session headers print it (the shared agent runs' outputs).
HARNESS_PYTHON_RELEASES = {
    "3.6": "3.6.13",
    "3.7": "3.7.16",
    "3.8": "3.8.20",
    "3.9": "3.9.20",
    "3.11": "3.11.11",
}
#: What the header says when the task's environment does not tell.
DEFAULT_PYTHON, DEFAULT_PYTEST = "3.11.7", "8.3.3"


def header_versions(task: Any) -> tuple[str, str]:
    """(Python, pytest) versions for the session header of ``task``'s pytest runs: the
    full Python release when the task states it (a factory task runs on the host), else
    the harness image's release of the environment's major.minor; the pytest version the
    environment pins. Each falls back to the defaults above when unknown."""
    from sweworld.tasks.environment import task_environment

    if task is None:
        return DEFAULT_PYTHON, DEFAULT_PYTEST
    try:
        env = task_environment(task)
    except Exception:  # a malformed task row: the defaults
        return DEFAULT_PYTHON, DEFAULT_PYTEST
    python = env.python_full or HARNESS_PYTHON_RELEASES.get(env.python or "") or DEFAULT_PYTHON
    pytest_version = env.runner_version if env.test_runner == "pytest" else None
    if pytest_version is None and _task_repo(task) == "pytest-dev/pytest":
        # the runner is the repository itself, at the release the task names ("5.4"): the
        # header's layout follows it (the dev suffix, from git, is not known)
        pytest_version = str(_task_field(task, "version") or "") or None
    return python, pytest_version or DEFAULT_PYTEST


def _task_field(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def _task_repo(task: Any) -> str:
    return str(_task_field(task, "repo") or "").strip().lower()


def _version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``5.4.1.dev338+gc98bc4cd3``."""
    head = text.split(".")
    try:
        return int(head[0]), int(head[1]) if len(head) > 1 and head[1].isdigit() else 0
    except ValueError:
        return (0, 0)


def _header(
    python: str, pytest_version: str, rootdir: str, inifile: str | None,
    testpaths: Sequence[str],
) -> list[str]:  # fmt: skip
    """The session header as the version of pytest writes it: one ``rootdir`` line naming
    the ini-file (``inifile:`` before 6.0, ``configfile:`` after) and the testpaths used,
    or, from 7.3 on, a line for each."""
    config = posixpath.relpath(inifile, rootdir) if inifile else None
    version = _version(pytest_version)
    out = [_banner("test session starts"),
           f"platform linux -- Python {python}, pytest-{pytest_version}, pluggy-1.5.0"]  # fmt: skip
    if version >= (7, 3):
        out.append(f"rootdir: {rootdir}")
        out += [f"configfile: {config}"] if config else []
        out += [f"testpaths: {', '.join(testpaths)}"] if testpaths else []
        return out
    line = f"rootdir: {rootdir}"
    if config:
        line += f", {'inifile' if version < (6, 0) else 'configfile'}: {config}"
    if testpaths:
        line += f", testpaths: {', '.join(testpaths)}"
    return [*out, line]


def _progress_lines(
    by_file: Mapping[str, Sequence[str]], collected: int, quiet: bool, cut: bool
) -> list[str]:
    """pytest's progress lines without ``-v``, as its terminal reporter writes them: each
    file's letters after its path (with ``-q``: no paths, one stream of letters), a line
    ended with the percentage so far where the next letter would reach the edge, and the
    percentage right-aligned to column 79 when a file's line ends and at the end of the run.
    ``collected``: the tests the run set out to run (a run stopped early ends below 100%);
    ``cut``: the debugger stopped the run inside its last line (no percentage there)."""
    lines: list[str] = []
    line, done = "", 0

    def progress() -> str:
        return f" [{100 * done // max(collected, 1):>3}%]"

    def filled(text: str) -> str:
        return text + progress().rjust(_WIDTH - 1 - len(text))

    first = True
    for path, letters in by_file.items():
        if not quiet:  # a new file: the line before is filled, then the path
            if not first:
                lines.append(filled(line))
            line, first = f"{path} ", False
        for letter in letters:
            line += letter
            done += 1
            if done < collected and len(line) + len(" [100%]") + 1 >= _WIDTH:
                lines.append(line + progress())
                line = ""
    if by_file:
        lines.append(line if cut else filled(line))
    return lines


def _banner(text: str, fill: str = "=") -> str:
    """pytest's separator line: ``text`` between runs of ``fill`` as long as fit in 80
    columns, at least one on each side (a long test name overflows), one more on the right
    where there is room."""
    if not text:
        return fill * _WIDTH
    run = fill * max((_WIDTH - len(text) - 2) // 2, 1)
    line = f"{run} {text} {run}"
    return line + fill if len(line) < _WIDTH else line


def _summary_line(status: str, test: str, message: str | None) -> str:
    """A short-summary line: ``STATUS id - message``, the message cut with ``...`` so the
    line fits 80 columns, and left out when fewer than 6 columns are left (as pytest does
    off a CI machine)."""
    line = f"{status} {test}"
    room = _WIDTH - len(line)
    if message is None or room < 6:
        return line
    message = message.split("\n", 1)[0]
    if 3 + len(message) > room:
        message = message[: room - 6] + "..."
    return f"{line} - {message}"


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
    out = [_banner(name, "_"), ""]
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
        _banner("traceback", ">"),
        *section[1:],
        *_debugger_prompt(f"> {rootdir}/{path}({where}){func}()", failing),
    ]


def _debugger_prompt(frame: str, line: str) -> list[str]:
    """The debugger's entry and its prompt, answered by the end of stdin; ``frame`` and
    ``line`` (pdb's ``>`` and ``->`` lines) are left out when empty."""
    return [
        _banner("entering PDB", ">"),
        "",
        _banner("PDB post_mortem (IO-capturing turned off)", ">"),
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
        _banner(f"ERROR at setup of {name}", "_"),
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
    exitfirst: bool = False,
) -> str:
    """pytest's output for ``statuses`` (``{test id: PASSED|FAILED|ERROR|SKIPPED}``, in run
    order). ``report_chars``: the ``-r`` letters (``A`` lists every test);
    ``collection_errors``: files whose collection failed (an interrupted run);
    ``deselected``: tests collected but not selected (``-k``, ``-m``, ``--deselect``);
    ``setup_errors``: tests that error at setup on a fixture (a
    :class:`~sweworld.transition.outcome.fixtures.SetupError` each), shown in ``ERRORS``;
    ``debugger``: the run had ``--pdb`` and stopped at its last test, a failure, where the
    debugger quit (pytest's "Quitting debugger" exit); ``inifile``: the configuration file
    pytest read (a sandbox path), ``testpaths``: the ini's testpaths when they stood for the
    command's arguments, both named in the header as ``pytest_version`` writes them;
    ``collected``: the tests selected to run when the run stopped before the end (``-x``,
    ``--pdb``; default: those in ``statuses``); ``exitfirst``: ``-x`` (``--maxfail=1``),
    so a failure ends the run with pytest's "stopping after 1 failures"."""
    exceptions = exceptions or {}
    setup_errors = {t: e for t, e in (setup_errors or {}).items() if statuses.get(t) == "ERROR"}
    sources = sources or {}
    out: list[str] = []
    if not quiet:
        out += _header(python, pytest_version, rootdir, inifile, testpaths)
    n_err = len(collection_errors)
    selected = max(collected or 0, len(statuses))
    n_all = selected + deselected
    count_line = f"collected {n_all} item{'s' if n_all != 1 else ''}"
    if n_err:
        count_line += f" / {n_err} error{'s' if n_err != 1 else ''}"
    if deselected:
        count_line += f" / {deselected} deselected / {selected} selected"
    if not quiet:
        out += [count_line, ""]
    by_file: dict[str, list[str]] = {}
    for test, status in statuses.items():
        by_file.setdefault(test.split("::", 1)[0], []).append(_LETTER.get(status, "."))
    stopped = next(reversed(statuses), None) if debugger else None
    if stopped is not None and statuses[stopped] not in ("FAILED", "ERROR"):
        stopped = None
    failures = sum(v in ("FAILED", "ERROR") for v in statuses.values())
    halted = exitfirst and failures > 0 and not stopped  # -x: pytest stops the session
    # the debugger cuts the last line, and so does a stop before the last test
    cut = stopped is not None or (halted and len(statuses) < selected)
    out += _progress_lines(by_file, selected, quiet, cut=cut)
    if stopped in setup_errors:  # pytest's fixture lookup raised, inside pytest itself
        out += [_banner("traceback", ">"), *_setup_error_section(stopped, setup_errors[stopped],
                                                                 rootdir)[1:]]  # fmt: skip
        out += _debugger_prompt("", "")
    elif stopped:  # the run ends in the debugger, inside the progress line
        exc = exceptions.get(stopped, "AssertionError")
        source = sources.get(stopped.split("::")[0])
        out += _debugger_section(stopped, exc, source, rootdir)
    if by_file and not quiet:  # a blank line ends the run's lines (none with -q)
        out.append("")
    listed = {t: e for t, e in setup_errors.items() if t != stopped}  # not shown twice
    if collection_errors or listed:
        out.append(_banner("ERRORS"))
        for path in collection_errors:
            exc = exceptions.get(path, "ImportError")
            out += [_banner(f"ERROR collecting {path}", "_"), f"E   {exc}"]
        for test, error in listed.items():
            out += _setup_error_section(test, error, rootdir)
    failing = [t for t, s in statuses.items() if s in ("FAILED", "ERROR") and t not in setup_errors]
    if failing and not stopped:
        out.append(_banner("FAILURES"))
        for test in failing:
            out += _failure_section(
                test, exceptions.get(test, "AssertionError"), sources.get(test.split("::")[0])
            )
    chars = report_chars if report_chars else "fE"
    show_all = "A" in chars or "a" in chars
    if ("A" in chars or "P" in chars) and "PASSED" in statuses.values():
        out.append(_banner("PASSES"))  # -rP / -rA: the passed tests' captured output
    summary: list[str] = []
    for group in _SUMMARY_ORDER:
        wanted = (  # -ra: every outcome but the passed ones; -rA: every outcome
            (group == "PASSED" and ("A" in chars or "p" in chars.lower()))
            or (group != "PASSED" and show_all)
            or (group == "FAILED" and "f" in chars)
            or (group == "ERROR" and "E" in chars)
        )
        if not wanted:
            continue
        for test, status in statuses.items():
            if status != group:
                continue
            exc: str | None = exceptions.get(test, "AssertionError")
            if status not in ("FAILED", "ERROR") or test in setup_errors:
                exc = None  # pytest names a fixture error without a message
            summary.append(_summary_line(status, test, exc))
    summary += [f"ERROR {path}" for path in collection_errors]
    if summary:
        out += [_banner("short test summary info"), *summary]
    counts = {s: 0 for s, _ in _COUNT_WORDS}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    counts["ERROR"] = counts.get("ERROR", 0) + n_err
    parts = [f"{counts[s]} {w}" for s, w in _COUNT_WORDS if counts.get(s)]
    if deselected:  # pytest's order: failed, passed, skipped, deselected, ..., errors
        parts.append(f"{deselected} deselected")
    if counts["ERROR"]:
        parts.append(f"{counts['ERROR']} error{'s' if counts['ERROR'] != 1 else ''}")
    text = ", ".join(parts) if parts else "no tests ran"
    if collection_errors:
        out.append(
            _banner(f"Interrupted: {n_err} error{'s' if n_err != 1 else ''} during collection", "!")
        )
    elif stopped:
        out.append(_banner("_pytest.outcomes.Exit: Quitting debugger", "!"))
    elif halted:
        out.append(_banner(f"stopping after {failures} failures", "!"))
    out.append(_banner(f"{text} in {duration:.2f}s") if not quiet else f"{text} in {duration:.2f}s")
    return "\n".join(out) + "\n"


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
    out = [_banner("test process starts"), "", "ground types:       python", ""]
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
            out.append(f"{head:<{_WIDTH - 6}}[{'FAIL' if bad else 'OK'}]")
    failing = [(t, s) for t, s in statuses.items() if s in ("FAILED", "ERROR")]
    if failing:
        out.append("")
    for test, _status in failing:
        path, _, rest = test.partition("::")
        name = rest.split("::")[-1] or path
        out += [
            _banner(f"{path}:{name}", "_"),
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
    out += ["", _banner(f"tests finished: {', '.join(parts)}, in {duration:.2f} seconds")]
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
