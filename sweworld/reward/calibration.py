"""Calibration: raw verifier scores or small feature vectors -> probabilities of resolving.

Fits are scikit-learn's (``IsotonicRegression``, ``LogisticRegression``), imported when a
calibrator is fitted; a fitted calibrator is a few numbers (knots, coefficients) and
predicts in plain Python, so loading and using a saved calibration needs no scikit-learn.
Every calibrator has ``fit(X, y)``, ``predict(X)``, ``to_dict()`` and
``Calibrator.from_dict(data)``:

* :class:`IdentityCalibrator`: no fitting; the score clipped to ``[0, 1]``.
* :class:`PriorCalibrator`: the training base rate for every input (the baseline to beat).
* :class:`IsotonicCalibrator`: a monotone step function of one score
  (``sklearn.isotonic.IsotonicRegression``), linearly interpolated between its knots,
  constant beyond them, clipped to ``[0, 1]``.
* :class:`LogisticCalibrator`: L2-regularised logistic regression on a few named features
  (``sklearn.linear_model.LogisticRegression``, Newton-Cholesky solver).

``X`` is a sequence of rows; a row is a number (one feature), a sequence of numbers, or a
mapping feature name -> number (read through the calibrator's ``feature_names``). Labels
are bools (``0``/``1`` accepted).

:func:`save_calibration` / :func:`load_calibration` store a fitted calibrator as JSON with a
format version, the feature names, the fit date, the training size and metrics. The stored
parameters (isotonic knots; logistic coefficients in raw feature units) are what format
version 1's hand-written fits stored, so older files load and predict unchanged.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweworld.reward.calibration_base import (
    Calibrator,
    IdentityCalibrator,
    PriorCalibrator,
    Row,
    clip01,
    sigmoid,
)

if TYPE_CHECKING:
    from sweworld.reward.metrics import cross_validated_metrics, cross_validated_predictions

__all__ = [
    "CALIBRATION_FORMAT",
    "CALIBRATION_FORMAT_VERSION",
    "Calibrator",
    "IdentityCalibrator",
    "IsotonicCalibrator",
    "LogisticCalibrator",
    "PriorCalibrator",
    "cross_validated_metrics",
    "cross_validated_predictions",
    "load_calibration",
    "save_calibration",
]


def __getattr__(name: str) -> Any:
    """The cross-validation helpers of :mod:`sweworld.reward.metrics`, imported on first use
    (they need scikit-learn; loading and applying a calibration does not)."""
    if name in ("cross_validated_metrics", "cross_validated_predictions"):
        from sweworld.reward import metrics

        return getattr(metrics, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CALIBRATION_FORMAT = "sweworld-calibration"
CALIBRATION_FORMAT_VERSION = 1

# ------------------------------------------------------------------------------------------
# Isotonic
# ------------------------------------------------------------------------------------------


class IsotonicCalibrator(Calibrator):
    """Isotonic regression of the label on one score (``IsotonicRegression``).

    Fitting: tied scores are pooled (their mean label, weighted by count) and neighbouring
    blocks merged until the block means are monotone (non-decreasing, or non-increasing with
    ``increasing=False``). The fit's thresholds (each block's lowest and highest score) are
    the knots of the prediction.

    Prediction: linear interpolation between knots (so two blocks are joined by a ramp,
    not a step), constant beyond the first and last knot, clipped to ``[0, 1]``.
    """

    kind = "isotonic"

    def __init__(self, increasing: bool = True, feature_names: Sequence[str] | None = None):
        super().__init__(feature_names)
        self.increasing = bool(increasing)
        self.knots_x: list[float] = []
        self.knots_y: list[float] = []

    def _fit(self, rows: list[list[float]], labels: list[bool]) -> None:
        from sklearn.isotonic import IsotonicRegression

        model = IsotonicRegression(increasing=self.increasing, out_of_bounds="clip")
        model.fit([row[0] for row in rows], [float(label) for label in labels])
        self.knots_x = [float(v) for v in model.X_thresholds_]
        self.knots_y = [float(v) for v in model.y_thresholds_]

    def _predict_row(self, row: list[float]) -> float:
        x = row[0]
        kx, ky = self.knots_x, self.knots_y
        if not kx:
            return 0.5
        if x <= kx[0]:
            return clip01(ky[0])
        if x >= kx[-1]:
            return clip01(ky[-1])
        j = bisect_right(kx, x)  # kx[j - 1] <= x < kx[j]
        x0, x1, y0, y1 = kx[j - 1], kx[j], ky[j - 1], ky[j]
        return clip01(y0 + (y1 - y0) * (x - x0) / (x1 - x0))

    def _params(self) -> dict[str, Any]:
        return {"increasing": self.increasing, "knots_x": self.knots_x, "knots_y": self.knots_y}

    def _load_params(self, params: dict[str, Any]) -> None:
        self.increasing = bool(params.get("increasing", True))
        self.knots_x = [float(v) for v in params.get("knots_x", [])]
        self.knots_y = [float(v) for v in params.get("knots_y", [])]
        if len(self.knots_x) != len(self.knots_y):
            raise ValueError("isotonic calibrator: knots_x and knots_y differ in length")


# ------------------------------------------------------------------------------------------
# Logistic
# ------------------------------------------------------------------------------------------


class LogisticCalibrator(Calibrator):
    """L2-regularised logistic regression on a small feature vector (``LogisticRegression``,
    Newton-Cholesky solver, deterministic).

    Minimises ``sum_i logloss_i + (l2 / 2) * ||w||^2`` (the intercept is not penalised;
    ``l2`` is scikit-learn's ``1 / C``; ``l2 = 0`` fits without a penalty). With
    ``standardize`` (default) the features are centred and scaled to unit variance
    (``StandardScaler``) before fitting, so the penalty treats them alike; the stored
    ``coef`` / ``intercept`` are converted back to the raw feature units. A constant feature
    gets coefficient 0. ``fit_info["converged"]`` says whether the solver stopped before
    ``max_iter``.

    A training set with a single class (a cross-validation fold can hold one) has no finite
    optimum: the fit is then the smoothed base rate ``(positives + 1/2) / (n + 1)`` with
    every coefficient 0.
    """

    kind = "logistic"
    _width = None

    def __init__(
        self,
        feature_names: Sequence[str] | None = None,
        *,
        l2: float = 1.0,
        standardize: bool = True,
        max_iter: int = 100,
        tol: float = 1e-10,
    ) -> None:
        super().__init__(feature_names)
        if l2 < 0:
            raise ValueError(f"l2 must be >= 0, got {l2}")
        self.l2 = float(l2)
        self.standardize = bool(standardize)
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.coef: list[float] = []
        self.intercept = 0.0
        self.n_iter = 0
        self.converged = False

    @property
    def coefficients(self) -> dict[str, float]:
        """Coefficient per feature name, in raw feature units."""
        return dict(zip(self.feature_names or [], self.coef, strict=True))

    def _check_width(self) -> None:
        if not self.feature_names:
            raise ValueError("LogisticCalibrator needs at least one feature")

    def _fit(self, rows: list[list[float]], labels: list[bool]) -> None:
        d = len(rows[0])
        if len(set(labels)) < 2:
            rate = (sum(labels) + 0.5) / (len(labels) + 1.0)
            self.coef, self.intercept = [0.0] * d, math.log(rate / (1.0 - rate))
            self.n_iter, self.converged = 0, True
            return
        import numpy as np
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        x = np.asarray(rows, dtype=float)
        means, scales = np.zeros(d), np.ones(d)
        if self.standardize:
            scaler = StandardScaler().fit(x)
            means, scales = scaler.mean_, scaler.scale_
        model = LogisticRegression(
            C=1.0 / self.l2 if self.l2 > 0 else math.inf,
            solver="newton-cholesky",
            tol=self.tol,
            max_iter=self.max_iter,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit((x - means) / scales, np.asarray(labels, dtype=int))
        self.n_iter = int(np.max(model.n_iter_))
        self.converged = self.n_iter < self.max_iter and not any(
            "converge" in str(w.message).lower() for w in caught
        )
        coef = model.coef_[0] / scales
        self.coef = [float(c) for c in coef]
        self.intercept = float(model.intercept_[0] - float(np.dot(coef, means)))

    def _predict_row(self, row: list[float]) -> float:
        return sigmoid(self.intercept + sum(c * x for c, x in zip(self.coef, row, strict=True)))

    def fit(self, X: Sequence[Row], y: Sequence[bool]) -> LogisticCalibrator:
        super().fit(X, y)
        self.fit_info["converged"] = self.converged
        self.fit_info["n_iter"] = self.n_iter
        return self

    def _params(self) -> dict[str, Any]:
        return {
            "coef": self.coef,
            "intercept": self.intercept,
            "l2": self.l2,
            "standardize": self.standardize,
            "max_iter": self.max_iter,
            "tol": self.tol,
        }

    def _load_params(self, params: dict[str, Any]) -> None:
        self.coef = [float(v) for v in params.get("coef", [])]
        self.intercept = float(params.get("intercept", 0.0))
        self.l2 = float(params.get("l2", 1.0))
        self.standardize = bool(params.get("standardize", True))
        self.max_iter = int(params.get("max_iter", 100))
        self.tol = float(params.get("tol", 1e-10))
        self.n_iter = 0
        self.converged = True
        if self.feature_names is not None and len(self.coef) != len(self.feature_names):
            raise ValueError(
                f"logistic calibrator: {len(self.coef)} coefficients for "
                f"{len(self.feature_names)} features"
            )


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


def save_calibration(
    cal: Calibrator, path: str | os.PathLike[str], *, metrics: Mapping[str, Any] | None = None
) -> Path:
    """Write ``cal`` as JSON; returns the path.

    Fields: ``format`` (``"sweworld-calibration"``), ``format_version``, ``kind``,
    ``feature_names``, ``fitted_at``, ``n``, ``positives``, ``train_metrics`` (in-sample),
    ``metrics`` (what the caller adds, e.g. :func:`cross_validated_metrics`; may be null),
    ``params`` and ``fit_info`` (everything the fit recorded).
    """
    if not cal.fitted:
        raise ValueError(f"cannot save an unfitted {type(cal).__name__}")
    state = cal.to_dict()
    info = state["fit_info"]
    document = {
        "format": CALIBRATION_FORMAT,
        "format_version": CALIBRATION_FORMAT_VERSION,
        "kind": state["kind"],
        "feature_names": state["feature_names"],
        "fitted_at": info.get("fitted_at"),
        "n": info.get("n"),
        "positives": info.get("positives"),
        "train_metrics": info.get("train_metrics"),
        "metrics": dict(metrics) if metrics is not None else None,
        "params": state["params"],
        "fit_info": {k: v for k, v in info.items() if k != "train_metrics"},
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, allow_nan=False)
    out.write_text(text + "\n", encoding="utf-8")
    return out


def load_calibration(path: str | os.PathLike[str]) -> Calibrator:
    """Read a file written by :func:`save_calibration`.

    The returned calibrator's ``fit_info`` holds ``n``, ``positives``, ``fitted_at``,
    ``train_metrics`` and, under ``metrics``, what was saved with it. Raises
    ``FileNotFoundError`` or ``ValueError`` (not a calibration file, newer format version,
    unknown kind).
    """
    source = Path(path)
    try:
        document = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict) or document.get("format") != CALIBRATION_FORMAT:
        raise ValueError(f"{source}: not a {CALIBRATION_FORMAT} file")
    version = document.get("format_version")
    if not isinstance(version, int) or version > CALIBRATION_FORMAT_VERSION or version < 1:
        raise ValueError(
            f"{source}: format_version {version!r} is not supported "
            f"(this sweworld reads up to {CALIBRATION_FORMAT_VERSION})"
        )
    fit_info = dict(document.get("fit_info") or {})
    for key in ("n", "positives", "fitted_at", "train_metrics", "metrics"):
        if document.get(key) is not None:
            fit_info[key] = document[key]
    return Calibrator.from_dict(
        {
            "kind": document.get("kind"),
            "feature_names": document.get("feature_names"),
            "params": document.get("params"),
            "fit_info": fit_info,
            "fitted": True,
        }
    )
