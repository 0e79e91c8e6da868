""":func:`check_runner`: a prediction for a test runner must look like that runner's output
and end with one of that runner's exit codes.

Runners known here: pytest (``pytest``, ``python -m pytest``), Django's ``tests/runtests.py``
and SymPy's ``bin/test`` (recognised by the script's path and its source), and the Python
interpreter itself. What each prints, by exit code, was read from real runs:

- pytest exits 0..5 (ok, tests failed, interrupted, internal error, usage error, no tests)
  and prints its summary line (``== 3 passed in 0.1s ==``, ``3 passed in 0.1s`` with ``-q``)
  for 0, 1 and 5 unless told to be silent (``-qq``, ``-p no:terminal``); 2 says
  ``Interrupted`` or an error, 3 ``INTERNALERROR``, 4 an ``ERROR: ...`` / ``usage:`` line;
- Django's runner (unittest) prints ``Ran N tests`` then ``OK`` or ``FAILED (...)`` and
  exits 0 or 1 (2 for a usage error);
- SymPy's runner prints ``tests finished: ...`` and exits 0 or 1 (2 for a usage error);
- Python exits 0, 1 (an uncaught exception), 2 (a usage error), 120 (stdout could not be
  flushed) unless the program exits with its own code; a code of 128 or more means a signal
  (130 Ctrl-C, 137 killed, 139 segmentation fault, ...).

Killed processes (signal codes) may print anything, so no output shape is required of them.
Every check stays silent when what it needs is unknown (the script's source, the options).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from sweworld.transition.facts import Facts
from sweworld.transition.types import Prediction, WorkspaceView
from sweworld.transition.validate.pytest_output import parse_pytest_summary
from sweworld.transition.validate.records import EXCEPTION_LINE, Issue, last_line

#: Exit codes of a process killed by a signal, as a shell reports them (128 + signal):
#: HUP, INT, QUIT, ILL, TRAP, ABRT, BUS, FPE, KILL, USR1, SEGV, USR2, PIPE, ALRM, TERM,
#: XCPU, XFSZ.
SIGNAL_EXIT_CODES = frozenset(128 + s for s in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                                15, 24, 25))  # fmt: skip
PYTEST_EXIT_CODES = frozenset(range(6)) | SIGNAL_EXIT_CODES
UNITTEST_RUNNER_EXIT_CODES = frozenset((0, 1, 2)) | SIGNAL_EXIT_CODES
PYTHON_EXIT_CODES = frozenset((0, 1, 2, 120)) | SIGNAL_EXIT_CODES

_PYTHON_KINDS = ("python_script", "python_c", "python_stdin", "python_module")
# Source that may choose its own exit code (or run something that does).
_OWN_EXIT = re.compile(
    r"exit|quit\(|SystemExit|abort|main\(|subprocess|system\(|popen|spawn|exec|fork|call_command|"
    r"execute_from|runpy|import_module|__import__|signal|kill"
)
_DJANGO_RUNNER = re.compile(r"django\.test|DiscoverRunner|get_runner|django\.setup")
_SYMPY_RUNNER = re.compile(r"\bsympy\b")
_RAN = re.compile(r"^Ran \d+ tests? in [\d.]+s[ \t\r]*$", re.M)
_UNITTEST_OK = re.compile(r"^OK(?: \([^)\n]*\))?[ \t\r]*$", re.M)
_UNITTEST_FAILED = re.compile(r"^FAILED \([^)\n]*\)[ \t\r]*$", re.M)
_SYMPY_FINISHED = re.compile(r"tests finished: ")
# pytest's usage errors: "ERROR: file or directory not found: x", "ERROR: usage: ...",
# "pytest: error: unrecognized arguments: --x", "ImportError while loading conftest ...".
_USAGE = re.compile(
    r"^(?:ERROR: |usage: |[\w./ -]{1,200}: error: |ImportError while loading conftest )", re.M
)


def program_source(facts: Facts, request: Any, view: WorkspaceView | None) -> str | None:
    """The source of the Python program the command runs (``-c`` code, stdin, the script or
    the module's file), or None when it is not known."""
    info = facts.command
    if info.kind == "python_c":
        return info.code
    if info.kind == "python_stdin":
        data = getattr(request, "stdin", b"") or b""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if (
        info.kind in ("python_script", "python_module")
        and view is not None
        and facts.executed_files
    ):
        return view.read_text(facts.executed_files[0])
    return None


def runner_of(facts: Facts, request: Any = None, view: WorkspaceView | None = None) -> str | None:
    """``pytest``, ``django``, ``sympy``, ``python`` or None (not a Python command)."""
    info = facts.command
    if facts.kind == "pytest":
        return "pytest"
    if facts.kind not in _PYTHON_KINDS:
        return None
    script = posixpath.normpath(info.script or "") if info.kind == "python_script" else ""
    if script.endswith("runtests.py") or script == "bin/test" or script.endswith("/bin/test"):
        source = program_source(facts, request, view) or ""
        if script.endswith("runtests.py") and _DJANGO_RUNNER.search(source):
            return "django"
        if script.endswith("bin/test") and _SYMPY_RUNNER.search(source):
            return "sympy"
    return "python"


def check_runner(
    pred: Prediction,
    facts: Facts,
    request: Any = None,
    view: WorkspaceView | None = None,
    combined: str | None = None,
) -> list[Issue]:
    """The ways ``pred`` is not what the command's runner prints or exits with (empty when
    none is found, or when the runner is not one of those known here)."""
    runner = runner_of(facts, request, view)
    if runner is None or facts.exact is not None or facts.hint:
        return []
    code = pred.exit_code
    if not isinstance(code, int) or not 0 <= code <= 255:
        return []  # reported as exit_code_range
    if combined is None:
        combined = pred.stdout + "\n" + pred.stderr
    if runner == "pytest":
        return _check_pytest_runner(code, facts, request, view, combined)
    if runner in ("django", "sympy"):
        return _check_unittest_like(runner, code, combined)
    return _check_python_exit(code, facts, request, view)


def _ini_addopts(facts: Facts, view: WorkspaceView | None) -> str:
    """The ``addopts`` of the ini-file pytest would read (its configuration may make it
    quiet), as one string; "" when unknown."""
    options = facts.command.pytest
    if view is None or options is None:
        return ""
    from sweworld.transition.facts import Environment, Workspace
    from sweworld.transition.facts.pytest_config import determine_setup

    try:
        config = determine_setup(Workspace(view), options, facts.cwd, Environment())
    except (OSError, ValueError):
        return ""
    return " ".join(config.getargs("addopts"))


def _pytest_silenced(facts: Facts, request: Any, view: WorkspaceView | None) -> bool:
    options = facts.command.pytest
    variables = getattr(request, "env", None) or {}
    extra = variables.get("PYTEST_ADDOPTS", "") + " " + _ini_addopts(facts, view)
    if options is None:
        return True  # nothing known of its options
    quiet = sum(word.count("q") for word in extra.split() if re.fullmatch(r"-q+", word))
    quiet += extra.split().count("--quiet")
    return (
        options.verbosity - quiet <= -2
        or options.informational
        or options.help
        or options.version
        or "no:terminal" in options.plugins
        or "no:terminal" in extra
        or bool(options.unknown)
    )


def _check_pytest_runner(
    code: int, facts: Facts, request: Any, view: WorkspaceView | None, combined: str
) -> list[Issue]:
    if code == 127 and facts.command.module is None and "not found" in combined:
        return []  # a bare `pytest` in an environment without it: the shell's answer
    if code not in PYTEST_EXIT_CODES:
        return [
            Issue(
                "pytest_exit_code",
                f"pytest exits with 0..5 (or 128+N when killed by a signal), not {code}",
            )
        ]
    if code in SIGNAL_EXIT_CODES or _pytest_silenced(facts, request, view):
        return []
    summary = parse_pytest_summary(combined)
    missing = None
    if code in (0, 1, 5) and summary is None:
        if code == 1 and ("No module named pytest" in combined or _crashed(combined)):
            return []  # pytest is not installed, or crashed while importing
        missing = "pytest's summary line (e.g. '=== 3 passed in 0.12s ===')"
    elif code == 2 and not (
        "Interrupted" in combined
        or "KeyboardInterrupt" in combined
        or (summary is not None and summary.counts.get("error"))
        or _USAGE.search(combined)
    ):
        missing = "what interrupted the session ('Interrupted: 1 error during collection')"
    elif code == 3 and "INTERNALERROR" not in combined:
        missing = "the INTERNALERROR lines of an internal error"
    elif code == 4 and not _USAGE.search(combined):
        missing = "the usage error ('ERROR: file or directory not found: ...', 'usage: ...')"
    if missing:
        return [
            Issue(
                "not_runner_output",
                f"this is not pytest's output for exit code {code}: it lacks {missing}",
            )
        ]
    if code == 5 and summary is not None and (summary.ran or summary.bad):
        return [
            Issue(
                "pytest_exit_5_with_tests",
                f"the summary reports tests ({summary.line.strip('= ')}) but exit_code 5 means "
                "that no test ran",
            )
        ]
    if (
        code == 1
        and summary is not None
        and not summary.bad
        and not ("Required test coverage" in combined or "INTERNALERROR" in combined)
    ):
        return [
            Issue(
                "pytest_exit_1_without_failures",
                f"the summary reports no failure or error ({summary.line.strip('= ')}) but "
                "exit_code is 1 (pytest exits with 1 only when tests failed)",
            )
        ]
    return []


def _crashed(text: str) -> bool:
    """Whether ``text`` ends with an uncaught exception's traceback."""
    return "Traceback (most recent call last):" in text and bool(
        EXCEPTION_LINE.match(last_line(text) or "")
    )


def _check_unittest_like(runner: str, code: int, combined: str) -> list[Issue]:
    name = "Django's test runner" if runner == "django" else "SymPy's test runner"
    if code not in UNITTEST_RUNNER_EXIT_CODES:
        return [
            Issue(
                "runner_exit_code",
                f"{name} exits with 0 (passed), 1 (failed) or 2 (usage), not {code}",
            )
        ]
    if code in SIGNAL_EXIT_CODES:
        return []
    if runner == "django":
        finished = bool(_RAN.search(combined))
        ok = finished and bool(_UNITTEST_OK.search(combined))
        failed = bool(_UNITTEST_FAILED.search(combined))
        wanted = {0: "'Ran N tests' and 'OK'", 1: "'FAILED (...)' or a traceback"}
    else:
        finished = bool(_SYMPY_FINISHED.search(combined))
        ok = finished
        failed = finished or "DO *NOT* COMMIT" in combined
        wanted = {0: "'tests finished: N passed'", 1: "'tests finished: ...' or a traceback"}
    missing = None
    if code == 0 and not ok:
        missing = wanted[0]
    elif code == 1 and not failed and not _crashed(combined):
        missing = wanted[1]
    elif code == 2 and not re.search(r"usage:|error:", combined):
        missing = "the usage error"
    if missing:
        return [
            Issue(
                "not_runner_output",
                f"this is not {name}'s output for exit code {code}: it lacks {missing}",
            )
        ]
    return []


def _check_python_exit(
    code: int, facts: Facts, request: Any, view: WorkspaceView | None
) -> list[Issue]:
    if code in PYTHON_EXIT_CODES:
        return []
    source = program_source(facts, request, view)
    if source is None or _OWN_EXIT.search(source):
        return []  # the program may choose its exit code
    return [
        Issue(
            "python_exit_code",
            f"Python exits with 0, 1 (an uncaught exception) or 2 (usage), or 128+N when "
            f"killed by a signal; this program sets no exit code of its own, so not {code}",
        )
    ]
