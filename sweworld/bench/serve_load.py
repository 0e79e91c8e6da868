"""World service under load: steps per second, p50 / p99 step latency, errors and memory per
live episode of ``sweworld serve world`` at 16, 64 and 256 concurrent clients, beside the
same steps through in-process episodes (the HTTP path's overhead), in one run.

A bounded load generator (asyncio + httpx; at most N clients in flight) drives a world
service that the script starts itself (``python -m sweworld serve world`` in a subprocess,
on loopback, with a bearer token). Each client, ``--rounds`` times: creates an episode of
the toy task, takes ``--steps`` steps of a fixed mix (a file view, a grep, an edit that
differs per client so that no two episodes share a state, a ``python -c`` run), ends it and
deletes it. The in-process side runs the same clients on :class:`~sweworld.env.Episode`
objects in this process, with the same shared executor, thread count and session layout
as the service (what the service itself does under each request).

Worlds: ``replay`` (default): ``executor`` = the simulator with a replay model that answers
at once (:func:`replay_executor`, imported by the server by its dotted path): what the
service and the environment cost, no model time. ``--model SPEC`` (e.g.
``openai:http://127.0.0.1:8000/v1#swt`` for a vLLM server) adds a ``model`` world at
``--model-levels``: the service with that SWT model. ``--local-levels`` adds a ``local``
world (every command run for real in the sandbox: a sandbox server per live episode).

Measured per level, once every client has created its episode and taken the mix once (all N
episodes live, their sandboxes started): memory (proportional set size of the server and
every process under it, its sandboxes included, minus the same before the level, per live
episode; in-process: this process's tree); then until the last step: ``steps/s`` (steps
finished in that window over its length: sustained, with episodes created and closed inside
it when ``--rounds`` > 1), p50 / p99 step latency (request to response, client side),
errors (any non-200, any exception, an episode that ended in ``error``; target 0).
``HTTP overhead`` is the HTTP p50 minus the in-process p50 at the same level.

    sweworld bench serve --quick    # 16 and 64 clients, ~1 min
    sweworld bench serve [--levels 16,64,256] [--steps 8] [--rounds 2]
        [--paths http,inprocess] [--model openai:URL#swt --model-levels 16]
        [--local-levels 16,64] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sweworld.bench.serve_load_drivers import (
    MIX,
    WORKERS,
    HttpDriver,
    InProcessDriver,
    Level,
    run_level,
)
from sweworld.bench.summary import add_report_arguments, write_summary
from sweworld.bench.throughput_measure import tree_pss_bytes

__all__ = ["add_arguments", "replay_executor", "run", "table"]

PROJECT = Path(__file__).resolve().parents[2]
TASKS = PROJECT / "data" / "toy" / "tasks.jsonl"


def _replay_answer(messages: Any) -> str:
    """The replay model's one answer: ``ok``, exit 0."""
    return json.dumps({"stdout": "ok\n", "stderr": "", "exit_code": 0})


def replay_executor(**_: Any) -> Any:
    """The simulator with a replay model that answers at once, batched as the service
    batches a real model (``--executor sweworld.bench.serve_load.replay_executor``)."""
    from sweworld.env.batching import BatchingLM
    from sweworld.models.replay import ReplayLM
    from sweworld.transition.simulated import SimulatedExecutor

    return SimulatedExecutor(BatchingLM(ReplayLM(_replay_answer)), mode="blind", step_timeout=300)


class Server:
    """``python -m sweworld serve world`` in a subprocess, on loopback, any free port."""

    def __init__(self, runtime: Path, executor: str, model: str, token: str) -> None:
        # each episode's disk is a RAM tmpfs within the server's disk budget: the load's
        # episodes write next to nothing, so a small quota lets 256 of them fit in memory
        from sweworld.bench.throughput_serve import (
            BENCH_DISK_MB,
            BENCH_SCRATCH_MB,
            bench_disk_budget_mb,
        )

        env = dict(os.environ, SWEWORLD_SCRATCH_MB=str(BENCH_SCRATCH_MB))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), env.get("PYTHONPATH")) if p)
        profile = os.environ.get("SERVE_LOAD_PROFILE")  # cProfile the server's event loop
        python = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
        command = [
            *python, "-m", "sweworld", "serve", "world", "--port", "0",
            "--token", token, "--tasks", str(TASKS), "--executor", executor, "--model", model,
            "--reward", "none", "--max-steps", "1000", "--workers", str(WORKERS),
            "--max-episodes-per-token", "100000", "--max-steps-per-minute", "10000000",
            "--max-creates-per-minute", "1000000", "--runtime-dir", str(runtime),
            "--log-level", "WARNING", "--disk-mb", str(BENCH_DISK_MB),
            "--max-live-episodes", "100000", "--disk-budget-mb", str(bench_disk_budget_mb(300)),
        ]  # fmt: skip
        self.log_path = runtime.parent / f"server-{runtime.name}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=PROJECT
        )
        self.url = self._wait_for_url(180.0)

    def _wait_for_url(self, timeout: float) -> str:
        found: list[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                if "http://" in line and not found:
                    found.append(line.split("http://", 1)[1].split()[0])

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the world service did not start; see {self.log_path}")
            time.sleep(0.05)
        return "http://" + found[0]

    def stop(self) -> int | None:
        """Stop the service (SIGTERM: it drains, then stops); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # graceful: drain, then stop
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


async def _wait_healthy(url: str) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=5.0) as client:
        for _ in range(200):
            try:
                if (await client.get("/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url}/health never answered")


async def _scrape(url: str, token: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    wanted = {
        "sweworld_steps_total", "sweworld_model_calls_total", "sweworld_cache_hits_total",
        "sweworld_real_runs_total", "sweworld_fallbacks_total", "sweworld_episodes_opened_total",
        "sweworld_episodes_live", "sweworld_http_errors_total",
    }  # fmt: skip
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name in wanted:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


async def http_world(
    world: str, executor: str, model: str, levels: list[int], args: Any, root: Path
) -> list[dict[str, Any]]:
    """One world through the service: a server of its own, a warm-up, then each level."""
    token = secrets.token_hex(16)
    started = time.perf_counter()
    server = Server(root / f"server-{world}", executor, model, token)
    rows = []
    try:
        await _wait_healthy(server.url)
        print(f"{world}: server up in {time.perf_counter() - started:.1f} s at {server.url}")
        pid = server.process.pid
        driver = HttpDriver(server.url, token)
        try:
            instance_id = _task().instance_id
            await run_level(
                driver, instance_id, Level("warm", 2, len(MIX), 1), lambda: 0
            )  # warm-up
            for clients in levels:
                level = Level(f"{world}{clients}", clients, args.steps, args.rounds)
                measure = lambda: tree_pss_bytes(pid)  # noqa: E731
                row = await run_level(driver, instance_id, level, measure, server_pid=pid)
                row.update(world=world, path="http")
                rows.append(row)
                print(_line(row), flush=True)
        finally:
            await driver.aclose()
        counters = await _scrape(server.url, token)
        print(f"{world}: server metrics {json.dumps(counters)}")
        if rows:
            rows[-1]["server_metrics"] = counters
    finally:
        code = server.stop()
        print(f"{world}: server stopped (exit {code}; log {server.log_path})")
    return rows


def _task() -> Any:
    """The toy task every client works on."""
    from sweworld import load_tasks

    return load_tasks(TASKS)[0]


async def inprocess_world(
    world: str, executor_spec: str, model: str, levels: list[int], args: Any, root: Path,
    exclude: int | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """One world on in-process episodes: the service's components, no HTTP."""
    from sweworld.env import EpisodeConfig
    from sweworld.env.batching import BatchingLM
    from sweworld.sandbox.manager import SessionManager
    from sweworld.world import WorldConfig, build_executor, lm_from_spec

    if executor_spec == "replay":
        config = EpisodeConfig(executor="none", reward="none", max_steps=1000)
        executor = replay_executor()
    elif executor_spec == "local":
        config = EpisodeConfig(executor="local", reward="none", max_steps=1000)
        executor = build_executor(WorldConfig.from_episode(config))
    else:
        config = EpisodeConfig(executor="simulated", model=model, reward="none", max_steps=1000)
        lm = BatchingLM(lm_from_spec(model))
        executor = build_executor(WorldConfig.from_episode(config), lm)
    manager = SessionManager(runtime_root=root / f"inprocess-{world}")
    task = _task()
    driver = InProcessDriver(config, executor, manager, {task.instance_id: task})
    rows = []
    try:
        await run_level(
            driver, task.instance_id, Level("warm", 2, len(MIX), 1), lambda: 0
        )  # warm-up
        for clients in levels:
            level = Level(f"{world}{clients}", clients, args.steps, args.rounds)
            measure = lambda: tree_pss_bytes(os.getpid(), exclude)  # noqa: E731
            row = await run_level(driver, task.instance_id, level, measure)
            row.update(world=world, path="inprocess")
            rows.append(row)
            print(_line(row), flush=True)
    finally:
        await driver.aclose()
        manager.close_all()
        close = getattr(getattr(executor, "lm", None), "close", None)
        if close is not None:
            close()
    return rows


def _line(row: dict[str, Any]) -> str:
    """One level's figures on one line (printed as each level ends)."""
    return (
        f"{row['world']:>7} {row['path']:>9} x{row['clients']:<4} {row['steps_per_s']:8.1f} "
        f"steps/s  p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  errors {row['errors']} "
        f"{row['error_kinds'] or ''} mem {row['mem_per_episode_mb']} MB/ep  "
        f"create p50 {row['create_p50_ms']} ms  wall {row['wall_s']} s  CPU ms/step "
        f"{row['server_cpu_ms_per_step']} server, {row['client_cpu_ms_per_step']} here"
    )


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: HTTP and in-process side by side per world and level."""
    by_key = {(r["world"], r["path"], r["clients"]): r for r in rows}
    head = (
        "| world | clients | HTTP steps/s | in-process steps/s | HTTP p50 / p99 (ms) | "
        "in-process p50 / p99 (ms) | HTTP overhead p50 (ms) | errors (HTTP, in-process) | "
        "server PSS per live episode (MB) | in-process PSS per episode (MB) | "
        "CPU ms per step: HTTP server + client, in-process |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    seen = []
    for r in rows:
        key = (r["world"], r["clients"])
        if key not in seen:
            seen.append(key)
    for world, clients in seen:
        http = by_key.get((world, "http", clients), {})
        local = by_key.get((world, "inprocess", clients), {})

        def get(row: dict, name: str) -> str:
            value = row.get(name)
            return "-" if value is None else str(value)

        overhead = "-"
        if http.get("p50_ms") is not None and local.get("p50_ms") is not None:
            overhead = f"{http['p50_ms'] - local['p50_ms']:.1f}"
        lines.append(
            f"| {world} | {clients} | {get(http, 'steps_per_s')} | {get(local, 'steps_per_s')} | "
            f"{get(http, 'p50_ms')} / {get(http, 'p99_ms')} | "
            f"{get(local, 'p50_ms')} / {get(local, 'p99_ms')} | {overhead} | "
            f"{get(http, 'errors')}, {get(local, 'errors')} | "
            f"{get(http, 'mem_per_episode_mb')} | {get(local, 'mem_per_episode_mb')} | "
            f"{get(http, 'server_cpu_ms_per_step')} + {get(http, 'client_cpu_ms_per_step')}, "
            f"{get(local, 'client_cpu_ms_per_step')} |"
        )
    return "\n".join(lines)


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every world on every path; the rows (written to ``--json`` as they come)."""
    levels = [int(x) for x in args.levels.split(",")]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    rows: list[dict[str, Any]] = []
    worlds = [("replay", "sweworld.bench.serve_load.replay_executor", "embedded", levels)]
    if args.model:
        model_levels = [int(x) for x in args.model_levels.split(",")]
        worlds.append(("model", "simulated", args.model, model_levels))
    if args.local_levels:
        worlds.append(
            ("local", "local", "embedded", [int(x) for x in args.local_levels.split(",")])
        )
    with tempfile.TemporaryDirectory(prefix="sweworld-serve-load-") as tmp:
        root = Path(tmp)
        for world, executor, model, world_levels in worlds:
            for path in paths:
                if path == "inprocess":
                    spec = {"replay": "replay", "local": "local"}.get(world, "simulated")
                    rows += await inprocess_world(world, spec, model, world_levels, args, root)
                elif path == "http":
                    rows += await http_world(world, executor, model, world_levels, args, root)
                else:
                    raise SystemExit(f"unknown path {path!r} (http, inprocess)")
                if args.json:
                    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench serve``."""
    parser.add_argument("--quick", action="store_true", help="16 and 64 clients, 1 round")
    parser.add_argument("--levels", default=None, help="concurrent clients (16,64,256)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode (8)")
    parser.add_argument("--rounds", type=int, default=None, help="episodes per client (2; quick 1)")
    parser.add_argument("--paths", default="http,inprocess", help="http, inprocess or both")
    parser.add_argument("--model", default=None, help="an SWT model spec for a 'model' world")
    parser.add_argument("--model-levels", default="16", help="clients for the model world (16)")
    parser.add_argument(
        "--local-levels", default="", help="clients for a 'local' world: real execution (off)"
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench serve``."""
    args.levels = args.levels or ("16,64" if args.quick else "16,64,256")
    args.rounds = args.rounds or (1 if args.quick else 2)
    started = time.perf_counter()
    try:
        rows = asyncio.run(amain(args))
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
        return 1
    print()
    print(table(rows))
    took = time.perf_counter() - started
    print(
        f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{args.steps} steps x {args.rounds} rounds per client; {took:.0f} s"
    )
    write_summary(args, "serve", rows, title="World service under load")
    return 0
