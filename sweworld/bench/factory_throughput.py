"""Task-factory throughput: mutants screened and tasks made per minute, for real.

Runs ``sweworld data make-tasks`` on one library into a fresh folder and reports wall time,
mutants tried / kept, tasks made, SWT / SWR records and their rates (JSON on stdout).

    sweworld bench factory --package inflection --max-tasks 5
    sweworld bench factory --repo /path/to/toolz --max-tasks 10 --workers 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench factory``."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--package", help="a library from PyPI")
    src.add_argument("--repo", help="a local checkout of a library")
    parser.add_argument("--max-tasks", type=int, default=5, help="stop after this many tasks")
    parser.add_argument("--max-mutants", type=int, default=200, help="mutants tried at most")
    parser.add_argument("--workers", type=int, default=2, help="parallel screening workers")
    parser.add_argument("--seed", type=int, default=0, help="mutant sampling seed")
    parser.add_argument("--no-transitions", action="store_true", help="no SWT records")
    parser.add_argument(
        "--tasks-out", help="the factory's output folder (default: a fresh temporary one)"
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the factory once and print its rates."""
    from sweworld.data.factory.pipeline import FactoryConfig, make_tasks

    out = Path(args.tasks_out or tempfile.mkdtemp(prefix="factory-bench-"))
    cfg = FactoryConfig(
        out=out,
        package=args.package,
        repo_path=args.repo,
        seed=args.seed,
        workers=args.workers,
        max_tasks=args.max_tasks,
        max_mutants=args.max_mutants,
        transitions=not args.no_transitions,
        progress=False,
    )
    started = time.monotonic()
    summary = make_tasks(cfg, echo=lambda _: None)
    wall = time.monotonic() - started
    counts = summary["factory"]["counts"]
    minutes = wall / 60
    report = {
        "library": summary["factory"]["library"],
        "out": str(out),
        "wall_s": round(wall, 1),
        "mutants_tried": counts.get("mutants_tried", 0),
        "mutants_kept": counts.get("mutants_kept", 0),
        "tasks_made": counts.get("tasks_made", 0),
        "swt_records": summary.get("swt", {}).get("total", 0),
        "swr_records": summary.get("swr", {}).get("total", 0),
        "mutants_per_min": round(counts.get("mutants_tried", 0) / minutes, 2),
        "tasks_per_min": round(counts.get("tasks_made", 0) / minutes, 2),
        "workers": args.workers,
    }
    print(json.dumps(report, indent=1))
    write_summary(args, "factory", report, title="Task-factory throughput")
    return 0
