"""``sweworld bench tts``: selectors by hand on constructed candidates, equivalence of
patches, candidate sets and their skip reasons, and the command end to end (replay LM,
resume without re-scoring, failures, empty sets)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sweworld.bench import tts
from sweworld.bench.output import BenchOutput
from sweworld.bench.swr_scoring import bon_groups
from sweworld.bench.tts_selection import (
    bootstrap_mean_ci,
    majority_value,
    patch_class,
    select_groups,
    summarize,
    verifier_value,
)
from sweworld.data.schema import SWRRecord
from sweworld.data.store import RecordStore, finalize


def diff(path: str, old: str, new: str, line: int = 1) -> str:
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{line},2 +{line},2 @@\n def f(x):\n-{old}\n+{new}\n"
    )


GOLD = diff("pkg/core.py", "    return x", "    return x + 1")


def task_row(instance_id: str, repo: str) -> str:
    return json.dumps(
        {
            "instance_id": instance_id,
            "repo": repo,
            "base_commit": "0" * 40,
            "problem_statement": "f should add one",
            "patch": GOLD,
            "test_patch": "",
            "FAIL_TO_PASS": ["tests/test_core.py::test_f"],
            "PASS_TO_PASS": [],
            "version": "1.0",
        }
    )


def record(rid: str, instance: str, repo: str, patch: str, resolved: bool, **kw) -> SWRRecord:
    return SWRRecord(
        id=rid,
        source="test",
        instance_id=instance,
        repo=repo,
        patch=patch,
        resolved=resolved,
        task=kw.pop("task", task_row(instance, repo)),
        **kw,
    )


# Two tasks of four candidates (labels and scores below), a3 the same change as a2 with
# other inner whitespace and a comment; plus what must be left out.
A, B = "psf__requests-1", "pallets__flask-2"
LABELS = {"a1": True, "a2": False, "a3": False, "a4": True,
          "b1": False, "b2": True, "b3": False, "b4": False}  # fmt: skip
SCORES = {"a1": 0.9, "a2": 0.2, "a3": 0.8, "a4": 0.1, "b1": 0.7, "b2": 0.6, "b3": 0.5, "b4": 0.3}
PATCHES = {
    "a1": diff("pkg/core.py", "    return x", "    return 1 + x"),
    "a2": diff("pkg/core.py", "    return x", "    return x - 1"),
    "a3": diff("pkg/core.py", "    return x", "    return   x - 1  # minus one"),
    "a4": diff("pkg/core.py", "    return x", "    return x+1"),
    "b1": diff("pkg/core.py", "    return x", "    return x * 2"),
    "b2": diff("pkg/core.py", "    return x", "    return (x + 1)"),
    "b3": diff("pkg/other.py", "    return x", "    return -x"),
    "b4": "",
}


def records() -> list[SWRRecord]:
    out = []
    for cid, label in LABELS.items():
        task, repo = (A, "psf/requests") if cid[0] == "a" else (B, "pallets/flask")
        out.append(record(cid, task, repo, PATCHES[cid], label))
    out += [
        record("a0-gold", A, "psf/requests", GOLD, True, candidate_kind="gold"),
        record("c1", "psf__requests-3", "psf/requests", PATCHES["a1"], True),
        record("d1", "psf__requests-4", "psf/requests", PATCHES["a1"], True),
        record("d2", "psf__requests-4", "psf/requests", PATCHES["a2"], True),
        record("e1", "psf__requests-5", "psf/requests", GOLD, True),  # the gold, kind agent
        record("e2", "psf__requests-5", "psf/requests", PATCHES["a2"], False),
        record("bad", "psf__requests-6", "psf/requests", PATCHES["a2"], False, task="{oops"),
    ]
    return out


def write_dataset(folder: Path, recs: list[SWRRecord]) -> Path:
    with RecordStore(folder) as store:
        for rec in recs:
            store.add(rec)
    finalize(folder)
    return folder


# ------------------------------------------------------------------------------ unit


def test_patch_class_ignores_comments_whitespace_line_numbers_and_file_order():
    assert patch_class(PATCHES["a2"]) == patch_class(PATCHES["a3"])
    assert patch_class(PATCHES["a2"]) != patch_class(PATCHES["a1"])
    # indentation is code in Python: the same line at another depth is another change
    assert patch_class(PATCHES["a2"]) != patch_class(
        diff("pkg/core.py", "    return x", "  return x - 1")
    )
    one, two = diff("x.py", "a", "b"), diff("y.py", "c", "d", line=30)
    assert patch_class(one + two) == patch_class(two + one)
    assert patch_class("") == "empty" and patch_class(diff("x.py", "", "  ")) == "empty"
    assert patch_class(diff("x.py", "    return x", "    return x  # same")) == "empty"
    # a removed line that looks like a header stays a change inside its hunk
    tricky = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,1 @@\n--- a/x.py\n keep\n"
    assert patch_class(tricky) not in ("empty", patch_class(diff("x.py", "keep", "keep")))


def test_patch_class_of_hostile_patches_is_linear_and_never_raises():
    import time

    start = time.perf_counter()
    huge_count = "--- a/x.py\n+++ b/x.py\n@@ -1," + "9" * 5000 + " +1,1 @@\n-a\n+b\n"
    assert patch_class(huge_count) != patch_class(diff("x.py", "a", "b"))
    spaces = "--- a/x.py\n+++ b/x.py\n@@ -1,1 +1,1 @@\n-x = 0\n+x =" + " \t" * 2_000_000 + "1\n"
    assert patch_class(spaces) == patch_class(spaces.replace(" \t" * 2_000_000, " "))
    garbage = "\x00\xff@@ -1 +1 @@\n" * 100_000
    assert patch_class(garbage) == patch_class(garbage) != "empty"  # classed by its text
    assert time.perf_counter() - start < 20


def test_selectors_on_one_group_by_hand():
    assert majority_value(["p", "q", "q"], [True, False, False]) == 0.0
    assert majority_value(["p", "q"], [True, False]) == 0.5  # tied classes: averaged
    pick = verifier_value([0.3, None, 0.3], [False, True, True], ["p", "q", "r"])
    # the failed candidate is left out; the tie at 0.3 goes to the earlier position
    assert (pick.value, pick.tie_avg, pick.tied, pick.left_out) == (0.0, 0.5, True, 1)
    # the tie goes to the larger class when there is one
    assert verifier_value([0.3, 0.3, 0.1], [False, True, True], ["p", "q", "q"]).value == 1.0
    fallback = verifier_value([None, None], [True, False], ["p", "q"])
    assert fallback.fallback and fallback.value == 0.5


def figures_by_hand(draws: int) -> dict[int, dict]:
    ids = {A: [c for c in LABELS if c[0] == "a"], B: [c for c in LABELS if c[0] == "b"]}
    classes = {c: patch_class(PATCHES[c]) for c in LABELS}
    out = {}
    for n in (2, 4):
        groups = bon_groups(ids, n, seed=0, draws=draws)
        values = select_groups(groups, LABELS, classes, {A: "r1", B: "r2"}, {"v": SCORES})
        out[n] = summarize(values, seed=0, resamples=200)["selectors"]
    return out


def test_best_of_n_numbers_by_hand():
    s = figures_by_hand(draws=6)  # C(4, 2) = 6: every pair of each task
    # N=4, one group per task. A: the verifier takes a1 (resolved); the largest class is
    # {a2, a3} (unresolved); random 2/4. B: the verifier takes b1 (not resolved); four
    # classes of one, tied: 1/4; random 1/4.
    assert s[4]["v"]["rate"] == 0.5 and s[4]["random"]["rate"] == pytest.approx(0.375)
    assert s[4]["majority"]["rate"] == pytest.approx(0.125) and s[4]["oracle"]["rate"] == 1.0
    assert s[4]["v"]["gain_over_random"] == pytest.approx(0.125)
    # N=2, twelve pairs. A: a1 wins its three pairs, (a2,a3)->a3, (a2,a4)->a2, (a3,a4)->a3:
    # 3/6. B: b2 wins against b3 and b4: 2/6. random and majority: 3 + 1.5 of 12.
    # oracle: 5 + 3 of 12.
    assert s[2]["v"]["groups"] == 12 and s[2]["v"]["rate"] == pytest.approx(5 / 12)
    assert s[2]["random"]["rate"] == pytest.approx(4.5 / 12)
    assert s[2]["majority"]["rate"] == pytest.approx(4.5 / 12)
    assert s[2]["oracle"]["rate"] == pytest.approx(8 / 12)
    assert s[2]["v"]["tie_avg"] == pytest.approx(5 / 12)  # no tie among these scores
    assert s[2]["v"]["failed_as_random"] == pytest.approx(5 / 12)  # no failure either
    lo, hi = s[2]["v"]["ci95"]
    assert lo <= 5 / 12 <= hi


def test_bootstrap_resamples_tasks():
    assert bootstrap_mean_ci([]) is None
    assert bootstrap_mean_ci([("t", 1.0), ("t", 0.0)]) == (0.5, 0.5)  # one task: no spread
    lo, hi = bootstrap_mean_ci([("t", 1.0), ("u", 0.0)], resamples=500)
    assert lo == 0.0 and hi == 1.0


def test_candidate_sets_and_skip_reasons():
    usable, skipped, outcomes = tts.candidate_sets(records())
    assert sorted(usable) == sorted([A, B])
    assert [r.id for r, _ in usable[A]] == ["a1", "a2", "a3", "a4"]  # the gold left out
    assert outcomes == {"usable": 2, "one candidate": 2, "all resolved": 1}
    assert skipped["candidate: the gold patch (the oracle verifier reads it)"] == 2
    assert skipped["task: one candidate"] == 2  # c alone; e once its gold copy is out
    assert sum(v for k, v in skipped.items() if "unusable task row" in k) == 1
    kept, _, outcomes = tts.candidate_sets(records(), include_gold=True)
    assert len(kept[A]) == 5 and outcomes["usable"] == 3  # e is mixed with its gold copy


# ------------------------------------------------------------------------------ command


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    tts.add_arguments(parser)
    return parser.parse_args(argv)


def replay_file(path: Path, answers: list[bool]) -> Path:
    from sweworld.reward.swr.prompt import swr_target

    lines = [
        json.dumps({"text": swr_target({"tests/test_core.py::test_f": "PASSED"}, a)}) + "\n"
        for a in answers
    ]
    path.write_text("".join(lines))
    return path


def common(data: Path | list[Path], out: Path, spec: str) -> list[str]:
    folders = [str(d) for d in (data if isinstance(data, list) else [data])]
    options = "--sizes 2,4,8 --draws 6 --stages tests --calibration none --hunks-only"
    return ["--data", *folders, "--out", str(out), "--models", spec, *options.split()]


def test_cli_numbers_from_rows_and_resume_without_rescoring(tmp_path: Path):
    """Rows already in OUT are not rescored (the replay file would be exhausted): the
    report's numbers are the hand-computed ones."""
    from sweworld.cli import main

    data = write_dataset(tmp_path / "ds", records())
    spec = f"replay:{replay_file(tmp_path / 'one.jsonl', [True])}"
    out = tmp_path / "out"
    argv = common(data, out, spec)
    seeded = BenchOutput(out, "tts", settings=tts.scoring_settings(parse(argv)))
    for cid, score in SCORES.items():
        seeded.add_row(tts.row_key(spec, "oracle", cid), {"id": cid, "score": score})
    assert main(["bench", "tts", *argv]) == 0
    rows = (out / "rows.jsonl").read_text().splitlines()
    assert len(rows) == 8  # nothing rescored
    report = json.loads((out / "report.json").read_text())
    summary = report["summary"]
    name = f"{spec} (oracle)"
    assert summary["2"]["selectors"][name]["rate"] == pytest.approx(5 / 12)
    assert summary["4"]["selectors"][name]["rate"] == 0.5
    assert summary["4"]["selectors"]["majority"]["rate"] == pytest.approx(0.125)
    assert summary["8"]["selectors"] == {}  # no task has eight candidates
    assert report["skipped"]["N=8: tasks with fewer than 8 candidates"] == 2
    assert report["skipped"]["task: all resolved"] == 1
    main_table = report["figures"][0]
    assert [r[1] for r in main_table["rows"][:4]] == [
        f"verifier: {name}", "random", "majority", "oracle"]  # fmt: skip
    md = (out / "report.md").read_text()
    assert "Resolved rate of the chosen candidate" in md and "Candidate sets" in md
    assert (out / "best_of_n.png").exists() or "plot" not in main_table


def test_cli_scores_with_replay_and_keeps_failures(tmp_path: Path):
    """Real scoring through the reward model: every answer says 'resolved', so the
    candidates the model sees tie; the empty patch b4 scores 0 without a model call; the
    replay runs out after five calls, so b2 and b3 fail, keep their rows and are left out
    of the verifier's choice."""
    from sweworld.cli import main

    data = write_dataset(tmp_path / "ds", records())
    spec = f"replay:{replay_file(tmp_path / 'five.jsonl', [True] * 5)}"
    out = tmp_path / "out"
    assert main(["bench", "tts", *common(data, out, spec)]) == 0
    lines = [json.loads(x)["row"] for x in (out / "rows.jsonl").read_text().splitlines()]
    assert len(lines) == 8
    failed = sorted(r["id"] for r in lines if r["failed"])
    assert failed == ["b2", "b3"] and all(r["score"] is None for r in lines if r["failed"])
    scores = {r["id"]: r["score"] for r in lines if not r["failed"]}
    assert scores["b4"] == 0.0 and len({scores[c] for c in ("a1", "a2", "a3", "a4", "b1")}) == 1
    report = json.loads((out / "report.json").read_text())
    verifier = report["summary"]["4"]["selectors"][f"{spec} (oracle)"]
    # N=4. A: four tied scores, the tie goes to the largest class {a2, a3}: unresolved
    # (ties averaged: 2/4). B: b1 (scored) over b4 (0); b2, b3 left out: unresolved.
    assert verifier["rate"] == 0.0 and verifier["tie_avg"] == pytest.approx(0.25)
    assert verifier["counts"]["groups with a failed candidate left out"] == 1
    assert verifier["failed_as_random"] == pytest.approx((0.0 + 0.25) / 2)  # B: random
    # resume: nothing rescored; with --retry-failed the two failed ones are tried again
    assert main(["bench", "tts", *common(data, out, spec)]) == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 8
    assert main(["bench", "tts", *common(data, out, spec), "--retry-failed"]) == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 10


def test_cli_with_nothing_to_compare(tmp_path: Path):
    from sweworld.cli import main

    lone = [record("c1", "psf__requests-3", "psf/requests", PATCHES["a1"], True)]
    data = write_dataset(tmp_path / "ds", lone)
    out = tmp_path / "out"
    spec = f"replay:{replay_file(tmp_path / 'r.jsonl', [True])}"
    assert main(["bench", "tts", *common([data, tmp_path / "nope"], out, spec)]) == 1
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"]["task: one candidate"] == 1
    assert any(k.startswith("dataset unreadable") for k in report["skipped"])
    assert (out / "report.md").exists()
    assert main(["bench", "tts", *common(data, out, spec), "--modes", "sideways"]) == 2
    # rows scored with other settings are refused, not mixed in
    (out / "rows.jsonl").write_text(
        json.dumps({"key": tts.row_key(spec, "oracle", "c1"), "fingerprint": "x", "row": {}}) + "\n"
    )
    assert main(["bench", "tts", *common(data, out, spec)]) == 2
