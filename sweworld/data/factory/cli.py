"""``sweworld data make-tasks``: real tasks from a Python library by injecting bugs.

Examples::

    sweworld data make-tasks --package inflection --max-tasks 5 --out T
    sweworld data make-tasks --repo /path/to/toolz --max-tasks 30 --workers 2 --out T
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "run", "split_report"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sub-command's flags."""
    from sweworld.data.schema import DEFAULT_HELDOUT_REPOS

    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--package", help="NAME or NAME==VERSION: the sdist from the package index")
    src.add_argument("--repo", help="a local git repository (bare mirrors too) or folder")
    parser.add_argument(
        "--name",
        help="OWNER/NAME of the tasks' repository for --repo (default: from the folder name; "
        "it must not name another repository the sessions can find)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output folder: tasks.jsonl, the datasets swt/ and swr/, repos/ (the tasks' "
        "repository, which grade/episode find beside tasks.jsonl); resumed when it exists",
    )
    parser.add_argument(
        "--split",
        default="auto",
        choices=("auto", "train", "test"),
        help="where this library's records go: auto (test when it is held out, else train), "
        "train or test (default: auto)",
    )
    parser.add_argument(
        "--heldout",
        default=None,
        help="comma-separated repositories whose records go to the test split, or 'none' "
        f"(default: {','.join(DEFAULT_HELDOUT_REPOS)})",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--workers", type=int, default=2, help="parallel test runs (default 2)")
    parser.add_argument(
        "--max-tasks", type=int, default=10, help="stop after this many tasks (default 10)"
    )
    parser.add_argument(
        "--max-mutants", type=int, default=200, help="mutants to try at most (default 200)"
    )
    parser.add_argument(
        "--max-broken-fraction",
        type=float,
        default=0.5,
        help="reject a mutant breaking more than this fraction of the passing tests it ran "
        "(default 0.5)",
    )
    parser.add_argument(
        "--multi-fraction",
        type=float,
        default=0.25,
        help="share of the tasks made of two bugs (their half-fixes are the partial labels; "
        "default 0.25)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per test run (default 300)"
    )
    parser.add_argument(
        "--wrong-fixes",
        type=int,
        default=3,
        help="wrong fixes per task (labels and states; default 3)",
    )
    parser.add_argument(
        "--alt-fixes",
        type=int,
        default=2,
        help="alternative right fixes per task: the gold fix with one equivalent rewrite "
        "(a mirrored comparison, a temporary for a returned value, a renamed local), "
        "labelled by a real run (default 2)",
    )
    parser.add_argument(
        "--overreach-fixes",
        type=int,
        default=1,
        help="candidates per task made of the gold fix plus one wrong fix, labelled by a "
        "real run (default 1)",
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
    parser.add_argument(
        "--no-transitions", action="store_true", help="no SWT records (tasks and labels only)"
    )
    parser.add_argument("--no-labels", action="store_true", help="no SWR records")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr (default: only when stderr is a terminal)",
    )


def split_report(summary: dict[str, Any]) -> list[str]:
    """Lines saying what is held out and where the records went (train / test per kind),
    with the option that changes it when the library went to test only."""
    library = (summary.get("factory") or {}).get("library")
    held = list(summary.get("heldout_repos") or [])
    lines = [f"held out (test split): {', '.join(held) if held else 'no repository'}"]
    for kind in ("swt", "swr"):
        splits = (summary.get(kind) or {}).get("splits") or {}
        lines.append(
            f"  {kind}: {splits.get('train', 0)} train, {splits.get('test', 0)} test "
            f"-> {kind}/ (sweworld train {kind} --data OUT)"
        )
    if library and library in held:
        lines.append(
            f"  {library} is held out: its records are in the test split (evaluation only); "
            "to train on them pass --split train (or --heldout none)"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the factory; prints tasks made and mutants tried / kept / rejected by reason."""
    from sweworld.data.factory.pipeline import FactoryConfig, FactoryError, make_tasks
    from sweworld.data.importing import heldout_repos

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
        alt_fixes=max(0, args.alt_fixes),
        overreach_fixes=max(0, args.overreach_fixes),
        contexts={"both": ("oracle", "blind"), "none": ()}.get(args.contexts, (args.contexts,)),
        screen_records=args.screen_records,
        labels=not args.no_labels,
        progress=sys.stderr.isatty() if args.progress is None else args.progress,
        heldout=None if args.heldout is None else heldout_repos(args.heldout),
        split=args.split,
    )
    try:
        summary = make_tasks(cfg)
    except FactoryError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
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
    for line in split_report(summary):
        print(line)
    return 0
