"""Import throughput: replay vs fallback on the same trajectories, side by side.

Imports the same trajectories twice with ``sweworld.data.importing.import_source``: once
replayed in sessions (file operations for real, execution answered from the recording) and
once as fallback records (no repository), each into a fresh folder, and prints
trajectories/s, steps/s, SWT records/s and the share of steps whose replay reproduced the
recorded observation. The tokenizer that counts the embedded budgets is loaded before the
clock starts (a one-off cost per process).

    SWEWORLD_REPO_CACHE=/work/repo-cache python benchmarks/import_throughput.py \\
        --source ../shared/data/mini-swe-agent-gemini3-verified.tar.gz \\
        --repos psf/requests pallets/flask --workers 2 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from sweworld.data.importers import detect_format, get_importer
from sweworld.data.importing import import_source
from sweworld.data.record import context_config
from sweworld.data.schema import Trajectory


def _instances(source: Path, fmt: str, repos: list[str], limit: int | None) -> list[str]:
    found = []
    for item in get_importer(fmt).read(source):
        if isinstance(item, Trajectory) and (not repos or item.repo in repos):
            found.append(item.instance_id)
            if limit is not None and len(found) >= limit:
                break
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = (
        Path(__file__).resolve().parents[2] / "shared/data/mini-swe-agent-gemini3-verified.tar.gz"
    )
    parser.add_argument("--source", default=str(default))
    parser.add_argument("--format", default="auto")
    parser.add_argument("--repos", nargs="*", default=["psf/requests", "pallets/flask"])
    parser.add_argument("--limit", type=int, default=None, help="at most this many trajectories")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-timeout", type=float, default=60.0)
    parser.add_argument("--context-model", default="embedded")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)

    source = Path(args.source)
    fmt = detect_format(source) if args.format == "auto" else args.format
    instances = _instances(source, fmt, args.repos, args.limit)
    if not instances:
        print("no trajectory of those repositories in the source", file=sys.stderr)
        return 1
    for mode in ("oracle", "blind"):  # load the tokenizer outside the clock
        context_config(mode, args.context_model)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
        for label, replay in (("replay", True), ("fallback", False)):
            summary = import_source(
                source,
                Path(tmp) / label,
                fmt=fmt,
                workers=args.workers,
                instances=instances,
                replay=replay,
                step_timeout=args.step_timeout,
                progress=False,
                model=args.context_model,
            )
            imp = summary["import"]
            counts = imp["counts"]
            wall = max(imp["wall_s"], 1e-9)
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
    print(f"workers {args.workers}, {os.cpu_count()} CPUs, {platform.python_version()}")
    names = list(rows["replay"])
    print(f"{'':20s} {'replay':>12s} {'fallback':>12s}")
    for name in names:
        print(f"{name:20s} {rows['replay'][name]!s:>12s} {rows['fallback'][name]!s:>12s}")
    if args.json:
        Path(args.json).write_text(json.dumps({"instances": instances, **rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
