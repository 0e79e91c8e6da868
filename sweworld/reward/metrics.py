"""Metrics of a verifier: binary classification, calibration and best-of-N selection.

The classification and ranking metrics are scikit-learn's (``sklearn.metrics``), the folds of
cross-validation are ``sklearn.model_selection``'s; what scikit-learn lacks stays here: the
expected calibration error with its reliability bins, best-of-N selection, and the
conventions below, which hold for every function of this module:

* a label is a ``bool`` (``0``/``1`` are accepted); a score is a finite float. ``None`` or NaN
  scores and labels are rejected with ``ValueError`` rather than silently dropped;
* a candidate is predicted positive when ``score >= threshold``;
* a ratio whose denominator is zero is ``None`` (never a crash, never a made-up 0 or 1);
  ``f1`` is ``2 tp / (2 tp + fp + fn)``, ``None`` only when nothing is positive, neither a
  label nor a prediction;
* calibration metrics (``ece``, ``brier``) need probabilities: they are ``None`` when a score
  lies outside ``[0, 1]`` (e.g. raw logits), while the ranking metric ``roc_auc`` is still
  reported.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from sklearn import metrics as skm
from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold

__all__ = [
    "FitPredict",
    "best_of_n_metrics",
    "binary_metrics",
    "cross_validated_metrics",
    "cross_validated_predictions",
    "expected_calibration_error",
    "metric_intervals",
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
    return float(num / den) if den else None


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``: tied scores count one
    half). ``None`` when either class is absent."""
    ys, xs = _check_inputs(labels, scores)
    if len(set(ys)) < 2:
        return None
    return float(skm.roc_auc_score(ys, xs))


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
    x = np.asarray(xs, dtype=float)
    outside = x[(x < 0.0) | (x > 1.0)]
    if outside.size:
        raise ValueError(f"score {float(outside[0])!r} is not a probability in [0, 1]")
    index = np.minimum((x * n_bins).astype(int), n_bins - 1)
    counts = np.bincount(index, minlength=n_bins)
    score_sums = np.bincount(index, weights=x, minlength=n_bins)
    positive = np.bincount(index, weights=np.asarray(ys, dtype=float), minlength=n_bins)
    return [
        {
            "lo": b / n_bins,
            "hi": (b + 1) / n_bins,
            "count": int(counts[b]),
            "mean_score": float(score_sums[b] / counts[b]),
            "frac_positive": float(positive[b] / counts[b]),
        }
        for b in range(n_bins)
        if counts[b]
    ]


def expected_calibration_error(
    labels: Sequence[bool], scores: Sequence[float], n_bins: int = 10
) -> float | None:
    """ECE with equal-width bins: ``sum_b (n_b / n) * |mean score_b - fraction positive_b|``
    (scikit-learn has the bins, ``calibration_curve``, but not this weighted sum).

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

    Keys: ``n``, ``positives``, ``negatives``, ``threshold``, ``tp``, ``fp``, ``tn``, ``fn``
    (``confusion_matrix``), ``accuracy``, ``precision`` (tp / predicted positive), ``recall``
    (tp / positives), ``specificity`` (tn / negatives), ``f1``, ``balanced_accuracy`` (mean
    of recall and specificity; ``None`` unless both classes are present), ``roc_auc``
    (``None`` unless both classes are present), ``ece`` (equal-width bins, ``n_bins``; see
    :func:`expected_calibration_error`), ``brier`` (``brier_score_loss``), ``mean_score``
    and ``base_rate`` (positives / n).

    Empty input gives zero counts and ``None`` for every ratio. See the module docstring for
    the conventions on undefined ratios and non-probability scores.
    """
    ys, xs = _check_inputs(labels, scores)
    n = len(ys)
    predicted = [x >= threshold for x in xs]
    if n:
        tn, fp, fn, tp = (
            int(v) for v in skm.confusion_matrix(ys, predicted, labels=[False, True]).ravel()
        )
    else:
        tn = fp = fn = tp = 0
    positives, negatives = tp + fn, tn + fp
    both = positives > 0 and negatives > 0

    def score(metric: Callable[..., Any], defined: bool) -> float | None:
        if not defined:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(metric(ys, predicted))

    probabilities = all(0.0 <= x <= 1.0 for x in xs)
    return {
        "n": n,
        "positives": positives,
        "negatives": negatives,
        "threshold": threshold,
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "accuracy": score(skm.accuracy_score, n > 0),
        "precision": score(skm.precision_score, tp + fp > 0),
        "recall": score(skm.recall_score, positives > 0),
        "specificity": _ratio(tn, negatives),
        "f1": score(skm.f1_score, 2 * tp + fp + fn > 0),
        "balanced_accuracy": score(skm.balanced_accuracy_score, both),
        "roc_auc": float(skm.roc_auc_score(ys, xs)) if both else None,
        "ece": expected_calibration_error(ys, xs, n_bins) if n else None,
        "brier": float(skm.brier_score_loss(ys, xs)) if n and probabilities else None,
        "mean_score": _ratio(sum(xs), n),
        "base_rate": _ratio(positives, n),
    }


def metric_intervals(
    labels: Sequence[bool],
    scores: Sequence[float],
    groups: Sequence[Hashable] | None = None,
    *,
    draws: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    threshold: float = 0.5,
    n_bins: int = 10,
) -> dict[str, tuple[float, float] | None]:
    """Percentile-bootstrap intervals of ``balanced_accuracy``, ``roc_auc`` and ``ece``
    (the definitions of :func:`binary_metrics`), resampling whole ``groups`` (e.g. the task
    of each candidate: candidates of one task are not independent) or single items.

    A metric is ``None`` when fewer than half the draws define it (one class only, or
    scores outside ``[0, 1]`` for ``ece``). Deterministic for a seed."""
    from scipy.stats import rankdata

    ys, xs = _check_inputs(labels, scores)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    names = ("balanced_accuracy", "roc_auc", "ece")
    if not ys:
        return dict.fromkeys(names)
    y = np.asarray(ys, dtype=bool)
    x = np.asarray(xs, dtype=float)
    keys = list(range(len(y))) if groups is None else list(groups)
    if len(keys) != len(y):
        raise ValueError(f"{len(keys)} groups for {len(y)} labels")
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    clusters = [np.asarray(v) for v in members.values()]
    probabilities = bool(np.all((x >= 0.0) & (x <= 1.0)))
    rng = np.random.default_rng(seed)
    found: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(draws):
        pick = rng.integers(0, len(clusters), len(clusters))
        idx = np.concatenate([clusters[j] for j in pick])
        yy, xx = y[idx], x[idx]
        pos, neg = int(yy.sum()), int((~yy).sum())
        if pos and neg:
            predicted = xx >= threshold
            recall = float((predicted & yy).sum()) / pos
            specificity = float((~predicted & ~yy).sum()) / neg
            found["balanced_accuracy"].append((recall + specificity) / 2)
            ranks = rankdata(xx)
            found["roc_auc"].append((float(ranks[yy].sum()) - pos * (pos + 1) / 2) / (pos * neg))
        if probabilities:
            index = np.minimum((xx * n_bins).astype(int), n_bins - 1)
            gap = np.bincount(index, weights=xx - yy, minlength=n_bins)
            found["ece"].append(float(np.abs(gap).sum()) / len(yy))
    tail = (1.0 - level) / 2 * 100
    out: dict[str, tuple[float, float] | None] = {}
    for name in names:
        values = found[name]
        if len(values) * 2 < draws:
            out[name] = None
            continue
        lo = float(np.percentile(values, tail, method="lower"))
        hi = float(np.percentile(values, 100 - tail, method="higher"))
        out[name] = (lo, hi)
    return out


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
    units = len(set(groups)) if groups is not None else len(labels)
    if units < 2:
        raise ValueError("cross-validation needs at least 2 rows (or groups)")
    k = min(k, units)
    y = np.asarray(labels, dtype=int)
    # Stratify when a class can fill every fold (scikit-learn refuses otherwise).
    stratify = max(Counter(labels).values()) >= k and len(set(labels)) == 2
    if groups is None:
        splitter: Any = (StratifiedKFold if stratify else KFold)(
            n_splits=k, shuffle=True, random_state=seed
        )
        splits = splitter.split(np.zeros((len(y), 1)), y)
    else:
        codes = np.unique(np.asarray([repr(g) for g in groups]), return_inverse=True)[1]
        kind = StratifiedGroupKFold if stratify else GroupKFold
        splitter = kind(n_splits=k, shuffle=True, random_state=seed)
        splits = splitter.split(np.zeros((len(y), 1)), y, codes)
    folds = [0] * len(labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "the least populated class has ..."
        for fold, (_, test) in enumerate(splits):
            for index in test:
                folds[int(index)] = fold
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

    Folds are scikit-learn's, shuffled with ``random_state=seed`` (deterministic):
    ``StratifiedKFold`` by label, or with ``groups`` (e.g. each candidate's task id or
    repository) ``StratifiedGroupKFold``, which keeps all rows of a group in one fold, so no
    group leaks from training into its own evaluation. When a class has fewer rows than
    folds, the folds are not stratified (``KFold`` / ``GroupKFold``). ``k`` is lowered to the
    number of rows (groups) when larger.
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
