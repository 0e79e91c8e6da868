"""The calibrator interface of :mod:`sweworld.reward.calibration` and its two calibrators
without a fit (:class:`IdentityCalibrator`, :class:`PriorCalibrator`), with the reading of
rows and labels every calibrator shares. The fitted ones (isotonic, logistic) and the files
are in :mod:`sweworld.reward.calibration`, which re-exports everything here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

__all__ = [
    "Calibrator",
    "IdentityCalibrator",
    "PriorCalibrator",
    "Row",
    "clip01",
    "sigmoid",
]


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


def sigmoid(z: float) -> float:
    """The logistic function, without overflow for large ``|z|``."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def clip01(value: float) -> float:
    """``value`` clipped to ``[0, 1]``."""
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
        return clip01(row[0])

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
