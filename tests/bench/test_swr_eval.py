"""SWR evaluation: floors, metrics, best-of-N on constructed cases, and ``sweworld bench swr``
end to end with the replay LM (report, plots, resume, --fresh, skips, bad data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweworld.bench.swr_scoring import (
    best_of_n_table,
    bon_groups,
    bon_tasks,
    exact_stops,
    floor_scores,
    gold_files_score,
    metrics_of,
    sample_candidates,
    stage_score,
    task_of,
)
from sweworld.cli import main as cli_main
from sweworld.data.schema import SWRRecord
from sweworld.data.store import RecordStore
from tests.bench.fixtures import BOTH, GOLD, HALF, OTHER, swr_records, write_dataset


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


def test_stage_score_reads_the_verdicts():
    row = {
        "stages": {
            "syntax": {"verdict": "pass", "score": None},
            "typecheck": {"verdict": "skip", "score": None},
            "semantic": {"verdict": "fail", "score": 0.0},
            "tests": {"verdict": "pass", "score": 0.7},
        }
    }
    assert stage_score(row, "syntax") == 1.0 and stage_score(row, "semantic") == 0.0
    assert stage_score(row, "typecheck") is None and stage_score(row, "tests") == 0.7
    assert stage_score({"stages": {}}, "tests") is None  # stopped before it ran


def _replay(tmp_path: Path) -> Path:
    from sweworld.reward.swr.prompt import swr_target

    answer = swr_target(
        {"tests/test_core.py::test_f": "PASSED", "tests/test_core.py::test_g": "PASSED"}, True
    )
    replay = tmp_path / "swr.jsonl"
    replay.write_text("".join(json.dumps({"text": answer}) + "\n" for _ in range(40)))
    return replay


def _bench(data: Path, replay: Path, out: Path, *extra: str) -> int:
    argv = ["bench", "swr", "--data", str(data), "--models", f"replay:{replay}", "--out",
            str(out), "--modes", "oracle", "--hunks-only"]  # fmt: skip
    return cli_main([*argv, *extra])


def _table(report: dict, title: str, key: int = 0) -> dict:
    fig = next(f for f in report["figures"] if f["title"] == title)
    return {
        tuple(row[: key + 1]) if key else row[0]: dict(zip(fig["columns"], row, strict=True))
        for row in fig["rows"]
    }


def _rows(out: Path) -> list[str]:
    return (out / "rows.jsonl").read_text().splitlines()


@pytest.mark.slow
def test_bench_swr_report_resume_and_fresh(tmp_path: Path):
    data = write_dataset(tmp_path / "ds", swr_records())
    replay = _replay(tmp_path)
    out = tmp_path / "R"
    assert _bench(data, replay, out, "--limit", "0") == 0
    report = json.loads((out / "report.json").read_text())
    assert report["benchmark"] == "swr" and report["finished"] and report["skipped"] == {}
    assert report["sample"]["n"] == 8 and report["sample"]["resolved"] == 4
    table = _table(report, "Classification against real labels")
    model = table[f"replay:{replay} (oracle): all stages"]
    # every candidate gets P = 0.95 (all tests predicted to pass): all predicted resolved
    assert model["n"] == 8 and model["accuracy"] == 0.5 and model["recall"] == 1.0
    assert model["precision"] == 0.5 and model["F1"] == pytest.approx(2 / 3)
    assert model["ROC AUC"] == 0.5 and model["ECE"] == pytest.approx(0.45)
    assert table[f"replay:{replay} (oracle): syntax stage alone"]["accuracy"] == 0.5
    assert table["floor: always resolved"]["ECE"] == pytest.approx(0.5)
    gold = table["floor: gold files"]
    # gold, both: 1 (resolved); half: 1 (not resolved); other: 0 (not resolved), per task
    assert gold["accuracy"] == 0.75 and gold["precision"] == pytest.approx(4 / 6)
    assert gold["balanced accuracy"] == 0.75 and gold["ROC AUC"] == 0.75
    assert gold["ECE"] == pytest.approx(6 / 8 * (1 - 4 / 6))
    spans = _table(report, "Intervals of the combined score")
    # every candidate scores 0.95: AUC 0.5 in every draw; 2 tasks of 4 candidates each
    assert spans[f"replay:{replay} (oracle): all stages"]["ROC AUC"] == "0.500 [0.500, 0.500]"
    assert spans["floor: gold files"]["tasks"] == 2
    per_repo = _table(report, "Classification per repository", key=1)
    assert per_repo[("psf/requests", "floor: gold files")]["n"] == 4
    calibration = _table(report, "Calibration of the combined score")
    assert calibration[f"replay:{replay} (oracle)"]["mean score"] == pytest.approx(0.95)
    confusion = _table(report, "Confusion matrices (threshold 0.5)")[f"replay:{replay} (oracle)"]
    assert (confusion["true positive"], confusion["false positive"]) == (4, 4)
    latency = _table(report, "Time to score one candidate")[f"replay:{replay} (oracle)"]
    assert latency["n"] == 8 and 0 <= latency["p50 s"] <= latency["p90 s"] <= latency["max s"]
    bon = _table(report, "Best of N", key=1)
    # N = 4: one subset per task (all 4 candidates); gold files ties gold, both, half: 2/3
    assert bon[(4, "floor: gold files")]["selected resolves"] == pytest.approx(2 / 3)
    assert bon[(4, "floor: gold files")]["subsets"] == 2
    assert bon[(4, f"replay:{replay} (oracle): all stages")]["selected resolves"] == 0.5
    assert bon[(4, "floor: always resolved")]["oracle"] == 1.0
    md = (out / "report.md").read_text()
    assert "## Classification against real labels" in md and "| floor: gold files |" in md
    for png in ("calibration.png", "confusion_1.png", "best_of_n.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert len(_rows(out)) == 8
    # resumed: nothing redone, the model not even built (its replay file is gone)
    replay.rename(tmp_path / "away.jsonl")
    assert _bench(data, replay, out, "--limit", "0") == 0
    again = json.loads((out / "report.json").read_text())
    assert len(_rows(out)) == 8 and again["resumed_rows"] == 8 and again["skipped"] == {}
    assert _table(again, "Classification against real labels") == table
    # other settings: refused; --fresh starts over
    (tmp_path / "away.jsonl").rename(replay)
    assert _bench(data, replay, out, "--limit", "2", "--bon-tasks", "0") == 2
    assert _bench(data, replay, out, "--limit", "2", "--bon-tasks", "0", "--fresh") == 0
    assert len(_rows(out)) == 2


def test_bench_swr_counts_bad_records_and_bad_data(tmp_path: Path, capsys):
    good, other = swr_records()[0], swr_records()[3]
    no_task = SWRRecord(id="no-task", source="t", instance_id="psf__requests-9",
                        repo="psf/requests", patch=GOLD, resolved=True)  # fmt: skip
    folder = tmp_path / "raw"  # record files, not finalized: read row by row
    with RecordStore(folder) as store:
        for record in (good, other, no_task):
            store.add(record)
    lacking = good.to_dict()
    lacking["id"] = "no-label"
    del lacking["resolved"]
    with (folder / "records" / "swr.jsonl").open("a") as fh:
        fh.write(json.dumps(lacking) + "\n")
    replay = _replay(tmp_path)
    out = tmp_path / "R"
    assert _bench(folder, replay, out, "--bon-tasks", "0") == 0
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {"missing field: resolved": 1, "unusable task row: no task row": 1}
    model = _table(report, "Classification against real labels")[
        f"replay:{replay} (oracle): all stages"
    ]
    assert model["n"] == 2 and model["accuracy"] == 0.5
    assert _bench(tmp_path / "nowhere", replay, tmp_path / "R2") == 2
    assert "no such dataset folder" in capsys.readouterr().err
    empty = write_dataset(tmp_path / "ds", [r for r in swr_records() if r.repo == "owner/trained"])
    assert _bench(empty, replay, tmp_path / "R3") == 2
    assert "sweworld: error: no SWR records in the test split" in capsys.readouterr().err
