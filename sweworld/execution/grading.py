"""The grader: test logs -> per-test statuses -> a report shaped like SWE-bench's ``report.json``.

One set of pure functions (no I/O) shared by the real and the simulated reward paths, so a
simulated run is graded exactly like a real one:

1. **Parse** a test log into ``{test id: status}`` the way the SWE-bench harness does for the
   task's repository (:func:`parse_log`; the parsers are listed in :data:`PARSERS` and chosen
   by :data:`MAP_REPO_TO_PARSER`). The parsers reproduce the harness's behaviour, quirks
   included, because the ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` ids of the datasets were
   produced by them. For example, a pytest id is the first whitespace-separated token
   after the status word, so ``PASSED t.py::test_x[multi-line assert]`` yields
   ``t.py::test_x[multi-line``, which is also how SWE-bench lists that test.
2. **Grade** the statuses against the task's test lists (:func:`grade`, SWE-bench's
   ``get_eval_tests_report``) and decide the resolution (:func:`resolution_status`).
3. **Report** (:func:`make_report`): ``{instance_id: {"patch_is_None", "patch_exists",
   "patch_successfully_applied", "resolved", "tests_status"}}``.

The simulated path writes its logs with :func:`render_pytest_log` (or :func:`render_log`
for the repository's own runner format), which these parsers read back.

Harness version: the behaviour reproduced is that of the SWE-bench harness 4.x
(``swebench/harness/grading.py`` and ``log_parsers/python.py``), the version that graded
the published leaderboard runs. Later harness revisions (2026) changed three things that
are *not* reproduced here: a ``SKIPPED`` test counts as failed in FAIL_TO_PASS and as
maintained in PASS_TO_PASS (here, as in 4.x, a test whose status is ``SKIPPED`` lands in
neither list), pytest lines of the form ``<id> <STATUS>`` are read by every pytest parser,
and truncated ids are matched by prefix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any

__all__ = [
    "END_TEST_OUTPUT",
    "FAIL_ONLY_REPOS",
    "FAIL_TO_FAIL",
    "FAIL_TO_PASS",
    "HARNESS_REPORT_KEYS",
    "MAP_REPO_TO_PARSER",
    "PARSERS",
    "PASS_TO_FAIL",
    "PASS_TO_PASS",
    "RUN_FAILURE_MARKERS",
    "START_TEST_OUTPUT",
    "ResolvedStatus",
    "TestStatus",
    "grade",
    "is_resolved",
    "make_report",
    "parse_django_log",
    "parse_eval_log",
    "parse_log",
    "parse_matplotlib_log",
    "parse_pytest_log",
    "parse_pytest_options_log",
    "parse_pytest_v2_log",
    "parse_seaborn_log",
    "parse_sympy_log",
    "parser_name",
    "render_django_log",
    "render_log",
    "render_pytest_log",
    "render_sympy_log",
    "resolution_status",
    "statuses_from_tests_status",
    "test_failed",
    "test_passed",
]


class TestStatus(str, Enum):
    """The statuses SWE-bench's parsers assign (``XPASS`` is not one of them)."""

    __test__ = False  # not a pytest test class, whatever its name says

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


class ResolvedStatus(str, Enum):
    NO = "RESOLVED_NO"
    PARTIAL = "RESOLVED_PARTIAL"
    FULL = "RESOLVED_FULL"


FAIL_TO_PASS = "FAIL_TO_PASS"
PASS_TO_PASS = "PASS_TO_PASS"
FAIL_TO_FAIL = "FAIL_TO_FAIL"
PASS_TO_FAIL = "PASS_TO_FAIL"

# Markers the harness's eval script and runner write into the test log.
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
RUN_FAILURE_MARKERS: tuple[str, ...] = (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)

# Repositories graded "fail only" (a listed test passes unless it is explicitly FAILED).
FAIL_ONLY_REPOS: frozenset[str] = frozenset(
    {"chartjs/Chart.js", "processing/p5.js", "markedjs/marked"}
)

# The keys of an instance's entry in the harness's report.json, in the harness's order.
HARNESS_REPORT_KEYS: tuple[str, ...] = (
    "patch_is_None",
    "patch_exists",
    "patch_successfully_applied",
    "resolved",
    "tests_status",
)

_STATUS_WORDS: tuple[str, ...] = tuple(s.value for s in TestStatus)
_PASSING = frozenset({TestStatus.PASSED.value, TestStatus.XFAIL.value})
_FAILING = frozenset({TestStatus.FAILED.value, TestStatus.ERROR.value})

# ------------------------------------------------------------------------------------------
# Log parsers (one per harness parser; each reproduces the harness's reading of a log)
# ------------------------------------------------------------------------------------------


def _status_first(line: str) -> tuple[str, str] | None:
    """``STATUS <id> ...`` -> (id, status token), as the harness's pytest parser reads it.

    The line must start (unindented) with a status word; on a FAILED line every `` - `` is
    replaced by a space first (the ``- message`` suffix); the id is the second
    whitespace-separated token and the status the first token as written.
    """
    if not line.startswith(_STATUS_WORDS):
        return None
    if line.startswith(TestStatus.FAILED.value):
        line = line.replace(" - ", " ")
    tokens = line.split()
    if len(tokens) < 2:
        return None
    return tokens[1], tokens[0]


def parse_pytest_log(log: str) -> dict[str, str]:
    """A ``pytest -rA`` log -> ``{test id: status}`` (SWE-bench's ``parse_log_pytest``).

    Only lines starting with ``PASSED``/``FAILED``/``SKIPPED``/``ERROR``/``XFAIL`` count (the
    short test summary); ``XPASS`` lines and ``<id> PASSED`` progress lines are ignored. A
    later line for the same id wins. Ids are cut at the first whitespace, like the harness
    (and the datasets) cut them; ``SKIPPED [1] file.py:3: reason`` records ``[1]``.
    """
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        parsed = _status_first(line)
        if parsed is not None:
            statuses[parsed[0]] = parsed[1]
    return statuses


_OPTION_RE = re.compile(r"(.*?)\[(.*)\]")


def _normalize_option_id(test_id: str) -> str:
    match = _OPTION_RE.search(test_id)
    if match is None:
        return test_id
    head, option = match.groups()
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
    status word reads like :func:`parse_pytest_log`; otherwise a line ending with a status
    word, or else containing one anywhere, maps its first token to its second
    (``tests/t.py::test_x PASSED``).
    """
    statuses: dict[str, str] = {}
    for raw in log.split("\n"):
        line = _V2_COLOR_RE.sub("", raw).translate(_V2_CONTROL)
        if line.startswith(_STATUS_WORDS):
            parsed = _status_first(line)
            if parsed is not None:
                statuses[parsed[0]] = parsed[1]
        elif line.endswith(_STATUS_WORDS) or any(word in line for word in _STATUS_WORDS):
            tokens = line.split()
            if len(tokens) >= 2:
                statuses[tokens[0]] = tokens[1]
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


_SYMPY_FAILURE_RE = re.compile(r"(_*) (.*)\.py:(.*) (_*)")


def parse_sympy_log(log: str) -> dict[str, str]:
    """SWE-bench's ``parse_log_sympy`` (``bin/test -C --verbose``).

    Failure headers (``____ sympy/x/tests/test_y.py:test_z ____``) give ``path.py:name``
    FAILED; then each stripped line starting with ``test_`` and ending with `` ok`` / `` F``
    / `` E`` gives its first token PASSED / FAILED / ERROR (skips ``s``, expected failures
    ``f`` and the rest are not read).
    """
    statuses: dict[str, str] = {}
    for match in _SYMPY_FAILURE_RE.finditer(log):
        statuses[f"{match.group(2)}.py:{match.group(3)}"] = TestStatus.FAILED.value
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
# Django's runner sometimes prints a long message between "<test> ..." and "ok".
_DJANGO_INTERRUPTED = (
    re.compile(
        r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
        re.MULTILINE,
    ),
    re.compile(r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$", re.MULTILINE),
    re.compile(
        r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$", re.MULTILINE
    ),
)


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
    for pattern in _DJANGO_INTERRUPTED:
        for match in pattern.finditer(log):
            statuses[match.group(1)] = passed
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


def parse_eval_log(
    content: str, repo: str | None = None, *, parser: str | None = None
) -> tuple[dict[str, str], bool]:
    """Statuses from a whole harness eval log, and whether the run produced test output.

    As the harness's ``get_logs_eval``: a log containing one of :data:`RUN_FAILURE_MARKERS`
    (patch apply failed, reset failed, tests errored, tests timed out), or missing the
    :data:`START_TEST_OUTPUT` / :data:`END_TEST_OUTPUT` markers, gives ``({}, False)``;
    otherwise the text between the markers is parsed.
    """
    if any(marker in content for marker in RUN_FAILURE_MARKERS):
        return {}, False
    if START_TEST_OUTPUT not in content or END_TEST_OUTPUT not in content:
        return {}, False
    inner = content.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    return parse_log(inner, repo, parser=parser), True


# ------------------------------------------------------------------------------------------
# Grading
# ------------------------------------------------------------------------------------------


def _status_value(status: Any) -> str:
    return status.value if isinstance(status, Enum) else str(status)


def test_passed(test: str, statuses: Mapping[str, Any]) -> bool:
    """PASSED or XFAIL (the harness's ``test_passed``)."""
    return test in statuses and _status_value(statuses[test]) in _PASSING


def test_failed(test: str, statuses: Mapping[str, Any]) -> bool:
    """Missing, FAILED or ERROR (the harness's ``test_failed``). SKIPPED is neither."""
    return test not in statuses or _status_value(statuses[test]) in _FAILING


test_passed.__test__ = False  # type: ignore[attr-defined]
test_failed.__test__ = False  # type: ignore[attr-defined]


def _test_list(task: Any, key: str) -> list[str]:
    value = task.get(key) if isinstance(task, Mapping) else getattr(task, key, None)
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return [str(t) for t in value]


def _task_repo(task: Any) -> str | None:
    value = task.get("repo") if isinstance(task, Mapping) else getattr(task, "repo", None)
    return str(value) if value else None


def grade(task: Any, statuses: Mapping[str, Any], *, fail_only: bool | None = None) -> dict:
    """``tests_status`` exactly as SWE-bench's ``get_eval_tests_report`` builds it.

    ``task`` is a :class:`~sweworld.tasks.Task` (or a mapping with ``FAIL_TO_PASS`` /
    ``PASS_TO_PASS``, lists or JSON strings). For each listed test, in list order: PASSED or
    XFAIL -> ``success``; missing, FAILED or ERROR -> ``failure``; any other status
    (SKIPPED) -> neither list, as in the harness. ``FAIL_TO_FAIL`` / ``PASS_TO_FAIL`` are
    present and empty (the harness never fills them in its reports).

    ``fail_only`` (default: whether the task's repository is in :data:`FAIL_ONLY_REPOS`)
    grades the harness's "fail only" way: a test fails only if its status is FAILED.
    """
    if fail_only is None:
        fail_only = _task_repo(task) in FAIL_ONLY_REPOS
    report: dict[str, dict[str, list[str]]] = {}
    for key in (FAIL_TO_PASS, PASS_TO_PASS):
        success: list[str] = []
        failure: list[str] = []
        for test in _test_list(task, key):
            if fail_only:
                failed = test in statuses and _status_value(statuses[test]) == "FAILED"
                (failure if failed else success).append(test)
            elif test_passed(test, statuses):
                success.append(test)
            elif test_failed(test, statuses):
                failure.append(test)
        report[key] = {"success": success, "failure": failure}
    report[FAIL_TO_FAIL] = {"success": [], "failure": []}
    report[PASS_TO_FAIL] = {"success": [], "failure": []}
    return report


def _rate(part: Mapping[str, list[str]]) -> float:
    total = len(part["success"]) + len(part["failure"])
    return 1.0 if total == 0 else len(part["success"]) / total


def resolution_status(tests_status: Mapping[str, Mapping[str, list[str]]]) -> str:
    """``RESOLVED_FULL`` / ``RESOLVED_PARTIAL`` / ``RESOLVED_NO`` as the harness decides.

    With f2p and p2p the success rates of FAIL_TO_PASS and PASS_TO_PASS (1 for an empty
    list): FULL when both are 1, PARTIAL when 0 < f2p < 1 and p2p is 1, NO otherwise.
    """
    f2p = _rate(tests_status[FAIL_TO_PASS])
    p2p = _rate(tests_status[PASS_TO_PASS])
    if f2p == 1 and p2p == 1:
        return ResolvedStatus.FULL.value
    if 0 < f2p < 1 and p2p == 1:
        return ResolvedStatus.PARTIAL.value
    return ResolvedStatus.NO.value


def is_resolved(tests_status: Mapping[str, Mapping[str, list[str]]]) -> bool:
    """Resolved = ``RESOLVED_FULL``: no FAIL_TO_PASS or PASS_TO_PASS test in ``failure``."""
    return resolution_status(tests_status) == ResolvedStatus.FULL.value


_OK_STATUSES = frozenset({"ok", "success", "completed", "done"})


def make_report(
    task: Any,
    statuses: Mapping[str, Any] | None,
    *,
    patch: str | None = "",
    patch_applied: bool = True,
    status: str | None = None,
) -> dict[str, dict[str, Any]]:
    """A report shaped like the harness's ``report.json``: ``{instance_id: {...}}``.

    The entry has the harness's keys with the harness's meaning (see
    :data:`HARNESS_REPORT_KEYS`):

    * ``patch_is_None``: ``patch is None``; the harness then stops: nothing else is true
      and there is no ``tests_status``. To grade a run of the unchanged base (or a log
      whose patch is unknown), pass ``patch=""``, not None.
    * ``patch_exists``: ``patch is not None`` (the harness's test: an empty string "exists").
    * ``patch_successfully_applied``: the patch applied *and* the tests ran to the end
      markers. The harness sets it to False when the log shows a failed apply, a failed
      reset, an error or a timeout, and then writes no ``tests_status``.
    * ``resolved``: :func:`resolution_status` is ``RESOLVED_FULL``.
    * ``tests_status``: :func:`grade`.

    ``status`` is sweworld's outcome of the run: None or ``"ok"`` for a run that finished;
    anything else (``"patch_failed"``, ``"env_failed"``, ``"timeout"``, ``"error"``, ...)
    is a run that did not, graded as the harness grades a failed run. Such runs, and
    ``patch_applied=False`` (status ``"patch_failed"``), add a ``"sweworld_status"`` key
    saying what happened; the harness keys are unchanged.
    """
    instance_id = str(task.get("instance_id") if isinstance(task, Mapping) else task.instance_id)
    entry: dict[str, Any] = {
        "patch_is_None": False,
        "patch_exists": False,
        "patch_successfully_applied": False,
        "resolved": False,
    }
    if patch is None:
        entry["patch_is_None"] = True
        return {instance_id: entry}
    entry["patch_exists"] = True
    run_status = None if status is None or status.lower() in _OK_STATUSES else status
    if run_status is None and not patch_applied:
        run_status = "patch_failed"
    if run_status is not None:
        entry["sweworld_status"] = run_status
        return {instance_id: entry}
    entry["patch_successfully_applied"] = True
    tests_status = grade(task, statuses or {})
    entry["resolved"] = is_resolved(tests_status)
    entry["tests_status"] = tests_status
    return {instance_id: entry}


# ------------------------------------------------------------------------------------------
# Rendering (what the simulated path prints; the parsers above read it back)
# ------------------------------------------------------------------------------------------

_PYTEST_SUMMARY_ORDER = ("PASSED", "SKIPPED", "XFAIL", "XPASS", "ERROR", "FAILED")
# (status, word in the final line) in the order pytest prints the counts.
_PYTEST_COUNT_ORDER = (
    ("FAILED", "failed"),
    ("PASSED", "passed"),
    ("SKIPPED", "skipped"),
    ("XFAIL", "xfailed"),
    ("XPASS", "xpassed"),
    ("ERROR", "error"),
)
_RENDERABLE = frozenset((*_STATUS_WORDS, "XPASS"))


def _checked(statuses: Mapping[str, Any]) -> list[tuple[str, str]]:
    items = []
    for test, status in statuses.items():
        value = _status_value(status).upper()
        if value not in _RENDERABLE:
            raise ValueError(f"cannot render status {status!r} of {test!r}")
        items.append((str(test), value))
    return items


def _banner(text: str, fill: str = "=", width: int = 80) -> str:
    text = f" {text} " if text else ""
    left = max(2, (width - len(text)) // 2)
    right = max(2, width - len(text) - left)
    return f"{fill * left}{text}{fill * right}"


def render_pytest_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """A ``pytest -rA`` style log reporting ``statuses`` (``{test id: status}``).

    A session header, a ``short test summary info`` section with one ``STATUS <id>`` line
    per test (grouped in pytest's order: PASSED, SKIPPED, XFAIL, XPASS, ERROR, FAILED;
    ids in the given order within a group) and the final ``=== 2 failed, 3 passed in
    0.01s ===`` line. :func:`parse_pytest_log` (and every pytest-family parser) reads it
    back to the same statuses, for ids without whitespace. Ids containing whitespace
    (Django's ``test_x (module.Class)``) cannot survive any pytest-style log, because the
    harness cuts ids at the first space: use :func:`render_log` with the repository.

    ``XPASS`` can be rendered but, as in the harness, is not read back (missing = failed).
    A real ``pytest -rA`` names a skipped test only by location (``SKIPPED [1] t.py:3:``),
    so the harness never sees a SKIPPED id there; here SKIPPED is rendered with its id so
    that the predicted statuses round-trip.
    """
    items = _checked(statuses)
    lines = [_banner("test session starts"), f"collected {len(items)} items", ""]
    if items:
        lines.append(_banner("short test summary info"))
        for group in _PYTEST_SUMMARY_ORDER:
            lines.extend(f"{status} {test}" for test, status in items if status == group)
    counts = {status: 0 for status, _ in _PYTEST_COUNT_ORDER}
    for _, status in items:
        counts[status] += 1
    parts = []
    for status, word in _PYTEST_COUNT_ORDER:
        n = counts[status]
        if n:
            parts.append(f"{n} {word}{'s' if status == 'ERROR' and n > 1 else ''}")
    summary = ", ".join(parts) if parts else "no tests ran"
    lines.append(_banner(f"{summary} in {duration:.2f}s"))
    return "\n".join(lines) + "\n"


_DJANGO_WORDS = {
    "PASSED": "ok",
    "FAILED": "FAIL",
    "ERROR": "ERROR",
    "SKIPPED": "skipped 'skipped'",
    "XFAIL": "expected failure",
    "XPASS": "unexpected success",
}


def render_django_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """The output of Django's ``runtests.py --verbosity 2`` reporting ``statuses``.

    One ``<test> ... ok|FAIL|ERROR|skipped '...'`` line per test, then Django's ``Ran N
    tests`` footer. :func:`parse_django_log` reads it back; XFAIL/XPASS are rendered the way
    unittest prints them (``expected failure``, ``unexpected success``), which the harness
    does not read (they come back missing).
    """
    items = _checked(statuses)
    lines = [
        "Testing against Django installed in '/testbed/django'",
        "System check identified no issues (0 silenced).",
    ]
    lines.extend(f"{test} ... {_DJANGO_WORDS[status]}" for test, status in items)
    counts = {s: sum(1 for _, v in items if v == s) for s in _RENDERABLE}
    lines += ["", "-" * 70, f"Ran {len(items)} tests in {duration:.3f}s", ""]
    details = [
        f"{label}={counts[s]}"
        for s, label in (
            ("FAILED", "failures"),
            ("ERROR", "errors"),
            ("SKIPPED", "skipped"),
            ("XFAIL", "expected failures"),
            ("XPASS", "unexpected successes"),
        )
        if counts[s]
    ]
    failed = counts["FAILED"] or counts["ERROR"] or counts["XPASS"]
    verdict = "FAILED" if failed else "OK"
    lines.append(f"{verdict} ({', '.join(details)})" if details else verdict)
    return "\n".join(lines) + "\n"


_SYMPY_WORDS = {
    "PASSED": "ok",
    "FAILED": "F",
    "ERROR": "E",
    "SKIPPED": "s",
    "XFAIL": "f",
    "XPASS": "X",
}


def render_sympy_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """The output of SymPy's ``bin/test -C --verbose`` reporting ``statuses``.

    One ``<test> ok|F|E|s|f|X`` line per test; a FAILED id of the form ``path.py:name``
    is rendered as a failure header. :func:`parse_sympy_log` reads PASSED, FAILED and ERROR
    back (for ids starting with ``test_``); skips and expected failures come back missing,
    as in the harness.
    """
    items = _checked(statuses)
    lines = [_banner("test process starts"), ""]
    headers = []
    for test, status in items:
        if status == "FAILED" and ".py:" in test and not test.startswith("test_"):
            headers.append(_banner(test, fill="_"))
        else:
            lines.append(f"{test} {_SYMPY_WORDS[status]}")
    if headers:
        lines += ["", *headers]
    words = (
        ("PASSED", "passed"),
        ("FAILED", "failed"),
        ("SKIPPED", "skipped"),
        ("XFAIL", "expected to fail"),
        ("XPASS", "expected to fail but passed"),
        ("ERROR", "exceptions"),
    )
    parts = [f"{n} {w}" for s, w in words if (n := sum(1 for _, v in items if v == s))]
    lines += ["", _banner(f"tests finished: {', '.join(parts)} in {duration:.2f} seconds")]
    if any(v in ("FAILED", "ERROR", "XPASS") for _, v in items):
        lines.append("DO *NOT* COMMIT!")
    return "\n".join(lines) + "\n"


def render_log(statuses: Mapping[str, Any], repo: str | None = None) -> str:
    """The log ``repo``'s harness test command would print for ``statuses``.

    Django: :func:`render_django_log`; SymPy: :func:`render_sympy_log`; every other
    repository (pytest): :func:`render_pytest_log`. ``parse_log(render_log(s, repo), repo)``
    gives back ``s`` for every status the repository's parser can read.
    """
    name = parser_name(repo)
    if name == "django":
        return render_django_log(statuses)
    if name == "sympy":
        return render_sympy_log(statuses)
    return render_pytest_log(statuses)


def statuses_from_tests_status(
    tests_status: Mapping[str, Mapping[str, Iterable[str]]],
) -> dict[str, str]:
    """``{test: PASSED|FAILED}`` from a report's ``tests_status`` (success -> PASSED)."""
    out: dict[str, str] = {}
    for part in tests_status.values():
        for test in part.get("success", ()):
            out[test] = TestStatus.PASSED.value
        for test in part.get("failure", ()):
            out[test] = TestStatus.FAILED.value
    return out
