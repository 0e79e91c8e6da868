"""The load of ``sweworld bench serve`` (:mod:`sweworld.bench.serve_load`): the step mix,
the two drivers (the world service over HTTP, :class:`HttpDriver`; the same calls on
in-process episodes, :class:`InProcessDriver`) and one load level, :func:`run_level`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sweworld.bench.similarity import percentile
from sweworld.bench.throughput_measure import tree_cpu_s

__all__ = [
    "MIX",
    "WORKERS",
    "HttpDriver",
    "InProcessDriver",
    "Level",
    "StepFailed",
    "action",
    "run_level",
]

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


@dataclass
class Level:
    """One load level's clients and what they saw (latencies of the steps begun in the
    measured window, create times, errors by kind, where execution answers came from)."""

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
        """Count one error of ``kind`` (the first three messages are kept)."""
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
        "p50_ms": round(1000 * percentile(lat, 50), 1) if lat else None,
        "p99_ms": round(1000 * percentile(lat, 99), 1) if lat else None,
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
