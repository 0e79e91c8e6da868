"""The world service's client against the real service (uvicorn on loopback, in a thread),
and the adapters switched to a remote world by configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from sweworld.env import (  # noqa: E402
    EpisodeBusy,
    EpisodeConfig,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
)
from sweworld.env.opening import open_episode  # noqa: E402
from sweworld.serve.client import (  # noqa: E402
    TOKEN_ENV,
    RemoteEpisode,
    WorldAuthError,
    WorldClient,
    WorldError,
    WorldInvalid,
    WorldNotFound,
    WorldQuotaExceeded,
    WorldUnavailable,
)
from sweworld.serve.world.app import create_app  # noqa: E402
from sweworld.serve.world.config import ServiceConfig  # noqa: E402
from sweworld.tasks.toy import toy_tasks_path  # noqa: E402

TOKEN = "client-test-token-1"
OTHER = "client-test-token-2"
FAST = {"executor": "none", "reward": "none"}
FINISH = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


def _call(name, **params):
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<function={name}>\n{body}</function>"


def _demo_actions():
    path = toy_tasks_path().parent / "demo_actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def serving(tmp_path, **options):
    """A real world service on a loopback port (uvicorn in a thread); its URL."""
    options.setdefault("tokens", (TOKEN, OTHER))
    options.setdefault("episode", EpisodeConfig(executor="local", reward="real", max_steps=20))
    options.setdefault("tasks", str(toy_tasks_path()))  # task rows: only the server's own
    config = ServiceConfig(runtime_root=str(tmp_path / "runtime"), **options)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The service: real execution and real reward on the toy task; clients may choose
    the executor per episode (``executor="none"`` keeps adapter tests fast)."""
    root = tmp_path_factory.mktemp("world")
    with serving(root, allow_config_executor=True, max_body_bytes=256 * 1024) as url:
        yield url


@pytest.fixture
def client(world):
    with WorldClient(world, TOKEN, timeout=60) as made:
        yield made
    with made.clone() as check:  # nothing the test opened may outlive it
        assert check.health().episodes == 0


def test_create_step_end_to_the_real_reward(client, toy_task):
    episode = client.create(task=toy_task)
    try:
        assert episode.id.startswith("w-") and episode.created
        assert toy_task.problem_statement.strip()[:40] in episode.observation
        assert episode.reset_info["instance_id"] == toy_task.instance_id
        outcomes = [episode.step(action) for action in _demo_actions()]
        last = outcomes[-1]
        assert isinstance(last, StepOutcome)
        _, reward, terminated, truncated, info = last
        assert terminated and not truncated and info["reason"] == "submitted"
        assert reward == 1.0 and episode.final.resolved is True
        assert episode.final.source == "real" and episode.final.status == "resolved"
        assert episode.done and episode.reason == "submitted"
        assert "def slugify" in episode.patch and episode.patch == info["patch"]
        assert episode.steps == len(outcomes) == info["steps"]
        assert not any(o.done for o in outcomes[:-1])
        with pytest.raises(EpisodeFinished):
            episode.step("ls")
        state = episode.state()
        assert state.done and state.steps == episode.steps and state.reason == "submitted"
        trajectory = episode.trajectory()
        assert trajectory.instance_id == toy_task.instance_id
        assert trajectory.meta["episode_id"] == info["episode_id"] == episode.id
        assert len(trajectory.steps) == len(outcomes)
        assert trajectory.submission == episode.patch
        assert trajectory.meta["config"]["executor"] == "local"
        # the episode starts again on the service, with a fresh workspace
        episode.reset()
        assert episode.steps == 0 and not episode.done and episode.current_patch() == ""
    finally:
        episode.close()
    episode.close()  # idempotent
    with pytest.raises(EpisodeError, match="closed"):
        episode.step("ls")


def test_end_score_snapshot_restore_fork(client, toy_task):
    with client.create(task=toy_task, config=FAST) as episode:
        episode.step("echo one > notes.txt")
        snap = episode.snapshot()
        episode.step("echo two > notes.txt")
        assert "two" in episode.current_patch()
        episode.restore(snap)
        assert episode.steps == 1 and "one" in episode.current_patch()
        with pytest.raises(KeyError):
            episode.restore("no-such-snapshot")
        with episode.fork() as twin:
            assert twin.id != episode.id and twin.steps == 1
            twin.step("echo three > notes.txt")
            assert "three" in twin.current_patch() and "one" in episode.current_patch()
        verdict = episode.score()
        assert verdict.source == "none" and episode.steps == 1  # reward none: scored 0
        out = episode.end("max_steps")
        assert out.truncated and episode.reason == "max_steps" and "one" in episode.patch
        with pytest.raises(EpisodeFinished):
            episode.end("max_steps")
        with pytest.raises(ValueError):
            RemoteEpisode(client, toy_task).end("not-a-reason")


def test_errors_are_mapped(world, client, toy_task, monkeypatch):
    with pytest.raises(WorldAuthError) as wrong:
        WorldClient(world, "not-the-token-at-all").create(task=toy_task, config=FAST)
    assert isinstance(wrong.value, PermissionError) and wrong.value.status == 401
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(PermissionError, match=TOKEN_ENV):
        WorldClient(world).create(task=toy_task, config=FAST)
    with pytest.raises(WorldNotFound) as unknown:
        client.attach("w-no-such-episode")
    assert isinstance(unknown.value, KeyError) and "w-no-such-episode" in str(unknown.value)
    with pytest.raises(EpisodeError, match="needs a task"):
        RemoteEpisode(client).reset()
    with client.create(task=toy_task, config={"reward": "none"}) as episode:
        # another token's episode is unknown to it
        with WorldClient(world, OTHER) as other, pytest.raises(KeyError):
            other.attach(episode.id)
        # too large: the body is over the service's bound (413)
        with pytest.raises(WorldInvalid) as large:
            episode.step("echo " + "x" * 300_000)
        assert isinstance(large.value, ValueError) and large.value.status == 413
        with pytest.raises(TypeError):
            episode.step(12345)
        with pytest.raises(ValueError):
            episode.step("ls", timeout=-1)
        # the service refuses the call while another handle steps the episode (409 busy)
        handle = client.attach(episode.id)
        slow = threading.Thread(target=episode.step, args=("sleep 1.5",))
        slow.start()
        time.sleep(0.4)
        try:
            with pytest.raises(EpisodeBusy):
                handle.step("ls")
            with pytest.raises(EpisodeBusy):  # and so does the episode itself, at once
                episode.step("ls")
        finally:
            slow.join()
        episode.step(FINISH)
        assert episode.done
        with pytest.raises(EpisodeFinished) as finished:  # the service says so (409)
            handle.step("ls")
        assert isinstance(finished.value, WorldError) and finished.value.status == 409
    with pytest.raises(KeyError):  # closed: gone from the service
        handle.state()


@pytest.mark.slow  # a second service, and a Retry-After waited out (about 5 s)
def test_refused_override_and_quotas(tmp_path, toy_task):
    with serving(tmp_path, max_episodes_per_token=1, max_steps_per_minute=2) as url:
        client = WorldClient(url, TOKEN)
        with pytest.raises(WorldInvalid, match="executor"):  # not allowed on this server
            client.create(task=toy_task, config={"executor": "none"})
        first = client.create(task=toy_task, config={"reward": "none"})
        with pytest.raises(WorldQuotaExceeded) as quota:
            client.create(task=toy_task)
        assert quota.value.status == 429 and quota.value.retry_after >= 1
        first.step("ls")
        first.step("ls")
        with pytest.raises(WorldQuotaExceeded, match="steps"):
            first.step("ls")
        # waiting out the quota: a slot frees while the client waits (Retry-After)
        patient = WorldClient(url, TOKEN, quota_wait_s=10)
        threading.Timer(0.3, first.close).start()
        started = time.monotonic()
        second = patient.create(task=toy_task, config={"reward": "none"})
        assert 0.3 < time.monotonic() - started < 8
        second.close()
        client.close()
        patient.close()


def test_server_down_is_unavailable_quickly(toy_task):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(WorldUnavailable, match="sweworld serve world") as down:
        WorldClient(url, TOKEN).create(task=toy_task)
    assert isinstance(down.value, ConnectionError) and url in str(down.value)
    assert time.monotonic() - started < 3
    # a service that takes the connection but never answers: WorldTimeout, not a hang
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        silent = f"http://127.0.0.1:{mute.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="did not answer"):
            WorldClient(silent, TOKEN, timeout=0.5).health()
        assert time.monotonic() - started < 3
    # an adapter's episode says the same at its first reset
    episode = open_episode(toy_task, EpisodeConfig(world=url, world_token=TOKEN))
    with pytest.raises(ConnectionError, match="running at that URL"):
        episode.reset()
    episode.close()


def test_async_client_sixteen_episodes_in_one_loop(client, toy_task):
    async def one(i: int) -> tuple[str, str]:
        episode = await client.acreate(task=toy_task, config=FAST)
        try:
            out = await episode.astep(f"echo episode-{i} > mine.txt")
            assert not out.done
            out = await episode.astep("cat mine.txt")
            end = await episode.aend("max_steps")
            assert end.truncated and f"episode-{i}" in episode.patch
            return episode.id, out.observation
        finally:
            await episode.aclose()

    async def main() -> list[tuple[str, str]]:
        return await asyncio.gather(*(one(i) for i in range(16)))

    started = time.monotonic()
    results = asyncio.run(main())
    assert len({episode_id for episode_id, _ in results}) == 16
    for i, (_, observation) in enumerate(results):
        assert f"episode-{i}" in observation and "episode-" + str((i + 1) % 16) not in observation
    print(f"16 async episodes x 3 calls: {time.monotonic() - started:.2f} s")


def _gym_run(env, actions):
    env.reset()
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("the demo did not end the episode")


def test_gymnasium_env_runs_remotely_with_only_world_changed(world, toy_task, monkeypatch):
    gymnasium = pytest.importorskip("gymnasium")
    from sweworld.env.gymnasium_env import ENV_ID

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    settings = {"executor": "local", "reward": "real", "max_steps": 20}
    local = gymnasium.make(ENV_ID, task=toy_task, **settings)
    remote = gymnasium.make(ENV_ID, task=toy_task, world=world, **settings)
    try:
        assert isinstance(remote.unwrapped.episode, RemoteEpisode)
        local_reward, local_info = _gym_run(local, _demo_actions())
        remote_reward, remote_info = _gym_run(remote, _demo_actions())
        assert remote_reward == local_reward == 1.0
        assert remote_info["reason"] == local_info["reason"] == "submitted"
        assert remote_info["patch"] == local_info["patch"]
        assert remote_info["reward"]["resolved"] is True
        trajectory = remote.unwrapped.trajectory()
        assert len(trajectory.steps) == len(local.unwrapped.trajectory().steps)
        assert TOKEN not in json.dumps([remote_info, trajectory.meta], default=str)
        assert TOKEN not in repr(remote.unwrapped.config)
        assert "world_token" not in remote.unwrapped.config.to_dict()
    finally:
        local.close()
        remote.close()


def test_skyrl_env_runs_remotely_with_only_world_changed(world, toy_task):
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from sweworld.env.skyrl_env import ENV_ID, skyrl_dataset_row

    row = skyrl_dataset_row(toy_task)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = 20
    config = {"executor": "local", "reward": "real", "world": world, "world_token": TOKEN}
    env = skyrl_gym.make(ENV_ID, env_config=config, extras=extras)
    try:
        assert isinstance(env.episode, RemoteEpisode)
        messages, meta = env.init(row["prompt"])
        assert meta["episode_id"] == env.episode.id and messages[-1]["role"] == "user"
        outputs = [env.step(action) for action in _demo_actions()]
        *middle, last = outputs
        assert not any(o["done"] for o in middle) and last["done"]
        assert last["reward"] == 1.0 and last["metadata"]["reason"] == "submitted"
        assert env.get_metrics() == {"steps": len(outputs), "resolved": 1.0, "submitted": 1.0}
        assert TOKEN not in json.dumps(last["metadata"], default=str)
    finally:
        env.close()


def test_pool_and_r2e_env_remote(world, toy_task):
    from sweworld.env import EnvPool
    from sweworld.env.r2egym_env import EnvArgs, RepoEnv

    remote = {"world": world, "world_token": TOKEN, **FAST}
    with EnvPool(size=2, **remote) as pool:
        assert pool.manager is None and pool.executor is None
        starts = pool.reset([toy_task, toy_task])
        assert starts[0][1]["episode_id"] != starts[1][1]["episode_id"]
        outs = pool.step(["echo a > a.txt", FINISH])
        assert not outs[0].done and outs[1].done and outs[1].info["reason"] == "submitted"
    with pytest.raises(ValueError, match="world"):
        EnvPool(size=1, manager=object(), **remote)
    env = RepoEnv(EnvArgs(ds=toy_task.to_row()), **remote)
    try:
        env.reset()
        create = {"command": "create", "path": "/testbed/hello.txt", "file_text": "hello"}
        env.step(_call("file_editor", **create))
        assert "hello" in env.get_patch()
        with pytest.raises(EpisodeError, match="world service"):
            env.runtime.run("ls")
        assert env.compute_reward(submitted=False) == 0.0  # reward none
    finally:
        env.close()


def test_open_episode_switch(world, toy_task):
    local = open_episode(toy_task, EpisodeConfig(**FAST))
    assert not isinstance(local, RemoteEpisode)
    local.close()
    remote = open_episode(toy_task, EpisodeConfig(**FAST), world=world, world_token=TOKEN)
    assert isinstance(remote, RemoteEpisode) and remote.session is None
    assert not remote.created  # nothing on the service until the first reset
    remote.close()
    with pytest.raises(ValueError, match="executor"):
        open_episode(toy_task, EpisodeConfig(world=world), executor=object())
    with pytest.raises(AttributeError, match="world service"):
        remote.rewarder  # noqa: B018
    with pytest.raises(ValueError, match="http"):
        EpisodeConfig(world="host:8800")


def test_mini_swe_agent_runs_remotely(world):
    """mini's own loader and DefaultAgent, the environment section given ``world`` only."""
    import os

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    pytest.importorskip("minisweagent")
    from minisweagent.agents import get_agent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments import get_environment

    from tests.env.test_minisweagent_env import SOLVE, YAML, scripted_model

    config = get_config_from_spec(str(YAML))
    remote = {"world": world, "world_token": TOKEN}
    env = get_environment(dict(config["environment"], episode=remote))
    try:
        assert isinstance(env.episode, RemoteEpisode) and env.session is None
        model = scripted_model(config, SOLVE)
        agent = get_agent(model, env, dict(config["agent"]), default_type="default")
        info = agent.run(config["run"]["task"])
        assert info["exit_status"] == "Submitted"
        assert env.episode.reason == "submitted" and env.episode.final.resolved is True
        assert "slug.strip(separator)" in info["submission"]
    finally:
        env.close()


def test_the_trajectory_outlives_close_sync_and_async(client, toy_task):
    """The service forgets an episode at close; the client keeps the trajectory it fetched
    just before, so ``trajectory()`` after ``close()`` still answers (a copy each time)."""
    episode = client.create(task=toy_task, config=FAST)
    episode.step("echo one > notes.txt")
    episode.step("cat notes.txt")
    before = episode.trajectory()
    episode.close()
    after = episode.trajectory()
    assert [s.command for s in after.steps] == [s.command for s in before.steps]
    assert [s.action for s in after.steps] == ["echo one > notes.txt", "cat notes.txt"]
    assert after.meta["episode_id"] == before.meta["episode_id"] == episode.id
    after.steps.clear()
    assert len(episode.trajectory().steps) == 2
    with pytest.raises(EpisodeError, match="closed"):
        episode.step("ls")

    async def main() -> list[str]:
        remote = await client.acreate(task=toy_task, config=FAST)
        await remote.astep("echo two > notes.txt")
        await remote.aclose()
        return [s.action for s in remote.trajectory().steps]

    assert asyncio.run(main()) == ["echo two > notes.txt"]


def test_a_step_timeout_stops_a_simulated_python_command_on_the_service(tmp_path, toy_task):
    """Issue 18: a step with ``timeout: 3`` ran a Python command for 20.8 s (the model call
    ignored it) and the message named 300 s. The model here is an HTTP server that takes
    30 s; the step answers at its own 3 s and says so."""
    from sweworld.models.replay import ReplayLM
    from tests.model_fixtures import ChatServer

    answer = json.dumps({"stdout": "late\n", "stderr": "", "exit_code": 0})
    model = ChatServer(ReplayLM([answer], cycle=True))
    model.delay = 30.0
    episode_config = EpisodeConfig(
        executor="simulated", model=f"openai:{model.url}#swt", reward="none", max_steps=5
    )
    try:
        with (
            serving(tmp_path, episode=episode_config) as url,
            WorldClient(url, TOKEN, timeout=120) as client,
            client.create(task=toy_task) as episode,
        ):
            started = time.monotonic()
            out = episode.step("python -c 'import stockroom; print(1)'", timeout=3)
            assert time.monotonic() - started < 20  # not the model's 30 s
            assert out.info.get("timed_out") is True and not out.done
            assert "did not finish within" in out.observation
            assert "300" not in out.observation
    finally:
        model.httpd.shutdown()
