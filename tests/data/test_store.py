"""RecordStore: write as you go, resume without duplicates, torn lines; finalize splits by
repository and summarizes."""

from __future__ import annotations

import json

import datasets
import pytest

from sweworld.data.schema import SWRRecord, SWTRecord
from sweworld.data.store import RecordStore, finalize, iter_records, load_split


def _swt(i: int, repo: str) -> SWTRecord:
    return SWTRecord(
        id=f"t{i}", source="s", instance_id=f"{repo}-{i}", repo=repo, command="python x.py",
        stdout=f"out {i}", stderr="", exit_code=i % 2, state_source="replay" if i else "live",
    )  # fmt: skip


def _swr(i: int, repo: str, resolved: bool) -> SWRRecord:
    return SWRRecord(
        id=f"r{i}", source="s", instance_id=f"{repo}-{i}", repo=repo, patch="", resolved=resolved
    )


def test_records_are_written_at_once_and_a_second_run_resumes(tmp_path):
    with RecordStore(tmp_path) as store:
        assert store.add(_swt(0, "django/django"))
        store.done("unit-0", swt=1)
        # written and flushed before close: a killed run keeps it
        assert (tmp_path / "records" / "swt.jsonl").read_text().count("\n") == 1
    with RecordStore(tmp_path) as again:
        assert again.is_done("unit-0") and not again.is_done("unit-1")
        assert again.seen("swt", "t0")
        assert not again.add(_swt(0, "django/django"))  # no duplicate
        assert again.add(_swt(1, "django/django"))
        assert again.counts() == {"swt": 2, "swr": 0}
    assert [r.id for r in iter_records(tmp_path, "swt")] == ["t0", "t1"]


def test_a_torn_last_line_is_ignored(tmp_path):
    with RecordStore(tmp_path) as store:
        store.add(_swt(0, "django/django"))
    with open(tmp_path / "records" / "swt.jsonl", "a") as f:
        f.write('{"id": "t9", "source": "s", "inst')  # killed mid-write
    with RecordStore(tmp_path) as store:
        assert store.counts()["swt"] == 1
    assert [r.id for r in iter_records(tmp_path, "swt")] == ["t0"]


def test_a_record_added_after_a_torn_line_is_kept(tmp_path):
    with RecordStore(tmp_path) as store:
        store.add(_swt(0, "django/django"))
        store.done("u0")
    for name in ("swt", "done"):
        with open(tmp_path / "records" / f"{name}.jsonl", "a") as f:
            f.write('{"id": "t9", "unit": "u9", "inst')  # killed mid-write
    with RecordStore(tmp_path) as store:
        assert store.add(_swt(1, "django/django"))
        store.done("u1")
    assert [r.id for r in iter_records(tmp_path, "swt")] == ["t0", "t1"]
    with RecordStore(tmp_path) as again:  # the next resume sees it: not lost, not redone
        assert again.seen("swt", "t1") and again.is_done("u1")


def test_finalize_counts_unreadable_lines_instead_of_crashing(tmp_path):
    datasets.disable_progress_bars()
    with RecordStore(tmp_path) as store:
        store.add(_swt(0, "django/django"))
    with open(tmp_path / "records" / "swt.jsonl", "a") as f:
        f.write('{"id": "t5"}\nnot json\n[1]\n')  # a row missing columns, garbage, a list
    summary = finalize(tmp_path)
    assert summary["swt"]["total"] == 1
    assert summary["unreadable_lines"] == {"swt.jsonl": 3}


def test_finalize_splits_by_repository_and_summarizes(tmp_path):
    datasets.disable_progress_bars()
    with RecordStore(tmp_path) as store:
        for i in range(3):
            store.add(_swt(i, "django/django"))
        store.add(_swt(3, "psf/requests"))
        store.add(_swr(0, "django/django", True))
        store.add(_swr(1, "psf/requests", False))
        store.skip("inst-x", "malformed json")
        store.skip("inst-y", "malformed json")
        store.done("u")
    summary = finalize(tmp_path)
    assert summary["swt"]["splits"] == {"train": 3, "test": 1}
    assert summary["swt"]["per_repo"]["psf/requests"] == {"n": 1, "split": "test"}
    assert summary["swt"]["state_source"] == {"live": 1, "replay": 3}
    assert summary["swr"]["resolved"] == {"True": 1, "False": 1}
    assert summary["skipped"] == {"total": 2, "by_reason": {"malformed json": 2}}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    dd = datasets.load_from_disk(str(tmp_path / "swt"))
    assert set(dd["train"]["repo"]) == {"django/django"}
    assert dd["test"]["repo"] == ["psf/requests"]
    assert [r.id for r in load_split(tmp_path, "swt", "test")] == ["t3"]
    assert len(load_split(tmp_path, "swt", "all")) == 4
    assert [r.resolved for r in load_split(tmp_path / "swr", "swr", "test")] == [False]


def test_finalize_with_a_chosen_heldout_list_and_an_empty_kind(tmp_path):
    datasets.disable_progress_bars()
    with RecordStore(tmp_path) as store:
        store.add(_swt(0, "django/django"))
    summary = finalize(tmp_path, heldout=["django/django"])
    assert summary["swt"]["splits"] == {"train": 0, "test": 1}
    assert summary["swr"]["total"] == 0
    assert load_split(tmp_path, "swt", "train") == []
    assert load_split(tmp_path, "swr", "test") == []


def test_load_split_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a finalized"):
        load_split(tmp_path, "swt")
