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
        "sed -n '$p' a.py",
        "cat /testbed/src/a.py",
        "grep -n -A3 'def f' a.py",
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
        "sed -n '1e date' a.py",
        "sed -n 's/x/y/e' a.py",
        "sed -n '1w out.txt' a.py",
        "cat /proc/meminfo",
        "head -c 20 /dev/urandom",
        "cat $HOME/a.py",
        "cat ~/a.py",
        "cat src/*.py",
        "grep -d recurse x src",
        "grep -f patterns.txt a.py",
        "git diff --ext-diff",
        "git diff --output=d.txt",
        "tail -f log.txt",
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
    assert may_write_files("open(os.path.join('a', 'b'), 'w')")
    assert may_write_files("open(f'{os.getcwd()}/a', 'wb')")
    assert may_write_files("from shutil import copy")
    assert not may_write_files("print(open('a.py').read())")
    assert not may_write_files("open('data.txt')")
    assert not may_write_files("with open('a.py', 'r') as f:\n    print(f.read())")
    assert not may_write_files("")


def test_the_writer_scan_is_linear() -> None:
    """Adversarial code (nested opens, quotes) is scanned in time linear in its size: the
    200 KB scan is about 10x the 20 KB one, not 100x (best of three, the collector off)."""
    import gc
    import time

    def best(text: str) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            may_write_files(text)
            times.append(time.perf_counter() - start)
        return min(times)

    gc.disable()
    try:
        for unit in ("open(", "open('", "open(a", "'w"):
            small, large = unit * (20_000 // len(unit)), unit * (200_000 // len(unit))
            assert best(large) < 30 * best(small) + 0.05
    finally:
        gc.enable()


def test_readings_of_equal_files_compare_equal() -> None:
    """git's abbreviated ids depend on the clone's size; a reader's broken-pipe message on
    an early-closing head is a race."""
    shallow = "diff --git a/x b/x\nindex 1a2b3c4..5d6e7f8 100644\n--- a/x\n"
    full = "diff --git a/x b/x\nindex 1a2b3c4d9..5d6e7f8a1 100644\n--- a/x\n"
    assert comparable_reading(shallow) == comparable_reading(full)
    assert comparable_reading("  1\tx\nnl: write error: Broken pipe\n") == "  1\tx\n"
    assert comparable_reading("a\nb\n") == "a\nb\n"


def test_the_cause_is_the_first_suspect_step_before_the_evidence() -> None:
    """Suspect: an execution not reproduced for real (answered from the recording, or a
    writer whose real run differed), a step the sandbox failed, an exit code the replay did
    not reproduce; a verified real run is not."""
    checks = [
        StepCheck(0),
        StepCheck(1, execution=True, writes=True, verified=True),
        StepCheck(2, mismatch=True),
        StepCheck(3, execution=True),
        StepCheck(4, evidence=True),
        StepCheck(5, execution=True, writes=True),  # after the evidence: not the cause
    ]
    assert divergence_cause(checks) == (2, 4)
    # an execution answered from the recording comes before a later symptom
    assert divergence_cause([StepCheck(0, execution=True), StepCheck(1, mismatch=True),
                             StepCheck(2, evidence=True)]) == (0, 2)  # fmt: skip
    assert divergence_cause([StepCheck(0, failed=True), StepCheck(1, evidence=True)]) == (0, 1)
    assert divergence_cause([StepCheck(0, execution=True, verified=True),
                             StepCheck(1, evidence=True)]) == (1, 1)  # fmt: skip
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
