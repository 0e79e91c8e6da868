"""The figures of ``sweworld bench executors`` from its rows (one row per task and step).

A row (:func:`sweworld.bench.executors.run_step` entries per executor) holds each
executor's shortened output, exit code and time, and ``pairs``: per pair of executors
``a-b`` the agreement of :func:`sweworld.bench.similarity.compare_results` (``exit_code``,
``tests``, ``exception``, ``line_similarity``) and ``identical``. Everything here reads rows
only, so a resumed run's report covers every row, old and new.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.bench.output import Figure, figure
from sweworld.bench.similarity import mean, percentile, rate

__all__ = ["FLOOR", "figures_from_rows", "masked", "pair_names", "plot_by_kind"]

#: A prediction that needs no executor, scored against the reference on the same steps.
FLOOR = "floor: always exit 0, empty output"
#: Disagreeing steps listed in the report (the rest are counted).
MAX_LISTED = 40
#: Characters of each output shown in the list of disagreements.
SHOWN_CHARS = 500

METRIC_COLUMNS = [
    "steps",
    "exit code",
    "tests (steps)",
    "exception type",
    "line similarity",
    "identical output",
    "identical when masked",
]

#: What differs between two real runs of the same command without being a different result:
#: durations, object addresses, the interpreter's patch version and install paths.
MASKS = (
    (re.compile(r"\bin \d+(?:\.\d+)?s\b"), "in <T>s"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x<ADDR>"),
    (re.compile(r"\b(Python|python) ?(\d+\.\d+)\.\d+"), r"\1 \2.<P>"),
    (re.compile(r'File "[^"\n]*?/lib/python(\d+\.\d+)/'), r'File "<stdlib \1>/'),
    # From the start of a path only (not after a path character): tried at every character
    # of a long token, the greedy run made masking quadratic in the output.
    (re.compile(r"(?<![^\s\"'(])[^\s\"'(]*/(?:site|dist)-packages/"), "<site-packages>/"),
)


def masked(text: str) -> str:
    """``text`` with durations, addresses, Python patch versions and install paths masked
    (:data:`MASKS`), so that two runs of one command that differ only in those compare equal."""
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text


def pair_names(names: Sequence[str]) -> list[str]:
    """``a-b`` for every pair, the reference's pairs first."""
    return [f"{a}-{b}" for i, a in enumerate(names) for b in names[i + 1 :]]


def _metrics(agreements: Sequence[Mapping[str, Any]]) -> list[Any]:
    tests = [a.get("tests") for a in agreements if a.get("tests") is not None]
    tests_cell = f"{rate(tests):.3f} ({len(tests)})" if tests else None
    return [
        len(agreements),
        rate(a.get("exit_code") for a in agreements),
        tests_cell,
        rate(a.get("exception") for a in agreements),
        mean(a.get("line_similarity") for a in agreements),
        rate(a.get("identical") for a in agreements),
        rate(a.get("masked_identical") for a in agreements),
    ]


def _floor(rows: Sequence[Mapping[str, Any]], reference: str) -> list[dict[str, Any]]:
    """The floor's agreement with the reference on every step the reference ran."""
    from sweworld.bench.similarity import compare_results
    from sweworld.sandbox.executor import ExecutionResult

    out = []
    empty = ExecutionResult("", "", 0)
    for row in rows:
        ref = (row.get("results") or {}).get(reference) or {}
        if ref.get("failed") or "exit_code" not in ref:
            continue
        real = ExecutionResult(ref.get("stdout", ""), ref.get("stderr", ""), ref["exit_code"])
        agree = compare_results(real, empty, command=row["command"], repo=row.get("repo"))
        agree["identical"] = (real.stdout, real.stderr, real.exit_code) == ("", "", 0)
        agree["masked_identical"] = agree["identical"]
        out.append(agree)
    return out


def _differences(agree: Mapping[str, Any]) -> str:
    parts = []
    if agree.get("exit_code") is False:
        parts.append("exit code")
    if agree.get("tests") is not None and agree["tests"] < 1:
        parts.append(f"tests {agree['tests']:.2f}")
    if agree.get("exception") is False:
        parts.append("exception type")
    if agree.get("masked_identical"):
        parts.append("only timings, addresses, Python patch version or install paths")
    elif not agree.get("identical"):
        parts.append(f"output (similarity {agree.get('line_similarity', 0):.2f})")
    return ", ".join(parts)


def _shown(entry: Mapping[str, Any]) -> str:
    text = (entry.get("stdout") or "") + (entry.get("stderr") or "")
    text = text.strip()
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS // 2] + " [...] " + text[-SHOWN_CHARS // 2 :]
    return text or "(no output)"


def _disagreement_pair(names: Sequence[str]) -> str | None:
    if "docker" in names and "local" in names:
        return "docker-local" if names.index("docker") < names.index("local") else "local-docker"
    pairs = pair_names(names)
    return pairs[0] if pairs else None


def figures_from_rows(
    rows: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> tuple[list[Figure], dict[str, Any]]:
    """The report's tables and its summary (per pair: overall and by command kind)."""
    pairs = pair_names(names)
    reference = names[0]
    by_pair: dict[str, list] = defaultdict(list)
    by_kind: dict[tuple[str, str], list] = defaultdict(list)
    by_task: dict[tuple[str, str], list] = defaultdict(list)
    for row in rows:
        for pair, agree in (row.get("pairs") or {}).items():
            by_pair[pair].append(agree)
            by_kind[(row["kind"], pair)].append(agree)
            by_task[(row["task"], pair)].append(agree)
    floor = _floor(rows, reference)
    kinds = sorted({k for k, _ in by_kind})
    summary: dict[str, Any] = {
        "reference": reference,
        "rows": len(rows),
        "compared_steps": sum(1 for r in rows if r.get("pairs")),
        "pairs": {
            p: dict(zip(METRIC_COLUMNS, _metrics(by_pair[p]), strict=True))
            for p in pairs
            if by_pair[p]
        },
        "by_kind": {
            k: {
                p: rate(a.get("exit_code") for a in by_kind[(k, p)])
                for p in pairs
                if by_kind[(k, p)]
            }
            for k in kinds
        },
        "similarity_by_kind": {
            k: {
                p: mean(a.get("line_similarity") for a in by_kind[(k, p)])
                for p in pairs
                if by_kind[(k, p)]
            }
            for k in kinds
        },
        "floor": dict(zip(METRIC_COLUMNS, _metrics(floor), strict=True)),
    }
    overall = [[p, *_metrics(by_pair[p])] for p in pairs if by_pair[p]]
    if floor:
        overall.append([f"{reference} vs {FLOOR}", *_metrics(floor)])
    figures = [
        figure(
            "Agreement by executor pair",
            ["pair", *METRIC_COLUMNS],
            overall,
            f"Each measured step run in one session per executor; a pair `a-b` compares b's "
            f"result with a's (`{reference}` is the reference). Exit code, exception type "
            "(last exception line of stdout+stderr, none counting as a type) and identical "
            "output are fractions of steps; tests: mean per-test status agreement over the "
            "steps whose output names tests (the shared grader's parser), with that count; "
            "line similarity: mean difflib ratio of the output lines; identical when masked: "
            "equal exit code and output once durations (`in 0.05s`), object addresses, the "
            "Python patch version and stdlib / site-packages paths are masked. The floor row "
            "scores "
            "an answer that needs no executor (exit 0, no output) against the reference on "
            "the same steps (its outputs as stored in the rows, cut to 3,000 characters).",
        ),
        figure(
            "Agreement by command kind",
            ["command kind", "pair", *METRIC_COLUMNS],
            [[k, p, *_metrics(by_kind[(k, p)])] for k in kinds for p in pairs if by_kind[(k, p)]],
            "Command kinds by sweworld.data.schema.command_kind (the kind the SWT records "
            "carry). The plot shows exit-code agreement per kind and pair.",
            plot=None,
        ),
    ]
    figures[-1]["plot_key"] = "by_kind"
    tasks = sorted({t for t, _ in by_task})
    figures.append(
        figure(
            "Per task",
            ["task", "pair", *METRIC_COLUMNS],
            [[t, p, *_metrics(by_task[(t, p)])] for t in tasks for p in pairs if by_task[(t, p)]],
            "A task missing a pair had that executor left out (see Skipped and "
            "summary.missing_executors).",
        )
    )
    figures.append(_speed_figure(rows, names, summary))
    figures.append(_environment_figure(rows, names))
    listed = _disagreements(rows, names, summary)
    if listed is not None:
        figures.append(listed)
    recorded = _recorded_figure(rows, names)
    if recorded is not None:
        figures.append(recorded)
    summary["headline"] = [
        f"{p}: exit code {_pct(m['exit code'])}, exception {_pct(m['exception type'])}, "
        f"identical output {_pct(m['identical output'])} "
        f"({_pct(m['identical when masked'])} when masked) on {m['steps']} steps"
        for p, m in summary["pairs"].items()
    ]
    return figures, summary


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _speed_figure(rows: Sequence[Mapping[str, Any]], names: Sequence[str], summary: dict) -> Figure:
    table = []
    speed: dict[str, Any] = {}
    for name in names:
        entries = [(r.get("results") or {}).get(name) for r in rows]
        walls = [e["wall_s"] for e in entries if e and not e.get("failed") and "wall_s" in e]
        failed = sum(1 for e in entries if e and e.get("failed"))
        sources = Counter(s for e in entries if e for s in e.get("sources") or [])
        total = sum(walls)
        speed[name] = {
            "steps": len(walls),
            "seconds": total,
            "steps_per_s": len(walls) / total if total else None,
        }
        table.append(
            [
                name,
                len(walls),
                failed,
                total,
                mean(walls),
                percentile(walls, 50) if walls else None,
                percentile(walls, 95) if walls else None,
                speed[name]["steps_per_s"],
                ", ".join(f"{k} {v}" for k, v in sorted(sources.items())) or None,
            ]
        )
    summary["speed"] = speed
    return figure(
        "Time per step",
        [
            "executor",
            "steps",
            "not executed",
            "total s",
            "mean s",
            "p50 s",
            "p95 s",
            "steps per s",
            "simulated answers by source",
        ],
        table,
        "Wall time of the whole step in its session (the shell, the executor, Docker's sync "
        "of the workspace into the container), one step at a time on this machine. Not "
        "executed: the executor could not run the step (an engine or environment failure).",
    )


def _environment_figure(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Figure:
    table = []
    for row in rows:
        if row.get("label") != "python_version":
            continue
        res = row.get("results") or {}
        table.append(
            [
                row["task"],
                *[
                    (
                        (res.get(n) or {}).get("stdout", "") + (res.get(n) or {}).get("stderr", "")
                    ).strip()
                    or None
                    for n in names
                ],
            ]
        )
    return figure(
        "Environment: `python --version` in each executor",
        ["task", *names],
        table,
        "The interpreter each executor's environment runs (the probe's first step). A "
        "different minor version is a reason for other differences.",
    )


def _disagreements(rows: Sequence[Mapping[str, Any]], names: Sequence[str], summary: dict):
    pair = _disagreement_pair(names)
    if pair is None:
        return None
    a, b = pair.split("-", 1)
    real, masked_only = [], []
    for row in rows:
        agree = (row.get("pairs") or {}).get(pair)
        if agree is None or agree.get("identical"):
            continue
        res = row["results"]
        line = [
            row["task"],
            f"{row['index']} {row['label']}",
            row["kind"],
            _differences(agree),
            f"{res[a]['exit_code']} / {res[b]['exit_code']}",
            _shown(res[a]),
            _shown(res[b]),
        ]
        (masked_only if agree.get("masked_identical") else real).append(line)
    summary["disagreements"] = {
        "pair": pair,
        "steps": len(real) + len(masked_only),
        "masked_only": len(masked_only),
    }
    by_step: dict[str, int] = {}
    for line in masked_only:
        label = str(line[1]).split(" ", 1)[-1]
        by_step[label] = by_step.get(label, 0) + 1
    masked_text = ", ".join(f"{label} ({n})" for label, n in sorted(by_step.items()))
    return figure(
        f"Steps where {b} differs from {a}",
        ["task", "step", "kind", "differs in", "exit codes", f"{a} output", f"{b} output"],
        real[:MAX_LISTED],
        f"{len(real) + len(masked_only)} steps whose output is not identical: {len(real)} "
        "that differ in substance, listed"
        + (f" (the first {MAX_LISTED})" if len(real) > MAX_LISTED else "")
        + f", and {len(masked_only)} that differ only in timings, object addresses, the "
        "Python patch version or install paths, not listed"
        + (f" (by probe step: {masked_text})" if masked_text else "")
        + f". Outputs are stdout+stderr, cut to {SHOWN_CHARS} characters.",
    )


def _recorded_figure(rows: Sequence[Mapping[str, Any]], names: Sequence[str]):
    by_name: dict[str, list] = defaultdict(list)
    for row in rows:
        for name, agree in (row.get("vs_recorded") or {}).items():
            by_name[name].append(agree)
    if not by_name:
        return None
    return figure(
        "Against the recorded real result",
        ["executor", *METRIC_COLUMNS[:5]],
        [[n, *_metrics(by_name[n])[:5]] for n in names if by_name[n]],
        "Each executor's result on a replayed record against the result the record stores "
        "(what really ran when the data was collected). A record stores the workspace's diff, "
        "not the session's /tmp: a recorded command that runs a file the agent had written "
        "to /tmp finds no such file in any executor, and counts here as a disagreement.",
    )


def plot_by_kind(summary: Mapping[str, Any], folder: str | Path) -> dict[str, str]:
    """Bars of exit-code agreement by command kind, one bar per pair; ``{key: file}``."""
    from sweworld.bench.plots import bar_groups

    made = {}
    path = bar_groups(
        summary.get("by_kind") or {},
        Path(folder) / "agreement_by_kind.png",
        title="exit-code agreement by command kind",
        ylabel="fraction of steps",
    )
    if path is not None:
        made["by_kind"] = path.name
    return made
