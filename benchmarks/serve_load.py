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
at once (``serve_load.replay_executor``, imported by the server by dotted path): what the
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

    python benchmarks/serve_load.py --quick                 # 16 and 64 clients, ~1 min
    python benchmarks/serve_load.py [--levels 16,64,256] [--steps 8] [--rounds 2]
        [--paths http,inprocess] [--model openai:URL#swt --model-levels 16]
        [--local-levels 16,64] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
TASKS = PROJECT / "data" / "toy" / "tasks.jsonl"
# what the server child needs to import this module by dotted path (serve_load:...)
BENCH_DIR = Path(__file__).resolve().parent

VIEW = (
    "<function=file_editor>\n<parameter=command>view</parameter>\n"
    "<parameter=path>/testbed/stockroom/textutil.py</parameter>\n</function>"
)
GREP = "grep -rn slugify /testbed/stockroom /testbed/tests"
EDIT = (
    "<function=file_editor>\n<parameter=command>str_replace</parameter>\n"
    "<parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
    "<parameter=old_str>import re</parameter>\n"
    "<parameter=new_str>import re  # client {i} step {j}</parameter>\n</function>"
)
PYTHON = "python -c 'from stockroom.textutil import slugify; print(slugify(\"Client {i}!\"))'"
MIX = (("view", VIEW), ("grep", GREP), ("edit", EDIT), ("python", PYTHON))
#: Threads that run episode calls, in the service (``--workers``) and in process alike.
WORKERS = 256


def action(i: str, j: int) -> str:
    """The ``j``-th action of client ``i`` (the edit and the run differ per client and step,
    so that the simulator's cache never answers one episode with another's prediction)."""
    return MIX[j % len(MIX)][1].replace("{i}", i).replace("{j}", str(j))


# ---------------------------------------------------------------------- the replay world


def _replay_answer(messages: Any) -> str:
    return json.dumps({"stdout": "ok\n", "stderr": "", "exit_code": 0})


def replay_executor(**_: Any) -> Any:
    """The simulator with a replay model that answers at once, batched as the service
    batches a real model (``--executor serve_load.replay_executor``)."""
    from sweworld.env.batching import BatchingLM
    from sweworld.models.replay import ReplayLM
    from sweworld.transition.simulated import SimulatedExecutor

    return SimulatedExecutor(BatchingLM(ReplayLM(_replay_answer)), mode="blind", step_timeout=300)


# ---------------------------------------------------------------------- memory


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every process under it, with their
    reaped children's (the commands that ran and exited)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


def tree_pss_bytes(root: int, exclude: int | None = None) -> int:
    """PSS of ``root`` and every process under it (but ``exclude``'s subtree)."""
    skip = set(_tree(exclude)) if exclude else set()
    return 1024 * sum(_pss_kb(pid) for pid in _tree(root) if pid not in skip)


# ---------------------------------------------------------------------- drivers


class StepFailed(Exception):
    """A call answered with an error (its kind is the message)."""


class HttpDriver:
    """The world service through its HTTP API: one httpx client (one connection) per load
    client, as separate trainer processes would have (one shared pool of hundreds of
    connections costs httpx several ms of CPU per request, which on a small machine is
    taken from the server)."""

    name = "http"

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.clients: dict[int, Any] = {}

    def _client(self, slot: int) -> Any:
        import httpx

        client = self.clients.get(slot)
        if client is None:
            client = self.clients[slot] = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self.headers,
                timeout=httpx.Timeout(900.0, connect=30.0),
                # an idle connection is dropped well before uvicorn's keep-alive timeout
                # (5 s): reusing one the server is closing that moment fails (ReadError)
                limits=httpx.Limits(max_connections=1, keepalive_expiry=2.0),
            )
        return client

    async def prepare(self, clients: int) -> None:
        """Make the clients before the level is measured (building one costs ~ms)."""
        for slot in range(clients):
            self._client(slot)

    async def _post(self, client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(path, json=body)
        if response.status_code != 200:
            raise StepFailed(_http_error(response))
        return response.json()

    async def create(self, instance_id: str, slot: int) -> tuple[Any, str]:
        client = self._client(slot)
        started = await self._post(client, "/v1/episodes", {"instance_id": instance_id})
        return client, started["episode_id"]

    async def step(self, handle: tuple[Any, str], text: str) -> dict[str, Any]:
        client, episode_id = handle
        return (await self._post(client, f"/v1/episodes/{episode_id}/step", {"action": text}))[
            "info"
        ]

    async def end(self, handle: tuple[Any, str]) -> None:
        client, episode_id = handle
        await self._post(client, f"/v1/episodes/{episode_id}/end", {"reason": "max_steps"})
        response = await client.delete(f"/v1/episodes/{episode_id}")
        if response.status_code != 200:
            raise StepFailed(_http_error(response))

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()


def _http_error(response: Any) -> str:
    """``http_<status>:<error code>`` (the ErrorBody's code when there is one)."""
    try:
        code = response.json().get("error")
    except ValueError:
        code = None
    if os.environ.get("SERVE_LOAD_DEBUG"):
        print(response.status_code, response.text[:500], file=sys.stderr)
    return f"http_{response.status_code}" + (f":{code}" if isinstance(code, str) else "")


class InProcessDriver:
    """The same calls on Episode objects in this process (the service's own components:
    one shared executor and rewarder, a thread pool of the service's size)."""

    name = "inprocess"

    def __init__(self, config: Any, executor: Any, manager: Any, tasks: dict[str, Any]):
        from sweworld.env.rewards import EpisodeRewarder

        self.config = config
        self.executor = executor
        self.manager = manager
        self.rewarder = EpisodeRewarder(config, manager=manager)
        self.tasks = tasks
        self.threads = concurrent.futures.ThreadPoolExecutor(WORKERS, "bench-episode")

    async def prepare(self, clients: int) -> None:
        """Nothing to prepare in process."""

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.threads, fn, *args)

    async def create(self, instance_id: str, slot: int) -> Any:
        from sweworld.env import Episode

        def open_episode() -> Any:
            episode = Episode(config=self.config, manager=self.manager, executor=self.executor,
                              rewarder=self.rewarder)  # fmt: skip
            episode.reset(self.tasks[instance_id])
            return episode

        return await self._run(open_episode)

    async def step(self, handle: Any, text: str) -> dict[str, Any]:
        return (await self._run(handle.step, text)).info

    async def end(self, handle: Any) -> None:
        def end_and_close() -> None:
            try:
                handle.end("max_steps")
            finally:
                handle.close()

        await self._run(end_and_close)

    async def aclose(self) -> None:
        self.threads.shutdown(wait=True)
        self.rewarder.close() if hasattr(self.rewarder, "close") else None


# ---------------------------------------------------------------------- one level


@dataclass
class Level:
    name: str
    clients: int
    steps: int
    rounds: int
    latencies: list[float] = field(default_factory=list)  # steps begun in the window
    create_s: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)  # the first errors' messages
    sources: dict[str, int] = field(default_factory=dict)
    window_start: float = 0.0
    last_step_end: float = 0.0
    steps_in_window: int = 0
    steps_total: int = 0

    def error(self, kind: str, message: str = "") -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if message and len(self.samples) < 3:
            self.samples.append(f"{kind}: {message[:300]}")


async def run_level(
    driver: Any, instance_id: str, level: Level, measure: Any, server_pid: int | None = None
) -> dict[str, Any]:
    """N clients at once; memory measured once all N episodes are live; CPU time of this
    process (the clients, and the episodes when in process) and of the server's tree."""
    arrived = 0
    all_live = asyncio.Event()
    memory: dict[str, float] = {}

    def arrive() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == level.clients:
            memory["live_bytes"] = measure()
            level.window_start = time.perf_counter()
            all_live.set()

    async def client(i: int) -> None:
        waiting = True  # until this client has an episode that stepped once (or failed)
        for r in range(level.rounds):
            name = f"{level.name}-{i}-{r}"
            handle = None
            try:
                started = time.perf_counter()
                handle = await driver.create(instance_id, i)
                level.create_s.append(time.perf_counter() - started)
            except Exception as exc:
                level.error(f"create:{_kind(exc)}", str(exc))
            for j in range(level.steps if handle is not None else 0):
                started = time.perf_counter()
                try:
                    info = await driver.step(handle, action(name, j))
                except Exception as exc:
                    level.error(f"step:{_kind(exc)}", str(exc))
                    break
                ended = time.perf_counter()
                level.steps_total += 1
                if started >= level.window_start > 0:
                    level.latencies.append(ended - started)
                    level.steps_in_window += 1
                    level.last_step_end = max(level.last_step_end, ended)
                _count(level, info)
                if waiting and j >= min(level.steps, len(MIX)) - 1:  # the mix ran once
                    waiting = False
                    arrive()
                    await all_live.wait()
            if waiting:  # a failed client still lets the others go on
                waiting = False
                arrive()
                await all_live.wait()
            if handle is not None:
                try:
                    await driver.end(handle)
                except Exception as exc:
                    level.error(f"end:{_kind(exc)}", str(exc))

    await driver.prepare(level.clients)
    base = measure()
    own_cpu = time.process_time()
    server_cpu = tree_cpu_s(server_pid) if server_pid else 0.0
    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(level.clients)))
    wall = time.perf_counter() - started
    own_cpu = time.process_time() - own_cpu
    server_cpu = tree_cpu_s(server_pid) - server_cpu if server_pid else 0.0
    per_step = 1000 / max(level.steps_total, 1)
    window = max(level.last_step_end - level.window_start, 1e-9)
    lat = sorted(level.latencies)
    return {
        "clients": level.clients,
        "steps": level.steps_total,
        "wall_s": round(wall, 2),
        "steps_per_s": round(level.steps_in_window / window, 2) if lat else 0.0,
        "p50_ms": round(1000 * _percentile(lat, 0.50), 1) if lat else None,
        "p99_ms": round(1000 * _percentile(lat, 0.99), 1) if lat else None,
        "create_p50_ms": round(1000 * statistics.median(level.create_s), 1)
        if level.create_s
        else None,
        "errors": sum(level.errors.values()),
        "error_kinds": dict(level.errors),
        "error_samples": list(level.samples),
        "mem_per_episode_mb": round(
            (memory.get("live_bytes", base) - base) / level.clients / 2**20, 2
        ),
        "execution_sources": dict(level.sources),
        "client_cpu_ms_per_step": round(own_cpu * per_step, 2),
        "server_cpu_ms_per_step": round(server_cpu * per_step, 2) if server_pid else None,
    }


def _percentile(values: list[float], q: float) -> float:
    index = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[index]


def _kind(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, StepFailed) else type(exc).__name__


def _count(level: Level, info: dict[str, Any]) -> None:
    if info.get("reason") == "error" or info.get("executor_error"):
        level.error("episode_error")
        if len(level.samples) < 3:
            level.samples.append(str(info.get("executor_error") or info.get("error"))[:300])
    for call in info.get("execution_calls") or ():
        call_info = call.get("info") or {}
        source = "real" if call_info.get("executed") else str(call_info.get("source", "?"))
        if call_info.get("cache_hit"):
            source = "cache"
        level.sources[source] = level.sources.get(source, 0) + 1


# ---------------------------------------------------------------------- the server


class Server:
    """``python -m sweworld serve world`` in a subprocess, on loopback, any free port."""

    def __init__(self, runtime: Path, executor: str, model: str, token: str):
        # each episode's disk is a RAM tmpfs within the server's disk budget: the load's
        # episodes write next to nothing, so a small quota lets 256 of them fit in memory
        from sweworld.bench.throughput_serve import (
            BENCH_DISK_MB,
            BENCH_SCRATCH_MB,
            bench_disk_budget_mb,
        )

        env = dict(os.environ, SWEWORLD_SCRATCH_MB=str(BENCH_SCRATCH_MB))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(BENCH_DIR), str(PROJECT), env.get("PYTHONPATH", "")) if p
        )
        profile = os.environ.get("SERVE_LOAD_PROFILE")  # cProfile the server's event loop
        python = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
        command = [
            *python, "-m", "sweworld", "serve", "world", "--port", "0",
            "--token", token, "--tasks", str(TASKS), "--executor", executor, "--model", model,
            "--reward", "none", "--max-steps", "1000", "--workers", str(WORKERS),
            "--max-episodes-per-token", "100000", "--max-steps-per-minute", "100000000",
            "--max-creates-per-minute", "10000000", "--runtime-dir", str(runtime),
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


# ---------------------------------------------------------------------- runs


async def http_world(
    world: str, executor: str, model: str, levels: list[int], args: Any, root: Path
) -> list[dict[str, Any]]:
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
    from sweworld import load_tasks

    return load_tasks(TASKS)[0]


async def inprocess_world(
    world: str, executor_spec: str, model: str, levels: list[int], args: Any, root: Path,
    exclude: int | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    from sweworld.env import EpisodeConfig
    from sweworld.env.batching import BatchingLM
    from sweworld.env.pool import build_pool_executor
    from sweworld.sandbox.manager import SessionManager

    if executor_spec == "replay":
        config = EpisodeConfig(executor="none", reward="none", max_steps=1000)
        executor = replay_executor()
    elif executor_spec == "local":
        config = EpisodeConfig(executor="local", reward="none", max_steps=1000)
        executor = build_pool_executor(config, None)
    else:
        from sweworld.models import make_lm

        config = EpisodeConfig(executor="simulated", model=model, reward="none", max_steps=1000)
        executor = build_pool_executor(config, BatchingLM(make_lm(model)))
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
    levels = [int(x) for x in args.levels.split(",")]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    rows: list[dict[str, Any]] = []
    worlds = [("replay", "serve_load.replay_executor", "embedded", levels)]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--json", default=None, help="write the rows to this file")
    args = parser.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
