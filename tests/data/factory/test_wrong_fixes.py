"""Several wrong fixes per factory task, and screening runs as SWT records (no test run)."""

from __future__ import annotations

import itertools
import json

from sweworld.data.factory.labels import candidates, wrong_mutations
from sweworld.data.factory.mutate import mutations
from sweworld.data.factory.run_tests import RunOutcome, test_command
from sweworld.data.factory.tasks import Screened, apply_all, mutant_texts
from sweworld.data.factory.transitions import screen_record
from sweworld.tasks.patches import apply_hunks, patch_hunks
from sweworld.tasks.schema import Task

PATH = "lib/core.py"
LIB = (
    "def area(w, h):\n"
    "    if w < 0 or h < 0:\n"
    "        return 0\n"
    "    return w * h + 0\n"
    "\n"
    "\n"
    "def other(x):\n"
    "    return x - 1 if x > 2 else x + 1\n"
)


def _found():
    return mutations(LIB, PATH)


def _bug():
    return next(m for m in _found() if m.function == "area" and m.original == "*")


def _screened(m, verdict):
    return Screened([m], ["tests/test_core.py"], verdict)


def test_wrong_fixes_prefer_the_bug_function_and_never_touch_the_bug():
    bug = _bug()
    found = _found()
    other_fn = [m for m in found if m.function == "other"]
    rejected = [_screened(other_fn[0], "no_test_broken")]
    wrongs = wrong_mutations([bug], rejected, 3, found, {PATH: LIB})
    assert len(wrongs) == 3
    assert all(w.function == "area" for w in wrongs)  # the bug's function first
    for w in wrongs:  # none overlaps the bug or another wrong fix
        assert w.end <= bug.start or bug.end <= w.start
    spans = sorted((w.start, w.end) for w in wrongs)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # a subtle rejected mutant of the bug's function comes before unscreened ones
    subtle = next(
        m for m in found
        if m.function == "area" and (m.end <= bug.start or bug.end <= m.start)
        and m.key != wrongs[0].key
    )  # fmt: skip
    first = wrong_mutations([bug], [_screened(subtle, "no_test_broken")], 1, found, {PATH: LIB})
    assert first == [subtle]
    # no candidate at all: nothing, never an error
    assert wrong_mutations([bug], [], 3) == []
    assert len(wrong_mutations([bug], rejected, 1, found, {PATH: LIB})) == 1


def test_several_wrong_candidates_are_distinct_patches_of_the_buggy_state():
    bug = _bug()
    wrongs = wrong_mutations([bug], [], 3, _found(), {PATH: LIB})
    gold_task = Task.from_row(
        {"instance_id": "pypi__lib-1", "repo": "pypi/lib", "base_commit": "a" * 40,
         "patch": "", "FAIL_TO_PASS": ["tests/test_core.py::test_area"]}
    )  # fmt: skip
    cands = candidates(gold_task, originals={PATH: LIB}, bugs=[bug], wrong=wrongs, test_source="")
    wrong_patches = [p for kind, p in cands if kind == "wrong"]
    assert len(wrong_patches) == 3 == len(set(wrong_patches))
    buggy = mutant_texts({PATH: LIB}, [bug])[PATH]
    for w, patch in zip(wrongs, wrong_patches, strict=True):
        applied = apply_hunks(buggy.splitlines(True), patch_hunks(patch)[PATH])
        assert applied is not None  # a patch of the buggy state (the agent's starting point)
        assert "".join(applied[0]) == apply_all(LIB, [bug, w]) != buggy  # the bug stays
    # one wrong mutation (the old call shape) still gives one wrong candidate
    one = candidates(gold_task, originals={PATH: LIB}, bugs=[bug], wrong=wrongs[0], test_source="")
    assert [k for k, _ in one].count("wrong") == 1


def test_a_screening_run_is_a_record_of_the_mutant_state():
    bug = _bug()
    base = Task.from_row(
        {"instance_id": "pypi__lib-factory-base", "repo": "pypi/lib", "base_commit": "b" * 40}
    )
    log = "tests/test_core.py::test_area FAILED\n=== 1 failed in 0.01s ===\n"
    outcome = RunOutcome("ok", {"tests/test_core.py::test_area": "FAILED"}, log, 1)
    diff = "diff --git a/lib/core.py b/lib/core.py\n"
    files = ["tests/test_core.py"]
    rec = screen_record(
        base, key=bug.key, files=files, outcome=outcome, diff=diff, meta={"verdict": "kept"}
    )
    assert rec.command == test_command(["tests/test_core.py"]) and "-o addopts=" in rec.command
    assert rec.exit_code == 1 and rec.stdout == log and rec.streams == "merged"
    assert rec.state_source == "live" and rec.diff.startswith("diff --git")
    assert json.loads(rec.test_statuses) == {"tests/test_core.py::test_area": "FAILED"}
    assert rec.ran_tests and rec.command_kind == "pytest"
    meta = json.loads(rec.meta)
    assert meta["phase"] == "screen" and meta["mutant"] == bug.key and meta["verdict"] == "kept"
    again = screen_record(base, key=bug.key, files=["tests/test_core.py"], outcome=outcome)
    assert again.id == rec.id  # stable: a resumed run writes no duplicate
    # a run that gave no real answer is no record
    for status in ("timeout", "env_failed", "exec_failed"):
        assert screen_record(base, key="k", files=[], outcome=RunOutcome(status)) is None
