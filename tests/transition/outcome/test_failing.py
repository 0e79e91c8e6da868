"""Tests that fail whatever the code under test does (outcome/failing.py), checked against
real pytest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sweworld.transition.outcome.marks import apply_marks, marked_outcomes

SOURCE = '''\
import os
import sys
import unittest

import pytest


def helper():
    return 1


def test_assert_zero():
    """A docstring first."""
    value = helper()
    assert 0


def test_assert_false_message():
    assert False, "not yet"


def test_raise_call():
    raise ValueError("boom")


def test_raise_from_nested_try():
    try:
        try:
            raise KeyError(1)
        except Exception as e1:
            raise ValueError(2) from e1
    except Exception as e2:
        raise ValueError(3) from e2


def test_pytest_fail():
    pytest.fail("explicit")


def test_if_both_branches_fail():
    if sys.platform == "nowhere":
        raise KeyError("a")
    else:
        assert False


@pytest.mark.parametrize("x", [1, 2])
def test_param_fails(x):
    assert 0


class TestInClass:
    def test_method(self):
        raise RuntimeError("x")


class TestCaseFails(unittest.TestCase):
    def test_fail_call(self):
        self.fail("nope")


class TestSetUpRaises(unittest.TestCase):
    def setUp(self):
        raise ValueError("setup failed")

    def test_one(self):
        pass


@pytest.mark.xfail(reason="known")
def test_xfail_mark_first():
    assert 0


def test_skip_call_before():
    pytest.skip("not here")


def test_conditional_skip_before():
    if helper() == 1:
        pytest.skip("maybe")
    assert 0


def test_dynamic_xfail_before(request):
    request.node.add_marker(pytest.mark.xfail(reason="dyn"))
    assert 0


def test_imperative_xfail_before():
    pytest.xfail("imperative")
    assert 0


def test_return_before():
    if helper():
        return
    assert 0


def test_raises_context():
    with pytest.raises(ValueError):
        raise ValueError("expected")


def test_try_swallows():
    try:
        raise ValueError("x")
    except ValueError:
        pass


def test_assert_true_literal():
    assert 1


def test_raise_skip_exception():
    raise pytest.skip.Exception("skip it")


def test_raise_unittest_skiptest():
    raise unittest.SkipTest("skip it")


def my_decorator(f):
    return f


@my_decorator
def test_other_decorator():
    assert 0


@pytest.fixture
def xfails(request):
    request.node.add_marker(pytest.mark.xfail(reason="from a fixture"))


def test_fixture_xfails(xfails):
    assert 0


@pytest.mark.parametrize("y", [1], indirect=True)
def test_indirect(y):
    assert 0


def test_exit_before():
    if helper() == 2:
        pytest.exit("stop")
    assert 0


def test_try_with_finally():
    try:
        raise ValueError("x")
    finally:
        pass
'''

#: tests the module claims, with the exception each raises
CLAIMED = {
    "test_assert_zero": "AssertionError",
    "test_assert_false_message": "AssertionError",
    "test_raise_call": "ValueError",
    "test_raise_from_nested_try": "ValueError",
    "test_pytest_fail": "Failed",
    "test_if_both_branches_fail": "",
    "test_param_fails[1]": "AssertionError",
    "test_param_fails[2]": "AssertionError",
    "TestInClass::test_method": "RuntimeError",
    "TestCaseFails::test_fail_call": "AssertionError",
    "TestSetUpRaises::test_one": "ValueError",
}


def _real(tmp_path, source: str) -> dict[str, str]:
    (tmp_path / "test_f.py").write_text(source)
    real = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "test_f.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    verdicts: dict[str, str] = {}
    for line in real.stdout.splitlines():
        head = line.split(" ", 2)
        if len(head) >= 2 and head[0].startswith("test_f.py::"):
            verdicts.setdefault(head[0].split("::", 1)[1], head[1])
    return verdicts


def test_claims_are_exactly_the_tests_that_surely_fail(tmp_path) -> None:
    verdicts = _real(tmp_path, SOURCE)
    ids = [f"test_f.py::{name}" for name in verdicts]
    marked = marked_outcomes({"test_f.py": SOURCE}.get, ids)
    fails = {t.split("::", 1)[1]: m.reason for t, m in marked.items() if m.outcome == "fail"}
    assert fails == CLAIMED
    # every claim is what real pytest shows, whatever the model said
    for name in fails:
        claimed = apply_marks("PASSED", marked[f"test_f.py::{name}"])
        assert verdicts[name] == claimed == "FAILED", name
    # and the tests left alone are the ones real pytest does not fail for sure
    assert verdicts["test_xfail_mark_first"] == "XFAIL"
    assert verdicts["test_dynamic_xfail_before"] == "XFAIL"
    assert verdicts["test_conditional_skip_before"] == "SKIPPED"
    assert verdicts["test_raise_skip_exception"] == "SKIPPED"
    assert verdicts["test_return_before"] == "PASSED"
    assert verdicts["test_raises_context"] == "PASSED"
    assert verdicts["test_fixture_xfails"] == "XFAIL"


@pytest.mark.parametrize(
    "where, text",
    [
        ("test_f.py", "@pytest.fixture(autouse=True)\ndef skipper():\n    pytest.skip('no')\n"),
        ("conftest.py", "def pytest_runtest_setup(item):\n    pass\n"),
        ("conftest.py", "import pytest\n@pytest.fixture(autouse=True)\ndef f():\n    pass\n"),
    ],
)
def test_nothing_claimed_where_an_autouse_fixture_or_hook_governs(where: str, text: str) -> None:
    source = "import pytest\n\n\ndef test_x():\n    assert 0\n"
    files = {"test_f.py": source}
    files[where] = (files.get(where, "") + "\n" + text).lstrip()
    nested = {f"sub/{k}" if k == "test_f.py" else k: v for k, v in files.items()}
    for tree, test in ((files, "test_f.py::test_x"), (nested, "sub/test_f.py::test_x")):
        assert marked_outcomes(tree.get, [test]) == {}, (where, test)
    clean = {"test_f.py": source}
    assert marked_outcomes(clean.get, ["test_f.py::test_x"])["test_f.py::test_x"].outcome == "fail"


def test_a_predicted_setup_error_comes_first() -> None:
    marked = marked_outcomes({"test_f.py": SOURCE}.get, ["test_f.py::test_assert_zero"])
    assert apply_marks("ERROR", marked["test_f.py::test_assert_zero"]) == "ERROR"
    assert apply_marks("SKIPPED", marked["test_f.py::test_assert_zero"]) == "FAILED"


@pytest.mark.parametrize(
    "body",
    [
        "    while True:\n        pass\n    assert 0\n",  # a loop that may not end
        "    os._exit(3)\n    assert 0\n",  # the process ends first
        "    import pdb; pdb.set_trace()\n    assert 0\n",  # the debugger first
        "    raise\n",  # a bare raise: what it raises is not known here
        "    assert 0\n    yield 1\n",  # a generator: pytest refuses it at collection
    ],
)
def test_nothing_claimed_where_something_may_come_first(body: str) -> None:
    source = f"import os\n\n\ndef test_x():\n{body}"
    assert marked_outcomes({"t.py": source}.get, ["t.py::test_x"]) == {}


def test_huge_test_body_stays_linear() -> None:
    """A body of many statements is read once: no quadratic walk over what comes before."""
    body = "".join(f"    x{i} = {i}\n" for i in range(20_000)) + "    assert 0\n"
    source = f"def test_big():\n{body}"
    marked = marked_outcomes({"t.py": source}.get, ["t.py::test_big"])
    assert marked["t.py::test_big"].outcome == "fail"
