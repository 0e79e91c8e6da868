"""The legacy combination: the LM tests stage's report and gold equivalence, calibrated.

Used when no learned verdict is configured (``SWRConfig(verdict=None)``, ``--verdict
none``): only the tests stage (the SWR language model's report) and, in oracle mode,
equivalence with the gold patch can confirm a candidate; without either the verdict is
undetermined. ``sweworld calibrate`` fits this combination's calibration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweworld.reward.types import StageResult

if TYPE_CHECKING:
    from sweworld.reward.model_types import RewardResult

__all__ = [
    "FEATURES",
    "default_calibration_path",
    "fit_from_results",
    "missing_evidence",
    "prior_score",
    "stage_features",
]

#: The features the combination (and a fitted calibrator) reads, in this order.
FEATURES = (
    "tests_p",
    "tests_missing",
    "typecheck_fail",
    "gold_equivalent",
    "gold_different",
)


def stage_features(stages: Mapping[str, StageResult]) -> dict[str, float]:
    """The combination's inputs (see :data:`FEATURES`) from the stages' results."""
    tests = stages.get("tests")
    tests_p = tests.score if tests is not None and tests.verdict != "error" else None
    typecheck = stages.get("typecheck")
    semantic = stages.get("semantic")
    equivalent = semantic.evidence.get("gold_equivalent") if semantic is not None else None
    return {
        "tests_p": 0.5 if tests_p is None else float(tests_p),
        "tests_missing": 1.0 if tests_p is None else 0.0,
        "typecheck_fail": 1.0 if typecheck is not None and typecheck.verdict == "fail" else 0.0,
        "gold_equivalent": 1.0 if equivalent is True else 0.0,
        "gold_different": 1.0 if equivalent is False else 0.0,
    }


def prior_score(features: Mapping[str, float]) -> float:
    """The uncalibrated combination: the tests stage's probability, halved when the patch
    introduces type errors, raised to at least 0.95 when it is equivalent to the gold
    patch."""
    score = float(features["tests_p"])
    if features["typecheck_fail"]:
        score *= 0.5
    if features["gold_equivalent"]:
        score = max(score, 0.95)
    return min(1.0, max(0.0, score))


def missing_evidence(stages: Mapping[str, StageResult]) -> str | None:
    """Why no stage can confirm that the candidate resolves the task, or None when one
    can: the tests stage gave a verdict, or the candidate is equivalent to the gold patch."""
    tests = stages.get("tests")
    semantic = stages.get("semantic")
    if semantic is not None and semantic.evidence.get("gold_equivalent") is True:
        return None
    if tests is None:
        return "no stage that can confirm resolution ran (the tests stage is off)"
    if tests.verdict not in ("pass", "fail") or tests.score is None:
        return f"the tests stage gave no evidence ({tests.verdict}: {tests.message})"
    return None


def default_calibration_path(model: Any, mode: str) -> Path:
    """Where ``sweworld calibrate`` stores the calibration of ``model`` in ``mode`` (beside
    the embedded model's cache), and where ``calibration="auto"`` looks for it."""
    import hashlib

    from sweworld.dirs import cache_dir

    name = str(model) if isinstance(model, str) else getattr(model, "name", "lm")
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return cache_dir() / "swr" / f"calibration-{slug}-{digest}-{mode}.json"


def fit_from_results(
    results: Sequence[RewardResult], labels: Sequence[bool], *, method: str = "logistic"
) -> tuple[Any, dict[str, Any]]:
    """Fit a calibrator on scored candidates and their real labels.

    ``logistic``: L2-regularised logistic regression on :data:`FEATURES`; ``isotonic``: a
    monotone map of the tests stage's probability. Candidates an exact stage stopped are
    left out (their score is 0 whatever the calibration). Returns the calibrator and its
    metrics: in-sample and 5-fold out-of-fold.
    """
    from sweworld.reward.calibration import (
        IsotonicCalibrator,
        LogisticCalibrator,
        cross_validated_predictions,
    )
    from sweworld.reward.metrics import binary_metrics

    rows = [
        (r, bool(y))
        for r, y in zip(results, labels, strict=True)
        if not r.info.get("short_circuit")
    ]
    if len(rows) < 2 or len({y for _, y in rows}) < 2:
        raise ValueError("calibration needs labelled candidates of both classes")
    y = [lab for _, lab in rows]
    if method == "logistic":
        x = [[r.features[f] for f in FEATURES] for r, _ in rows]

        def make() -> Any:
            return LogisticCalibrator(feature_names=list(FEATURES))
    elif method == "isotonic":
        x = [[r.features["tests_p"]] for r, _ in rows]

        def make() -> Any:
            return IsotonicCalibrator(feature_names=["tests_p"])
    else:
        raise ValueError(f"method must be 'logistic' or 'isotonic', got {method!r}")
    calibrator = make().fit(x, y)
    # Folds keep a repository's candidates together (no repository is scored by a fit that
    # saw it) when there are enough repositories, else a task's candidates, else none.
    from sweworld.tasks.schema import repo_from_instance_id

    ids = [str(r.instance_id) for r, _ in rows]
    by_repo = [repo_from_instance_id(i) or i for i in ids]
    groups: list[str] | None = by_repo if len(set(by_repo)) >= 5 else ids
    grouped_by = "repository" if groups is by_repo else "task"
    units = len(set(groups or []))
    if units < 5:
        groups, units, grouped_by = None, len(y), "candidate"
    out_of_fold = cross_validated_predictions(make, x, y, k=min(5, units), groups=groups)
    metrics = {
        "method": method,
        "n": len(y),
        "folds_grouped_by": grouped_by,
        "in_sample": binary_metrics(y, calibrator.predict(x)),
        "out_of_fold": binary_metrics(y, out_of_fold),
    }
    return calibrator, metrics
