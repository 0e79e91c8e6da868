"""The world service against a hostile client holding a valid token (issue 18): task rows
that are paths, one tenant locking out another, overrides past the operator's choices,
``Infinity``, code named by a client, lone surrogates, snapshots and forks without end.
Each reproduction at the size that failed; the app in-process (FastAPI's TestClient) on
the toy task in the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import requires_sandbox

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient

from sweworld.env import EpisodeConfig
from sweworld.sandbox.repos import git
from sweworld.serve.world.app import create_app
from sweworld.serve.world.config import ServiceConfig
from sweworld.tasks.toy import ensure_toy_repo, toy_tasks_path

pytestmark = requires_sandbox

TOKEN_A = "hostile-token-aaa-1"
TOKEN_B = "hostile-token-bbb-2"
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
TOY_ID = "sweworld__stockroom-1"
V1 = "/v1/episodes"


@pytest.fixture
def serve(tmp_path):
    """``serve(episode=..., **options) -> TestClient`` on the toy tasks; every client is
    closed at the end of the test, and its sessions checked gone."""
    clients = []

    def make(episode: dict | None = None, **options) -> TestClient:
        episode_cfg = EpisodeConfig(**{"executor": "none", "reward": "none", **(episode or {})})
        root = tmp_path / f"runtime{len(clients)}"
        config = ServiceConfig(tokens=(TOKEN_A, TOKEN_B), episode=episode_cfg,
                             tasks=str(toy_tasks_path()), runtime_root=str(root),
                             **options)  # fmt: skip
        client = TestClient(create_app(config), raise_server_exceptions=False)
        client.__enter__()
        client.root = root
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
        assert list((client.root / "sessions").iterdir()) == []


def _row() -> dict:
    return json.loads(toy_tasks_path().read_text().splitlines()[0])


def _create(client, headers=A, **body):
    body = body if "task" in body else {"instance_id": TOY_ID, **body}
    return client.post(V1, json=body, headers=headers)


def _raw(client, path: str, text: str, headers=A):
    """A body sent as written (``Infinity``, ``NaN``, ``\\ud800`` escapes)."""
    return client.post(path, content=text.encode(),
                       headers={**headers, "Content-Type": "application/json"})  # fmt: skip


# ---------------------------------------------------------------- task rows are data


def _assert_no_host_path(text: str, *paths: Path) -> None:
    for path in paths:
        assert str(path) not in text
        for piece in path.parts[1:]:
            if len(piece) > 3:  # a folder's name, not "tmp"
                assert piece not in text, piece


def test_traversal_in_repo_is_refused_naming_no_host_path(serve, tmp_path, monkeypatch):
    cache = tmp_path / "repo-cache"
    cache.mkdir()
    host = tmp_path / "host-secrets-dir"
    host.mkdir()
    (host / "passwords.txt").write_text("root:hunter2\n")
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(cache))
    traversal = "x/" + "../" * 12 + str(host).lstrip("/")
    client = serve(allow_task_rows=True)
    for repo in (traversal, str(host), "../" + host.name, "x/../../etc", ".", "a/b/c", "x" * 300):
        for commit in ("", "f" * 40):
            row = {**_row(), "repo": repo, "base_commit": commit}
            response = _create(client, task=row)
            assert response.status_code == 422, (repo, response.text)
            assert response.json()["error"] == "invalid_task"
            _assert_no_host_path(response.text, host, cache)
            assert "hunter2" not in response.text
    # a repository that is a name but not in the cache: said so, without the cache's path
    missing = _create(client, task={**_row(), "repo": "nobody/nothing", "base_commit": "a" * 40})
    assert missing.status_code == 422 and "nobody/nothing" in missing.json()["message"]
    _assert_no_host_path(missing.text, cache)
    # the same rows on a reset of a running episode
    episode_id = _create(client).json()["episode_id"]
    row = {**_row(), "repo": traversal, "base_commit": ""}
    reset = client.post(f"{V1}/{episode_id}/reset", json={"task": row}, headers=A)
    assert reset.status_code == 422 and reset.json()["error"] == "invalid_task"
    _assert_no_host_path(reset.text, host, cache)
    assert list((client.root / "sessions").iterdir()) != []  # the episode runs on
    client.delete(f"{V1}/{episode_id}", headers=A)


def test_rows_resolve_in_the_repo_cache_and_errors_name_no_path(serve, tmp_path, monkeypatch):
    cache = tmp_path / "mirrors"
    cache.mkdir()
    git(["clone", "--mirror", "--quiet", str(ensure_toy_repo()), str(cache / "acme__shop.git")])
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(cache))
    client = serve(allow_task_rows=True)
    row = {**_row(), "repo": "acme/shop", "instance_id": "acme__shop-1"}
    started = _create(client, task=row)
    assert started.status_code == 200, started.text
    assert started.json()["info"]["repo"] == "acme/shop"
    client.delete(f"{V1}/{started.json()['episode_id']}", headers=A)
    # a commit the mirror does not hold, a commit that is not an id, no commit at all
    for commit, error in (("f" * 40, "not in the server's copy"), ("HEAD~1", "commit id"),
                          ("", "commit id"), ("../../x", "commit id")):  # fmt: skip
        response = _create(client, task={**row, "base_commit": commit})
        assert response.status_code == 422, commit
        assert error in response.json()["message"], response.text
        _assert_no_host_path(response.text, cache)


def test_rows_are_off_by_default(serve, tmp_path, monkeypatch):
    client = serve()
    row = _row()
    other = _create(client, task={**row, "instance_id": "mine-1"})
    assert other.status_code == 422 and other.json()["error"] == "refused"
    assert "--allow-task-rows" in other.json()["message"]
    changed = _create(client, task={**row, "repo": "x/" + "../" * 8 + "etc", "base_commit": ""})
    assert changed.status_code == 422 and "repo" in changed.json()["message"]
    same = _create(client, task=row)  # the server's own row: served
    assert same.status_code == 200
    client.delete(f"{V1}/{same.json()['episode_id']}", headers=A)


# ---------------------------------------------------------------- tenants


def test_one_token_cannot_lock_out_another(serve):
    """Eight distinct configs by one token made every create of every token fail (422
    too_many_configs until restart); now the limit is the token's own, and parts no
    episode uses are closed."""
    keys = {"reward_preset", "mode", "reward"}
    client = serve(episode={"reward": "swr", "mode": "oracle"}, max_configs_per_token=8,
                   client_config_keys=keys)  # fmt: skip
    world = client.app.state.world
    presets = ("binary", "score", "shaped", "stage_penalty")
    configs = [{"reward_preset": p, "mode": m} for p in presets for m in ("blind", "oracle")]
    configs.remove({"reward_preset": "binary", "mode": "oracle"})  # the server's own
    configs.append({"reward": "none"})  # 8 in all
    mine = []
    for config in configs:
        response = _create(client, config=config)
        assert response.status_code == 200, response.text
        mine.append(response.json()["episode_id"])
    ninth = _create(client, config={"reward": "none", "mode": "blind"})
    assert ninth.status_code == 429 and ninth.json()["error"] == "too_many_configs"
    assert world.components.held(_owner(A)) == 8
    # token B: the server's config, A's configs, and one A never used
    for config in ({}, configs[0], {"reward": "none", "mode": "blind"}):
        response = _create(client, headers=B, config=config)
        assert response.status_code == 200, response.text
        client.delete(f"{V1}/{response.json()['episode_id']}", headers=B)
    # a config A gives up frees its slot; parts no episode uses are closed
    client.delete(f"{V1}/{mine.pop()}", headers=A)
    assert _create(client, config={"reward": "none", "mode": "blind"}).status_code == 200
    assert len(world.components) == 9  # 8 of A's, the server's own
    client.delete(f"{V1}/{mine.pop()}", headers=A)
    assert len(world.components) == 8
    assert world.components.held(_owner(A)) == 7
    assert world.components.held(_owner(B)) == 0  # B's episodes are gone, and so is its hold


def test_an_ended_episode_holds_no_live_slot(serve):
    client = serve(max_episodes_per_token=1, max_ended_per_token=1)
    first = _create(client).json()["episode_id"]
    assert _create(client).status_code == 429
    ended = client.post(f"{V1}/{first}/end", json={}, headers=A)
    assert ended.status_code == 200 and ended.json()["truncated"]
    second = _create(client)
    assert second.status_code == 200, second.text  # the ended one holds no session
    second = second.json()["episode_id"]
    assert client.get(f"{V1}/{first}/trajectory", headers=A).status_code == 200
    refused = client.post(f"{V1}/{first}/reset", json={}, headers=A)
    assert refused.status_code == 429  # starting it again needs a live slot
    client.post(f"{V1}/{second}/end", json={}, headers=A)
    # two ended episodes, one kept: the least recently used is closed
    assert client.get(f"{V1}/{first}", headers=A).status_code == 404
    again = client.post(f"{V1}/{second}/reset", json={}, headers=A)
    assert again.status_code == 200
    client.delete(f"{V1}/{second}", headers=A)


def test_snapshot_limits_per_episode_and_per_token(serve):
    """40 snapshots of one workspace took 763 MB; now the 17th is refused (429)."""
    client = serve()
    episode_id = _create(client).json()["episode_id"]
    client.post(f"{V1}/{episode_id}/step", json={"action": "echo x > f.txt"}, headers=A)
    codes = [client.post(f"{V1}/{episode_id}/snapshot", headers=A).status_code
             for _ in range(40)]  # fmt: skip
    assert codes == [200] * 16 + [429] * 24
    reset = client.post(f"{V1}/{episode_id}/reset", json={}, headers=A)
    assert reset.status_code == 200
    assert client.post(f"{V1}/{episode_id}/snapshot", headers=A).status_code == 200
    client.delete(f"{V1}/{episode_id}", headers=A)
    small = serve(max_snapshots_per_token=3)
    one, two = (_create(small).json()["episode_id"] for _ in range(2))
    for episode_id in (one, one, two):
        assert small.post(f"{V1}/{episode_id}/snapshot", headers=A).status_code == 200
    over = small.post(f"{V1}/{two}/snapshot", headers=A)
    assert over.status_code == 429 and "token" in over.json()["message"]
    other = _create(small, headers=B).json()["episode_id"]  # B's own count
    assert small.post(f"{V1}/{other}/snapshot", headers=B).status_code == 200
    small.delete(f"{V1}/{one}", headers=A)
    assert small.post(f"{V1}/{two}/snapshot", headers=A).status_code == 200
    for episode_id, headers in ((two, A), (other, B)):
        small.delete(f"{V1}/{episode_id}", headers=headers)


def test_fork_limit_per_token(serve):
    client = serve(max_forks_per_token=2)
    episode_id = _create(client).json()["episode_id"]
    forks = [client.post(f"{V1}/{episode_id}/fork", headers=A) for _ in range(3)]
    assert [f.status_code for f in forks] == [200, 200, 429], forks[-1].text
    other = _create(client, headers=B).json()["episode_id"]
    assert client.post(f"{V1}/{other}/fork", headers=B).status_code == 200
    for fork in forks[:2]:
        client.delete(f"{V1}/{fork.json()['episode_id']}", headers=A)
    assert client.post(f"{V1}/{episode_id}/fork", headers=A).status_code == 200
    assert client.get("/health").json()["episodes"] == 4  # the rest closes with the service


def test_the_service_bounds_live_episodes_and_disk_of_all_tokens(serve, monkeypatch, tmp_path):
    """Each session's disk is a RAM tmpfs (1 GiB by default): 64 live episodes per token
    times several tokens could take more memory than the host has. A service-wide cap on
    live episodes and a disk budget refuse what would not fit with 503 and Retry-After."""
    client = serve(max_live_episodes=2)
    first = _create(client).json()["episode_id"]
    other = _create(client, headers=B).json()["episode_id"]
    for refused in (_create(client), client.post(f"{V1}/{first}/fork", headers=A)):
        assert refused.status_code == 503 and refused.json()["error"] == "capacity"
        assert int(refused.headers["Retry-After"]) >= 1
    client.delete(f"{V1}/{other}", headers=B)
    assert _create(client, headers=B).status_code == 200
    # the disk budget: two sessions of an 8 MiB quota (with 64 MiB of control files and
    # two 4 MiB scratch mounts: 80 MiB) fit in 170 MiB, not three
    monkeypatch.setenv("SWEWORLD_DISK_MB", "8")
    monkeypatch.setenv("SWEWORLD_SCRATCH_MB", "4")
    small = serve(disk_budget_mb=170)
    one, two = (_create(small, headers=h).json()["episode_id"] for h in (A, B))
    for refused in (_create(small), small.post(f"{V1}/{one}/fork", headers=A)):
        assert refused.status_code == 503, refused.text
        body = refused.json()
        assert body["error"] == "unavailable" and "budget" in body["message"]
        assert "Retry-After" in refused.headers
        _assert_no_host_path(refused.text, small.root, tmp_path)
    assert small.get("/health").json()["episodes"] == 2
    small.delete(f"{V1}/{two}", headers=B)
    assert small.post(f"{V1}/{one}/fork", headers=A).status_code == 200


def test_snapshot_limits_of_the_sandbox_are_429_not_500(serve, monkeypatch):
    """The session's own snapshot limit (SnapshotLimitReached) was a 422 ``invalid``, and
    the 96 saved layers an overlay stack may hold (QuotaExceeded) a 500; both are 429
    ``quota`` now, and the episode goes on."""
    monkeypatch.setenv("SWEWORLD_MAX_SNAPSHOTS", "3")
    client = serve(episode={"max_steps": 200}, max_snapshots_per_episode=500,
                   max_snapshots_per_token=500)  # fmt: skip
    episode_id = _create(client).json()["episode_id"]
    codes = [client.post(f"{V1}/{episode_id}/snapshot", headers=A) for _ in range(4)]
    assert [c.status_code for c in codes] == [200, 200, 200, 429]
    assert codes[-1].json()["error"] == "quota"
    assert "max_snapshots" in codes[-1].json()["message"]
    monkeypatch.setenv("SWEWORLD_MAX_SNAPSHOTS", "500")
    episode_id = _create(client).json()["episode_id"]
    step = f"{V1}/{episode_id}/step"
    first = None
    for i in range(60):  # two layers a snapshot (/testbed and /tmp): 48 fit in 96
        client.post(step, json={"action": f"echo {i} > n.txt; echo {i} > /tmp/n"}, headers=A)
        response = client.post(f"{V1}/{episode_id}/snapshot", headers=A)
        if response.status_code != 200:
            break
        first = first or response.json()["snapshot_id"]
    assert response.status_code == 429, response.text
    assert response.json()["error"] == "quota" and "saved layers" in response.json()["message"]
    assert i == 48
    out = client.post(step, json={"action": "cat n.txt /tmp/n"}, headers=A).json()
    assert "48\n48" in out["observation"]
    restored = client.post(f"{V1}/{episode_id}/restore", json={"snapshot_id": first}, headers=A)
    assert restored.status_code == 200, restored.text
    out = client.post(step, json={"action": "cat n.txt /tmp/n"}, headers=A).json()
    assert "0\n0" in out["observation"]


def test_a_patch_over_the_output_limit_is_a_clear_422(serve):
    """A 3 MB changed file made the patch longer than a command's output limit: /patch and
    /reward answered 500 ``internal`` and ``end`` lost the reason. Now 422
    ``patch_too_large`` saying what to do, and the episode goes on."""
    client = serve()
    episode_id = _create(client).json()["episode_id"]
    action = "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 3000000 > big.txt"
    client.post(f"{V1}/{episode_id}/step", json={"action": action}, headers=A)
    for response in (
        client.get(f"{V1}/{episode_id}/patch", headers=A),
        client.post(f"{V1}/{episode_id}/reward", json={}, headers=A),
    ):
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "patch_too_large"
        assert "max_output_bytes" in response.json()["message"]
    client.post(f"{V1}/{episode_id}/step", json={"action": "rm big.txt; echo x > small.txt"},
                headers=A)  # fmt: skip
    patch = client.get(f"{V1}/{episode_id}/patch", headers=A)
    assert patch.status_code == 200 and "small.txt" in patch.json()["patch"]
    client.delete(f"{V1}/{episode_id}", headers=A)


def _owner(headers: dict) -> str:
    from sweworld.serve.world.auth import owner_id

    return owner_id(headers["Authorization"].split()[1])


# ---------------------------------------------------------------- what clients may change


def test_clients_cannot_raise_limits_or_turn_on_what_the_operator_did_not_choose(serve):
    client = serve(episode={"reward": "swr", "mode": "blind", "max_steps": 50})
    for config in (
        {"mode": "oracle"},
        {"reward": "real"},
        {"reward": "both"},
        {"max_steps": 1e9},
        {"max_steps": 10**9},
        {"max_wall_s": None},
        {"max_wall_s": 1e12},
        {"max_observation_chars": 1e9},
        {"max_observation_chars": 10**9},
        {"step_timeout_s": 301},
        {"executor": "local"},
        {"reward_preset": "shaped"},
        {"swr_stages": ["syntax"]},
        {"world": "http://elsewhere"},
        {"step_penalty": 1e300},
    ):
        response = _create(client, config=config)
        assert response.status_code == 422, (config, response.text)
        assert next(iter(config)) in response.json()["message"], response.text
    # lowering is fine, and applies
    short = _create(client, config={"max_steps": 1, "reward": "none", "max_wall_s": 60})
    assert short.status_code == 200, short.text
    episode_id = short.json()["episode_id"]
    step = client.post(f"{V1}/{episode_id}/step", json={"action": "ls"}, headers=A).json()
    assert step["truncated"] and step["info"]["reason"] == "max_steps"
    client.delete(f"{V1}/{episode_id}", headers=A)
    # an operator who allows nothing: the server's own values only
    strict = serve(client_config_keys="")
    assert _create(strict, config={"max_steps": 1}).status_code == 422
    same = _create(strict, config={"max_steps": 50, "reward": "none"})
    assert same.status_code == 200
    strict.delete(f"{V1}/{same.json()['episode_id']}", headers=A)
    with pytest.raises(ValueError, match="client_config_keys"):
        ServiceConfig(tokens=(TOKEN_A,), client_config_keys={"max_steps", "no_such_key"})


def test_infinity_and_nan_are_refused_everywhere(serve):
    client = serve()
    episode_id = _create(client).json()["episode_id"]
    step = f"{V1}/{episode_id}/step"
    for path, text in (
        (step, '{"action": "ls", "timeout": Infinity}'),
        (step, '{"action": "ls", "timeout": NaN}'),
        (step, '{"action": {"name": "execute_bash", "args": [1, -Infinity]}}'),
        (V1, '{"instance_id": "' + TOY_ID + '", "config": {"step_penalty": Infinity}}'),
        (V1, '{"instance_id": "' + TOY_ID + '", "config": {"max_wall_s": NaN}}'),
        (V1, json.dumps({"task": _row()})[:-1] + ', "meta": {"deep": [[{"x": NaN}]]}}'),
    ):
        response = _raw(client, path, text)
        assert response.status_code == 422, (text, response.text)
    assert client.get(f"{V1}/{episode_id}", headers=A).json()["steps"] == 0  # nothing ran
    client.delete(f"{V1}/{episode_id}", headers=A)


def test_clients_name_registered_executors_only(serve):
    """``"executor": "os.abort"`` with --allow-config-executor killed the server."""
    client = serve(episode={"executor": "local"}, allow_config_executor=True)
    for config in (
        {"executor": "os.abort"},
        {"executor": "os:abort"},
        {"executor": "sweworld.sandbox.executor:NoExecutor"},
        {"executor": "scripted:/etc/passwd"},
        {"executor": ["none"]},
        {"model": "replay:/etc/passwd"},
        {"model": "hf:/root"},
        {"model": "openai:http://169.254.169.254/#m"},
        {"swr_model": "embedded+/tmp/adapter"},
    ):
        response = _create(client, config=config)
        assert response.status_code == 422, (config, response.text)
        assert "/etc/passwd" not in response.text
    assert client.get("/health").json()["status"] == "ok"  # still serving
    allowed = _create(client, config={"executor": "none"})  # a registered name
    assert allowed.status_code == 200, allowed.text
    client.delete(f"{V1}/{allowed.json()['episode_id']}", headers=A)


# ---------------------------------------------------------------- responses


def test_a_lone_surrogate_in_an_action_returns_the_observation(serve):
    """A lone surrogate in the action ran the command, then the response failed (500) and
    the observation was lost."""
    client = serve()
    episode_id = _create(client).json()["episode_id"]
    response = _raw(client, f"{V1}/{episode_id}/step", '{"action": "echo marker-42 \\ud800"}')
    assert response.status_code == 200, response.text
    body = response.json()
    assert "marker-42" in body["observation"] and not body["terminated"]
    assert client.get(f"{V1}/{episode_id}", headers=A).json()["steps"] == 1
    trajectory = client.get(f"{V1}/{episode_id}/trajectory", headers=A)
    assert trajectory.status_code == 200
    # a file written with one, read back
    write = _raw(client, f"{V1}/{episode_id}/step", '{"action": "echo \\udcff > s.txt"}')
    assert write.status_code == 200
    read = client.post(f"{V1}/{episode_id}/step", json={"action": "cat s.txt"}, headers=A)
    assert read.status_code == 200
    assert client.get(f"{V1}/{episode_id}/patch", headers=A).status_code == 200
    # as a tool-call mapping, and in an error's text
    mapping = _raw(client, f"{V1}/{episode_id}/step",
                   '{"action": {"name": "no_such_tool\\ud800", "arguments": {}}}')  # fmt: skip
    assert mapping.status_code == 200, mapping.text
    unknown = _raw(client, f"{V1}/{episode_id}/restore", '{"snapshot_id": "x\\ud800"}')
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_snapshot"
    client.delete(f"{V1}/{episode_id}", headers=A)


def test_operator_options_reach_the_config(tmp_path):
    import argparse

    from sweworld.serve.world.policy import DEFAULT_CLIENT_KEYS
    from sweworld.serve.world.server import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    default = config_from_args(parser.parse_args(["--token", TOKEN_A]))
    assert not default.allow_task_rows and not default.allow_config_executor
    assert default.client_config_keys == DEFAULT_CLIENT_KEYS
    assert "mode" not in default.allowed_client_keys
    assert "executor" not in default.allowed_client_keys
    args = parser.parse_args([
        "--token", TOKEN_A, "--allow-task-rows", "--client-config-keys", "max_steps, seed",
        "--max-wall", "120", "--max-observation-chars", "5000", "--max-configs-per-token", "2",
        "--max-snapshots-per-episode", "3", "--max-snapshots-per-token", "5",
        "--max-forks-per-token", "1", "--max-ended-per-token", "7", "--allow-config-executor",
        "--max-live-episodes", "9", "--disk-budget-mb", "4096",
    ])  # fmt: skip
    config = config_from_args(args)
    assert config.allow_task_rows and config.client_config_keys == {"max_steps", "seed"}
    assert config.allowed_client_keys == {"max_steps", "seed", "executor", "model", "swr_model"}
    assert config.episode.max_wall_s == 120 and config.episode.max_observation_chars == 5000
    assert (config.max_configs_per_token, config.max_snapshots_per_episode) == (2, 3)
    assert (config.max_snapshots_per_token, config.max_forks_per_token) == (5, 1)
    assert config.max_ended_per_token == 7
    assert (config.max_live_episodes, config.disk_budget_mb) == (9, 4096)
    assert default.max_live_episodes == 256 and default.disk_budget_mb is not None
    for bad in (["--max-wall", "inf"], ["--max-snapshots-per-token", "0"],
                ["--max-live-episodes", "0"], ["--disk-budget-mb", "nan"]):  # fmt: skip
        with pytest.raises(SystemExit):
            parser.parse_args(["--token", TOKEN_A, *bad])


def test_components_are_counted_and_a_failed_build_holds_nothing():
    from sweworld.serve.world.components import Components, ConfigsExhausted

    default = EpisodeConfig(executor="none", reward="none")
    parts = Components(manager=None, default=default, max_per_owner=1)
    bogus = default.replace(executor="simulated", model="bogus:x")
    with pytest.raises(ValueError, match="bogus"):
        parts.acquire("a", bogus)
    assert parts.held("a") == 0 and len(parts) == 0
    own = parts.acquire("a", default)  # the server's own: never counted
    other = parts.acquire("a", default.replace(reward_preset="score"))
    with pytest.raises(ConfigsExhausted):
        parts.acquire("a", default.replace(reward_preset="shaped"))
    shaped = parts.acquire("b", default.replace(reward_preset="shaped"))  # b's own limit
    fork = parts.share(other)
    assert len(parts) == 3 and parts.held("a") == 1
    parts.release(other)
    parts.release(other)  # twice: once only
    assert len(parts) == 3  # the fork still holds it
    parts.release(fork)
    assert len(parts) == 2 and parts.held("a") == 0
    for lease in (own, shaped):
        parts.release(lease)
    assert len(parts) == 1  # the server's own parts stay
    parts.close()
    assert len(parts) == 0
