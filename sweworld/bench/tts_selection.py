"""Choosing one candidate among N: the selectors of ``sweworld bench tts`` and their
figures, on plain numbers (no model, no data loading; :mod:`sweworld.bench.tts` feeds them).

A *group* is N candidate ids of one task, in the seeded label-independent order that
:func:`sweworld.bench.swr_eval.bon_groups` gives. For each group every selector's value is
the resolved rate of its choice, exact rather than sampled:

- **verifier**: the candidate with the highest SWR score, ties broken by
  :func:`sweworld.reward.metrics.select_best` (the larger equivalence class, then the
  earlier position in the group's seeded order). Candidates whose scoring failed are left
  out of the choice; a group with no scored candidate gets the random expectation (counted
  as a fallback). The tie-averaged value (a uniform pick among the top-scored) is kept too.
- **random**: the fraction of the group's candidates that resolve (the expectation of a
  uniform pick).
- **majority**: the largest equivalence class (:func:`patch_class`); with several of the
  same size, the mean over them of each class's resolved fraction (a uniform pick among the
  tied classes, then among the class's members).
- **oracle**: 1 when some candidate of the group resolves.

Rates are means over groups; 95% intervals are percentile bootstraps that resample *tasks*
(all of a task's groups together: groups of one task share candidates, so they are not
independent).
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweworld.bench.output import Figure, figure

__all__ = [
    "SELECTOR_BASELINES",
    "GroupValues",
    "bootstrap_mean_ci",
    "majority_value",
    "oracle_value",
    "patch_class",
    "random_value",
    "report_figures",
    "select_groups",
    "summarize",
    "verifier_value",
]

SELECTOR_BASELINES = ("random", "majority", "oracle")


def patch_class(patch: str) -> str:
    """The equivalence class of a candidate: the semantic stage's
    :func:`~sweworld.reward.stages.semantic.change_signature` of the patch read alone (hunks
    scope, no checkout, so every verifier and the majority see the same classes): per file,
    the removed and added lines without comments, trailing spaces and blank lines, inner
    whitespace collapsed (indentation is code), hunks whose two sides normalise to the same
    code dropped; file order and hunk line numbers ignored. ``"empty"`` for a patch that
    changes nothing; a patch that is no unified diff is classed by its own text."""
    from sweworld.reward.candidate import view_candidate
    from sweworld.reward.stages.semantic import change_signature

    view = view_candidate(patch or "")
    if view.empty:
        return "empty"
    signature = change_signature(view)
    return "empty" if signature == _no_change_signature() else signature[:16]


@functools.cache
def _no_change_signature() -> str:
    """The signature of a change that changes nothing (an empty or no-op patch)."""
    from sweworld.reward.candidate import view_candidate
    from sweworld.reward.stages.semantic import change_signature

    return change_signature(view_candidate(""))


# ------------------------------------------------------------------------------ selectors


def random_value(labels: Sequence[bool]) -> float:
    """Expected resolved rate of a uniform pick: the fraction resolved."""
    return sum(bool(x) for x in labels) / len(labels)


def oracle_value(labels: Sequence[bool]) -> float:
    """1.0 when some candidate resolves, else 0.0."""
    return 1.0 if any(labels) else 0.0


def majority_value(classes: Sequence[str], labels: Sequence[bool]) -> float:
    """Expected resolved rate of a member of the largest equivalence class, ties between
    classes of the same size averaged (a uniform pick among them, then among members)."""
    sizes = Counter(classes)
    top = max(sizes.values())
    tied = [c for c, n in sizes.items() if n == top]
    rates = [
        sum(bool(lab) for cls, lab in zip(classes, labels, strict=True) if cls == c) / top
        for c in tied
    ]
    return sum(rates) / len(rates)


@dataclass
class VerifierPick:
    """The verifier's choice in one group."""

    value: float  # 1.0 / 0.0 for the pick (the random expectation on a fallback)
    tie_avg: float  # a uniform pick among the top-scored candidates
    tied: bool  # several candidates share the top score
    left_out: int  # candidates whose scoring failed
    fallback: bool  # no candidate scored: the random expectation


def verifier_value(
    scores: Sequence[float | None], labels: Sequence[bool], classes: Sequence[str]
) -> VerifierPick:
    """The verifier's pick: highest score among the scored candidates (None: failed, left
    out), ties by :func:`~sweworld.reward.metrics.select_best` (larger class, then earlier
    position)."""
    from sweworld.reward.metrics import select_best

    kept = [i for i, s in enumerate(scores) if s is not None]
    left_out = len(scores) - len(kept)
    if not kept:
        rnd = random_value(labels)
        return VerifierPick(rnd, rnd, False, left_out, True)
    cands = [(float(scores[i]), bool(labels[i]), classes[i]) for i in kept]  # type: ignore[arg-type]
    best = select_best(cands)
    top = max(c[0] for c in cands)
    tied = [c[1] for c in cands if c[0] == top]
    return VerifierPick(
        value=float(cands[best][1]),
        tie_avg=sum(tied) / len(tied),
        tied=len(tied) > 1,
        left_out=left_out,
        fallback=False,
    )


# ------------------------------------------------------------------------------ figures


@dataclass
class GroupValues:
    """Per selector, group index -> ``(task, repository, value)``, and the verifiers'
    bookkeeping (ties, failed candidates left out, fallbacks, tie-averaged values, and
    the values with a group that holds a failed candidate given the random expectation)."""

    values: dict[str, dict[int, tuple[str, str, float]]] = field(default_factory=dict)
    tie_avg: dict[str, list[float]] = field(default_factory=dict)
    failed_as_random: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, selector: str, group: int, task: str, repo: str, value: float) -> None:
        self.values.setdefault(selector, {})[group] = (task, repo, float(value))


def select_groups(
    groups: Sequence[tuple[str, Sequence[str]]],
    labels: Mapping[str, bool],
    classes: Mapping[str, str],
    repos: Mapping[str, str],
    verifiers: Mapping[str, Mapping[str, float | None]],
) -> GroupValues:
    """Every selector's value on every group. ``verifiers``: name -> candidate id -> score
    (None: the scoring failed; a candidate not in the mapping: not scored yet, so the
    verifier leaves the group out until it is)."""
    out = GroupValues()
    for index, (task, ids) in enumerate(groups):
        labs = [bool(labels[i]) for i in ids]
        cls = [classes[i] for i in ids]
        repo = repos.get(task, "")
        out.add("random", index, task, repo, random_value(labs))
        out.add("majority", index, task, repo, majority_value(cls, labs))
        out.add("oracle", index, task, repo, oracle_value(labs))
        for name, scores in verifiers.items():
            counts = out.counts.setdefault(name, Counter())
            if any(i not in scores for i in ids):
                counts["groups not scored yet"] += 1
                continue
            pick = verifier_value([scores[i] for i in ids], labs, cls)
            out.add(name, index, task, repo, pick.value)
            out.tie_avg.setdefault(name, []).append(pick.tie_avg)
            strict = pick.value if not pick.left_out else random_value(labs)
            out.failed_as_random.setdefault(name, []).append(strict)
            counts["groups"] += 1
            counts["groups with tied top scores"] += int(pick.tied)
            counts["groups with a failed candidate left out"] += int(pick.left_out > 0)
            counts["groups with no scored candidate (random expectation)"] += int(pick.fallback)
    return out


def bootstrap_mean_ci(
    values: Sequence[tuple[str, float]], *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float] | None:
    """95% percentile bootstrap interval of the mean of ``(task, value)`` pairs, resampling
    tasks with replacement (each drawn task brings all its values). None for no value."""
    if not values:
        return None
    sums: dict[str, list[float]] = {}
    for task, value in values:
        entry = sums.setdefault(task, [0.0, 0.0])
        entry[0] += value
        entry[1] += 1
    tasks = [sums[t] for t in sorted(sums)]
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        total = count = 0.0
        for _ in tasks:
            s, n = tasks[rng.randrange(len(tasks))]
            total += s
            count += n
        means.append(total / count)
    lo, hi = np.percentile(means, [2.5, 97.5], method="nearest")
    return float(lo), float(hi)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(values: GroupValues, *, seed: int = 0, resamples: int = 2000) -> dict[str, Any]:
    """Per selector: ``groups``, ``tasks``, ``rate`` with ``ci95``; for verifiers also
    ``tie_avg``, ``failed_as_random`` (a group with a failed candidate counted as a random
    pick), ``gain_over_random`` (on the same groups, paired) with ``gain_ci95``, and
    their counts; ``by_repo``: repository -> selector -> rate and groups."""
    out: dict[str, Any] = {"selectors": {}, "by_repo": {}}
    for selector, by_group in values.values.items():
        rows = list(by_group.values())
        out["selectors"][selector] = {
            "groups": len(rows),
            "tasks": len({t for t, _, _ in rows}),
            "rate": _mean([v for _, _, v in rows]),
            "ci95": bootstrap_mean_ci([(t, v) for t, _, v in rows], seed=seed, resamples=resamples),
        }
        for _, repo, value in rows:
            per = out["by_repo"].setdefault(repo, {}).setdefault(selector, [0.0, 0])
            per[0] += value
            per[1] += 1
    rnd = values.values.get("random", {})
    for name, counts in values.counts.items():
        entry = out["selectors"].setdefault(
            name, {"groups": 0, "tasks": 0, "rate": None, "ci95": None}
        )
        entry["counts"] = dict(counts)
        entry["tie_avg"] = _mean(values.tie_avg.get(name, []))
        entry["failed_as_random"] = _mean(values.failed_as_random.get(name, []))
        # paired with the random expectation on the same groups
        diffs = [(t, v - rnd[g][2]) for g, (t, _, v) in values.values.get(name, {}).items()]
        entry["gain_over_random"] = _mean([d for _, d in diffs])
        entry["gain_ci95"] = bootstrap_mean_ci(diffs, seed=seed, resamples=resamples)
    out["by_repo"] = {
        repo: {sel: {"rate": s / n, "groups": n} for sel, (s, n) in sorted(per.items())}
        for repo, per in sorted(out["by_repo"].items())
    }
    return out


# ------------------------------------------------------------------------------ report


def _ci(value: Any) -> tuple[Any, Any]:
    return (value[0], value[1]) if value else (None, None)


def report_figures(
    summaries: dict[int, dict[str, Any]],
    verifiers: Sequence[str],
    sets: dict[str, Any],
    rows: dict[str, dict[str, Any]],
    plot: str | None,
) -> list[Figure]:
    """The report's tables: N x selector (with intervals and the verifiers' gains), per
    repository, the candidate sets (``sets``: counts from ``sweworld bench tts``), and the
    verifiers' scoring (from the ``rows`` of ``rows.jsonl`` by key)."""
    main_rows = []
    order = [*verifiers, *SELECTOR_BASELINES]
    for n, summary in sorted(summaries.items()):
        for name in order:
            entry = summary["selectors"].get(name)
            if not entry:
                continue
            lo, hi = _ci(entry.get("ci95"))
            glo, ghi = _ci(entry.get("gain_ci95"))
            kind = name if name in SELECTOR_BASELINES else f"verifier: {name}"
            main_rows.append(
                [
                    n,
                    kind,
                    entry["groups"],
                    entry["tasks"],
                    entry["rate"],
                    lo,
                    hi,
                    entry.get("tie_avg"),
                    entry.get("failed_as_random"),
                    entry.get("gain_over_random"),
                    glo,
                    ghi,
                ]
            )
    n_tasks = sets["chosen"]
    few_tasks = (
        f" Only {n_tasks} task(s): an interval resampling so few tasks understates the "
        "uncertainty (it shows the spread of these tasks, not a confidence bound)."
        if n_tasks < 10
        else ""
    )
    figures = [
        figure(
            "Resolved rate of the chosen candidate, N x selector",
            [
                "N",
                "selector",
                "groups",
                "tasks",
                "resolved rate",
                "95% CI low",
                "95% CI high",
                "ties averaged",
                "failure = random pick",
                "gain over random",
                "gain CI low",
                "gain CI high",
            ],
            main_rows,
            "Each group is N candidates of one task; the rate is the mean over groups of the "
            "chosen candidate's real label. random: the expected rate of a uniform pick (the "
            "floor); majority: a member of the largest class of equivalent patches (the "
            "semantic stage's change signature: removed/added code without comments, blank "
            "lines and inner whitespace, hunks whose sides normalise to the same code "
            "dropped, hunk line numbers and file order ignored), tied classes averaged; "
            "oracle: 1 when some candidate resolves (the ceiling). verifier: the highest SWR "
            "score, ties broken by the larger equivalence class, then by the candidate's "
            "position in a seeded order that ignores labels; 'ties averaged' gives tied top "
            "scores a uniform pick instead. Candidates whose scoring failed are left out of "
            "the verifier's choice; since failures need not be independent of the label (a "
            "patch too large for the prompt fails, and is more often a wrong one), 'failure = "
            "random pick' "
            "gives every group holding a failed candidate the random expectation instead. "
            "95% CIs: percentile bootstrap (2,000 resamples) over tasks, a task's groups "
            "together; the gain is paired with random on the same groups." + few_tasks,
            plot=plot,
        )
    ]
    repo_rows = []
    for n, summary in sorted(summaries.items()):
        for repo, per in summary["by_repo"].items():
            groups = max((v["groups"] for v in per.values()), default=0)
            repo_rows.append([repo, n, groups, *[(per.get(s) or {}).get("rate") for s in order]])
    if repo_rows:
        figures.append(
            figure(
                "Per repository",
                ["repository", "N", "groups", *order],
                repo_rows,
                "Mean resolved rate of each selector's choice over the repository's groups.",
            )
        )
    outcome = sets["outcomes"]
    figures.append(
        figure(
            "Candidate sets",
            ["what", "count"],
            [
                ["records read", sets["records"]],
                ["tasks with both labels (used)", outcome.get("usable", 0)],
                ["tasks: all candidates resolved", outcome.get("all resolved", 0)],
                ["tasks: no candidate resolved", outcome.get("none resolved", 0)],
                ["tasks: one candidate", outcome.get("one candidate", 0)],
                ["tasks: no candidate left", outcome.get("no candidate", 0)],
                ["tasks chosen (--tasks)", sets["chosen"]],
                ["candidates of the chosen tasks", sets["candidates"]],
                ["gold-patch candidates left out", sets["gold_left_out"]],
                *[[f"N={n}: groups", g] for n, g in sets["groups"].items()],
                *[
                    [f"N={n}: tasks with fewer than N candidates", k]
                    for n, k in sets["too_few"].items()
                ],
            ],
            "Only tasks with at least one resolved and one unresolved candidate can tell the "
            "selectors apart; the others are counted here and left out.",
        )
    )
    scoring = []
    for name in verifiers:
        mine = [r for k, r in rows.items() if _name_of_key(k) == name]
        failed = [r for r in mine if r.get("failed")]
        lat = [float(r["latency_s"]) for r in mine if r.get("latency_s") is not None]
        counts: Counter[str] = Counter()
        for summary in summaries.values():
            counts.update((summary["selectors"].get(name) or {}).get("counts") or {})
        scoring.append(
            [
                name,
                len(mine),
                len(failed),
                sum(lat) / len(lat) if lat else None,
                sum(lat),
                counts.get("groups with tied top scores", 0),
                counts.get("groups with a failed candidate left out", 0),
                counts.get("groups with no scored candidate (random expectation)", 0),
                counts.get("groups not scored yet", 0),
            ]
        )
    figures.append(
        figure(
            "Verifier scoring",
            [
                "verifier",
                "candidates scored",
                "failed",
                "mean latency s",
                "scoring s in all",
                "groups tied at top",
                "groups with a failed candidate",
                "groups with none scored",
                "groups not scored yet",
            ],
            scoring,
            "Counts over all N; latencies are per candidate, summed over the runs that "
            "scored them (a resumed run adds only what it scored). A failed candidate (the "
            "pipeline raised or the tests stage erred) keeps its row with the reason; in a "
            "group with no scored candidate the verifier is given the random expectation.",
        )
    )
    return figures


def _name_of_key(key: str) -> str:
    try:
        spec, mode, _ = json.loads(key)
    except (ValueError, TypeError):
        return ""
    return f"{spec} ({mode})"
