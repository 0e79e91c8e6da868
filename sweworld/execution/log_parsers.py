"""SWE-bench's log parsers: a test log -> ``{test id: status}``, read as the harness reads it.

One parser per harness parser (:data:`PARSERS`), chosen by repository
(:data:`MAP_REPO_TO_PARSER`), and the harness's reading of a whole eval log
(:func:`parse_eval_log`). The parsers reproduce the SWE-bench harness 5.0
(``swebench/harness/log_parsers/python.py`` and ``grading.get_logs_eval``), quirks included,
because the ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` ids of the datasets were produced by them:
a pytest id is the first whitespace-separated token after the status word, so
``PASSED t.py::test_x[multi-line assert]`` yields ``t.py::test_x[multi-line``, which is also
how SWE-bench lists that test. ``tests/execution/test_harness_parity.py`` compares every
parser with the installed harness on real logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from enum import Enum

__all__ = [
    "END_TEST_OUTPUT",
    "MAP_REPO_TO_PARSER",
    "PARSERS",
    "RUN_FAILURE_MARKERS",
    "START_TEST_OUTPUT",
    "SUITE_RAN",
    "TEST_EXIT_CODE",
    "TestStatus",
    "parse_django_log",
    "parse_eval_log",
    "parse_log",
    "parse_matplotlib_log",
    "parse_pytest_log",
    "parse_pytest_options_log",
    "parse_pytest_v2_log",
    "parse_seaborn_log",
    "parse_sympy_log",
    "parse_test_exit_code",
    "parser_name",
]


class TestStatus(str, Enum):
    """The statuses SWE-bench's parsers assign (``XPASS`` is not one of them)."""

    __test__ = False  # not a pytest test class, whatever its name says

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


# Markers the harness's eval script and runner write into the test log.
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
RUN_FAILURE_MARKERS: tuple[str, ...] = (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)

# The harness's evidence that a runner executed although no test status was read (its
# ``SUITE_RAN``; every count non-zero). Only JavaScript runners print these lines. Use it as
# the harness does, for whether ``.search`` finds anything: that answer is the harness's on
# every text, in time linear in the text. The harness's pattern is quadratic on a long run of
# digits (``[1-9]\d* passing`` restarts in every digit and scans to the end of the run), so
# such a count is matched only from the start of its run of digits, up to its first non-zero
# digit (``(?<!\d)(?>\d*?[1-9])``); digit and space runs are possessive (none is followed by
# what it matches), and trailing ``\d*`` that cannot change whether there is a match are
# left out. A match's span may therefore differ from the harness's.
SUITE_RAN = re.compile(
    r"Executed [1-9]\d*+ of \d"
    r"|TOTAL: [1-9]\d*+ (?:SUCCESS|FAILED)"
    r"|(?<!\d)(?>\d*?[1-9])\d*+ passing"
    r"|Tests:\s++[1-9]"
    r"|Test Suites:\s++(?:\d++ \w++, )*[1-9]\d*+ total"
    r"|^# tests [1-9]"
    r"|(?<!\d)(?>\d*?[1-9])\d*+ specs?, \d++ failure"
    r"|': ok$",
    re.M,
)
_TEST_EXIT_CODE_RE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")

_STATUS_WORDS: tuple[str, ...] = tuple(s.value for s in TestStatus)
_SKIP_SUMMARY_COUNT = re.compile(r"^\[\d+\]$")


def _status_first(line: str) -> tuple[str, str] | None:
    """``STATUS <id> ...`` -> (id, status token), as the harness's pytest parser reads it.

    The line must start (unindented) with a status word; on a FAILED line every `` - `` is
    replaced by a space first (the ``- message`` suffix); the id is the second
    whitespace-separated token and the status the first token as written. pytest's
    ``SKIPPED [1] file.py:3: reason`` summary names no test and is not read (the harness's
    ``_is_skip_summary``).
    """
    if not line.startswith(_STATUS_WORDS):
        return None
    if line.startswith(TestStatus.FAILED.value):
        line = line.replace(" - ", " ")
    tokens = line.split()
    if len(tokens) < 2:
        return None
    if tokens[0] == TestStatus.SKIPPED.value and _SKIP_SUMMARY_COUNT.match(tokens[1]):
        return None
    return tokens[1], tokens[0]


def parse_pytest_log(log: str) -> dict[str, str]:
    """A ``pytest -rA`` log -> ``{test id: status}`` (SWE-bench's ``parse_log_pytest``).

    Only lines starting with ``PASSED``/``FAILED``/``SKIPPED``/``ERROR``/``XFAIL`` count (the
    short test summary); ``XPASS`` lines and ``<id> PASSED`` progress lines are ignored. A
    later line for the same id wins. Ids are cut at the first whitespace, like the harness
    (and the datasets) cut them; ``SKIPPED [1] file.py:3: reason`` records nothing.
    """
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        parsed = _status_first(line)
        if parsed is not None:
            statuses[parsed[0]] = parsed[1]
    return statuses


def _normalize_option_id(test_id: str) -> str:
    r"""The harness's ``(.*?)\[(.*)\]`` reading of an id, with ``str.find``/``rfind``.

    The pattern matches when a ``[`` precedes a ``]`` (an id has no newline); the head is
    what precedes the first ``[``, the option what lies between it and the last ``]``. The
    regex itself is cubic in a token of ``[`` without ``]`` (each start, each ``[``, each
    backtracking step); these string searches read the id twice.
    """
    opening = test_id.find("[")
    closing = test_id.rfind("]")
    if opening < 0 or closing < opening:
        return test_id
    head, option = test_id[:opening], test_id[opening + 1 : closing]
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        # An absolute path parameter: keep only its last component (paths differ per machine).
        option = "/" + option.rsplit("/", 1)[-1]
    return f"{head}[{option}]"


def parse_pytest_options_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_pytest_options`` (requests, pylint, pydicom).

    As :func:`parse_pytest_log`, then a parameter that is an absolute path
    (``test_x[/tmp/a/b.txt]``) is reduced to its last component (``test_x[/b.txt]``), and
    anything after the last ``]`` is dropped.
    """
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        parsed = _status_first(line)
        if parsed is not None:
            statuses[_normalize_option_id(parsed[0])] = parsed[1]
    return statuses


_V2_COLOR_RE = re.compile(r"\[(\d+)m")
_V2_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def parse_pytest_v2_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_pytest_v2`` (astropy, scikit-learn, sphinx).

    Colour codes are stripped the harness's way (``[<digits>m`` removed, then every control
    character ``\\x01``-``\\x1f``, tabs included). Then, per line: a line starting with a
    status word maps the rest of the line to it (a FAILED line cut at its first `` - ``, the
    message; ``SKIPPED [1] ...`` summaries are not read); otherwise a line ending with a
    status word maps everything before it to it (``tests/t.py::test_x PASSED``, older
    pytest's verbose lines).
    """
    statuses: dict[str, str] = {}
    for raw in log.split("\n"):
        line = _V2_COLOR_RE.sub("", raw).translate(_V2_CONTROL)
        if line.startswith(_STATUS_WORDS):
            if line.startswith(TestStatus.FAILED.value):
                line = line.split(" - ", 1)[0]
            tokens = line.split()
            if len(tokens) >= 2 and not (
                tokens[0] == TestStatus.SKIPPED.value and _SKIP_SUMMARY_COUNT.match(tokens[1])
            ):
                statuses[" ".join(tokens[1:])] = tokens[0]
        elif line.endswith(_STATUS_WORDS):
            tokens = line.split()
            if len(tokens) >= 2:
                statuses[" ".join(tokens[:-1])] = tokens[-1]
    return statuses


def parse_matplotlib_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_matplotlib``: :func:`parse_pytest_log` after replacing
    ``MouseButton.LEFT`` / ``MouseButton.RIGHT`` by ``1`` / ``3`` (enum reprs differ between
    matplotlib versions)."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        line = line.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3")
        parsed = _status_first(line)
        if parsed is not None:
            statuses[parsed[0]] = parsed[1]
    return statuses


def parse_seaborn_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_seaborn``: only PASSED and FAILED are read.

    ``FAILED <id>`` (no `` - `` handling), ``<id> PASSED ...`` and ``PASSED <id>``. SKIPPED,
    ERROR and XFAIL lines are ignored (those tests are missing, hence failed). A line on
    which the harness would raise (a bare ``FAILED``) is skipped.
    """
    passed, failed = TestStatus.PASSED.value, TestStatus.FAILED.value
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        tokens = line.split()
        if line.startswith(failed):
            if len(tokens) >= 2:
                statuses[tokens[1]] = failed
        elif f" {passed} " in line:
            if len(tokens) >= 2 and tokens[1] == passed:
                statuses[tokens[0]] = passed
        elif line.startswith(passed) and len(tokens) >= 2:
            statuses[tokens[1]] = passed
    return statuses


def _sympy_failure_headers(log: str) -> list[str]:
    r"""The ``path.py:name`` of every match of the harness's ``(_*) (.*)\.py:(.*) (_*)``.

    Read per line (the pattern cannot cross a newline, and once it matched, nothing is left
    on its line that could start another match). On a line, the match starts at the first
    space (with the underscores before it), exists when a ``.py:`` follows that space and a
    space follows the ``.py:``, and then reads, greedily, the last such ``.py:`` and the
    line's last space: ``path`` lies between the first space and that ``.py:``, ``name``
    between it and the last space. The regex rescans the rest of the line from every
    start and backtracks over it (quadratic in a line of ``_`` or spaces); this reads each
    line a fixed number of times.
    """
    headers = []
    for line in log.split("\n"):
        if ".py:" not in line:
            continue
        first_space = line.find(" ")
        if first_space < 0:
            continue
        last_space = line.rfind(" ")
        module_end = line.rfind(".py:", first_space + 1, last_space)
        if module_end < 0:
            continue
        headers.append(
            f"{line[first_space + 1 : module_end]}.py:{line[module_end + 4 : last_space]}"
        )
    return headers


def parse_sympy_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_sympy`` (``bin/test -C --verbose``).

    Failure headers (``____ sympy/x/tests/test_y.py:test_z ____``) give ``path.py:name``
    FAILED; then each stripped line starting with ``test_`` and ending with `` ok`` / `` F``
    / `` E`` gives its first token PASSED / FAILED / ERROR (skips ``s``, expected failures
    ``f`` and the rest are not read).
    """
    statuses: dict[str, str] = {}
    for header in _sympy_failure_headers(log):
        statuses[header] = TestStatus.FAILED.value
    for raw in log.split("\n"):
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        name = line.split()[0]
        if line.endswith(" E"):
            statuses[name] = TestStatus.ERROR.value
        if line.endswith(" F"):
            statuses[name] = TestStatus.FAILED.value
        if line.endswith(" ok"):
            statuses[name] = TestStatus.PASSED.value
    return statuses


_DJANGO_PASS_SUFFIXES = (" ... ok", " ... OK", " ...  OK")
_DJANGO_VERSION_TEST = "--version is equivalent to version"
# Django's runner sometimes prints a long message between "<test> ..." and "ok". The harness
# reads those tests with three MULTILINE regexes, ``^(.*?)\s\.\.\.\s<message>\nok$``:
_DJANGO_TESTING = "Testing against Django installed in "  # ((?s:.*?))\ silenced\)\.\nok$
_DJANGO_TESTING_END = " silenced).\nok"
_DJANGO_SERVER_ERROR = "Internal Server Error: /"  # (.*)\/\nok$
_DJANGO_NO_ISSUES = "System check identified no issues (0 silenced)"  # \nok$


def _is_django_separator(log: str, at: int) -> bool:
    r"""Whether ``log[at:at + 5]`` matches ``\s\.\.\.\s`` (``str.isspace`` is ``\s``)."""
    return at >= 0 and log[at].isspace() and log.startswith("...", at + 1) and log[at + 4].isspace()


def _ends_line_with_ok(log: str, at: int) -> bool:
    """Whether ``log[at:]`` starts with ``\nok`` followed by ``$`` (end or newline)."""
    return log.startswith("\nok", at) and (at + 3 == len(log) or log[at + 3] == "\n")


def _django_interrupted(log: str, message: str) -> list[str]:
    r"""Group 1 of the matches of one of the harness's interrupted-test regexes, in order.

    ``re.finditer`` tries every line start at or after the end of its last match; from a
    line start ``(.*?)`` stops at the first ``\s...\s<message>`` (the separator's
    whitespace may be the line's newline) after which the rest of the pattern matches. Here
    the occurrences of ``message`` are visited once, in order, each tried in constant
    amortized time: the line start before it, the next newline and the next end of the
    ``Testing against Django`` message are found by searches that only move forward. The
    regexes rescan to the end of the log from every candidate line (quadratic in lines).
    """
    names: list[str] = []
    resume = 0  # re.finditer's position: the end of the last match
    scanned, last_newline = 0, -1  # log[:scanned] searched: its last newline
    next_newline = -1  # the first newline at or after the last searched position
    next_end = -1  # the first " silenced).\nok$" at or after the last searched position
    for found in _occurrences(log, message):
        separator = found - 5
        if not _is_django_separator(log, separator):
            continue
        newline = log.rfind("\n", scanned, separator)
        if newline >= 0:
            last_newline = newline
        scanned = separator
        line_start = last_newline + 1
        if line_start < resume:
            continue
        rest = found + len(message)
        if message == _DJANGO_TESTING:
            if next_end < rest:
                next_end = log.find(_DJANGO_TESTING_END, rest)
                while next_end >= 0 and not _ends_line_with_ok(log, next_end + 11):
                    next_end = log.find(_DJANGO_TESTING_END, next_end + 1)
                if next_end < 0:
                    break  # no end after this candidate: none after later ones either
            end = next_end + len(_DJANGO_TESTING_END)
        elif message == _DJANGO_SERVER_ERROR:
            if next_newline < rest:
                next_newline = log.find("\n", rest)
                if next_newline < 0:
                    break
            if next_newline <= rest or log[next_newline - 1] != "/":
                continue
            if not _ends_line_with_ok(log, next_newline):
                continue
            end = next_newline + 3
        else:
            if not _ends_line_with_ok(log, rest):
                continue
            end = rest + 3
        names.append(log[line_start:separator])
        resume = end
    return names


def _occurrences(text: str, needle: str) -> Iterator[int]:
    """The start of every occurrence of ``needle`` in ``text``, in order."""
    found = text.find(needle)
    while found >= 0:
        yield found
        found = text.find(needle, found + 1)


def parse_django_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_django`` (``./tests/runtests.py --verbosity 2``).

    Per stripped line: ``<test> ... ok`` PASSED, ``<test> ... skipped ...`` SKIPPED,
    ``<test> ... FAIL`` FAILED, ``<test> ... ERROR`` ERROR, ``FAIL: x`` / ``ERROR: x``
    FAILED / ERROR for the first token ``x``, and a line starting with ``ok`` marks the
    last ``<test> ...`` seen as PASSED (output printed between). The test name is whatever
    precedes `` ... ``: ``test_x (module.Class)``, or the first docstring line when the
    test has one. ``expected failure`` / ``unexpected success`` are not read.
    """
    passed = TestStatus.PASSED.value
    statuses: dict[str, str] = {}
    previous: str | None = None
    for raw in log.split("\n"):
        line = raw.strip()
        if not line:
            continue  # (nothing below reads an empty line)
        if _DJANGO_VERSION_TEST in line:
            statuses[_DJANGO_VERSION_TEST] = passed
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in _DJANGO_PASS_SUFFIXES:
            if line.endswith(suffix):
                # Special case of the harness (django__django-7188: migration output on the
                # same line as the test).
                if line.startswith("Applying sites.0002_alter_domain_unique...test_no_migrations"):
                    line = line.split("...", 1)[-1].strip()
                statuses[line.rsplit(suffix, 1)[0]] = passed
                break
        if " ... skipped" in line:
            statuses[line.split(" ... skipped")[0]] = TestStatus.SKIPPED.value
        if line.endswith(" ... FAIL"):
            statuses[line.split(" ... FAIL")[0]] = TestStatus.FAILED.value
        if line.startswith("FAIL:") and len(line.split()) >= 2:
            statuses[line.split()[1]] = TestStatus.FAILED.value
        if line.endswith(" ... ERROR"):
            statuses[line.split(" ... ERROR")[0]] = TestStatus.ERROR.value
        if line.startswith("ERROR:") and len(line.split()) >= 2:
            statuses[line.split()[1]] = TestStatus.ERROR.value
        if line.startswith("ok") and previous is not None:
            statuses[previous] = passed
    for message in (_DJANGO_TESTING, _DJANGO_SERVER_ERROR, _DJANGO_NO_ISSUES):
        for name in _django_interrupted(log, message):
            statuses[name] = passed
    return statuses


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "pytest": parse_pytest_log,
    "pytest_options": parse_pytest_options_log,
    "pytest_v2": parse_pytest_v2_log,
    "django": parse_django_log,
    "sympy": parse_sympy_log,
    "matplotlib": parse_matplotlib_log,
    "seaborn": parse_seaborn_log,
}

# SWE-bench's MAP_REPO_TO_PARSER (Python repositories); any other repository: "pytest".
MAP_REPO_TO_PARSER: dict[str, str] = {
    "astropy/astropy": "pytest_v2",
    "django/django": "django",
    "marshmallow-code/marshmallow": "pytest",
    "matplotlib/matplotlib": "matplotlib",
    "mwaskom/seaborn": "seaborn",
    "pallets/flask": "pytest",
    "psf/requests": "pytest_options",
    "pvlib/pvlib-python": "pytest",
    "pydata/xarray": "pytest",
    "pydicom/pydicom": "pytest_options",
    "pylint-dev/astroid": "pytest",
    "pylint-dev/pylint": "pytest_options",
    "pytest-dev/pytest": "pytest",
    "pyvista/pyvista": "pytest",
    "scikit-learn/scikit-learn": "pytest_v2",
    "sqlfluff/sqlfluff": "pytest",
    "sphinx-doc/sphinx": "pytest_v2",
    "sympy/sympy": "sympy",
}
_PARSER_BY_LOWER_REPO = {repo.lower(): name for repo, name in MAP_REPO_TO_PARSER.items()}


def parser_name(repo: str | None) -> str:
    """Name (a key of :data:`PARSERS`) of the parser the harness uses for ``repo``."""
    if not repo:
        return "pytest"
    return _PARSER_BY_LOWER_REPO.get(repo.strip().lower(), "pytest")


def parse_log(log: str, repo: str | None = None, *, parser: str | None = None) -> dict[str, str]:
    """``{test id: status}`` from a test log, read by the harness's parser for ``repo``.

    ``parser`` (a key of :data:`PARSERS`, e.g. :attr:`TestSpec.parser
    <sweworld.execution.testspec.TestSpec>`) overrides the choice by repository; an unknown
    or missing repository gets the pytest parser.
    """
    name = parser if parser is not None else parser_name(repo)
    try:
        function = PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown log parser {name!r} (known: {', '.join(PARSERS)})") from None
    return function(log or "")


def parse_test_exit_code(content: str) -> int | None:
    """The test command's exit status recorded after :data:`TEST_EXIT_CODE`, or None."""
    match = _TEST_EXIT_CODE_RE.search(content)
    return int(match.group(1)) if match else None


def parse_eval_log(
    content: str, repo: str | None = None, *, parser: str | None = None
) -> tuple[dict[str, str], bool]:
    """Statuses from a whole harness eval log, and whether the run produced test results.

    As the harness's ``get_logs_eval``: a log containing one of :data:`RUN_FAILURE_MARKERS`
    (patch apply failed, reset failed, tests errored, tests timed out), or missing the
    :data:`START_TEST_OUTPUT` / :data:`END_TEST_OUTPUT` markers, gives ``({}, False)``;
    otherwise the text between the markers is parsed (the whole log when that reads no
    test). No status and no sign that a suite ran (:data:`SUITE_RAN`) gives ``({}, False)``,
    and so does a recorded non-zero exit code (:data:`TEST_EXIT_CODE`) with no FAILED or
    ERROR test: the log does not describe the run (e.g. a conftest printing PASSED lines).
    """
    if any(marker in content for marker in RUN_FAILURE_MARKERS):
        return {}, False
    if START_TEST_OUTPUT not in content or END_TEST_OUTPUT not in content:
        return {}, False
    inner = content.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    statuses = parse_log(inner, repo, parser=parser)
    if not statuses:
        statuses = parse_log(content, repo, parser=parser)
    if not statuses and not SUITE_RAN.search(content):
        return {}, False
    exit_code = parse_test_exit_code(content)
    failing = (TestStatus.FAILED.value, TestStatus.ERROR.value)
    if exit_code not in (None, 0) and statuses and not any(v in failing for v in statuses.values()):
        return {}, False
    return statuses, True
