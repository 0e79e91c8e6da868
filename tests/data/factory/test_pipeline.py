"""The factory end to end, for real: a tiny library written here, its environment built,
its tests run, verified tasks, SWT transitions, SWR labels, resume, and bad libraries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]

LIB = '''\
"""A tiny library."""


def clamp(value, low=0, high=10):
    """Clamp value into [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def word_count(text):
    return len(text.split())


def initials(name, sep="."):
    parts = [p[0].upper() for p in name.split() if p]
    return sep.join(parts) + sep
'''

TESTS = """\
from minilib import clamp, initials, word_count


def test_clamp_low():
    assert clamp(-5) == 0


def test_clamp_high():
    assert clamp(50) == 10


def test_clamp_inside():
    assert clamp(3) == 3


def test_clamp_edges():
    assert clamp(0) == 0 and clamp(10) == 10


def test_word_count():
    assert word_count("a b  c") == 3


def test_word_count_empty():
    assert word_count("") == 0


def test_initials():
    assert initials("ada lovelace") == "A.L."


def test_initials_sep():
    assert initials("alan turing", sep="-") == "A-T-"
"""

SETUP = "from setuptools import setup\n\nsetup(name='minilib', version='1.0', py_modules=[])\n"


def write_library(root: Path, tests: str = TESTS) -> Path:
    (root / "minilib").mkdir(parents=True)
    (root / "minilib" / "__init__.py").write_text(LIB)
    (root / "tests").mkdir()
    (root / "tests" / "test_minilib.py").write_text(tests)
    (root / "setup.py").write_text(SETUP.replace("py_modules=[]", "packages=['minilib']"))
    return root


def config(src: Path, out: Path, **kw):
    from sweworld.data.factory.pipeline import FactoryConfig

    base = dict(
        out=out,
        repo_path=str(src),
        repo_name="local/minilib",
        seed=1,
        workers=2,
        max_tasks=2,
        max_mutants=40,
        multi_fraction=0.5,
        timeout=120,
        progress=False,
    )
    return FactoryConfig(**{**base, **kw})


def test_tasks_are_real_transitions_and_labels_too_and_a_rerun_resumes(tmp_path: Path) -> None:
    from sweworld.data.factory.pipeline import make_tasks
    from sweworld.data.store import load_split
    from sweworld.reward.real import real_reward
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks.schema import Task

    src = write_library(tmp_path / "minilib")
    out = tmp_path / "out"
    summary = make_tasks(config(src, out), echo=lambda _: None)
    counts = summary["factory"]["counts"]
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert counts["tasks_made"] == len(rows) == 2
    assert counts["mutants_kept"] >= 3 and counts["mutants_tried"] > counts["mutants_kept"]
    assert any(r["factory"]["bugs"] == 2 for r in rows)  # one two-bug task
    assert (out / "repos" / "local__minilib.git").is_dir()

    # the row contract, for real, through the public grader
    manager = SessionManager(runtime_root=tmp_path / "rt")
    try:
        for row in rows:
            task = Task.from_row(row)
            assert task.FAIL_TO_PASS and task.PASS_TO_PASS and not task.test_patch
            assert "minilib/__init__.py" in task.patch and "tests/" not in task.setup_patch
            buggy = real_reward(task, "", manager=manager)
            status = buggy.report[task.instance_id]["tests_status"]
            assert status["FAIL_TO_PASS"]["success"] == [] and not buggy.resolved
            assert status["PASS_TO_PASS"]["failure"] == []
            assert real_reward(task, task.patch, manager=manager).resolved
            for line in task.setup_patch.splitlines():  # the issue never shows the bug
                if line.startswith(("+ ", "- ")) and len(line.strip()) > 8:
                    assert line[1:].strip() not in task.problem_statement
    finally:
        manager.close_all()

    swr = load_split(out, "swr", "all")
    kinds = {(r.candidate_kind, r.resolved) for r in swr}
    assert ("right", True) in kinds and ("empty", False) in kinds and ("partial", False) in kinds
    assert {"alt", "overreach"} <= {kind for kind, _ in kinds}  # labelled by runs too
    assert all(r.label_source == "real-run" for r in swr)
    swt = load_split(out, "swt", "all")
    phases = {json.loads(r.meta)["phase"] for r in swt}
    assert {"buggy", "fixed"} <= phases
    fixed_runs = [r for r in swt if json.loads(r.meta)["phase"] == "fixed" and r.ran_tests]
    assert fixed_runs and all(r.exit_code == 0 for r in fixed_runs)
    buggy_first = [r for r in swt if json.loads(r.meta)["phase"] == "buggy" and r.step == 0]
    assert buggy_first and all(r.exit_code == 1 for r in buggy_first)
    assert all(r.state_source == "live" and r.context_oracle for r in swt)
    repro = [(json.loads(r.meta)["phase"], r.exit_code) for r in swt
             if json.loads(r.meta).get("reproduction")]  # fmt: skip
    assert len({p for p, _ in repro}) >= 2  # the failing test copied to the root, run
    assert all(code != 0 for phase, code in repro if phase == "buggy")
    assert all(code == 0 for phase, code in repro if phase == "fixed")

    mutants = (out / "factory" / "mutants.jsonl").read_text()
    again = make_tasks(config(src, out), echo=lambda _: None)
    assert again["factory"]["counts"]["tasks_resumed"] == 2
    assert "tasks_made" not in again["factory"]["counts"]
    assert (out / "factory" / "mutants.jsonl").read_text() == mutants  # nothing re-run
    assert len((out / "tasks.jsonl").read_text().splitlines()) == 2
    assert len(load_split(out, "swt", "all")) == len(swt)


def test_a_library_whose_tests_do_not_run_is_a_skip_reason(tmp_path: Path) -> None:
    from sweworld.data.factory.pipeline import FactoryError, make_tasks

    src = write_library(tmp_path / "broken", tests="import not_a_module_anywhere\n\n\n" + TESTS)
    out = tmp_path / "out"
    with pytest.raises(FactoryError, match="tests_do_not_run"):
        make_tasks(config(src, out), echo=lambda _: None)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"]["by_reason"] == {"tests_do_not_run": 1}


def test_a_folder_without_tests_is_refused(tmp_path: Path) -> None:
    from sweworld.data.factory.pipeline import FactoryError, make_tasks

    src = tmp_path / "notests"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text(LIB)
    with pytest.raises(FactoryError, match="no test modules"):
        make_tasks(config(src, tmp_path / "out"), echo=lambda _: None)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["skipped"]["by_reason"] == {"source_failed": 1}


def test_inflection_from_the_package_index(tmp_path: Path) -> None:
    """The acceptance command, small: ``--package inflection --max-tasks 2``."""
    from sweworld.cli import main

    out = tmp_path / "inflection"
    code = main(
        [
            "data",
            "make-tasks",
            "--package",
            "inflection",
            "--max-tasks",
            "2",
            "--max-mutants",
            "30",
            "--no-transitions",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    if code != 0 and "sdist download" in json.dumps(json.loads((out / "summary.json").read_text())):
        pytest.skip("the package index is not reachable")
    assert code == 0
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["repo"] == "pypi/inflection" for r in rows)
    assert all(json.loads(r["FAIL_TO_PASS"]) for r in rows)


def test_screening_runs_are_records_and_each_task_gets_several_wrong_fixes(tmp_path: Path) -> None:
    """The build-outcome settings: every screened mutant (and the baseline) is an SWT record
    of its state, records carry no context, and a task's wrong fixes are states of their own
    (and SWR negatives)."""
    from sweworld.data.factory.pipeline import make_tasks
    from sweworld.data.store import load_split

    src = write_library(tmp_path / "minilib")
    (src / "setup.cfg").write_text("[tool:pytest]\naddopts = --no-such-plugin-option\n")
    out = tmp_path / "out"
    cfg = config(
        src, out, max_tasks=1, max_mutants=10, multi_fraction=0.0, screen_records=True,
        contexts=(), wrong_fixes=3,
    )  # fmt: skip
    summary = make_tasks(cfg, echo=lambda _: None)
    counts = summary["factory"]["counts"]
    assert counts["tasks_made"] == 1
    assert counts["mutants_tried"] == 10  # all of them, not only until enough were kept
    swt = load_split(out, "swt", "all")
    meta = [json.loads(r.meta) for r in swt]
    screen = [r for r, m in zip(swt, meta, strict=True) if m["phase"] == "screen"]
    assert len(screen) == 11  # the baseline and each mutant (the library's addopts dropped)
    base = [r for r in screen if not r.diff]
    assert len(base) == 1 and base[0].exit_code == 0 and json.loads(base[0].test_statuses)
    mutants = [r for r in screen if r.diff]
    assert all("minilib/__init__.py" in r.diff and r.ran_tests for r in mutants)
    assert {json.loads(r.meta)["verdict"] for r in mutants} >= {"kept"}
    assert any(r.exit_code == 1 for r in mutants)
    assert all(not r.context_oracle and not r.context_blind for r in swt)
    wrong = {m.get("wrong") for m in meta if m["phase"] == "wrong"}
    assert len(wrong) >= 2 and counts["wrong_fixes"] == len(wrong)
    swr = load_split(out, "swr", "all")
    negatives = [r for r in swr if r.candidate_kind == "wrong"]
    assert len(negatives) == len(wrong) and not any(r.resolved for r in negatives)

    # agent-style reproductions: the failing test copied to the root, run on every state
    repro = [(m["phase"], r) for r, m in zip(swt, meta, strict=True) if m.get("reproduction")]
    assert {phase for phase, _ in repro} == {"buggy", "fixed", "alt", "wrong"}
    assert {json.loads(r.meta).get("wrong") for phase, r in repro if phase == "wrong"} == {0}
    alt_runs = [r for r, m in zip(swt, meta, strict=True) if m["phase"] == "alt"]
    assert any(not json.loads(r.meta).get("reproduction") for r in alt_runs)
    assert {r.command.rsplit("&& ", 1)[-1] for _, r in repro} == {
        "python -m pytest reproduce_issue.py",
        "python reproduce_issue.py",
    }
    assert all("+++ b/reproduce_issue.py" in r.diff for _, r in repro)
    scripts = {phase: r.exit_code for phase, r in repro if "pytest" not in r.command}
    assert scripts["buggy"] != 0 and scripts["fixed"] == 0
    # the library's addopts break any pytest run here: the reproduction's too, for real
    assert {r.exit_code for _, r in repro if "pytest" in r.command} == {4}

    # a part made before reproductions existed gets the same runs from its records
    from sweworld.data.factory.reproductions import augment_part

    def forget_reproductions() -> None:
        lines = (out / "records" / "swt.jsonl").read_text().splitlines()
        kept = [x for x in lines if not json.loads(json.loads(x)["meta"]).get("reproduction")]
        (out / "records" / "swt.jsonl").write_text("".join(x + "\n" for x in kept))
        done = (out / "records" / "done.jsonl").read_text().splitlines()
        (out / "records" / "done.jsonl").write_text(
            "".join(x + "\n" for x in done if not json.loads(x)["unit"].startswith("repro:"))
        )

    forget_reproductions()
    counts = augment_part(out, echo=lambda _: None)
    assert counts == {"tasks_done": 1, "swt_records": len(repro)}
    again = [json.loads(r.meta) | {"exit": r.exit_code, "command": r.command}
             for r in load_split(out, "swt", "all")]  # fmt: skip
    made = sorted((m["phase"], m.get("wrong", -1), m["command"], m["exit"])
                  for m in again if m.get("reproduction"))  # fmt: skip
    assert made == sorted((json.loads(r.meta)["phase"], json.loads(r.meta).get("wrong", -1),
                           r.command, r.exit_code) for _, r in repro)  # fmt: skip
    assert augment_part(out, echo=lambda _: None) == {"tasks_resumed": 1}
    # and a rerun of the factory on such a part adds them too
    forget_reproductions()
    rerun = make_tasks(cfg, echo=lambda _: None)["factory"]["counts"]
    assert rerun["repro_tasks_done"] == 1 and rerun["repro_swt_records"] == len(repro)
