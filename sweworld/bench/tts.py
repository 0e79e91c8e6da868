"""Test-time scaling: for tasks with several labelled candidates, the resolved rate of the
candidate the SWR verifier picks among N, against a random pick, the majority of
equivalence classes and the oracle, at N = 2, 4, 8.

Data: the ``--split`` (default ``test``: repositories never trained on) of SWR datasets,
grouped by task. A task counts when, after the exclusions, it has at least two candidates
with both labels; the others are counted by reason (one candidate, all resolved, none
resolved, no candidate). By default candidates that *are* the gold patch (kind ``gold``, or
the same normalised change as the task's gold patch) are left out: the oracle-mode verifier
reads the gold patch, so keeping them would make its choice trivial (``--include-gold``
keeps them, e.g. for ``--modes blind``). Groups of N per task by
:func:`sweworld.bench.swr_eval.bon_groups` (every subset when there are at most
``--draws`` of them, else ``--draws`` seeded ones; tasks with fewer than N candidates are
counted and left out of that N).

Each candidate is scored once per model and mode (:class:`~sweworld.reward.model.RewardModel`,
as in production), one row per ``(model, mode, candidate)`` in ``OUT/rows.jsonl``: a rerun
scores only what is missing, and the selection is computed from the rows
(:mod:`sweworld.bench.tts_selection`). A candidate whose scoring fails keeps a row with the
reason and no score; the verifier chooses among the group's other candidates.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sweworld.argtypes import at_least
from sweworld.bench.output import BenchOutput, ResumeMismatch
from sweworld.bench.tts_selection import SELECTOR_BASELINES

__all__ = [
    "add_arguments",
    "candidate_sets",
    "row_key",
    "run",
    "score_row",
    "scoring_settings",
    "verifier_scores",
]

TITLE = "Best of N by the SWR verifier (sweworld bench tts)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench tts``."""
    parser.add_argument("--data", nargs="+", required=True, help="SWR dataset folders")
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--split", default="test", help="split to use (test: held out)")
    parser.add_argument(
        "--models",
        default="verdict",
        help="comma-separated SWR scorers: verdict (the learned verdict, the default SWR) or "
        "LM specs through the model stage (embedded, embedded:base, replay:FILE, "
        "openai:URL#name, ...)",
    )
    parser.add_argument("--modes", default="oracle", help="oracle and/or blind, comma-separated")
    parser.add_argument("--sizes", default="2,4,8", help="the Ns, comma-separated")
    parser.add_argument(
        "--max-tasks", type=at_least(0), default=0, help="at most this many tasks (0: all)"
    )
    parser.add_argument(
        "--draws", type=at_least(1), default=5, help="subsets of N per task, at most"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsets drawn")
    parser.add_argument(
        "--include-gold",
        action="store_true",
        help="keep candidates that are the gold patch (left out by default: see the help)",
    )
    parser.add_argument(
        "--stages", default="syntax,typecheck,semantic,tests",
        help="the verifier's stages, comma-separated",
    )  # fmt: skip
    parser.add_argument("--samples", type=at_least(1), default=1, help="reports per candidate")
    parser.add_argument(
        "--calibration", default="auto", help="calibration file, 'auto' or 'none' (the prior)"
    )
    parser.add_argument(
        "--hunks-only",
        action="store_true",
        help="never build the base checkout (default: whole files when the repository's "
        "source is found, e.g. in $SWEWORLD_REPO_CACHE)",
    )
    parser.add_argument("--retry-failed", action="store_true", help="rescore failed rows")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")


# ------------------------------------------------------------------------------ data


def _is_gold(record: Any, gold_class: str | None) -> bool:
    from sweworld.bench.tts_selection import patch_class

    if record.candidate_kind == "gold":
        return True
    return gold_class is not None and patch_class(record.patch) == gold_class


def candidate_sets(
    records: Sequence[Any], *, include_gold: bool = False
) -> tuple[dict[str, list[tuple[Any, Any]]], Counter[str], dict[str, int]]:
    """Tasks with at least two candidates of both labels: task -> ``(record, task)`` pairs
    (records sorted by id); counts of what was left out, by reason; and how many tasks
    had each outcome (``usable``, ``one candidate``, ``all resolved``, ``none resolved``,
    ``no candidate``)."""
    from sweworld.bench.swr_eval import task_of
    from sweworld.bench.tts_selection import patch_class

    skipped: Counter[str] = Counter()
    by_task: dict[str, list[tuple[Any, Any]]] = {}
    gold_classes: dict[str, str | None] = {}
    for record in sorted(records, key=lambda r: str(getattr(r, "id", ""))):
        if not getattr(record, "instance_id", ""):
            skipped["candidate: no instance_id"] += 1
            continue
        if not isinstance(getattr(record, "resolved", None), bool):
            skipped["candidate: no label"] += 1
            continue
        try:
            task = task_of(record)
        except (ValueError, TypeError, KeyError) as exc:
            skipped[f"candidate: unusable task row ({str(exc).splitlines()[0][:80]})"] += 1
            continue
        cands = by_task.setdefault(record.instance_id, [])
        if not include_gold:
            if record.instance_id not in gold_classes:
                gold = getattr(task, "patch", "") or ""
                gold_classes[record.instance_id] = patch_class(gold) if gold else None
            if _is_gold(record, gold_classes[record.instance_id]):
                skipped["candidate: the gold patch (the oracle verifier reads it)"] += 1
                continue
        cands.append((record, task))
    outcomes: Counter[str] = Counter()
    usable: dict[str, list[tuple[Any, Any]]] = {}
    for instance, cands in sorted(by_task.items()):
        resolved = sum(bool(r.resolved) for r, _ in cands)
        if not cands:
            reason = "no candidate"
        elif len(cands) == 1:
            reason = "one candidate"
        elif resolved == len(cands):
            reason = "all resolved"
        elif resolved == 0:
            reason = "none resolved"
        else:
            usable[instance] = cands
            outcomes["usable"] += 1
            continue
        outcomes[reason] += 1
        skipped[f"task: {reason}"] += 1
    return usable, skipped, dict(outcomes)


def _load(out: BenchOutput, folders: Sequence[str], split: str) -> list[Any]:
    from sweworld.bench.records import load_records

    records: list[Any] = []
    seen: set[str] = set()
    for folder in folders:
        try:
            found, _ = load_records([folder], "swr", split)
        except Exception as exc:  # an unknown format or a missing folder: said, not fatal
            out.skip(f"dataset unreadable: {folder}: {type(exc).__name__}")
            continue
        for record in found:
            if record.id not in seen:
                seen.add(record.id)
                records.append(record)
    return records


# ------------------------------------------------------------------------------ scoring


def _failure(result: Any) -> str | None:
    info = result.info or {}
    if info.get("error"):
        return f"pipeline: {info['error']}"[:300]
    tests_error = (info.get("stage_errors") or {}).get("tests")
    if tests_error:
        return f"tests stage: {tests_error}"[:300]
    return None


def score_row(
    model: Any, record: Any, task: Any, *, spec: str, mode: str, hunks_only: bool
) -> dict[str, Any]:
    """One candidate scored by ``model`` (a ``RewardModel``): the row kept in
    ``rows.jsonl``. A failure (the pipeline raised, or the tests stage erred) gives
    ``score: None`` and the reason in ``failed``; it never raises."""
    from sweworld.bench.swr_eval import candidate_row

    base = {"model": spec, "mode": mode, "id": record.id, "label": bool(record.resolved)}
    started = time.perf_counter()
    try:
        result = model.score(task, record.patch, base_dir=None if hunks_only else True)
    except Exception as exc:  # the reward model never should; a row says it if it does
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        latency = round(time.perf_counter() - started, 3)
        return {**base, "score": None, "failed": reason, "latency_s": latency}
    row = {**candidate_row(record, result), **base}
    row["failed"] = _failure(result)
    if row["failed"]:
        row["score"] = None
    return row


def verifier_scores(
    done: dict[str, dict[str, Any]], specs: Sequence[str], modes: Sequence[str], ids: set[str]
) -> dict[str, dict[str, float | None]]:
    """Per verifier (``"spec (mode)"``), candidate id -> score from the rows (None when
    the row records a failure)."""
    out: dict[str, dict[str, float | None]] = {f"{s} ({m})": {} for s in specs for m in modes}
    for key, row in done.items():
        try:
            spec, mode, cid = json.loads(key)
        except (ValueError, TypeError):
            continue
        name = f"{spec} ({mode})"
        if name in out and cid in ids:
            out[name][cid] = row.get("score")
    return out


def _parse_list(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def _report(
    out: BenchOutput, groups: dict[int, list], meta: dict[str, Any], *, final: bool
) -> dict[int, dict[str, Any]]:
    from sweworld.bench.plots import best_of_n_curve
    from sweworld.bench.tts_selection import report_figures, select_groups, summarize

    done = out.done()
    scores = verifier_scores(done, meta["specs"], meta["modes"], set(meta["labels"]))
    summaries = {}
    for n, gs in groups.items():
        values = select_groups(gs, meta["labels"], meta["classes"], meta["repos"], scores)
        summaries[n] = summarize(values, seed=meta["seed"])
    plot = None
    if final and summaries:
        curves = {
            name: {n: (s["selectors"].get(name) or {}).get("rate") for n, s in summaries.items()}
            for name in [*scores, *SELECTOR_BASELINES]
        }
        path = best_of_n_curve(
            curves, out.plot_path("best_of_n.png"), f"best of N ({meta['split']} split)"
        )
        plot = path.name if path else None
    figures = report_figures(summaries, list(scores), meta["sets"], done, plot)
    out.write(figures, {str(n): s for n, s in summaries.items()}, final=final)
    return summaries


def _description(args: argparse.Namespace) -> str:
    return (
        f"For the tasks of the {args.split!r} split (test: repositories never trained on) "
        "with several really-labelled candidate patches (at least one "
        "resolved and one not), N candidates at a time: the real resolved rate of the "
        "candidate the SWR verifier scores highest, beside a random pick (the floor), the "
        "majority of equivalent patches and the oracle (the ceiling). "
        + (
            "Candidates that are the gold patch were kept (--include-gold): fair in blind "
            "mode only, the oracle-mode verifier reads the gold patch. "
            if args.include_gold
            else "Candidates that are the gold patch (kind gold, or the same normalised "
            "change) were left out: the oracle-mode verifier reads the gold patch. "
        )
        + "Caveat: few tasks have mixed labels, so the intervals are wide; a task "
        "contributes several overlapping groups."
    )


def scoring_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options that decide a candidate's score (the rows' fingerprint): rows scored
    with other ones are refused on resume."""
    calibration = None if str(args.calibration).lower() == "none" else args.calibration
    return {
        "stages": _parse_list(args.stages),
        "samples": args.samples,
        "calibration": calibration,
        "hunks_only": bool(args.hunks_only),
    }


def row_key(spec: str, mode: str, candidate_id: str) -> str:
    """The key of a candidate's row in ``rows.jsonl``."""
    return json.dumps([spec, mode, candidate_id])


def run(args: argparse.Namespace) -> int:
    """Score the chosen tasks' candidates with every verifier and write the report; 0 on
    success, 1 when there was nothing to compare, 2 on bad options."""
    from sweworld.bench.sampling import stratified_order
    from sweworld.bench.swr_eval import bon_groups
    from sweworld.bench.tts_selection import patch_class

    specs, modes = _parse_list(args.models), _parse_list(args.modes)
    try:
        sizes = sorted({int(x) for x in _parse_list(args.sizes)})
    except ValueError:
        sizes = []
    if not specs or not modes or any(m not in ("oracle", "blind") for m in modes):
        print(f"--modes takes oracle and/or blind (got {args.modes!r}); --models one spec or more")
        return 2
    if not sizes or min(sizes) < 2:
        print(f"--sizes takes integers of at least 2 (got {args.sizes!r})")
        return 2
    stages = tuple(_parse_list(args.stages))
    calibration = None if str(args.calibration).lower() == "none" else args.calibration
    try:
        out = BenchOutput(
            args.out,
            "tts",
            title=TITLE,
            description=_description(args),
            settings=scoring_settings(args),
            data=list(args.data),
            model=", ".join(f"{s} ({m})" for s in specs for m in modes),
            fresh=args.fresh,
        )
    except ResumeMismatch as exc:
        print(exc)
        return 2
    records = _load(out, args.data, args.split)
    usable, skipped, outcomes = candidate_sets(records, include_gold=args.include_gold)
    for reason, count in skipped.items():
        out.skip(reason, count)
    order = stratified_order(
        sorted(usable), lambda t: (usable[t][0][0].repo,), seed=args.seed, ident=lambda t: t
    )
    chosen = order[: args.max_tasks] if args.max_tasks and args.max_tasks > 0 else order
    tasks = {t: usable[t] for t in chosen}
    ids_of = {t: [r.id for r, _ in cands] for t, cands in tasks.items()}
    groups = {n: bon_groups(ids_of, n, seed=args.seed, draws=args.draws) for n in sizes}
    too_few = {n: sum(1 for ids in ids_of.values() if len(ids) < n) for n in sizes}
    for n, k in too_few.items():
        if k:
            out.skip(f"N={n}: tasks with fewer than {n} candidates", k)
    wanted = {cid for gs in groups.values() for _, ids in gs for cid in ids}
    pairs = [(r, t) for cands in tasks.values() for r, t in cands if r.id in wanted]
    meta = {
        "specs": specs,
        "modes": modes,
        "seed": args.seed,
        "split": args.split,
        "labels": {r.id: bool(r.resolved) for r, _ in pairs},
        "classes": {r.id: patch_class(r.patch) for r, _ in pairs},
        "repos": {t: cands[0][0].repo for t, cands in tasks.items()},
        "sets": {
            "records": len(records),
            "outcomes": outcomes,
            "chosen": len(tasks),
            "candidates": sum(len(c) for c in tasks.values()),
            "gold_left_out": sum(v for k, v in skipped.items() if "gold patch" in k),
            "groups": {n: len(g) for n, g in groups.items()},
            "too_few": too_few,
        },
    }
    out.set(
        "selection",
        {
            "split": args.split,
            "sizes": sizes,
            "tasks": args.max_tasks,
            "draws": args.draws,
            "seed": args.seed,
            "include_gold": bool(args.include_gold),
            "models": specs,
            "modes": modes,
            "tasks_used": sorted(tasks),
        },
    )
    print(
        f"{len(records)} {args.split} SWR records; {outcomes.get('usable', 0)} tasks with both "
        f"labels, {len(tasks)} used; {len(pairs)} candidates to score per model and mode; "
        f"groups {meta['sets']['groups']}"
    )
    if not pairs:
        _report(out, groups, meta, final=True)
        print("nothing to compare: no task with several candidates of both labels")
        return 1
    _score_all(out, args, specs, modes, stages, calibration, pairs, groups, meta)
    summaries = _report(out, groups, meta, final=True)
    for n, summary in sorted(summaries.items()):
        line = ", ".join(
            f"{name} {entry['rate']:.3f}"
            for name, entry in summary["selectors"].items()
            if entry.get("rate") is not None
        )
        print(f"N={n}: {line}")
    print(f"report: {out.dir / 'report.md'}")
    return 0


def _score_all(
    out: BenchOutput,
    args: argparse.Namespace,
    specs: Sequence[str],
    modes: Sequence[str],
    stages: tuple[str, ...],
    calibration: str | None,
    pairs: Sequence[tuple[Any, Any]],
    groups: dict[int, list],
    meta: dict[str, Any],
) -> None:
    """Score every candidate not yet in the rows, model by model and mode by mode."""
    from sweworld.reward.model import RewardModel, SWRConfig
    from sweworld.world import clear_shared_lms

    for spec in specs:
        for mode in modes:
            done = out.done()
            todo = [
                (r, t)
                for r, t in pairs
                if row_key(spec, mode, r.id) not in done
                or (args.retry_failed and done[row_key(spec, mode, r.id)].get("failed"))
            ]
            if not todo:
                continue
            try:
                learned = spec == "verdict"  # the learned verdict; else an LM's model stage
                config = SWRConfig(
                    mode=mode,
                    stages=stages,
                    model="embedded" if learned else spec,
                    samples=args.samples,
                    calibration=calibration,
                    verdict="default" if learned else None,
                )
                from sweworld.world import swr_lm_from_spec

                runs_tests = "tests" in (config.stages or ())
                lm = swr_lm_from_spec(config.model) if runs_tests else None
                model = RewardModel(config, lm=lm, close_lm=True)
            except Exception as exc:  # a model that cannot be made: said, the others run
                out.skip(f"verifier {spec} ({mode}) not loaded: {type(exc).__name__}: {exc}"[:200])
                continue
            with model:
                for record, task in out.progress(todo, total=len(todo), desc=f"{spec} {mode}"):
                    row = score_row(
                        model, record, task, spec=spec, mode=mode, hunks_only=args.hunks_only
                    )
                    out.add_row(row_key(spec, mode, record.id), row)
                    _report(out, groups, meta, final=False)
        clear_shared_lms()
