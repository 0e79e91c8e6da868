"""``sweworld data import``: agent runs and reports in, SWT and SWR datasets out.

For every item an importer yields (:mod:`sweworld.data.importers`):

* a :class:`~sweworld.data.schema.Trajectory` is replayed in a session on its repository
  (:func:`~sweworld.data.replay.replay_trajectory`) when the repository is in the repo cache
  (``$SWEWORLD_REPO_CACHE`` / ``--repo-cache``), else turned into fallback records
  (:func:`~sweworld.data.replay.fallback_records`, ``state_source="trajectory"``); its report,
  when it has one, labels its submission as an SWR record (``harness-report``, ``agent``);
* an :class:`~sweworld.data.schema.SWRRecord` is stored as it is;
* a :class:`~sweworld.data.importers.Skip` is counted with its reason.

Trajectories are processed in parallel (threads: a replay's work happens in sandbox
processes); every record is written as it is made and each finished trajectory is marked
done, so a second run with the same ``--out`` skips what is finished and writes no duplicate.
At the end the datasets are built (split by repository) and the counts printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweworld.data.importers import Skip, detect_format, get_importer
from sweworld.data.replay import REPLAY_HISTORY
from sweworld.data.schema import (
    DEFAULT_HELDOUT_REPOS,
    SWRRecord,
    SWTRecord,
    Trajectory,
    record_id,
    split_of,
    to_json,
)
from sweworld.data.store import RecordStore, finalize, iter_records

__all__ = [
    "CONTEXT_CHOICES",
    "ImportStats",
    "add_arguments",
    "add_repo_cache",
    "heldout_repos",
    "import_source",
    "in_shard",
    "parse_shard",
    "run",
    "submission_label",
    "trajectory_unit",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweworld data import`` options."""
    parser.add_argument("--source", required=True, help="a file or folder of agent runs")
    parser.add_argument(
        "--format", default="auto", help="auto (detect), mini-swe-agent, swe-agent, r2e-gym, ..."
    )
    parser.add_argument("--out", required=True, help="output folder (resumable)")
    parser.add_argument("--repo-cache", help="folder of repository clones or mirrors")
    parser.add_argument("--workers", type=int, default=2, help="trajectories at once")
    parser.add_argument("--limit", type=int, help="at most this many trajectories")
    parser.add_argument("--instances", nargs="+", help="only these instance ids")
    parser.add_argument(
        "--tasks", help="a task file giving the instances' rows (swe-agent, r2e-gym, swebench)"
    )
    parser.add_argument(
        "--reports", help="harness reports labelling the submissions (swe-agent: file or folder)"
    )
    parser.add_argument(
        "--heldout",
        help="comma-separated repositories for the test split, or 'none' (default: "
        + ",".join(DEFAULT_HELDOUT_REPOS)
        + ")",
    )
    parser.add_argument(
        "--no-replay", action="store_true", help="never replay: fallback records only"
    )
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds per step")
    parser.add_argument("--repos", nargs="+", help="only trajectories of these repositories")
    parser.add_argument(
        "--shard",
        help="K/N: only the trajectories of shard K of N (0-based, by a stable hash of the "
        "trajectory): N imports into N folders use N cores",
    )
    parser.add_argument(
        "--contexts",
        default="both",
        choices=sorted(CONTEXT_CHOICES),
        help="which SWT contexts each record gets (none: state, command and truth only; "
        "several times faster on large repositories)",
    )
    parser.add_argument(
        "--history",
        default=REPLAY_HISTORY,
        help="git history of the replay checkouts: depth:1 (default), depth:N, none, full",
    )
    parser.add_argument(
        "--writers",
        default="real",
        choices=("real", "recorded"),
        help="execution steps whose program may write files (an agent's edit script): real "
        "(run them for real in the replay, with the host's Python and nothing installed, so "
        "that their edits reach the state; checked against the recording) or recorded "
        "(answer them from the recording only, as every other execution step)",
    )
    parser.add_argument(
        "--context-model",
        default="embedded",
        help="whose context budgets the SWT contexts use: embedded (the default model's, "
        "counted with its tokenizer) or default (the full budgets)",
    )


#: ``--contexts`` -> the context modes each SWT record gets
CONTEXT_CHOICES: dict[str, tuple[str, ...]] = {
    "both": ("oracle", "blind"),
    "oracle": ("oracle",),
    "blind": ("blind",),
    "none": (),
}


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``; None for no sharding. ValueError else."""
    if not text:
        return None
    k, sep, n = text.partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit():
        raise ValueError(f"--shard must be K/N, not {text!r}")
    shard, shards = int(k), int(n)
    if not 0 <= shard < shards:
        raise ValueError(f"--shard K/N needs 0 <= K < N, not {text!r}")
    return shard, shards


def in_shard(unit: str, shard: tuple[int, int] | None) -> bool:
    """Whether the unit of work ``unit`` belongs to ``shard`` (a stable hash: the same unit
    falls in the same shard on every run and machine)."""
    if shard is None:
        return True
    return zlib.crc32(unit.encode("utf-8", "surrogatepass")) % shard[1] == shard[0]


def _shard_key(item: Any) -> str:
    """What places an importer's item in a shard: a trajectory's unit, a record's id, a
    skip's unit (so that each is written by exactly one shard)."""
    if isinstance(item, Trajectory):
        return trajectory_unit(item)
    if isinstance(item, Skip):
        return f"skip:{item.unit}"
    return str(getattr(item, "id", "") or repr(item))


def submission_label(trajectory: Trajectory) -> SWRRecord | None:
    """The SWR record of a trajectory's submission labelled by its harness report."""
    report = trajectory.report
    if not report or not isinstance(report.get("resolved"), bool):
        return None
    return SWRRecord(
        id=record_id(trajectory.source, trajectory.instance_id, "agent", trajectory.submission),
        source=trajectory.source,
        instance_id=trajectory.instance_id,
        repo=trajectory.repo,
        patch=trajectory.submission,
        resolved=bool(report["resolved"]),
        base_commit=trajectory.base_commit,
        task=to_json(trajectory.task),
        tests_status=to_json(report.get("tests_status") or {}),
        label_source="harness-report",
        candidate_kind="agent" if trajectory.submission.strip() else "empty",
        meta=to_json(trajectory.meta),
    )


def trajectory_unit(trajectory: Trajectory) -> str:
    """The unit of work (``done`` / resume key) of a trajectory: ``source:instance``, and
    ``#trajectory_id`` when its source holds several runs of one instance."""
    from sweworld.data.replay import trajectory_key

    source, instance, *extra = trajectory_key(trajectory)
    return f"{source}:{instance}" + "".join(f"#{e}" for e in extra)


class ImportStats:
    """Counts of one import run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.fallback_reasons: Counter[str] = Counter()
        self.wall: dict[str, float] = defaultdict(float)

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def fallback(self, reason: str) -> None:
        with self._lock:
            self.fallback_reasons[reason] += 1

    def time(self, key: str, seconds: float) -> None:
        with self._lock:
            self.wall[key] += seconds


def _process(
    trajectory: Trajectory,
    store: RecordStore,
    *,
    manager: Any,
    stats: ImportStats,
    replay: bool,
    step_timeout: float,
    model: str,
    modes: tuple[str, ...] = ("oracle", "blind"),
    history: str = REPLAY_HISTORY,
    writers: Any = None,
) -> None:
    from sweworld.data.replay import fallback_records, replay_trajectory

    unit = trajectory_unit(trajectory)
    started = time.perf_counter()
    result = None
    if replay and manager is not None:
        try:
            result = replay_trajectory(
                trajectory,
                manager,
                step_timeout=step_timeout,
                model=model,
                modes=modes,
                history=history,
                writers=writers,
            )
        except Exception as exc:  # no repository, a commit missing, a bad row: fall back
            reason = _fallback_reason(exc)
            stats.fallback(reason)
            if "no local copy" not in reason:
                store.skip(f"{unit}#replay", f"replay failed, fell back: {reason}")
    if result is None:
        result = fallback_records(trajectory, model=model, modes=modes)
    for rec in result.records:
        store.add(rec)
    for part, reason in result.skipped:
        store.skip(part, reason)
    label = submission_label(trajectory)
    if label is not None:
        store.add(label)
    seconds = time.perf_counter() - started
    stats.add(f"trajectories_{result.state_source}")
    stats.add(f"swt_{result.state_source}", len(result.records))
    stats.add(f"steps_{result.state_source}", result.steps)
    stats.add("steps_consistent", result.steps_consistent)
    stats.add("steps_failed", result.steps_failed)
    stats.add("records_diverged", result.records_diverged)
    stats.add("writer_steps_run", result.writers_run)
    stats.add("writer_steps_verified", result.writers_verified)
    stats.time(result.state_source, seconds)
    store.done(
        unit,
        repo=trajectory.repo,
        state_source=result.state_source,
        swt=len(result.records),
        swr=int(label is not None),
        steps=result.steps,
        steps_consistent=result.steps_consistent,
        records_diverged=result.records_diverged,
        seconds=round(seconds, 3),
    )


def _process_safely(
    trajectory: Trajectory, store: RecordStore, stats: ImportStats, **kw: Any
) -> None:
    """:func:`_process`; an error is counted and skipped, never the end of the import."""
    try:
        _process(trajectory, store, stats=stats, **kw)
    except Exception as exc:
        stats.add("trajectories_failed")
        unit = trajectory_unit(trajectory)
        store.skip(unit, f"import error: {type(exc).__name__}: {str(exc)[:160]}")


def _fallback_reason(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0]
    if "no local copy of repository" in text:
        return "no local copy of the repository"
    return f"{type(exc).__name__}: {text[:160]}"


def import_source(
    source: str | Path,
    out: str | Path,
    *,
    fmt: str = "auto",
    workers: int = 2,
    limit: int | None = None,
    instances: Iterable[str] | None = None,
    heldout: Iterable[str] = DEFAULT_HELDOUT_REPOS,
    replay: bool = True,
    step_timeout: float = 60.0,
    progress: bool = True,
    runtime_root: str | Path | None = None,
    model: str = "embedded",
    options: dict[str, Any] | None = None,
    repos: Iterable[str] | None = None,
    shard: tuple[int, int] | None = None,
    modes: tuple[str, ...] = ("oracle", "blind"),
    history: str = REPLAY_HISTORY,
    writers: str = "real",
) -> dict[str, Any]:
    """Import ``source`` into ``out`` (see the module docstring); returns the summary.
    ``instances`` and ``limit`` (trajectories) apply to every format; ``repos`` keeps the
    trajectories (and records) of those repositories, ``shard`` ``(K, N)`` those of shard K
    (:func:`in_shard`); ``modes`` are the SWT contexts built (none: ``()``), ``history``
    the replay checkouts' git history; ``writers`` (``real`` / ``recorded``) whether the
    replay runs the execution steps that may write files for real
    (:func:`~sweworld.data.replay.writer_executor`); ``options`` are passed to the
    importer's ``read`` (``tasks``, ``reports``, ...)."""
    from tqdm import tqdm

    name = detect_format(source) if fmt == "auto" else fmt
    importer = get_importer(name)
    stats = ImportStats()
    if writers not in ("real", "recorded"):
        raise ValueError(f"writers is real or recorded, not {writers!r}")
    manager = real = None
    if replay:
        from sweworld.data.replay import writer_executor
        from sweworld.sandbox.manager import SessionManager

        manager = SessionManager(runtime_root=Path(runtime_root) if runtime_root else None)
        real = writer_executor(step_timeout) if writers == "real" else None
    wanted = set(instances) if instances else None
    wanted_repos = set(repos) if repos else None
    started = time.perf_counter()
    bar = tqdm(desc=f"import {name}", unit="traj", file=sys.stderr, disable=not progress)
    slots = threading.Semaphore(max(1, workers) * 2)  # bounded work in flight
    futures: list[Future[None]] = []
    try:
        with RecordStore(out) as store, ThreadPoolExecutor(max(1, workers)) as pool:
            n_trajectories = 0
            for item in importer.read(source, instances=wanted, limit=limit, **(options or {})):
                # not every importer filters: the driver does, for all of them
                iid = getattr(item, "instance_id", None)
                if wanted is not None and iid is not None and iid not in wanted:
                    continue
                repo = getattr(item, "repo", None)
                if wanted_repos is not None and repo is not None and repo not in wanted_repos:
                    continue
                if shard is not None and not in_shard(_shard_key(item), shard):
                    continue
                if isinstance(item, Trajectory):
                    if limit is not None and n_trajectories >= limit:
                        break
                    n_trajectories += 1
                if isinstance(item, Skip):
                    if not store.is_done(f"skip:{item.unit}"):
                        store.skip(item.unit, item.reason)
                        store.done(f"skip:{item.unit}")
                    stats.add("skipped_items")
                elif isinstance(item, SWRRecord):
                    stats.add("swr_written" if store.add(item) else "swr_already")
                elif isinstance(item, SWTRecord):  # sweworld's own records, checked
                    stats.add("swt_written" if store.add(item) else "swt_already")
                elif isinstance(item, Trajectory):
                    unit = trajectory_unit(item)
                    if store.is_done(unit):
                        stats.add("trajectories_already_done")
                        bar.update(1)
                        continue
                    slots.acquire()
                    fut = pool.submit(
                        _process_safely,
                        item,
                        store,
                        stats,
                        manager=manager,
                        replay=replay,
                        step_timeout=step_timeout,
                        model=model,
                        modes=modes,
                        history=history,
                        writers=real,
                    )
                    fut.add_done_callback(lambda _f: (slots.release(), bar.update(1)))
                    futures.append(fut)
            for fut in futures:
                fut.result()
    finally:
        bar.close()
        if manager is not None:
            manager.close_all()
        if real is not None:
            real.close()
    wall = time.perf_counter() - started
    extra = {
        "import": {
            "format": name,
            "source": str(source),
            "counts": dict(stats.counts),
            "fallback_reasons": dict(stats.fallback_reasons),
            "seconds": {k: round(v, 2) for k, v in stats.wall.items()},
            "wall_s": round(wall, 2),
        }
    }
    return finalize(out, heldout=tuple(heldout), extra_summary=extra)


def _per_repo(out: str | Path, heldout: Iterable[str]) -> list[tuple[str, ...]]:
    held = tuple(heldout)
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for rec in iter_records(out, "swt"):
        table[rec.repo][f"swt_{rec.state_source}"] += 1
    for rec in iter_records(out, "swr"):
        table[rec.repo]["swr"] += 1
        table[rec.repo]["swr_resolved"] += int(rec.resolved)
    rows = []
    for repo in sorted(table):
        c = table[repo]
        rows.append(
            (
                repo,
                split_of(repo, held),
                str(c["swt_replay"] + c["swt_live"]),
                str(c["swt_trajectory"]),
                str(c["swr"]),
                str(c["swr_resolved"]),
            )
        )
    return rows


def print_report(summary: dict[str, Any], out: str | Path, heldout: Iterable[str]) -> None:
    """Counts per repository, splits and skip reasons, as a plain table on stdout."""
    header = ("repository", "split", "swt_replay", "swt_fallback", "swr", "swr_resolved")
    rows = [header, *_per_repo(out, heldout)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for kind in ("swt", "swr"):
        part = summary.get(kind, {})
        print(f"{kind}: {part.get('total', 0)} records, splits {part.get('splits', {})}")
    imp = summary.get("import", {})
    if imp.get("fallback_reasons"):
        print("fallback reasons:", imp["fallback_reasons"])
    print("import counts:", imp.get("counts", {}), f"wall {imp.get('wall_s', 0)} s")
    skipped = summary.get("skipped", {})
    print(f"skipped: {skipped.get('total', 0)}")
    for reason, n in sorted(skipped.get("by_reason", {}).items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {reason}")
    print(f"datasets written to {out}")


def add_repo_cache(path: str | Path) -> None:
    """Put ``path`` first in ``$SWEWORLD_REPO_CACHE`` (where sessions of this process find
    repositories; the caches already named stay after it)."""
    old = os.environ.get("SWEWORLD_REPO_CACHE", "")
    os.environ["SWEWORLD_REPO_CACHE"] = str(path) + (os.pathsep + old if old else "")


def heldout_repos(text: str | None) -> tuple[str, ...]:
    """The held-out repositories of a ``--heldout`` value (comma-separated; empty or None:
    :data:`DEFAULT_HELDOUT_REPOS`; ``none``: no repository, every record in train)."""
    if not text:
        return DEFAULT_HELDOUT_REPOS
    if text.strip().lower() == "none":
        return ()
    return tuple(r.strip() for r in text.split(",") if r.strip())


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld data import``; 0 when something was imported."""
    if args.repo_cache:
        add_repo_cache(Path(args.repo_cache).expanduser())
    heldout = heldout_repos(args.heldout)
    if args.workers < 1 or not args.step_timeout > 0 or (args.limit is not None and args.limit < 0):
        print(
            "sweworld: error: --workers must be at least 1, --step-timeout positive "
            "and --limit not negative",
            file=sys.stderr,
        )
        return 2
    if not Path(args.source).exists():
        print(f"sweworld: error: {args.source}: no such file or folder", file=sys.stderr)
        return 2
    try:
        shard = parse_shard(args.shard)
    except ValueError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = import_source(
            args.source,
            args.out,
            fmt=args.format,
            workers=args.workers,
            limit=args.limit,
            instances=args.instances,
            heldout=heldout,
            replay=not args.no_replay,
            step_timeout=args.step_timeout,
            model=args.context_model,
            options={k: v for k, v in (("tasks", args.tasks), ("reports", args.reports)) if v},
            repos=args.repos,
            shard=shard,
            modes=CONTEXT_CHOICES[args.contexts],
            history=args.history,
            writers=args.writers,
        )
    except (ValueError, OSError) as exc:  # unknown format; --out not a writable folder
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    print_report(summary, args.out, heldout)
    total = summary.get("swt", {}).get("total", 0) + summary.get("swr", {}).get("total", 0)
    return 0 if total else 1
