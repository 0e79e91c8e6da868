"""Plots: each writes a PNG from plain numbers, and returns None with nothing to draw or
without matplotlib."""

from __future__ import annotations

import sys

import pytest

from sweworld.bench import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

BINS = [
    {"mean_score": 0.1, "frac_positive": 0.2, "count": 5},
    {"mean_score": 0.5, "frac_positive": 0.4, "count": 0},
    {"mean_score": 0.9, "frac_positive": 0.7, "count": 8},
]


def drawn(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def test_each_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = plots.calibration_curve({"base": BINS, "adapter": []}, tmp_path / "cal.png", "c")
    assert out == tmp_path / "cal.png" and drawn(out)
    out = plots.confusion_matrix(3, 1, 2, 4, tmp_path / "sub" / "cm.png")
    assert out == tmp_path / "sub" / "cm.png" and drawn(out)
    groups = {"pytest": {"base": 0.5, "adapter": None}, "python_c": {"base": 0.9, "adapter": 1.0}}
    out = plots.bar_groups(groups, tmp_path / "bars.png", "by kind", "agreement")
    assert drawn(out)
    curves = {"verifier": {2: 0.5, 4: 0.6, 8: None}, "random": {2: 0.4, 4: 0.4, 8: 0.4}}
    out = plots.best_of_n_curve(curves, tmp_path / "bon.png")
    assert drawn(out)


def test_dollar_signs_in_labels_from_the_data_are_text(tmp_path):
    pytest.importorskip("matplotlib")
    groups = {"owner/re$po": {"replay:/x/$\\frac{": 0.5}, "$x^$": {"replay:/x/$\\frac{": 1.0}}
    assert drawn(plots.bar_groups(groups, tmp_path / "b.png", title="$\\frac{"))
    bins = {"$\\frac{": BINS}
    assert drawn(plots.calibration_curve(bins, tmp_path / "c.png", title="a $ b $\\x"))
    assert drawn(plots.best_of_n_curve({"$^": {2: 0.5, 4: 0.6}}, tmp_path / "n.png"))
    nan = float("nan")
    assert drawn(plots.bar_groups({"g": {"a": nan, "b": 0.5}}, tmp_path / "nan.png", ylim=None))


def test_nothing_to_draw_returns_none(tmp_path):
    pytest.importorskip("matplotlib")
    empty_bins = [{"mean_score": 0.5, "frac_positive": 0.5, "count": 0}]
    assert plots.calibration_curve({}, tmp_path / "a.png") is None
    assert plots.calibration_curve({"m": empty_bins}, tmp_path / "a.png") is None
    assert plots.confusion_matrix(0, 0, 0, 0, tmp_path / "b.png") is None
    assert plots.bar_groups({}, tmp_path / "c.png") is None
    assert plots.bar_groups({"pytest": {}}, tmp_path / "c.png") is None
    assert plots.bar_groups({"pytest": {"base": None}}, tmp_path / "c.png") is None
    assert plots.best_of_n_curve({}, tmp_path / "d.png") is None
    assert plots.best_of_n_curve({"random": {}}, tmp_path / "d.png") is None
    assert plots.best_of_n_curve({"random": {2: None}}, tmp_path / "d.png") is None
    assert not list(tmp_path.iterdir())


def test_without_matplotlib_no_plot_and_no_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    assert plots.confusion_matrix(1, 1, 1, 1, tmp_path / "cm.png") is None
    assert plots.best_of_n_curve({"v": {2: 0.5}}, tmp_path / "bon.png") is None
    assert not (tmp_path / "cm.png").exists()
