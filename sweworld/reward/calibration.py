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
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

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
    "pool_adjacent_violators",
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

Row = float | Sequence[float] | Mapping[str, float]


# ------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{where}: expected a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return out


def _row(value: Any, names: Sequence[str], index: int) -> list[float]:
    where = f"row {index}"
    if isinstance(value, Mapping):
        missing = [name for name in names if name not in value]
        if missing:
            raise ValueError(f"{where}: missing feature(s) {missing} (have {sorted(value)})")
        return [_number(value[name], f"{where} feature {name!r}") for name in names]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if len(value) != len(names):
            raise ValueError(
                f"{where}: expected {len(names)} feature(s) {list(names)}, got {len(value)}"
            )
        return [
            _number(v, f"{where} feature {name!r}") for v, name in zip(value, names, strict=True)
        ]
    if len(names) != 1:
        raise ValueError(f"{where}: expected {len(names)} features {list(names)}, got a number")
    return [_number(value, where)]


def _labels(y: Sequence[Any]) -> list[bool]:
    out = []
    for index, value in enumerate(y):
        if isinstance(value, bool):
            out.append(value)
        elif isinstance(value, int | float) and value in (0, 1):
            out.append(bool(value))
        else:
            raise ValueError(f"label {index}: expected a bool (or 0/1), got {value!r}")
    return out


def _infer_names(X: Sequence[Any]) -> list[str]:
    first = X[0]
    if isinstance(first, Mapping):
        return [str(key) for key in first]
    if isinstance(first, Sequence) and not isinstance(first, str | bytes):
        return [f"x{j}" for j in range(len(first))]
    return ["score"]


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


# ------------------------------------------------------------------------------------------
# Base
# ------------------------------------------------------------------------------------------


class Calibrator:
    """Base of the calibrators: shared input handling, fit bookkeeping and serialisation.

    Subclasses set ``kind`` and implement ``_fit(rows, labels)``, ``_predict_row(row)``,
    ``_params()`` and ``_load_params(params)``. After ``fit``, ``fit_info`` holds ``n``,
    ``positives``, ``fitted_at`` (UTC, ISO 8601) and ``train_metrics`` (see
    :func:`~sweworld.reward.metrics.binary_metrics`, in-sample: optimistic).
    """

    kind: ClassVar[str] = ""
    _registry: ClassVar[dict[str, type[Calibrator]]] = {}
    needs_fit: ClassVar[bool] = True

    def __init__(self, feature_names: Sequence[str] | None = None) -> None:
        self.feature_names: list[str] | None = list(feature_names) if feature_names else None
        self.fit_info: dict[str, Any] = {}
        self._fitted = not self.needs_fit

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Calibrator._registry[cls.kind] = cls

    # -- public API ------------------------------------------------------------------

    @property
    def fitted(self) -> bool:
        return self._fitted

    def fit(self, X: Sequence[Row], y: Sequence[bool]) -> Calibrator:
        """Fit on rows ``X`` and labels ``y``; returns ``self``."""
        if len(X) != len(y):
            raise ValueError(f"X and y differ in length ({len(X)} vs {len(y)})")
        if not X:
            raise ValueError(f"cannot fit a {type(self).__name__} on no data")
        labels = _labels(y)
        if self.feature_names is None:
            self.feature_names = _infer_names(X)
        self._check_width()
        rows = [_row(value, self.feature_names, i) for i, value in enumerate(X)]
        self._fit(rows, labels)
        self._fitted = True
        predictions = [self._predict_row(row) for row in rows]
        from sweworld.reward.metrics import binary_metrics

        self.fit_info = {
            "n": len(labels),
            "positives": sum(labels),
            "fitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "train_metrics": binary_metrics(labels, predictions),
        }
        return self

    def predict(self, X: Sequence[Row]) -> list[float]:
        """Calibrated probabilities, one per row."""
        if not self._fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")
        if not X:
            return []
        names = self.feature_names
        if names is None:  # a calibrator that needs no fit, used without fitting
            names = _infer_names(X)
            if self._width is not None and len(names) != self._width:
                raise ValueError(
                    f"{type(self).__name__} takes {self._width} feature(s), got {len(names)}"
                )
        return [self._predict_row(_row(value, names, i)) for i, value in enumerate(X)]

    def predict_one(self, x: Row) -> float:
        """The calibrated probability of one row."""
        return self.predict([x])[0]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state: ``kind``, ``feature_names``, ``params``, ``fit_info``."""
        return {
            "kind": self.kind,
            "feature_names": list(self.feature_names or []),
            "fitted": self._fitted,
            "params": self._params(),
            "fit_info": dict(self.fit_info),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibrator:
        """Rebuild a calibrator written by :meth:`to_dict` (any kind, dispatched on ``kind``)."""
        kind = data.get("kind")
        target = Calibrator._registry.get(str(kind))
        if target is None:
            raise ValueError(
                f"unknown calibrator kind {kind!r}; known: {sorted(Calibrator._registry)}"
            )
        if cls is not Calibrator and not issubclass(target, cls):
            raise ValueError(f"{cls.__name__}.from_dict got a {kind!r} calibrator")
        obj = target.__new__(target)
        Calibrator.__init__(obj, data.get("feature_names") or None)
        obj._load_params(dict(data.get("params") or {}))
        obj.fit_info = dict(data.get("fit_info") or {})
        obj._fitted = bool(data.get("fitted", True)) or not target.needs_fit
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._params()!r})"

    # -- subclass hooks ----------------------------------------------------------------

    _width: ClassVar[int | None] = 1  # number of features, None: any

    def _check_width(self) -> None:
        names = self.feature_names or []
        if self._width is not None and len(names) != self._width:
            raise ValueError(
                f"{type(self).__name__} takes {self._width} feature(s), got {len(names)}: {names}"
            )

    def _fit(self, rows: list[list[float]], labels: list[bool]) -> None:
        raise NotImplementedError

    def _predict_row(self, row: list[float]) -> float:
        raise NotImplementedError

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_params(self, params: dict[str, Any]) -> None:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------
# Identity and prior
# ------------------------------------------------------------------------------------------


class IdentityCalibrator(Calibrator):
    """No calibration: the single score, clipped to ``[0, 1]``. ``fit`` only records
    ``fit_info`` (so the raw score's metrics can be saved like any other calibrator's)."""

    kind = "identity"
    needs_fit = False

    def _fit(self, rows: list[list[float]], labels: list[bool]) -> None:
        return None

    def _predict_row(self, row: list[float]) -> float:
        return _clip01(row[0])

    def _params(self) -> dict[str, Any]:
        return {}

    def _load_params(self, params: dict[str, Any]) -> None:
        return None


class PriorCalibrator(Calibrator):
    """The training base rate (fraction of positives) for every input; inputs are ignored
    (any width). Before fitting, ``rate`` (default 0.5) is used."""

    kind = "prior"
    needs_fit = False
    _width = None

    def __init__(self, rate: float = 0.5, feature_names: Sequence[str] | None = None) -> None:
        super().__init__(feature_names)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        self.rate = float(rate)

    def _fit(self, rows: list[list[float]], labels: list[bool]) -> None:
        self.rate = sum(labels) / len(labels)

    def _predict_row(self, row: list[float]) -> float:
        return self.rate

    def predict(self, X: Sequence[Row]) -> list[float]:
        return [self.rate for _ in X]

    def _params(self) -> dict[str, Any]:
        return {"rate": self.rate}

    def _load_params(self, params: dict[str, Any]) -> None:
        self.rate = float(params.get("rate", 0.5))


# ------------------------------------------------------------------------------------------
# Isotonic
# ------------------------------------------------------------------------------------------


def pool_adjacent_violators(
    values: Sequence[float], weights: Sequence[float] | None = None, *, increasing: bool = True
) -> list[float]:
    """The weighted least-squares monotone fit of ``values`` in the given order
    (``sklearn.isotonic.isotonic_regression``)."""
    if weights is not None and len(weights) != len(values):
        raise ValueError("values and weights differ in length")
    if not values:
        return []
    from sklearn.isotonic import isotonic_regression

    fitted = isotonic_regression(
        [float(v) for v in values],
        sample_weight=None if weights is None else [float(w) for w in weights],
        increasing=increasing,
    )
    return [float(v) for v in fitted]


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
            return _clip01(ky[0])
        if x >= kx[-1]:
            return _clip01(ky[-1])
        j = bisect_right(kx, x)  # kx[j - 1] <= x < kx[j]
        x0, x1, y0, y1 = kx[j - 1], kx[j], ky[j - 1], ky[j]
        return _clip01(y0 + (y1 - y0) * (x - x0) / (x1 - x0))

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
        return _sigmoid(self.intercept + sum(c * x for c, x in zip(self.coef, row, strict=True)))

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
