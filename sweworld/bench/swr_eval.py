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

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sweworld.bench.output import at_least
from sweworld.bench.sampling import stratified_order, stratified_sample
from sweworld.bench.similarity import percentile
from sweworld.data.schema import SWRRecord

__all__ = [
    "BON_SIZES",
    "add_arguments",
    "best_of_n_table",
    "bon_groups",
    "bon_tasks",
    "candidate_row",
    "classification",
    "exact_stops",
    "floor_scores",
    "gold_files_score",
    "metrics_of",
    "run",
    "sample_candidates",
    "score_records",
    "stage_score",
    "task_of",
    "unit_key",
]

BON_SIZES = (2, 4, 8)
FLOOR_NAMES = ("always resolved", "gold files", "random")


def task_of(record: SWRRecord) -> Any:
    """The record's task (:class:`~sweworld.tasks.schema.Task`); ``ValueError`` when its
    ``task`` column is empty or not a task row."""
    from sweworld.tasks.schema import Task

    if not record.task:
        raise ValueError("no task row")
    try:
        row = json.loads(record.task)
    except ValueError as exc:
        raise ValueError(f"task row is not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise ValueError("task row is not an object")
    return Task.from_row(row)


def _files(patch: str) -> set[str]:
    from sweworld.tasks.patches import files_in_patch

    return set(files_in_patch(patch or ""))


def gold_files_score(candidate_patch: str, gold_patch: str) -> float | None:
    """1.0 when the candidate touches every file the gold patch touches, else 0.0; None
    when the gold patch touches no file (no prediction)."""
    gold = _files(gold_patch)
    if not gold:
        return None
    return 1.0 if gold <= _files(candidate_patch) else 0.0


def _random_score(record_id: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}\x1f{record_id}".encode()).hexdigest()
    return random.Random(int(digest[:16], 16)).random()


def floor_scores(record: SWRRecord, gold_patch: str, seed: int = 0) -> dict[str, float | None]:
    """The floors' scores for one candidate (:data:`FLOOR_NAMES`); the random one depends
    only on the seed and the record id."""
    return {
        "always resolved": 1.0,
        "gold files": gold_files_score(record.patch, gold_patch),
        "random": _random_score(record.id, seed),
    }


def sample_candidates(
    records: Sequence[SWRRecord], limit: int | None, seed: int = 0
) -> list[SWRRecord]:
    """A seeded sample balanced by label, then spread over repositories."""
    return stratified_sample(
        records, lambda r: (bool(r.resolved), r.repo), limit, seed=seed, ident=lambda r: r.id
    )


def bon_tasks(
    records: Sequence[SWRRecord], n_tasks: int | None, seed: int = 0
) -> dict[str, list[SWRRecord]]:
    """Up to ``n_tasks`` tasks with at least two candidates (distinct patches), those whose
    candidates have both labels first, each spread over repositories by a seeded order:
    task id -> its candidates."""
    by_task: dict[str, list[SWRRecord]] = {}
    for record in records:
        by_task.setdefault(record.instance_id, []).append(record)
    several = {
        task: cands
        for task, cands in by_task.items()
        if len(cands) >= 2 and len({c.patch for c in cands}) >= 2
    }

    def mixed(task: str) -> bool:
        return len({bool(c.resolved) for c in several[task]}) == 2

    order = [
        task
        for first in (True, False)
        for task in stratified_order(
            [t for t in several if mixed(t) == first],
            lambda t: (several[t][0].repo,),
            seed=seed,
            ident=lambda t: t,
        )
    ]
    chosen = order if n_tasks is None else order[: max(n_tasks, 0)]
    return {task: several[task] for task in chosen}


def candidate_row(record: SWRRecord, result: Any) -> dict[str, Any]:
    """What is kept of one scored candidate (``result``: a ``RewardResult``)."""
    tests = result.stages.get("tests")
    tests_p = None
    if tests is not None and tests.verdict in ("pass", "fail") and tests.score is not None:
        tests_p = float(tests.score)
    stages = {
        name: {"verdict": stage.verdict, "score": stage.score}
        for name, stage in result.stages.items()
    }
    return {
        "id": record.id,
        "instance_id": record.instance_id,
        "repo": record.repo,
        "label": bool(record.resolved),
        "candidate_kind": record.candidate_kind,
        "score": float(result.score),
        "tests_p": tests_p,
        "status": result.status,
        "stopped_by": result.info.get("short_circuit"),
        "signature": result.info.get("signature"),
        "scope": result.info.get("scope"),
        "latency_s": result.info.get("latency_s"),
        "stages": stages,
    }


def stage_score(row: dict[str, Any], stage: str) -> float | None:
    """One stage as a classifier of one candidate: the tests stage's probability when it
    gave one; an exact stage's verdict as 1.0 (pass) or 0.0 (fail); None when the stage did
    not run (an earlier stage stopped the candidate), skipped or failed itself."""
    entry = (row.get("stages") or {}).get(stage)
    if not entry or entry.get("verdict") not in ("pass", "fail"):
        return None
    if entry.get("score") is not None and stage == "tests":
        return float(entry["score"])
    return 1.0 if entry["verdict"] == "pass" else 0.0


def metrics_of(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """:func:`~sweworld.reward.metrics.binary_metrics` of ``row[key]`` against
    ``row["label"]`` over the rows where it is not None, with ``no_prediction`` (the
    rest)."""
    from sweworld.reward.metrics import binary_metrics

    pairs = [(r["label"], r[key]) for r in rows if r.get(key) is not None]
    out = binary_metrics([p[0] for p in pairs], [p[1] for p in pairs])
    out["no_prediction"] = len(rows) - len(pairs)
    return out


def exact_stops(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per exact stage: how many candidates it stopped and how many of those resolved."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        stage = row.get("stopped_by")
        if stage:
            entry = out.setdefault(stage, {"stopped": 0, "really_resolved": 0})
            entry["stopped"] += 1
            entry["really_resolved"] += int(row["label"])
    return out


def classification(rows: Sequence[dict[str, Any]], keys: Iterable[str]) -> dict[str, Any]:
    """``overall`` and ``by_repo`` metrics of each score ``key`` of the rows."""
    keys = list(keys)
    repos: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        repos.setdefault(row["repo"], []).append(row)
    return {
        "overall": {k: metrics_of(rows, k) for k in keys},
        "by_repo": {
            repo: {k: metrics_of(rs, k) for k in keys} for repo, rs in sorted(repos.items())
        },
    }


def bon_groups(
    tasks: dict[str, Sequence[str]], n: int, *, seed: int = 0, draws: int = 5
) -> list[tuple[str, list[str]]]:
    """Subsets of N candidate ids per task (``tasks``: task -> candidate ids): for a task
    with exactly N candidates the one subset, with more up to ``draws`` distinct seeded
    subsets; tasks with fewer than N are left out. Within a subset the candidates are in a
    seeded order that ignores labels (a scorer's ties, broken by position, favour no
    label). Deterministic for a seed."""
    import itertools
    import math

    def position(cid: str) -> str:  # label-independent order: ties never favour a label
        return hashlib.sha256(f"{seed}\x1f{cid}".encode()).hexdigest()

    out: list[tuple[str, list[str]]] = []
    for task in sorted(tasks):
        ids = sorted(tasks[task], key=position)
        if len(ids) < n:
            continue
        if math.comb(len(ids), n) <= draws:
            out += [(task, list(c)) for c in itertools.combinations(ids, n)]
            continue
        digest = hashlib.sha256(f"{seed}\x1f{task}\x1f{n}".encode()).hexdigest()
        rng = random.Random(int(digest[:16], 16))
        chosen: set[tuple[str, ...]] = set()
        while len(chosen) < draws:
            chosen.add(tuple(sorted(rng.sample(ids, n), key=position)))
        out += [(task, list(c)) for c in sorted(chosen)]
    return out


def best_of_n_table(
    groups: Sequence[tuple[str, list[str]]],
    scores: dict[str, float | None],
    labels: dict[str, bool],
    classes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`~sweworld.reward.metrics.best_of_n_metrics` over the subsets (a subset with
    a candidate that has no score is left out and counted in ``unscored_groups``)."""
    from sweworld.reward.metrics import best_of_n_metrics

    rows = []
    unscored = 0
    for _, ids in groups:
        if any(scores.get(i) is None for i in ids):
            unscored += 1
            continue
        if classes is not None:
            rows.append([(scores[i], labels[i], classes.get(i) or i) for i in ids])
        else:
            rows.append([(scores[i], labels[i]) for i in ids])
    out = best_of_n_metrics(rows)
    out["unscored_groups"] = unscored
    return out


def latency(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p95 / total seconds of the scored candidates."""
    values = [float(r["latency_s"]) for r in rows if r.get("latency_s") is not None]
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_s": percentile(values, 50),
        "p95_s": percentile(values, 95),
        "total_s": sum(values),
    }


def score_records(
    model: Any,
    records: Sequence[tuple[SWRRecord, Any]],
    *,
    base_dir: bool,
    on_row: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows of :func:`candidate_row` for ``(record, task)`` pairs scored by ``model`` (a
    ``RewardModel``)."""
    rows = []
    for i, (record, task) in enumerate(records):
        result = model.score(task, record.patch, base_dir=True if base_dir else None)
        row = candidate_row(record, result)
        rows.append(row)
        if on_row is not None:
            on_row(i, row)
    return rows


# ------------------------------------------------------------------------------ command line

TITLE = "SWR against real labels (sweworld bench swr)"


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench swr`` (and ``benchmarks/heldout_swr.py``)."""
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
        model = RewardModel(config)
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
        print(f"sweworld bench swr: {exc}")
        return 2
    if not records:
        print(f"sweworld bench swr: no SWR records in the {args.split} split of {args.data}")
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
        print(f"sweworld bench swr: {exc}")
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
        print("sweworld bench swr: no candidate left to score (see skipped in report.json)")
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
