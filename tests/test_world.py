"""The World: one config, parts built once (lazily), closed once; the only place that turns
spec strings into executors and models."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from sweworld.env import Episode, EpisodeConfig
from sweworld.models import ReplayLM
from sweworld.sandbox.executor import ExecutionResult, NoExecutor
from sweworld.sandbox.registry import names, register
from sweworld.world import (
    World,
    WorldConfig,
    build_executor,
    check_executor_spec,
    lm_from_spec,
    world_names,
)

ROOT = Path(__file__).resolve().parents[1] / "sweworld"
QUIET = WorldConfig(executor="none", reward="none")


class Closing:
    """An executor (or manager) that counts its closes."""

    name = "closing"

    def __init__(self) -> None:
        self.closed = 0
        self.closed_all = 0

    def execute(self, request):  # the Executor protocol
        return ExecutionResult(stdout="", exit_code=0)

    def close(self) -> None:
        self.closed += 1

    def close_all(self) -> None:
        self.closed_all += 1


def test_every_config_field_has_help_text():
    helps = WorldConfig.fields_help()
    assert set(helps) == {f.name for f in fields(WorldConfig)}
    assert all(len(text) > 20 for text in helps.values()), helps


def test_the_config_of_an_episode_config_and_back():
    episode = EpisodeConfig(executor="local", mode="oracle", seed=7, reward="real", max_steps=3)
    config = WorldConfig.from_episode(episode, batch_lm=True)
    assert (config.executor, config.mode, config.seed, config.reward) == (
        "local",
        "oracle",
        7,
        "real",
    )
    assert config.batch_lm and config.step_timeout_s == episode.step_timeout_s
    back = config.episode_config()
    assert (back.executor, back.mode, back.seed, back.reward) == ("local", "oracle", 7, "real")
    assert config.key() != WorldConfig.from_episode(episode).key()  # batch_lm differs


def test_worlds_by_short_name_and_registered_ones():
    assert WorldConfig.named("outcome") == WorldConfig()
    assert WorldConfig.named("real").executor == "local"
    assert WorldConfig.named("lm", seed=3) == WorldConfig(executor="simulated", seed=3)
    with pytest.raises(ValueError, match="unknown world 'nowhere'"):
        WorldConfig.named("nowhere")
    register("world", "quiet-test", "tests.test_world:QUIET")
    assert "quiet-test" in world_names()
    assert WorldConfig.named("quiet-test") == QUIET
    register("world", "not-a-config-test", "tests.test_world:Closing")
    with pytest.raises(ValueError, match="not a WorldConfig"):
        WorldConfig.named("not-a-config-test")


def test_the_registry_has_one_kind_per_group():
    assert "none" in names("executor")
    with pytest.raises(ValueError, match="unknown kind"):
        names("widgets")
    with pytest.raises(ValueError, match="plain word"):
        register("lm", "a:b", "x.y:z")


def test_a_registered_language_model_kind(tmp_path):
    register("lm", "echotest", "tests.test_world:_echo_lm")
    lm = lm_from_spec("echotest:hello")
    assert isinstance(lm, ReplayLM)
    assert lm.complete([{"role": "user", "content": "x"}]) == "hello"
    with pytest.raises(ValueError, match="unknown LM spec"):
        lm_from_spec("nosuchkind:x")


def _echo_lm(arg: str, **options) -> ReplayLM:
    return ReplayLM([arg], **options)


def test_parts_are_built_on_first_use_and_only_own_parts_are_closed():
    manager, executor = Closing(), Closing()
    world = World(QUIET, manager=manager)
    assert world.built("executor") is None and world.built("rewarder") is None
    assert isinstance(world.executor, NoExecutor)
    assert world.built("executor") is world.executor
    assert world.lm is None  # none needed
    world.close()
    world.close()  # once
    assert manager.closed_all == 0  # the caller's
    given = World(QUIET, executor=executor)
    assert given.executor is executor
    given.rewarder  # noqa: B018 (built: its own manager too)
    given.close()
    assert executor.closed == 0 and given.closed
    with pytest.raises(ValueError, match="no part"):
        given.built("widget")


def test_an_own_executor_is_closed_with_the_world():
    register("executor", "closingtest", "tests.test_world:Closing")
    world = World(WorldConfig(executor="closingtest", reward="none"))
    made = world.executor
    assert isinstance(made, Closing)
    with world:
        pass
    assert made.closed == 1


def test_a_batched_model_wraps_the_callers_model_and_leaves_it_open():
    from sweworld.env.batching import BatchingLM
    from sweworld.transition.simulated import SimulatedExecutor

    inner = ReplayLM(['{"stdout": "ok\\n", "stderr": "", "exit_code": 0}'])
    closed = []
    inner.close = lambda: closed.append(True)  # type: ignore[method-assign]
    world = World(WorldConfig(executor="simulated", batch_lm=True), lm=inner)
    assert isinstance(world.lm, BatchingLM) and world.lm.wrapped is inner
    assert isinstance(world.executor, SimulatedExecutor)
    world.close()
    assert closed == []
    # no batching asked for: the executor builds its own model from the spec
    assert World(WorldConfig(executor="simulated")).lm is None


def test_bad_specs_are_said_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match="unknown executor"):
        WorldConfig(executor="nowhere").check()
    with pytest.raises(ValueError, match="not an executor class or factory"):
        check_executor_spec("os.system")
    with pytest.raises(ValueError, match="unknown LM spec"):
        WorldConfig(executor="simulated", model="bogus:x").check()
    with pytest.raises(FileNotFoundError):
        WorldConfig(reward="swr", swr_model=f"replay:{tmp_path / 'missing.jsonl'}").check()
    WorldConfig().check()  # the default world is fine
    assert isinstance(build_executor(QUIET), NoExecutor)


def test_an_episode_uses_a_given_world_and_leaves_it_open():
    manager = Closing()
    world = World(QUIET, manager=manager)
    with Episode(config=EpisodeConfig(executor="none", reward="none"), world=world) as episode:
        assert episode.world is world
        assert episode.executor is world.executor
    assert not world.closed
    with Episode(config=EpisodeConfig(executor="none", reward="none")) as own:
        built = own.world
        assert isinstance(own.executor, NoExecutor)
    assert built.closed  # its own world goes with it
    with pytest.raises(ValueError, match="world service"):  # a string is still the URL
        Episode(world="http://127.0.0.1:9")


def test_a_pool_shares_a_given_world_and_leaves_it_open():
    from sweworld.env import EnvPool

    world = World(QUIET, manager=Closing())
    config = EpisodeConfig(executor="none", reward="none")
    with pytest.raises(ValueError, match="give them to the World"):
        EnvPool(config, size=1, world=world, lm="embedded")
    pool = EnvPool(config, size=2, world=world)
    assert pool.executor is world.executor and pool.manager is world.manager
    assert all(episode.executor is world.executor for episode in pool.episodes)
    pool.close()
    assert not world.closed
    own = EnvPool(config, size=1)
    built = own.world
    own.close()
    assert built is not None and built.closed


# The places that build episodes, pools, services, benchmarks and the CLI's executors do not
# turn spec strings into objects themselves: they ask sweworld.world.
CALLERS = [
    "env",
    "serve",
    "data/collect.py",
    "data/collector.py",
    "bench/executors.py",
    "bench/e2e.py",
    "bench/e2e_agents.py",
    "bench/swt_run.py",
    "cli.py",
    "cli_inputs.py",
]
SPEC_CALLS = re.compile(r"\b(make_lm|make_executor|check_lm_spec|require_lm_extras)\(")


def test_only_the_world_parses_specs_for_its_callers():
    hits = []
    for part in CALLERS:
        path = ROOT / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
                if SPEC_CALLS.search(line):
                    hits.append(f"{file.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    assert hits == []


def test_the_declared_worlds_load():
    """``pyproject.toml``'s ``sweworld.worlds`` entry points (what an install registers):
    the presets are WorldConfigs, ``remote`` the service's episode class."""
    import tomllib

    from sweworld.sandbox.registry import load_object

    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject["project"]["entry-points"]["sweworld.worlds"]
    assert {"outcome", "lm", "real", "remote"} <= set(declared)
    for name, target in declared.items():
        if name == "remote":
            pytest.importorskip("httpx")
            assert load_object(target).__name__ == "RemoteEpisode"
        else:
            assert WorldConfig.named(name) == load_object(target)()


def test_an_executor_instance_that_cannot_be_copied_passes_through() -> None:
    """A given executor (a Docker client holds a socket) reaches the episode's config as is:
    never deep-copied."""
    import socket

    class HoldsASocket:
        def __init__(self) -> None:
            self.sock = socket.socket()

        def execute(self, request):  # pragma: no cover - never called here
            raise AssertionError

    executor = HoldsASocket()
    try:
        assert WorldConfig(executor=executor).episode_config().executor is executor
    finally:
        executor.sock.close()


# ------------------------------------------------- specs become objects here, lazily (issue 21)


def test_a_lazy_model_keeps_its_spec_and_loads_once_on_first_use(tmp_path):
    from sweworld.models import LazyLM

    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"text": "one"}\n{"text": "two"}\n')
    lazy = lm_from_spec(f"replay:{answers}", lazy=True)
    assert isinstance(lazy, LazyLM) and not lazy.loaded
    assert lazy.spec == f"replay:{answers}" and lazy.name == lazy.spec  # nothing loaded
    assert isinstance(lazy.load(), ReplayLM) and lazy.load() is lazy.wrapped
    assert lazy.complete([{"role": "user", "content": "hi"}]) == "one"  # forwarded
    lazy.close()
    assert not lazy.loaded
    assert lm_from_spec(None, lazy=True).spec == "embedded"
    given = ReplayLM([])
    assert lm_from_spec(given, lazy=True) is given  # an object is used as is


def test_an_lm_executor_gets_a_lazy_model_from_the_world():
    from sweworld.models import LazyLM
    from sweworld.transition.simulated import EMBEDDED_MAX_TOKENS, SimulatedExecutor
    from sweworld.world import executor_from_spec

    made = build_executor(WorldConfig(executor="simulated", model="embedded"))
    assert isinstance(made, SimulatedExecutor) and isinstance(made._lm, LazyLM)
    assert not made._lm.loaded  # a world that runs no step loads no model
    assert made.max_tokens == EMBEDDED_MAX_TOKENS  # the embedded budgets, read off the spec
    plain = executor_from_spec("simulated", lm="replay:none.jsonl")
    assert plain._lm.spec == "replay:none.jsonl" and plain.max_tokens != EMBEDDED_MAX_TOKENS
    assert executor_from_spec("simulated")._lm.spec == "embedded"  # None: the embedded model
    assert SimulatedExecutor().max_tokens == EMBEDDED_MAX_TOKENS  # None: the embedded model
    with pytest.raises(TypeError, match="lm_from_spec"):
        SimulatedExecutor("embedded")


def test_the_swr_model_is_lazy_and_in_process_models_are_shared(tmp_path, monkeypatch):
    import sweworld.reward.stages.simulated_tests as st
    from sweworld.world import clear_shared_lms, swr_lm_from_spec

    built = []

    def fake_lm(spec, **_):
        built.append(spec)
        return ReplayLM([], name=spec)

    monkeypatch.setattr("sweworld.world.lm_from_spec", fake_lm)
    first, second = swr_lm_from_spec("hf:/models/x"), swr_lm_from_spec("hf:/models/x")
    assert built == []  # nothing loaded yet
    assert first.load() is second.load() and built == ["hf:/models/x"]  # one per process
    first.close()  # a shared model stays loaded for the others
    assert "hf:/models/x" in st._SHARED
    clear_shared_lms()
    assert st._SHARED == {}
    server = swr_lm_from_spec("openai:http://x#m", lazy=False)
    assert server is not swr_lm_from_spec("openai:http://x#m", lazy=False)  # not shared


def test_the_real_reward_and_the_sandbox_take_executor_objects(toy_task):
    from sweworld.reward.real import real_reward

    with pytest.raises(TypeError, match="executor_from_spec"):
        real_reward(toy_task, "", executor="local")


def test_an_swr_world_binds_its_reward_as_the_outcome_executors_judge(toy_task):
    """One state, one truth: the default world's outcome executor asks the world's reward
    about a state whose graded tests it simulates; a world rewarded otherwise binds none."""
    with World() as world:
        judge = world.executor.judge
        assert callable(judge)
        assert judge(toy_task, toy_task.patch) is True
        assert judge(toy_task, "") is False  # an empty patch: a hard failure, not resolved
        assert world.built("rewarder") is not None  # the judge is the world's own reward
    with World(WorldConfig(reward="real")) as world:
        assert world.executor.judge is None
