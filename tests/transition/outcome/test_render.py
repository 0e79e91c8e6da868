"""Rendered pytest logs read back (SWE-bench's parsers) to exactly the predicted statuses."""

from __future__ import annotations

import random

import pytest

from sweworld.execution.log_parsers import parse_log, parse_pytest_log
from sweworld.transition.outcome.render import render_pytest, render_traceback

SOURCE = """import pytest


def test_a():
    x = 1
    assert x == 2


class TestK:
    def test_b(self):
        assert True
"""


@pytest.mark.parametrize("seed", range(20))
def test_rA_log_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    statuses = {
        f"tests/test_{f}.py::test_{i}[{p}]": rng.choice(["PASSED", "FAILED", "ERROR", "SKIPPED"])
        for f in range(rng.randint(1, 3))
        for i in range(rng.randint(1, 6))
        for p in ("a", "b-1")
    }
    log = render_pytest(statuses, report_chars="A", exceptions={t: "ValueError" for t in statuses})
    assert parse_pytest_log(log) == statuses
    assert parse_log(log, "pytest-dev/pytest") == statuses
    failed = sum(s == "FAILED" for s in statuses.values())
    assert (f"{failed} failed" in log) == bool(failed)


def test_default_summary_lists_failures_only() -> None:
    statuses = {"tests/test_x.py::test_a": "FAILED", "tests/test_x.py::TestK::test_b": "PASSED"}
    log = render_pytest(statuses, sources={"tests/test_x.py": SOURCE}, exceptions={})
    assert parse_pytest_log(log) == {"tests/test_x.py::test_a": "FAILED"}
    assert "test session starts" in log and "collected 2 items" in log
    assert "tests/test_x.py F." in log and "[100%]" in log
    # the failing test's own source lines, the failing line marked, the exception
    assert ">       assert x == 2" in log and "E       AssertionError" in log
    assert "tests/test_x.py:6: AssertionError" in log
    last = log.splitlines()[-1]
    assert len(last) == 80 and last.strip("=").strip() == "1 failed, 1 passed in 0.12s"


def test_a_module_with_many_failing_tests_is_parsed_once(monkeypatch) -> None:
    """Each failure section shows its test's source; the module's tree is made once for all
    of them, not once per failing test (a 300-test module whose every test is predicted to
    fail took 20 s to render before)."""
    from sweworld import pyast

    source = "\n".join(f"def test_{i}():\n    assert {i} == -1\n" for i in range(300))
    calls = []
    real = pyast.parse
    monkeypatch.setattr(pyast, "parse", lambda *a, **k: calls.append(1) or real(*a, **k))
    statuses = {f"tests/test_many.py::test_{i}": "FAILED" for i in range(300)}
    log = render_pytest(statuses, sources={"tests/test_many.py": source}, exceptions={})
    assert len(calls) <= 1
    assert ">       assert 299 == -1" in log and "tests/test_many.py:599: AssertionError" in log
    assert parse_pytest_log(log) == statuses


def test_quiet_and_collection_error() -> None:
    log = render_pytest({"t.py::test_a": "PASSED"}, quiet=True)
    assert "test session starts" not in log and "1 passed in" in log
    log = render_pytest({}, collection_errors=["tests/test_y.py"], exceptions={})
    assert "ERROR collecting tests/test_y.py" in log and "Interrupted: 1 error" in log
    assert "ERROR tests/test_y.py" in log


def test_traceback_has_a_real_frame() -> None:
    script = "from pkg import f\n\nprint('start')\nf(1)\nx = 2\n"
    tb = render_traceback("KeyError", script="/testbed/r.py", source=script)
    assert tb.splitlines() == [
        "Traceback (most recent call last):",
        '  File "/testbed/r.py", line 4, in <module>',
        "    f(1)",
        "KeyError",
    ]
    assert render_traceback("ValueError", script="-c", source="int('x')", message="bad").endswith(
        "ValueError: bad\n"
    )


def _random_statuses(seed: int, prefix: str, classes: bool) -> dict[str, str]:
    rng = random.Random(seed)
    owner = "::Case" if classes else ""
    return {
        f"{prefix}/test_{f}.py{owner}::test_{f}_{i}": rng.choice(["PASSED", "FAILED", "ERROR"])
        for f in range(rng.randint(1, 3))
        for i in range(rng.randint(1, 5))
    }


@pytest.mark.parametrize("seed", range(10))
def test_sympy_runner_log_round_trips(seed: int) -> None:
    """SWE-bench's SymPy parser reads the verbose log back to the predicted statuses (keyed
    by test name, as SymPy names them) and the default log's failures to the failing ones."""
    from sweworld.transition.outcome.render import render_sympy

    statuses = _random_statuses(seed, "sympy/core/tests", classes=False)
    verbose = parse_log(render_sympy(statuses, verbose=True), "sympy/sympy")
    by_name = {t.split("::")[-1]: s for t, s in statuses.items()}
    assert {k: v for k, v in verbose.items() if ":" not in k} == by_name
    default = render_sympy(statuses)
    headers = {k for k, v in parse_log(default, "sympy/sympy").items() if v == "FAILED"}
    bad = {t.replace("::", ":") for t, s in statuses.items() if s in ("FAILED", "ERROR")}
    assert headers == bad
    assert ("DO *NOT* COMMIT!" in default) == bool(bad)


@pytest.mark.parametrize("seed", range(10))
def test_django_log_round_trips(seed: int) -> None:
    from sweworld.transition.outcome.render import render_django, unittest_name

    statuses = _random_statuses(seed, "tests/auth_tests", classes=True)
    parsed = parse_log(render_django(statuses), "django/django")
    assert parsed == {unittest_name(t[len("tests/") :]): s for t, s in statuses.items()}


def test_unittest_report() -> None:
    from sweworld.transition.outcome.render import render_unittest

    statuses = {
        "tests/test_x.py::Case::test_a": "PASSED",
        "tests/test_x.py::Case::test_b": "FAILED",
    }
    log = render_unittest(statuses, exceptions={"tests/test_x.py::Case::test_b": "ValueError"})
    lines = log.splitlines()
    assert lines[0] == ".F" and "FAIL: test_b (tests.test_x.Case)" in log
    assert "Ran 2 tests in" in log and lines[-1] == "FAILED (failures=1)" and "ValueError" in log
    verbose = render_unittest({"tests/test_x.py::Case::test_a": "PASSED"}, verbose=True)
    assert verbose.splitlines()[0] == "test_a (tests.test_x.Case) ... ok"
    assert verbose.splitlines()[-1] == "OK"


def test_deselected_tests_are_counted_as_pytest_counts_them() -> None:
    text = render_pytest({"tests/test_a.py::test_x": "PASSED"}, deselected=2)
    assert "collected 3 items / 2 deselected / 1 selected" in text
    assert text.rstrip().splitlines()[-1].startswith("=") and "1 passed, 2 deselected in" in text


def test_header_versions_follow_the_task_environment() -> None:
    from sweworld.transition.outcome.pytest_terminal import (
        DEFAULT_PYTEST,
        DEFAULT_PYTHON,
        HARNESS_PYTHON_RELEASES,
        header_versions,
    )

    assert header_versions(None) == (DEFAULT_PYTHON, DEFAULT_PYTEST)
    # SWE-bench: the harness image's Python of the version's major.minor
    sympy = header_versions({"repo": "sympy/sympy", "version": "1.12"})
    assert sympy[0] == HARNESS_PYTHON_RELEASES["3.9"]
    assert header_versions({"repo": "django/django", "version": "3.0"})[0].startswith("3.6.")
    # a row that states its Python and pins its runner
    row = {"repo": "x/y", "environment": {"python": "3.10.4", "runner_version": "7.4.0"}}
    assert header_versions(row) == ("3.10.4", "7.4.0")
    text = render_pytest({"t.py::test_a": "PASSED"}, python="3.9.20", pytest_version="7.4.4")
    assert "platform linux -- Python 3.9.20, pytest-7.4.4, pluggy-1.5.0" in text


def test_pdb_layout_of_the_run_that_stopped_in_the_debugger() -> None:
    """``--pdb``: files finished before the failure keep their percentage, the one where the
    debugger stopped does not; the frame names the test function even when a parameter id
    holds ``::``; a stop on a fixture error shows it once, in the traceback section."""
    from types import SimpleNamespace

    source = "def test_p(a):\n    x = 1\n    assert a == 2\n"
    statuses = {"a.py::test_ok": "PASSED", "t.py::test_q": "PASSED",
                "t.py::test_p[a::b: c]": "FAILED"}  # fmt: skip
    lines = render_pytest(statuses, sources={"t.py": source}, debugger=True).splitlines()
    assert lines[lines.index("t.py .F") - 1].endswith("[ 33%]")
    assert "> /testbed/t.py(3)test_p()" in lines and "-> assert a == 2" in lines
    assert "FAILURES" not in "\n".join(lines) and "Quitting debugger" in lines[-2]
    error = SimpleNamespace(line=1, signature="def test_p(a):", message="fixture 'a' not found")
    text = render_pytest({"t.py::test_p": "ERROR"}, sources={"t.py": source}, debugger=True,
                         setup_errors={"t.py::test_p": error})  # fmt: skip
    assert text.count("fixture 'a' not found") == 1 and "== ERRORS ==" not in text
    assert "(Pdb) " in text.splitlines() and "ERROR t.py::test_p" in text


@pytest.mark.parametrize(
    ("version", "lines"),
    [
        ("5.4.1.dev338+gc98bc4cd3", ["rootdir: /testbed, inifile: tox.ini, testpaths: testing"]),
        ("6.2.5", ["rootdir: /testbed, configfile: tox.ini, testpaths: testing"]),
        ("7.2.0.dev173+gda9a2b584", ["rootdir: /testbed, configfile: tox.ini, testpaths: testing"]),
        ("7.3.0", ["rootdir: /testbed", "configfile: tox.ini", "testpaths: testing"]),
        ("9.0.3", ["rootdir: /testbed", "configfile: tox.ini", "testpaths: testing"]),
    ],
)
def test_header_names_the_layout_as_each_pytest_does(version, lines) -> None:
    """pytest < 6 says ``inifile:``, 6.0-7.2 ``configfile:`` on the rootdir line, 7.3 on
    one line each (pytest's terminal.py of those releases)."""
    text = render_pytest({"testing/test_a.py::test_x": "PASSED"}, pytest_version=version,
                         inifile="/testbed/tox.ini", testpaths=["testing"])  # fmt: skip
    head = text.splitlines()
    assert head[2 : 2 + len(lines)] == lines and head[2 + len(lines)] == "collected 1 item"
    bare = render_pytest({"t.py::test_x": "PASSED"}, pytest_version=version).splitlines()
    assert bare[2:4] == ["rootdir: /testbed", "collected 1 item"]


def test_progress_lines_break_at_the_edge_as_pytest_does() -> None:
    """Letters wrap where the next one would reach column 80 (the percentage so far ends
    the line), every file's last line is filled to column 79, ``-q`` writes one stream
    without paths; a blank line follows the run without ``-q``, none with it."""
    statuses = {"test_two.py::test_a": "PASSED", "test_two.py::test_b": "PASSED"}
    statuses |= {f"test_many.py::test_{i}": "FAILED" if i == 7 else "PASSED" for i in range(100)}
    lines = render_pytest(statuses).splitlines()
    run = lines[lines.index("collected 102 items") + 2 :]
    assert run[:4] == [
        "test_two.py ..".ljust(72) + " [  1%]",
        "test_many.py " + "." * 7 + "F" + "." * 51 + " [ 59%]",
        ("." * 41).ljust(72) + " [100%]",
        "",
    ]
    assert all(len(x) == 79 for x in run[:3]) and run[4].strip("=") == " FAILURES "
    quiet = render_pytest(statuses, quiet=True).splitlines()
    assert quiet[:2] == ["." * 9 + "F" + "." * 62 + " [ 70%]", ("." * 30).ljust(72) + " [100%]"]
    assert quiet[2].strip("=") == " FAILURES "


def test_a_run_stopped_by_x_and_the_report_chars() -> None:
    """``-x``: the run ends at the failure, without a percentage, with pytest's "stopping
    after 1 failures"; the counts line says how many were collected. ``-rA`` opens a PASSES
    section and lists the passed tests, ``-ra`` lists every outcome but them."""
    statuses = {f"t.py::test_{i}": "PASSED" for i in range(3)} | {"t.py::test_3": "FAILED"}
    lines = render_pytest(statuses, maxfail=1, collected=10, report_chars="A").splitlines()
    assert "collected 10 items" in lines and "t.py ...F" in lines
    assert lines[-2] == _stop_banner() and "=" * 36 + " PASSES " + "=" * 36 in lines
    assert "PASSED t.py::test_0" in lines
    listed = render_pytest(statuses, report_chars="a").splitlines()
    assert "PASSED t.py::test_0" not in listed and "FAILED t.py::test_3 - AssertionError" in listed
    assert not any("PASSES" in x for x in listed)
    assert parse_pytest_log(render_pytest(statuses, report_chars="A")) == statuses


def _stop_banner() -> str:
    text = " stopping after 1 failures "
    left = (80 - len(text)) // 2
    return "!" * left + text + "!" * (80 - len(text) - left)


def test_long_names_and_messages_as_pytest_cuts_them() -> None:
    """A short-summary line fits 80 columns (the message cut with ``...``, or left out when
    fewer than 6 columns remain); a failure's title is ``Class.test[param]``, between
    single ``_`` when it is too long for more; the parser still reads every status."""
    short = "t.py::TestA::test_b"
    long = (  # a title pytest printed in a recorded run
        "tests/test_requests.py::TestPreparingURLs::test_redirecting_to_bad_url"
        "[http://localhost:-1-InvalidURL]"
    )
    message = "NameError: name 'xxx' is not defined in this rather long message"
    statuses = {short: "FAILED", long: "FAILED"}
    text = render_pytest(statuses, exceptions=dict.fromkeys(statuses, message))
    lines = text.splitlines()
    cut = next(x for x in lines if x.startswith(f"FAILED {short} - "))
    assert len(cut) == 80 and cut.endswith("...") and message.startswith(cut[len(short) + 10 : -3])
    assert f"FAILED {long}" in lines  # no room left for a message
    assert "_" * 33 + " TestA.test_b " + "_" * 33 in lines
    title = "TestPreparingURLs.test_redirecting_to_bad_url[http://localhost:-1-InvalidURL]"
    assert f"_ {title} _" in lines
    assert parse_pytest_log(text) == statuses


def test_pytests_own_repository_runs_its_own_release() -> None:
    """On pytest's own repository the runner is the checkout, at the release the task names:
    its header takes that release's layout (``inifile:`` for 5.4); elsewhere the pin or the
    default."""
    from sweworld.transition.outcome.pytest_terminal import DEFAULT_PYTEST, header_versions

    python, version = header_versions({"repo": "pytest-dev/pytest", "version": "5.4"})
    assert (python, version) == ("3.9.20", "5.4")
    text = render_pytest({"t.py::test_x": "PASSED"}, pytest_version=version,
                         inifile="/testbed/tox.ini")  # fmt: skip
    assert "rootdir: /testbed, inifile: tox.ini" in text.splitlines()
    assert header_versions({"repo": "pypi/parse"})[1] == DEFAULT_PYTEST


def test_verbose_run_a_line_per_test() -> None:
    """``-v``: the interpreter on the platform line and the cache folder after it (not with
    ``-p no:cacheprovider``), "collecting ... collected", a line per test with its
    percentage at column 79, as pytest 5.4 and 9.0 write them."""
    from sweworld.transition.outcome.pytest_terminal import python_executable

    harness = {"repo": "psf/requests", "version": "2.26"}
    exe = python_executable(harness, "python3")
    assert exe == "/opt/miniconda3/envs/testbed/bin/python3"
    assert python_executable({"repo": "pypi/parse"}, "pytest").endswith("/venv/bin/python")
    statuses = {"test_a.py::test_one": "PASSED", "test_a.py::test_two": "FAILED"}
    lines = render_pytest(statuses, verbose=exe, collected=2).splitlines()
    assert lines[1].endswith(f"pluggy-1.5.0 -- {exe}") and lines[2] == "cachedir: .pytest_cache"
    at = lines.index("collecting ... collected 2 items")
    assert lines[at + 2 : at + 5] == [
        "test_a.py::test_one PASSED".ljust(72) + " [ 50%]",
        "test_a.py::test_two FAILED".ljust(72) + " [100%]",
        "",
    ]
    bare = render_pytest(statuses, verbose=exe, cachedir=False).splitlines()
    assert "cachedir: .pytest_cache" not in bare
    assert parse_pytest_log(render_pytest(statuses, verbose=exe, report_chars="A")) == statuses


def test_stops_tracebacks_quiet_levels_and_summary_order() -> None:
    """``--maxfail=2`` stops at the second failure; ``-x -v`` writes the failing test's line
    whole; ``--tb=no`` writes no FAILURES; ``-qq`` no counts line; ``-q`` with nothing run a
    blank line first; the short summary follows the ``-r`` letters (default ``fE``: failures
    before errors; ``-rP`` is the PASSES section only)."""
    statuses = {f"t.py::test_{i}": "FAILED" if i in (1, 3) else "PASSED" for i in range(4)}
    two = render_pytest(statuses, maxfail=2, collected=9).splitlines()
    assert "t.py .F.F" in two and two[-2].strip("!") == " stopping after 2 failures "
    stopped = {"t.py::test_0": "PASSED", "t.py::test_1": "FAILED"}
    verbose = render_pytest(stopped, maxfail=1, collected=4, verbose="/x/python").splitlines()
    assert "t.py::test_1 FAILED".ljust(72) + " [ 50%]" in verbose
    assert "FAILURES" not in render_pytest(statuses, tb="no")
    assert render_pytest(statuses, quiet=True, quieter=True).splitlines()[-1].startswith("FAILED")
    assert render_pytest({}, quiet=True).splitlines() == ["", "no tests ran in 0.12s"]
    mixed = {"t.py::test_e": "ERROR", "t.py::test_f": "FAILED"}
    summary = [x for x in render_pytest(mixed).splitlines() if x.startswith(("FAILED", "ERROR"))]
    assert [x.split()[0] for x in summary] == ["FAILED", "ERROR"]
    assert [x.split()[0] for x in render_pytest(mixed, report_chars="Ef").splitlines()
            if x.startswith(("FAILED", "ERROR"))] == ["ERROR", "FAILED"]  # fmt: skip
    passes = render_pytest({"t.py::test_p": "PASSED"}, report_chars="P").splitlines()
    assert any("PASSES" in x for x in passes) and "PASSED t.py::test_p" not in passes


def test_default_report_letters_follow_the_release() -> None:
    """Without ``-r``, pytest lists failures and errors in a short summary from 5.4 ("fE"),
    and wrote no short summary before."""
    statuses = {"t.py::test_a": "FAILED", "t.py::test_b": "PASSED"}
    old = render_pytest(statuses, pytest_version="5.3.5", collection_errors=["u.py"])
    assert "short test summary info" not in old and "FAILED t.py::test_a" not in old
    assert "Interrupted: 1 error during collection" in old
    new = render_pytest(statuses, pytest_version="5.4.0", collection_errors=["u.py"])
    assert "short test summary info" in new
    assert "FAILED t.py::test_a - AssertionError" in new and "ERROR u.py" in new
    # -r given: the letters decide in every release
    assert "FAILED t.py::test_a" in render_pytest(
        statuses, pytest_version="5.3.5", report_chars="f"
    )
