"""The scoring of ``sweworld bench swr`` (:mod:`sweworld.bench.swr_eval`): floors, samples,
best-of-N groups, per-stage scores and metrics. Read by the command and by its figures
(:mod:`sweworld.bench.swr_figures`); imports neither (the imports point one way).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from typing import Any

from sweworld.bench.sampling import stratified_order, stratified_sample
from sweworld.bench.similarity import percentile
from sweworld.data.schema import SWRRecord

__all__ = [
    "BON_SIZES",
    "FLOOR_NAMES",
    "best_of_n_table",
    "bon_groups",
    "bon_tasks",
    "candidate_row",
    "classification",
    "exact_stops",
    "floor_scores",
    "gold_files_score",
    "latency",
    "metrics_of",
    "sample_candidates",
    "stage_score",
    "task_of",
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


# ------------------------------------------------------------------------------ command line
