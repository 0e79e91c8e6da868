"""SWR on held-out examples: each reward model's P(resolved) against the real labels.

For the test split of SWR datasets (repositories never trained on): a label-balanced seeded
sample (stratified by label, then repository) and, for best-of-N, every candidate of a
seeded choice of tasks with several labelled candidates (tasks with both labels first). Each
candidate is scored once per model and mode by :class:`~sweworld.reward.model.RewardModel`
(its public API, all configured stages; whole files when the repository's checkout can be
built, the patches' hunks otherwise, as in production). Kept per candidate: the combined
score (``RewardResult.score``), the tests stage's own probability (None when an exact stage
stopped the candidate first or the stage gave no evidence), the stage that stopped it, the
status and the latency.

Figures (:mod:`sweworld.reward.metrics`): accuracy, precision, recall, F1, balanced
accuracy, ROC AUC, ECE of the combined score and of the tests stage alone, overall and per
repository; what the exact stages stopped and how many of those were really resolved.
Floors on the same candidates: always resolved, the gold-files heuristic (the candidate
touches every file the gold patch touches; it reads the gold patch, so it is an oracle-mode
floor) and a seeded random score. Best-of-N for N = 2, 4, 8: for each task with at least N
candidates, seeded random subsets of N; the selected candidate's real resolve rate
(:func:`~sweworld.reward.metrics.best_of_n_metrics`, ties averaged) vs random choice vs the
oracle, for each model and floor. Per stage: each stage of the pipeline as a classifier of
its own (:func:`stage_score`), from the stage verdicts kept per candidate.

Command line: ``sweworld bench swr --data D --out R`` (:func:`add_arguments`, :func:`run`);
tables and plots: :mod:`sweworld.bench.swr_figures`.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sweworld.argtypes import at_least
from sweworld.bench.swr_scoring import (  # bon_groups, candidate_row, task_of: read here by tts
    BON_SIZES,
    bon_groups,
    bon_tasks,
    candidate_row,
    sample_candidates,
    task_of,
)
from sweworld.data.schema import SWRRecord

__all__ = [
    "TITLE",
    "add_arguments",
    "bon_groups",
    "candidate_row",
    "run",
    "task_of",
    "unit_key",
    "usable_pairs",
]


TITLE = "SWR against real labels (sweworld bench swr)"


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench swr`` ."""
    parser.add_argument("--data", nargs="+", required=True, help="dataset folders")
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")
    parser.add_argument(
        "--models",
        default="verdict,embedded",
        help="comma-separated SWR scorers: verdict (the learned verdict, the default SWR) or "
        "LM specs through the model stage (embedded:base, embedded, openai:URL#name, "
        "replay:FILE, ...)",
    )
    parser.add_argument("--modes", default="oracle,blind")
    parser.add_argument(
        "--limit",
        type=at_least(0),
        default=40,
        help="label-balanced candidates to classify (0: all)",
    )
    parser.add_argument(
        "--bon-tasks",
        type=at_least(0),
        default=8,
        help="tasks for best-of-N (all their candidates)",
    )
    parser.add_argument("--bon-draws", type=at_least(1), default=5, help="subsets of N per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stages", default="syntax,typecheck,semantic,tests")
    parser.add_argument("--samples", type=at_least(1), default=1, help="reports per candidate")
    parser.add_argument(
        "--calibration", default=None, help="calibration file, or 'auto' (default: the prior)"
    )
    parser.add_argument(
        "--hunks-only",
        action="store_true",
        help="never build the base checkout (default: whole files when the repository's "
        "source is found, e.g. in $SWEWORLD_REPO_CACHE; hunks otherwise)",
    )
    parser.add_argument("--split", default="test", help="split to evaluate (test: held out)")
    parser.add_argument("--partial-every", type=at_least(1), default=4, help="rows between reports")


def unit_key(spec: str, mode: str, record_id: str) -> str:
    """The key of one unit of work in ``rows.jsonl``."""
    return f"{spec}\x1f{mode}\x1f{record_id}"


def usable_pairs(records: Sequence[SWRRecord]) -> tuple[list[tuple[SWRRecord, Any]], Counter]:
    """``(record, task)`` for the records whose task row reads back; the rest by reason."""
    kept, left = [], Counter()
    for record in records:
        try:
            kept.append((record, task_of(record)))
        except (ValueError, TypeError, KeyError) as exc:
            left[f"unusable task row: {str(exc).splitlines()[0][:80]}"] += 1
    return kept, left


def _score_all(
    out: Any, args: Any, spec: str, mode: str, pairs: Sequence[tuple[SWRRecord, Any]],
    report: Callable[..., None],
) -> None:  # fmt: skip
    from sweworld.reward.model import RewardModel, SWRConfig

    done = out.done()  # one copy, not one per pair
    todo = [(r, t) for r, t in pairs if unit_key(spec, mode, r.id) not in done]
    if not todo:
        return
    stages = tuple(s for s in args.stages.split(",") if s)
    # ``verdict`` measures the learned verdict (the default); any other spec is a language
    # model measured through the model stage (no verdict)
    learned = spec == "verdict"
    config = SWRConfig(mode=mode, stages=stages, model="embedded" if learned else spec,
                       samples=args.samples, calibration=args.calibration,
                       verdict="default" if learned else None)  # fmt: skip
    try:
        from sweworld.world import swr_lm_from_spec

        lm = swr_lm_from_spec(config.model) if "tests" in stages else None
        model = RewardModel(config, lm=lm, close_lm=True)
    except Exception as exc:  # a model that does not load: said, the others still run
        out.skip(f"{spec} {mode}: could not load ({type(exc).__name__})", len(todo))
        print(f"{spec} {mode}: could not load: {type(exc).__name__}: {exc}")
        return
    with model:
        for i, (record, task) in enumerate(out.progress(todo, len(todo), f"swr {spec} {mode}"), 1):
            try:
                result = model.score(task, record.patch, base_dir=None if args.hunks_only else True)
            except Exception as exc:  # an engine that dies: counted, finished rows kept
                out.skip(f"{spec} {mode}: scoring failed ({type(exc).__name__})")
                continue
            row = candidate_row(record, result)
            row.update(spec=spec, mode=mode)
            out.add_row(unit_key(spec, mode, record.id), row)
            report(final=False, every=i)


def run(args: Any) -> int:
    """``sweworld bench swr``: score the label-balanced sample and the best-of-N tasks'
    candidates with every model in every mode, rows resumable in ``--out``, report and
    plots written as rows come; 0 on success, 2 for bad arguments or data."""
    from sweworld.bench.output import BenchOutput, ResumeMismatch
    from sweworld.bench.records import DataError, load_records
    from sweworld.bench.swr_figures import DESCRIPTION, Plan, write_report
    from sweworld.reward.stages.simulated_tests import clear_shared_lms

    modes = [m for m in args.modes.split(",") if m]
    specs = [s for s in args.models.split(",") if s]
    if any(m not in ("oracle", "blind") for m in modes) or not modes or not specs:
        print(f"--modes takes oracle and/or blind (got {args.modes!r}); --models one spec or more")
        return 2
    try:
        records, counts = load_records(args.data, "swr", args.split)
    except DataError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(
            f"sweworld: error: no SWR records in the {args.split} split of {args.data}",
            file=sys.stderr,
        )
        return 2
    pairs, unusable = usable_pairs(records)
    sample = sample_candidates([r for r, _ in pairs], args.limit or None, args.seed)
    bon = bon_tasks([r for r, _ in pairs], args.bon_tasks, args.seed)
    sample_ids = {r.id for r in sample}
    wanted = sample_ids | {r.id for cands in bon.values() for r in cands}
    to_score = [(r, t) for r, t in pairs if r.id in wanted]
    candidates_of = {task: [r.id for r in cands] for task, cands in bon.items()}
    groups = {
        n: bon_groups(candidates_of, n, seed=args.seed, draws=args.bon_draws) for n in BON_SIZES
    }
    plan = Plan(specs, modes, to_score, sample_ids, {n: g for n, g in groups.items() if g},
                args.seed)  # fmt: skip
    settings = {"models": specs, "modes": modes, "limit": args.limit, "seed": args.seed,
                "bon_tasks": args.bon_tasks, "bon_draws": args.bon_draws,
                "stages": args.stages, "samples": args.samples, "calibration": args.calibration,
                "hunks_only": args.hunks_only, "split": args.split}  # fmt: skip
    try:
        out = BenchOutput(args.out, "swr", title=TITLE, description=DESCRIPTION,
                          settings=settings, data=args.data, model=", ".join(specs),
                          fresh=args.fresh)  # fmt: skip
    except ResumeMismatch as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    for reason, n in {**counts.get("bad_rows", {}), **unusable}.items():
        out.skip(reason, n)
    out.set("data", {**counts, "split": args.split, "records": len(records),
                     "resolved": dict(Counter(str(r.resolved) for r in records)),
                     "label_source": dict(Counter(r.label_source for r in records))})  # fmt: skip
    out.set("sample", {"n": len(sample), "resolved": sum(r.resolved for r in sample),
                       "by_repo": dict(Counter(r.repo for r in sample)),
                       "bon_tasks": len(bon),
                       "bon_groups": {str(n): len(g) for n, g in plan.groups.items()},
                       "scored_per_model_and_mode": len(to_score)})  # fmt: skip
    print(f"{len(records)} {args.split} SWR records; sample of {len(sample)} "
          f"({sum(r.resolved for r in sample)} resolved); best-of-N on {len(bon)} tasks; "
          f"{len(to_score)} to score per model and mode; {len(out.done())} done")  # fmt: skip
    if not to_score:
        print(
            "sweworld: error: no candidate left to score (see skipped in report.json)",
            file=sys.stderr,
        )
        out.write([], {}, final=True)
        return 2

    def report(final: bool = True, every: int = 0) -> None:
        if not final and every % max(args.partial_every, 1):
            return
        write_report(out, list(out.done().values()), plan, final=final)

    report(final=False)
    for spec in specs:
        for mode in modes:
            _score_all(out, args, spec, mode, to_score, report)
            report(final=False)
        clear_shared_lms()
    report(final=True)
    print(f"report: {out.dir / 'report.md'}")
    return 0
