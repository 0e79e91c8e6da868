"""Episodes and drop-in environments for RL trainers.

:class:`Episode` is the core (task, session, executor, reward, limits, sync and async
stepping; ``stepping`` holds what its steps need besides its rules); the framework
adapters are thin modules over it, each importing its framework only when used:

========================  ===============================================================
``gymnasium_env``         Gymnasium 1.x ``Env[str, str]``, registered as
                          ``sweworld/SWEWorld-v0``; wrappers for time limits and shaping
``minisweagent_env``      a mini-swe-agent 2.x ``Environment`` (by dotted path in YAML)
``skyrl_env``             a SkyRL ``BaseTextEnv``
``trl_env``               TRL's GRPO ``environment_factory`` interface (multi-turn tools)
``r2egym_env``            R2E-Gym's ``RepoEnv(EnvArgs(ds=row))``
``rllm_env``              rLLM's ``BaseEnv``
``pool``                  many episodes at once (threads, asyncio), one batched LM
                          (``batching``), warm sessions by memory budget (``warm``)
``ray_pool``              the same pool on Ray actors (``ray_actor``: the actors)
========================  ===============================================================

Imports: the lower layers (tasks ... reward), :mod:`sweworld.world` (which builds an
episode's executor, model and rewarder from its config) and, from ``data``, only the record
schema (trajectories); never :mod:`sweworld.serve` (a remote episode registers itself as the
world ``remote``: :mod:`.opening`), ``bench`` or :mod:`sweworld.cli` (``env/cli`` reads its
inputs through :mod:`sweworld.cli_inputs`).
"""

from sweworld.env.batching import BatchingLM
from sweworld.env.config import END_REASONS, PROMPT_FORMATS, REWARD_SOURCES, EpisodeConfig
from sweworld.env.episode import (
    Episode,
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
    coerce_task,
)
from sweworld.env.pool import EnvPool, PoolError, RolloutResult
from sweworld.env.prompts import first_observation, prompt_messages, tool_schemas
from sweworld.env.rewards import EpisodeRewarder, FinalReward
from sweworld.env.warm import WarmSessions

__all__ = [
    "END_REASONS",
    "PROMPT_FORMATS",
    "REWARD_SOURCES",
    "BatchingLM",
    "EnvPool",
    "Episode",
    "EpisodeBusy",
    "EpisodeConfig",
    "EpisodeError",
    "EpisodeFinished",
    "EpisodeRewarder",
    "FinalReward",
    "PoolError",
    "RolloutResult",
    "StepOutcome",
    "WarmSessions",
    "coerce_task",
    "first_observation",
    "prompt_messages",
    "tool_schemas",
]
