"""Metrics of a verifier: binary classification, calibration and best-of-N selection.

Pure Python (no numpy): the data are at most a few thousand candidates.

Conventions (used by every function here):

* a label is a ``bool`` (``0``/``1`` are accepted); a score is a finite float. ``None`` or NaN
  scores and labels are rejected with ``ValueError`` rather than silently dropped;
* a candidate is predicted positive when ``score >= threshold``;
* a ratio whose denominator is zero is ``None`` (never a crash, never a made-up 0 or 1);
  ``f1`` is ``0.0`` when precision and recall are both defined and both zero;
* calibration metrics (``ece``, ``brier``) need probabilities: they are ``None`` when a score
  lies outside ``[0, 1]`` (e.g. raw logits), while the ranking metric ``roc_auc`` is still
  reported.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "FitPredict",
    "best_of_n_metrics",
    "binary_metrics",
    "cross_validated_metrics",
    "cross_validated_predictions",
    "expected_calibration_error",
    "reliability_bins",
    "roc_auc",
    "select_best",
]


def _check_inputs(labels: Sequence[Any], scores: Sequence[Any]) -> tuple[list[bool], list[float]]:
    if len(labels) != len(scores):
        raise ValueError(f"labels and scores differ in length ({len(labels)} vs {len(scores)})")
    out_labels = [_as_label(value, f"label {index}") for index, value in enumerate(labels)]
    out_scores = [_as_score(value, f"score {index}") for index, value in enumerate(scores)]
    return out_labels, out_scores


def _as_label(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    raise ValueError(f"{what} must be a bool (or 0/1), got {value!r}")


def _as_score(value: Any, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(score):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return score


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve, by ranks (the Mann-Whitney U statistic / (n_pos * n_neg)).

    Tied scores get the average of the ranks they span, so a positive tied with a negative
    counts one half. ``None`` when either class is absent.
    """
    ys, xs = _check_inputs(labels, scores)
    n_pos = sum(ys)
    n_neg = len(ys) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    rank_sum_pos = 0.0
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and xs[order[end + 1]] == xs[order[start]]:
            end += 1
        mid_rank = (start + end) / 2.0 + 1.0  # ranks are 1-based
        rank_sum_pos += mid_rank * sum(1 for i in order[start : end + 1] if ys[i])
        start = end + 1
    u_stat = rank_sum_pos - n_pos * (n_pos + 1) / 2.0
    return u_stat / (n_pos * n_neg)


def reliability_bins(
    labels: Sequence[bool], scores: Sequence[float], n_bins: int = 10
) -> list[dict[str, float | int]]:
    """Equal-width bins over ``[0, 1]`` for a reliability diagram.

    Bin ``b`` holds scores in ``[b/n_bins, (b+1)/n_bins)``; the last bin also holds ``1.0``.
    Returns only non-empty bins, each ``{"lo", "hi", "count", "mean_score", "frac_positive"}``.
    Raises ``ValueError`` for a score outside ``[0, 1]``.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    ys, xs = _check_inputs(labels, scores)
    counts = [0] * n_bins
    score_sums = [0.0] * n_bins
    positive = [0] * n_bins
    for y, x in zip(ys, xs, strict=True):
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"score {x!r} is not a probability in [0, 1]")
        b = min(int(x * n_bins), n_bins - 1)
        counts[b] += 1
        score_sums[b] += x
        positive[b] += int(y)
    return [
        {
            "lo": b / n_bins,
            "hi": (b + 1) / n_bins,
            "count": counts[b],
            "mean_score": score_sums[b] / counts[b],
            "frac_positive": positive[b] / counts[b],
        }
        for b in range(n_bins)
        if counts[b]
    ]


def expected_calibration_error(
    labels: Sequence[bool], scores: Sequence[float], n_bins: int = 10
) -> float | None:
    """ECE with equal-width bins: ``sum_b (n_b / n) * |mean score_b - fraction positive_b|``.

    Bins as in :func:`reliability_bins`. ``None`` for empty input or a score outside
    ``[0, 1]``.
    """
    if not labels and not scores:
        return None
    try:
        bins = reliability_bins(labels, scores, n_bins)
    except ValueError:
        _check_inputs(labels, scores)  # re-raise input errors; only the range means None
        return None
    n = sum(int(b["count"]) for b in bins)
    return sum(
        int(b["count"]) / n * abs(float(b["mean_score"]) - float(b["frac_positive"])) for b in bins
    )


def binary_metrics(
    labels: Sequence[bool],
    scores: Sequence[float],
    threshold: float = 0.5,
    *,
    n_bins: int = 10,
) -> dict[str, Any]:
    """Classification and calibration metrics of ``scores`` against ``labels``.

    Keys: ``n``, ``positives``, ``negatives``, ``threshold``, ``tp``, ``fp``, ``tn``, ``fn``,
    ``accuracy``, ``precision`` (tp / predicted positive), ``recall`` (tp / positives),
    ``specificity`` (tn / negatives), ``f1``, ``balanced_accuracy`` (mean of recall and
    specificity; ``None`` unless both classes are present), ``roc_auc`` (rank-based, ties
    averaged; ``None`` unless both classes are present), ``ece`` (equal-width bins,
    ``n_bins``; see :func:`expected_calibration_error`), ``brier`` (mean squared error of the
    score as a probability), ``mean_score`` and ``base_rate`` (positives / n).

    Empty input gives zero counts and ``None`` for every ratio. See the module docstring for
    the conventions on undefined ratios and non-probability scores.
    """
    ys, xs = _check_inputs(labels, scores)
    n = len(ys)
    positives = sum(ys)
    negatives = n - positives
    tp = sum(1 for y, x in zip(ys, xs, strict=True) if y and x >= threshold)
    fp = sum(1 for y, x in zip(ys, xs, strict=True) if not y and x >= threshold)
    fn = positives - tp
    tn = negatives - fp
    precision = _ratio(tp, tp + fp)
    recall = _ratio(tp, positives)
    specificity = _ratio(tn, negatives)
    if precision is None or recall is None:
        f1 = None
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    balanced = None if recall is None or specificity is None else (recall + specificity) / 2
    probabilities = all(0.0 <= x <= 1.0 for x in xs)
    brier = (
        sum((x - float(y)) ** 2 for y, x in zip(ys, xs, strict=True)) / n
        if n and probabilities
        else None
    )
    return {
        "n": n,
        "positives": positives,
        "negatives": negatives,
        "threshold": threshold,
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "accuracy": _ratio(tp + tn, n),
        "precision": precision,
        "recall": recall,
        "specificity": specificity,
        "f1": f1,
        "balanced_accuracy": balanced,
        "roc_auc": roc_auc(ys, xs),
        "ece": expected_calibration_error(ys, xs, n_bins) if n else None,
        "brier": brier,
        "mean_score": _ratio(sum(xs), n),
        "base_rate": _ratio(positives, n),
    }


# ------------------------------------------------------------------------------------------
# Best-of-N
# ------------------------------------------------------------------------------------------


def _unpack(item: Sequence[Any], where: str) -> tuple[float, bool | None, Any]:
    if not isinstance(item, Sequence) or isinstance(item, str) or len(item) not in (2, 3):
        raise ValueError(f"{where}: expected (score, label) or (score, label, class_id)")
    score = _as_score(item[0], f"{where} score")
    label = None if item[1] is None else _as_label(item[1], f"{where} label")
    class_id = item[2] if len(item) == 3 else None
    return score, label, class_id


def select_best(candidates: Sequence[Sequence[Any]]) -> int:
    """Index of the candidate a verifier picks: the highest score.

    ``candidates`` are ``(score, label[, class_id])`` (the label is not looked at; it may be
    ``None``). Ties on the top score are broken, deterministically, by:

    1. the size of the candidate's class (how many candidates of the task share its
       ``class_id``; candidates without one form a class of their own), larger first:
       agreement between independent samples is evidence;
    2. the position in the list, earlier first.

    Raises ``ValueError`` for an empty list.
    """
    if not candidates:
        raise ValueError("select_best needs at least one candidate")
    unpacked = [_unpack(item, f"candidate {i}") for i, item in enumerate(candidates)]
    sizes = Counter(c for _, _, c in unpacked if c is not None)
    best = 0
    best_key: tuple[float, int] | None = None
    for index, (score, _, class_id) in enumerate(unpacked):
        key = (score, sizes[class_id] if class_id is not None else 1)
        if best_key is None or key > best_key:
            best, best_key = index, key
    return best


def best_of_n_metrics(
    groups: Mapping[Any, Sequence[Sequence[Any]]] | Iterable[Sequence[Sequence[Any]]],
    *,
    min_candidates: int = 2,
) -> dict[str, Any]:
    """How well scores pick a resolving candidate among N per task.

    ``groups``: per task a list of ``(score, label[, class_id])`` (a mapping task id -> list,
    or an iterable of lists). Only tasks with at least ``min_candidates`` (default 2)
    candidates are counted; labels must all be known there (``ValueError`` otherwise).

    Returns:
        ``n_tasks`` (counted), ``n_tasks_total``, ``n_skipped`` (too few candidates),
        ``n_candidates`` (in counted tasks), ``mean_candidates``;
        ``selected``: resolve rate of the candidate :func:`select_best` picks;
        ``selected_tie_avg``: the same with ties on the top score averaged (a random pick
        among the tied), insensitive to the tie-break;
        ``random``: expected resolve rate of a uniformly random candidate (mean over tasks
        of the fraction resolved);
        ``oracle``: fraction of tasks where some candidate resolves;
        ``gap_closed``: ``(selected - random) / (oracle - random)`` (``None`` when
        ``oracle == random``); ``tied_top``: tasks whose top score is shared;
        ``mixed_tasks``: tasks with both resolving and non-resolving candidates (the only
        tasks where the choice matters). Rates are ``None`` when no task is counted.
    """
    if isinstance(groups, Mapping):
        names, items = [repr(key) for key in groups], list(groups.values())
    else:
        items = list(groups)
        names = [str(index) for index in range(len(items))]
    n_total = len(items)
    counted = 0
    n_candidates = 0
    selected = selected_tie = random_sum = oracle = 0.0
    tied_top = mixed = 0
    for name, group in zip(names, items, strict=True):
        group = list(group)
        if len(group) < max(min_candidates, 1):
            continue
        unpacked = [_unpack(item, f"task {name} candidate {i}") for i, item in enumerate(group)]
        labels = [label for _, label, _ in unpacked]
        if any(label is None for label in labels):
            raise ValueError(f"task {name}: a candidate has no label (None)")
        counted += 1
        n_candidates += len(group)
        best = select_best(group)
        selected += float(bool(labels[best]))
        top = max(score for score, _, _ in unpacked)
        tied = [bool(label) for score, label, _ in unpacked if score == top]
        selected_tie += sum(tied) / len(tied)
        tied_top += int(len(tied) > 1)
        n_pos = sum(bool(label) for label in labels)
        random_sum += n_pos / len(labels)
        oracle += float(n_pos > 0)
        mixed += int(0 < n_pos < len(labels))
    if not counted:
        sel = sel_tie = rnd = orc = gap = mean_n = None
    else:
        sel, sel_tie = selected / counted, selected_tie / counted
        rnd, orc = random_sum / counted, oracle / counted
        gap = (sel - rnd) / (orc - rnd) if orc - rnd > 1e-12 else None
        mean_n = n_candidates / counted
    return {
        "n_tasks": counted,
        "n_tasks_total": n_total,
        "n_skipped": n_total - counted,
        "n_candidates": n_candidates,
        "mean_candidates": mean_n,
        "selected": sel,
        "selected_tie_avg": sel_tie,
        "random": rnd,
        "oracle": orc,
        "gap_closed": gap,
        "tied_top": tied_top,
        "mixed_tasks": mixed,
    }


# ------------------------------------------------------------------------------------------
# Cross-validation (honest, out-of-fold metrics of a fitted model, e.g. a calibrator)
# ------------------------------------------------------------------------------------------


class FitPredict(Protocol):
    """What cross-validation needs of a model (every ``sweworld.reward.calibration``
    calibrator is one)."""

    def fit(self, X: Sequence[Any], y: Sequence[bool]) -> Any: ...

    def predict(self, X: Sequence[Any]) -> list[float]: ...


def _folds(
    labels: list[bool], k: int, seed: int, groups: Sequence[Hashable] | None
) -> tuple[list[int], int]:
    """Fold index per row and the number of folds used (see cross_validated_predictions)."""
    units: dict[Hashable, list[int]] = {}
    for index in range(len(labels)):
        units.setdefault(groups[index] if groups is not None else index, []).append(index)
    keys = list(units)
    if len(keys) < 2:
        raise ValueError("cross-validation needs at least 2 rows (or groups)")
    k = min(k, len(keys))
    random.Random(seed).shuffle(keys)

    def stratum(key: Hashable) -> tuple[bool, bool]:
        members = [labels[i] for i in units[key]]
        return (any(members), all(members))

    keys.sort(key=stratum)  # stable: the shuffled order is kept within a stratum
    folds = [0] * len(labels)
    for position, key in enumerate(keys):
        for index in units[key]:
            folds[index] = position % k
    return folds, k


def _check_cv(X: Sequence[Any], y: Sequence[Any], k: int, groups: Any) -> list[bool]:
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    if len(X) != len(y):
        raise ValueError(f"X and y differ in length ({len(X)} vs {len(y)})")
    if groups is not None and len(groups) != len(y):
        raise ValueError(f"groups and y differ in length ({len(groups)} vs {len(y)})")
    return [_as_label(value, f"label {i}") for i, value in enumerate(y)]


def cross_validated_predictions(
    make_cal: Callable[[], FitPredict],
    X: Sequence[Any],
    y: Sequence[bool],
    k: int = 5,
    seed: int = 0,
    *,
    groups: Sequence[Hashable] | None = None,
) -> list[float]:
    """Out-of-fold predictions: each row predicted by a model fitted without its fold.

    Folds are stratified by label: rows are shuffled with ``random.Random(seed)``, sorted
    (stably) by class and dealt round-robin, so the result is deterministic. With ``groups``
    (e.g. each candidate's task id) all rows of a group fall in the same fold, so no task
    leaks from training into its own evaluation; groups are then stratified by (has a
    positive, all positive). ``k`` is lowered to the number of rows (groups) when larger.
    A fresh model comes from ``make_cal()`` for every fold; a training fold may hold a
    single class, which the model must accept (all calibrators here do).
    """
    labels = _check_cv(X, y, k, groups)
    if not labels:
        return []
    folds, k = _folds(labels, k, seed, groups)
    out: list[float] = [0.0] * len(labels)
    for fold in range(k):
        train = [i for i, f in enumerate(folds) if f != fold]
        test = [i for i, f in enumerate(folds) if f == fold]
        model = make_cal()
        model.fit([X[i] for i in train], [labels[i] for i in train])
        predictions = model.predict([X[i] for i in test])
        for index, value in zip(test, predictions, strict=True):
            out[index] = float(value)
    return out


def cross_validated_metrics(
    make_cal: Callable[[], FitPredict],
    X: Sequence[Any],
    y: Sequence[bool],
    k: int = 5,
    seed: int = 0,
    *,
    groups: Sequence[Hashable] | None = None,
    threshold: float = 0.5,
    n_bins: int = 10,
) -> dict[str, Any]:
    """:func:`binary_metrics` of :func:`cross_validated_predictions`, plus ``cv_k`` (folds
    used), ``cv_seed`` and ``cv_grouped``."""
    labels = _check_cv(X, y, k, groups)
    predictions = cross_validated_predictions(make_cal, X, labels, k, seed, groups=groups)
    result = binary_metrics(labels, predictions, threshold, n_bins=n_bins)
    k_used = _folds(labels, k, seed, groups)[1] if labels else 0
    result.update({"cv_k": k_used, "cv_seed": seed, "cv_grouped": groups is not None})
    return result
