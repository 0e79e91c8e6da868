"""Metrics of a verifier: hand-computed values, undefined cases, best-of-N selection, CV."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest

from sweworld.reward.metrics import (
    best_of_n_metrics,
    binary_metrics,
    cross_validated_metrics,
    cross_validated_predictions,
    expected_calibration_error,
    metric_intervals,
    reliability_bins,
    roc_auc,
    select_best,
)

# positives score 0.9, 0.7, 0.2; negatives 0.8, 0.7 (one tie across classes)
LABELS = [True, False, True, False, True]
SCORES = [0.9, 0.8, 0.7, 0.7, 0.2]


def test_roc_auc_by_hand_with_a_tie():
    # pairs (pos, neg): (.9,.8)=1 (.9,.7)=1 (.7,.8)=0 (.7,.7)=1/2 (.2,.8)=0 (.2,.7)=0
    assert roc_auc(LABELS, SCORES) == pytest.approx(2.5 / 6)


def test_roc_auc_extremes_and_undefined():
    assert roc_auc([False, False, True, True], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert roc_auc([True, True, False, False], [0.1, 0.2, 0.3, 0.4]) == 0.0
    assert roc_auc([True, False, True, False], [0.5] * 4) == 0.5
    assert roc_auc([True, True], [0.1, 0.9]) is None
    assert roc_auc([], []) is None
    # ranks only: any monotone transform of the scores gives the same AUC
    assert roc_auc(LABELS, [10 * s - 3 for s in SCORES]) == pytest.approx(2.5 / 6)


def test_binary_metrics_by_hand():
    m = binary_metrics(LABELS, SCORES, threshold=0.5)
    # predicted positive: .9 .8 .7 .7 -> tp 2 (.9, .7), fp 2 (.8, .7); .2 is a missed positive
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (2, 2, 0, 1)
    assert (m["n"], m["positives"], m["negatives"]) == (5, 3, 2)
    assert m["accuracy"] == pytest.approx(2 / 5)
    assert m["precision"] == pytest.approx(1 / 2)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["specificity"] == 0.0
    assert m["f1"] == pytest.approx(4 / 7)
    assert m["balanced_accuracy"] == pytest.approx(1 / 3)
    assert m["roc_auc"] == pytest.approx(2.5 / 6)
    # (.1^2 + .8^2 + .3^2 + .7^2 + .8^2) / 5
    assert m["brier"] == pytest.approx(1.87 / 5)
    # bins: 9 {.9:+} -> .1, 8 {.8:-} -> .8, 7 {.7:+, .7:-} -> |.7-.5|=.2 (x2), 2 {.2:+} -> .8
    assert m["ece"] == pytest.approx((0.1 + 0.8 + 2 * 0.2 + 0.8) / 5)
    assert m["base_rate"] == pytest.approx(0.6)
    assert m["mean_score"] == pytest.approx(3.3 / 5)


def test_threshold_is_inclusive():
    m = binary_metrics([True, False], [0.5, 0.4], threshold=0.5)
    assert (m["tp"], m["fp"], m["accuracy"]) == (1, 0, 1.0)


def test_ece_tiny_cases():
    assert expected_calibration_error([False, True], [0.25, 0.75], n_bins=2) == pytest.approx(0.25)
    assert expected_calibration_error([False, True], [0.0, 1.0]) == 0.0
    # one bin: |mean score - base rate|
    assert expected_calibration_error([True, False, False], [0.9, 0.6, 0.3], n_bins=1) == (
        pytest.approx(abs(0.6 - 1 / 3))
    )
    assert expected_calibration_error([], []) is None
    assert expected_calibration_error([True], [1.5]) is None


def test_reliability_bins_include_one_in_last_bin():
    bins = reliability_bins([True, True, False], [1.0, 0.95, 0.05], n_bins=10)
    assert [(b["lo"], b["count"]) for b in bins] == [(0.0, 1), (0.9, 2)]
    assert bins[1]["frac_positive"] == 1.0
    assert bins[1]["mean_score"] == pytest.approx(0.975)
    with pytest.raises(ValueError):
        reliability_bins([True], [0.5], n_bins=0)


def test_empty_input_gives_none_not_a_crash():
    m = binary_metrics([], [])
    assert (m["n"], m["positives"], m["tp"], m["fn"]) == (0, 0, 0, 0)
    for key in ("accuracy", "precision", "recall", "f1", "balanced_accuracy", "roc_auc"):
        assert m[key] is None, key
    assert m["ece"] is None and m["brier"] is None


def test_undefined_ratios_are_none():
    one_class = binary_metrics([True, True], [0.9, 0.1])
    assert one_class["roc_auc"] is None
    assert one_class["specificity"] is None
    assert one_class["balanced_accuracy"] is None
    assert one_class["recall"] == 0.5 and one_class["precision"] == 1.0

    nothing_predicted = binary_metrics([True, False], [0.1, 0.2])
    assert nothing_predicted["precision"] is None
    assert nothing_predicted["f1"] == 0.0  # 2 tp / (2 tp + fp + fn) = 0 / 1
    assert nothing_predicted["recall"] == 0.0

    nothing_positive = binary_metrics([False, False], [0.1, 0.2])
    assert nothing_positive["f1"] is None and nothing_positive["recall"] is None
    assert nothing_positive["precision"] is None and nothing_positive["specificity"] == 1.0

    all_wrong = binary_metrics([True, False], [0.1, 0.9])
    assert all_wrong["precision"] == 0.0 and all_wrong["recall"] == 0.0
    assert all_wrong["f1"] == 0.0


def test_scores_outside_unit_interval_keep_ranking_metrics_only():
    m = binary_metrics([True, False], [3.0, -2.0], threshold=0.0)
    assert m["roc_auc"] == 1.0 and m["accuracy"] == 1.0
    assert m["ece"] is None and m["brier"] is None


@pytest.mark.parametrize(
    ("labels", "scores"),
    [
        ([True], [0.5, 0.5]),
        ([True], [math.nan]),
        ([True], [None]),
        ([2], [0.5]),
        (["yes"], [0.5]),
        ([True], [True]),
    ],
)
def test_bad_input_raises(labels, scores):
    with pytest.raises(ValueError):
        binary_metrics(labels, scores)


def test_integer_labels_are_accepted():
    assert binary_metrics([1, 0], [0.8, 0.3]) == binary_metrics([True, False], [0.8, 0.3])


# ------------------------------------------------------------------------------------------
# best-of-N
# ------------------------------------------------------------------------------------------


def test_best_of_n_by_hand():
    groups = {
        "t1": [(0.9, True), (0.1, False)],  # picks the positive; random 1/2; oracle 1
        "t2": [(0.8, False), (0.3, True), (0.2, False)],  # picks a negative; 1/3; 1
        "t3": [(0.5, False), (0.4, False)],  # nothing resolves; 0; 0
        "t4": [(0.7, True)],  # one candidate: not counted
    }
    m = best_of_n_metrics(groups)
    assert (m["n_tasks"], m["n_tasks_total"], m["n_skipped"]) == (3, 4, 1)
    assert m["n_candidates"] == 7
    assert m["mean_candidates"] == pytest.approx(7 / 3)
    assert m["selected"] == pytest.approx(1 / 3)
    assert m["selected_tie_avg"] == pytest.approx(1 / 3)
    assert m["random"] == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert m["oracle"] == pytest.approx(2 / 3)
    # (6/18 - 5/18) / (12/18 - 5/18)
    assert m["gap_closed"] == pytest.approx(1 / 7)
    assert m["mixed_tasks"] == 2 and m["tied_top"] == 0


def test_best_of_n_min_candidates_and_lists():
    groups = [[(0.7, True)], [(0.2, False), (0.6, True)]]
    assert best_of_n_metrics(groups, min_candidates=1)["n_tasks"] == 2
    m = best_of_n_metrics(groups)
    assert m["n_tasks"] == 1 and m["selected"] == 1.0 and m["gap_closed"] == 1.0


def test_select_best_tie_breaks():
    assert select_best([(0.2, None), (0.9, None), (0.9, None)]) == 1  # earliest among ties
    # a tie on the score goes to the larger class of equivalent candidates
    assert select_best([(0.5, False, "a"), (0.5, True, "b"), (0.1, False, "b")]) == 1
    # class size only breaks ties; the score comes first
    assert select_best([(0.6, False, "a"), (0.5, True, "b"), (0.5, True, "b")]) == 0
    with pytest.raises(ValueError):
        select_best([])


def test_best_of_n_ties_averaged():
    m = best_of_n_metrics([[(0.5, False), (0.5, True), (0.1, True)]])
    assert m["selected"] == 0.0  # the first of the tied
    assert m["selected_tie_avg"] == 0.5
    assert m["tied_top"] == 1


def test_best_of_n_empty_and_errors():
    m = best_of_n_metrics({})
    assert m["n_tasks"] == 0 and m["selected"] is None and m["oracle"] is None
    assert best_of_n_metrics({"t": [(1.0, True), (1.0, True)]})["gap_closed"] is None
    with pytest.raises(ValueError, match="no label"):
        best_of_n_metrics({"t": [(0.1, None), (0.2, True)]})
    with pytest.raises(ValueError, match="'t'"):
        best_of_n_metrics({"t": [(0.1,), (0.2, True)]})


# ------------------------------------------------------------------------------------------
# cross-validation
# ------------------------------------------------------------------------------------------


class _Recorder:
    """A model that predicts the mean training label and remembers what it was fitted on."""

    fitted_on: ClassVar[list[list]] = []

    def fit(self, X, y):
        self.mean = sum(y) / len(y)
        _Recorder.fitted_on.append(list(X))
        return self

    def predict(self, X):
        return [self.mean for _ in X]


def test_cross_validation_is_out_of_fold_and_grouped():
    _Recorder.fitted_on = []
    groups = ["a", "a", "b", "b", "c", "c", "d", "d"]
    X = list(groups)  # each row's feature is its group: leaks would show in the training sets
    y = [True, False, True, True, False, False, True, False]
    predictions = cross_validated_predictions(_Recorder, X, y, k=4, seed=1, groups=groups)
    assert len(_Recorder.fitted_on) == 4
    for train in _Recorder.fitted_on:
        held_out = {g for g in "abcd" if g not in train}
        assert len(held_out) == 1  # a whole group is held out, never half of one
    # each row is predicted by the mean label of the other groups
    for index, group in enumerate(groups):
        others = [y[i] for i in range(len(y)) if groups[i] != group]
        assert predictions[index] == pytest.approx(sum(others) / len(others))


def test_cross_validation_is_deterministic_and_stratified():
    y = [i % 4 == 0 for i in range(40)]  # 10 positives
    X = list(range(40))
    first = cross_validated_predictions(_Recorder, X, y, k=5, seed=3)
    assert first == cross_validated_predictions(_Recorder, X, y, k=5, seed=3)
    # stratified: every training set has 8 of the 10 positives out of 32 rows
    assert first == pytest.approx([8 / 32] * 40)


def test_cross_validation_limits():
    assert cross_validated_predictions(_Recorder, [], []) == []
    with pytest.raises(ValueError):
        cross_validated_predictions(_Recorder, [1, 2], [True, False], k=1)
    with pytest.raises(ValueError):
        cross_validated_predictions(_Recorder, [1], [True], k=2)
    m = cross_validated_metrics(_Recorder, [1, 2, 3], [True, False, True], k=10)
    assert m["cv_k"] == 3 and m["n"] == 3 and m["cv_grouped"] is False


# ------------------------------------------------------------------------------ intervals


def test_metric_intervals_cover_the_point_and_are_deterministic():
    labels = [i % 2 == 0 for i in range(200)]
    scores = [(0.6 if y else 0.4) + (i % 7) * 0.04 - 0.12 for i, y in enumerate(labels)]
    point = binary_metrics(labels, scores)
    spans = metric_intervals(labels, scores, draws=300, seed=3)
    for key in ("balanced_accuracy", "roc_auc", "ece"):
        lo, hi = spans[key]
        assert lo <= point[key] + 1e-9 and point[key] - 1e-9 <= hi and lo < hi
    assert metric_intervals(labels, scores, draws=300, seed=3) == spans
    assert metric_intervals(labels, scores, draws=300, seed=4) != spans


def test_metric_intervals_perfect_ranking_and_clusters():
    labels = [True, True, False, False] * 10
    scores = [0.9, 0.8, 0.2, 0.1] * 10
    spans = metric_intervals(labels, scores, [i // 4 for i in range(40)], draws=200)
    assert spans["roc_auc"] == (1.0, 1.0) and spans["balanced_accuracy"] == (1.0, 1.0)
    # |0.85 - 1| and |0.15 - 0| in every draw that keeps the task's balance
    assert spans["ece"] == pytest.approx((0.15, 0.15))


def test_metric_intervals_undefined_and_bad_input():
    assert metric_intervals([True, True], [0.9, 0.8], draws=50)["roc_auc"] is None
    assert metric_intervals([True, False], [3.0, -1.0], draws=50)["ece"] is None
    assert metric_intervals([], []) == dict.fromkeys(("balanced_accuracy", "roc_auc", "ece"))
    with pytest.raises(ValueError, match="groups"):
        metric_intervals([True, False], [0.9, 0.1], ["a"])
    with pytest.raises(ValueError, match="level"):
        metric_intervals([True, False], [0.9, 0.1], level=1.5)


@pytest.mark.parametrize("seed", range(5))
def test_metric_intervals_compute_what_binary_metrics_computes(seed):
    """One group: every draw is the whole sample, so each interval is one point, and that
    point is binary_metrics' value (ties, scores on the threshold and at 1.0 included)."""
    rng = np.random.default_rng(seed)
    n = 60 + 10 * seed
    labels = [bool(v) for v in rng.integers(0, 2, n)]
    scores = [float(v) for v in rng.choice([0.0, 0.1, 0.35, 0.5, 0.5, 0.72, 0.9, 1.0], n)]
    point = binary_metrics(labels, scores)
    spans = metric_intervals(labels, scores, ["task"] * n, draws=20, seed=seed)
    for key in ("balanced_accuracy", "roc_auc", "ece"):
        lo, hi = spans[key]
        assert lo == pytest.approx(point[key]) and hi == pytest.approx(point[key]), key
