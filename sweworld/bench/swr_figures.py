"""The tables and plots of ``sweworld bench swr`` (:mod:`sweworld.bench.swr_eval`).

:func:`write_report` turns the rows scored so far (one per model spec, mode and candidate)
and the floors (scored on the same candidates, no model) into the report's figures:
classification against the real labels (the combined score and each stage alone, floors
beside), the same per repository, calibration (table and reliability plot), confusion
matrices, what the exact stages stopped, and best-of-N (table and curve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.bench.output import Figure, figure
from sweworld.bench.swr_scoring import (
    FLOOR_NAMES,
    best_of_n_table,
    exact_stops,
    floor_scores,
    metrics_of,
    stage_score,
)
from sweworld.data.schema import SWRRecord

__all__ = ["DESCRIPTION", "Plan", "build_figures", "scorer_rows", "write_report"]

DESCRIPTION = (
    "Each reward model scores candidate patches of held-out repositories (the test split: "
    "repositories never trained on) through RewardModel's public API with all configured "
    "stages (exact syntax / typecheck / semantic checks, then the simulated tests), oracle "
    "and/or blind; its P(resolved) is compared with the real label from running the tests. "
    "The candidates are a label-balanced seeded sample (classification) plus every "
    "candidate of a few tasks with several candidates (best-of-N). Floors on the same "
    "candidates: always resolved, the gold-files heuristic (touches every file the gold "
    "patch touches: it reads the gold patch, an oracle-mode floor) and a seeded random "
    "score. Caveats: small samples (n in each table), a balanced sample (so accuracy of "
    "always-resolved is about 0.5, not the data's base rate), and the exact stages are "
    "scored as hard 0/1 probabilities."
)

METRICS = (
    ("n", "n"),
    ("no_prediction", "no prediction"),
    ("accuracy", "accuracy"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("balanced_accuracy", "balanced accuracy"),
    ("roc_auc", "ROC AUC"),
    ("ece", "ECE"),
)
STAGES = ("syntax", "typecheck", "semantic", "tests")


@dataclass
class Plan:
    """What a run scores: the specs and modes, the ``(record, task)`` pairs, which of them
    are in the classification sample, the best-of-N subsets (N -> ``(task, ids)``) and
    the seed of the random floor."""

    specs: Sequence[str]
    modes: Sequence[str]
    pairs: Sequence[tuple[SWRRecord, Any]]
    sample_ids: set[str]
    groups: dict[int, list[tuple[str, list[str]]]]
    seed: int = 0


def _series(rows: Sequence[dict[str, Any]], plan: Plan) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for spec in plan.specs:
        for mode in plan.modes:
            mine = [r for r in rows if r.get("spec") == spec and r.get("mode") == mode]
            if mine:
                out[f"{spec} ({mode})"] = mine
    return out


def _floor_rows(plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for record, task in plan.pairs:
        scores = floor_scores(record, getattr(task, "patch", "") or "", plan.seed)
        rows.append({"id": record.id, "repo": record.repo, "task": record.instance_id,
                     "label": bool(record.resolved), **scores})  # fmt: skip
    return rows


def scorer_rows(rows: Sequence[dict[str, Any]], plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """Scorer name -> rows with ``id``, ``repo``, ``label`` and ``value`` (the score):
    per model spec and mode the combined score and each stage alone (stages that gave a
    verdict on some candidate), then the floors."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, mine in _series(rows, plan).items():
        base = [
            {"id": r["id"], "repo": r["repo"], "task": r.get("instance_id"), "label": r["label"]}
            for r in mine
        ]
        out[f"{name}: all stages"] = [
            {**b, "value": r["score"]} for b, r in zip(base, mine, strict=True)
        ]
        for stage in STAGES:
            values = [stage_score(r, stage) for r in mine]
            if any(v is not None for v in values):
                out[f"{name}: {stage} stage alone"] = [
                    {**b, "value": v} for b, v in zip(base, values, strict=True)
                ]
    floors = _floor_rows(plan)
    for floor in FLOOR_NAMES:
        out[f"floor: {floor}"] = [{**r, "value": r[floor]} for r in floors]
    return out


def _metric_cells(metrics: dict[str, Any]) -> list[Any]:
    return [metrics.get(k) for k, _ in METRICS]


def _classification_figures(
    scorers: dict[str, list[dict[str, Any]]], sample_ids: set[str], n_sample: int
) -> tuple[list[Figure], dict[str, Any]]:
    overall, per_repo, summary = [], [], {}
    repos = sorted({r["repo"] for rows in scorers.values() for r in rows if r["id"] in sample_ids})
    for name, rows in scorers.items():
        sampled = [r for r in rows if r["id"] in sample_ids]
        if not sampled:
            continue
        m = metrics_of(sampled, "value")
        summary[name] = m
        overall.append([name, *_metric_cells(m)])
    for repo in repos:
        for name, rows in scorers.items():
            if name.endswith("stage alone"):
                continue
            sampled = [r for r in rows if r["id"] in sample_ids and r["repo"] == repo]
            if sampled:
                per_repo.append([repo, name, *_metric_cells(metrics_of(sampled, "value"))])
    columns = [label for _, label in METRICS]
    return [
        figure(
            "Classification against real labels",
            ["scorer", *columns],
            overall,
            notes=(
                f"{n_sample} held-out candidates, label-balanced. A candidate is predicted "
                "resolved when its score is at least 0.5. 'all stages': the reward's combined "
                "P(resolved); 'X stage alone': that stage as a classifier (an exact stage's "
                "pass = 1, fail = 0; the tests stage's probability), over the candidates it "
                "gave a verdict on (no prediction: it did not run because an earlier stage "
                "stopped the candidate, or it skipped). ROC AUC: ranking (0.5 = chance); ECE: "
                "expected calibration error, 10 equal bins (0 = calibrated). Floors in the "
                "last rows: always resolved (precision = base rate), gold files (reads the "
                "gold patch), random (AUC about 0.5)."
            ),
        ),
        *_interval_figures(scorers, sample_ids),
        figure(
            "Classification per repository",
            ["repository", "scorer", *columns],
            per_repo,
            notes="The combined score of each model and the floors, per held-out repository "
            "(small n: read as an indication only).",
        ),
    ], summary


def _interval_figures(
    scorers: dict[str, list[dict[str, Any]]], sample_ids: set[str]
) -> list[Figure]:
    """95% intervals of the combined scores and the floors: a seeded bootstrap that draws
    whole tasks (the candidates of one task are not independent)."""
    from sweworld.reward.metrics import metric_intervals

    rows = []
    for name, scored in scorers.items():
        if name.endswith("stage alone"):
            continue
        sampled = [r for r in scored if r["id"] in sample_ids and r.get("value") is not None]
        if not sampled:
            continue
        labels = [r["label"] for r in sampled]
        values = [r["value"] for r in sampled]
        point = metrics_of(sampled, "value")
        tasks = [r.get("task") or r["id"] for r in sampled]
        ci = metric_intervals(labels, values, tasks)
        cells = []
        for key in ("balanced_accuracy", "roc_auc", "ece"):
            span = ci[key]
            cells.append(
                "–" if point.get(key) is None
                else f"{point[key]:.3f} [{span[0]:.3f}, {span[1]:.3f}]" if span
                else f"{point[key]:.3f}"
            )  # fmt: skip
        rows.append([name, len(sampled), len(set(tasks)), *cells])
    if not rows:
        return []
    return [
        figure(
            "Intervals of the combined score",
            ["scorer", "n", "tasks", "balanced accuracy", "ROC AUC", "ECE"],
            rows,
            notes="The label-balanced sample's figures with 95% intervals: a seeded "
            "percentile bootstrap (1,000 draws) that draws whole tasks, since the candidates "
            "of one task are not independent. An ECE near the target whose interval spans it "
            "is not evidence either way.",
        )
    ]


def _calibration(
    out: Any, series: dict[str, list[dict[str, Any]]], sample_ids: set[str]
) -> tuple[list[Figure], dict[str, Any]]:
    from sweworld.bench.plots import calibration_curve, confusion_matrix
    from sweworld.reward.metrics import reliability_bins

    bins, cal_rows, conf_rows, plots = {}, [], [], []
    for k, (name, rows) in enumerate(series.items()):
        sampled = [r for r in rows if r["id"] in sample_ids]
        if not sampled:
            continue
        labels = [r["label"] for r in sampled]
        scores = [r["score"] for r in sampled]
        bins[name] = reliability_bins(labels, scores)
        m = metrics_of(sampled, "score")
        cal_rows.append([name, m["n"], m["mean_score"], m["base_rate"], m["ece"], m["brier"]])
        conf_rows.append([name, m["tp"], m["fp"], m["fn"], m["tn"]])
        path = confusion_matrix(m["tp"], m["fp"], m["fn"], m["tn"],
                                out.plot_path(f"confusion_{k + 1}.png"), title=name)  # fmt: skip
        if path:
            plots.append(f"{path.name}: {name}")
    curve = calibration_curve(bins, out.plot_path("calibration.png"), title="SWR calibration")
    figures = [
        figure(
            "Calibration of the combined score",
            ["model (mode)", "n", "mean score", "fraction resolved", "ECE", "Brier"],
            cal_rows,
            notes="Mean predicted P(resolved) against the fraction really resolved, on the "
            "label-balanced sample (base rate about 0.5 by construction). Plot: reliability "
            "bins (10 equal-width bins; only non-empty bins drawn) against the diagonal.",
            plot=curve.name if curve else None,
        ),
        figure(
            "Confusion matrices (threshold 0.5)",
            [
                "model (mode)",
                "true positive",
                "false positive",
                "false negative",
                "true negative",
            ],
            conf_rows,
            notes="Rows: real label; positive = resolved. Plots: "
            + ("; ".join(plots) if plots else "none")
            + ". The first is shown.",
            plot=plots[0].split(":")[0] if plots else None,
        ),
    ]
    return figures, {"reliability_bins": bins}


def _stops_figure(series: dict[str, list[dict[str, Any]]], sample_ids: set[str]) -> Figure:
    rows = []
    for name, mine in series.items():
        stops = exact_stops([r for r in mine if r["id"] in sample_ids])
        for stage, entry in sorted(stops.items()):
            rows.append([name, stage, entry["stopped"], entry["really_resolved"]])
        if not stops:
            rows.append([name, "none", 0, 0])
    return figure(
        "What the exact stages stopped",
        ["model (mode)", "stage", "candidates stopped", "of which really resolved"],
        rows,
        notes="Candidates an exact stage rejected before the model ran (score 0), and how "
        "many of them really resolved the task (false rejections; ideally 0).",
    )


def _latency_figure(series: dict[str, list[dict[str, Any]]], sample_ids: set[str]) -> Figure:
    rows = []
    for name, mine in series.items():
        times = sorted(
            float(r["latency_s"])
            for r in mine
            if r["id"] in sample_ids and isinstance(r.get("latency_s"), (int, float))
        )
        if not times:
            continue

        def q(f: float, t: list[float] = times) -> float:
            return round(t[min(len(t) - 1, int(f * len(t)))], 4)

        rows.append([name, len(times), q(0.5), q(0.9), q(0.99), round(times[-1], 4)])
    return figure(
        "Time to score one candidate",
        ["model (mode)", "n", "p50 s", "p90 s", "p99 s", "max s"],
        rows,
        notes="Wall time of RewardModel.score per candidate of the classification sample "
        "(every configured stage, the outcome model's predictions, the verdict), in this "
        "process on this machine (shared: noisy). Target of issue 20: p50 <= 1 s.",
    )


def _best_of_n(
    out: Any, scorers: dict[str, list[dict[str, Any]]], plan: Plan
) -> tuple[list[Figure], dict[str, Any]]:
    from sweworld.bench.plots import best_of_n_curve

    rows, curves, summary = [], {}, {}
    wanted = {k: v for k, v in scorers.items() if k.endswith("all stages") or k.startswith("floor")}
    for n, groups in sorted(plan.groups.items()):
        for name, scored in wanted.items():
            labels = {r["id"]: r["label"] for r in scored}
            values = {r["id"]: r["value"] for r in scored}
            m = best_of_n_table(groups, values, labels)
            summary.setdefault(str(n), {})[name] = m
            if not m.get("n_tasks"):
                continue
            rows.append([n, name, m["n_tasks"], m.get("mixed_tasks"), m.get("unscored_groups"),
                         m.get("selected_tie_avg"), m.get("random"), m.get("oracle")])  # fmt: skip
            curves.setdefault(name.removesuffix(": all stages"), {})[n] = m.get("selected_tie_avg")
            if name == "floor: always resolved":  # every candidate scored: the same subsets
                curves.setdefault("random choice", {})[n] = m.get("random")
                curves.setdefault("oracle", {})[n] = m.get("oracle")
    curves.pop("floor: always resolved", None)  # all ties: the random choice, drawn once
    plot = best_of_n_curve(curves, out.plot_path("best_of_n.png"), title="SWR best of N")
    return [
        figure(
            "Best of N",
            [
                "N",
                "scorer",
                "subsets",
                "with both labels",
                "unscored",
                "selected resolves",
                "random choice",
                "oracle",
            ],
            rows,
            notes="For tasks with at least N labelled candidates, seeded subsets of N; the "
            "candidate with the highest score is selected (ties averaged) and its real label "
            "counted. Random choice: the expected rate of a uniform pick; oracle: 1 when any "
            "candidate of the subset resolves. Subsets with a candidate not yet scored are "
            "left out (unscored).",
            plot=plot.name if plot else None,
        )
    ], summary


def build_figures(out: Any, rows: Sequence[dict[str, Any]], plan: Plan) -> tuple[list, dict]:
    """The report's figures and summary from the rows so far (plots written into ``out``)."""
    scorers = scorer_rows(rows, plan)
    series = _series(rows, plan)
    figures, classification = _classification_figures(
        scorers, plan.sample_ids, len(plan.sample_ids)
    )
    calibration, bins = _calibration(out, series, plan.sample_ids)
    bon, bon_summary = _best_of_n(out, scorers, plan)
    figures += [
        *calibration,
        _stops_figure(series, plan.sample_ids),
        _latency_figure(series, plan.sample_ids),
        *bon,
    ]
    summary = {
        "n_rows": len(rows),
        "classification": classification,
        "calibration": bins,
        "best_of_n": bon_summary,
    }
    return figures, summary


def write_report(out: Any, rows: Sequence[dict[str, Any]], plan: Plan, *, final: bool) -> None:
    """Figures, plots and summary of the rows so far into ``out`` (a
    :class:`~sweworld.bench.output.BenchOutput`)."""
    wanted = {r.id for r, _ in plan.pairs}
    figures, summary = build_figures(out, [r for r in rows if r.get("id") in wanted], plan)
    out.write(figures, summary, final=final)
