"""SkyRL adapter: a ``skyrl_gym`` ``BaseTextEnv`` over :class:`~sweworld.env.Episode`.

Importing this module imports ``skyrl_gym`` (extra ``skyrl``) and registers the environment
as ``"sweworld"``, so ``skyrl_gym.make("sweworld", env_config=..., extras=...)`` works;
nothing in sweworld imports it eagerly. SkyRL's generator makes one environment per
trajectory with ``skyrl_gym.make(env_class, env_config=cfg.environment.skyrl_gym[env_class],
extras=row)``, where ``row`` is the dataset row without ``prompt`` and ``env_class``, plus
``max_turns``; then it calls ``init(prompt)`` once and ``step(model_output)`` until ``done``.

* **The task** comes from the row (``extras``): a ``task`` field (a task row or its JSON
  string, as :func:`skyrl_dataset_row` writes it), or ``extra_info.task``, or the task's own
  fields at the top level of the row (a SWE-bench / SWE-Gym / R2E-Gym row as it is), or an
  ``instance_id`` looked up in the ``tasks`` file named by the env config.
* **The rules** come from the env config (``environment.skyrl_gym.sweworld`` in SkyRL's YAML):
  any :class:`~sweworld.env.EpisodeConfig` field (``executor``, ``reward``, ``model``, ...),
  plus ``tasks`` (a task file for ``instance_id`` rows) and ``use_dataset_prompt`` (keep the
  dataset's prompt instead of sweworld's). ``extras["max_turns"]`` (set by SkyRL's generator)
  becomes ``max_steps``.
* ``init`` starts the episode and returns sweworld's prompt messages (system + user) in the
  configured ``prompt_format``; ``step`` runs the model's answer and returns the observation
  as a ``user`` message, the reward (the final reward on the last step; dense signals on the
  others when ``dense`` is on), ``done``, and the episode's ``info`` as ``metadata``
  (``reason``, ``patch`` and ``reward`` evidence at the end). ``postprocessed_action`` restores
  the ``</function>`` that a stop sequence cut off an R2E-Gym call, so the trained text is the
  call that ran.

Environments made by the registry share one session manager, executor and reward backend per
process (per distinct config), so the embedded models load once, not once per trajectory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Mapping
from typing import Any

from skyrl_gym import error as skyrl_error
from skyrl_gym import register, registry
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import coerce_task
from sweworld.env.opening import open_episode
from sweworld.env.prompts import prompt_messages
from sweworld.env.rewards import EpisodeRewarder
from sweworld.tasks.schema import Task

__all__ = [
    "ENV_ID",
    "SWEWorldSkyRLEnv",
    "register_skyrl_env",
    "skyrl_dataset_row",
    "task_from_extras",
]

#: The id the environment is registered under (the ``env_class`` of dataset rows).
ENV_ID = "sweworld"

#: Env-config keys of the adapter itself (every other key is an :class:`EpisodeConfig` field).
ADAPTER_OPTIONS = ("tasks", "use_dataset_prompt")

_EXECUTOR_KEYS = ("executor", "model", "mode", "seed", "step_timeout_s")
_REWARD_KEYS = (
    "reward",
    "reward_preset",
    "swr_stages",
    "swr_model",
    "mode",
    "seed",
    "step_timeout_s",
)


class _SharedBackends:
    """One session manager per process, one executor and one rewarder per distinct config."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manager: Any = None
        self._executors: dict[str, Any] = {}
        self._rewarders: dict[str, EpisodeRewarder] = {}

    def manager(self) -> Any:
        with self._lock:
            if self._manager is None:
                from sweworld.sandbox.manager import SessionManager

                self._manager = SessionManager()
            return self._manager

    def executor(self, config: EpisodeConfig) -> Any:
        if not isinstance(config.executor, str):
            return config.executor  # an executor instance: the caller shares it
        key = _key(config, _EXECUTOR_KEYS)
        with self._lock:
            if key not in self._executors:
                from sweworld.world import WorldConfig, build_executor

                self._executors[key] = build_executor(WorldConfig.from_episode(config))
            return self._executors[key]

    def rewarder(self, config: EpisodeConfig, manager: Any) -> EpisodeRewarder:
        key = _key(config, _REWARD_KEYS) + f"|{id(manager)}"
        with self._lock:
            if key not in self._rewarders:
                from sweworld.world import swr_lm_for

                self._rewarders[key] = EpisodeRewarder(
                    config, swr_lm=swr_lm_for(config), manager=manager
                )
            return self._rewarders[key]


_shared = _SharedBackends()


def _key(config: EpisodeConfig, names: tuple[str, ...]) -> str:
    data = config.to_dict()
    return json.dumps({name: data[name] for name in names}, sort_keys=True, default=str)


def _plain_options(env_config: Any) -> dict[str, Any]:
    """The env config as a plain dict (an omegaconf ``DictConfig``, a dataclass or a mapping)."""
    if env_config is None:
        return {}
    if hasattr(env_config, "_metadata") and hasattr(env_config, "items"):  # omegaconf
        from omegaconf import OmegaConf

        env_config = OmegaConf.to_container(env_config, resolve=True)
    elif dataclasses.is_dataclass(env_config) and not isinstance(env_config, type):
        env_config = dataclasses.asdict(env_config)
    if not isinstance(env_config, Mapping):
        raise TypeError(
            f"env_config must be a mapping, a DictConfig or a dataclass, not "
            f"{type(env_config).__name__}"
        )
    return dict(env_config)


def task_from_extras(extras: Mapping[str, Any], tasks: str | None = None) -> Task:
    """The task a SkyRL dataset row (``extras``) names; a ``ValueError`` that says what is
    missing otherwise. See the module docstring for the accepted places."""
    if not isinstance(extras, Mapping):
        raise ValueError(f"extras must be a mapping (the dataset row), not {type(extras).__name__}")
    extra_info = extras.get("extra_info")
    for where, value in (
        ("task", extras.get("task")),
        ("extra_info.task", extra_info.get("task") if isinstance(extra_info, Mapping) else None),
    ):
        if value is not None:
            try:
                return coerce_task(value)
            except ValueError as exc:
                raise ValueError(f"extras[{where!r}] is not a task row: {exc}") from exc
    if "instance_id" in extras and "problem_statement" in extras:
        return coerce_task({k: v for k, v in extras.items() if k != "max_turns"})
    if "instance_id" in extras and tasks:
        from sweworld.tasks import get_task

        return get_task(tasks, str(extras["instance_id"]))
    raise ValueError(
        "the SkyRL row has no task: give it a 'task' field (a task row or its JSON; see "
        "skyrl_dataset_row), the task's own fields (instance_id, repo, base_commit, "
        "problem_statement, ...), or an 'instance_id' with env_config.tasks set to a task file"
    )


def skyrl_dataset_row(
    task: Any, *, prompt_format: str = "r2egym", data_source: str = "sweworld"
) -> dict[str, Any]:
    """A SkyRL dataset row for ``task``: ``prompt`` (sweworld's messages), ``env_class``
    (``"sweworld"``), ``task`` (the row as JSON, so it survives parquet), ``reward_spec``."""
    row = coerce_task(task)
    return {
        "data_source": data_source,
        "prompt": prompt_messages(row, prompt_format),
        "env_class": ENV_ID,
        "task": json.dumps(row.to_row()),
        "reward_spec": {"method": "env", "ground_truth": row.instance_id},
        "extra_info": {"instance_id": row.instance_id},
    }


class SWEWorldSkyRLEnv(BaseTextEnv):
    """A sweworld episode as a SkyRL text environment (see the module docstring).

    Args:
        env_config: the episode rules (EpisodeConfig fields) plus ``tasks`` and
            ``use_dataset_prompt``; a ``DictConfig``, dataclass or mapping.
        extras: the dataset row (the task) and ``max_turns``.
        manager, executor, rewarder: shared backends to use instead of the process-wide
            ones (a pool, a test).
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        *,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
    ):
        super().__init__()
        extras = dict(extras or {})
        options = _plain_options(env_config)
        tasks = options.pop("tasks", None)
        self.use_dataset_prompt = bool(options.pop("use_dataset_prompt", False))
        if extras.get("max_turns") is not None:
            options["max_steps"] = int(extras["max_turns"])
        config = EpisodeConfig.from_dict(options)
        self.task = task_from_extras(extras, tasks)
        self.max_turns = config.max_steps
        if config.world is not None:  # the world service's backends
            self.episode = open_episode(self.task, config, executor=executor, rewarder=rewarder)
        else:
            manager = manager if manager is not None else _shared.manager()
            self.episode = open_episode(
                self.task,
                config,
                manager=manager,
                executor=executor if executor is not None else _shared.executor(config),
                rewarder=rewarder if rewarder is not None else _shared.rewarder(config, manager),
            )
        self.final_metadata: dict[str, Any] | None = None

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start the episode: sweworld's prompt messages (or the dataset's ``prompt`` with
        ``use_dataset_prompt``) and ``{episode_id, instance_id}``."""
        _, info = self.episode.reset()
        self.turns = 0
        self.final_metadata = None
        messages = info["messages"]
        if self.use_dataset_prompt and prompt:
            messages = [dict(m) for m in prompt]
        return messages, {"episode_id": info["episode_id"], "instance_id": info["instance_id"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the model's answer (an R2E-Gym call, a bash block or a command).

        Raises :class:`~sweworld.env.EpisodeFinished` after ``done`` and
        :class:`~sweworld.env.EpisodeError` before ``init``.
        """
        out = self.episode.step(action)
        self.turns = self.episode.steps
        metadata = dict(out.info)
        if out.done:
            metadata["final_observation"] = out.observation
            self.final_metadata = metadata
        observations = [] if out.done else [{"role": "user", "content": out.observation}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(out.reward),
            done=out.done,
            metadata=metadata,
            postprocessed_action=_restore_stop(action),
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers SkyRL averages: steps, resolved (0/1), submitted (0/1)."""
        final = self.episode.final
        return {
            "steps": self.episode.steps,
            "resolved": float(bool(final and final.resolved)),
            "submitted": float(self.episode.reason == "submitted"),
        }

    def close(self) -> None:
        """Free the episode's session (the shared backends stay for the next one)."""
        self.episode.close()


def _restore_stop(action: Any) -> str | None:
    """The action with the ``</function>`` a stop sequence removed, or None if unchanged."""
    if not isinstance(action, str) or "<function" not in action:
        return None
    if "</function>" in action:
        return None
    return action.rstrip() + "\n</function>"


def register_skyrl_env(env_id: str = ENV_ID) -> None:
    """Register :class:`SWEWorldSkyRLEnv` with skyrl_gym under ``env_id`` (idempotent)."""
    if env_id in registry:
        return
    with contextlib.suppress(skyrl_error.RegistrationError):  # a concurrent import won
        register(id=env_id, entry_point=f"{__name__}:SWEWorldSkyRLEnv")


register_skyrl_env()
