"""Candidate loaders: every format on small files, merging, dedupe, errors, the shared data."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from sweworld.reward.candidates import (
    MINI_SWE_AGENT_SOURCE,
    Candidate,
    CandidateLoadError,
    load_candidates,
    load_verified_labelled,
    write_predictions,
)
from tests.conftest import shared_data_dir

PATCH_A = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
PATCH_B = "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-b = 1\n+b = 2\n"


def _pred(iid: str, patch: str | None, model: str = "model-x") -> dict:
    return {"instance_id": iid, "model_name_or_path": model, "model_patch": patch}


def _trajectory(iid: str, patch: str, *, with_id: bool = True) -> dict:
    data = {
        "info": {
            "exit_status": "Submitted",
            "submission": patch,
            "model_stats": {"instance_cost": 0.1, "api_calls": 3},
            "config": {"model": {"model_name": "google/gemini-3-pro-preview"}},
        },
        "messages": [{"role": "system", "content": "..."}],
        "trajectory_format": "mini-swe-agent-1",
    }
    if with_id:
        data["instance_id"] = iid
    return data


def _report(iid: str, resolved: bool) -> dict:
    status = {"FAIL_TO_PASS": {"success": ["t1"], "failure": []}}
    return {
        "patch_is_None": False,
        "patch_exists": True,
        "patch_successfully_applied": True,
        "resolved": resolved,
        "tests_status": status,
    }


def _run_dir(root: Path) -> Path:
    """A mini-swe-agent run folder like the shared tarball's (two instances)."""
    run = root / "run"
    for iid, patch, resolved in (("o__r-1", PATCH_A, True), ("o__r-2", PATCH_B, False)):
        (run / "trajs" / iid).mkdir(parents=True)
        (run / "trajs" / iid / f"{iid}.traj.json").write_text(json.dumps(_trajectory(iid, patch)))
        (run / "logs" / iid).mkdir(parents=True)
        (run / "logs" / iid / "report.json").write_text(json.dumps(_report(iid, resolved)))
    preds = {iid: _pred(iid, "IGNORED") for iid in ("o__r-1", "o__r-2")}
    (run / "preds.json").write_text(json.dumps(preds))
    return run


# ------------------------------------------------------------------------------------------
# Formats
# ------------------------------------------------------------------------------------------


def test_preds_json_dict_and_list(tmp_path):
    as_dict = tmp_path / "preds.json"
    as_dict.write_text(
        json.dumps({"o__r-1": _pred("o__r-1", PATCH_A), "o__r-2": _pred("o__r-2", None)})
    )
    out = load_candidates(as_dict)
    assert list(out) == ["o__r-1", "o__r-2"]
    first = out["o__r-1"][0]
    assert (first.patch, first.source, first.label) == (PATCH_A, "model-x", None)
    assert "preds.json key 'o__r-1'" in first.meta["origin"]
    assert out["o__r-2"][0].patch == "" and out["o__r-2"][0].meta["patch_is_None"] is True

    # a dict keyed by id whose rows lack instance_id: the key is the id
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps({"o__r-3": {"model_patch": PATCH_B}}))
    only = load_candidates(keyed)["o__r-3"][0]
    assert only.patch == PATCH_B and only.source == "keyed.json"

    as_list = tmp_path / "list.json.gz"
    with gzip.open(as_list, "wt") as handle:
        json.dump([_pred("o__r-1", PATCH_A, "m1"), _pred("o__r-1", PATCH_B, "m2")], handle)
    listed = load_candidates(as_list)
    assert [(c.patch, c.source) for c in listed["o__r-1"]] == [(PATCH_A, "m1"), (PATCH_B, "m2")]


def test_jsonl_patch_keys_and_labels(tmp_path):
    path = tmp_path / "cands.jsonl"
    rows = [
        {"instance_id": "o__r-1", "patch": PATCH_A, "resolved": True},
        {"instance_id": "o__r-1", "candidate_patch": PATCH_B, "patch": "GOLD", "resolved": 0},
        {"instance_id": "o__r-2", "model_patch": PATCH_A, "source": "sampler", "label": None},
        {"instance_id": "o__r-2", "model_patch": PATCH_B, "extra_field": 7},
    ]
    path.write_text(
        "\n".join(json.dumps(r) for r in rows[:2])
        + "\n\n"
        + "\n".join(json.dumps(r) for r in rows[2:])
    )
    out = load_candidates(path)
    one = out["o__r-1"]
    assert [(c.patch, c.label) for c in one] == [(PATCH_A, True), (PATCH_B, False)]
    assert one[0].source == "cands.jsonl"
    assert out["o__r-2"][0].source == "sampler" and out["o__r-2"][0].label is None
    assert out["o__r-2"][1].meta["extra_field"] == 7
    assert out["o__r-2"][1].meta["origin"].endswith("line 5")  # blank line 3 counted

    gz = tmp_path / "cands.jsonl.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write(json.dumps(rows[0]) + "\n")
    assert load_candidates(gz)["o__r-1"][0].label is True


def test_single_trajectory_file(tmp_path):
    path = tmp_path / "o__r-9.traj.json"
    path.write_text(json.dumps(_trajectory("ignored", PATCH_A, with_id=False)))
    candidate = load_candidates(path)["o__r-9"][0]  # id from the file name
    assert candidate.patch == PATCH_A
    assert candidate.source == "google/gemini-3-pro-preview"
    assert candidate.meta["exit_status"] == "Submitted"
    assert candidate.meta["model_stats"]["api_calls"] == 3
    assert candidate.label is None


def test_trajectory_directory_with_reports(tmp_path):
    out = load_candidates(_run_dir(tmp_path))
    assert list(out) == ["o__r-1", "o__r-2"]
    assert [(g[0].patch, g[0].label) for g in out.values()] == [(PATCH_A, True), (PATCH_B, False)]
    assert out["o__r-1"][0].meta["tests_status"]["FAIL_TO_PASS"]["success"] == ["t1"]


def test_tarball_of_a_run(tmp_path):
    run = _run_dir(tmp_path)
    archive = tmp_path / "run.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(run, arcname="run")
    out = load_candidates(archive)
    assert sorted(out) == ["o__r-1", "o__r-2"]
    assert out["o__r-1"][0].label is True and out["o__r-2"][0].label is False
    assert out["o__r-2"][0].patch == PATCH_B  # the trajectory wins over preds.json


def test_directory_and_tarball_without_trajectories_use_preds(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "preds.json").write_text(json.dumps({"o__r-1": _pred("o__r-1", PATCH_A)}))
    (run / "logs" / "o__r-1").mkdir(parents=True)
    (run / "logs" / "o__r-1" / "report.json").write_text(
        json.dumps({"o__r-1": _report("o__r-1", True)})  # the keyed report shape
    )
    assert load_candidates(run)["o__r-1"][0].patch == PATCH_A
    archive = tmp_path / "run.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(run, arcname="run")
    from_tar = load_candidates(archive)["o__r-1"][0]
    assert from_tar.patch == PATCH_A and from_tar.label is True


def test_several_paths_merge_in_order_and_dedupe(tmp_path):
    first = tmp_path / "a.json"
    first.write_text(json.dumps([_pred("o__r-1", PATCH_A, "m1"), _pred("o__r-2", PATCH_B, "m1")]))
    second = tmp_path / "b.jsonl"
    second.write_text(
        json.dumps({"instance_id": "o__r-1", "patch": PATCH_B, "model_name_or_path": "m2"})
        + "\n"
        + json.dumps({"instance_id": "o__r-1", "patch": PATCH_A, "model_name_or_path": "m3"})
        + "\n"
    )
    merged = load_candidates([first, str(second)])
    assert [c.source for c in merged["o__r-1"]] == ["m1", "m2", "m3"]
    deduped = load_candidates([first, second], dedupe=True)
    assert [c.source for c in deduped["o__r-1"]] == ["m1", "m2"]
    assert deduped["o__r-1"][0].meta["duplicates"] == [{"source": "m3", "label": None}]
    assert "label_conflict" not in deduped["o__r-1"][0].meta


def test_dedupe_flags_label_conflicts(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        json.dumps({"instance_id": "i", "patch": PATCH_A, "resolved": True})
        + "\n"
        + json.dumps({"instance_id": "i", "patch": PATCH_A, "resolved": False})
        + "\n"
    )
    (kept,) = load_candidates(path, dedupe=True)["i"]
    assert kept.label is True and kept.meta["label_conflict"] is True


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


def test_missing_and_unknown(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_candidates(tmp_path / "nope.json")
    odd = tmp_path / "preds.txt"
    odd.write_text("{}")
    with pytest.raises(CandidateLoadError, match="unknown candidate format"):
        load_candidates(odd)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CandidateLoadError, match=r"no \*\.traj\.json"):
        load_candidates(empty)


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"instance_id": "i", "patch": PATCH_A}) + "\n{oops\n")
    with pytest.raises(CandidateLoadError, match=r"bad.jsonl line 2: invalid JSON"):
        load_candidates(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"patch": PATCH_A}, "missing or empty 'instance_id'"),
        ({"instance_id": "i"}, "no patch field"),
        ({"instance_id": "i", "patch": 3}, "must be a string"),
        ({"instance_id": "i", "patch": PATCH_A, "resolved": "yes"}, "label must be"),
        ([1, 2], "expected an object"),
    ],
)
def test_bad_rows(tmp_path, row, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"instance_id": "ok", "patch": ""}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(CandidateLoadError, match=message) as info:
        load_candidates(path)
    assert "line 2" in str(info.value)


def test_bad_json_and_archives(tmp_path):
    broken = tmp_path / "preds.json"
    broken.write_text('{"a": ')
    with pytest.raises(CandidateLoadError, match="invalid JSON"):
        load_candidates(broken)
    scalar = tmp_path / "scalar.json"
    scalar.write_text("3")
    with pytest.raises(CandidateLoadError, match="expected SWE-bench predictions"):
        load_candidates(scalar)
    not_traj = tmp_path / "x.traj.json"
    not_traj.write_text(json.dumps({"messages": []}))
    with pytest.raises(CandidateLoadError, match="not a mini-swe-agent trajectory"):
        load_candidates(not_traj)
    corrupt = tmp_path / "c.tar.gz"
    corrupt.write_bytes(b"not a tarball")
    with pytest.raises(CandidateLoadError, match="not a readable tar archive"):
        load_candidates(corrupt)
    hollow = tmp_path / "h.tar.gz"
    readme = tmp_path / "README.md"
    readme.write_text("hi")
    with tarfile.open(hollow, "w:gz") as tar:
        tar.add(readme, arcname="README.md")
    with pytest.raises(CandidateLoadError, match=r"no \*\.traj\.json and no preds\.json"):
        load_candidates(hollow)


# ------------------------------------------------------------------------------------------
# Writing and statistics
# ------------------------------------------------------------------------------------------


def test_write_predictions_round_trip(tmp_path):
    chosen = {
        "o__r-1": PATCH_A,
        "o__r-2": Candidate("o__r-2", PATCH_B, source="m"),
        "o__r-3": None,
    }
    path = write_predictions(chosen, tmp_path / "out" / "preds.json")
    data = json.loads(path.read_text())
    assert data["o__r-1"] == {
        "instance_id": "o__r-1",
        "model_name_or_path": "sweworld-verify",
        "model_patch": PATCH_A,
    }
    assert data["o__r-3"]["model_patch"] is None
    back = load_candidates(path)
    assert [back[i][0].patch for i in ("o__r-1", "o__r-2", "o__r-3")] == [PATCH_A, PATCH_B, ""]
    assert {c[0].source for c in back.values()} == {"sweworld-verify"}

    lines = write_predictions({"o__r-1": PATCH_A}, tmp_path / "p.jsonl", model_name="mine")
    (row,) = [json.loads(line) for line in lines.read_text().splitlines()]
    assert row["model_name_or_path"] == "mine"
    with pytest.raises(TypeError):
        write_predictions({"x": 3}, tmp_path / "bad.json")  # type: ignore[dict-item]


# ------------------------------------------------------------------------------------------
# The shared data (skips when absent)
# ------------------------------------------------------------------------------------------


@pytest.mark.shared_data
def test_verified_labelled_on_shared_data():
    root = shared_data_dir()
    archive = root / "mini-swe-agent-gemini3-verified.tar.gz"
    if (
        not archive.is_file()
        or not (root / "swebench_verified_resolved_patches.jsonl.gz").is_file()
    ):
        pytest.skip(f"shared data not present: {root}")

    # independent count of the official reports
    resolved_reports = total_reports = 0
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name.endswith("/report.json"):
                handle = tar.extractfile(member)
                assert handle is not None
                total_reports += 1
                resolved_reports += bool(json.load(handle)["resolved"])
    with gzip.open(root / "swebench_verified_resolved_patches.jsonl.gz", "rt") as handle:
        rows = [json.loads(line) for line in handle]
    resolved_by = sum(len(r["resolved_by"]) for r in rows)

    tasks, candidates = load_verified_labelled(root)
    assert len(tasks) == len(rows) == 402
    assert list(candidates) == [t.instance_id for t in tasks]
    runs = [c for group in candidates.values() for c in group if c.source == MINI_SWE_AGENT_SOURCE]
    assert len(runs) == total_reports == 402
    # The README says 307 resolved; the 402 report.json files say 308.
    assert sum(bool(c.label) for c in runs) == resolved_reports == 308
    assert all(group[0].source == MINI_SWE_AGENT_SOURCE for group in candidates.values())
    others = [c for group in candidates.values() for c in group[1:]]
    assert len(others) == resolved_by and all(c.label is True for c in others)
    assert all(c.source.startswith("20") for c in others)  # leaderboard system names

    assert all(t.FAIL_TO_PASS for t in tasks)
    assert all(t.patch and t.base_commit and t.problem_statement for t in tasks)
    in_lite = [t for t in tasks if t.meta["in_lite"]]
    if (root / "swebench_lite.jsonl.gz").is_file():
        assert len(in_lite) == 84
        assert all(t.test_patch and t.version for t in in_lite)
    assert all(not t.test_patch for t in tasks if not t.meta["in_lite"])

    assert sum(len(group) for group in candidates.values()) == 402 + resolved_by

    # the generic loader reads the same archive to the same labels
    generic = load_candidates(archive)
    assert {i: g[0].label for i, g in generic.items()} == {c.instance_id: c.label for c in runs}
