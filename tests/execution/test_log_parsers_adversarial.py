"""The log parsers on hostile test output: linear in their input, and still the harness's.

A test run under RL can print anything; the parsers grade real runs (the real reward) and
read every step's output (the dense signal), so output built to make them backtrack must not
stall grading. Each parser reads adversarial logs of ``n`` and ``4 n`` characters (one huge
line of one character, repeated status-like lines, nested brackets, the markers of the
harness's regexes without their ends, ...); reading ``4 n`` must cost less than 10 times
reading ``n`` in CPU time (linear: about 4; the harness's regexes, quadratic or cubic here,
16 or more, and most of them run into the watchdog at these sizes). The results must stay
the harness's: the adversarial families at a size the harness reads quickly and random logs
over the parsers' own tokens are compared with the installed harness (extra ``harness``).
"""

from __future__ import annotations

import gc
import importlib
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from sweworld.execution.log_parsers import (
    END_TEST_OUTPUT,
    PARSERS,
    START_TEST_OUTPUT,
    SUITE_RAN,
    parse_django_log,
    parse_eval_log,
    parse_pytest_options_log,
    parse_sympy_log,
)

# Characters; the large log is 4 times as long. Small enough that a log stays in the CPU's
# caches (past ~100k characters, a log's many lines cost more per line once they no longer
# fit, which a ratio of times would misread), large enough that the harness's regexes are
# unmistakably super-linear (sympy's takes over a second, django's ratio is about 16).
SMALL = 20_000
RATIO = 10  # reading 4 * SMALL characters may cost this many times reading SMALL (linear: 4)
WATCHDOG_S = 5.0  # CPU seconds for one parser's readings of one family


def _eval_reader(log: str) -> dict[str, str]:
    """The eval-log reading (markers, SUITE_RAN, exit code) around a test output."""
    return parse_eval_log(f"{START_TEST_OUTPUT}\n{log}\n{END_TEST_OUTPUT}\n", "some/repo")[0]


READERS: dict[str, Callable[[str], dict[str, str]]] = {**PARSERS, "eval_log": _eval_reader}

# (a prefix, a unit repeated to the size asked): each family attacks some parser's regex or
# loop; every parser reads every family.
FAMILIES: dict[str, tuple[str, str]] = {
    "underscores": ("", "_"),
    "equals": ("", "="),
    "dashes": ("", "-"),
    "spaces": ("", " "),
    "mixed whitespace": ("", " \t\r\x0b\xa0_"),
    "py colons": ("", ".py:"),
    "sympy header parts": ("", "_ a.py:"),
    "sympy header, one space at each end": ("_ ", "a.py:"),
    "opening brackets": ("PASSED x", "["),
    "failed opening brackets": ("FAILED x", "[ - "),
    "bracket pairs": ("PASSED x", "[]"),
    "nested brackets": ("PASSED x", "[(" * 64 + ")]" * 64),
    "skip summary without its end": ("SKIPPED [", "1"),
    "digits": ("", "1"),
    "zeros": ("", "0"),
    "colour codes": ("", "\x1b[1"),
    "colour code without its end": ("[", "1"),
    "separators": ("", " ... "),
    "django testing, one line": ("", "a ... Testing against Django installed in x "),
    "django testing lines": ("", "a ... Testing against Django installed in x\n"),
    "django server error, one line": ("", "a ... Internal Server Error: /x "),
    "django server error lines": ("", "a ... Internal Server Error: /x\n"),
    "django system check lines": ("", "a ... System check identified no issues (0 silenced)\n"),
    "separator lines": ("", "a ... \n"),
    "ok lines": ("", "ok\n"),
    "newlines": ("", "\n"),
    "passed lines": ("", "PASSED t\n"),
    "status suffix lines": ("", "t PASSED\n"),
    "failed lines with messages": ("", "FAILED t - m - m\n"),
    "sympy result lines": ("", "test_a ok\n"),
    "sympy header lines": ("", "____ a.py:b ____\n"),
    "jest suites": ("Test Suites: ", "1 a, "),
    "karma counts": ("Executed ", "1"),
    "jasmine specs": ("", "1 spec, 1"),
    "exit codes": ("", ">>>>> Test Exit Code: "),
}


def adversarial_log(family: str, size: int) -> str:
    prefix, unit = FAMILIES[family]
    return prefix + (unit * (size // len(unit) + 1))[: max(size - len(prefix), 0)]


class _Overdue(Exception):
    pass


@contextmanager
def _watchdog(cpu_seconds: float) -> Iterator[None]:
    """Raise :class:`_Overdue` in the block after ``cpu_seconds`` of the process's CPU time
    (the regex engine checks signals, so a backtracking regex is interrupted too); a no-op
    off the main thread or without interval timers."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def overdue(signum: int, frame: object) -> None:
        raise _Overdue

    previous = signal.signal(signal.SIGVTALRM, overdue)
    signal.setitimer(signal.ITIMER_VIRTUAL, cpu_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def _best_seconds(read: Callable[[str], object], log: str, repeat: int = 5) -> float:
    """The least CPU time (this thread's: other processes do not count) of ``repeat`` reads."""
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        read(log)
        best = min(best, time.thread_time() - started)
    return best


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parser_is_linear_on_adversarial_logs(family):
    small_log, large_log = adversarial_log(family, SMALL), adversarial_log(family, 4 * SMALL)
    slow = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # collections triggered by allocation counts are noise here
    try:
        for name, read in READERS.items():
            try:
                with _watchdog(WATCHDOG_S):
                    small = _best_seconds(read, small_log)
                    large = _best_seconds(read, large_log)
            except _Overdue:
                slow.append(f"{name}: over {WATCHDOG_S} s")
                continue
            if large > RATIO * small + 0.001:
                slow.append(f"{name}: {small * 1e3:.1f} ms -> {large * 1e3:.1f} ms")
    finally:
        if gc_was_enabled:
            gc.enable()
    assert not slow, f"super-linear on {family!r} ({SMALL} -> {4 * SMALL} characters): {slow}"


# --- the same results as the harness --------------------------------------------------------


def test_sympy_failure_headers_as_the_harness_reads_them():
    log = (
        "________ sympy/core/tests/test_basic.py:test_equality ________\n"
        "x_ a.py:b.py:c d e\n"  # the match starts at the first space; the last .py: wins
        "a.py:b\n"  # no space: no header
        " a.py:b\n"  # no space after the .py:
        "  .py: \n"  # an empty path and name
        "test_one ok\n"
    )
    assert parse_sympy_log(log) == {
        "sympy/core/tests/test_basic.py:test_equality": "FAILED",
        "a.py:b.py:c d": "FAILED",
        " .py:": "FAILED",
        "test_one": "PASSED",
    }


def test_django_interrupted_tests_as_the_harness_reads_them():
    # The interrupted-test regexes keep the line's indentation and read a separator whose
    # whitespace is a newline; the line-by-line reading strips and wants " ... ".
    log = (
        "  test_a (m.T) ... Testing against Django installed in '/d'\n"
        "System check identified no issues (0 silenced).\nok\n"
        "\ttest_b (m.T) ... Internal Server Error: /x/\nok\n"
        "test_c (m.T)\n... System check identified no issues (0 silenced)\nok\n"
        " test_d (m.T) ... Internal Server Error: /x\nok\n"  # the line must end with /
        " test_e (m.T) ... Testing against Django installed in '/d' (0 silenced).\nokay\n"
    )
    assert parse_django_log(log) == {
        "test_a (m.T)": "PASSED",
        "test_b (m.T)": "PASSED",
        "test_d (m.T)": "PASSED",  # "ok" after its " ... " line
        "test_e (m.T)": "PASSED",  # "okay" starts with "ok"
        "  test_a (m.T)": "PASSED",
        "\ttest_b (m.T)": "PASSED",
        "test_c (m.T)": "PASSED",
    }


def test_pytest_options_ids_as_the_harness_reads_them():
    log = (
        "PASSED t.py::test_a[/tmp/x/y.txt]tail\n"
        "PASSED t.py::test_b[a][b]\n"
        "PASSED t.py::test_c]x[\n"
        "PASSED t.py::test_d[//net/x]\n"
        "PASSED t.py::test_e[[[\n"
    )
    assert parse_pytest_options_log(log) == {
        "t.py::test_a[/y.txt]": "PASSED",
        "t.py::test_b[a][b]": "PASSED",
        "t.py::test_c]x[": "PASSED",
        "t.py::test_d[//net/x]": "PASSED",
        "t.py::test_e[[[": "PASSED",
    }


@pytest.mark.parametrize(
    "text, ran",
    [
        ("12 passing", True),
        ("0012 passing", True),
        ("000 passing", False),
        ("\u06631 passing", True),  # an Arabic-Indic digit before the count is still a digit
        ("\u0663 passing", False),
        ("3 specs, 0 failures", True),
        ("3 specs, failures", False),
        ("Test Suites: 1 failed, 2 total", True),
        ("Test Suites: 2 total, 3 x", True),
        ("Test Suites: 0 total", False),
        ("Executed 0 of 3", False),
        ("Executed 2 of 3", True),
        ("1" * 200_000 + " passin", False),
    ],
)
def test_suite_ran_answers_as_the_harness(text, ran):
    with _watchdog(WATCHDOG_S):
        assert bool(SUITE_RAN.search(text)) is ran


@pytest.fixture(scope="module")
def harness():
    """``(parsers by name, the harness's SUITE_RAN)`` from the installed harness, loaded as
    the parity tests load it (a skip without the harness, a failure where CI requires it)."""
    parity = importlib.import_module("tests.execution.test_harness_parity")
    python = parity.HARNESS_PARSERS
    parsers = {
        "pytest": python.parse_log_pytest,
        "pytest_options": python.parse_log_pytest_options,
        "pytest_v2": python.parse_log_pytest_v2,
        "django": python.parse_log_django,
        "sympy": python.parse_log_sympy,
        "matplotlib": python.parse_log_matplotlib,
        "seaborn": python.parse_log_seaborn,
    }
    return parsers, parity.HARNESS_GRADING.SUITE_RAN


def _harness_reading(parse: Callable, log: str) -> dict[str, str] | None:
    """The harness's statuses, or None where it raises (django on a bare ``FAIL:`` line, a
    known and pinned difference)."""
    try:
        return parse(log, None)
    except IndexError:
        return None


def test_adversarial_families_read_as_the_harness_reads_them(harness):
    parsers, _ = harness
    for family in FAMILIES:
        log = adversarial_log(family, 300)  # the harness's regexes are cubic at worst
        for name, parse in parsers.items():
            want = _harness_reading(parse, log)
            if want is not None:
                assert PARSERS[name](log) == want, (family, name)


# Tokens that build the logs the reimplemented regexes must read as the harness does.
TOKENS = {
    "sympy": ["_", " ", ".py:", "a", "\n", "test_", " ok", " F", " E", "p", "y", ":", "\t"],
    "django": [
        "a",
        " ",
        " ... ",
        "...",
        "\n",
        "\t",
        "\xa0",
        "ok",
        "\nok",
        "Testing against Django installed in ",
        " silenced).",
        " silenced).\nok",
        "Internal Server Error: /",
        "/",
        "System check identified no issues (0 silenced)",
        " ... ok",
        "FAIL: x",
    ],
    "options": ["PASSED ", "FAILED ", "SKIPPED ", "[", "]", "/", "//", "*", "a", " ", "\n"],
}
SEPARATORS = [" ... ", "\n...\n", " ...\n", "\n... ", "\xa0...\t", " .. "]
MESSAGES = [
    "Testing against Django installed in x",
    " silenced).",
    "Internal Server Error: /x/",
    "Internal Server Error: /x",
    "Internal Server Error: /",
    "System check identified no issues (0 silenced)",
    "",
]


def _django_like(rng: random.Random) -> str:
    """Lines of ``<test><separator><message>[newline]<tail>``: the shapes the harness's
    interrupted-test regexes look for, complete or not."""
    parts = []
    for _ in range(rng.randint(1, 5)):
        parts.append(
            rng.choice(["a", "", "b c", "a ... b"])
            + rng.choice(SEPARATORS)
            + rng.choice(MESSAGES)
            + rng.choice(["\n", ""])
            + rng.choice(["ok", "ok ", "okay", "", "x"])
            + rng.choice(["\n", "", " "])
        )
    return "".join(parts)


def test_random_logs_read_as_the_harness_reads_them(harness):
    parsers, _ = harness
    rng = random.Random(20261201)
    for _ in range(1500):
        logs = [
            "".join(rng.choice(tokens) for _ in range(rng.randint(0, 40)))
            for tokens in TOKENS.values()
        ]
        logs.append(_django_like(rng))
        for log in logs:
            for name, parse in parsers.items():
                want = _harness_reading(parse, log)
                if want is not None:
                    got = PARSERS[name](log)
                    assert list(got.items()) == list(want.items()), (name, log)


def test_suite_ran_finds_a_match_where_the_harness_does(harness):
    _, harness_suite_ran = harness
    tokens = ["1", "0", "2", "\u0663", " ", " passing", " spec", " specs", ", ", "1 failure"]
    tokens += ["Executed ", " of ", "TOTAL: ", " SUCCESS", "Tests:", "Test Suites:", " total"]
    tokens += ["a", "\n", "# tests ", "': ok", "\t", "1 a, "]
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 30)))
        assert bool(SUITE_RAN.search(text)) is bool(harness_suite_ran.search(text)), text
