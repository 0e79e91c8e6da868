"""Collection throughput: steps/s and SWT records/s of collect mode, with and without a
prediction beside the truth, side by side.

A scripted policy (what agents typically run: look around, import the package, run a
reproduction, run the tests, read the diff, submit) runs on each toy task against the real
LocalExecutor. Three figures per configuration: the whole collection (real reward labels
included), the steps per second and the SWT records per second. ``--predict`` chooses the
model whose prediction is recorded beside the truth: ``replay`` (default) is a replayed
answer, which measures the simulator's own cost (facts, contexts, validation) without a
model; ``embedded`` the embedded SmolLM2 on this CPU (slow: tens of seconds per step).

    sweworld bench collect [--predict replay|SPEC] [--rounds 2] [--workers 1]
        [--no-label] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["ACTIONS", "add_arguments", "run", "run_config"]

ACTIONS = [
    "ls /testbed",
    "git status --short",
    'python -c "import stockroom; print(stockroom.__name__)"',
    "cat > /tmp/reproduce.py <<'EOF'\nimport stockroom\nprint(sorted(dir(stockroom))[:5])\nEOF",
    "python /tmp/reproduce.py",
    "python -m pytest -rA -q tests",
    "git diff",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
ANSWER = {"stdout": "stockroom\n", "stderr": "", "exit_code": 0}


def run_config(
    tasks: list, tmp: Path, name: str, predict: str | None, args: argparse.Namespace
) -> dict:
    """One configuration's collection, ``args.rounds`` times: steps, SWT records, the
    median wall time and the rates."""
    from sweworld.data.collect import collect
    from sweworld.sandbox.manager import SessionManager

    script = tmp / "actions.jsonl"
    script.write_text("".join(json.dumps(a) + "\n" for a in ACTIONS))
    walls, steps, swt = [], 0, 0
    with SessionManager(runtime_root=tmp / "runtime") as manager:
        for round_ in range(args.rounds):
            out = tmp / f"{name}-{round_}"
            stats = collect(
                tasks,
                f"scripted:{script}",
                out=out,
                predict=predict,
                manager=manager,
                workers=args.workers,
                label=not args.no_label,
            )
            if stats.skipped:
                raise SystemExit(f"{name}: {stats.skipped} task(s) skipped: {stats.skip_reasons}")
            walls.append(stats.wall_s)
            steps, swt = stats.steps, stats.swt
    wall = statistics.median(walls)
    return {
        "config": name,
        "tasks": len(tasks),
        "steps": steps,
        "swt": swt,
        "wall_s": round(wall, 2),
        "steps_per_s": round(steps / wall, 2),
        "swt_per_s": round(swt / wall, 2),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench collect``."""
    parser.add_argument("--predict", default="replay", help="replay (default) or an LM spec")
    parser.add_argument("--rounds", type=int, default=2, help="runs per configuration (median)")
    parser.add_argument("--workers", type=int, default=1, help="collection workers")
    parser.add_argument("--no-label", action="store_true", help="skip the real-reward labels")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench collect``."""

    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    tasks = load_tasks(toy_tasks_path())
    with tempfile.TemporaryDirectory(prefix="sweworld-collect-bench-") as folder:
        tmp = Path(folder)
        predict = args.predict
        if predict == "replay":
            replay = tmp / "answers.jsonl"
            replay.write_text((json.dumps({"text": json.dumps(ANSWER)}) + "\n") * 5000)
            predict = f"replay:{replay}"
        # warm-up, not counted: environment, checkouts, tokenizer, first imports
        run_config(
            tasks[:1], tmp, "warm-up", predict, argparse.Namespace(**{**vars(args), "rounds": 1})
        )
        rows = [
            run_config(tasks, tmp, "truth only", None, args),
            run_config(tasks, tmp, f"truth + prediction ({args.predict})", predict, args),
        ]
    print("| configuration | tasks | steps | SWT | wall (s) | steps/s | SWT/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['tasks']} | {r['steps']} | {r['swt']} | {r['wall_s']} "
            f"| {r['steps_per_s']} | {r['swt_per_s']} |"
        )
    write_summary(args, "collect", rows, title="Collection throughput")
    return 0
