"""Finding where a replayed workspace stops being the agent's: reads, writers, causes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from sweworld.data.divergence import (
    StepCheck,
    comparable_reading,
    divergence_cause,
    mark_diverged,
    may_write_files,
    reads_workspace_only,
    state_diverged,
)


@pytest.mark.parametrize(
    "command",
    [
        "cat src/a.py",
        "nl -ba src/a.py | sed -n '10,20p'",
        "sed -n 5,9p a.py",
        "grep -n 'def f' a.py | head -n 20",
        "git diff",
        "git show HEAD:a.py",
        "head -50 a.py | tail -5",
        "wc -l a.py",
    ],
)
def test_reads_of_workspace_files(command: str) -> None:
    assert reads_workspace_only(command)


@pytest.mark.parametrize(
    "command",
    [
        "",
        "ls",  # lists build artefacts a replay lacks
        "grep -rn foo .",  # recursion reaches __pycache__
        "grep -Rn foo src",
        "sed -i 's/a/b/' a.py",
        "sed -n 1p a.py > out.txt",
        "cat a.py; python a.py",
        "cat a.py && rm a.py",
        "git status",
        "python a.py | head",
        "cat $(ls)",
        "cat 'unclosed",
        "cat a.py || true",
        "cat a.py |",
    ],
)
def test_anything_else_is_not_a_read(command: str) -> None:
    assert not reads_workspace_only(command)


def test_writing_programs_are_found() -> None:
    assert may_write_files("with open('src/a.py', 'w') as f:\n    f.write(x)")
    assert may_write_files("open(path, mode='a').write('x')")
    assert may_write_files("Path('a.py').write_text(s)")
    assert may_write_files("import os\nos.remove('a.py')")
    assert may_write_files("import subprocess\nsubprocess.run(['sed', '-i', 's/a/b/', 'f'])")
    assert not may_write_files("print(open('a.py').read())")
    assert not may_write_files("with open('a.py', 'r') as f:\n    print(f.read())")
    assert not may_write_files("")


def test_readings_of_equal_files_compare_equal() -> None:
    """git's abbreviated ids depend on the clone's size; a reader's broken-pipe message on
    an early-closing head is a race."""
    shallow = "diff --git a/x b/x\nindex 1a2b3c4..5d6e7f8 100644\n--- a/x\n"
    full = "diff --git a/x b/x\nindex 1a2b3c4d9..5d6e7f8a1 100644\n--- a/x\n"
    assert comparable_reading(shallow) == comparable_reading(full)
    assert comparable_reading("  1\tx\nnl: write error: Broken pipe\n") == "  1\tx\n"
    assert comparable_reading("a\nb\n") == "a\nb\n"


def test_the_cause_is_the_first_suspect_step_before_the_evidence() -> None:
    checks = [
        StepCheck(0),
        StepCheck(1, execution=True),
        StepCheck(2, execution=True, writes=True),
        StepCheck(3, mismatch=True),
        StepCheck(4, evidence=True),
        StepCheck(5, execution=True, writes=True),  # after the evidence: not the cause
    ]
    assert divergence_cause(checks) == (2, 4)
    assert divergence_cause([StepCheck(0, failed=True), StepCheck(1, evidence=True)]) == (0, 1)
    # no suspect: the first execution (every later state is in doubt)
    assert divergence_cause([StepCheck(0), StepCheck(1, execution=True),
                             StepCheck(2, evidence=True)]) == (1, 2)  # fmt: skip
    assert divergence_cause([StepCheck(0, evidence=True)]) == (0, 0)
    assert divergence_cause([StepCheck(0, writes=True), StepCheck(1)]) is None  # no evidence


def test_records_after_the_cause_are_marked_and_recognised() -> None:
    records = [SimpleNamespace(step=s, meta=json.dumps({"k": s})) for s in (1, 2, 3, 4)]
    assert mark_diverged(records, cause=2, evidence=3) == 2
    assert [state_diverged(r) for r in records] == [False, False, True, True]
    assert json.loads(records[3].meta) == {
        "k": 4, "state": "diverged", "diverged_after": 2, "divergence_seen": 3
    }  # fmt: skip
    assert state_diverged({"meta": records[2].meta})
    for meta in (None, "", "[1]", "not json", '{"state": "replayed"}'):
        assert not state_diverged(SimpleNamespace(meta=meta))
