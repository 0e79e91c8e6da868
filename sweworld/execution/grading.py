"""The grader: test logs -> per-test statuses -> a report shaped like SWE-bench's ``report.json``.

One set of pure functions (no I/O) shared by the real and the simulated reward paths, so a
simulated run is graded exactly like a real one:

1. **Parse** a test log into ``{test id: status}`` the way the SWE-bench harness does for the
   task's repository (:func:`parse_log`, :mod:`sweworld.execution.log_parsers`).
2. **Grade** the statuses against the task's test lists (:func:`grade`, SWE-bench's
   ``get_eval_tests_report``) and decide the resolution (:func:`resolution_status`).
3. **Report** (:func:`make_report`): ``{instance_id: {"patch_is_None", "patch_exists",
   "patch_successfully_applied", "resolved", "tests_status"}}``.

The simulated path writes its logs with :func:`render_pytest_log` (or :func:`render_log`
for the repository's own runner format, :mod:`sweworld.execution.log_render`), which these
parsers read back.

Harness version: the behaviour reproduced is that of the SWE-bench harness 5.0
(``swebench/harness/grading.py`` and ``log_parsers/python.py``), compared with the installed
package on real logs by ``tests/execution/test_harness_parity.py``. It differs from the 4.x
harness that graded the published leaderboard runs in ways that close reward hacks and
fix misreadings: a SKIPPED FAIL_TO_PASS test is a failure (4.x put it in neither list, so a
patch that skipped every FAIL_TO_PASS test was resolved), a SKIPPED PASS_TO_PASS test is
maintained, pytest's ``SKIPPED [1] file:line`` summaries name no test, ids truncated in the
datasets (``test_x[log(photon``) match by prefix, and a run that printed no test result at
all is not graded (4.x graded it as every listed test failing).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from sweworld.execution.log_parsers import (
    END_TEST_OUTPUT,
    MAP_REPO_TO_PARSER,
    PARSERS,
    START_TEST_OUTPUT,
    TestStatus,
    parse_django_log,
    parse_eval_log,
    parse_log,
    parse_matplotlib_log,
    parse_pytest_log,
    parse_pytest_options_log,
    parse_pytest_v2_log,
    parse_seaborn_log,
    parse_sympy_log,
    parser_name,
)
from sweworld.execution.log_render import (
    render_django_log,
    render_log,
    render_pytest_log,
    render_sympy_log,
    statuses_from_tests_status,
)
from sweworld.tasks.fields import test_list

__all__ = [
    "END_TEST_OUTPUT",
    "FAIL_ONLY_REPOS",
    "FAIL_TO_FAIL",
    "FAIL_TO_PASS",
    "HARNESS_REPORT_KEYS",
    "MAP_REPO_TO_PARSER",
    "NO_TEST_RESULTS",
    "PARSERS",
    "PASS_TO_FAIL",
    "PASS_TO_PASS",
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
    "test_maintained",
    "test_passed",
]


class ResolvedStatus(str, Enum):
    NO = "RESOLVED_NO"
    PARTIAL = "RESOLVED_PARTIAL"
    FULL = "RESOLVED_FULL"


FAIL_TO_PASS = "FAIL_TO_PASS"
PASS_TO_PASS = "PASS_TO_PASS"
FAIL_TO_FAIL = "FAIL_TO_FAIL"
PASS_TO_FAIL = "PASS_TO_FAIL"

#: ``sweworld_status`` of a run that finished but printed no test result the parser reads.
NO_TEST_RESULTS = "no_test_results"

# Repositories graded "fail only" (a listed test passes unless it is explicitly FAILED).
FAIL_ONLY_REPOS: frozenset[str] = frozenset(
    {
        "bpmn-io/bpmn-js",
        "chartjs/Chart.js",
        "eslint/eslint",
        "markedjs/marked",
        "openlayers/openlayers",
        "processing/p5.js",
    }
)

# The keys of an instance's entry in the harness's report.json, in the harness's order
# (harness 5.0 adds ``infra_failure``, a triage flag: see ``make_report``).
HARNESS_REPORT_KEYS: tuple[str, ...] = (
    "patch_is_None",
    "patch_exists",
    "patch_successfully_applied",
    "resolved",
    "tests_status",
)

_PASSING = frozenset({TestStatus.PASSED.value, TestStatus.XFAIL.value})
_FAILING = frozenset({TestStatus.FAILED.value, TestStatus.ERROR.value, TestStatus.SKIPPED.value})


def _status_value(status: Any) -> str:
    return status.value if isinstance(status, Enum) else str(status)


def _resolve_case(test: str, statuses: Mapping[str, Any]) -> str | None:
    """The key of ``statuses`` that reports ``test`` (the harness's ``_resolve_case``).

    The id itself; for an id truncated inside its parameters (more ``[`` than ``]``, as 676
    ids of SWE-bench Verified are), the ids it prefixes, when they agree on pass or fail.
    """
    if test in statuses:
        return test
    if test.count("[") > test.count("]"):
        matches = [k for k in statuses if k.startswith(test)]
        if matches and len({_status_value(statuses[k]) in _PASSING for k in matches}) == 1:
            return matches[0]
    return None


def test_passed(test: str, statuses: Mapping[str, Any]) -> bool:
    """PASSED or XFAIL (the harness's ``test_passed``)."""
    key = _resolve_case(test, statuses)
    return key is not None and _status_value(statuses[key]) in _PASSING


def test_maintained(test: str, statuses: Mapping[str, Any]) -> bool:
    """PASS_TO_PASS: passed, or SKIPPED (a skip is not a regression; ``test_maintained``)."""
    key = _resolve_case(test, statuses)
    return key is not None and (
        _status_value(statuses[key]) in _PASSING
        or _status_value(statuses[key]) == TestStatus.SKIPPED.value
    )


def test_failed(test: str, statuses: Mapping[str, Any]) -> bool:
    """Missing, FAILED, ERROR or SKIPPED (the harness's ``test_failed``: a skipped
    FAIL_TO_PASS test is not a resolution)."""
    key = _resolve_case(test, statuses)
    return key is None or _status_value(statuses[key]) in _FAILING


test_passed.__test__ = False  # type: ignore[attr-defined]
test_failed.__test__ = False  # type: ignore[attr-defined]


def _task_repo(task: Any) -> str | None:
    value = task.get("repo") if isinstance(task, Mapping) else getattr(task, "repo", None)
    return str(value) if value else None


def grade(task: Any, statuses: Mapping[str, Any], *, fail_only: bool | None = None) -> dict:
    """``tests_status`` exactly as SWE-bench's ``get_eval_tests_report`` builds it.

    ``task`` is a :class:`~sweworld.tasks.Task` (or a mapping with ``FAIL_TO_PASS`` /
    ``PASS_TO_PASS``, lists or JSON strings). For each listed test, in list order:
    FAIL_TO_PASS: PASSED or XFAIL -> ``success``; missing, FAILED, ERROR or SKIPPED ->
    ``failure``. PASS_TO_PASS: PASSED, XFAIL or SKIPPED -> ``success``; missing, FAILED or
    ERROR -> ``failure``. ``FAIL_TO_FAIL`` / ``PASS_TO_FAIL`` are present and empty (the
    harness never fills them in its reports).

    ``fail_only`` (default: whether the task's repository is in :data:`FAIL_ONLY_REPOS`)
    grades the harness's "fail only" way: a test fails only if its status is FAILED.
    """
    if fail_only is None:
        fail_only = _task_repo(task) in FAIL_ONLY_REPOS
    report: dict[str, dict[str, list[str]]] = {}
    for key in (FAIL_TO_PASS, PASS_TO_PASS):
        success: list[str] = []
        failure: list[str] = []
        kept = test_passed if key == FAIL_TO_PASS else test_maintained
        for test in test_list(task, key):
            if fail_only:
                failed = test in statuses and _status_value(statuses[test]) == "FAILED"
                (failure if failed else success).append(test)
            elif kept(test, statuses):
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
    * ``patch_successfully_applied``: the patch applied *and* the run produced test
      results. The harness sets it to False when the log shows a failed apply, a failed
      reset, an error or a timeout, or no test result at all, and then writes no
      ``tests_status``.
    * ``resolved``: :func:`resolution_status` is ``RESOLVED_FULL``.
    * ``tests_status``: :func:`grade`.

    ``status`` is sweworld's outcome of the run: None or ``"ok"`` for a run that finished;
    anything else (``"patch_failed"``, ``"env_failed"``, ``"timeout"``, ``"error"``, ...)
    is a run that did not, graded as the harness grades a failed run. Such runs,
    ``patch_applied=False`` (status ``"patch_failed"``) and a finished run with no test
    result (empty ``statuses``: :data:`NO_TEST_RESULTS`, never a pass) add a
    ``"sweworld_status"`` key saying what happened; the harness keys are unchanged. (The
    harness's advisory ``infra_failure`` key is not written: sweworld's statuses say it.)
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
    if run_status is None and not statuses:
        run_status = NO_TEST_RESULTS
    if run_status is not None:
        entry["sweworld_status"] = run_status
        return {instance_id: entry}
    entry["patch_successfully_applied"] = True
    tests_status = grade(task, statuses or {})
    entry["resolved"] = is_resolved(tests_status)
    entry["tests_status"] = tests_status
    return {instance_id: entry}
