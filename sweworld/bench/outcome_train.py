"""How long ``sweworld train outcome`` takes on this machine, part by part: the features of
every record (``load_rows``, the state rebuilt and featurised in oracle and blind mode)
computed in one process, the baseline, beside the same computed by ``--jobs`` processes, on
the same records; then the fit of the three heads with the shipped recipe.

    sweworld bench outcome-train --data D [--data D ...] [--jobs 1,2]
        [--repos MIRRORS] [--cache BASES] [--out DIR]

The base checkouts are extracted before anything is timed, so each timing is the features
alone. The rows of every run are compared with the first run's: a run whose rows differ is
reported as such (``same rows``). Timing only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["add_arguments", "run"]

DESCRIPTION = (
    "`sweworld train outcome` in its two parts, on the same records: the features "
    "(each record's state rebuilt from its base checkout and diff, featurised in oracle "
    "and blind mode) in one process (the baseline) and in several (`--jobs`: each task's "
    "records in one process, the rows put back in order and checked equal to the "
    "baseline's), then the fit of the three heads per mode with the shipped recipe (hgb, "
    "100 iterations, leaves of 100, L2 1). Base checkouts are extracted before the timings. "
    "The whole command takes about the features at its --jobs plus the fit."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", action="append", required=True, help="a swt.jsonl file or a folder of them"
    )
    parser.add_argument(
        "--jobs", default="1,2", help="comma-separated process counts; the first is the baseline"
    )
    parser.add_argument(
        "--repos", action="append", default=[], help="repositories / mirrors of the base commits"
    )
    parser.add_argument("--cache", default="", help="where base checkouts are extracted")
    parser.add_argument("--no-fit", action="store_true", help="time the features only")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench outcome-train``."""
    from sweworld.dirs import cache_dir
    from sweworld.train.outcome import TreeSettings, per_mode_heads, repos_for
    from sweworld.train.outcome_data import BaseCheckouts, iter_records, load_rows

    try:
        jobs = [int(j) for j in args.jobs.split(",") if j.strip()]
    except ValueError:
        jobs = []
    if not jobs or min(jobs) < 1 or max(jobs) > (os.cpu_count() or 1):
        print(
            f"sweworld: error: --jobs takes process counts from 1 to the CPUs "
            f"({os.cpu_count() or 1}), got {args.jobs!r}",
            file=sys.stderr,
        )
        return 2
    repos = repos_for(args.data, args.repos)
    cache = Path(args.cache) if args.cache else cache_dir() / "outcome-bases"
    checkouts = BaseCheckouts(repos, cache)
    paths = [Path(d) for d in args.data]
    started = time.perf_counter()
    checkouts.prepare(iter_records(paths))
    print(f"base checkouts ready in {time.perf_counter() - started:.1f} s")
    rows_out: list[dict[str, Any]] = []
    first: list[Any] | None = None
    base_s = 0.0
    for n in jobs:
        stats: dict[str, int] = {}
        started = time.perf_counter()
        rows = load_rows(paths, BaseCheckouts(repos, cache), stats=stats, jobs=n)
        wall = time.perf_counter() - started
        first = rows if first is None else first
        base_s = base_s or wall
        line = {
            "stage": "features",
            "jobs": n,
            "records": stats.get("records", 0),
            "s": round(wall, 1),
            "records_per_s": round(stats.get("records", 0) / wall, 2) if wall else None,
            "x baseline": round(base_s / wall, 2) if wall else None,
            "same rows": rows == first,
        }
        rows_out.append(line)
        print(json.dumps(line))
    if not args.no_fit and first:
        train = [r for r in first if r.split == "train"]
        started = time.perf_counter()
        per_mode_heads(train, "hgb", 0, TreeSettings())
        wall = time.perf_counter() - started
        line = {"stage": "fit heads", "jobs": 1, "records": len(train) // 2, "s": round(wall, 1)}
        rows_out.append(line)
        print(json.dumps(line))
    write_summary(
        args,
        "outcome-train",
        rows_out,
        title="Outcome model training time (features by processes, fit)",
        description=DESCRIPTION,
    )
    return 0
