"""The agent-style reproduction copied from a failing test (pure functions)."""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace as Rec

import pytest

from sweworld.data.factory.reproductions import (
    reproduction_source,
    source_patch,
    task_states,
)
from sweworld.tasks.unified_diff import make_unified_diff

MODULE = """\
import pytest

from lib import f

LIMIT = 3


def helper(x):
    return f(x) + 1


@pytest.fixture
def value():
    return 2


def test_one():
    assert helper(1) == 2


def test_two(value):
    assert f(value) == value


class TestThings:
    def setup_method(self, method):
        self.x = 1

    def test_a(self):
        assert f(self.x) == 1

    def test_b(self):
        assert False


def test_three():
    assert LIMIT == 3
"""


def test_a_function_test_is_copied_with_the_module_helpers_and_called_as_a_script() -> None:
    text = reproduction_source(MODULE, "tests/test_lib.py::test_one")
    assert text is not None
    tree = ast.parse(text)
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert names == ["helper", "value", "test_one"]  # the other tests are gone
    assert "LIMIT = 3" in text and "from lib import f" in text
    assert text.rstrip().endswith('test_one()\n    print("test passed")')


def test_a_test_with_fixtures_runs_through_pytest_as_a_script() -> None:
    text = reproduction_source(MODULE, "tests/test_lib.py::test_two[1-2]")
    assert text is not None and "def test_two(value)" in text
    assert "raise SystemExit(pytest.main([__file__]))" in text
    assert "def test_one" not in text


def test_a_method_keeps_its_class_setup_and_drops_the_other_test_methods() -> None:
    text = reproduction_source(MODULE, "tests/test_lib.py::TestThings::test_a")
    assert text is not None
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef))
    assert [m.name for m in cls.body] == ["setup_method", "test_a"]
    assert "case = TestThings()" in text and "case.test_a()" in text
    unittest_style = MODULE.replace("class TestThings:", "class TestThings(unittest.TestCase):")
    text = reproduction_source("import unittest\n" + unittest_style, "t.py::TestThings::test_a")
    assert text is not None and 'case = TestThings("run")' in text


def test_what_cannot_be_copied_is_none() -> None:
    assert reproduction_source(MODULE, "tests/test_lib.py::test_missing") is None
    assert reproduction_source(MODULE, "tests/test_lib.py::TestThings::test_zz") is None
    assert reproduction_source(MODULE, "tests/test_lib.py::helper::x") is None
    assert reproduction_source(MODULE, "tests/test_lib.py") is None
    assert reproduction_source("def test_x(:\n", "t.py::test_x") is None
    assert reproduction_source("from . import x\ndef test_x(): pass\n", "t.py::test_x") is None
    assert reproduction_source("", "t.py::test_x") is None
    assert reproduction_source("x = 1\rdef test_x():\n    pass\n", "t.py::test_x") is None
    # a form feed is not a line break for the parser: the lines still line up
    feed = "import os\n\x0c\ndef test_a():\n    assert os\n\n\ndef test_b():\n    pass\n"
    text = reproduction_source(feed, "t.py::test_b")
    assert text is not None
    assert text.startswith("import os\n\x0c\n\n\ndef test_b():\n    pass\n\nif __name__")
    crlf = feed.replace("\n", "\r\n")
    text = reproduction_source(crlf, "t.py::test_b")
    assert text is not None and "def test_a" not in text and "def test_b" in text
    huge = "def test_x():\n    pass\n" + "x = 1\n" * 100_000
    assert reproduction_source(huge, "t.py::test_x") is None


def test_states_come_from_the_recorded_transitions_without_cache_files() -> None:
    fix = make_unified_diff("lib.py", "a = 1\n", "a = 2\n")
    wrong = make_unified_diff("lib.py", "a = 1\n", "a = 3\n")
    cache = make_unified_diff(".pytest_cache/v/cache/nodeids", None, "[]\n")
    assert source_patch(cache + wrong) == wrong
    records = [
        Rec(meta=json.dumps({"phase": "buggy"}), diff=""),
        Rec(meta=json.dumps({"phase": "wrong", "wrong": 1}), diff=cache + wrong),
        Rec(meta=json.dumps({"phase": "wrong", "wrong": 1, "reproduction": True}), diff="x"),
        Rec(meta="not json", diff=""),
        Rec(meta="[1]", diff=""),
    ]
    alt = make_unified_diff("lib.py", "a = 1\n", "a = 1 + 1\n")
    labels = [
        Rec(candidate_kind="alt", patch=alt),
        Rec(candidate_kind="alt", patch=alt),  # the same state once
        Rec(candidate_kind="wrong", patch=wrong),  # wrong states come from the records
    ]
    assert task_states({"patch": fix}, records, labels) == [
        ("buggy", "", 0),
        ("fixed", fix, 0),
        ("alt", alt, 0),
        ("wrong", wrong, 1),
    ]
    assert task_states({"patch": fix}, records)[-1] == ("wrong", wrong, 1)


def test_the_command_refuses_what_is_not_a_factory_part(tmp_path, capsys) -> None:
    from sweworld.cli import main as cli_main

    def error(part) -> str:
        assert cli_main(["data", "factory-reproductions", str(part)]) == 2
        return capsys.readouterr().err

    assert "no tasks.jsonl (not a factory part)" in error(tmp_path / "missing")
    (tmp_path / "tasks.jsonl").write_text('{"instance_id": "a"}\n{torn\n')
    assert "tasks.jsonl:2: not a JSON task row" in error(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('["not", "a", "row"]\n')
    assert "tasks.jsonl:1: a task row needs an instance_id" in error(tmp_path)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--limit", "-1"], "argument --limit: must be at least 0, got -1"),
        (["--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (["--timeout", "nan"], "argument --timeout: nan is out of range [1, 86400]"),
    ],
)
def test_the_command_refuses_bad_numbers_before_reading_a_part(tmp_path, capsys, option, message):
    """``--limit -1`` would slice off the last task; the parser refuses it (exit 2)."""
    from sweworld.cli import main as cli_main

    with pytest.raises(SystemExit) as stop:
        cli_main(["data", "factory-reproductions", str(tmp_path), *option])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
