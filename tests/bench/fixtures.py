"""Tiny hand-made SWT and SWR datasets for the bench tests (no repository, no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweworld.data.record import test_statuses
from sweworld.data.schema import SWRRecord, SWTRecord, command_kind, to_json
from sweworld.data.store import RecordStore, finalize
from sweworld.transition.context import SWTContext

PYTEST_OUT = (
    "tests/test_a.py::test_x PASSED\n"
    "=== short test summary info ===\n"
    "PASSED tests/test_a.py::test_x\n"
    "FAILED tests/test_a.py::test_y - assert 0\n"
)
TRACEBACK = (
    'Traceback (most recent call last):\n  File "r.py", line 1, in <module>\nValueError: bad\n'
)


def swt_record(
    rid: str,
    repo: str,
    command: str,
    *,
    stdout: str = "",
    stderr: str = "",
    exit_code: int = 0,
    state_source: str = "live",
) -> SWTRecord:
    contexts = {
        mode: json.dumps(
            SWTContext(
                command=command,
                mode=mode,
                problem=f"problem of {rid}",
                gold_patch="--- gold" if mode == "oracle" else "",
            ).to_dict()
        )
        for mode in ("oracle", "blind")
    }
    statuses = test_statuses(command, stdout + "\n" + stderr, repo)
    return SWTRecord(
        id=rid,
        source="test",
        instance_id=f"{repo.replace('/', '__')}-1",
        repo=repo,
        command=command,
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        state_source=state_source,
        context_oracle=contexts["oracle"] if state_source != "trajectory" else "",
        context_blind=contexts["blind"] if state_source != "trajectory" else "",
        ran_tests=command_kind(command) == "pytest",
        test_statuses=to_json(statuses),
        command_kind=command_kind(command),
    )


def swt_records() -> list[SWTRecord]:
    """Three held-out live records, one trajectory-only one, one of a training repository."""
    return [
        swt_record(
            "t-pytest",
            "psf/requests",
            "python -m pytest -rA tests/test_a.py",
            stdout=PYTEST_OUT,
            exit_code=1,
        ),
        swt_record("t-pyc", "pallets/flask", "python -c 'print(\"hello\")'", stdout="hello\n"),
        swt_record("t-script", "psf/requests", "python r.py", stderr=TRACEBACK, exit_code=1),
        swt_record(
            "t-traj",
            "psf/requests",
            "python r.py",
            stderr=TRACEBACK,
            exit_code=1,
            state_source="trajectory",
        ),
        swt_record("t-train", "owner/trained", "python x.py", stdout="x\n"),
    ]


def write_dataset(out: Path, records: list[Any]) -> Path:
    """A finalized dataset holding ``records`` (split by the default held-out repositories)."""
    with RecordStore(out) as store:
        for record in records:
            store.add(record)
    finalize(out)
    return out


GOLD = (
    "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n"
    "@@ -1,2 +1,2 @@\n def f(x):\n-    return x\n+    return x + 1\n"
)
OTHER = (
    "diff --git a/pkg/other.py b/pkg/other.py\n--- a/pkg/other.py\n+++ b/pkg/other.py\n"
    "@@ -1,2 +1,2 @@\n def g(y):\n-    return y\n+    return y * 2\n"
)
BOTH = GOLD + OTHER
HALF = GOLD.replace("x + 1", "x + 2")


def task_row(instance_id: str, repo: str) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "repo": repo,
        "base_commit": "0" * 40,
        "problem_statement": "f should add one",
        "patch": GOLD,
        "test_patch": "",
        "FAIL_TO_PASS": ["tests/test_core.py::test_f"],
        "PASS_TO_PASS": ["tests/test_core.py::test_g"],
        "version": "1.0",
    }


def swr_records() -> list[SWRRecord]:
    """Two held-out tasks with four candidates each (gold, gold + another file, a wrong
    value, another file only) and a training-repository candidate."""
    out = []
    for instance, repo in (
        ("psf__requests-1", "psf/requests"),
        ("pallets__flask-2", "pallets/flask"),
    ):
        row = json.dumps(task_row(instance, repo))
        for name, patch, resolved in (
            ("gold", GOLD, True),
            ("both", BOTH, True),
            ("half", HALF, False),
            ("other", OTHER, False),
        ):
            out.append(
                SWRRecord(
                    id=f"{instance}-{name}",
                    source="test",
                    instance_id=instance,
                    repo=repo,
                    patch=patch,
                    resolved=resolved,
                    task=row,
                    candidate_kind=name,
                )
            )
    out.append(
        SWRRecord(
            id="train-1",
            source="test",
            instance_id="owner__trained-1",
            repo="owner/trained",
            patch=GOLD,
            resolved=True,
            task=json.dumps(task_row("owner__trained-1", "owner/trained")),
        )
    )
    return out
