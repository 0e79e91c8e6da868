"""The tables and plots of ``sweworld bench swt`` (:mod:`sweworld.bench.swt_eval`).

:func:`write_report` turns the rows done so far (one per model spec, mode and record) and
the floors (scored on the same sample, no model) into the report's figures: the overall
table (every figure of :func:`~sweworld.bench.swt_eval.summarize`), exit-code agreement by
command kind (with a bar plot) and by repository, and the summary kept in ``report.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sweworld.bench.output import Figure, figure
from sweworld.bench.swt_eval import floor_summaries, summarize
from sweworld.data.schema import SWTRecord

__all__ = ["DESCRIPTION", "build_figures", "series_summaries", "write_report"]

DESCRIPTION = (
    "Each model answers recorded real executions of held-out repositories (the test split: "
    "repositories never trained on) from the record's stored context, oracle (gold patch "
    "and tests shown) and/or blind, through the simulator's inference path: prompt, "
    "generation settings, parsing, validation, retries, and the conservative fallback "
    "when no valid answer comes. The truth is what really ran. Floors that need no model "
    "(always exit 0 / always exit 1, with empty output) are scored on the same records. "
    "Caveats: validation runs without the workspace facts (only their text is stored), the "
    "exact shortcut, cache and step deadline of a live step are not used, and samples are "
    "small (n per table), so differences of a few records are noise."
)

OVERALL_COLUMNS = (
    ("n", "n"),
    ("exit_code_agreement", "exit code agrees"),
    ("exit_code_agreement_model_only", "exit code agrees (model answers only)"),
    ("test_status_agreement", "test statuses agree"),
    ("n_with_tests", "n with tests"),
    ("exception_agreement", "exception type agrees"),
    ("line_similarity", "output line similarity"),
    ("fallback_rate", "fallback rate"),
    ("latency_p50_s", "latency p50 s"),
    ("latency_p95_s", "latency p95 s"),
)


def series_summaries(
    rows: Sequence[dict[str, Any]],
    sample: Sequence[SWTRecord],
    specs: Sequence[str],
    modes: Sequence[str],
) -> dict[str, dict[str, Any]]:
    """Name -> :func:`summarize`: one entry per model spec and mode that has rows (in the
    order asked for), then the floors (``floor: ...``, on the whole sample)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        for mode in modes:
            mine = [r for r in rows if r.get("spec") == spec and r.get("mode") == mode]
            if mine:
                out[f"{spec} ({mode})"] = summarize(mine)
    for name, summary in floor_summaries(sample).items():
        out[f"floor: {name}"] = summary
    return out


def _group_table(
    entries: dict[str, dict[str, Any]], group: str, metric: str
) -> tuple[list[str], list[list[Any]]]:
    keys = sorted({k for s in entries.values() for k in s.get(group, {})})
    names = list(entries)
    rows = []
    for key in keys:
        n = max((s[group].get(key, {}).get("n", 0) for s in entries.values()), default=0)
        rows.append([key, n, *[entries[name][group].get(key, {}).get(metric) for name in names]])
    return names, rows


def build_figures(
    entries: dict[str, dict[str, Any]], *, kind_plot: str | None, repo_plot: str | None
) -> list[Figure]:
    """The report's tables from :func:`series_summaries`."""
    n_sample = max((s["overall"]["n"] for s in entries.values()), default=0)
    overall = figure(
        "Agreement with the real execution, overall",
        ["model (mode) / floor", *[label for _, label in OVERALL_COLUMNS]],
        [[name, *[s["overall"].get(k) for k, _ in OVERALL_COLUMNS]] for name, s in entries.items()],
        notes=(
            f"{n_sample} held-out records. Exit code agrees: equal exit codes. Test statuses "
            "agree: per record, the fraction of tests named by either output whose status "
            "(read by the shared grader's parser) is the same, averaged over the records "
            "that ran tests and name tests (n with tests). Exception type agrees: the last "
            "exception line's type (or none) is the same. Output line similarity: difflib "
            "ratio over the lines of stdout+stderr. Fallback rate: answers that were not "
            "the model's (unparsable, invalid or model error after every retry), which "
            "count against the model in the other columns; the model-only column leaves "
            "them out. Floors: the same records answered without a model; a model is worth "
            "its margin over the better floor."
        ),
    )
    figures = [overall]
    names, rows = _group_table(entries, "by_kind", "exit_code_agreement")
    figures.append(
        figure(
            "Exit-code agreement by command kind",
            ["command kind", "n", *names],
            rows,
            notes="Fraction of records whose predicted exit code equals the real one, per "
            "kind of command (pytest, python script, python -c, ...); floors in the last "
            "columns.",
            plot=kind_plot,
        )
    )
    names, rows = _group_table(entries, "by_repo", "exit_code_agreement")
    figures.append(
        figure(
            "Exit-code agreement by repository",
            ["repository", "n", *names],
            rows,
            notes="The same per held-out repository.",
            plot=repo_plot,
        )
    )
    names, rows = _group_table(entries, "by_kind", "line_similarity")
    figures.append(
        figure(
            "Output line similarity by command kind",
            ["command kind", "n", *names],
            rows,
            notes="Mean difflib line ratio of the predicted output to the real one (1: same "
            "text); the empty-output floors score 1 only where the real output was empty.",
        )
    )
    return figures


def _bars(entries: dict[str, dict[str, Any]], group: str) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for name, summary in entries.items():
        for key, figs in summary.get(group, {}).items():
            out.setdefault(key, {})[name] = figs.get("exit_code_agreement")
    return dict(sorted(out.items()))


def write_report(
    out: Any,
    rows: Sequence[dict[str, Any]],
    sample: Sequence[SWTRecord],
    specs: Sequence[str],
    modes: Sequence[str],
    *,
    final: bool,
) -> None:
    """Figures, plots (on the final write, and partial ones while rows come) and summary of
    the rows so far into ``out`` (a :class:`~sweworld.bench.output.BenchOutput`)."""
    from sweworld.bench.plots import bar_groups

    entries = series_summaries(rows, sample, specs, modes)
    kind_plot = bar_groups(
        _bars(entries, "by_kind"),
        out.plot_path("exit_code_by_kind.png"),
        title="SWT exit-code agreement by command kind",
        ylabel="exit code agrees",
    )
    repo_plot = bar_groups(
        _bars(entries, "by_repo"),
        out.plot_path("exit_code_by_repo.png"),
        title="SWT exit-code agreement by repository",
        ylabel="exit code agrees",
    )
    figures = build_figures(
        entries,
        kind_plot=kind_plot.name if kind_plot else None,
        repo_plot=repo_plot.name if repo_plot else None,
    )
    summary = {"n_rows": len(rows), "series": entries}
    out.write(figures, summary, final=final)
