"""Outcomes fixed by skip / xfail marks, checked against real pytest on the same file."""

from __future__ import annotations

import subprocess
import sys

from sweworld.execution.log_parsers import parse_pytest_log
from sweworld.transition.outcome.marks import apply_marks, marked_outcomes, summary_details
from sweworld.transition.outcome.render import render_pytest

SOURCE = '''\
import sys
import unittest

import pytest


@pytest.mark.skip(reason="not today")
def test_skipped():
    assert False


@pytest.mark.skipif(True, reason="always")
def test_skipif_true():
    assert False


@pytest.mark.skipif(sys.platform == "nowhere", reason="depends")
def test_skipif_unknown():
    assert True


def test_skips_in_body():
    """A docstring first."""
    pytest.skip("later")


@pytest.mark.xfail
def test_xfail_fails():
    assert False


@pytest.mark.xfail(reason="flaky")
def test_xfail_fails_too():
    assert False


@pytest.mark.xfail(strict=True)
def test_xfail_strict_fails():
    assert False


@pytest.mark.xfail(raises=KeyError)
def test_xfail_raises():
    assert False


@pytest.mark.xfail(run=False)
def test_xfail_not_run():
    assert True


@pytest.mark.parametrize("x", [1, 2])
@pytest.mark.xfail
def test_xfail_param(x):
    assert x == 3


class TestMarkedClass:
    pytestmark = pytest.mark.skip

    def test_method(self):
        pass


@unittest.skip("old")
class TestOld(unittest.TestCase):
    def test_a(self):
        pass


def test_plain():
    assert True


@pytest.mark.skip(reason="cls")
class TestDecoratedClass:
    def test_b(self):
        pass

    @pytest.mark.xfail
    def test_c(self):
        pass
'''

#: what the model would say for each test (the code's own result)
MODEL = {
    "test_skipped": "FAILED",
    "test_skipif_true": "FAILED",
    "test_skipif_unknown": "PASSED",
    "test_skips_in_body": "PASSED",
    "test_xfail_fails": "FAILED",
    "test_xfail_fails_too": "PASSED",
    "test_xfail_strict_fails": "ERROR",
    "test_xfail_raises": "FAILED",
    "test_xfail_not_run": "PASSED",
    "test_xfail_param[1]": "PASSED",
    "test_xfail_param[2]": "FAILED",
    "TestMarkedClass::test_method": "PASSED",
    "TestOld::test_a": "PASSED",
    "test_plain": "PASSED",
    "TestDecoratedClass::test_b": "FAILED",
    "TestDecoratedClass::test_c": "FAILED",
}


def _ids() -> list[str]:
    return [f"test_m.py::{name}" for name in MODEL]


def test_marks_read_from_the_source() -> None:
    marked = marked_outcomes({"test_m.py": SOURCE}.get, _ids())
    short = {t.split("::", 1)[1]: v.outcome for t, v in marked.items()}
    assert short == {
        "test_skipped": "skip",
        "test_skipif_true": "skip",
        "test_skips_in_body": "skip-call",
        "test_xfail_fails": "xfail",
        "test_xfail_fails_too": "xfail",
        "test_xfail_strict_fails": "xfail-strict",
        "test_xfail_not_run": "xfail-notrun",
        "test_xfail_param[1]": "xfail",
        "test_xfail_param[2]": "xfail",
        "TestMarkedClass::test_method": "skip",
        "TestOld::test_a": "skip",
        "TestDecoratedClass::test_b": "skip",
        "TestDecoratedClass::test_c": "skip",
    }
    # --runxfail turns the xfail marks off, not the skips
    off = marked_outcomes({"test_m.py": SOURCE}.get, _ids(), runxfail=True)
    assert not any(v.outcome.startswith("xfail") for v in off.values())
    assert off["test_m.py::test_skipped"].outcome == "skip"
    # unreadable or unparsable files, unknown ids: nothing claimed
    assert marked_outcomes({"test_m.py": "def f(:\n"}.get, _ids()) == {}
    assert marked_outcomes({}.get, ["nothere.py::test_a", "test_m.py"]) == {}


def test_rendered_run_matches_real_pytest(tmp_path) -> None:
    (tmp_path / "test_m.py").write_text(SOURCE)
    real = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_m.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    marked = marked_outcomes({"test_m.py": SOURCE}.get, _ids())
    statuses = {
        t: apply_marks(MODEL[t.split("::", 1)[1]], marked[t]) if t in marked else
        MODEL[t.split("::", 1)[1]]
        for t in _ids()
    }  # fmt: skip
    ours = render_pytest(
        statuses,
        report_chars="A",
        **summary_details(statuses, marked),
    )
    real_last = real.stdout.strip().splitlines()[-1]
    ours_last = ours.strip().splitlines()[-1]
    # the same counts, in the same order (the durations differ)
    assert ours_last.split(" in ")[0] == real_last.split(" in ")[0], (ours_last, real_last)
    assert real.returncode == int("FAILED" in statuses.values()) == 1
    # the progress letters of the file agree
    real_letters = next(ln for ln in real.stdout.splitlines() if ln.startswith("test_m.py "))
    ours_letters = next(ln for ln in ours.splitlines() if ln.startswith("test_m.py "))
    assert ours_letters.split()[1] == real_letters.split()[1]

    # the short summaries are the same lines, in the same order (the failure's message is
    # the model's: the assertion's text is not predicted)
    def summary(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, ln in enumerate(lines) if "short test summary info" in ln)
        cut = "FAILED test_m.py::test_xfail_raises - "
        return [ln if not ln.startswith(cut) else cut for ln in lines[start + 1 : -1]]

    assert summary(ours) == summary(real.stdout)
    # SWE-bench's parser reads the same statuses from both logs
    assert parse_pytest_log(ours) == parse_pytest_log(real.stdout)


def test_xfail_reason_layout_follows_the_release() -> None:
    """Before pytest 7.2 an xfail's reason has a line of its own; from 7.2 it follows " - "."""
    statuses = {"t.py::test_a": "XFAIL", "t.py::test_b": "PASSED"}
    for version, expected in (
        ("5.4.3", ["XFAIL t.py::test_a", "  flaky"]),
        ("7.2.0", ["XFAIL t.py::test_a - flaky"]),
    ):
        text = render_pytest(
            statuses, report_chars="x", messages={"t.py::test_a": "flaky"}, pytest_version=version
        )
        lines = text.splitlines()
        start = next(i for i, ln in enumerate(lines) if "short test summary info" in ln)
        assert lines[start + 1 : -1] == expected
        assert lines[-1].startswith("=") and "1 passed, 1 xfailed in" in lines[-1]


def test_report_letters_come_from_the_ini_addopts_unless_the_command_names_them(
    tmp_path,
) -> None:
    """pytest's own repository runs with ``addopts = -rfEX`` in its tox.ini: the summary
    lists xfails there without a ``-r`` on the command line."""
    from sweworld.transition.outcome.collect import collect_tests
    from sweworld.transition.types import WorkspaceView

    (tmp_path / "tox.ini").write_text("[pytest]\naddopts = -rfEX -p no:cacheprovider\n")
    (tmp_path / "test_m.py").write_text(SOURCE)
    view = WorkspaceView(tmp_path, base=tmp_path)
    found = collect_tests(view, ("pytest", "test_m.py"), "/testbed")
    assert found is not None and found.report_chars == "fEX"
    found = collect_tests(view, ("pytest", "-rs", "test_m.py"), "/testbed")
    assert found is not None and found.report_chars == "s"


TRICKY = """\
import sys
import unittest

import pytest

HAVE = False


@pytest.mark.skipif(True)
def test_bool_without_reason():
    pass


@pytest.mark.xfail(True)
def test_xfail_bool_without_reason():
    assert 0


@pytest.mark.skip(True, reason="x")
def test_skip_with_condition():
    pass


@pytest.mark.skip(reason="old")
def test_defined_twice():
    pass


def test_defined_twice():
    pass


@pytest.mark.xfail(reason="fn")
@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.skip(reason="p"))])
def test_param_marks(x):
    assert 0


@pytest.mark.xfail(reason="x")
def test_xfail_then_body_skip():
    pytest.skip("body")


@pytest.fixture
def broken():
    raise RuntimeError("boom")


def test_body_skip_after_broken_fixture(broken):
    pytest.skip("later")


class Base:
    pytestmark = pytest.mark.skip(reason="base")


class TestChild(Base):
    @pytest.mark.xfail(reason="own")
    def test_inherits(self):
        assert 0


def skip(reason):
    return pytest.mark.skipif(not HAVE, reason=reason)


@skip("needs numpy")
def test_local_helper_named_skip():
    pass


@unittest.skip("cls")
class TestNotACase:
    def test_plain_class(self):
        pass


@pytest.mark.skip(reason="top")
@pytest.mark.skip(reason="bottom")
def test_two_skips():
    pass


@pytest.mark.skipif(sys.platform == "nowhere", reason="mark")
def test_unknown_condition_then_body_skip():
    pytest.skip("body")


requires_net = pytest.mark.skipif(True, reason="no net")


@requires_net
@pytest.mark.xfail(reason="x")
def test_mark_through_a_variable():
    assert 0


@pytest.mark.skip(msg="x")
def test_skip_with_an_unknown_keyword():
    pass


@pytest.mark.skipif(**{"condition": False, "reason": "r"})
def test_skipif_with_kwargs():
    pass


@pytest.mark.xfail(run=False, reason="nr")
def test_not_run_before_a_body_skip():
    pytest.skip("body")


@pytest.mark.skip(reason="gone")
def test_rebound_later():
    pass


if True:
    def test_rebound_later():
        pass


@pytest.mark.xfail(reason="prior")
def test_xfail_the_model_says_skipped():
    assert 0
"""

#: the model's statuses (the code's own result as a model would guess it)
TRICKY_MODEL = {
    "test_body_skip_after_broken_fixture": "ERROR",
    "test_param_marks[1]": "FAILED",
    "test_param_marks[2]": "FAILED",
    "TestChild::test_inherits": "FAILED",
    "test_xfail_bool_without_reason": "FAILED",
    "test_xfail_the_model_says_skipped": "SKIPPED",
}


def test_claims_agree_with_real_pytest_on_tricky_marks(tmp_path) -> None:
    """What the marks module claims about each test agrees with real pytest, and where it
    cannot be sure (errors pytest raises about the marks themselves, redefinitions,
    inherited or parametrize marks, look-alike decorators) it claims nothing."""
    (tmp_path / "test_t.py").write_text(TRICKY)
    real = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", "test_t.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    verdicts = {}
    for line in real.stdout.splitlines():
        head = line.split(" ", 2)
        if len(head) >= 2 and head[0].startswith("test_t.py::"):
            verdicts.setdefault(head[0], head[1])
    ids = list(verdicts)
    marked = marked_outcomes({"test_t.py": TRICKY}.get, ids)
    claimed = {t.split("::", 1)[1]: apply_marks(
        TRICKY_MODEL.get(t.split("::", 1)[1], "PASSED"), m) for t, m in marked.items()}  # fmt: skip
    assert claimed == {
        "test_xfail_then_body_skip": "SKIPPED",
        "test_body_skip_after_broken_fixture": "ERROR",
        "test_two_skips": "SKIPPED",
        "test_not_run_before_a_body_skip": "XFAIL",
        # the model's SKIPPED is its labels' fold of XFAIL: the mark's XFAIL stands
        "test_xfail_the_model_says_skipped": "XFAIL",
    }
    for name, status in claimed.items():
        assert verdicts[f"test_t.py::{name}"] == status, name
    assert marked["test_t.py::test_two_skips"].reason == "bottom"


def test_no_claims_when_the_skipping_plugin_is_off() -> None:
    from sweworld.transition.facts.pytest_args import parse_pytest_args
    from sweworld.transition.outcome.marks import command_marks

    text_of = {"test_m.py": SOURCE}.get
    assert command_marks(text_of, _ids(), parse_pytest_args(["-p", "no:skipping"])) == {}
    on = command_marks(text_of, _ids(), parse_pytest_args(["--runxfail"]))
    # (no test is claimed to fail: the module calls pytest.skip in a body)
    assert on and all(m.outcome in ("skip", "skip-call") for m in on.values())


def test_marks_off_through_the_ini_addopts() -> None:
    from sweworld.transition.outcome.marks import command_marks

    text_of = {"test_m.py": SOURCE}.get
    assert command_marks(text_of, _ids(), None, ("-p", "no:skipping")) == {}
    on = command_marks(text_of, _ids(), None, ("--runxfail",))
    assert on and not any(m.outcome.startswith("xfail") for m in on.values())


def test_notrun_reason_wording_by_release() -> None:
    from sweworld.transition.outcome.marks import Marked, summary_message

    notrun = Marked("xfail-notrun", 3, "nr")
    assert summary_message("XFAIL", notrun, "7.4.4") == "reason: [NOTRUN] nr"
    assert summary_message("XFAIL", notrun, "8.4.0") == "[NOTRUN] nr"
    assert summary_message("SKIPPED", notrun, "8.4.0") is None


def test_pytest_addopts_from_the_environment_are_split_as_a_shell_would() -> None:
    from sweworld.transition.facts.pytest_args import env_addopts

    assert env_addopts({"PYTEST_ADDOPTS": "--runxfail -k 'a and b'"}) == [
        "--runxfail", "-k", "a and b",
    ]  # fmt: skip
    assert env_addopts({"PYTEST_ADDOPTS": "-k 'open"}) == ["-k", "'open"]
    assert env_addopts(None) == [] and env_addopts({}) == []
