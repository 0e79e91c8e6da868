"""The world service's app through FastAPI's TestClient: routes, auth, errors, quotas,
idle expiry, draining (real episodes on the toy task in the sandbox)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT, requires_sandbox

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient

from sweworld.env import EpisodeConfig
from sweworld.serve.world.app import create_app
from sweworld.serve.world.config import ServiceConfig

pytestmark = requires_sandbox

TOKEN_A = "token-alpha-123"
TOKEN_B = "token-bravo-456"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
TASKS = str(PROJECT / "data" / "toy" / "tasks.jsonl")
TOY_ID = "sweworld__stockroom-1"
FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


@pytest.fixture
def serve(tmp_path):
    """``serve(**config) -> TestClient`` (entered; closed, and its sessions checked gone,
    at the end of the test)."""
    clients = []

    def make(episode: dict | None = None, **options) -> TestClient:
        episode_cfg = EpisodeConfig(**{"executor": "none", "reward": "none", **(episode or {})})
        root = tmp_path / f"runtime{len(clients)}"
        config = ServiceConfig(
            tokens=(TOKEN_A, TOKEN_B), episode=episode_cfg, tasks=TASKS,
            runtime_root=str(root), **options,
        )  # fmt: skip
        client = TestClient(create_app(config), raise_server_exceptions=False)
        client.__enter__()
        client.root = root
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
        assert list((client.root / "sessions").iterdir()) == []  # nothing leaked


def create(client, headers=A, **body) -> str:
    response = client.post("/v1/episodes", json={"instance_id": TOY_ID, **body}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["episode_id"]


def step(client, episode_id, action, headers=A, **body):
    return client.post(
        f"/v1/episodes/{episode_id}/step", json={"action": action, **body}, headers=headers
    )


def test_health_docs_and_auth(serve):
    client = serve()
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert "swagger" in client.get("/docs").text.lower()
    spec = client.get("/openapi.json").json()
    assert "/v1/episodes/{episode_id}/step" in spec["paths"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    for headers in ({}, {"Authorization": "Bearer wrong-token-000"}, {"Authorization": "Basic x"}):
        response = client.post("/v1/episodes", json={"instance_id": TOY_ID}, headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        assert client.get("/metrics", headers=headers).status_code == 401
    assert client.get("/metrics", headers=A).headers["content-type"].startswith("text/plain")


def test_demo_episode_resolves_with_the_real_reward(serve):
    client = serve(episode={"executor": "local", "reward": "real", "max_steps": 20})
    started = client.post("/v1/episodes", json={"instance_id": TOY_ID}, headers=A).json()
    episode_id = started["episode_id"]
    assert "stockroom" in started["observation"] and started["info"]["instance_id"] == TOY_ID
    demo = (PROJECT / "data/toy/demo_actions.jsonl").read_text().splitlines()
    actions = [json.loads(line) for line in demo]
    for action in actions[:-1]:
        body = step(client, episode_id, action).json()
        assert not body["terminated"] and not body["truncated"]
    patch = client.get(f"/v1/episodes/{episode_id}/patch", headers=A).json()["patch"]
    assert "textutil.py" in patch and "strip(separator)" in patch
    reward = client.post(f"/v1/episodes/{episode_id}/reward", json={}, headers=A).json()
    assert reward["resolved"] is True and reward["source"] == "real"
    assert client.get(f"/v1/episodes/{episode_id}", headers=A).json()["done"] is False
    last = step(client, episode_id, actions[-1]).json()
    assert last["terminated"] and last["reward"] == 1.0
    assert last["info"]["reason"] == "submitted" and last["info"]["reward"]["resolved"] is True
    trajectory = client.get(f"/v1/episodes/{episode_id}/trajectory", headers=A).json()
    assert len(trajectory["trajectory"]["steps"]) == len(actions)
    after = step(client, episode_id, "ls")
    assert after.status_code == 409 and after.json()["error"] == "finished"
    assert episode_id in after.json()["message"]  # the service's id, not the inner one
    assert client.delete(f"/v1/episodes/{episode_id}", headers=A).json()["closed"] is True
    assert client.get(f"/v1/episodes/{episode_id}", headers=A).status_code == 404


def test_end_without_an_action(serve):
    client = serve()
    episode_id = create(client)
    response = client.post(f"/v1/episodes/{episode_id}/end", json={"reason": "max_steps"},
                           headers=A)  # fmt: skip
    assert response.status_code == 200
    assert response.json()["truncated"] and response.json()["info"]["reason"] == "max_steps"
    bad = client.post(f"/v1/episodes/{episode_id}/end", json={"reason": "bored"}, headers=A)
    assert bad.status_code == 422 and "reason" in bad.json()["message"]


def test_snapshot_restore_fork(serve):
    client = serve()
    episode_id = create(client)
    assert step(client, episode_id, "echo one > note.txt").status_code == 200
    snap = client.post(f"/v1/episodes/{episode_id}/snapshot", headers=A).json()["snapshot_id"]
    step(client, episode_id, "echo two > note.txt")
    state = client.post(f"/v1/episodes/{episode_id}/restore", json={"snapshot_id": snap},
                        headers=A).json()  # fmt: skip
    assert state["steps"] == 1
    assert "one" in step(client, episode_id, "cat note.txt").json()["observation"]
    fork = client.post(f"/v1/episodes/{episode_id}/fork", headers=A)
    assert fork.status_code == 200
    fork_id = fork.json()["episode_id"]
    assert fork_id != episode_id
    assert client.get(f"/v1/episodes/{fork_id}", headers=A).json()["steps"] == 2
    step(client, fork_id, "echo three > note.txt")
    assert "three" in step(client, fork_id, "cat note.txt").json()["observation"]
    assert "one" in step(client, episode_id, "cat note.txt").json()["observation"]
    unknown = client.post(f"/v1/episodes/{episode_id}/restore", json={"snapshot_id": "nope"},
                          headers=A)  # fmt: skip
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_snapshot"
    assert client.get("/health").json()["episodes"] == 2


def test_client_errors(serve):
    client = serve(max_body_bytes=20_000)
    episode_id = create(client)
    assert step(client, "w-doesnotexist", "ls").status_code == 404
    assert client.delete("/v1/episodes/w-doesnotexist", headers=A).status_code == 404
    # 413 from Content-Length, and from a chunked body with none
    big = step(client, episode_id, "x" * 30_000)
    assert big.status_code == 413 and big.json()["error"] == "too_large"
    chunks = (b'{"action": "' + b"y" * 5000 for _ in range(10))
    streamed = client.post(f"/v1/episodes/{episode_id}/step", content=chunks,
                           headers={**A, "Content-Type": "application/json"})  # fmt: skip
    assert streamed.status_code == 413
    # 422: a task row without its field, unknown and refused options, both task sources
    row = json.loads(Path(TASKS).read_text().splitlines()[0])
    bad_row = client.post("/v1/episodes", json={"task": {**row, "instance_id": ""}}, headers=A)
    assert bad_row.status_code == 422 and "instance_id" in bad_row.json()["message"]
    # a row that is not the server's own task: refused (task rows are off by default) ...
    other = client.post("/v1/episodes", json={"task": {**row, "base_commit": "f" * 40}},
                        headers=A)  # fmt: skip
    assert other.status_code == 422 and other.json()["error"] == "refused"
    assert "base_commit" in other.json()["message"]
    # ... while the server's own row is served
    assert create(client, task=row, instance_id=None)
    for config in ({"executor": "my.module.Evil"}, {"model": "openai:http://x#m"}, {"nope": 1}):
        refused = client.post("/v1/episodes", json={"instance_id": TOY_ID, "config": config},
                              headers=A)  # fmt: skip
        assert refused.status_code == 422, config
        assert next(iter(config)) in refused.json()["message"]
    both = client.post("/v1/episodes", json={"instance_id": TOY_ID, "task": row}, headers=A)
    assert both.status_code == 422
    missing = client.post("/v1/episodes", json={"instance_id": "no-such-task"}, headers=A)
    assert missing.status_code == 404 and missing.json()["error"] == "unknown_task"
    extra = step(client, episode_id, "ls", surprise=True)
    assert extra.status_code == 422 and "surprise" in extra.json()["message"]
    assert step(client, episode_id, "ls", timeout=-1).status_code == 422
    # a bad action is an observation, not an error; the episode goes on
    ok = step(client, episode_id, "<function=nosuchtool>\n</function>")
    assert ok.status_code == 200 and ok.json()["terminated"] is False
    # the server's own executor may be named (a client sending its whole config)
    same = {"executor": "none", "model": "embedded", "swr_model": "embedded", "max_steps": 5}
    assert create(client, config=same)
    # a client's allowed override applies
    short = create(client, config={"max_steps": 1})
    assert step(client, short, "ls").json()["truncated"] is True


def test_errors_carry_no_traceback(serve):
    client = serve()
    world = client.app.state.world

    def broken(*args, **kwargs):
        raise RuntimeError("secret internals")

    world.state = broken
    response = client.get("/v1/episodes/w-x", headers=A)
    assert response.status_code == 500
    assert response.json() == {"error": "internal", "message": "internal error (see the "
                               "server's log)"}  # fmt: skip
    assert "Traceback" not in response.text and "secret" not in response.text


def test_quotas(serve):
    client = serve(max_episodes_per_token=2, max_steps_per_minute=3)
    first = create(client)
    create(client)
    third = client.post("/v1/episodes", json={"instance_id": TOY_ID}, headers=A)
    assert third.status_code == 429 and int(third.headers["retry-after"]) >= 1
    assert client.post(f"/v1/episodes/{first}/fork", headers=A).status_code == 429
    create(client, headers=B)  # another token has its own quota
    for _ in range(3):
        assert step(client, first, "ls").status_code == 200
    limited = step(client, first, "ls")
    assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
    client.delete(f"/v1/episodes/{first}", headers=A)
    create(client)  # a slot freed by delete


def test_creates_per_minute(serve):
    client = serve(max_creates_per_minute=1)
    episode_id = create(client)
    again = client.post(f"/v1/episodes/{episode_id}/reset", json={}, headers=A)
    assert again.status_code == 429 and "retry-after" in again.headers


def test_tokens_are_isolated(serve):
    client = serve()
    mine = create(client, headers=A)
    for call in (
        lambda: client.get(f"/v1/episodes/{mine}", headers=B),
        lambda: step(client, mine, "ls", headers=B),
        lambda: client.get(f"/v1/episodes/{mine}/patch", headers=B),
        lambda: client.post(f"/v1/episodes/{mine}/fork", headers=B),
        lambda: client.delete(f"/v1/episodes/{mine}", headers=B),
    ):
        response = call()
        # 404 exactly as for an id that does not exist: the service tells nobody which exist
        assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert client.get(f"/v1/episodes/{mine}", headers=A).json()["steps"] == 0


def test_idle_episodes_expire(serve):
    client = serve(idle_timeout_s=0.3, reap_interval_s=0.1)
    episode_id = create(client)
    sessions = client.root / "sessions"
    deadline = time.monotonic() + 10
    while client.get("/health").json()["episodes"] or list(sessions.iterdir()):
        assert time.monotonic() < deadline, "the idle episode was not closed"
        time.sleep(0.1)
    assert client.get(f"/v1/episodes/{episode_id}", headers=A).status_code == 404


def test_step_deadline_504_then_busy_then_consistent(serve):
    client = serve(request_deadline_s=0.5)
    episode_id = create(client)
    started = time.monotonic()
    late = step(client, episode_id, "sleep 3; echo done > late.txt")
    assert late.status_code == 504 and late.json()["error"] == "deadline"
    assert time.monotonic() - started < 2.5  # answered at the deadline, not at the end
    busy = step(client, episode_id, "ls")
    assert busy.status_code == 409 and busy.json()["error"] == "busy"
    deadline = time.monotonic() + 10
    while client.get(f"/v1/episodes/{episode_id}", headers=A).json()["idle_s"] == 0.0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    state = client.get(f"/v1/episodes/{episode_id}", headers=A).json()
    assert state["steps"] == 1 and not state["done"]
    assert "done" in step(client, episode_id, "cat late.txt").json()["observation"]


def test_draining_refuses_new_calls(serve):
    client = serve()
    episode_id = create(client)
    client.app.state.world.start_draining()
    assert client.get("/health").json()["status"] == "draining"
    refused = step(client, episode_id, "ls")
    assert refused.status_code == 503 and refused.json()["error"] == "draining"
    assert client.post("/v1/episodes", json={"instance_id": TOY_ID}, headers=A).status_code == 503


def test_config_needs_a_token():
    with pytest.raises(ValueError, match="token"):
        ServiceConfig()
    assert ServiceConfig(no_auth=True).no_auth
    with pytest.raises(ValueError, match="idle_timeout_s"):
        ServiceConfig(tokens=(TOKEN_A,), idle_timeout_s=float("inf"))
