"""The Ray pool's overhead per step against the in-process pool, side by side in one run.

Both pools run the same cheap steps (``executor="none"``, ``reward="none"``: ``ls`` and
``grep`` run for real in the sandbox, no model) on the toy task: for each size, every slot is
reset, then ``--steps`` pool steps are timed (each pool step steps every slot once), for
two workloads (see :data:`WORKLOADS`): real sandbox commands, and actions refused before
anything runs (the pools' own cost alone). The
in-process :class:`~sweworld.env.pool.EnvPool` steps its slots in threads; the
:class:`~sweworld.env.ray_pool.RayEnvPool` sends one remote call per actor per pool step and
its actors step their slots in threads. The difference per pool step is what Ray costs
(serialising actions and outcomes, the calls, the actors' scheduling); divided by the size it
is the cost per episode step. Ray's start-up and the actors' start are reported apart.

    sweworld bench ray-pool [--sizes 8 32] [--steps 20] [--actors 2]
        [--workloads sandbox refused] [--json out.json]

A local Ray is started with ``--actors`` CPUs (no dashboard); on a machine with few cores the
sandbox commands of both pools compete for them, so compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sweworld.argtypes import at_least
from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["WORKLOADS", "add_arguments", "measure_pools", "run"]

#: What each workload's steps run: ``sandbox`` alternates two real commands; ``refused`` is
#: an action the episode refuses before running anything (not text), so its time is the
#: pools' own (threads, serialisation, remote calls).
WORKLOADS = {
    "sandbox": ("ls", "grep -rn 'def ' stockroom | head -5"),
    "refused": (0,),
}


def _time_pool(pool: Any, task: Any, steps: int, commands: tuple[Any, ...]) -> dict[str, float]:
    started = time.perf_counter()
    pool.reset([task] * pool.size)
    reset_s = time.perf_counter() - started
    per_step = []
    for turn in range(steps):
        command = commands[turn % len(commands)]
        started = time.perf_counter()
        outcomes = pool.step([command] * pool.size)
        per_step.append(time.perf_counter() - started)
        assert all(o is not None and not o.done for o in outcomes), outcomes
    total = sum(per_step)
    return {
        "reset_s": reset_s,
        "ms_per_pool_step": 1000 * total / steps,
        "median_ms_per_pool_step": 1000 * statistics.median(per_step),
        "episode_steps_per_s": pool.size * steps / total,
    }


def measure_pools(
    sizes: list[int], steps: int, actors: int, workloads: list[str]
) -> dict[str, Any]:
    import ray

    from sweworld.env.pool import EnvPool
    from sweworld.env.ray_pool import RayEnvPool
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    task = load_tasks(toy_tasks_path())[0]
    options = {"executor": "none", "reward": "none", "max_steps": steps + 5}
    rows = []
    with tempfile.TemporaryDirectory(prefix="ray-pool-bench-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        ray.init(num_cpus=actors, include_dashboard=False, log_to_driver=False)
        ray_start_s = time.perf_counter() - started
        try:
            for size in sizes:
                local_root = root / f"local-{size}"
                with (
                    SessionManager(runtime_root=local_root) as manager,
                    EnvPool(size=size, manager=manager, **options) as pool,
                ):
                    local = {w: _time_pool(pool, task, steps, WORKLOADS[w]) for w in workloads}
                started = time.perf_counter()
                with RayEnvPool(
                    size=size,
                    n_actors=actors,
                    manager={"runtime_root": root / f"ray-{size}"},
                    **options,
                ) as pool:
                    pool.live_sessions()  # the actors are up
                    actors_start_s = time.perf_counter() - started
                    remote = {w: _time_pool(pool, task, steps, WORKLOADS[w]) for w in workloads}
                for workload in workloads:
                    extra = (
                        remote[workload]["ms_per_pool_step"] - local[workload]["ms_per_pool_step"]
                    )
                    rows.append(
                        {
                            "workload": workload,
                            "size": size,
                            "steps": steps,
                            "actors": actors,
                            "in_process": local[workload],
                            "ray": remote[workload],
                            "ray_actors_start_s": actors_start_s,
                            "overhead_ms_per_pool_step": extra,
                            "overhead_ms_per_episode_step": extra / size,
                        }
                    )
                    _print_row(rows[-1])
        finally:
            ray.shutdown()
    return {
        "benchmark": "ray_pool_overhead",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "ray_version": ray.__version__,
        "ray_start_s": ray_start_s,
        "rows": rows,
    }


def _print_row(row: dict[str, Any]) -> None:
    local, remote = row["in_process"], row["ray"]
    if not hasattr(_print_row, "header"):
        _print_row.header = True  # type: ignore[attr-defined]
        print(
            f"{'workload':>8} {'size':>5} {'steps':>5} | {'in-process ms/step':>18} "
            f"{'steps/s':>8} | {'Ray ms/step':>11} {'steps/s':>8} | {'overhead ms/step':>16} "
            f"{'per episode step':>16}"
        )
    print(
        f"{row['workload']:>8} {row['size']:>5} {row['steps']:>5} | "
        f"{local['ms_per_pool_step']:>18.1f} {local['episode_steps_per_s']:>8.1f} | "
        f"{remote['ms_per_pool_step']:>11.1f} {remote['episode_steps_per_s']:>8.1f} | "
        f"{row['overhead_ms_per_pool_step']:>16.1f} {row['overhead_ms_per_episode_step']:>16.2f}",
        flush=True,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench ray-pool``."""
    parser.add_argument(
        "--sizes", type=at_least(1), nargs="+", default=[8, 32], help="episodes per pool"
    )
    parser.add_argument("--steps", type=at_least(1), default=20, help="pool steps timed")
    parser.add_argument("--actors", type=at_least(1), default=2, help="Ray actors (and CPUs)")
    parser.add_argument(
        "--workloads", nargs="+", choices=sorted(WORKLOADS), default=["sandbox", "refused"],
        help="what each step does",
    )  # fmt: skip
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench ray-pool``."""
    result = measure_pools(args.sizes, args.steps, args.actors, args.workloads)
    print(
        f"Ray start {result['ray_start_s']:.1f} s; actors start "
        + ", ".join(
            f"{r['ray_actors_start_s']:.1f} s (size {r['size']})"
            for r in result["rows"]
            if r["workload"] == args.workloads[0]
        )
        + "; steps/s = episode steps per second (size x steps / time)"
    )
    write_summary(args, "ray-pool", result, title="Ray pool overhead per step")
    return 0
