"""The keep/reject rule, task rows, issue texts and candidate patches (no test run)."""

from __future__ import annotations

import json

from sweworld.data.factory.issue_text import error_lines, find_repro_call, problem_statement
from sweworld.data.factory.labels import test_edit_patch
from sweworld.data.factory.mutate import mutations
from sweworld.data.factory.pipeline import relevant_test_files
from sweworld.data.factory.run_tests import RunOutcome
from sweworld.data.factory.tasks import Screened, judge, make_row, mutant_patch
from sweworld.data.factory.transitions import agent_commands, module_name, repro_script
from sweworld.tasks.patches import apply_hunks, patch_hunks
from sweworld.tasks.schema import Task

BASE = {f"t.py::test_{i}" for i in range(10)} | {"u.py::test_other"}


def run(statuses: dict[str, str], status: str = "ok") -> RunOutcome:
    return RunOutcome(status, statuses)


def test_keep_some_but_not_most() -> None:
    ok = {t: "PASSED" for t in BASE}
    verdict, broken, run_passed = judge(BASE, ["t.py"], run({**ok, "t.py::test_3": "FAILED"}), 0.5)
    assert verdict == "kept" and broken == ["t.py::test_3"]
    assert "u.py::test_other" not in run_passed and len(run_passed) == 10


def test_reject_no_test_broken_too_many_and_failed_runs() -> None:
    ok = {t: "PASSED" for t in BASE}
    assert judge(BASE, ["t.py"], run(ok), 0.5)[0] == "no_test_broken"
    six = {**ok, **{f"t.py::test_{i}": "FAILED" for i in range(6)}}
    assert judge(BASE, ["t.py"], run(six), 0.5)[0] == "too_many_broken"
    assert judge(BASE, ["t.py"], run(six), 0.6)[0] == "kept"
    assert judge(BASE, ["t.py"], run({}, "timeout"), 0.5)[0] == "run_timeout"
    missing = {t: s for t, s in ok.items() if t != "t.py::test_0"}  # a test that vanished
    assert judge(BASE, [], run(missing), 0.5)[1] == ["t.py::test_0"]


LIB = "def double(x):\n    return x * 2\n"


def test_row_contract_and_patches() -> None:
    m = next(x for x in mutations(LIB, "lib/core.py") if x.operator == "arith")
    screened = Screened(
        [m],
        ["tests/test_core.py"],
        "kept",
        ["tests/test_core.py::test_a"],
        ["tests/test_core.py::test_a", "tests/test_core.py::test_b"],
    )
    row = make_row(
        repo="pypi/lib",
        base_commit="a" * 40,
        version="1.0",
        python="3.11",
        screened=screened,
        originals={"lib/core.py": LIB},
        problem_statement="x is wrong",
        seed=3,
    )
    task = Task.from_row(json.loads(json.dumps(row)))
    assert task.FAIL_TO_PASS == ["tests/test_core.py::test_a"]
    assert task.PASS_TO_PASS == ["tests/test_core.py::test_b"]
    assert task.setup_patch and task.patch and task.test_patch == ""
    buggy = "".join(
        apply_hunks(LIB.splitlines(True), patch_hunks(task.setup_patch)["lib/core.py"])[0]
    )
    assert "x // 2" in buggy
    fixed = apply_hunks(buggy.splitlines(True), patch_hunks(task.patch)["lib/core.py"])
    assert "".join(fixed[0]) == LIB
    assert row["environment"]["test_cmd"].endswith("tests/test_core.py")
    assert mutant_patch({"lib/core.py": LIB}, [m]) == task.setup_patch


LOG = """\
=================================== FAILURES ===================================
___________________________________ test_a ____________________________________

    def test_a():
>       assert lib.double(3) == 6
E       assert 1 == 6
E        +  where 1 = <function double>(3)
=========================== short test summary info ============================
FAILED tests/test_core.py::test_a - assert 1 == 6
"""
TEST = """\
import lib
from lib.core import double as dbl


def test_a():
    value = 3
    assert lib.double(value) == 6
    assert dbl(3, key="k") == 6
"""


def test_issue_text_from_the_log_and_the_test() -> None:
    assert error_lines(LOG, "tests/test_core.py::test_a")[0] == "assert 1 == 6"
    repro = find_repro_call(TEST, "tests/test_core.py::test_a", ["lib"])
    assert repro is not None and repro.code == "dbl(3, key='k')"
    assert repro.imports == ("from lib.core import double as dbl",)
    assert find_repro_call(TEST, "tests/test_core.py::test_nothing", ["lib"]) is None
    text = problem_statement(
        package="lib",
        failing=["tests/test_core.py::test_a"],
        log=LOG,
        repro=repro,
        forbidden=["    return x // 2", "    return x * 2"],
    )
    assert "assert 1 == 6" in text and "dbl(3, key='k')" in text
    assert "x // 2" not in text and "x * 2" not in text
    leaky = problem_statement(
        package="lib",
        failing=["tests/test_core.py::test_a"],
        log=LOG,
        repro=repro,
        forbidden=["assert 1 == 6"],
    )
    assert "assert 1 == 6" not in leaky


def test_candidates_commands_and_module_names() -> None:
    patch = test_edit_patch(TEST, "tests/test_core.py", "tests/test_core.py::test_a[1-2]")
    assert "+def disabled_test_a():" in patch
    assert test_edit_patch(TEST, "t.py", "t.py::test_missing") == ""
    assert module_name("src/pkg/sub/__init__.py") == "pkg.sub"
    assert module_name("inflection.py") == "inflection"
    cmds = agent_commands("t.py::test_a", "t.py", "pkg.core", None, "buggy")
    assert cmds[0] == "python -m pytest t.py::test_a" and "python -m pytest -x -q" in cmds
    assert len(agent_commands("t.py::test_a", "t.py", "pkg", None, "wrong")) == 2
    assert "pytest.main" in repro_script("t.py::test_a", None)
    compile(
        repro_script("t.py::test_a", find_repro_call(TEST, "t.py::test_a", ["lib"])), "s", "exec"
    )


def test_relevant_test_files() -> None:
    tests = {"tests/test_a.py": "from pkg.alpha import f\n", "tests/test_b.py": "import os\n"}
    assert relevant_test_files("pkg/alpha.py", tests) == ["tests/test_a.py"]
    assert relevant_test_files("pkg/gamma.py", tests) == sorted(tests)


def test_two_runs_never_write_one_folder(tmp_path) -> None:
    import fcntl

    import pytest

    from sweworld.data.factory.pipeline import FactoryConfig, FactoryError, make_tasks

    with open(tmp_path / ".factory.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(FactoryError, match="another factory run"):
            make_tasks(FactoryConfig(out=tmp_path, package="inflection"), echo=lambda _: None)
    assert not (tmp_path / "records").exists()


def test_a_module_that_is_not_utf8_is_a_skip_reason_not_a_crash(tmp_path) -> None:
    from collections import Counter

    from sweworld.data.factory.pipeline import read_sources
    from sweworld.data.store import RecordStore

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "old.py").write_bytes(b"# -*- coding: latin-1 -*-\nNAME = '\xe9'\n")
    counts: Counter = Counter()
    with RecordStore(tmp_path / "out") as store:
        texts = read_sources(tmp_path, ["pkg/ok.py", "pkg/old.py", "pkg/gone.py"], store, counts)
    assert texts == {"pkg/ok.py": "X = 1\n"}
    assert counts == {"files_skipped_not_utf8": 1, "files_skipped_unreadable": 1}
    rows = [
        json.loads(line)
        for line in (tmp_path / "out" / "records" / "skipped.jsonl").read_text().splitlines()
    ]
    assert sorted((r["unit"], r["reason"]) for r in rows) == [
        ("file:pkg/gone.py", "file_unreadable"),
        ("file:pkg/old.py", "file_not_utf8"),
    ]


def test_a_candidate_whose_run_failed_is_a_counted_skip_not_a_silent_drop() -> None:
    from sweworld.data.factory.labels import label_records
    from sweworld.reward.real import RealRewardResult

    m = next(x for x in mutations(LIB, "lib/core.py") if x.operator == "arith")
    screened = Screened([m], ["t.py"], "kept", ["t.py::test_a"], ["t.py::test_a", "t.py::test_b"])
    row = make_row(
        repo="pypi/lib",
        base_commit="a" * 40,
        version="1.0",
        python="3.11",
        screened=screened,
        originals={"lib/core.py": LIB},
        problem_statement="x is wrong",
        seed=0,
    )
    task = Task.from_row(row)

    def result(status: str, resolved: bool = False) -> RealRewardResult:
        graded = status in ("resolved", "unresolved")
        info = {} if graded else {"reason": f"{status} here"}
        return RealRewardResult(task.instance_id, resolved, status, {}, info=info)

    known = {
        "right": result("resolved", True),
        "empty": result("unresolved"),
        "wrong": result("timeout"),
    }
    cands = [("right", task.patch), ("empty", ""), ("wrong", "diff")]
    skipped: list[tuple[str, str]] = []
    records = label_records(
        task, cands, manager=None, executor=None, known=known, skip=lambda *a: skipped.append(a)
    )
    assert [(r.candidate_kind, r.resolved) for r in records] == [("right", True), ("empty", False)]
    assert skipped == [("wrong", "timeout: timeout here")]


def test_task_rows_survive_a_torn_line_and_a_rebuild(tmp_path) -> None:
    """A run killed mid-row leaves a torn line: the next row must not be glued to it (and
    lost); a task rebuilt after a kill between its row and its ``done`` is written once."""
    from sweworld.data.factory.pipeline import append_task_row, written_task_ids

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "a"}) + "\n" + '{"instance_id": "b", "pat')
    made = written_task_ids(path)
    assert made == {"a"}
    assert append_task_row(path, {"instance_id": "c"}, made)
    assert not append_task_row(path, {"instance_id": "a"}, made)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ["a", "c"]
    assert written_task_ids(tmp_path / "new.jsonl") == set()
