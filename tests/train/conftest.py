"""Tiny datasets built in the tests: SWT records with stored contexts, SWR records of the
toy tasks, written with the project's RecordStore and finalized (split by repository)."""

from __future__ import annotations

import json

import pytest

from sweworld.data.schema import SWRRecord, SWTRecord, record_id, to_json
from sweworld.data.store import RecordStore, finalize

TRAIN_REPO = "sweworld/stockroom"
HELDOUT_REPO = "pallets/flask"  # in DEFAULT_HELDOUT_REPOS: its records form the test split


def swt_context(command: str, mode: str, **fields) -> str:
    from sweworld.transition.context import SWTContext

    if mode == "oracle":
        fields.setdefault("gold_patch", "diff --git a/x.py b/x.py\n")
    ctx = SWTContext(
        command=command,
        problem=fields.pop("problem", "Adding an item twice loses the first quantity."),
        diff=fields.pop("diff", ""),
        executed_code=fields.pop("executed_code", "1 | print('hello')"),
        mode=mode,
        **fields,
    )
    return json.dumps(ctx.to_dict())


def make_swt_record(i: int, repo: str = TRAIN_REPO, *, stdout: str | None = None) -> SWTRecord:
    command = f"python script_{i}.py"
    return SWTRecord(
        id=record_id("test", repo, i),
        source="collect",
        instance_id=f"{repo.replace('/', '__')}-{i}",
        repo=repo,
        command=command,
        stdout=stdout if stdout is not None else f"hello {i}\n",
        stderr="" if i % 3 else "Traceback (most recent call last):\nValueError: bad\n",
        exit_code=0 if i % 3 else 1,
        context_oracle=swt_context(command, "oracle"),
        context_blind=swt_context(command, "blind"),
    )


def make_swr_record(task, i: int, resolved: bool, repo: str | None = None) -> SWRRecord:
    row = task.to_row()
    if repo:
        row["repo"] = repo
    f2p = list(task.FAIL_TO_PASS)
    p2p = list(task.PASS_TO_PASS)
    status = {
        "FAIL_TO_PASS": {"success": f2p if resolved else [], "failure": [] if resolved else f2p},
        "PASS_TO_PASS": {"success": p2p, "failure": []},
    }
    patch = task.patch if resolved else task.patch.replace("+", "+ # wrong\n+", 1)
    return SWRRecord(
        id=record_id("test-swr", row["repo"], task.instance_id, i),
        source="factory",
        instance_id=task.instance_id,
        repo=row["repo"],
        patch=patch,
        resolved=resolved,
        task=to_json(row),
        tests_status=to_json(status),
        candidate_kind="right" if resolved else "wrong",
    )


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, toy_tasks):
    """A finalized dataset: 8 SWT + 8 SWR train records, 2 + 2 held-out."""
    out = tmp_path_factory.mktemp("tiny-data")
    with RecordStore(out) as store:
        for i in range(8):
            store.add(make_swt_record(i))
        for i in range(2):
            store.add(make_swt_record(100 + i, HELDOUT_REPO))
        for i in range(8):
            store.add(make_swr_record(toy_tasks[i % len(toy_tasks)], i, resolved=i % 2 == 0))
        for i in range(2):
            store.add(make_swr_record(toy_tasks[i], 100 + i, i == 0, repo=HELDOUT_REPO))
    finalize(out)
    return out


@pytest.fixture(scope="session")
def embedded_lm(embedded_path):
    """The embedded base model in process (the inference backend), no adapter."""
    from sweworld.models.embedded import load_embedded

    lm = load_embedded(adapter=False, max_batch=1)
    yield lm
    lm.close()


@pytest.fixture(scope="session")
def tokenizer(embedded_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(embedded_path), local_files_only=True)
