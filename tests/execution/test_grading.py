"""The grader: SWE-bench's log parsers, get_eval_tests_report, resolution and report.json.

Logs are written by hand in each runner's format; the official harness reports of the
shared mini-swe-agent run are graded again from rendered logs (skipped without the data).
"""

from __future__ import annotations

import json
import tarfile

import pytest

from sweworld.execution.grading import (
    FAIL_TO_FAIL,
    FAIL_TO_PASS,
    HARNESS_REPORT_KEYS,
    MAP_REPO_TO_PARSER,
    PARSERS,
    PASS_TO_FAIL,
    PASS_TO_PASS,
    ResolvedStatus,
    TestStatus,
    grade,
    is_resolved,
    make_report,
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
    render_django_log,
    render_log,
    render_pytest_log,
    render_sympy_log,
    resolution_status,
    statuses_from_tests_status,
)
from sweworld.tasks import Task
from tests.conftest import shared_data_dir

P, F, S, E, X = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"


def make_task(f2p, p2p=(), repo="sweworld/stockroom", instance_id="sweworld__stockroom-99"):
    return Task(instance_id=instance_id, repo=repo, FAIL_TO_PASS=list(f2p), PASS_TO_PASS=list(p2p))


# ------------------------------------------------------------------------------ parsers

PYTEST_LOG = """\
============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0
rootdir: /testbed
collected 9 items

tests/test_money.py ..F.sxX                                              [ 77%]
tests/test_inventory.py .E                                               [100%]

=================================== FAILURES ===================================
___________________________ test_format[-5--$0.05] ____________________________
E       AssertionError: assert '$-0.05' == '-$0.05'
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED tests/test_money.py::test_format[1-$0.01]
PASSED tests/test_inventory.py::TestRemove::test_x
PASSED testing/test_assertrewrite.py::test_get_assertion_exprs[multi-line assert]
SKIPPED [1] tests/test_money.py:40: needs a locale
XFAIL tests/test_money.py::test_legacy - reason: old rounding
XPASS tests/test_money.py::test_flaky
ERROR tests/test_inventory.py::TestRemove::test_db - ConnectionError: refused
FAILED tests/test_money.py::test_format[-5--$0.05] - AssertionError: assert '$-0.05' == ...
FAILED tests/test_calc.py::test_eval[1 - 1] - assert 0
  PASSED tests/indented.py::test_not_a_summary_line
= 2 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error in 0.12s =
"""


def test_pytest_parser_reads_summary_lines_like_the_harness():
    assert parse_pytest_log(PYTEST_LOG) == {
        "tests/test_money.py::test_format[1-$0.01]": P,
        "tests/test_inventory.py::TestRemove::test_x": P,
        # ids are cut at the first space, as in the datasets' lists (pytest-dev__pytest-11143)
        "testing/test_assertrewrite.py::test_get_assertion_exprs[multi-line": P,
        # `SKIPPED [1] file:line: reason` names no test (harness 5.0's _is_skip_summary)
        "tests/test_money.py::test_legacy": X,
        "tests/test_inventory.py::TestRemove::test_db": E,
        # dashes inside a parametrised id survive; only " - " is the message separator
        "tests/test_money.py::test_format[-5--$0.05]": F,
        "tests/test_calc.py::test_eval[1": F,
    }


def test_pytest_parser_edge_lines():
    log = "PASSED\nFAILED\nPASSED a\r\nPASSED a\nFAILED a - boom\nXPASS b\nPASSEDX c\n"
    # a later line wins; a bare status word is skipped; the status is the first token as is
    assert parse_pytest_log(log) == {"a": F, "c": "PASSEDX"}
    assert parse_pytest_log("") == {}


def test_pytest_options_parser_keeps_only_the_last_path_component():
    log = "\n".join(
        [
            "PASSED tests/test_x.py::test_path[/tmp/pytest-of-root/pytest-0/test_path0/a.txt]",
            "PASSED tests/test_x.py::test_url[//host/share/x]",
            "PASSED tests/test_x.py::test_glob[/a/*/b]",
            "FAILED tests/test_x.py::test_plain[abc] - AssertionError",
            "PASSED tests/test_x.py::test_trailing[x]extra",
            "PASSED tests/test_x.py::test_no_option",
        ]
    )
    assert parse_pytest_options_log(log) == {
        "tests/test_x.py::test_path[/a.txt]": P,
        "tests/test_x.py::test_url[//host/share/x]": P,
        "tests/test_x.py::test_glob[/a/*/b]": P,
        "tests/test_x.py::test_plain[abc]": F,
        "tests/test_x.py::test_trailing[x]": P,
        "tests/test_x.py::test_no_option": P,
    }


def test_pytest_v2_parser_strips_colours_and_reads_verbose_lines():
    log = "\n".join(
        [
            "\x1b[32mPASSED\x1b[0m sklearn/tests/test_a.py::test_one",
            "\x1b[31mFAILED\x1b[0m sklearn/tests/test_a.py::test_two - ValueError",
            "astropy/io/tests/test_b.py::test_three PASSED                [ 50%]",
            "astropy/io/tests/test_b.py::test_four FAILED",
            "sphinx/tests/test_c.py::test_five SKIPPED (needs docutils)    [ 75%]",
            "=== 1 failed, 1 passed in 0.1s ===",
        ]
    )
    # Harness 5.0 reads a verbose line only when it *ends* with the status word: the
    # progress-percentage suffix of pytest's verbose lines hides test_three and test_five.
    assert parse_pytest_v2_log(log) == {
        "sklearn/tests/test_a.py::test_one": P,
        "sklearn/tests/test_a.py::test_two": F,
        "astropy/io/tests/test_b.py::test_four": F,
    }
    # The rest of a summary line is the id (harness 5.0), so ids with spaces survive.
    assert parse_pytest_v2_log("PASSED a.py::t[a b]\nFAILED a.py::u[c d] - boom") == {
        "a.py::t[a b]": P,
        "a.py::u[c d]": F,
    }
    # The harness removes every control character, tabs included.
    assert parse_pytest_v2_log("PASSED\ta.py::t") == {}
    # The plain pytest parser does not strip colours (as in the harness).
    assert parse_pytest_log("\x1b[32mPASSED\x1b[0m a.py::t") == {}


def test_matplotlib_parser_rewrites_mouse_buttons():
    log = (
        "PASSED lib/matplotlib/tests/test_widgets.py::test_span[MouseButton.LEFT]\n"
        "FAILED lib/matplotlib/tests/test_widgets.py::test_span[MouseButton.RIGHT] - x\n"
    )
    assert parse_matplotlib_log(log) == {
        "lib/matplotlib/tests/test_widgets.py::test_span[1]": P,
        "lib/matplotlib/tests/test_widgets.py::test_span[3]": F,
    }


def test_seaborn_parser_reads_only_passed_and_failed():
    log = "\n".join(
        [
            "tests/test_core.py::TestMap::test_a PASSED                   [ 10%]",
            "PASSED tests/test_core.py::TestMap::test_b",
            "FAILED tests/test_core.py::TestMap::test_c - AssertionError",
            "ERROR tests/test_core.py::TestMap::test_d - fixture",
            "XFAIL tests/test_core.py::TestMap::test_e",
            "SKIPPED tests/test_core.py::TestMap::test_f",
            "FAILED",
        ]
    )
    assert parse_seaborn_log(log) == {
        "tests/test_core.py::TestMap::test_a": P,
        "tests/test_core.py::TestMap::test_b": P,
        "tests/test_core.py::TestMap::test_c": F,
    }


SYMPY_LOG = """\
============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]
architecture:       64-bit
cache:              no
ground types:       python
random seed:        49191437
hash randomization: on (PYTHONHASHSEED=3190839353)

sympy/geometry/tests/test_point.py[6]
test_point ok
test_point3D ok
test_Point2D F
test_issue_9214 E
test_transform f
test_slow s

________________________________________________________________________________
_____________ sympy/geometry/tests/test_point.py:test_Point2D __________________
Traceback (most recent call last):
  File "/testbed/sympy/geometry/tests/test_point.py", line 260, in test_Point2D
    assert p.distance(q) == 5
AssertionError

= tests finished: 2 passed, 1 failed, 1 skipped, 1 expected to fail, 1 exceptions, in 0.5 s =
DO *NOT* COMMIT!
"""


def test_sympy_parser():
    assert parse_sympy_log(SYMPY_LOG) == {
        "sympy/geometry/tests/test_point.py:test_Point2D": F,
        "test_point": P,
        "test_point3D": P,
        "test_Point2D": F,
        "test_issue_9214": E,
    }


DJANGO_LOG = """\
Testing against Django installed in '/testbed/django'
Importing application auth_tests
Skipping setup of unused database(s): other.
System check identified no issues (0 silenced).
test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok
test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... FAIL
test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest) ... ERROR
test_skip (auth_tests.test_validators.X) ... skipped 'PIL is not installed'
test_doc (auth_tests.test_validators.Y)
Password validation rejects common passwords. ... ok
test_known_bug (auth_tests.test_validators.Y) ... expected failure
test_noisy (auth_tests.test_validators.Z) ... some output printed by the test
ok
test_interrupted (auth_tests.test_validators.W) ... System check identified no issues (0 silenced)
ok

======================================================================
FAIL: test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: 'x' != 'y'

----------------------------------------------------------------------
Ran 8 tests in 0.012s

FAILED (failures=1, errors=1, skipped=1, expected failures=1)
"""


def test_django_parser():
    statuses = parse_django_log(DJANGO_LOG)
    assert statuses == {
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)": P,
        "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)": F,
        "test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest)": E,
        "test_skip (auth_tests.test_validators.X)": S,
        # a test with a docstring is named by the docstring's first line
        "Password validation rejects common passwords.": P,
        # output between "..." and "ok": the last "<test> ..." seen passes
        "test_noisy (auth_tests.test_validators.Z)": P,
        "test_interrupted (auth_tests.test_validators.W)": P,
        # "FAIL: <first token>" is recorded too
        "test_unicode_validator": F,
    }
    assert "test_known_bug (auth_tests.test_validators.Y)" not in statuses


def test_django_parser_special_cases():
    assert parse_django_log("  --version is equivalent to version\n") == {
        "--version is equivalent to version": P
    }
    line = "Applying sites.0002_alter_domain_unique...test_no_migrations (x.Tests) ... ok"
    assert parse_django_log(line) == {"test_no_migrations (x.Tests)": P}
    assert parse_django_log("test_b (m.C) ...  OK\nERROR: test_c (m.C)\n") == {
        "test_b (m.C)": P,
        "test_c": E,
    }


def test_parse_log_chooses_the_parser_by_repository():
    assert parser_name("django/django") == "django"
    assert parser_name("Django/Django") == "django"
    assert parser_name("sympy/sympy") == "sympy"
    assert parser_name("scikit-learn/scikit-learn") == "pytest_v2"
    assert parser_name("psf/requests") == "pytest_options"
    assert parser_name("sweworld/stockroom") == "pytest"
    assert parser_name(None) == "pytest"
    assert set(MAP_REPO_TO_PARSER.values()) <= set(PARSERS)
    assert parse_log(DJANGO_LOG, "django/django") == parse_django_log(DJANGO_LOG)
    assert parse_log(SYMPY_LOG, "sympy/sympy") == parse_sympy_log(SYMPY_LOG)
    assert parse_log(PYTEST_LOG) == parse_pytest_log(PYTEST_LOG)
    assert parse_log(PYTEST_LOG, "owner/unknown") == parse_pytest_log(PYTEST_LOG)
    assert parse_log(SYMPY_LOG, "django/django", parser="sympy") == parse_sympy_log(SYMPY_LOG)
    with pytest.raises(ValueError, match="unknown log parser"):
        parse_log("", parser="nose")


def test_parse_eval_log_reads_between_the_markers():
    body = "PASSED a.py::t1\nFAILED a.py::t2 - x\n"
    log = f"+ git apply -v -\n+ : '>>>>> Start Test Output'\n{body}+ : '>>>>> End Test Output'\n"
    assert parse_eval_log("PASSED a.py::t0\n" + log) == ({"a.py::t1": P, "a.py::t2": F}, True)
    assert parse_eval_log(body) == ({}, False)
    assert parse_eval_log(log + ">>>>> Tests Timed Out\n") == ({}, False)
    assert parse_eval_log(">>>>> Patch Apply Failed\n" + log) == ({}, False)


# ------------------------------------------------------------------------------ grading


def test_grade_missing_error_and_xfail():
    task = make_task(["t::a", "t::b", "t::c"], ["t::d", "t::e", "t::f"])
    statuses = {"t::a": P, "t::b": X, "t::c": E, "t::d": P, "t::e": F}
    report = grade(task, statuses)
    assert report == {
        FAIL_TO_PASS: {"success": ["t::a", "t::b"], "failure": ["t::c"]},
        PASS_TO_PASS: {"success": ["t::d"], "failure": ["t::e", "t::f"]},  # t::f missing
        FAIL_TO_FAIL: {"success": [], "failure": []},
        PASS_TO_FAIL: {"success": [], "failure": []},
    }
    assert resolution_status(report) == "RESOLVED_NO"
    assert not is_resolved(report)


def test_grade_skipped_fails_fail_to_pass_and_keeps_pass_to_pass_as_in_the_harness():
    task = make_task(["t::a", "t::s"], ["t::p", "t::q"])
    report = grade(task, {"t::a": P, "t::s": S, "t::p": TestStatus.PASSED, "t::q": S})
    # A patch that skips a FAIL_TO_PASS test has not fixed it (harness 5.0's test_failed);
    # a skipped PASS_TO_PASS test is not a regression (its test_maintained).
    assert report[FAIL_TO_PASS] == {"success": ["t::a"], "failure": ["t::s"]}
    assert report[PASS_TO_PASS] == {"success": ["t::p", "t::q"], "failure": []}
    assert resolution_status(report) == ResolvedStatus.PARTIAL.value
    # Skipping every FAIL_TO_PASS test resolves nothing (4.x graded it RESOLVED_FULL).
    assert resolution_status(grade(make_task(["t::s"]), {"t::s": S})) == ResolvedStatus.NO.value


def test_grade_matches_ids_truncated_in_the_datasets_by_prefix():
    task = make_task(["t.py::test_g[log(photon"], ["t.py::test_h[a"])
    statuses = {"t.py::test_g[log(photon)]": P, "t.py::test_h[a]": P, "t.py::test_h[ab]": F}
    report = grade(task, statuses)
    assert report[FAIL_TO_PASS]["success"] == ["t.py::test_g[log(photon"]
    # candidates that disagree on pass/fail settle nothing: the test is missing, so failed
    assert report[PASS_TO_PASS]["failure"] == ["t.py::test_h[a"]
    # complete ids never match by prefix
    assert grade(make_task(["t.py::test_g"]), {"t.py::test_g2": P})[FAIL_TO_PASS]["failure"]


def test_resolution_full_partial_no():
    task = make_task(["a", "b"], ["c"])
    assert resolution_status(grade(task, {"a": P, "b": P, "c": P})) == "RESOLVED_FULL"
    assert resolution_status(grade(task, {"a": P, "b": F, "c": P})) == "RESOLVED_PARTIAL"
    assert resolution_status(grade(task, {"a": P, "b": F, "c": F})) == "RESOLVED_NO"
    assert resolution_status(grade(task, {"a": F, "b": F, "c": P})) == "RESOLVED_NO"
    assert resolution_status(grade(make_task([], []), {})) == "RESOLVED_FULL"
    assert resolution_status(grade(make_task([], ["c"]), {})) == "RESOLVED_NO"


def test_grade_keeps_list_order_and_duplicates_and_accepts_rows():
    row = {"FAIL_TO_PASS": json.dumps(["b", "a", "b"]), "PASS_TO_PASS": "[]"}
    assert grade(row, {"a": P})[FAIL_TO_PASS] == {"success": ["a"], "failure": ["b", "b"]}


def test_grade_fail_only():
    task = make_task(["a", "b", "c"], repo="chartjs/Chart.js")
    report = grade(task, {"a": F, "b": E})
    assert report[FAIL_TO_PASS] == {"success": ["b", "c"], "failure": ["a"]}
    both = grade(task, {"a": F, "b": E}, fail_only=False)
    assert both[FAIL_TO_PASS]["failure"] == ["a", "b", "c"]


def test_grading_parametrised_and_class_ids_from_a_real_log_format():
    task = make_task(
        [
            "tests/test_money.py::test_format[-5--$0.05]",
            "tests/test_calc.py::test_eval[1",
            "testing/test_assertrewrite.py::test_get_assertion_exprs[multi-line",
        ],
        ["tests/test_inventory.py::TestRemove::test_x", "tests/test_money.py::test_legacy"],
    )
    report = grade(task, parse_pytest_log(PYTEST_LOG))
    assert report[FAIL_TO_PASS] == {
        "success": ["testing/test_assertrewrite.py::test_get_assertion_exprs[multi-line"],
        "failure": [
            "tests/test_money.py::test_format[-5--$0.05]",
            "tests/test_calc.py::test_eval[1",
        ],
    }
    assert report[PASS_TO_PASS]["success"] == task.PASS_TO_PASS  # PASSED and XFAIL
    assert resolution_status(report) == "RESOLVED_PARTIAL"


def test_toy_task_grading(toy_tasks):
    task = toy_tasks[0]
    everything = {t: P for t in task.FAIL_TO_PASS + task.PASS_TO_PASS}
    log = render_pytest_log(everything)
    report = make_report(task, parse_log(log, task.repo), patch=task.patch)
    entry = report[task.instance_id]
    assert entry["resolved"] is True
    assert entry["tests_status"][FAIL_TO_PASS]["success"] == task.FAIL_TO_PASS
    broken = dict(everything, **{task.FAIL_TO_PASS[0]: F})
    entry = make_report(task, parse_pytest_log(render_pytest_log(broken)), patch="")[
        task.instance_id
    ]
    assert entry["resolved"] is False and entry["patch_exists"] is True


# ------------------------------------------------------------------------------ report.json


def test_make_report_shapes():
    task = make_task(["a"], ["b"], instance_id="o__r-1")
    ok = make_report(task, {"a": P, "b": P}, patch="diff")
    assert list(ok) == ["o__r-1"]
    assert tuple(ok["o__r-1"]) == HARNESS_REPORT_KEYS
    assert ok["o__r-1"]["resolved"] is True
    assert ok["o__r-1"]["patch_successfully_applied"] is True

    none = make_report(task, {"a": P}, patch=None)["o__r-1"]
    assert none == {
        "patch_is_None": True,
        "patch_exists": False,
        "patch_successfully_applied": False,
        "resolved": False,
    }

    failed_apply = make_report(task, {"a": P, "b": P}, patch="diff", patch_applied=False)
    assert failed_apply["o__r-1"] == {
        "patch_is_None": False,
        "patch_exists": True,
        "patch_successfully_applied": False,
        "resolved": False,
        "sweworld_status": "patch_failed",
    }
    for status in ("timeout", "env_failed", "patch_failed"):
        entry = make_report(task, {"a": P, "b": P}, status=status)["o__r-1"]
        assert entry["resolved"] is False and entry["sweworld_status"] == status
        assert "tests_status" not in entry
        assert entry["patch_successfully_applied"] is False
    # A finished run that printed no test result is not graded (never a pass, never a
    # list of failures): the harness's get_logs_eval returns "not found" for it.
    empty = make_report(task, {}, status="ok")["o__r-1"]
    assert empty["sweworld_status"] == "no_test_results" and not empty["resolved"]
    assert "tests_status" not in empty
    assert "sweworld_status" not in make_report(task, {"x": F}, status="ok")["o__r-1"]
    assert make_report({"instance_id": "x", "FAIL_TO_PASS": ["a"]}, {"a": X})["x"]["resolved"]


# ------------------------------------------------------------------------------ rendering


def test_render_pytest_log_round_trips():
    statuses = {
        "tests/test_money.py::test_format[-5--$0.05]": F,
        "tests/test_inventory.py::TestRemove::test_x": P,
        "tests/test_money.py::test_format[1-$0.01]": P,
        "tests/t.py::test_skip": S,
        "tests/t.py::test_xfail": X,
        "tests/t.py::test_error": E,
    }
    log = render_pytest_log(statuses)
    assert "short test summary info" in log
    assert log.rstrip().endswith("=")
    assert "1 failed, 2 passed, 1 skipped, 1 xfailed, 1 error in 0.01s" in log
    assert parse_pytest_log(log) == statuses
    for name in ("pytest", "pytest_options", "pytest_v2", "matplotlib"):
        assert PARSERS[name](log) == statuses, name
    assert parse_seaborn_log(log) == {k: v for k, v in statuses.items() if v in (P, F)}
    # pytest's order in the short summary: passed, skipped, xfailed, error, failed
    summary = log.split("short test summary info", 1)[1].splitlines()[1:-1]
    assert [line.split()[0] for line in summary] == [P, P, S, X, E, F]


def test_render_pytest_log_edge_cases():
    assert "no tests ran" in render_pytest_log({})
    assert parse_pytest_log(render_pytest_log({})) == {}
    log = render_pytest_log({"a::x": "XPASS", "a::e1": E, "a::e2": TestStatus.ERROR})
    assert "1 xpassed, 2 errors" in log
    assert parse_pytest_log(log) == {"a::e1": E, "a::e2": E}  # XPASS is not a harness status
    with pytest.raises(ValueError, match="cannot render"):
        render_pytest_log({"a": "BROKEN"})


def test_ids_with_spaces_need_the_repositorys_own_format():
    statuses = {"test_a (m.C)": P, "Docstring first line.": F}
    # A pytest-style log cannot carry them: the harness cuts ids at the first space.
    assert parse_pytest_log(render_pytest_log(statuses)) == {"test_a": P, "Docstring": F}
    assert parse_log(render_log(statuses, "django/django"), "django/django") == statuses


def test_render_django_and_sympy_logs_round_trip():
    django = {"test_a (m.C)": P, "test_b (m.C)": F, "test_c (m.C)": E, "Doc line.": S}
    log = render_django_log(django)
    assert "Ran 4 tests in" in log and "FAILED (failures=1, errors=1, skipped=1)" in log
    assert parse_django_log(log) == django
    assert parse_django_log(render_django_log({"test_x (m.C)": X})) == {}
    assert render_django_log({"test_a (m.C)": P}).rstrip().endswith("OK")

    sympy = {"test_a": P, "test_b": F, "test_c": E, "sympy/x/tests/test_y.py:test_b": F}
    assert parse_sympy_log(render_sympy_log(sympy)) == sympy
    assert parse_sympy_log(render_sympy_log({"test_s": S, "test_f": X})) == {}
    assert render_log(sympy, "sympy/sympy") == render_sympy_log(sympy)
    assert render_log({"a": P}, "psf/requests") == render_pytest_log({"a": P})


# ------------------------------------------------------------------------------ real reports


@pytest.fixture(scope="module")
def official_reports() -> dict[str, dict]:
    """``{instance_id: report.json entry}`` of the shared mini-swe-agent run."""
    path = shared_data_dir() / "mini-swe-agent-gemini3-verified.tar.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    reports = {}
    with tarfile.open(path, "r:gz") as tf:
        for member in tf:
            if member.name.endswith("/report.json"):
                handle = tf.extractfile(member)
                assert handle is not None
                report = json.load(handle)
                instance_id = member.name.split("/")[-2]
                # the harness writes {instance_id: entry}; some exports keep only the entry
                reports[instance_id] = report.get(instance_id, report)
    assert len(reports) == 402
    return reports


def _task_from_report(instance_id: str, entry: dict) -> Task:
    owner, rest = instance_id.split("__", 1)
    ts = entry["tests_status"]
    return Task(
        instance_id=instance_id,
        repo=f"{owner}/{rest.rsplit('-', 1)[0]}",
        FAIL_TO_PASS=ts[FAIL_TO_PASS]["success"] + ts[FAIL_TO_PASS]["failure"],
        PASS_TO_PASS=ts[PASS_TO_PASS]["success"] + ts[PASS_TO_PASS]["failure"],
    )


@pytest.mark.shared_data
def test_official_reports_regraded_from_rendered_logs(official_reports):
    checked = {"pytest": 0, "repo": 0}
    resolved = 0
    for instance_id, entry in official_reports.items():
        task = _task_from_report(instance_id, entry)
        statuses = statuses_from_tests_status(entry["tests_status"])
        logs = {"repo": parse_log(render_log(statuses, task.repo), task.repo)}
        if task.repo != "django/django":  # Django's ids have spaces: see the test above
            logs["pytest"] = parse_pytest_log(render_pytest_log(statuses))
        for kind, parsed in logs.items():
            report = make_report(task, parsed, patch="diff")[instance_id]
            assert report["tests_status"] == entry["tests_status"], (instance_id, kind)
            assert report["resolved"] == entry["resolved"], (instance_id, kind)
            assert set(report) == set(entry), instance_id
            checked[kind] += 1
        resolved += entry["resolved"]
    assert checked == {"repo": 402, "pytest": 171}
    assert resolved == 308


@pytest.mark.shared_data
def test_report_keys_match_for_the_submitted_patches(official_reports, mini_swe_agent_trajectories):
    for traj in mini_swe_agent_trajectories:
        instance_id = traj["instance_id"]
        entry = official_reports[instance_id]
        task = _task_from_report(instance_id, entry)
        patch = traj["info"].get("submission")
        statuses = statuses_from_tests_status(entry["tests_status"])
        report = make_report(task, statuses, patch=patch)[instance_id]
        assert tuple(report) == tuple(entry) == HARNESS_REPORT_KEYS
        assert {k: report[k] for k in HARNESS_REPORT_KEYS[:4]} == {
            k: entry[k] for k in HARNESS_REPORT_KEYS[:4]
        }
