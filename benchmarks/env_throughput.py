"""Environment throughput: steps per second and memory per live episode of an EnvPool at
1, 16, 64 and 256 concurrent episodes, for three worlds side by side in one run:

- ``replay``: ``executor="simulated"`` with a replay model that answers at once (what the
  environment itself costs: sandboxed file operations, routing, the simulator's context
  and facts, validation, the batching wrapper);
- ``embedded``: the embedded default model on this CPU (a model call takes seconds, so
  only small counts: by default 1 and 16 episodes, and only the model-bound steps);
- ``local``: the LocalExecutor running the same commands for real in the sandbox.

Each episode of the toy task runs a fixed step mix, all slots in lock step (``pool.step``):
a file view, a grep, an edit (a per-episode comment, so that no two episodes share a
state and the simulator's cache never answers for another episode), a python run and a
pytest run. ``steps/s`` counts every slot's step over the wall time of the stepping;
``reset s`` is the wall time to open every episode's session; memory is the growth of the
proportional set size (PSS) of this process and every process under it (the sandbox
servers) once every episode has stepped, per episode, and the disk of the sessions' state folders
per episode. The reward is off (this measures the environment, not the reward).

    python benchmarks/env_throughput.py --quick
    python benchmarks/env_throughput.py [--levels 1,16,64,256] [--embedded-levels 1,16]
        [--worlds replay,embedded,local] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from sweworld.bench.throughput_measure import process_tree as _descendants  # noqa: E402

VIEW = (
    "<function=file_editor>\n<parameter=command>view</parameter>\n"
    "<parameter=path>/testbed/stockroom/textutil.py</parameter>\n</function>"
)
GREP = "grep -rn slugify /testbed/stockroom /testbed/tests"
EDIT = (
    "<function=file_editor>\n<parameter=command>str_replace</parameter>\n"
    "<parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
    "<parameter=old_str>import re</parameter>\n"
    "<parameter=new_str>import re  # episode {i}</parameter>\n</function>"
)
PYTHON = "python -c 'from stockroom.textutil import slugify; print(slugify(\"Episode {i}!\"))'"
PYTEST = "python -m pytest tests/test_textutil.py -q"

MIX = [("view", VIEW), ("grep", GREP), ("edit", EDIT), ("python", PYTHON), ("pytest", PYTEST)]
#: The embedded model is slow: the edit (for distinct states) and the two model-bound steps.
EMBEDDED_MIX = [("edit", EDIT), ("python", PYTHON), ("pytest", PYTEST)]


def _replay_answer(messages: list[dict[str, str]]) -> str:
    return json.dumps({"stdout": "ok\n", "stderr": "", "exit_code": 0})


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_pss_bytes() -> int:
    """PSS of this process and every process under it."""
    return 1024 * sum(_pss_kb(pid) for pid in _descendants(os.getpid()))


def run_level(world: str, size: int, mix: list[tuple[str, str]], lm: Any, root: Path) -> dict:
    from sweworld import load_tasks
    from sweworld.env.pool import EnvPool
    from sweworld.env.warm import tree_bytes
    from sweworld.sandbox.manager import SessionManager

    task = load_tasks(PROJECT / "data/toy/tasks.jsonl")[0]
    options: dict[str, Any] = {"reward": "none", "max_steps": 100, "step_timeout_s": 600.0}
    if world == "local":
        options["executor"] = "local"
    else:
        options["executor"] = "simulated"
        options["lm"] = lm
        options["max_batch"] = 8 if world == "embedded" else 64
        options["batch_wait_s"] = 0.02
    manager = SessionManager(runtime_root=root / f"{world}-{size}")
    pool = EnvPool(size=size, manager=manager, **options)
    row: dict[str, Any] = {"world": world, "episodes": size, "steps_per_episode": len(mix)}
    try:
        base_mem = tree_pss_bytes()
        base_procs = len(_descendants(os.getpid()))
        started = time.perf_counter()
        pool.reset([task] * size)
        row["reset_s"] = time.perf_counter() - started
        per_kind: dict[str, float] = {}
        sources: dict[str, int] = {}
        stepping = 0.0
        for kind, template in mix:
            actions = [template.replace("{i}", str(i)) for i in range(size)]
            started = time.perf_counter()
            outcomes = pool.step(actions)
            took = time.perf_counter() - started
            stepping += took
            per_kind[kind] = took
            for outcome in outcomes if world != "local" else ():
                for call in outcome.info.get("execution_calls") or []:
                    source = str((call.get("info") or {}).get("source", "?"))
                    sources[source] = sources.get(source, 0) + 1
        # Every episode is live (its sandbox server runs since its first command).
        row["mem_per_episode_mb"] = (tree_pss_bytes() - base_mem) / size / 2**20
        row["disk_per_episode_kb"] = tree_bytes(manager.sessions_dir) / size / 1024
        row["processes_per_episode"] = (len(_descendants(os.getpid())) - base_procs) / size
        steps = size * len(mix)
        row["steps"] = steps
        row["step_s"] = stepping
        row["steps_per_s"] = steps / stepping if stepping else 0.0
        row["round_s"] = {k: round(v, 3) for k, v in per_kind.items()}
        row["execution_sources"] = sources
        if pool.lm is not None:
            row["lm_batches"] = pool.lm.stats.to_dict()
    finally:
        pool.close()
        manager.close_all()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 16 episodes; embedded: 1")
    parser.add_argument("--levels", default=None, help="episode counts (default 1,16,64,256)")
    parser.add_argument("--embedded-levels", default=None, help="(default 1,16; quick: 1)")
    parser.add_argument("--worlds", default="replay,embedded,local")
    parser.add_argument("--json", default=None, help="write the rows to this file")
    args = parser.parse_args(argv)
    levels = [int(x) for x in (args.levels or ("1,16" if args.quick else "1,16,64,256")).split(",")]
    embedded_levels = [
        int(x) for x in (args.embedded_levels or ("1" if args.quick else "1,16")).split(",")
    ]
    worlds = [w.strip() for w in args.worlds.split(",") if w.strip()]
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))

    from sweworld.models.replay import ReplayLM

    rows: list[dict[str, Any]] = []
    # A run stopped from outside (timeout, Ctrl-C) still prints and saves what it measured.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with tempfile.TemporaryDirectory(prefix="sweworld-env-bench-") as tmp:
            root = Path(tmp)
            for world in worlds:
                lm: Any = None
                mix, sizes = MIX, levels
                if world == "replay":
                    lm = ReplayLM(_replay_answer)
                elif world == "embedded":
                    from sweworld.models import make_lm

                    started = time.perf_counter()
                    lm = make_lm("embedded")
                    took = time.perf_counter() - started
                    print(f"embedded model loaded in {took:.1f} s", flush=True)
                    mix, sizes = EMBEDDED_MIX, embedded_levels
                elif world != "local":
                    parser.error(f"unknown world {world!r}")
                for size in sizes:
                    row = run_level(world, size, mix, lm, root)
                    rows.append(row)
                    print(_line(row), flush=True)
                    if args.json:
                        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
                if lm is not None:
                    lm.close()
    except KeyboardInterrupt:
        print("\nstopped: the table holds the levels that finished", flush=True)
    print()
    print(table(rows))
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    return 0


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['world']:>8} x{row['episodes']:<4} {row['steps_per_s']:8.2f} steps/s  "
        f"reset {row['reset_s']:.2f}s  mem {row['mem_per_episode_mb']:.2f} MB/ep  "
        f"rounds {row['round_s']}  sources {row['execution_sources']}  "
        f"batches {row.get('lm_batches', {}).get('mean_batch', '-')}"
    )


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the rows."""
    head = (
        "| world | episodes | steps | steps/s | reset (s) | PSS per episode (MB) | "
        "disk per episode (KB) | mean LM batch |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for row in rows:
        batch = row.get("lm_batches", {}).get("mean_batch", "-")
        lines.append(
            f"| {row['world']} | {row['episodes']} | {row['steps']} | {row['steps_per_s']:.2f} | "
            f"{row['reset_s']:.2f} | {row['mem_per_episode_mb']:.2f} | "
            f"{row['disk_per_episode_kb']:.0f} | {batch} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
