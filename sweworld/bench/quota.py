"""Disk quota benchmark: what the per-session tmpfs quota costs at session create, and what
snapshots cost, before (a baseline commit) and after (this tree), side by side.

Each side runs in a subprocess whose ``sys.path`` starts with its own ``sweworld`` (the
baseline is exported with ``git archive``, as in ``sweworld bench sandbox --compare``), on the
same repository (a copy of an installed package's source, by default ``sympy``: ~1,500
files, no download), alternating sides for ``--rounds`` rounds; medians are printed:

  * session create latency (p50, p99) with the overlay backend: the "after" side also
    mounts the session's tmpfs (``size=`` the quota) and the ``/tmp`` overlay; and the
    workspace alone (``make_workspace``), five times as many;
  * open + first step (a cold sandbox start), median of 10;
  * 40 snapshots of a session holding a 20 MB file (a one-line edit before each), 3
    restores and 3 forks: the host disk gained (``du`` of the runtime folder) plus the
    memory the sessions' tmpfs mounts hold (``statvfs``, the kernel's count: a tmpfs is
    memory; the machine-wide free memory is too noisy on a shared host), and the p50 of
    one snapshot.

Run as root (overlay needs it):

    sweworld bench quota [--baseline HEAD] [--rounds 3] [--creates 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sweworld.bench.sandbox_compare import PROJECT, export_tree, run_worker

__all__ = ["LABELS", "add_arguments", "run", "write_report"]

LABELS = {
    "create_p50": ("session create p50", "ms"),
    "create_p99": ("session create p99", "ms"),
    "ws_create_p50": ("workspace create alone p50 (mounts, mkdirs)", "ms"),
    "ws_create_p99": ("workspace create alone p99", "ms"),
    "first_step": ("open + first step (cold sandbox)", "ms"),
    "snapshot_p50": ("one snapshot p50 (20 MB file held)", "ms"),
    "snap40_disk_mb": ("40 snapshots + 3 forks: host disk gained", "MB"),
    "snap40_mem_mb": ("40 snapshots + 3 forks: session tmpfs data", "MB"),
    "snap40_total_mb": ("40 snapshots + 3 forks: disk + memory", "MB"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench quota``."""
    parser.add_argument("--baseline", default="HEAD", help="commit measured as 'before'")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--creates", type=int, default=60, help="session creates timed")
    parser.add_argument("--snapshots", type=int, default=40, help="snapshots of one session")
    parser.add_argument("--package", default="sympy", help="installed package used as repo")
    parser.add_argument("--json", default=None, help="write the raw results here")
    parser.add_argument(
        "--out", default=None, help="write report.json here (for `sweworld bench render`)"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench quota``."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if os.geteuid() != 0:
        raise SystemExit("run as root: the overlay backend mounts")

    work = Path(tempfile.mkdtemp(prefix="swquota-bench-", dir="/tmp"))
    try:
        import importlib.util

        spec = importlib.util.find_spec(args.package)
        if spec is None or spec.origin is None:
            raise SystemExit(f"package {args.package!r} is not installed")
        source = work / "repo"
        shutil.copytree(Path(spec.origin).parent, source / args.package)
        n_files = sum(len(f) for _, _, f in os.walk(source))
        trees = {"before": export_tree(args.baseline, work / "before"), "after": PROJECT}
        rounds: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, tree in trees.items():
                row = run_worker(tree, "quota_worker", str(source), args.creates, args.snapshots)
                rounds[side].append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = list(LABELS)
    result = {
        side: {k: statistics.median(r[k] for r in rows) for k in keys}
        for side, rows in rounds.items()
    }
    print(
        f"\nbefore ({args.baseline}) vs after (this tree), median of {args.rounds} alternating "
        f"rounds; repo: {args.package} ({n_files} files), {args.creates} creates, "
        f"{args.snapshots} snapshots; {os.cpu_count()} cores"
    )
    print(f"  {'':48} {'before':>11} {'after':>11}")
    for key, (label, unit) in LABELS.items():
        scale = 1000 if unit == "ms" else 1
        b, a = result["before"][key] * scale, result["after"][key] * scale
        print(f"  {label:<48} {b:8.2f} {unit} {a:8.2f} {unit}")
    if args.json:
        Path(args.json).write_text(json.dumps({"result": result, "rounds": rounds}, indent=2))
    if args.out:
        write_report(Path(args.out), args, result, n_files, started)
    return 0


def write_report(
    out: Path, args: argparse.Namespace, result: dict, n_files: int, started: str
) -> None:
    """``report.json`` in the shape ``sweworld bench render`` reads (report_version 1)."""
    from sweworld.bench.output import command_line
    from sweworld.bench.report import provenance

    rows = []
    for key, (label, unit) in LABELS.items():
        scale = 1000 if unit == "ms" else 1
        b, a = result["before"][key] * scale, result["after"][key] * scale
        rows.append([label, f"{b:.2f} {unit}", f"{a:.2f} {unit}"])
    prov = provenance([], sys.argv[1:])
    prov["command"] = command_line(None)
    prov["started"] = started
    report = {
        "report_version": 1,
        "benchmark": "quota",
        "title": "Disk quota per session and snapshots (issue 18)",
        "description": (
            "Command: `sweworld bench quota` (run as root; about 5 minutes). "
            f"Repository: the installed `{args.package}` package's source ({n_files} files) "
            "as a plain directory. 'before' is the baseline commit's `sweworld` (exported "
            "with `git archive`: no quota, snapshots as full copies of the upper layer), "
            "'after' this tree (a `size=` tmpfs per session holding the overlays' upper "
            "layers, /tmp and frozen snapshot layers; a control tmpfs). Both run the same "
            "worker in alternating subprocesses; medians of the rounds. The snapshot rows: "
            f"a session holding a 20 MB file takes {args.snapshots} snapshots (a one-line "
            "edit before each), then 3 restores and 3 forks; disk is `du` of the runtime "
            "folder, memory the sessions' tmpfs data (`statvfs`; a tmpfs is memory). The "
            "machine is a shared 2-core VM with other work running: latencies are noisy."
        ),
        "model": "",
        "provenance": prov,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {
            "baseline": args.baseline,
            "rounds": args.rounds,
            "creates": args.creates,
            "snapshots": args.snapshots,
            "package": args.package,
        },
        "skipped": {},
        "figures": [
            {
                "title": "Before (no quota, full-copy snapshots) and after (tmpfs quota, "
                "layer snapshots)",
                "columns": ["", f"before ({args.baseline})", "after (this tree)"],
                "rows": rows,
                "notes": (
                    "What 'after' adds at create: a tmpfs for the quota, a tmpfs for the "
                    "control folder and a second overlay (/tmp), in one trip to the mounter "
                    "thread (~0.5 ms of mount work); the first step also mounts a sized "
                    "/dev/shm in bubblewrap. The rest of the difference is scheduling on a "
                    "loaded 2-core VM: per-round medians vary several-fold on both sides. "
                    "The quota's cost is memory: a tmpfs holds its files in RAM, so the worst "
                    "case is sessions x quota (default 1 GiB, `SandboxLimits.disk_mb`); an "
                    "untouched session holds nothing."
                ),
            }
        ],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
