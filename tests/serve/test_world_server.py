"""The world service under a real uvicorn on a loopback port (httpx requests): health, docs,
auth, episodes, concurrency, a client that disconnects mid-step, and the ``sweworld serve
world`` process's graceful shutdown (SIGTERM drains a step in flight, then nothing is left)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import PROJECT, requires_sandbox

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
httpx = pytest.importorskip("httpx")

import uvicorn  # noqa: E402

from sweworld.env import EpisodeConfig  # noqa: E402
from sweworld.sandbox import bwrap  # noqa: E402
from sweworld.serve.world import draining, server  # noqa: E402
from sweworld.serve.world.app import JsonErrors, create_app  # noqa: E402
from sweworld.serve.world.config import ServiceConfig  # noqa: E402
from sweworld.serve.world.connections import (  # noqa: E402
    ConnectionLimits,
    ConnectionTracker,
    protocol_class,
)

pytestmark = requires_sandbox

TOKEN = "loopback-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TASKS = str(PROJECT / "data" / "toy" / "tasks.jsonl")
TOY_ID = "sweworld__stockroom-1"


@pytest.fixture
def live(tmp_path):
    """A uvicorn server in a thread on a free loopback port: ``(base_url, app)``."""
    config = ServiceConfig(
        tokens=(TOKEN,),
        episode=EpisodeConfig(executor="none", reward="none"),
        tasks=TASKS,
        runtime_root=str(tmp_path / "runtime"),
    )
    app = create_app(config)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    tracker = ConnectionTracker(ConnectionLimits(), app.state.world.metrics)
    # the stack `sweworld serve world` runs: JSON errors around the app, the tracked protocol
    uv = uvicorn.Server(uvicorn.Config(JsonErrors(app), http=protocol_class(tracker),
                                       log_config=None, access_log=False))  # fmt: skip
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", app
    uv.should_exit = True
    thread.join(30)
    sock.close()
    assert not thread.is_alive()
    assert list((tmp_path / "runtime" / "sessions").iterdir()) == []  # closed at shutdown


def _create(client) -> str:
    response = client.post("/v1/episodes", json={"instance_id": TOY_ID})
    assert response.status_code == 200, response.text
    return response.json()["episode_id"]


def test_health_docs_auth_and_an_episode(live):
    base, _ = live
    assert httpx.get(f"{base}/health").json()["status"] == "ok"
    docs = httpx.get(f"{base}/docs")
    assert docs.status_code == 200 and "openapi.json" in docs.text
    assert "/v1/episodes" in httpx.get(f"{base}/openapi.json").json()["paths"]
    assert httpx.post(f"{base}/v1/episodes", json={"instance_id": TOY_ID}).status_code == 401
    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
        episode_id = _create(client)
        out = client.post(f"/v1/episodes/{episode_id}/step", json={"action": "echo hello"}).json()
        assert "hello" in out["observation"] and out["terminated"] is False
        finish = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"
        end = client.post(f"/v1/episodes/{episode_id}/step", json={"action": finish}).json()
        assert end["terminated"] and end["info"]["reason"] == "submitted"
        metrics = client.get("/metrics").text
        assert "sweworld_steps_total" in metrics and "sweworld_episodes_live 1.0" in metrics


def test_concurrent_steps_on_different_episodes_and_busy(live):
    base, _ = live
    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
        ids = [_create(client) for _ in range(4)]
    results: dict[str, int] = {}

    def sleep_step(episode_id: str) -> None:
        with httpx.Client(base_url=base, headers=AUTH, timeout=30) as own:
            response = own.post(f"/v1/episodes/{episode_id}/step", json={"action": "sleep 2"})
            results[episode_id] = response.status_code

    started = time.monotonic()
    threads = [threading.Thread(target=sleep_step, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    busy = httpx.post(f"{base}/v1/episodes/{ids[0]}/step", json={"action": "ls"}, headers=AUTH)
    assert busy.status_code == 409 and busy.json()["error"] == "busy"
    assert httpx.get(f"{base}/health").status_code == 200  # the loop is not blocked
    for thread in threads:
        thread.join(30)
    assert results == {i: 200 for i in ids}
    assert time.monotonic() - started < 6.0  # in parallel, not 4 x 2 s in a row


def test_client_that_disconnects_mid_step(live):
    base, _ = live
    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
        episode_id = _create(client)
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"/v1/episodes/{episode_id}/step",
                        json={"action": "sleep 1; echo kept > kept.txt"}, timeout=0.3)  # fmt: skip
        deadline = time.monotonic() + 10
        while client.get(f"/v1/episodes/{episode_id}").json()["idle_s"] == 0.0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        state = client.get(f"/v1/episodes/{episode_id}").json()
        assert state["steps"] == 1  # the step completed
        out = client.post(f"/v1/episodes/{episode_id}/step", json={"action": "cat kept.txt"})
        assert "kept" in out.json()["observation"]


def test_options_and_refusal_without_token(capsys):
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args(["--port", "0", "--tasks", TASKS])
    assert server.run(args) == 2
    assert "token" in capsys.readouterr().err
    args = parser.parse_args(["--token", "k" * 10, "--executor", "local", "--idle-timeout", "5",
                              "--max-episodes-per-token", "3"])  # fmt: skip
    config = server.config_from_args(args)
    assert config.tokens == ("k" * 10,) and config.episode.executor == "local"
    assert config.idle_timeout_s == 5 and config.max_episodes_per_token == 3


def test_sigterm_drains_a_step_in_flight(tmp_path):
    runtime = tmp_path / "runtime"
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweworld.serve.world.server", "--port", "0", "--token", TOKEN,
         "--tasks", TASKS, "--executor", "none", "--reward", "none",
         "--runtime-dir", str(runtime), "--log-format", "text"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, line + proc.stderr.read()
        base = f"http://127.0.0.1:{found.group(1)}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
            episode_id = _create(client)
        result: dict[str, httpx.Response] = {}

        def slow_step() -> None:
            with httpx.Client(base_url=base, headers=AUTH, timeout=30) as own:
                result["step"] = own.post(f"/v1/episodes/{episode_id}/step",
                                          json={"action": "sleep 3; echo drained"})  # fmt: skip

        thread = threading.Thread(target=slow_step)
        thread.start()
        deadline = time.monotonic() + 20
        with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
            while client.get(f"/v1/episodes/{episode_id}").json()["idle_s"] != 0.0:
                assert time.monotonic() < deadline, "the step did not start"
                time.sleep(0.05)  # until the step is in flight (a busy episode is never idle)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while httpx.get(f"{base}/health").json()["status"] != "draining":
            assert time.monotonic() < deadline, "the service did not start draining"
            time.sleep(0.05)
        refused = httpx.post(f"{base}/v1/episodes", json={"instance_id": TOY_ID}, headers=AUTH)
        assert refused.status_code == 503 and refused.json()["error"] == "draining"
        assert httpx.get(f"{base}/health").json()["status"] == "draining"
        thread.join(30)
        assert result["step"].status_code == 200
        assert "drained" in result["step"].json()["observation"]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list((runtime / "sessions").iterdir()) == []  # nothing leaked


def test_a_signal_inside_the_loops_lock_neither_hangs_the_loop_nor_is_lost(tmp_path):
    """Python runs a signal handler in the main thread between two bytecodes: a SIGTERM
    that came while the event loop held the handler's (plain) lock used to take that lock
    again in the handler, and the service hung for good (CI: /health timed out after the
    signal). The handler now only queues it; the relay thread starts the drain."""
    from sweworld.serve.world.handler import WorldHandler

    config = ServiceConfig(no_auth=True, episode=EpisodeConfig(executor="none", reward="none"),
                           runtime_root=str(tmp_path))  # fmt: skip
    world = WorldHandler(config)
    returned = threading.Event()
    try:
        srv = draining.draining_server(uvicorn.Config(app=None), world)
        srv.start_signal_relay(None)

        def loop_thread() -> None:
            with world._lock:  # what `_call` does on the event loop
                srv.handle_exit(signal.SIGTERM, None)
            returned.set()

        threading.Thread(target=loop_thread, daemon=True).start()
        assert returned.wait(10), "the signal handler blocked on the lock its thread held"
        deadline = time.monotonic() + 10
        while not srv.should_exit:
            assert time.monotonic() < deadline, "the signal was not acted on"
            time.sleep(0.01)
        assert world.draining and world.health().status == "draining"
    finally:
        if returned.is_set():  # else the lock stays held: closing would wait for it
            world.close()


def test_the_signal_relay_outlives_a_failure_and_stops_the_server(caplog) -> None:
    """A failure while acting on a signal (no thread could start, say) is logged and
    stops the server at once; it does not kill the relay and leave a draining service
    that no later signal stops."""

    class World:
        def start_draining(self) -> None:
            raise RuntimeError("can't start new thread")

    srv = draining.draining_server(uvicorn.Config(app=None), World())
    srv.start_signal_relay(None)
    srv.handle_exit(signal.SIGTERM, None)
    deadline = time.monotonic() + 10
    while not (srv.should_exit and srv.force_exit):
        assert time.monotonic() < deadline, "the failure did not stop the server"
        time.sleep(0.01)
    assert srv._relay.is_alive()
    assert "acting on it failed" in caplog.text


def test_second_signal_kills_a_sandbox_that_starts_after_it(monkeypatch, caplog):
    """A step still starting its sandbox when the second signal came starts it afterwards;
    the forced stop kills it too (not only the processes alive at the signal), so the
    session closes instead of waiting for the step's command until the deadline. The repeated
    kills take only sandboxes: a child that closing itself starts (``rm -rf``) lives."""
    started: list[subprocess.Popen] = []
    helpers: list[subprocess.Popen] = []
    exited = threading.Event()

    def late_step() -> None:
        time.sleep(1.5)  # spawned after the first kill (which waits 1 s for the 503s)
        started.append(bwrap.spawn(["sleep", "60"]))
        # a closing session's helper (`rm -rf`) is a child too, not a sandbox: it lives
        helpers.append(subprocess.Popen(["sleep", "60"]))

    class Manager:
        def close_all(self) -> None:  # a session's close waits for its step to return
            while not started:
                time.sleep(0.01)
            started[0].wait()

    class World:
        manager = Manager()

    # the service's children, as /proc would list them (none alive at the first kill)
    monkeypatch.setattr(draining, "_child_pids", lambda: [p.pid for p in started + helpers])
    monkeypatch.setattr(draining.os, "_exit", lambda code: exited.set())
    srv = draining.draining_server(uvicorn.Config(app=None), World(), force_timeout_s=20.0)
    threading.Thread(target=late_step, daemon=True).start()
    began = time.monotonic()
    srv._exit_now(threading.Event())
    assert exited.is_set()
    assert started[0].returncode == -signal.SIGKILL
    assert time.monotonic() - began < 15  # closed once the step returned, not at the deadline
    assert "still closing" not in caplog.text
    try:
        assert helpers[0].poll() is None
    finally:
        helpers[0].kill()
        helpers[0].wait()
