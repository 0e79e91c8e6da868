"""Per-step latency of the outcome executor (``sweworld.transition.outcome``) beside the
baseline, the embedded LM route (``simulated``, SmolLM2-135M + the shipped SWT adapter), in
real sandbox sessions on the toy task: the executor's own time (``info["latency_s"]``) and the
whole step (sandbox, shim, executor, rendering) as the session measures it.

    sweworld bench outcome-speed [--rounds 20] [--baseline-rounds 1]
        [--mode blind] [--out benchmarks/results/outcome-speed]

Prints p50 / p99 / max per command kind for both executors in one table (the baseline's
model calls take seconds to a minute each, so it runs fewer rounds; ``--baseline-rounds 0``
skips it), and with ``--out`` writes a ``report.json`` for ``sweworld bench render``.
Timing only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from sweworld.bench.similarity import percentile

__all__ = ["add_arguments", "measure", "run"]

COMMANDS = (
    "python -m pytest -rA tests/test_textutil.py",
    "python -m pytest -q tests",
    "python -m pytest tests/test_money.py::test_currency_code -x",
    "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'",
    "python reproduce.py",
)


DESCRIPTION = (
    "Real sandbox sessions on the toy task sweworld__stockroom-1; five execution "
    "commands per round (three pytest runs, `python -c`, a script), alternating "
    "between the base state and a new edit of it. 'exec' is the executor's own time, "
    "'step' the whole step as the session measures it. The outcome executor uses "
    "the shipped model (sweworld/adapters/outcome-default), alone and with the "
    "default world's judge (the SWR verdict, asked about each new state whose run "
    "collects the task's graded tests: one state, one truth); the baseline is the "
    "project's current default world (simulated: SmolLM2-135M with the shipped "
    "SWT adapter), which runs fewer rounds because each of its model calls takes "
    "seconds to a minute. Shared 2-core VM: latencies are noisy."
)


def _kind(command: str) -> str:
    return "pytest" if "pytest" in command else "python script / -c"


def measure(executor: Any, rounds: int) -> dict[str, dict[str, list[float]]]:
    """``{kind: {"exec": [s...], "step": [s...]}}`` over ``rounds`` rounds of COMMANDS,
    alternating between the base state and an edited one."""
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    task = load_tasks(toy_tasks_path())[0]
    manager = SessionManager()
    found: dict[str, dict[str, list[float]]] = {}
    try:
        with manager.open(task, executor=executor) as session:
            session.write_file(
                "/testbed/reproduce.py", "from stockroom.textutil import slugify\n"
                "print(slugify('A b'))\n"
            )  # fmt: skip
            session.run("ls")  # start the sandbox
            for i in range(rounds):
                if i % 2:  # a new state each time (a judge is asked about every new one)
                    session.run(f"echo '# edit {i}' >> stockroom/textutil.py")
                else:
                    session.run("git checkout -q -- stockroom/textutil.py")
                for command in COMMANDS:
                    start = time.perf_counter()
                    out = session.run(command)
                    elapsed = time.perf_counter() - start
                    calls = out.info.get("execution_calls") or [{}]
                    own = (calls[-1].get("info") or {}).get("latency_s", elapsed)
                    slot = found.setdefault(_kind(command), {"exec": [], "step": []})
                    slot["exec"].append(float(own))
                    slot["step"].append(elapsed)
    finally:
        manager.close_all()
    return found


def _row(name: str, kind: str, values: dict[str, list[float]]) -> list[str]:
    e, w = values["exec"], values["step"]
    ms = [1e3 * statistics.median(e), 1e3 * percentile(e, 99), 1e3 * statistics.median(w),
          1e3 * percentile(w, 99), 1e3 * max(w)]  # fmt: skip
    return [name, kind, str(len(e)), *(f"{v:,.1f}" for v in ms)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench outcome-speed``."""
    parser.add_argument("--model", default=None, help="outcome model file (the shipped one)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the outcome executor")
    parser.add_argument(
        "--baseline-rounds", type=int, default=1, help="rounds of the embedded LM route (1)"
    )
    parser.add_argument(
        "--mode", default="oracle", choices=("oracle", "blind"), help="SWT context mode"
    )
    parser.add_argument(
        "--judge",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the outcome executor with the default world's judge (the SWR "
        "verdict, asked when a run collects the task's graded tests; oracle mode)",
    )
    parser.add_argument("--out", default=None, help="write report.json into this folder")


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench outcome-speed``."""
    from sweworld.transition.outcome.executor import OutcomeExecutor
    from sweworld.world import executor_from_spec

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    outcome = OutcomeExecutor(args.model, mode=args.mode)
    results = {"outcome": measure(outcome, args.rounds)}
    if args.judge and args.mode == "oracle":
        from sweworld.reward.model import RewardModel

        with RewardModel(mode=args.mode) as reward:
            judged = OutcomeExecutor(args.model, mode=args.mode, judge=reward.judge)
            results["outcome + judge (SWR verdict)"] = measure(judged, args.rounds)
    if args.baseline_rounds > 0:
        baseline = executor_from_spec("simulated", mode=args.mode)
        try:
            results["simulated (embedded LM)"] = measure(baseline, args.baseline_rounds)
        finally:
            closer = getattr(baseline, "close", None)
            if callable(closer):
                closer()
    columns = ["executor", "command kind", "n", "exec p50", "exec p99", "step p50",
               "step p99", "step max"]  # fmt: skip
    rows = [_row(name, kind, v) for name, r in results.items() for kind, v in sorted(r.items())]
    print(f"model {outcome.model_path}, mode {args.mode}; times in ms")
    print("  ".join(f"{c:>24}" if i < 2 else f"{c:>9}" for i, c in enumerate(columns)))
    for row in rows:
        print("  ".join(f"{c:>24}" if i < 2 else f"{c:>9}" for i, c in enumerate(row)))
    if args.out:
        from sweworld.bench.output import BenchOutput, figure

        out = BenchOutput(
            args.out,
            "outcome-speed",
            title="Simulated step latency: the outcome world vs the embedded LM (issue 19)",
            description=DESCRIPTION,
            settings={
                "rounds": args.rounds,
                "baseline_rounds": args.baseline_rounds,
                "mode": args.mode,
                "judge": bool(args.judge),
            },
            model=str(outcome.model_path),
            fresh=True,
        )
        out.report.data["provenance"]["started"] = started
        notes = "Target of issue 19: p50 <= 50 ms, p99 <= 500 ms per step."
        title = "Per-step latency (ms), outcome executor and baseline"
        out.write([figure(title, columns, rows, notes)])
    return 0
