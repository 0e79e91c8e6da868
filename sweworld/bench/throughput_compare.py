"""Before/after of the step throughput (``sweworld bench throughput --compare``).

The same ``sweworld bench throughput`` cells (file-op steps, the outcome world, the real
local executor, ...) run on two ``sweworld`` trees: a baseline commit's, exported with
``git archive`` (:func:`~sweworld.bench.sandbox_compare.export_tree`), and this one, each
in a subprocess with its own tree first on ``PYTHONPATH``. Sides alternate round by round
(the machine's drift falls on both) and every cell's steps/s and step p50 are the medians
of the rounds. The baseline must know the options used (``--models``, ``--real``,
``--concurrency``, ``--steps``, ``--no-sessions``), as every tree since issue 12 does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["compare_throughput", "run_compare", "side_rows"]


def side_rows(folder: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(backend, live episodes) -> steps/s and p50 of one run's ``rows.jsonl``."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    path = folder / "rows.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)["row"]
        except (ValueError, KeyError, TypeError):
            continue
        if row.get("metric") == "steps" and row.get("steps_per_s") is not None:
            key = (str(row["backend"]), int(row["concurrency"]))
            out[key] = {"steps_per_s": float(row["steps_per_s"]), "p50_s": float(row["p50_s"])}
    return out


def _tasks_file(args: argparse.Namespace) -> Path:
    """The tasks both sides run (an exported tree holds ``sweworld/`` only, not the toy
    task's data beside it): ``--tasks`` or this tree's toy task."""
    from sweworld.tasks.toy import toy_tasks_path

    return Path(args.tasks or toy_tasks_path()).resolve()


def _run_side(tree: Path, args: argparse.Namespace, folder: Path) -> None:
    argv = [
        sys.executable, "-m", "sweworld", "bench", "throughput", "--out", str(folder),
        "--fresh", "--no-sessions", "--models", args.models, "--real", args.real,
        "--concurrency", args.concurrency, "--steps", str(args.steps),
        "--tasks", str(_tasks_file(args)),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tree))
    if done.returncode != 0:
        raise SystemExit(f"{tree}: bench throughput failed:\n{done.stderr[-3000:]}")


def compare_throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Medians over ``args.rounds`` alternating rounds of every cell on both trees:
    ``{"cells": [[backend, live, before steps/s, after steps/s, ratio, before p50,
    after p50], ...], "rounds": {side: [per-round rows]}}``."""
    from sweworld.bench.sandbox_compare import PROJECT, export_tree

    work = Path(tempfile.mkdtemp(prefix="swtp-"))
    try:
        trees = {"before": export_tree(args.baseline, work / "before"), "after": PROJECT}
        rounds: dict[str, list[dict]] = {"before": [], "after": []}
        for i in range(args.rounds):
            order = ("after", "before") if i % 2 == 0 else ("before", "after")
            for side in order:
                folder = work / f"{side}-{i}"
                _run_side(trees[side], args, folder)
                rounds[side].append(side_rows(folder))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cells = []
    keys = sorted(set().union(*rounds["after"]) & set().union(*rounds["before"]))
    for key in keys:
        med = {
            side: {
                m: statistics.median(r[key][m] for r in rows if key in r)
                for m in ("steps_per_s", "p50_s")
            }
            for side, rows in rounds.items()
        }
        before, after = med["before"]["steps_per_s"], med["after"]["steps_per_s"]
        cells.append([
            key[0], key[1], round(before, 2), round(after, 2),
            round(after / before, 3) if before else None,
            round(med["before"]["p50_s"], 4), round(med["after"]["p50_s"], 4),
        ])  # fmt: skip
    printable = {s: [{f"{b}|{c}": v for (b, c), v in r.items()} for r in rs]
                 for s, rs in rounds.items()}  # fmt: skip
    return {"cells": cells, "rounds": printable}


def run_compare(args: argparse.Namespace) -> int:
    """``sweworld bench throughput --compare``: the table, printed and written as a report;
    0, or 2 without ``--baseline``."""
    from sweworld.bench.output import BenchOutput, figure

    if not args.baseline:
        print("sweworld: error: --compare needs --baseline COMMIT", file=sys.stderr)
        return 2
    settings = {
        "baseline": args.baseline, "rounds": args.rounds, "models": args.models,
        "real": args.real, "concurrency": args.concurrency, "steps": args.steps,
    }  # fmt: skip
    out = BenchOutput(
        args.out, "throughput-compare",
        title=f"Step throughput before ({args.baseline}) vs after (sweworld bench throughput "
        "--compare)",
        description=(
            "The step cells of `sweworld bench throughput` (file-op steps, each --models world, "
            "each --real executor, at each number of live episodes) on the baseline commit's "
            "`sweworld` and on this tree, in separate processes, alternating sides round by "
            "round; medians of the rounds. The same toy task and commands on both sides."
        ),
        settings=settings, data=["toy task"], model=args.models, fresh=True,
    )  # fmt: skip
    result = compare_throughput(args)
    columns = ["backend", "live episodes", "before steps/s", "after steps/s", "after / before",
               "before p50 s", "after p50 s"]  # fmt: skip
    notes = (
        f"Medians of {args.rounds} rounds per side; a ratio below 1 is slower after. Noise "
        "on a shared 2-core machine is of the order of 10-20% per cell: compare the ratio "
        "with the spread of the rounds (report.json, summary.rounds)."
    )
    out.write([figure("Steps per second, before vs after", columns, result["cells"], notes)],
              result)  # fmt: skip
    print(f"before ({args.baseline}) vs after (this tree), medians of {args.rounds} rounds")
    for row in result["cells"]:
        print(f"  {row[0]:<18} {row[1]:>3} live  {row[2]:>8} -> {row[3]:>8} steps/s  "
              f"(x{row[4]})  p50 {row[5]} -> {row[6]} s")  # fmt: skip
    print(f"wrote {out.dir / 'report.md'}")
    return 0
