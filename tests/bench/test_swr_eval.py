"""SWR evaluation: floors, metrics, best-of-N on constructed cases, and the script end to end
with the replay LM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweworld.bench.swr_eval import (
    best_of_n_table,
    bon_groups,
    bon_tasks,
    exact_stops,
    floor_scores,
    gold_files_score,
    metrics_of,
    sample_candidates,
    task_of,
)
from sweworld.data.schema import SWRRecord
from tests.bench.fixtures import BOTH, GOLD, HALF, OTHER, load_script, swr_records, write_dataset


def test_gold_files_heuristic():
    assert gold_files_score(GOLD, GOLD) == 1.0
    assert gold_files_score(BOTH, GOLD) == 1.0  # touches the gold file and more
    assert gold_files_score(HALF, GOLD) == 1.0  # right file, wrong change: the floor's blind spot
    assert gold_files_score(OTHER, GOLD) == 0.0
    assert gold_files_score("", GOLD) == 0.0
    assert gold_files_score(GOLD, "") is None  # no gold file: no prediction


def test_floor_scores_are_seeded_per_record():
    record = swr_records()[0]
    a = floor_scores(record, GOLD, seed=1)
    assert a["always resolved"] == 1.0 and a["gold files"] == 1.0
    assert 0.0 <= a["random"] <= 1.0
    assert floor_scores(record, GOLD, seed=1)["random"] == a["random"]
    assert floor_scores(record, GOLD, seed=2)["random"] != a["random"]


def test_metrics_of_by_hand():
    rows = [
        {"label": True, "s": 0.9},
        {"label": True, "s": 0.4},
        {"label": False, "s": 0.6},
        {"label": False, "s": 0.1},
        {"label": False, "s": None},
    ]
    m = metrics_of(rows, "s")
    # predicted positive: 0.9 (tp), 0.6 (fp); negative: 0.4 (fn), 0.1 (tn)
    assert (m["tp"], m["fp"], m["fn"], m["tn"], m["no_prediction"]) == (1, 1, 1, 1, 1)
    assert m["accuracy"] == 0.5 and m["precision"] == 0.5 and m["recall"] == 0.5
    assert m["roc_auc"] == 0.75  # pairs (0.9>0.6, 0.9>0.1, 0.4<0.6, 0.4>0.1): 3 of 4
    # ECE, 10 bins: each score alone in its bin: (|0.9-1| + |0.4-1| + |0.6-0| + |0.1-0|) / 4
    assert m["ece"] == pytest.approx((0.1 + 0.6 + 0.6 + 0.1) / 4)


def test_exact_stops_counts_real_labels():
    rows = [
        {"label": False, "stopped_by": "syntax"},
        {"label": True, "stopped_by": "syntax"},
        {"label": False, "stopped_by": None},
    ]
    assert exact_stops(rows) == {"syntax": {"stopped": 2, "really_resolved": 1}}


def test_best_of_n_on_a_constructed_case():
    labels = {"a1": True, "a2": False, "b1": False, "b2": False, "c1": True, "c2": False}
    scores = {"a1": 0.9, "a2": 0.2, "b1": 0.5, "b2": 0.5, "c1": 0.1, "c2": 0.8}
    groups = [("a", ["a1", "a2"]), ("b", ["b1", "b2"]), ("c", ["c1", "c2"])]
    m = best_of_n_table(groups, scores, labels)
    # picks a1 (resolved), a tie in b (none resolves), c2 (not resolved)
    assert m["selected"] == pytest.approx(1 / 3)
    assert m["random"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert m["oracle"] == pytest.approx(2 / 3)
    assert m["n_tasks"] == 3 and m["mixed_tasks"] == 2
    scores.pop("c1")
    assert best_of_n_table(groups, scores, labels)["unscored_groups"] == 1


def test_bon_groups_sizes_and_determinism():
    tasks = {"t": [f"c{i}" for i in range(5)], "u": ["u1", "u2"]}
    two = bon_groups(tasks, 2, seed=0, draws=3)
    assert sum(1 for t, _ in two if t == "t") == 3  # C(5,2) = 10 > 3 draws
    assert sum(1 for t, _ in two if t == "u") == 1  # exactly two candidates: the one subset
    assert all(len(ids) == 2 and len(set(ids)) == 2 for _, ids in two)
    assert bon_groups(tasks, 2, seed=0, draws=3) == two
    assert [t for t, _ in bon_groups(tasks, 4, draws=3)] == ["t"] * 3
    assert bon_groups(tasks, 8) == []


def test_bon_tasks_prefers_tasks_with_both_labels():
    records = swr_records()
    one_label = [
        SWRRecord(
            id=f"x{i}", source="t", instance_id="x", repo="psf/requests", patch=p, resolved=False
        )
        for i, p in enumerate((GOLD, OTHER))
    ]
    chosen = bon_tasks(records + one_label, 2)
    assert set(chosen) == {"psf__requests-1", "pallets__flask-2"}
    # every task with two distinct candidates, the both-label ones first; the training
    # repository's task has one candidate only: no choice to make
    everything = list(bon_tasks(records + one_label, None))
    assert everything[2:] == ["x"] and "owner__trained-1" not in everything


def test_sample_is_label_balanced_and_tasks_read_back():
    records = [r for r in swr_records() if r.repo != "owner/trained"]
    sample = sample_candidates(records, 4, seed=0)
    assert sum(r.resolved for r in sample) == 2
    assert {r.repo for r in sample} == {"psf/requests", "pallets/flask"}
    assert task_of(records[0]).patch == GOLD
    with pytest.raises(ValueError):
        task_of(SWRRecord(id="b", source="t", instance_id="b", repo="r", patch="", resolved=False))


@pytest.mark.slow
def test_heldout_swr_script_end_to_end_with_replay(tmp_path: Path, capsys):
    main = load_script("heldout_swr").main
    from sweworld.reward.swr.prompt import swr_target

    data = write_dataset(tmp_path / "ds", swr_records())
    answer = swr_target(
        {"tests/test_core.py::test_f": "PASSED", "tests/test_core.py::test_g": "PASSED"}, True
    )
    replay = tmp_path / "swr.jsonl"
    replay.write_text("".join(json.dumps({"text": answer}) + "\n" for _ in range(20)))
    out = tmp_path / "swr.json"
    code = main(["--data", str(data), "--models", f"replay:{replay}", "--modes", "oracle",
                 "--limit", "4", "--hunks-only", "--json", str(out)])  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    assert report["sample"]["n"] == 4 and report["sample"]["resolved"] == 2
    assert report["data"]["records"] == 8  # the training repository is not in the test split
    entry = report["models"][f"replay:{replay}"]["oracle"]
    assert len(entry["rows"]) == 8  # the sample and every candidate of the best-of-N tasks
    assert all(r["tests_p"] is not None and r["score"] > 0.5 for r in entry["rows"])
    overall = entry["classification"]["overall"]["score"]
    assert overall["n"] == 4 and overall["recall"] == 1.0 and overall["accuracy"] == 0.5
    floors = report["floors"]["classification"]["overall"]
    assert floors["always resolved"]["accuracy"] == 0.5
    assert entry["best_of_n"]["2"]["n_tasks"] > 0
    assert "== SWR oracle" in capsys.readouterr().out
