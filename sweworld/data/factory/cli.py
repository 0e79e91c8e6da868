"""``sweworld data make-tasks``: real tasks from a Python library by injecting bugs.

Examples::

    sweworld data make-tasks --package inflection --max-tasks 5 --out T
    sweworld data make-tasks --repo /path/to/toolz --max-tasks 30 --workers 2 --out T
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sub-command's flags."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--package", help="NAME or NAME==VERSION: the sdist from the package index")
    src.add_argument("--repo", help="a local git repository (bare mirrors too) or folder")
    parser.add_argument("--name", help="owner/name for --repo (default: from the folder name)")
    parser.add_argument("--out", required=True, help="output folder (resumed when it exists)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="parallel test runs")
    parser.add_argument("--max-tasks", type=int, default=10)
    parser.add_argument("--max-mutants", type=int, default=200, help="mutants to try at most")
    parser.add_argument(
        "--max-broken-fraction",
        type=float,
        default=0.5,
        help="reject a mutant breaking more than this fraction of the passing tests it ran",
    )
    parser.add_argument(
        "--multi-fraction",
        type=float,
        default=0.25,
        help="share of the tasks made of two bugs (their half-fixes are the partial labels)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    parser.add_argument(
        "--wrong-fixes", type=int, default=3, help="wrong fixes per task (labels and states)"
    )
    parser.add_argument(
        "--contexts",
        default="both",
        choices=("both", "oracle", "blind", "none"),
        help="SWT contexts per record (none: state, command and truth only, faster)",
    )
    parser.add_argument(
        "--screen-records",
        action="store_true",
        help="every mutant's screening run (and the baseline) as an SWT record too; then "
        "all --max-mutants mutants are screened, not only until enough are kept",
    )
    parser.add_argument("--no-transitions", action="store_true", help="no SWT records")
    parser.add_argument("--no-labels", action="store_true", help="no SWR records")
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the factory; prints tasks made and mutants tried / kept / rejected by reason."""
    from sweworld.data.factory.pipeline import FactoryConfig, FactoryError, make_tasks

    cfg = FactoryConfig(
        out=Path(args.out),
        package=args.package,
        repo_path=args.repo,
        repo_name=args.name,
        seed=args.seed,
        workers=args.workers,
        max_tasks=args.max_tasks,
        max_mutants=args.max_mutants,
        max_broken_fraction=args.max_broken_fraction,
        multi_fraction=args.multi_fraction,
        timeout=args.timeout,
        transitions=not args.no_transitions,
        wrong_fixes=max(0, args.wrong_fixes),
        contexts={"both": ("oracle", "blind"), "none": ()}.get(args.contexts, (args.contexts,)),
        screen_records=args.screen_records,
        labels=not args.no_labels,
        progress=not args.no_progress,
    )
    try:
        summary = make_tasks(cfg)
    except FactoryError as exc:
        print(f"sweworld data make-tasks: {exc}", file=sys.stderr)
        print(f"skip reasons in {cfg.out / 'summary.json'}", file=sys.stderr)
        return 1
    counts = summary["factory"]["counts"]
    print(f"tasks made: {counts.get('tasks_made', 0)} -> {cfg.out / 'tasks.jsonl'}")
    print(
        f"mutants: {counts.get('mutants_tried', 0)} tried, {counts.get('mutants_kept', 0)} kept"
        f" (of {counts.get('mutants_candidates', 0)} candidates)"
    )
    for key in sorted(counts):
        if key.startswith(("rejected_", "tasks_skipped_", "swr_")):
            print(f"  {key}: {counts[key]}")
    print(
        f"records: swt {summary.get('swt', {}).get('total', 0)}, "
        f"swr {summary.get('swr', {}).get('total', 0)}; wall {summary['factory']['wall_s']} s"
    )
    return 0
