"""Dense per-step signals: the tracker of the task's tests and the shaped step reward."""

from __future__ import annotations

import time

import pytest

from sweworld.env import signals
from sweworld.env.signals import dense_signal, signals_info

Tracker = signals.TestTracker  # (a name pytest does not collect)

F2P = "tests/test_textutil.py::test_slugify_collapses_separators"
P2P = "tests/test_textutil.py::test_wrap"


def pytest_log(**statuses: str) -> str:
    """A ``pytest -rA`` short summary: ``name=STATUS`` for tests of tests/test_textutil.py."""
    lines = ["=========================== short test summary info ============================"]
    for name, status in statuses.items():
        lines.append(f"{status} tests/test_textutil.py::{name}")
    return "\n".join(lines) + "\n"


def test_for_task_takes_the_tasks_tests(toy_task):
    tracker = Tracker.for_task(toy_task)
    assert tracker.tests[0] == F2P
    assert len(tracker.tests) == len(toy_task.FAIL_TO_PASS) + len(toy_task.PASS_TO_PASS)
    assert tracker.repo == toy_task.repo and tracker.passing() == 0.0


def test_update_reports_fixed_and_broken_tests():
    tracker = Tracker(tests=(F2P, P2P), repo="sweworld/stockroom")
    delta, changes = tracker.update(
        pytest_log(test_slugify_collapses_separators="FAILED", test_wrap="PASSED")
    )
    assert delta == pytest.approx(0.5) and changes == {"fixed": [P2P], "broken": []}
    delta, changes = tracker.update(
        pytest_log(test_slugify_collapses_separators="PASSED", test_wrap="FAILED")
    )
    assert delta == 0.0 and changes == {"fixed": [F2P], "broken": [P2P]}
    delta, changes = tracker.update(pytest_log(test_wrap="PASSED"))  # F2P not in this run
    assert delta == pytest.approx(0.5) and changes == {"fixed": [P2P], "broken": []}
    assert tracker.passing() == 1.0 and tracker.known[F2P] == "PASSED"


def test_outputs_without_the_tasks_tests_change_nothing():
    tracker = Tracker(tests=(F2P,), repo="sweworld/stockroom")
    for output in ("", "hello\n", pytest_log(test_other="PASSED")):
        assert tracker.update(output) == (0.0, {"fixed": [], "broken": []})
    assert tracker.known == {}
    empty = Tracker(tests=(), repo="sweworld/stockroom")
    assert empty.update(pytest_log(test_wrap="PASSED"))[0] == 0.0 and empty.passing() == 0.0


def test_update_is_linear_in_the_output():
    tests = tuple(f"tests/test_textutil.py::test_{i}" for i in range(20_000))
    tracker = Tracker(tests=tests, repo="sweworld/stockroom")
    output = pytest_log(**{f"test_{i}": "PASSED" for i in range(20_000)})
    started = time.perf_counter()
    delta, changes = tracker.update(output)
    assert time.perf_counter() - started < 5.0  # quadratic took ~45 s here
    assert delta == 1.0 and len(changes["fixed"]) == 20_000


def test_dense_signal_and_info():
    assert dense_signal(0.0, step_penalty=0.01, test_weight=0.5) == -0.01
    assert dense_signal(0.2, step_penalty=0.01, test_weight=0.5) == pytest.approx(0.09)
    assert dense_signal(-1.0, step_penalty=0.0, test_weight=1.0) == -1.0
    tracker = Tracker(tests=(F2P, P2P), repo="sweworld/stockroom")
    delta, changes = tracker.update(pytest_log(test_wrap="PASSED"))
    info = signals_info(tracker, delta, changes, 0.24)
    assert info == {
        "dense": 0.24,
        "tests_passing": 0.5,
        "tests_delta": 0.5,
        "tests_fixed": [P2P],
        "tests_broken": [],
    }


# Output a test can print to stall the dense signal: every log parser is linear in its input
# (tests/execution/test_log_parsers_adversarial.py), so a step's whole output is read.
ADVERSARIAL_UNITS = [
    "_",  # one line: quadratic in the SWE-bench sympy regex
    "_ a.py:",
    " ",
    "1",  # a run of digits: quadratic in the SWE-bench SUITE_RAN regex
    "PASSED x[",  # cubic in SWE-bench's pytest-options id regex
    "a ... Testing against Django installed in x\n",  # quadratic in lines (django)
    "a ... Internal Server Error: /x ",
    "\n",
]


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
@pytest.mark.parametrize(
    "repo", ["sympy/sympy", "django/django", "psf/requests", "astropy/astropy", "x/y"]
)
def test_the_dense_signal_reads_a_400k_adversarial_step_well_under_a_second(repo, unit):
    tracker = Tracker(tests=("sympy/a.py:test_a", "test_a", "t.py::test_a"), repo=repo)
    output = (unit * (400_000 // len(unit) + 1))[:400_000]
    started = time.thread_time()  # CPU time: other processes on the machine do not count
    delta, changes = tracker.update(output)
    assert time.thread_time() - started < 0.5
    assert delta == 0.0 and changes == {"fixed": [], "broken": []}


def test_status_lines_anywhere_in_a_long_output_are_read():
    """The whole output is read: a status in the middle of a long Django run, and a status
    line longer than any bound on line length (a long parametrized id)."""
    django = Tracker(tests=("test_a (m.T)",), repo="django/django")
    filler = "".join(f"test_{i} (m.T) ... ok\n" for i in range(10_000))  # ~200k characters
    delta, changes = django.update(filler + "test_a (m.T) ... ok\n" + filler)
    assert delta == 1.0 and changes["fixed"] == ["test_a (m.T)"]
    long_id = "t.py::test_a[" + "x" * 5_000 + "]"
    pytest_tracker = Tracker(tests=(long_id,), repo="x/y")
    delta, changes = pytest_tracker.update(f"{'_' * 100_000}\nPASSED {long_id}\n")
    assert delta == 1.0 and changes["fixed"] == [long_id]
