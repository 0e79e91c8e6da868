"""The report of ``sweworld bench e2e`` (:mod:`sweworld.bench.e2e`): resolved rates with
simulated vs real feedback (with 95% intervals and the simulated/real ratio), per task, per
repository, effort, who answered, and the agent's view of its test runs against reality."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from sweworld.bench.similarity import wilson_interval as wilson

__all__ = ["DESCRIPTION", "mean", "median", "paired_ratio", "write_report"]

#: Resamples of the bootstrap interval of the simulated/real ratio (seeded: same rows, same
#: interval).
BOOTSTRAP = 2000


def median(values: Sequence[float]) -> float | None:
    """The median, None for no values."""
    return statistics.median(values) if values else None


def mean(values: Sequence[float]) -> float | None:
    """The mean, None for no values."""
    return sum(values) / len(values) if values else None


# ---------------------------------------------------------------------- the report

DESCRIPTION = (
    "The same agent runs each task twice: with simulated feedback (its execution commands "
    "answered by the simulated world: --world-model, the outcome world by default, which "
    "in oracle mode has the default world's judge, --judge: the shipped SWR verdict decides "
    "whether a state resolves the task and a run of the task's graded tests shows that "
    "decision) and with real feedback (run by the local executor). "
    "Both final patches are graded for real: the task's FAIL_TO_PASS and PASS_TO_PASS tests "
    "run in the sandbox, never judged by a model. With the scripted test-driven candidate "
    "agent the only thing that differs between the two runs is what the test runs say, so "
    "the gap between the two resolved rates measures the simulator, not an agent. Each test "
    "run seen with simulated feedback is also re-run for real on the same workspace (after "
    "the agent got the simulated answer) to count how often the agent's view was wrong. "
    "Caveats: few tasks; the candidate pool is the gold patch plus one-token mutants of it "
    "(some mutants are equivalent and really resolve: the pool figures say how many); the "
    "scripted agent is given the task's tests (it applies the test patch, which the grader "
    "resets), as a test-driven agent would write its own; in oracle mode the judge reads "
    "the gold patch, and the pool is made from it, so the judge's task is easier here than "
    "on an agent's own patches."
)


def _split_rows(done: dict[str, dict[str, Any]], ids: set[str]) -> tuple[dict, dict]:
    pools, episodes = {}, {}
    for key, row in done.items():
        kind, _, iid = key.partition("\x1f")
        if iid not in ids:
            continue
        if kind == "pool":
            pools[iid] = row
        else:
            episodes[(kind, iid)] = row
    return pools, episodes


def _cols(names: str) -> list[str]:
    """Column titles from one ``|``-separated string."""
    return names.split("|")


def _rate(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def paired_ratio(
    real: Sequence[bool], sim: Sequence[bool], *, seed: int = 0, resamples: int = BOOTSTRAP
) -> dict[str, Any]:
    """Resolved with simulated feedback over resolved with real feedback on the same tasks
    (SWE-World's "fidelity" ratio), with a seeded percentile-bootstrap 95% interval over the
    tasks (resamples whose real count is 0 are left out). None when nothing resolved for
    real."""
    n, k_real = len(real), sum(real)
    ratio = sum(sim) / k_real if k_real else None
    if not n or ratio is None:
        return {"ratio": ratio, "ci95": None}
    rng = random.Random(seed)
    pairs = list(zip(real, sim, strict=True))
    draws = []
    for _ in range(resamples):
        sample = [pairs[rng.randrange(n)] for _ in range(n)]
        denominator = sum(r for r, _ in sample)
        if denominator:
            draws.append(sum(s for _, s in sample) / denominator)
    if not draws:
        return {"ratio": ratio, "ci95": None}
    lo = float(np.percentile(draws, 2.5, method="lower"))
    hi = float(np.percentile(draws, 97.5, method="higher"))
    return {"ratio": ratio, "ci95": [round(lo, 4), round(hi, 4)]}


def _ci(interval: list[float] | None) -> str | None:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else None


def _resolved_figures(
    agent: str, feedbacks: Sequence[str], episodes: dict, pools: dict, order: list[str]
) -> tuple[list[Any], dict[str, Any]]:
    from sweworld.bench.output import figure

    table, summary = [], {}
    for fb in ("real", "simulated"):
        if fb not in feedbacks:
            continue
        rows = [episodes[(fb, i)] for i in order if (fb, i) in episodes]
        ok = [r for r in rows if r.get("status") == "ok"]
        resolved = [bool(r.get("resolved")) for r in ok]
        summary[fb] = {
            "episodes": len(rows),
            "errors": len(rows) - len(ok),
            "resolved": sum(resolved),
            "rate": _rate(resolved),
            "ci95": wilson(sum(resolved), len(resolved)),
        }
        table.append(
            [
                agent,
                f"{fb} feedback",
                *(summary[fb][k] for k in ("episodes", "errors", "resolved", "rate")),
                _ci(summary[fb]["ci95"]),
            ]
        )
    both = [
        i
        for i in order
        if all(episodes.get((fb, i), {}).get("status") == "ok" for fb in ("real", "simulated"))
    ]
    real = [bool(episodes[("real", i)].get("resolved")) for i in both]
    sim = [bool(episodes[("simulated", i)].get("resolved")) for i in both]
    gap = (_rate(real) - _rate(sim)) if both else None  # type: ignore[operator]
    ratio = paired_ratio(real, sim)
    summary["paired"] = {
        "tasks": len(both),
        "real": _rate(real),
        "simulated": _rate(sim),
        "gap": gap,
        "ratio": ratio["ratio"],
        "ratio_ci95": ratio["ci95"],
    }
    table.append(
        ["sim-to-real gap: real − simulated (tasks with both)", "", len(both), "", "", gap, ""]
    )
    table.append(
        [
            "fidelity: resolved with simulated / with real feedback (tasks with both)",
            "",
            len(both),
            "",
            "",
            ratio["ratio"],
            _ci(ratio["ci95"]),
        ]
    )
    floors = {}
    pooled = [pools[i]["candidates"] for i in order if i in pools and pools[i]["candidates"]]
    if pooled:
        floors = {
            "floor: a random candidate of the pool": mean(
                [_rate([bool(c["resolved"]) for c in p]) or 0.0 for p in pooled]
            ),
            "floor: the first candidate, untested (ignores feedback)": _rate(
                [bool(p[0]["resolved"]) for p in pooled]
            ),
            "floor: the last candidate (a simulator that never says pass)": _rate(
                [bool(p[-1]["resolved"]) for p in pooled]
            ),
            "ceiling: oracle (some candidate resolves)": _rate(
                [any(c["resolved"] for c in p) for p in pooled]
            ),
        }
        for name, value in floors.items():
            table.append([name, "none", len(pooled), "", "", value, ""])
    summary["floors"] = floors
    fig = figure(
        "Resolved rate (real grade) with simulated vs real feedback",
        _cols("agent / policy|feedback|episodes|errors|resolved|resolved rate|95% interval"),
        table,
        "Resolved: the final patch passes every FAIL_TO_PASS and PASS_TO_PASS test, run for "
        "real. The rate is over the episodes that finished (errors left out); its interval "
        "is Wilson's. The gap and the fidelity ratio (target >= 0.85) are on the tasks where "
        "both episodes finished: gap 0 / ratio 1 means the simulator cost the agent nothing; "
        "the ratio's interval is a seeded bootstrap over the tasks. Floors (candidate agent): "
        "a random candidate, the first one in the "
        "agent's order submitted without testing, the last one (what the agent submits "
        "when no run reads as passing); the oracle picks a resolving candidate if any.",
        plot="resolved.png",
    )
    agreement = Counter(
        ("both" if r and s else "only real" if r else "only sim" if s else "neither")
        for r, s in zip(real, sim, strict=True)
    )
    fig2 = figure(
        "Agreement per task",
        _cols(
            "tasks with both|both resolved|only with real feedback|only with simulated feedback|"
            "neither|same outcome"
        ),
        [
            [
                len(both),
                *(agreement[k] for k in ("both", "only real", "only sim", "neither")),
                _rate([r == s for r, s in zip(real, sim, strict=True)]),
            ]
        ],
        "Per task, whether the patch of each run resolved it (real grade).",
    )
    summary["agreement"] = dict(agreement)
    return [fig, fig2], summary


def _repo_figure(order: list[str], episodes: dict) -> tuple[Any, dict[str, Any]]:
    """Resolved with each feedback per repository (tasks where both episodes finished)."""
    from sweworld.bench.output import figure

    groups: dict[str, list[tuple[bool, bool]]] = {}
    for iid in order:
        real, sim = episodes.get(("real", iid), {}), episodes.get(("simulated", iid), {})
        if real.get("status") == "ok" and sim.get("status") == "ok":
            repo = str(real.get("repo") or sim.get("repo") or "")
            groups.setdefault(repo, []).append((bool(real.get("resolved")),
                                                bool(sim.get("resolved"))))  # fmt: skip
    rows, summary = [], {}
    for repo in sorted(groups):
        pairs = groups[repo]
        k_real, k_sim = sum(r for r, _ in pairs), sum(s for _, s in pairs)
        ratio = k_sim / k_real if k_real else None
        summary[repo] = {"tasks": len(pairs), "real": k_real, "simulated": k_sim, "ratio": ratio}
        rows.append([repo, len(pairs), k_real, k_sim, ratio])
    fig = figure(
        "Resolved per repository (tasks where both episodes finished)",
        _cols("repository|tasks|resolved, real feedback|resolved, simulated feedback|ratio"),
        rows,
        "Ratio: resolved with simulated over resolved with real feedback.",
    )
    return fig, summary


def _per_task_figure(order: list[str], episodes: dict, pools: dict) -> Any:
    from sweworld.bench.output import figure

    rows = []
    for iid in order:
        pool = pools.get(iid, {}).get("candidates") or []
        cells: list[Any] = [
            iid,
            f"{sum(bool(c['resolved']) for c in pool)}/{len(pool)}" if pool else None,
        ]
        for fb in ("real", "simulated"):
            row = episodes.get((fb, iid), {})
            what = row.get("chosen") or row.get("reason")
            cells += [(row.get("error") and "error") or what, row.get("resolved")]
        rows.append(cells)
    return figure(
        "Per task",
        _cols(
            "task|pool: resolving/size|real feedback: submitted|resolved|"
            "simulated feedback: submitted|resolved"
        ),
        rows,
        "Submitted: the candidate the agent chose (or how the episode ended). Pool: how many "
        "of its candidates really resolve the task.",
    )


def _effort_figures(feedbacks: Sequence[str], episodes: dict) -> tuple[list[Any], dict]:
    from sweworld.bench.output import figure

    effort, answers, summary = [], [], {}
    sources = sorted({s for r in episodes.values() for s in (r.get("sources") or {})})
    for fb in feedbacks:
        rows = [r for (f, _), r in episodes.items() if f == fb]
        steps = [r.get("steps", 0) for r in rows]
        walls = [r.get("wall_s", 0.0) for r in rows]
        shadow_s = sum(r.get("shadow_s", 0.0) for r in rows)
        effort.append(
            [
                f"{fb} feedback",
                len(rows),
                mean(steps),
                median(steps),
                mean(walls),
                median(walls),
                max(walls, default=None),
                shadow_s,
            ]
        )
        counts = Counter()
        for r in rows:
            counts.update(r.get("sources") or {})
        totals = [sum(r.get(k, 0) for r in rows) for k in ("timed_out", "executor_errors")]
        ended = sum(r.get("status") == "error" for r in rows)
        answers.append(
            [f"{fb} feedback", sum(counts.values()), *(counts[s] for s in sources), *totals, ended]
        )
        summary[fb] = {
            "mean_steps": mean(steps),
            "mean_wall_s": mean(walls),
            "sources": dict(counts),
        }
    return [
        figure(
            "Steps and wall time per episode",
            _cols(
                "feedback|episodes|mean steps|median steps|mean wall s|median wall s|max wall s|"
                "real re-runs s (not in wall)"
            ),
            effort,
            "Wall time from the episode's start to its real grade, without the real re-runs "
            "of simulated test commands (the last column).",
        ),
        figure(
            "Who answered the execution commands; fallbacks and errors",
            [
                "feedback",
                "execution calls",
                *sources,
                *_cols("timed out|executor errors|episodes ended in error"),
            ],
            answers,
            "Execution calls by answer source: for the simulator, exact (computed without a "
            "model), model, fallback (no valid prediction: a conservative answer claiming no "
            "result), hint, error; real runs: local. File operations run for real in every "
            "world and are not counted.",
        ),
    ], summary


def _view_figure(episodes: dict) -> tuple[Any, dict[str, Any]]:
    from sweworld.bench.output import figure

    runs = [
        t for (f, _), r in episodes.items() if f == "simulated" for t in r.get("test_runs") or []
    ]
    compared = [t for t in runs if t.get("real") is not None]
    cells = Counter((t["seen"] == "pass", t["real"] == "pass") for t in compared)
    agree = [(t["seen"] == "pass") == (t["real"] == "pass") for t in compared]
    real_pass = _rate([t["real"] == "pass" for t in compared])
    floor = max(real_pass, 1 - real_pass) if real_pass is not None else None
    exit_agree = _rate([t.get("seen_exit_code") == t.get("real_exit_code") for t in compared])
    per_test = [
        t["agree"]["tests"] for t in compared if (t.get("agree") or {}).get("tests") is not None
    ]
    no_result = sum(t["seen"] == "no_result" for t in compared)
    summary = {
        "test_runs": len(runs),
        "compared": len(compared),
        "verdict_agreement": _rate(agree),
        "false_pass": cells[(True, False)],
        "false_fail": cells[(False, True)],
        "no_result": no_result,
    }
    fig = figure(
        "The agent's view of its test runs vs a real re-run (simulated feedback)",
        _cols(
            "test runs compared|seen pass, really pass|seen pass, really failing|"
            "seen not passing, really pass|both not passing|seen: no result|verdict agreement|"
            "floor: a constant verdict|exit-code agreement|per-test status agreement"
        ),
        [
            [
                len(compared),
                *(cells[k] for k in ((True, True), (True, False), (False, True), (False, False))),
                no_result,
                _rate(agree),
                floor,
                exit_agree,
                mean(per_test),
            ]
        ],
        "Every test command run with simulated feedback is run again for real on the same "
        f"workspace ({len(runs) - len(compared)} of {len(runs)} could not be compared). A "
        "run reads as passing when it exits 0 with none of the task's tests reported "
        "failing; 'no result': the simulator declined to answer (counted as not passing). "
        "Floor: the agreement of always answering the more common real verdict. With real "
        "feedback the agent's view is reality by construction.",
    )
    return fig, summary


def write_report(
    out: Any, tasks: Sequence[Any], feedbacks: Sequence[str], scripted: bool, *, final: bool
) -> list[dict[str, Any]]:
    """Figures and summary from the rows so far into ``report.json`` / ``report.md`` (and
    the resolved-rate plot when ``final``); returns the rows of these tasks."""
    from sweworld.bench.plots import bar_groups

    order = [t.instance_id for t in tasks]
    pools, episodes = _split_rows(out.done(), set(order))
    agent = out.report.data.get("agent") or "agent"
    figures, summary = _resolved_figures(agent, feedbacks, episodes, pools, order)
    by_repo, summary["by_repo"] = _repo_figure(order, episodes)
    figures.append(by_repo)
    figures.append(_per_task_figure(order, episodes, pools))
    effort, summary["effort"] = _effort_figures(feedbacks, episodes)
    figures += effort
    if "simulated" in feedbacks:
        view, summary["view"] = _view_figure(episodes)
        figures.append(view)
    errors = Counter(str(r.get("error"))[:200] for r in episodes.values() if r.get("error"))
    summary["errors"] = dict(errors)
    summary["scripted"] = scripted
    if final:
        bars = {f"{fb} feedback": summary[fb]["rate"] for fb in feedbacks if fb in summary}
        for name, value in (summary.get("floors") or {}).items():
            bars[name.split(":")[0] + ": " + name.split(":")[1].split("(")[0].strip()] = value
        path = bar_groups(
            {"resolved rate": bars},
            out.plot_path("resolved.png"),
            title="Resolved rate (real grade)",
            ylabel="resolved rate",
        )
        if path is None:
            figures[0].pop("plot", None)
    else:
        figures[0].pop("plot", None)
    out.write(figures, summary, final=final)
    return [*pools.values(), *episodes.values()]
