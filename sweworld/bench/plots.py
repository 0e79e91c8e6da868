"""PNG plots of benchmark reports (matplotlib, headless ``Agg`` backend).

Each function takes plain numbers (as the report's JSON holds them), writes one PNG and
returns its path, or None when matplotlib is not installed (``pip install
'sweworld[bench]'``) or there is nothing to draw; a report never fails for want of a plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["bar_groups", "best_of_n_curve", "calibration_curve", "confusion_matrix"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        # labels come from the data (repositories, commands, model specs): a '$' in one is
        # text, not the start of a formula that fails to parse and loses the plot
        matplotlib.rcParams["text.parse_math"] = False
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def calibration_curve(
    curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = ""
) -> Path | None:
    """Reliability diagram: per model, its bins (``mean_score``, ``frac_positive``,
    ``count``, as :func:`sweworld.reward.metrics.reliability_bins` gives them) against the
    diagonal."""
    plt = _pyplot()
    drawn = {k: [b for b in v if b.get("count")] for k, v in curves.items()}
    if plt is None or not any(drawn.values()):
        return None
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfectly calibrated")
    for name, bins in drawn.items():
        if bins:
            xs = [b["mean_score"] for b in bins]
            ys = [b["frac_positive"] for b in bins]
            ax.plot(xs, ys, "o-", label=name)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="predicted probability", ylabel="fraction resolved")
    ax.set_title(title or "calibration")
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def confusion_matrix(
    tp: int, fp: int, fn: int, tn: int, path: str | Path, title: str = ""
) -> Path | None:
    """A 2x2 confusion matrix (rows: real label, columns: prediction)."""
    plt = _pyplot()
    if plt is None or tp + fp + fn + tn == 0:
        return None
    cells = [[tp, fn], [fp, tn]]
    fig, ax = plt.subplots(figsize=(4, 3.6))
    ax.imshow(cells, cmap="Blues")
    for i in range(2):
        for j in range(2):
            ax.text(j, i, str(cells[i][j]), ha="center", va="center", fontsize=14)
    ax.set_xticks([0, 1], ["predicted\nresolved", "predicted\nunresolved"])
    ax.set_yticks([0, 1], ["resolved", "unresolved"])
    ax.set_title(title or "confusion matrix")
    return _save(fig, plt, path)


def bar_groups(
    groups: Mapping[str, Mapping[str, float | None]],
    path: str | Path,
    title: str = "",
    ylabel: str = "",
    ylim: tuple[float, float] | None = (0, 1),
) -> Path | None:
    """Grouped bars: ``groups[category][series] = value`` (e.g. exit-code agreement per
    command kind, one bar per model). None values are left out."""
    plt = _pyplot()
    categories = list(groups)
    series = sorted({s for v in groups.values() for s, value in v.items() if value is not None})
    if plt is None or not categories or not series:
        return None
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(categories) * max(1, len(series) / 2)), 4))
    for k, name in enumerate(series):
        xs, ys = [], []
        for i, cat in enumerate(categories):
            value = groups[cat].get(name)
            if value is not None:
                xs.append(i + (k - (len(series) - 1) / 2) * width)
                ys.append(value)
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right", fontsize=8)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, plt, path)


def best_of_n_curve(
    curves: Mapping[str, Mapping[int, float | None]], path: str | Path, title: str = ""
) -> Path | None:
    """Success rate against N, one line per selector (verifier, random, majority, oracle)."""
    plt = _pyplot()
    if plt is None or all(y is None for v in curves.values() for y in v.values()):
        return None
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, points in curves.items():
        pts = sorted((int(n), y) for n, y in points.items() if y is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="N candidates", ylabel="resolved rate of the chosen patch", ylim=(0, 1))
    ax.set_title(title or "best of N")
    ax.legend(fontsize=8)
    return _save(fig, plt, path)
