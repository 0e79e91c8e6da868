"""``sweworld train verdict`` on a tiny labelled set built from the toy tasks."""

from __future__ import annotations

import json

import pytest

from sweworld.data.schema import SWRRecord, record_id, to_json
from sweworld.data.store import RecordStore, finalize
from sweworld.reward.verdict import VerdictModel
from sweworld.tasks.patches import make_unified_diff
from sweworld.tasks.toy import toy_data_dir

REPOS = ("sweworld/stockroom", "sweworld/warehouse", "sweworld/depot", "pallets/flask")


def _harmless(n: int) -> str:
    path = "stockroom/textutil.py"
    before = (toy_data_dir() / "repo" / path).read_text()
    return make_unified_diff(path, before, before + f"\n\nUNUSED_{n} = {n}\n")


@pytest.fixture(scope="module")
def verdict_data(tmp_path_factory, toy_tasks):
    """Gold (resolved), harmless and empty (not) candidates of the toy tasks, on four
    repositories (pallets/flask is held out)."""
    out = tmp_path_factory.mktemp("verdict-data")
    with RecordStore(out) as store:
        for r, repo in enumerate(REPOS):
            for task in toy_tasks:
                row = task.to_row()
                row["repo"] = repo
                row["instance_id"] = f"{repo.replace('/', '__')}-{task.instance_id[-1]}"
                for i, (patch, label) in enumerate(
                    ((task.patch, True), (_harmless(r), False), ("", False))
                ):
                    store.add(
                        SWRRecord(
                            id=record_id("test-verdict", repo, row["instance_id"], i),
                            source="factory",
                            instance_id=row["instance_id"],
                            repo=repo,
                            patch=patch,
                            resolved=label,
                            task=to_json(row),
                            candidate_kind="right" if label else "wrong",
                        )
                    )
    finalize(out)
    return out


def test_train_verdict_writes_a_model_and_prints_figures(verdict_data, tmp_path, capsys):
    from sweworld.train.verdict import main

    out = tmp_path / "verdict"
    features = tmp_path / "features.jsonl"
    args = ["--data", str(verdict_data), "--out", str(out), "--outcome", "none"]
    assert main([*args, "--features", str(features), "--max-iter", "20"]) == 0
    text = capsys.readouterr().out
    assert "labelled candidates: 48" in text
    assert "held-out repositories, oracle" in text and "gold_files" in text
    assert "leave one repository out, blind" in text
    model = VerdictModel.load(out / "model.json")
    assert set(model.modes) == {"oracle", "blind"}
    rows = [json.loads(line) for line in features.read_text().splitlines()]
    assert len(rows) == 48 and all(len(r["features"]["oracle"]) > 20 for r in rows)
    figures = json.loads((out / "figures.json").read_text())
    assert figures["oracle"]["heldout"]
    # the features cache is reused: a second run featurises nothing
    assert main([*args, "--features", str(features), "--learner", "logreg"]) == 0
    assert "(0 to featurise)" in capsys.readouterr().err
    # the outcome model's predictions are cached too, per model file: asked once
    with_outcome = [a for a in args if a not in ("--outcome", "none")] + ["--outcome", "default"]
    assert main([*with_outcome, "--features", str(features), "--learner", "logreg"]) == 0
    assert "of 48 candidates asked (0 cached)" in capsys.readouterr().err
    assert main([*with_outcome, "--features", str(features), "--learner", "logreg"]) == 0
    assert "of 0 candidates asked (48 cached)" in capsys.readouterr().err
    rows = [json.loads(line) for line in features.read_text().splitlines()]
    assert {len(r["outcome"]) for r in rows} == {64}  # the model file's sha256


def test_a_learner_worse_than_the_base_rate_ships_the_base_rate():
    """Out-of-fold scores with no signal: their AUC's interval reaches 0.5, so the base rate
    ships; with a signal the learner with the better AUC is kept, calibrated."""
    import numpy as np

    from sweworld.train.verdict_learn import choose_learner

    rng = np.random.default_rng(7)  # not the halves' seed: labels independent of the split
    y = (rng.random(600) < 0.85).astype(int)
    noise = {"logreg": rng.random(600), "hgb": rng.random(600)}
    chosen, cal, selection = choose_learner(noise, y)
    assert chosen == selection["chosen"] == "prior" and cal == {"kind": "none"}
    assert selection["auc_low"] <= 0.5
    signal = {"logreg": noise["logreg"], "hgb": np.clip(y * 0.6 + rng.random(600) * 0.4, 0, 1)}
    chosen, cal, selection = choose_learner(signal, y)
    assert chosen == selection["by_auc"] == "hgb" and cal["kind"] in ("isotonic", "platt")
    assert selection["calibrated_brier"] < selection["prior_brier"]
    assert selection["auc_low"] > 0.5


def test_decoys_are_made_from_the_gold_patch_with_their_labels(toy_tasks):
    """Per task with a checkout: a function nothing calls added to the gold patch's source
    file (unresolved: the FAIL_TO_PASS tests cannot change) and the same beside the gold
    patch (resolved); both apply to the base and parse."""
    import ast

    from sweworld.reward.model import RewardModel
    from sweworld.train.verdict_data import Candidate, decoy_candidates
    from sweworld.transition.outcome.state import FileState

    scorer = RewardModel(mode="oracle", stages=("syntax", "semantic"))
    base, _ = scorer.base_dir(toy_tasks[0])

    class Checkouts:
        def for_task(self, task, commit=""):
            return base if task.get("base_commit") == toy_tasks[0].base_commit else None

    cands = [
        Candidate(t.instance_id, t.repo, t.patch, True, t.to_row(), "test", "gold")
        for t in toy_tasks
    ]
    cands.append(Candidate("other", "x/y", "", False, {"base_commit": "f" * 40}, "test", "agent"))
    decoys = decoy_candidates(cands, Checkouts())
    same_base = [t for t in toy_tasks if t.base_commit == toy_tasks[0].base_commit]
    assert len(decoys) == 2 * len(same_base)
    assert decoy_candidates(cands, None) == []
    for d in decoys:
        assert d.source == "decoy" and d.resolved == (d.kind == "gold_decoy")
        state = FileState.from_diff(base, d.patch)
        assert state.changed, d.patch
        for rel in state.changed:
            ast.parse(state.text(rel))
        added = [ln for ln in d.patch.splitlines() if ln.startswith(("+def _", "+class _", "+_"))]
        assert added  # new code under a private name nothing refers to
        if d.kind == "decoy":
            lines = d.patch.splitlines()
            assert all(not ln.startswith("-") or ln.startswith("---") for ln in lines)


def test_a_candidate_seen_with_and_without_whole_files_counts_once():
    from sweworld.reward.verdict import VERDICT_FEATURES, WHOLE_FILE_FEATURES
    from sweworld.train.verdict import fit_matrix
    from sweworld.train.verdict_data import Candidate

    full = dict.fromkeys(VERDICT_FEATURES, 1.0)
    hunks_only = {**full, **dict.fromkeys(WHOLE_FILE_FEATURES, float("nan"))}
    rows = [
        Candidate("a-1", "o/a", "p", True, {}, "test", "agent", {"oracle": full}),
        Candidate("b-1", "o/b", "q", False, {}, "test", "agent", {"oracle": hunks_only}),
        Candidate("c-1", "o/c", "r", False, {}, "test", "agent", {"oracle": dict(full)}),
    ]
    X, y, groups, weight = fit_matrix(rows, "oracle")
    assert len(y) == 5  # two twins without whole files
    assert weight.tolist() == [0.5, 1.0, 0.5, 0.5, 0.5]
    assert float(weight.sum()) == len(rows)  # each candidate weighs one in all
    assert groups.tolist() == ["o/a", "o/b", "o/c", "o/a", "o/c"]  # a twin stays in its fold
    assert y.tolist() == [1, 0, 0, 1, 0]
    j = VERDICT_FEATURES.index(WHOLE_FILE_FEATURES[0])
    assert X[0, j] == 1.0 and X[3, j] != X[3, j]  # the twin reads it missing
