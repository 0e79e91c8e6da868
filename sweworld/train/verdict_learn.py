"""Fitting, calibrating and choosing the verdict's learner (``sweworld train verdict``).

Per mode: a logistic regression and gradient-boosted trees (:func:`fit_learner`), scored
through the JSON they are exported to (:func:`raw_scores`: what ships is what is measured),
out of fold by repository (:func:`out_of_fold`, :func:`fold_groups`), calibrated on those
scores (:func:`fit_calibration`: isotonic or Platt, whichever is better cross-fitted), and
the one to ship chosen by :func:`choose_learner` (the base rate when no learner carries
across repositories).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "LEARNERS",
    "choose_learner",
    "export_body",
    "fit_calibration",
    "fit_learner",
    "fold_groups",
    "metrics",
    "out_of_fold",
    "raw_scores",
]

LEARNERS = ("logreg", "hgb")


def metrics(labels: Sequence[bool], scores: Sequence[float]) -> dict[str, Any]:
    from sweworld.reward.metrics import binary_metrics

    m = binary_metrics([bool(v) for v in labels], [float(s) for s in scores])
    keep = ("n", "positives", "accuracy", "balanced_accuracy", "roc_auc", "ece", "brier")
    return {k: (round(m[k], 4) if isinstance(m[k], float) else m[k]) for k in keep}


def fit_learner(
    learner: str, X: np.ndarray, y: np.ndarray, args: Any, weight: np.ndarray | None = None
) -> tuple[Any, list[float]]:
    """A fitted estimator and the fill values of missing inputs (medians); ``weight``: each
    row's sample weight (a candidate seen twice, with and without whole files, weighs half
    each time)."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    known = ~np.isnan(X)
    fill = np.asarray(
        [
            float(np.median(X[known[:, j], j])) if known[:, j].any() else 0.0
            for j in range(X.shape[1])
        ]
    )
    if learner == "hgb":
        est = HistGradientBoostingClassifier(
            max_iter=args.max_iter,
            learning_rate=0.08,
            max_leaf_nodes=8,
            min_samples_leaf=10,
            l2_regularization=1.0,
            random_state=args.seed,
            early_stopping=False,
        )
        # a column never known (e.g. the type check, not run) would break the binning: a
        # constant there is never split on, so NaN at scoring time reads the same
        X = np.where(np.isnan(X) & ~known.any(axis=0), 0.0, X)
        est.fit(X, y, sample_weight=weight)
        return est, fill.tolist()
    if learner == "prior":  # the base rate: a linear head with no weights
        est = LogisticRegression()
        rate = float(np.clip(np.average(y, weights=weight), 1e-6, 1 - 1e-6))
        est.coef_ = np.zeros((1, X.shape[1]))
        est.intercept_ = np.asarray([math.log(rate / (1 - rate))])
        est.classes_ = np.asarray([0, 1])
        est._sweworld_scale = (np.zeros(X.shape[1]), np.ones(X.shape[1]))
        return est, fill.tolist()
    Xf = np.where(np.isnan(X), fill, X)
    mean, std = Xf.mean(axis=0), Xf.std(axis=0)
    std = np.where(std > 1e-9, std, 1.0)
    est = LogisticRegression(C=0.5, max_iter=2000)
    est.fit((Xf - mean) / std, y, sample_weight=weight)
    est._sweworld_scale = (mean, std)
    return est, fill.tolist()


def export_body(est: Any) -> dict[str, Any]:
    from sweworld.transition.outcome.model import export_estimator

    return export_estimator(est, getattr(est, "_sweworld_scale", None))


def raw_scores(est: Any, fill: Sequence[float], X: np.ndarray) -> np.ndarray:
    """P(resolved) before calibration, through the exported JSON (what ships is measured)."""
    from sweworld.transition.outcome.model import Head

    head = Head(json.loads(json.dumps(export_body(est))))
    if head.body["kind"] == "linear":
        X = np.where(np.isnan(X), np.asarray(fill), X)
    proba = head.proba(X)
    return proba[:, head.classes.index("1")]


def fit_calibration(
    p: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None
) -> dict[str, Any]:
    """Isotonic or Platt on out-of-fold scores: the one with the lower Brier score (measured
    on a second split of those scores); ``weight``: each score's sample weight."""
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=float)
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    from sweworld.reward.verdict import calibrate

    def fit(kind: str, pp: np.ndarray, yy: np.ndarray, ww: np.ndarray) -> dict[str, Any]:
        if kind == "isotonic":
            iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
            iso.fit(pp, yy, sample_weight=ww)
            return {
                "kind": "isotonic",
                "x": iso.X_thresholds_.tolist(),
                "y": iso.y_thresholds_.tolist(),
            }
        q = np.clip(pp, 1e-6, 1 - 1e-6)
        lr = LogisticRegression(C=100.0).fit(np.log(q / (1 - q)).reshape(-1, 1), yy, ww)
        return {"kind": "platt", "a": float(lr.coef_[0][0]), "b": float(lr.intercept_[0])}

    scores = {}
    for kind in ("isotonic", "platt"):
        brier = 0.0
        for a, b in _halves(len(p)):
            if len(set(y[a].tolist())) < 2 or not b.any():
                brier = math.inf
                break
            err = (calibrate(fit(kind, p[a], y[a], w[a]), p[b]) - y[b]) ** 2
            brier += float(np.average(err, weights=w[b]))
        scores[kind] = brier
    best = min(scores, key=lambda k: scores[k])
    body = fit(best, p, y, w) if len(set(y.tolist())) == 2 else {"kind": "none"}
    body["oof_brier_halves"] = {k: round(v / 2, 4) for k, v in scores.items()}
    return body


def choose_learner(
    oofs: dict[str, np.ndarray], y: np.ndarray, weight: np.ndarray | None = None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The learner to ship from out-of-fold (by repository) scores: the best ROC AUC, with
    its calibration; but the base rate (``"prior"``, no calibration) when that learner
    learned nothing that carries across repositories: its AUC's 95% interval (Hanley and
    McNeil) reaches 0.5, or its calibrated cross-fitted Brier score is no better than the
    base rate's. Returns (learner, calibration, figures)."""
    from sklearn.metrics import roc_auc_score

    labels = y.astype(bool)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=float)
    both = labels.any() and (~labels).any()
    aucs = {
        name: float(roc_auc_score(labels, oof, sample_weight=w)) if both else 0.0
        for name, oof in oofs.items()
    }
    chosen = max(sorted(aucs), key=lambda name: aucs[name])
    cal = fit_calibration(oofs[chosen], y, weight)
    learner_brier = min(cal.get("oof_brier_halves", {}).values(), default=math.inf)
    prior_brier = _prior_brier_halves(y, weight)
    # the interval counts candidates, not rows: a twin (weight 0.5) is half a candidate
    positives, negatives = round(float(w[labels].sum())), round(float(w[~labels].sum()))
    low = aucs[chosen] - 1.96 * _auc_se(aucs[chosen], positives, negatives)
    selection = {
        "by_auc": chosen, "auc": round(aucs[chosen], 4), "auc_low": round(low, 4),
        "calibrated_brier": learner_brier, "prior_brier": prior_brier,
    }  # fmt: skip
    if low <= 0.5 or prior_brier <= learner_brier:
        chosen, cal = "prior", {"kind": "none"}
    selection["chosen"] = chosen
    return chosen, cal, selection


def _auc_se(auc: float, positives: int, negatives: int) -> float:
    """Hanley and McNeil's standard error of a ROC AUC."""
    if positives < 1 or negatives < 1:
        return math.inf
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (
        auc * (1 - auc) + (positives - 1) * (q1 - auc * auc) + (negatives - 1) * (q2 - auc * auc)
    ) / (positives * negatives)
    return math.sqrt(max(var, 0.0))


def _halves(n: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The two (fit on, score on) masks of ``n`` scores that calibration and the base rate
    are cross-fitted on (seeded: the same split for both)."""
    half = np.random.default_rng(0).random(n) < 0.5
    return (half, ~half), (~half, half)


def _prior_brier_halves(y: np.ndarray, weight: np.ndarray | None = None) -> float:
    """The base rate's Brier score on the calibration's two halves (fitted on one, scored
    on the other), comparable with ``oof_brier_halves``."""
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=float)
    total = 0.0
    for a, b in _halves(len(y)):
        if not a.any() or not b.any():
            return math.inf
        rate = float(np.average(y[a], weights=w[a]))
        total += float(np.average((rate - y[b]) ** 2, weights=w[b]))
    return round(total / 2, 4)


def fold_groups(rows: Sequence[Any]) -> np.ndarray:
    """Fold groups: repositories, or tasks when there are fewer than three repositories."""
    repos = [c.repo for c in rows]
    return np.asarray(repos if len(set(repos)) >= 3 else [c.instance_id for c in rows])


def out_of_fold(
    learner: str,
    X: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    args: Any,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    from sklearn.model_selection import GroupKFold

    out = np.full(len(y), np.nan)
    k = min(5, len(set(groups.tolist())))
    if k < 2:
        return np.full(len(y), float(y.mean()))
    for tr, te in GroupKFold(n_splits=k).split(X, y, groups):
        if len(set(y[tr].tolist())) < 2:
            out[te] = float(y[tr].mean())
            continue
        est, fill = fit_learner(learner, X[tr], y[tr], args, None if weight is None else weight[tr])
        out[te] = raw_scores(est, fill, X[te])
    return out
