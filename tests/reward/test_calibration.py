"""Calibrators: PAV known answers, isotonic monotonicity, logistic fits, JSON round trips."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys

import pytest

from sweworld.reward.calibration import (
    CALIBRATION_FORMAT_VERSION,
    Calibrator,
    IdentityCalibrator,
    IsotonicCalibrator,
    LogisticCalibrator,
    PriorCalibrator,
    cross_validated_metrics,
    cross_validated_predictions,
    load_calibration,
    save_calibration,
)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _synthetic(n: int, seed: int = 0) -> tuple[list[list[float]], list[bool]]:
    """y ~ Bernoulli(sigmoid(-0.5 + 2 * x1)); x2 is noise."""
    rng = random.Random(seed)
    X, y = [], []
    for _ in range(n):
        x1, x2 = rng.uniform(-2, 2), rng.uniform(-2, 2)
        X.append([x1, x2])
        y.append(rng.random() < _sigmoid(-0.5 + 2.0 * x1))
    return X, y


# ------------------------------------------------------------------------------------------
# Isotonic
# ------------------------------------------------------------------------------------------


def test_isotonic_fit_and_interpolation():
    cal = IsotonicCalibrator().fit([1, 2, 3, 4, 5], [False, True, False, True, True])
    # PAV on the labels: [0, .5, .5, 1, 1]; knots at each block's ends
    assert cal.knots_x == [1, 2, 3, 4, 5]
    assert cal.knots_y == pytest.approx([0, 0.5, 0.5, 1, 1])
    assert cal.predict([0.0, 1.0, 1.5, 2.5, 3.5, 4.5, 99.0]) == pytest.approx(
        [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    )
    assert cal.fit_info["n"] == 5 and cal.fit_info["positives"] == 3
    assert cal.fit_info["train_metrics"]["n"] == 5


def test_isotonic_pools_tied_scores():
    cal = IsotonicCalibrator().fit([0.2, 0.2, 0.8], [False, True, True])
    assert cal.predict([0.2, 0.5, 0.8]) == pytest.approx([0.5, 0.75, 1.0])


def test_isotonic_is_monotone_and_in_unit_interval():
    rng = random.Random(7)
    scores = [rng.gauss(0, 1) for _ in range(500)]
    labels = [rng.random() < _sigmoid(2 * s) for s in scores]
    cal = IsotonicCalibrator().fit(scores, labels)
    grid = [i / 50 - 4 for i in range(401)]
    predictions = cal.predict(grid)
    assert all(0.0 <= p <= 1.0 for p in predictions)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(predictions))
    assert predictions[0] < 0.2 < 0.8 < predictions[-1]


def test_isotonic_decreasing():
    cal = IsotonicCalibrator(increasing=False).fit([1, 2, 3], [True, False, False])
    assert cal.predict([1, 2, 3]) == pytest.approx([1.0, 0.0, 0.0])


def test_isotonic_single_class_is_constant():
    cal = IsotonicCalibrator().fit([0.1, 0.5, 0.9], [False, False, False])
    assert cal.predict([0.0, 0.5, 1.0]) == [0.0, 0.0, 0.0]


def test_isotonic_rejects_several_features():
    with pytest.raises(ValueError, match="1 feature"):
        IsotonicCalibrator().fit([[0.1, 0.2], [0.3, 0.4]], [True, False])


# ------------------------------------------------------------------------------------------
# Logistic
# ------------------------------------------------------------------------------------------


def test_logistic_known_answer_without_penalty():
    # x=0: 1 of 4 positive, x=1: 3 of 4 -> MLE intercept logit(1/4) = -ln 3, coef 2 ln 3
    X = [0, 0, 0, 0, 1, 1, 1, 1]
    y = [True, False, False, False, True, True, True, False]
    cal = LogisticCalibrator(l2=0.0).fit(X, y)
    assert cal.intercept == pytest.approx(-math.log(3), abs=1e-7)
    assert cal.coef == pytest.approx([2 * math.log(3)], abs=1e-7)
    assert cal.predict([0, 1]) == pytest.approx([0.25, 0.75], abs=1e-9)
    assert cal.fit_info["converged"] is True


def test_logistic_gradient_vanishes_at_the_regularised_optimum():
    X, y = _synthetic(200, seed=2)
    l2 = 3.0
    cal = LogisticCalibrator(["x1", "x2"], l2=l2, standardize=False).fit(X, y)
    predictions = cal.predict(X)
    for j in range(2):
        grad = sum((p - float(t)) * row[j] for p, t, row in zip(predictions, y, X, strict=True))
        assert grad + l2 * cal.coef[j] == pytest.approx(0.0, abs=1e-6)
    assert sum(p - float(t) for p, t in zip(predictions, y, strict=True)) == pytest.approx(
        0.0, abs=1e-6
    )


def test_logistic_recovers_a_clear_effect():
    X, y = _synthetic(3000, seed=0)
    cal = LogisticCalibrator(["signal", "noise"], l2=1e-3).fit(X, y)
    coefficients = cal.coefficients
    assert coefficients["signal"] == pytest.approx(2.0, abs=0.3)
    assert abs(coefficients["noise"]) < 0.2
    assert cal.intercept == pytest.approx(-0.5, abs=0.25)
    # a strong penalty shrinks the effect but keeps its sign
    shrunk = LogisticCalibrator(["signal", "noise"], l2=2000.0).fit(X, y)
    assert 0 < shrunk.coefficients["signal"] < coefficients["signal"]


def test_logistic_is_deterministic_and_accepts_mappings():
    X, y = _synthetic(300, seed=5)
    a = LogisticCalibrator(["x1", "x2"]).fit(X, y)
    b = LogisticCalibrator(["x1", "x2"]).fit(X, y)
    assert a.coef == b.coef and a.intercept == b.intercept
    as_dicts = [{"x2": row[1], "x1": row[0], "ignored": 9} for row in X[:5]]
    assert a.predict(as_dicts) == a.predict(X[:5])
    with pytest.raises(ValueError, match="missing feature"):
        a.predict([{"x1": 0.3}])
    with pytest.raises(ValueError, match="2 feature"):
        a.predict([[0.3]])


def test_logistic_feature_names_inferred_from_mappings():
    rows = [{"a": float(i % 2), "b": 1.0} for i in range(10)]
    labels = [i % 2 == 1 for i in range(10)]
    cal = LogisticCalibrator().fit(rows, labels)
    assert cal.feature_names == ["a", "b"]
    assert cal.coefficients["b"] == 0.0  # a constant feature gets no weight
    assert cal.coefficients["a"] > 0


def test_logistic_single_class_is_the_smoothed_base_rate():
    cal = LogisticCalibrator(l2=1.0).fit([[0.1], [0.4], [0.9]], [True, True, True])
    assert cal.coef == [0.0]
    assert cal.predict([[0.0], [1.0]]) == pytest.approx([3.5 / 4, 3.5 / 4])
    none = LogisticCalibrator().fit([[0.1], [0.4]], [False, False])
    assert none.predict([[5.0]]) == pytest.approx([0.5 / 3])


def test_bad_inputs():
    with pytest.raises(RuntimeError, match="not fitted"):
        LogisticCalibrator().predict([[1.0]])
    with pytest.raises(ValueError, match="no data"):
        IsotonicCalibrator().fit([], [])
    with pytest.raises(ValueError, match="differ in length"):
        IsotonicCalibrator().fit([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="label 1"):
        IsotonicCalibrator().fit([0.1, 0.2], [True, 0.5])
    with pytest.raises(ValueError, match="finite"):
        IsotonicCalibrator().fit([0.1, math.inf], [True, False])
    with pytest.raises(ValueError):
        LogisticCalibrator(l2=-1)


# ------------------------------------------------------------------------------------------
# Identity and prior
# ------------------------------------------------------------------------------------------


def test_identity_and_prior():
    assert IdentityCalibrator().predict([-0.5, 0.3, 1.7]) == [0.0, 0.3, 1.0]
    prior = PriorCalibrator()
    assert prior.predict([1, 2]) == [0.5, 0.5]
    prior.fit([[1, 2], [3, 4], [5, 6], [7, 8]], [True, False, False, False])
    assert prior.predict([[0, 0]]) == [0.25]
    assert prior.fit_info["train_metrics"]["brier"] == pytest.approx(0.1875)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: LogisticCalibrator(["signal", "noise"], l2=0.5),
        lambda: IsotonicCalibrator(feature_names=["signal"]),
        lambda: PriorCalibrator(),
        lambda: IdentityCalibrator(feature_names=["signal"]),
    ],
)
def test_save_load_round_trip(tmp_path, make):
    X, y = _synthetic(400, seed=11)
    cal = make()
    width = 2 if isinstance(cal, LogisticCalibrator) else 1
    rows = [row[:width] if width == 2 else _sigmoid(row[0]) for row in X]
    cal.fit(rows, y)
    cv = cross_validated_metrics(make, rows, y, k=4)
    path = save_calibration(cal, tmp_path / "sub" / "cal.json", metrics={"cv": cv})

    document = json.loads(path.read_text())
    assert document["format"] == "sweworld-calibration"
    assert document["format_version"] == CALIBRATION_FORMAT_VERSION
    assert document["kind"] == cal.kind
    assert document["feature_names"] == cal.feature_names
    assert document["n"] == 400 and document["positives"] == sum(y)
    assert document["fitted_at"].endswith("+00:00")
    assert document["train_metrics"]["n"] == 400
    assert document["metrics"]["cv"]["cv_k"] == 4

    loaded = load_calibration(path)
    assert type(loaded) is type(cal)
    assert loaded.feature_names == cal.feature_names
    assert loaded.predict(rows[:50]) == cal.predict(rows[:50])
    assert loaded.fit_info["n"] == 400
    assert loaded.fit_info["metrics"]["cv"]["roc_auc"] == cv["roc_auc"]
    assert Calibrator.from_dict(cal.to_dict()).predict(rows[:5]) == cal.predict(rows[:5])


def test_load_rejects_other_files(tmp_path):
    cal = IsotonicCalibrator().fit([0.1, 0.9], [False, True])
    path = save_calibration(cal, tmp_path / "cal.json")
    document = json.loads(path.read_text())

    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**document, "format_version": CALIBRATION_FORMAT_VERSION + 1}))
    with pytest.raises(ValueError, match="format_version"):
        load_calibration(newer)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({**document, "kind": "spline"}))
    with pytest.raises(ValueError, match="unknown calibrator kind"):
        load_calibration(unknown)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not a sweworld-calibration"):
        load_calibration(other)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_calibration(broken)
    with pytest.raises(FileNotFoundError):
        load_calibration(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="unfitted"):
        save_calibration(IsotonicCalibrator(), tmp_path / "x.json")
    with pytest.raises(ValueError, match="got a 'isotonic'"):
        LogisticCalibrator.from_dict(cal.to_dict())


# ------------------------------------------------------------------------------------------
# Cross-validation with calibrators
# ------------------------------------------------------------------------------------------


def test_out_of_fold_metrics_are_honest():
    rng = random.Random(4)
    # pure noise: in-sample isotonic looks calibrated and informative; out of fold it is not
    scores = [rng.random() for _ in range(300)]
    labels = [rng.random() < 0.5 for _ in range(300)]
    in_sample = IsotonicCalibrator().fit(scores, labels).fit_info["train_metrics"]
    out_of_fold = cross_validated_metrics(IsotonicCalibrator, scores, labels, k=5, seed=0)
    assert out_of_fold["brier"] > in_sample["brier"]
    assert out_of_fold["ece"] > in_sample["ece"] + 0.02
    assert out_of_fold["roc_auc"] < in_sample["roc_auc"]
    assert out_of_fold["cv_k"] == 5

    X, y = _synthetic(500, seed=9)
    predictions = cross_validated_predictions(
        lambda: LogisticCalibrator(["signal", "noise"]), X, y, k=5, seed=0
    )
    assert len(predictions) == 500
    signal = cross_validated_metrics(lambda: LogisticCalibrator(["signal", "noise"]), X, y)
    assert signal["roc_auc"] > 0.8


# ------------------------------------------------------------------------------------------
# Files written by format version 1 (the hand-written fits) and loading without scikit-learn
# ------------------------------------------------------------------------------------------

_V1_LOGISTIC = {
    "format": "sweworld-calibration",
    "format_version": 1,
    "kind": "logistic",
    "feature_names": ["tests_p", "type_errors"],
    "fitted_at": "2026-11-30T10:00:00+00:00",
    "n": 40,
    "positives": 12,
    "train_metrics": None,
    "metrics": None,
    "params": {
        "coef": [3.0, -1.5],
        "intercept": -1.0,
        "l2": 1.0,
        "standardize": True,
        "max_iter": 100,
        "tol": 1e-10,
    },
    "fit_info": {"converged": True, "n_iter": 6},
}
_V1_ISOTONIC = {
    **_V1_LOGISTIC,
    "kind": "isotonic",
    "feature_names": ["tests_p"],
    "params": {"increasing": True, "knots_x": [0.1, 0.5, 0.9], "knots_y": [0.0, 0.4, 1.0]},
}


def test_version_1_files_load_and_predict_as_before(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(_V1_LOGISTIC))
    logistic = load_calibration(path)
    assert logistic.predict([[0.5, 1.0], [1.0, 0.0]]) == pytest.approx(
        [_sigmoid(-1.0 + 1.5 - 1.5), _sigmoid(-1.0 + 3.0)]
    )
    path.write_text(json.dumps(_V1_ISOTONIC))
    isotonic = load_calibration(path)
    assert isotonic.predict([0.0, 0.3, 0.7, 2.0]) == pytest.approx([0.0, 0.2, 0.7, 1.0])


def test_a_saved_calibration_is_applied_without_importing_scikit_learn(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(_V1_LOGISTIC))
    code = (
        "import sys\n"
        "from sweworld.reward.calibration import load_calibration\n"
        f"p = load_calibration({str(path)!r}).predict([[1.0, 0.0]])[0]\n"
        "assert abs(p - 1 / (1 + 2.718281828459045 ** -2.0)) < 1e-9, p\n"
        "assert 'sklearn' not in sys.modules, 'scikit-learn was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_logistic_matches_scikit_learn_on_the_same_problem():
    from sklearn.linear_model import LogisticRegression

    X, y = _synthetic(300, seed=3)
    ours = LogisticCalibrator(["x1", "x2"], l2=2.0, standardize=False).fit(X, y)
    theirs = LogisticRegression(C=0.5, tol=1e-12, max_iter=1000).fit(X, y)
    assert ours.coef == pytest.approx(list(theirs.coef_[0]), abs=1e-6)
    assert ours.intercept == pytest.approx(float(theirs.intercept_[0]), abs=1e-6)
    assert ours.fit_info["converged"] is True and ours.fit_info["n_iter"] >= 1
