"""Agreement metrics and stratified sampling, checked by hand."""

from __future__ import annotations

import math

import pytest

from sweworld.bench.sampling import stratified_order, stratified_sample
from sweworld.bench.similarity import compare_results, percentile, rate, status_agreement
from sweworld.transition.types import Prediction
from tests.bench.fixtures import PYTEST_OUT, TRACEBACK


def test_test_agreement_over_the_union_of_named_tests():
    real = {"a": "PASSED", "b": "FAILED"}
    assert status_agreement(real, {"a": "PASSED", "b": "PASSED"}) == 0.5
    assert status_agreement(real, {"a": "PASSED", "b": "FAILED", "c": "PASSED"}) == pytest.approx(
        2 / 3
    )
    assert status_agreement(real, {}) == 0.0
    assert status_agreement({}, {}) is None


def test_compare_results_reads_tests_with_the_repository_parser():
    real = Prediction(stdout=PYTEST_OUT, exit_code=1)
    pred = Prediction(
        stdout="PASSED tests/test_a.py::test_x\nPASSED tests/test_a.py::test_y\n", exit_code=1
    )
    agree = compare_results(real, pred, command="python -m pytest -rA", repo="psf/requests")
    assert agree["exit_code"] is True
    assert agree["tests"] == 0.5
    assert agree["exception"] is True  # no exception on either side
    # 1 matching line of 4 + 2: ratio 2 * 1 / 6
    assert agree["line_similarity"] == pytest.approx(1 / 3)


def test_compare_results_exception_and_empty_output():
    real = Prediction(stderr=TRACEBACK, exit_code=1)
    assert compare_results(real, Prediction(stderr="ValueError: other\n", exit_code=1))["exception"]
    empty = compare_results(real, Prediction(exit_code=0))
    assert (empty["exit_code"], empty["exception"], empty["line_similarity"]) == (False, False, 0.0)
    assert compare_results(Prediction(), Prediction())["line_similarity"] == 1.0


def test_percentile_and_rate():
    # rank round(0.5 * 3) = 2 (half to even) on 1, 2, 3, 10, as swt_fidelity always had
    assert percentile([3.0, 1.0, 2.0, 10.0], 50) == 3.0
    assert percentile([3.0, 1.0, 2.0, 10.0], 95) == 10.0
    assert math.isnan(percentile([], 50))
    assert rate([True, False, None, True]) == pytest.approx(2 / 3)
    assert rate([None]) is None


ITEMS = [
    (kind, repo, i) for kind in ("pytest", "script") for repo in ("r1", "r2") for i in range(5)
]
ITEMS += [("python_c", "r1", i) for i in range(2)]


def test_stratified_sample_is_deterministic_and_ignores_input_order():
    key = lambda x: (x[0], x[1])  # noqa: E731
    ident = lambda x: x  # noqa: E731
    a = stratified_sample(ITEMS, key, 7, seed=3, ident=ident)
    b = stratified_sample(list(reversed(ITEMS)), key, 7, seed=3, ident=ident)
    assert a == b
    assert a != stratified_sample(ITEMS, key, 7, seed=4, ident=ident) or len(ITEMS) < 2
    assert sorted(stratified_sample(ITEMS, key, None, seed=3)) == sorted(ITEMS)


def test_stratified_sample_balances_the_first_level_then_the_second():
    sample = stratified_sample(ITEMS, lambda x: (x[0], x[1]), 6, seed=0)
    kinds = [x[0] for x in sample]
    assert sorted(kinds) == ["pytest", "pytest", "python_c", "python_c", "script", "script"]
    for kind in ("pytest", "script"):
        assert {x[1] for x in sample if x[0] == kind} == {"r1", "r2"}
    # a small stratum runs out; the others fill the rest of the sample
    assert [x[0] for x in stratified_sample(ITEMS, lambda x: (x[0],), 10)].count("python_c") == 2


def test_stratified_order_rejects_keys_of_different_depth():
    with pytest.raises(ValueError):
        stratified_order([1, 2], lambda x: (x,) if x == 1 else (x, x))
