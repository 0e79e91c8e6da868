"""The world service's HTTP layer against hostile clients, each at the size that failed
(issue 18), on a real ``sweworld serve world`` process on loopback: bodies without a token
are never read, 560 idle connections under a 512-descriptor limit do not stop ``/health``,
a slow request head is closed, a slow body gets 408, bad startup options exit 2 with one
line, a second signal exits while a step is still in flight, and every error is JSON."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT, requires_sandbox

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from sweworld.serve.world.app import JsonErrors  # noqa: E402
from sweworld.serve.world.draining import FORCED_EXIT  # noqa: E402

TOKEN = "hostile-test-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TASKS = str(PROJECT / "data" / "toy" / "tasks.jsonl")
TOY_ID = "sweworld__stockroom-1"
FOUR_MIB = 4 * 1024 * 1024


class Served:
    """A ``sweworld serve world`` process on a free loopback port."""

    def __init__(self, tmp: Path, *extra: str, nofile: int | None = None) -> None:
        self.runtime = tmp / "runtime"
        env = {**os.environ, "PYTHONPATH": str(PROJECT), "PYTHONUNBUFFERED": "1"}

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.log = (tmp / "server.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sweworld.serve.world.server", "--port", "0",
             "--token", TOKEN, "--tasks", TASKS, "--executor", "none", "--reward", "none",
             "--runtime-dir", str(self.runtime), "--log-format", "text", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=str(tmp),
            preexec_fn=limit,
        )  # fmt: skip
        line = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, line + (tmp / "server.log").read_text()
        self.port = int(found.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.base}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /health"
            time.sleep(0.1)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.base}/metrics", headers=AUTH).text
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def serve(tmp_path):
    """``serve(*options, nofile=N)`` starts a server; all are stopped after the test."""
    started: list[Served] = []

    def start(*extra: str, nofile: int | None = None) -> Served:
        started.append(Served(tmp_path, *extra, nofile=nofile))
        return started[-1]

    yield start
    for served in started:
        served.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole HTTP response (status, lower-case headers, body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed inside the body"
        body += chunk
    return status, headers, body


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reads until EOF or a reset; 15 s at most)."""
    sock.settimeout(15)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _post_head(path: str, length: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"{auth}Content-Length: {length}\r\n\r\n").encode()  # fmt: skip


# ---------------------------------------------------------------------- authentication


@requires_sandbox
def test_unauthenticated_bodies_are_never_read(serve):
    server = serve()
    # the head alone is answered: 401 JSON, Connection: close, no byte of the body asked for
    sock = _connect(server.port)
    sock.sendall(_post_head("/v1/episodes", FOUR_MIB))
    status, headers, body = _read_response(sock)
    assert status == 401 and headers["connection"] == "close"
    assert json.loads(body)["error"] == "unauthorized"
    assert _closed_by_peer(sock)
    sock.close()
    # 40 clients sending 4 MiB bodies without a token (the reproduction: 61 -> 252 MB)
    before = server.rss_kb()
    payload = b"x" * FOUR_MIB
    statuses: list[int] = []

    def hostile() -> None:
        with _connect(server.port) as own:
            own.sendall(_post_head("/v1/episodes", FOUR_MIB))
            with contextlib.suppress(OSError):  # the server closed it: the body went nowhere
                own.sendall(payload)
            try:
                statuses.append(_read_response(own)[0])
            except (OSError, AssertionError):
                statuses.append(0)  # a reset may discard the 401 the client did not read

    threads = [threading.Thread(target=hostile) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    grown_mb = (server.rss_kb() - before) / 1024
    assert set(statuses) <= {401, 0} and 401 in statuses
    assert grown_mb < 40, f"server memory grew {grown_mb:.0f} MB for bodies it must not read"
    assert httpx.get(f"{server.base}/health").status_code == 200
    # a valid token still gets its body read
    ok = httpx.post(f"{server.base}/v1/episodes", json={"instance_id": TOY_ID}, headers=AUTH)
    assert ok.status_code == 200, ok.text


# ---------------------------------------------------------------------- connections


@requires_sandbox
def test_560_idle_connections_under_a_512_descriptor_limit(serve):
    server = serve(nofile=512)
    idle = [_connect(server.port) for _ in range(560)]  # they send nothing
    try:
        health = httpx.get(f"{server.base}/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        with httpx.Client(base_url=server.base, headers=AUTH, timeout=10) as client:
            created = client.post("/v1/episodes", json={"instance_id": TOY_ID})
            assert created.status_code == 200, created.text
            episode = created.json()["episode_id"]
            step = client.post(f"/v1/episodes/{episode}/step", json={"action": "echo alive"})
            assert step.status_code == 200 and "alive" in step.json()["observation"]
        evicted = server.metric('sweworld_http_connections_closed_total{reason="evicted"}')
        assert evicted >= 560 - server.metric("sweworld_http_connections")
        assert server.metric("sweworld_http_connections") <= 512 // 2
    finally:
        for sock in idle:
            sock.close()


@requires_sandbox
def test_new_connection_refused_with_json_when_all_are_busy(serve):
    server = serve("--max-connections", "2", "--body-timeout", "30")
    busy = []
    for _ in range(2):  # two requests in flight: bodies half sent
        sock = _connect(server.port)
        sock.sendall(_post_head("/v1/episodes", 100, TOKEN) + b"{")
        busy.append(sock)
    time.sleep(0.5)  # let the server parse both heads (ordering, not a timing assertion)
    third = _connect(server.port)
    third.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = _read_response(third)
    assert status == 503 and json.loads(body)["error"] == "overloaded"
    for sock in [*busy, third]:
        sock.close()


@requires_sandbox
def test_slowloris_head_and_silent_connection_are_closed(serve):
    server = serve("--header-timeout", "1")
    silent = _connect(server.port)
    slow = _connect(server.port)
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    stop = threading.Event()

    def trickle() -> None:  # one header byte at a time, never the blank line
        try:
            while not stop.wait(0.2):
                slow.sendall(b"X")
        except OSError:
            pass

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        assert _closed_by_peer(slow)
        assert _closed_by_peer(silent)
    finally:
        stop.set()
        thread.join()
        slow.close()
        silent.close()
    assert server.metric('sweworld_http_connections_closed_total{reason="header_timeout"}') >= 2
    # a kept-alive connection that sends whole requests stays usable
    with httpx.Client(base_url=server.base) as client:
        for _ in range(3):
            assert client.get("/health").status_code == 200


@requires_sandbox
def test_slow_body_gets_408_json(serve):
    server = serve("--body-timeout", "1")
    sock = _connect(server.port)
    sock.sendall(_post_head("/v1/episodes", 1000, TOKEN) + b'{"instance_id": ')
    status, _, body = _read_response(sock)
    assert status == 408 and json.loads(body)["error"] == "timeout"
    assert _closed_by_peer(sock)
    sock.close()


# ---------------------------------------------------------------------- capacity


def _create_until_refused(server: Served, most: int) -> tuple[list[str], httpx.Response]:
    """Episodes created (one connection) until one is refused; their ids and the refusal."""
    ids: list[str] = []
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
        for _ in range(most):
            response = client.post("/v1/episodes", json={"instance_id": TOY_ID})
            if response.status_code != 200:
                return ids, response
            ids.append(response.json()["episode_id"])
    raise AssertionError(f"{most} creates, none refused")


@requires_sandbox
def test_out_of_descriptors_is_a_503_with_json_and_passes(serve, monkeypatch):
    """Each session holds a few descriptors: creating episodes under a 300-descriptor limit
    ran out of them, and the create got 500 ``internal``. Now 503 ``unavailable`` with
    Retry-After; deleting episodes frees them, and creates work again."""
    monkeypatch.setenv("SWEWORLD_DISK_MB", "1")  # small sessions: the disk budget holds 150
    monkeypatch.setenv("SWEWORLD_SCRATCH_MB", "1")
    server = serve("--max-live-episodes", "150", "--max-episodes-per-token", "150", nofile=300)
    ids, refused = _create_until_refused(server, 150)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "unavailable" and "descriptors" in refused.json()["message"]
    assert "Retry-After" in refused.headers and str(server.runtime) not in refused.text
    assert len(ids) >= 5
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
        for episode in ids[:5]:
            assert client.delete(f"/v1/episodes/{episode}").status_code == 200
        again = client.post("/v1/episodes", json={"instance_id": TOY_ID})
        assert again.status_code == 200, again.text
        assert client.get("/health").json()["status"] == "ok"


@requires_sandbox
def test_live_episodes_default_to_what_the_descriptors_hold(serve):
    """Without --max-live-episodes the service allows what its descriptor limit holds once
    the connections have theirs: a create past it is 503 ``capacity``, never a session
    that cannot start its sandbox."""
    server = serve(nofile=512)
    ids, refused = _create_until_refused(server, 64)
    assert refused.status_code == 503 and refused.json()["error"] == "capacity", refused.text
    assert int(refused.headers["Retry-After"]) >= 1
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
        for episode in ids:  # every one of them can still run a command
            step = client.post(f"/v1/episodes/{episode}/step", json={"action": "echo ok"})
            assert step.status_code == 200 and "ok" in step.json()["observation"]


# ---------------------------------------------------------------------- JSON errors


@requires_sandbox
def test_errors_are_json(serve):
    server = serve()
    sock = _connect(server.port)
    sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
    status, headers, body = _read_response(sock)
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["error"] == "bad_request"
    sock.close()
    for response in (
        httpx.get(f"{server.base}/no/such/route"),  # 401 before 404: routes are not probed
        httpx.get(f"{server.base}/no/such/route", headers=AUTH),
        httpx.post(f"{server.base}/v1/episodes", content=b"{not json", headers=AUTH),
        httpx.post(f"{server.base}/v1/episodes", content=b"x" * (FOUR_MIB + 1), headers=AUTH),
    ):
        assert response.headers["content-type"] == "application/json", response.text
        assert "error" in response.json()
    # the API's description is open: the docs page works in a browser
    assert httpx.get(f"{server.base}/openapi.json").status_code == 200


def _asgi_call(app: Any) -> list[dict]:
    """Run ``app`` on one GET request; the messages it sent."""
    import asyncio

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async def main() -> None:
        try:
            await app({"type": "http", "method": "GET", "path": "/x", "headers": []},
                      receive, send)  # fmt: skip
        except asyncio.CancelledError:
            sent.append({"type": "cancelled"})

    asyncio.run(main())
    return sent


def test_json_errors_wrapper_answers_every_failure():
    import asyncio

    async def raises(scope: dict, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async def silent(scope: dict, receive: Any, send: Any) -> None:
        return None

    async def cancelled(scope: dict, receive: Any, send: Any) -> None:
        raise asyncio.CancelledError

    for app, status, error in ((raises, 500, "internal"), (silent, 500, "internal"),
                               (cancelled, 503, "stopped")):  # fmt: skip
        sent = _asgi_call(JsonErrors(app))
        assert sent[0]["status"] == status
        assert (b"content-type", b"application/json") in sent[0]["headers"]
        assert json.loads(sent[1]["body"])["error"] == error
        assert sent[-1]["type"] == ("cancelled" if error == "stopped" else "http.response.body")


# ---------------------------------------------------------------------- startup options


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--port", "80000"], "--port"),
        (["--executor", "os.system"], "os.system"),
        (["--model", "bogus:x"], "bogus:x"),
        (["--step-timeout", "inf"], "--step-timeout"),
        (["--header-timeout", "nan"], "--header-timeout"),
        (["--max-connections", "100000000"], "--max-connections"),
        (["--max-body-bytes", "-1"], "--max-body-bytes"),
        (["--disk-budget-mb", str(1 << 29)], "memory available"),  # 512 TiB of RAM tmpfs
        (["--disk-budget-mb", "100"], "holds no session"),  # under one quota + control
        (["--disk-mb", "0"], "--disk-mb"),
    ],
)
def test_bad_startup_options_exit_2_with_one_line(options, says, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    done = subprocess.run(
        [sys.executable, "-m", "sweworld.serve.world.server", "--token", TOKEN,
         "--port", "0", "--runtime-dir", str(tmp_path / "rt"), *options],
        capture_output=True, text=True, env=env, timeout=60, cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert "world service on" not in done.stdout  # it never listened


# ---------------------------------------------------------------------- signals


@requires_sandbox
def test_second_signal_exits_while_a_step_is_in_flight(serve):
    # closing may take its time on a loaded machine; the exit still comes long before the
    # step's 90 s
    server = serve("--drain-timeout", "120", "--force-exit-timeout", "30")
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
        created = client.post("/v1/episodes", json={"instance_id": TOY_ID})
        assert created.status_code == 200, created.text
        episode = created.json()["episode_id"]
    result: dict[str, Any] = {}

    def long_step() -> None:
        try:
            with httpx.Client(base_url=server.base, headers=AUTH, timeout=120) as own:
                result["step"] = own.post(f"/v1/episodes/{episode}/step",
                                          json={"action": "sleep 90; echo late"})  # fmt: skip
        except httpx.HTTPError as exc:
            result["error"] = exc

    thread = threading.Thread(target=long_step)
    thread.start()
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
        while client.get(f"/v1/episodes/{episode}").json()["idle_s"] != 0.0:
            assert time.monotonic() < deadline, "the step did not start"
            time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    while httpx.get(f"{server.base}/health").json()["status"] != "draining":
        assert time.monotonic() < deadline, "the service did not start draining"
        time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    # the step sleeps 90 s; the process is gone long before (generous bound, not a timing)
    assert server.proc.wait(60) == FORCED_EXIT
    thread.join(30)
    assert "step" in result, result.get("error")
    assert result["step"].status_code == 503, result["step"].text
    assert result["step"].json()["error"] == "stopped"
    sessions = server.runtime / "sessions"
    assert not sessions.exists() or list(sessions.iterdir()) == []  # closed best-effort


def test_gate_checks_the_token_before_the_body_and_no_auth_stays_open(tmp_path):
    from fastapi.testclient import TestClient

    from sweworld.env import EpisodeConfig
    from sweworld.serve.world.app import create_app
    from sweworld.serve.world.config import ServiceConfig

    episode = EpisodeConfig(executor="none", reward="none")
    closed = create_app(ServiceConfig(tokens=(TOKEN,), episode=episode, tasks=TASKS,
                                    runtime_root=str(tmp_path / "a")))  # fmt: skip
    opened = create_app(ServiceConfig(no_auth=True, episode=episode, tasks=TASKS,
                                    runtime_root=str(tmp_path / "b")))  # fmt: skip
    with TestClient(closed, raise_server_exceptions=False) as client:
        denied = client.get("/v1/episodes/w-none")
        assert denied.status_code == 401 and denied.json()["error"] == "unauthorized"
        assert denied.headers["www-authenticate"] == "Bearer"
        wrong = client.get("/v1/episodes/w-none", headers={"Authorization": "Bearer wrong-tok"})
        assert wrong.status_code == 401
        assert client.get("/v1/episodes/w-none", headers=AUTH).status_code == 404
        assert client.get("/health").status_code == 200
    with TestClient(opened, raise_server_exceptions=False) as client:
        missing = client.get("/v1/episodes/w-none")  # no token needed: the route answers
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"


@requires_sandbox
def test_hostile_benchmark_runs_small(tmp_path):
    import argparse

    from sweworld.bench.throughput import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--hostile", "--out", str(tmp_path / "out"),
                              "--hostile-clients", "4", "--hostile-steps", "2",
                              "--hostile-idle", "6", "--hostile-slow", "6",
                              "--hostile-bodies", "2", "--hostile-probe-idle", "80",
                              "--hostile-probe-nofile", "256"])  # fmt: skip
    assert run(args) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    quiet, hostile, probe = (report["summary"][k] for k in ("quiet", "hostile", "probe"))
    assert quiet["steps"] == hostile["steps"] == 8
    assert quiet["errors"] == {} and hostile["errors"] == {}
    assert hostile["hostile_clients"]["idle_opened"] >= 6
    assert probe["health_status"] == 200 and probe["step_status"] == 200
    assert probe["server"]["evicted"] > 0  # 80 idle over the probe server's limit of 32
    assert [f["title"] for f in report["figures"]][2].startswith("80 idle connections")
