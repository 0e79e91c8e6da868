"""Tests that fail whatever the code under test does (outcome/failing.py), checked against
real pytest."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sweworld.transition.outcome.marks import apply_marks, marked_outcomes

SOURCE = '''\
import unittest

import pytest


def helper():
    return 1


def test_assert_zero():
    """A docstring first."""
    assert 0


def test_assert_false_message():
    assert False, "not yet"


def test_after_a_call():
    value = helper()
    print(value)
    assert 0, f"got {value}"


def test_raise_call():
    print("about to fail")
    raise ValueError("boom")


def test_raise_alias_shows_its_class():
    raise IOError("old name")


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
    if helper() == 2:
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


class TestSetUpPrints(unittest.TestCase):
    def setUp(self):
        print("set up")

    def tearDown(self):
        print("torn down")

    def test_two(self):
        raise KeyError("after the set-up")


def test_handler_raises_from_another_cause():
    try:
        raise KeyError("a")
    except KeyError:
        raise ValueError("b") from RuntimeError("c")


def test_fail_without_a_trace():
    pytest.fail("m", False)


class TestSetUpRaises(unittest.TestCase):
    def setUp(self):
        raise ValueError("setup failed")

    def test_one(self):
        pass


class ReproError(Exception):
    pass


def test_raise_own_class():
    raise ReproError("shown with its module's name")


@pytest.mark.xfail(reason="known")
def test_xfail_mark_first():
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


def test_raise_before_the_failure():
    if helper() == 1:
        raise RuntimeError("first")
    assert 0


def my_decorator(f):
    return f


@my_decorator
def test_other_decorator():
    assert 0


@pytest.fixture
def value():
    return 1


def test_asks_for_a_fixture(value):
    assert 0


@pytest.mark.parametrize("y", [1], indirect=True)
def test_indirect(y):
    assert 0


def test_try_with_finally():
    try:
        raise ValueError("x")
    finally:
        pass


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
'''

#: tests claimed, with the exception class each shows ("": the class is left to the model)
CLAIMED = {
    "test_assert_zero": "AssertionError",
    "test_assert_false_message": "AssertionError",
    "test_after_a_call": "",
    "test_raise_call": "ValueError",
    "test_raise_alias_shows_its_class": "",  # OSError's family picks its class by errno
    "test_raise_from_nested_try": "KeyError",  # pytest shows the chain from its start
    "test_pytest_fail": "Failed",
    "test_if_both_branches_fail": "",
    "test_param_fails[1]": "AssertionError",
    "test_param_fails[2]": "AssertionError",
    "TestInClass::test_method": "RuntimeError",
    "TestCaseFails::test_fail_call": "AssertionError",
    "TestSetUpPrints::test_two": "KeyError",
    "TestSetUpRaises::test_one": "ValueError",
    "test_raise_own_class": "",
    "test_handler_raises_from_another_cause": "",  # the cause is shown, not the body's
    "test_fail_without_a_trace": "",  # no E line at all
}


_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def _real(tmp_path, files: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Real pytest's verdict of each test, and the exception class its failure shows (the
    first ``E`` line of its section; an assertion's rewritten text is an AssertionError)."""
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    real = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    verdicts: dict[str, str] = {}
    shown: dict[str, str] = {}
    section = None
    for line in real.stdout.splitlines():
        head = line.split(" ", 2)
        if len(head) >= 2 and "::" in head[0] and head[1] in _STATUSES:
            verdicts.setdefault(head[0].split("::", 1)[1], head[1])
        title = re.fullmatch(r"_+ (?:ERROR at setup of )?(\S+) _+", line)
        if title:
            section = title.group(1).replace(".", "::")
        elif section and section not in shown and re.match(r"^E\s+\S", line):
            word = line[1:].split()[0].rstrip(":")
            shown[section] = "AssertionError" if word == "assert" else word
    return verdicts, shown


def test_claims_are_exactly_the_tests_that_surely_fail(tmp_path) -> None:
    verdicts, shown = _real(tmp_path, {"test_f.py": SOURCE})
    ids = [f"test_f.py::{name}" for name in verdicts]
    marked = marked_outcomes({"test_f.py": SOURCE}.get, ids)
    fails = {t.split("::", 1)[1]: m.reason for t, m in marked.items() if m.outcome == "fail"}
    assert fails == CLAIMED
    for name, exception in fails.items():
        assert verdicts[name] == apply_marks("PASSED", marked[f"test_f.py::{name}"]) == "FAILED"
        if exception:  # a class claimed is the class real pytest shows
            assert shown[name] == exception, name
    assert shown["test_raise_own_class"] == "test_f.ReproError"  # why it is not claimed
    # and the tests left alone are not surely failures
    assert verdicts["test_xfail_mark_first"] == "XFAIL"
    assert verdicts["test_return_before"] == "PASSED"
    assert verdicts["test_raises_context"] == "PASSED"


def test_a_predicted_setup_error_comes_first() -> None:
    marked = marked_outcomes({"test_f.py": SOURCE}.get, ["test_f.py::test_assert_zero"])
    assert apply_marks("ERROR", marked["test_f.py::test_assert_zero"]) == "ERROR"
    assert apply_marks("SKIPPED", marked["test_f.py::test_assert_zero"]) == "FAILED"


#: (files, test) where something other than the test's own code may decide its outcome:
#: real pytest does not show them FAILED, and nothing is claimed
GOVERNED = {
    "fixture adds an xfail mark": (
        {
            "test_f.py": """\
import pytest


@pytest.fixture
def xfails(request):
    request.node.add_marker(pytest.mark.xfail(reason="from a fixture"))


def test_x(xfails):
    assert 0
"""
        },
        "XFAIL",
    ),
    "conditional skip in the body": (
        {
            "test_f.py": """\
import sys
import pytest


def test_x():
    if sys.platform:
        pytest.skip("maybe")
    assert 0
"""
        },
        "SKIPPED",
    ),
    "skip through a helper": (
        {
            "test_f.py": """\
import pytest


def off():
    pytest.skip("helper")


def test_x():
    off()
    assert 0
"""
        },
        "SKIPPED",
    ),
    "SkipTest under another name": (
        {
            "test_f.py": """\
from unittest import SkipTest as Sk


def test_x():
    if True:
        raise Sk("no")
    assert 0
"""
        },
        "SKIPPED",
    ),
    "setup_function skips": (
        {
            "test_f.py": """\
import pytest


def setup_function(function):
    pytest.skip("not here")


def test_x():
    assert 0
"""
        },
        "SKIPPED",
    ),
    "setUpClass raises": (
        {
            "test_f.py": """\
import unittest


class TestC(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("class set-up")

    def test_x(self):
        assert 0
"""
        },
        "ERROR",
    ),
    "usefixtures mark": (
        {
            "test_f.py": """\
import pytest


@pytest.fixture
def off():
    pytest.skip("no network")


@pytest.mark.usefixtures("off")
def test_x():
    assert 0
"""
        },
        "SKIPPED",
    ),
    "module pytestmark usefixtures": (
        {
            "conftest.py": """\
import pytest


@pytest.fixture
def db():
    raise RuntimeError("no db")
""",
            "test_f.py": """\
import pytest

pytestmark = pytest.mark.usefixtures("db")


def test_x():
    assert 0
""",
        },
        "ERROR",
    ),
    "autouse fixture in a conftest": (
        {
            "conftest.py": """\
import pytest


@pytest.fixture(autouse=True)
def off():
    pytest.skip("all off")
""",
            "test_f.py": "def test_x():\n    assert 0\n",
        },
        "SKIPPED",
    ),
    "hook in a conftest": (
        {
            "conftest.py": """\
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xfail(reason="hook"))
""",
            "test_f.py": "def test_x():\n    assert 0\n",
        },
        "XFAIL",
    ),
    "package that skips": (
        {
            "sub/__init__.py": """\
import pytest

pytest.skip("package off", allow_module_level=True)
""",
            "sub/test_f.py": "def test_x():\n    assert 0\n",
        },
        None,
    ),
    "param with marks through a variable": (
        {
            "test_f.py": """\
import pytest

CASES = [pytest.param(1, marks=pytest.mark.xfail(reason="p"))]


@pytest.mark.parametrize("x", CASES)
def test_x(x):
    assert 0
"""
        },
        "XFAIL",
    ),
    "module-level skip": (
        {
            "test_f.py": """\
import pytest

pytest.importorskip("surely_not_installed_pkg")


def test_x():
    assert 0
"""
        },
        None,
    ),
    "fixtures for every test from the ini": (
        {
            "pytest.ini": "[pytest]\nusefixtures = off\n",
            "conftest.py": """\
import pytest


@pytest.fixture
def off():
    pytest.skip("ini")
""",
            "test_f.py": "def test_x():\n    assert 0\n",
        },
        "SKIPPED",
    ),
    "strict markers and a mark of its own": (
        {
            "pytest.ini": "[pytest]\nstrict = true\n",
            "test_f.py": """\
import pytest


@pytest.mark.regression
def test_x():
    assert 0
""",
        },
        None,
    ),
    "parses but does not compile": (
        {
            "test_f.py": """\
import pytest
from __future__ import annotations


def test_x():
    assert 0
"""
        },
        None,
    ),
    "warnings as errors and a mark the ini does not name": (
        {
            "pytest.ini": "[pytest]\nfilterwarnings =\n    error\n",
            "test_f.py": """\
import pytest


@pytest.mark.regression
def test_x():
    assert 0
""",
        },
        None,
    ),
    "a selection in the ini's addopts": (
        {
            "pyproject.toml": "[tool.pytest.ini_options]\naddopts = \"-m 'not slow'\"\n",
            "test_f.py": """\
import pytest


@pytest.mark.slow
def test_x():
    assert 0
""",
        },
        None,
    ),
    "a misspelt parametrize elsewhere in the module": (
        {
            "test_f.py": """\
import pytest


@pytest.mark.parameterize("y", [1])
def test_other(y):
    pass


def test_x():
    assert 0
"""
        },
        None,
    ),
    "a TestCase that overrides fail": (
        {
            "test_f.py": """\
import unittest


class TestC(unittest.TestCase):
    def fail(self, msg=None):
        pass

    def test_x(self):
        self.fail("quiet")
"""
        },
        "PASSED",
    ),
    "a conftest hook bound by assignment": (
        {
            "conftest.py": """\
import pytest


def _off(item):
    pytest.skip("assigned hook")


pytest_runtest_setup = _off
""",
            "test_f.py": "def test_x():\n    assert 0\n",
        },
        "SKIPPED",
    ),
    "test rebound later": (
        {
            "test_f.py": """\
def test_x():
    assert 0


globals()["test_x"] = lambda: None
"""
        },
        "PASSED",
    ),
}


@pytest.mark.parametrize("case", list(GOVERNED))
def test_nothing_claimed_where_other_code_may_decide(tmp_path, case: str) -> None:
    files, real_status = GOVERNED[case]
    path = next(p for p in files if p.endswith("test_f.py"))
    test = f"{path}::TestC::test_x" if "class TestC" in files[path] else f"{path}::test_x"
    test += "[1]" if "parametrize" in files[path] else ""
    claimed = marked_outcomes(files.get, [test]).get(test)
    assert claimed is None or claimed.outcome != "fail", case
    verdicts, _ = _real(tmp_path, files)
    assert verdicts.get(test.split("::", 1)[1]) == real_status, (case, verdicts)


@pytest.mark.parametrize(
    "body",
    [
        "    while True:\n        pass\n    assert 0\n",  # a loop that may not end
        "    raise\n",  # a bare raise: what it raises is not known here
        "    assert 0\n    yield 1\n",  # a generator: pytest refuses it at collection
    ],
)
def test_nothing_claimed_where_something_may_come_first(body: str) -> None:
    source = f"def test_x():\n{body}"
    assert marked_outcomes({"t.py": source}.get, ["t.py::test_x"]) == {}


def test_positional_only_arguments_claim_nothing_and_raise_nothing() -> None:
    source = "def test_x(a=1, /):\n    assert 0\n"
    assert marked_outcomes({"t.py": source}.get, ["t.py::test_x"]) == {}


_LONG_BODY = "".join(f"    x{i} = {i}\n" for i in range(20_000))
_LONG_CHAIN = "".join(
    f"    {'if' if i == 0 else 'elif'} v == {i}:\n" + "        w = 1\n" * 50 for i in range(300)
)


@pytest.mark.parametrize(
    "source",
    [
        f"def test_big():\n{_LONG_BODY}    assert 0\n",
        f"def test_chain():\n    v = 1\n{_LONG_CHAIN}    assert 0\n",
    ],
    ids=["long body", "long elif chain"],
)
def test_long_bodies_are_read(source: str) -> None:
    """A long body or elif chain is read (bottom up, once: a 300-branch chain took seconds
    when each level walked the rest of the chain again)."""
    name = source.split("(", 1)[0][4:]
    marked = marked_outcomes({"t.py": source}.get, [f"t.py::{name}"])
    assert marked[f"t.py::{name}"].outcome == "fail"
