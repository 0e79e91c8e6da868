"""The world: the shared parts of a simulated or real world, built once and closed once.

A :class:`World` holds what every episode of one configuration shares: the session
manager, the executor (the outcome model, the language-model route, a hybrid or a real
executor), the SWT language model where one is configured (batched for many episodes at
once), the rewarder (the verdict: SWR, the real run, both or none) and, when given, warm
sessions. It is built from one :class:`WorldConfig`; a part the caller hands in is used
as is and left open, a part the world builds is closed by :meth:`World.close`.

This module is THE place where spec strings become objects: executor specs (``outcome``,
``simulated``, ``local``, ``scripted:FILE``, a dotted path), language-model specs
(``embedded``, ``openai:URL#MODEL``, ``replay:FILE``, ...; :func:`lm_from_spec`,
lazily as a :class:`~sweworld.models.LazyLM`; the SWR model: :func:`swr_lm_from_spec`) and
their checks. The layers below take objects only and refuse spec strings.
:class:`~sweworld.env.Episode`, :class:`~sweworld.env.EnvPool`, the Ray actors, the world
service, ``sweworld bench``, ``sweworld data collect`` and the CLI call it; the registries
themselves (:mod:`sweworld.sandbox.registry`, :mod:`sweworld.models`) stay the definitions.

Imports: everything below the entry points (tasks, sandbox, execution, models, transition,
reward) and the episode's own parts in :mod:`sweworld.env` (rewarder, batching, warm
sessions), always lazily inside functions; never :mod:`sweworld.serve`, ``bench``, ``data``
or ``cli``.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any

__all__ = [
    "LM_EXECUTORS",
    "PRESETS",
    "World",
    "WorldConfig",
    "build_executor",
    "check_executor_spec",
    "check_lm",
    "clear_shared_lms",
    "executor_from_spec",
    "lm_from_spec",
    "require_lm",
    "swr_lm_for",
    "swr_lm_from_spec",
    "world_names",
]

log = logging.getLogger(__name__)

#: Executors that answer through the SWT language model (``model``).
LM_EXECUTORS = ("simulated", "hybrid", "outcome-lm")
#: Executors whose language model a world shares among its episodes (batched).
_SHARED_LM_EXECUTORS = ("simulated", "hybrid")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class WorldConfig:
    """What a world is made of (every field has a default that runs on a CPU).

    ``WorldConfig.fields_help()`` lists every field with its help text.
    """

    executor: Any = field(
        default="outcome",
        metadata=_help(
            "what answers execution commands: 'outcome' (the outcome model decides, the "
            "renderer writes), 'simulated' (the SWT language model writes the output), "
            "'hybrid', 'outcome-lm', 'local' (real), 'docker', 'none', 'scripted:FILE', a "
            "dotted path, or an executor instance"
        ),
    )
    model: str = field(
        default="embedded",
        metadata=_help(
            "the SWT language-model spec for the LM executors (simulated, hybrid, "
            "outcome-lm): 'embedded', 'embedded+ADAPTER', 'hf:PATH', 'openai:URL#MODEL', "
            "'vllm:URL#MODEL', 'replay:FILE'"
        ),
    )
    mode: str = field(
        default="oracle",
        metadata=_help(
            "'oracle' (the task's gold patch, test patch and test lists, which the agent never "
            "sees) or 'blind' (none of them): what the world and the verdict may read"
        ),
    )
    step_timeout_s: float = field(
        default=300.0,
        metadata=_help("deadline of one execution call, simulated or real (seconds)"),
    )
    seed: int = field(default=0, metadata=_help("the simulator's and the verdict's seed"))
    reward: str = field(
        default="swr",
        metadata=_help("where the verdict comes from: 'swr', 'real', 'both' or 'none'"),
    )
    reward_preset: str = field(
        default="binary",
        metadata=_help("how the verdict becomes a scalar: binary, score, shaped, stage_penalty"),
    )
    swr_stages: tuple[str, ...] | None = field(
        default=None, metadata=_help("the SWR stages to run (None: all)")
    )
    swr_model: str = field(
        default="embedded", metadata=_help("the SWR model spec (the verdict's language model)")
    )
    batch_lm: bool = field(
        default=False,
        metadata=_help(
            "wrap the SWT model in one BatchingLM so the model calls of concurrent "
            "episodes are merged (pools, Ray actors, the world service)"
        ),
    )
    max_batch: int = field(
        default=32, metadata=_help("most model calls merged into one batch (batch_lm)")
    )
    batch_wait_s: float = field(
        default=0.005, metadata=_help("how long a batch waits to fill (seconds, batch_lm)")
    )
    lm_concurrency: int = field(
        default=1,
        metadata=_help(
            "batches of model calls in flight at once (batch_lm): 1 for a model in this "
            "process, more for an openai:/vllm: server, which batches on its side"
        ),
    )

    @classmethod
    def fields_help(cls) -> dict[str, str]:
        """Every field's name and help text."""
        return {f.name: f.metadata["help"] for f in fields(cls)}

    @classmethod
    def from_episode(cls, config: Any, **options: Any) -> WorldConfig:
        """The world an :class:`~sweworld.env.EpisodeConfig` needs (its executor, model,
        mode, deadline, seed and reward), with ``options`` (``batch_lm=True``, ...)."""
        shared = {f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)}
        shared.update(options)
        return cls(**shared)

    @classmethod
    def named(cls, name: str, **options: Any) -> WorldConfig:
        """A world by short name (see :func:`world_names`): the registry's preset, with
        ``options`` on top."""
        from sweworld.sandbox.registry import load_object

        known_names = world_names()
        target = known_names.get(name)
        if target is None:
            known = ", ".join(sorted(known_names))
            raise ValueError(f"unknown world {name!r}; known: {known}")
        preset = load_object(target)
        base = preset() if callable(preset) else preset
        if not isinstance(base, WorldConfig):
            raise ValueError(f"world {name!r} ({target}) is not a WorldConfig")
        return replace(base, **options)

    def replace(self, **changes: Any) -> WorldConfig:
        """A copy with ``changes``."""
        return replace(self, **changes)

    def key(self) -> tuple[str, ...]:
        """A tuple naming the parts this config builds (worlds with equal keys may be
        shared)."""
        return tuple(
            json.dumps(getattr(self, f.name), sort_keys=True, default=str) for f in fields(self)
        )

    def episode_config(self) -> Any:
        """An :class:`~sweworld.env.EpisodeConfig` with this world's settings (what the
        rewarder reads)."""
        from sweworld.env.config import EpisodeConfig

        names = {f.name for f in fields(EpisodeConfig)}
        # the values as they are (asdict would deep-copy an executor instance given as the
        # executor: a Docker client's socket cannot be copied)
        return EpisodeConfig(
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name in names}
        )

    def check(self) -> None:
        """Raise ``ValueError`` / ``FileNotFoundError`` for an executor or model spec that
        cannot work, without loading a model (see :func:`check_executor_spec`)."""
        check_executor_spec(self.executor)
        check_lm(self.model)  # also when unused: a typo in it is said, not kept
        if self.reward in ("swr", "both"):
            check_lm(self.swr_model)


# ------------------------------------------------------------------ spec strings -> objects


#: The worlds every installation knows (more come from the ``sweworld.worlds`` entry points).
PRESETS = {
    "outcome": "sweworld.world:outcome_world",
    "lm": "sweworld.world:lm_world",
    "real": "sweworld.world:real_world",
}


def world_names() -> dict[str, str]:
    """The short names of worlds: :data:`PRESETS`, then the entry points of the
    ``sweworld.worlds`` group and those registered at run time."""
    from sweworld.sandbox.registry import names

    return {**PRESETS, **names("world")}


def outcome_world() -> WorldConfig:
    """The default world: the outcome model answers, the SWR verdict rewards."""
    return WorldConfig()


def lm_world() -> WorldConfig:
    """The language-model route: the embedded SWT model writes the whole output."""
    return WorldConfig(executor="simulated")


def real_world() -> WorldConfig:
    """A real world: commands run for real, the reward is the real test run."""
    return WorldConfig(executor="local", reward="real")


def executor_from_spec(spec: Any = None, **options: Any) -> Any:
    """An executor from a spec (``none``, ``local``, ``outcome:MODEL``, a dotted path, or an
    instance, returned as is); ``options`` go to its constructor. The LM executors
    (:data:`LM_EXECUTORS`) get their ``lm=`` option as an object: a spec string or None
    (the embedded model) becomes ``lm_from_spec(spec or "embedded", lazy=True)``, loaded
    on the first step that asks the model."""
    from sweworld.sandbox.registry import make_executor

    if isinstance(spec, str) and spec in LM_EXECUTORS:
        given = options.get("lm")
        if given is None or isinstance(given, str):
            options["lm"] = lm_from_spec(given or "embedded", lazy=True)
    return make_executor(spec, **options)


def lm_from_spec(spec: Any = None, *, lazy: bool = False, **options: Any) -> Any:
    """A language model from a spec (``embedded``, ``openai:URL#MODEL``, ``replay:FILE``,
    ...; None: ``embedded``; an LM instance is returned as is); ``options`` go to its
    backend. ``lazy``: a :class:`~sweworld.models.LazyLM` that loads the model on first use
    (a spec that cannot work then fails there, not here: :func:`check_lm` says it now)."""
    from sweworld.models import LazyLM, make_lm

    if lazy and (spec is None or isinstance(spec, str)):
        return LazyLM(spec or "embedded", **options)
    return make_lm(spec, **options)


def _in_process(spec: str) -> bool:
    return spec.startswith(("embedded", "hf:"))


def swr_lm_from_spec(spec: str | None = None, *, lazy: bool = True) -> Any:
    """The SWR model (the reward's tests stage) for ``spec`` (:func:`lm_from_spec`'s forms;
    None: ``embedded``, with the shipped SWR adapter when present). In-process models
    (``embedded...``, ``hf:...``) are built once per process and shared (until
    :func:`clear_shared_lms`; closing the LazyLM leaves them open); a server's client is new
    each time (its caller closes it).
    ``lazy`` (default): a :class:`~sweworld.models.LazyLM` that builds it on first use."""
    text = (spec or "embedded").strip()
    if lazy:
        from sweworld.models import LazyLM

        return LazyLM(text, loader=_load_swr_lm, shared=_in_process(text))
    return _load_swr_lm(text)


def swr_lm_for(config: Any) -> Any:
    """The SWR model an episode config's rewarder needs (:func:`swr_lm_from_spec` of its
    ``swr_model``, lazy), or None when its reward runs no ``tests`` stage."""
    stages = getattr(config, "swr_stages", None) or ()
    if getattr(config, "reward", None) in ("swr", "both") and "tests" in stages:
        return swr_lm_from_spec(config.swr_model)
    return None


def _load_swr_lm(text: str) -> Any:
    if not _in_process(text):
        return lm_from_spec(text)
    from sweworld.reward.stages.simulated_tests import share_lm

    if text in ("embedded", "embedded:default"):  # the shipped SWR adapter, if any

        def build() -> Any:
            from sweworld.models.embedded import load_embedded

            return load_embedded(target="swr")

        return share_lm(text, build)
    return share_lm(text, lambda: lm_from_spec(text))


def clear_shared_lms() -> None:
    """Close and forget the shared in-process SWR models (those :func:`swr_lm_from_spec`
    loaded)."""
    from sweworld.reward.stages.simulated_tests import clear_shared_lms as clear

    clear()


def check_lm(spec: str | None) -> None:
    """Raise what :func:`lm_from_spec` would raise for a spec that cannot work, without
    loading a model."""
    from sweworld.models import check_lm_spec

    check_lm_spec(spec)


def require_lm(spec: str | None, what: str = "the SWT model") -> None:
    """Raise when the packages or files the spec's backend needs are missing."""
    from sweworld.models import require_lm_extras

    require_lm_extras(spec, what)


def check_executor_spec(spec: Any) -> None:
    """An executor spec resolves, without building a model: a registered name (``NAME:ARG``
    built, to check ``ARG``), or a dotted path to an executor class or a Python factory
    function (not a builtin such as ``os.system``); an instance passes. ``ValueError`` with
    one line otherwise."""
    import inspect

    from sweworld.sandbox.registry import executor_names, load_object

    if not isinstance(spec, str):
        return
    names = executor_names()
    name, sep, _ = spec.partition(":")
    if sep and name in names:
        _close(executor_from_spec(spec))
    elif spec not in names:
        if "." not in spec:
            known = ", ".join(sorted(names))
            raise ValueError(f"unknown executor {spec!r}; known: {known} (or a dotted path)")
        target = load_object(spec)
        is_class = inspect.isclass(target) and callable(getattr(target, "execute", None))
        if not (is_class or inspect.isfunction(target)):
            raise ValueError(
                f"executor {spec!r} is not an executor class or factory function "
                f"(it is a {type(target).__name__})"
            )


def build_executor(config: WorldConfig, lm: Any = None) -> Any:
    """The executor ``config`` names. An LM executor gets the config's model (or ``lm``, an
    LM instance such as a :class:`~sweworld.env.batching.BatchingLM` shared by many
    episodes), mode, seed and step deadline; ``local`` gets the deadline."""
    spec = config.executor
    if lm is not None and spec in _SHARED_LM_EXECUTORS:
        return _shared_lm_executor(config, lm)
    if spec in LM_EXECUTORS:
        check_lm(config.model)
        return executor_from_spec(
            spec,
            lm=config.model,  # made a LazyLM by executor_from_spec
            mode=config.mode,
            step_timeout=config.step_timeout_s,
            seed=config.seed,
        )
    if spec == "local":
        return executor_from_spec("local", timeout=config.step_timeout_s)
    if isinstance(spec, str) and spec.partition(":")[0] == "outcome":
        return executor_from_spec(spec, mode=config.mode)
    return executor_from_spec(spec)


def _shared_lm_executor(config: WorldConfig, lm: Any) -> Any:
    from sweworld.transition.simulated import SimulatedExecutor

    options: dict[str, Any] = {
        "mode": config.mode,
        "step_timeout": config.step_timeout_s,
        "seed": config.seed,
    }
    if _is_embedded_lm(lm):
        # What SimulatedExecutor picks for the embedded spec: a short answer budget and the
        # small context that fits a CPU model.
        from sweworld.transition.context import ContextConfig
        from sweworld.transition.simulated import EMBEDDED_BUDGETS, EMBEDDED_MAX_TOKENS

        options["max_tokens"] = EMBEDDED_MAX_TOKENS
        options["context"] = ContextConfig(mode=config.mode, **EMBEDDED_BUDGETS)
    simulated = SimulatedExecutor(lm, **options)
    if config.executor == "simulated":
        return simulated
    from sweworld.execution.local import LocalExecutor
    from sweworld.transition.hybrid import EveryK, HybridExecutor

    return HybridExecutor(simulated, LocalExecutor(timeout=config.step_timeout_s), policy=EveryK(5))


def _is_embedded_lm(lm: Any) -> bool:
    """Whether ``lm`` (or the model a BatchingLM wraps) is the embedded model, without
    loading it: a LazyLM's spec says it, a loaded model its ``_extra_info``."""
    from sweworld.models import LazyLM

    inner = lm if isinstance(lm, LazyLM) else getattr(lm, "wrapped", lm)  # .wrapped loads a LazyLM
    if isinstance(inner, LazyLM):
        return inner.spec.startswith("embedded")
    info = getattr(inner, "_extra_info", None)
    return isinstance(info, dict) and bool(info.get("embedded"))


def _close(part: Any) -> None:
    closer = getattr(part, "close", None)
    if callable(closer):
        try:
            closer()
        except Exception:
            log.exception("closing %s failed", type(part).__name__)


# ------------------------------------------------------------------------------ the world


class World:
    """The shared parts of one world (see the module docstring), built lazily on first use
    (a world that only runs ``none`` never loads a model) and closed once.

    Args:
        config: what to build (default: :class:`WorldConfig`'s defaults, the outcome world).
        manager: a session manager to use (not closed here); default: one of its own.
        executor: an executor object to use instead of the config's (not closed here; a
            spec string replaces the config's ``executor``: built and closed here).
        lm: the SWT model, an LM instance or a spec (an instance is shared with the caller:
            not closed here); default: the config's ``model`` when the executor needs one.
        rewarder: an :class:`~sweworld.env.rewards.EpisodeRewarder` to use (not closed).
        warm: :class:`~sweworld.env.warm.WarmSessions` to open sessions from (bound to this
            world's manager and executor when it has none; the caller closes it).
    """

    def __init__(
        self,
        config: WorldConfig | None = None,
        *,
        manager: Any = None,
        executor: Any = None,
        lm: Any = None,
        rewarder: Any = None,
        warm: Any = None,
    ):
        self.config = config or WorldConfig()
        if isinstance(executor, str):  # a spec: the config's executor, built here
            self.config, executor = replace(self.config, executor=executor), None
        self._lock = threading.RLock()
        self._manager, self._own_manager = manager, manager is None
        self._executor, self._own_executor = executor, executor is None
        self._rewarder, self._own_rewarder = rewarder, rewarder is None
        self._lm_given = lm
        self._lm: Any = None
        self._swr_lm: Any = None  # the rewarder's SWR model, when its stages need one
        self._own_lm = True
        self.warm = warm
        self._warm_bound = False
        self.closed = False

    @classmethod
    def for_episode(cls, config: Any, **parts: Any) -> World:
        """The world of an :class:`~sweworld.env.EpisodeConfig` (see :class:`World` for
        ``parts``; ``batch_lm=``, ``max_batch=``, ``batch_wait_s=`` go to the config)."""
        names = ("batch_lm", "max_batch", "batch_wait_s", "lm_concurrency")
        options = {k: parts.pop(k) for k in names if k in parts}
        return cls(WorldConfig.from_episode(config, **options), **parts)

    def __repr__(self) -> str:
        return f"<World executor={self.config.executor!r} reward={self.config.reward!r}>"

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------------- the parts

    @property
    def manager(self) -> Any:
        """The session manager (built on first use)."""
        with self._lock:
            if self._manager is None:
                from sweworld.sandbox.manager import SessionManager

                self._manager = SessionManager()
            return self._manager

    @property
    def lm(self) -> Any:
        """The SWT language model the executor shares (None when the executor needs none
        or builds its own: a world without ``batch_lm`` and no ``lm`` given)."""
        with self._lock:
            if self._lm is None:
                self._lm = self._build_lm()
            return self._lm

    def _build_lm(self) -> Any:
        given = self._lm_given
        if self.config.executor not in _SHARED_LM_EXECUTORS:
            return None
        if given is None and (not self.config.batch_lm or not self._own_executor):
            return None  # the executor builds (or was given with) its own model
        from sweworld.env.batching import BatchingLM

        batch = {"max_batch": self.config.max_batch, "batch_wait_s": self.config.batch_wait_s}
        if isinstance(given, BatchingLM):
            self._own_lm = False
            return given
        if given is None or isinstance(given, str):
            spec = given if given is not None else self.config.model
            check_lm(spec)
            return BatchingLM(
                lm_from_spec(spec), max_concurrent=self.config.lm_concurrency, **batch
            )
        # An LM the caller made: shared with them, not closed with the world.
        return BatchingLM(given, close_wrapped=False, **batch)

    @property
    def executor(self) -> Any:
        """The executor (built on first use)."""
        with self._lock:
            if self._executor is None:
                self._executor = build_executor(self.config, self.lm)
                self._bind_judge(self._executor)
            return self._executor

    def _bind_judge(self, executor: Any) -> None:
        """One state, one truth: an outcome executor of an SWR-rewarded world asks the
        world's reward whether a state resolves the task when it simulates the task's graded
        tests, so the run it shows never contradicts the reward of that state. (A world
        rewarded by a real run, ``real`` or ``both``, binds none: the real run is not known
        before it happens.)"""
        if self.config.reward != "swr" or getattr(executor, "judge", True) is not None:
            return  # not an outcome executor, or one given its own judge

        def judge(task: Any, patch: str) -> bool | None:
            return self.rewarder.reward_model.judge(task, patch)

        executor.judge = judge

    @property
    def rewarder(self) -> Any:
        """The rewarder: the verdict of a patch (built on first use)."""
        with self._lock:
            if self._rewarder is None:
                from sweworld.env.rewards import EpisodeRewarder

                self._swr_lm = swr_lm_for(self.config)  # loaded on first use, if needed
                self._rewarder = EpisodeRewarder(
                    self.config.episode_config(), swr_lm=self._swr_lm, manager=self.manager
                )
            return self._rewarder

    def built(self, part: str) -> Any:
        """``part`` (``manager``, ``executor``, ``lm``, ``rewarder``) if it exists already,
        else None (nothing is built)."""
        if part not in ("manager", "executor", "lm", "rewarder"):
            raise ValueError(f"a world has no part {part!r}")
        return getattr(self, f"_{part}")

    def session_opener(self, session_config: Any = None) -> Any:
        """``warm.acquire`` once the warm sessions are bound to this world (None without
        warm sessions): what an episode opens its sessions with."""
        if self.warm is None:
            return None
        with self._lock:
            if not self._warm_bound and hasattr(self.warm, "bind"):
                self.warm.bind(manager=self.manager, executor=self.executor, config=session_config)
            self._warm_bound = True
        return self.warm.acquire

    # ------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Close the parts this world built, once (rewarder, executor, model, then the
        manager's sessions); what the caller handed in stays open."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            parts = []
            if self._own_rewarder:
                parts.append(self._rewarder)
            if self._own_executor:
                parts.append(self._executor)
            if self._own_lm:
                parts.append(self._lm)
            if self._own_rewarder:
                parts.append(self._swr_lm)  # a shared in-process model stays loaded
        for part in parts:
            if part is not None:
                _close(part)
        if self._own_manager and self._manager is not None:
            self._manager.close_all()
