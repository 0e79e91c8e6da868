"""Import throughput: replay vs fallback on the same trajectories, side by side.

Imports the same trajectories twice with ``sweworld.data.importing.import_source``: once
replayed in sessions (file operations for real, execution answered from the recording) and
once as fallback records (no repository), each into a fresh folder, and prints
trajectories/s, steps/s, SWT records/s and the share of steps whose replay reproduced the
recorded observation. The tokenizer that counts the embedded budgets is loaded before the
clock starts (a one-off cost per process).

    SWEWORLD_REPO_CACHE=/work/repo-cache sweworld bench import \\
        --source ../shared/data/mini-swe-agent-gemini3-verified.tar.gz \\
        --repos psf/requests pallets/flask --workers 2 [--json out.json]

``--contexts none`` replays without building SWT contexts (what ``sweworld data
build-outcome`` does: state, command and truth only); ``--shards N`` replays in N processes
(``import_source(shard=(k, N))`` each, one core each) and reports their summed counts over
the wall time of the slowest; ``--warm`` builds the base checkouts before the clock starts.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["add_arguments", "run"]


def _instances(source: Path, fmt: str, repos: list[str], limit: int | None) -> list[str]:
    from sweworld.data.importers import get_importer
    from sweworld.data.schema import Trajectory

    found = []
    for item in get_importer(fmt).read(source):
        if isinstance(item, Trajectory) and (not repos or item.repo in repos):
            found.append(item.instance_id)
            if limit is not None and len(found) >= limit:
                break
    return found


def _part(source: Path, out: Path, shard: tuple[int, int], kw: dict[str, Any]) -> dict[str, Any]:
    """One shard of the import, in a process of its own."""
    from sweworld.data.importing import import_source
    from sweworld.data.record import context_config

    for mode in ("oracle", "blind"):
        context_config(mode, kw.get("model", "embedded"))
    return import_source(source, out, shard=shard, **kw)


def _warm(source: Path, fmt: str, instances: list[str]) -> None:
    """Build the base checkouts of ``instances`` (as a replay does) before the clock."""
    from sweworld.data.importers import get_importer
    from sweworld.data.replay import REPLAY_HISTORY
    from sweworld.data.schema import Trajectory
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks.schema import Task

    manager = SessionManager()
    wanted = set(instances)
    for item in get_importer(fmt).read(source, instances=wanted):
        if isinstance(item, Trajectory) and item.instance_id in wanted:
            try:
                manager.checkout(Task.from_row(item.task), history=REPLAY_HISTORY)
            except Exception as exc:  # no repository: the import falls back, unwarmed
                print(f"not warmed: {item.instance_id}: {exc}", file=sys.stderr)
    manager.close_all()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench import``."""
    default = (
        Path(__file__).resolve().parents[3] / "shared/data/mini-swe-agent-gemini3-verified.tar.gz"
    )
    parser.add_argument("--source", default=str(default), help="trajectories to import")
    parser.add_argument("--format", default="auto", help="importer name (auto: detected)")
    parser.add_argument(
        "--repos", nargs="*", default=["psf/requests", "pallets/flask"],
        help="only these repositories (none: all)",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, help="at most this many trajectories")
    parser.add_argument("--workers", type=int, default=2, help="import workers")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds per step")
    parser.add_argument(
        "--context-model", default="embedded", help="whose tokenizer sizes the contexts"
    )
    parser.add_argument(
        "--contexts", default="both", choices=("both", "oracle", "blind", "none"),
        help="SWT contexts built (none: state, command and truth only)",
    )  # fmt: skip
    parser.add_argument("--shards", type=int, default=1, help="replay processes")
    parser.add_argument("--warm", action="store_true", help="base checkouts made first")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench import``."""
    from sweworld.data.importers import detect_format
    from sweworld.data.importing import CONTEXT_CHOICES, import_source
    from sweworld.data.record import context_config

    source = Path(args.source)
    fmt = detect_format(source) if args.format == "auto" else args.format
    instances = _instances(source, fmt, args.repos, args.limit)
    if not instances:
        print("no trajectory of those repositories in the source", file=sys.stderr)
        return 1
    for mode in ("oracle", "blind"):  # load the tokenizer outside the clock
        context_config(mode, args.context_model)
    modes = CONTEXT_CHOICES[args.contexts]
    if args.warm:
        _warm(source, fmt, instances)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
        for label, replay in (("replay", True), ("fallback", False)):
            kw = dict(
                fmt=fmt,
                workers=args.workers,
                instances=instances,
                replay=replay,
                step_timeout=args.step_timeout,
                progress=False,
                model=args.context_model,
                modes=modes,
            )
            n = max(1, args.shards) if replay else 1
            started = time.perf_counter()
            if n == 1:
                summaries = [import_source(source, Path(tmp) / label, **kw)]
            else:
                ctx = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(n, mp_context=ctx) as pool:
                    futs = [
                        pool.submit(_part, source, Path(tmp) / f"{label}-{k}", (k, n), kw)
                        for k in range(n)
                    ]
                    summaries = [f.result() for f in futs]
            wall = max(time.perf_counter() - started, 1e-9)
            counts: Counter[str] = Counter()
            for part in summaries:
                counts.update(part["import"]["counts"])
            summary = {
                kind: {"total": sum(p[kind]["total"] for p in summaries)} for kind in ("swt", "swr")
            }
            state = "replay" if replay else "trajectory"
            trajs = counts.get(f"trajectories_{state}", 0)
            steps = counts.get(f"steps_{state}", 0)
            rows[label] = {
                "trajectories": trajs,
                "fell_back": counts.get("trajectories_trajectory", 0) if replay else 0,
                "steps": steps,
                "swt_records": summary["swt"]["total"],
                "swr_records": summary["swr"]["total"],
                "wall_s": round(wall, 2),
                "trajectories_per_s": round(trajs / wall, 3),
                "steps_per_s": round(steps / wall, 2),
                "records_per_s": round(summary["swt"]["total"] / wall, 2),
                "steps_reproduced": (
                    round(counts.get("steps_consistent", 0) / steps, 3)
                    if replay and steps
                    else None
                ),
            }
    print(f"{len(instances)} trajectories of {', '.join(args.repos) or 'all repositories'}")
    print(
        f"workers {args.workers}, shards {args.shards}, contexts {args.contexts}, "
        f"{os.cpu_count()} CPUs, {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    names = list(rows["replay"])
    print(f"{'':20s} {'replay':>12s} {'fallback':>12s}")
    for name in names:
        print(f"{name:20s} {rows['replay'][name]!s:>12s} {rows['fallback'][name]!s:>12s}")
    result = {"instances": instances, **rows}
    write_summary(args, "import", result, title="Import throughput: replay vs fallback")
    return 0
