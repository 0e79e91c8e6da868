"""Per-step latency of the outcome executor (``sweworld.transition.outcome``) in a real
sandbox session on the toy task: the executor's own time (``info["latency_s"]``) and the
whole step (sandbox, shim, executor, rendering) as the session measures it.

    python benchmarks/outcome_executor_bench.py [--model PATH] [--rounds 20] [--mode blind]

Prints p50 / p99 / max per command kind. Timing only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

COMMANDS = (
    "python -m pytest -rA tests/test_textutil.py",
    "python -m pytest -q tests",
    "python -m pytest tests/test_money.py::test_currency_code -x",
    "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'",
    "python reproduce.py",
)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--mode", default="blind", choices=("blind", "oracle"))
    args = parser.parse_args()
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path
    from sweworld.transition.outcome.executor import OutcomeExecutor

    task = load_tasks(toy_tasks_path())[0]
    executor = OutcomeExecutor(args.model, mode=args.mode)
    manager = SessionManager()
    own: dict[str, list[float]] = {}
    whole: dict[str, list[float]] = {}
    try:
        with manager.open(task, executor=executor) as session:
            session.write_file(
                "/testbed/reproduce.py", "from stockroom.textutil import slugify\n"
                "print(slugify('A b'))\n"
            )  # fmt: skip
            session.run("python -m pytest -q tests")  # warm the sandbox
            for i in range(args.rounds):
                if i % 2:  # alternate between the base and an edited state
                    session.run("echo '# edit' >> stockroom/textutil.py")
                else:
                    session.run("git checkout -q -- stockroom/textutil.py")
                for command in COMMANDS:
                    start = time.perf_counter()
                    out = session.run(command)
                    elapsed = time.perf_counter() - start
                    info = out.info["execution_calls"][-1]["info"]
                    key = f"{info.get('kind')} ({info.get('route')})"
                    own.setdefault(key, []).append(info["latency_s"])
                    whole.setdefault(key, []).append(elapsed)
    finally:
        manager.close_all()
    print(f"machine: {platform.machine()}, {platform.python_version()}, "
          f"model {executor.model_path}, mode {args.mode}, {args.rounds} rounds")  # fmt: skip
    print(f"{'command kind (route)':<36} {'n':>4} {'exec p50':>9} {'exec p99':>9} "
          f"{'step p50':>9} {'step p99':>9} {'step max':>9}  (ms)")  # fmt: skip
    for key in sorted(own):
        e, w = own[key], whole[key]
        print(f"{key:<36} {len(e):>4} {1e3 * statistics.median(e):>9.1f} "
              f"{1e3 * _pct(e, 0.99):>9.1f} {1e3 * statistics.median(w):>9.1f} "
              f"{1e3 * _pct(w, 0.99):>9.1f} {1e3 * max(w):>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
