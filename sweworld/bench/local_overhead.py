"""Real-execution benchmark: LocalExecutor against a bare ``python -m pytest``, side by side.

For the toy repository and one real library from PyPI (more-itertools' source distribution,
with its own test suite), measures:
  * the same pytest command run bare on the host (the environment's python, a plain copy of
    the checkout, no sandbox) and through a session with the local executor (interception,
    the executor's warm bubblewrap sandbox): p50 of each and the overhead;
  * environment build time, cold (forced rebuild) and cached.

    sweworld bench local-overhead [--runs 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from sweworld.bench.sandbox import fetch_sdist
from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["add_arguments", "run"]


#: Downloaded source distributions (pip download), kept between runs.
LIBRARY = "more-itertools==10.5.0"


def p50(values: list[float]) -> float:
    """The median."""
    return statistics.median(values)


def fetch_library() -> Path:
    """more-itertools' source tree (pip download, once; kept under the benchmarks' cache)."""
    return fetch_sdist(LIBRARY, "more[-_]itertools-*")


def measure(name, manager, task, repo_path, command, runs, executor_cls):
    base = manager.checkout(task, repo_path=repo_path, history="none")
    executor = executor_cls(timeout=600)
    t0 = time.perf_counter()
    env = executor.environment(task, base.path, rebuild=True)
    cold = time.perf_counter() - t0
    if not env.ok:
        raise SystemExit(f"{name}: environment failed:\n{env.log_tail()}")
    t0 = time.perf_counter()
    executor.environment(task, base.path)
    cached = time.perf_counter() - t0

    # bare: the environment's python on a plain copy of the checkout, no sandbox at all
    # (the copy is imported through PYTHONPATH, the sandbox uses the editable install).
    scratch = Path(tempfile.mkdtemp(prefix="bare-"))
    shutil.copytree(base.path, scratch / "repo", symlinks=True)
    python = str(env.venv / "bin" / "python")
    host_env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(scratch / "repo"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    rows = {}
    with manager.open(task, repo_path=repo_path, executor=executor, history="none") as session:
        for label, cmd in (("pytest", command), ("python -c pass", "python -c pass")):
            session.run(cmd)  # warm both sandboxes
            bare, sandboxed, inner = [], [], []
            for _ in range(runs):  # interleaved, so that drift hits both sides alike
                t = time.perf_counter()
                proc = subprocess.run(
                    cmd.replace("python", python, 1),
                    shell=True,
                    cwd=scratch / "repo",
                    capture_output=True,
                    env=host_env,
                )
                bare.append(time.perf_counter() - t)
                t = time.perf_counter()
                out = session.run(cmd)
                sandboxed.append(time.perf_counter() - t)
                inner.append(out.info["execution_calls"][0]["info"]["sandbox_wall_s"])
            rows[label] = {
                "bare_p50_s": p50(bare),
                "sweworld_p50_s": p50(sandboxed),
                "overhead_p50_ms": (p50(sandboxed) - p50(bare)) * 1000,
                "executor_sandbox_p50_s": p50(inner),
                "bare_exit": proc.returncode,
                "sweworld_exit": out.exit_code,
            }
    shutil.rmtree(scratch, ignore_errors=True)
    executor.close()
    print(f"{name}")
    for label, cmd in (("pytest", command), ("python -c pass", "python -c pass")):
        r = rows[label]
        print(f"  `{cmd}`")
        print(
            f"    bare (no sandbox)                   p50 {r['bare_p50_s'] * 1000:8.1f} ms "
            f"(exit {r['bare_exit']})"
        )
        print(
            f"    through sweworld (local executor)   p50 {r['sweworld_p50_s'] * 1000:8.1f} ms "
            f"(exit {r['sweworld_exit']})"
        )
        print(
            f"      of which the real run in its sandbox  "
            f"{r['executor_sandbox_p50_s'] * 1000:8.1f} ms"
        )
        print(
            f"    overhead                                 {r['overhead_p50_ms']:8.1f} ms "
            "(target < 50 ms)"
        )
    print(f"  environment build: cold {cold:6.1f} s, cached {cached * 1000:6.2f} ms\n")
    row = {**rows, "env_build_cold_s": cold, "env_build_cached_s": cached}
    return row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench local-overhead``."""
    parser.add_argument("--runs", type=int, default=15, help="runs of each command (p50)")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench local-overhead``."""

    from sweworld.execution.local import LocalExecutor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    manager = SessionManager()
    toy = load_tasks(toy_tasks_path())[0]
    results = {
        "toy": measure(
            "toy (stockroom)",
            manager,
            toy,
            None,
            "python -m pytest -rA -p no:cacheprovider tests",
            args.runs,
            LocalExecutor,
        )
    }
    lib = fetch_library()
    task = SimpleNamespace(
        repo="more-itertools/more-itertools",
        version=lib.name,
        base_commit=None,
        environment_setup_commit=None,
        setup_patch="",
        instance_id="more-itertools",
    )
    results["more_itertools"] = measure(
        f"{lib.name} (PyPI sdist)",
        manager,
        task,
        lib,
        "python -m pytest -q -p no:cacheprovider tests/test_recipes.py",
        args.runs,
        LocalExecutor,
    )
    manager.close_all()
    write_summary(args, "local-overhead", results, title="LocalExecutor vs bare pytest")
    return 0
