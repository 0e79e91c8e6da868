"""rLLM's SWE environment on sweworld: a ``BaseEnv``-shaped class backed by an episode.

rLLM (``rllm.environments``) runs an agent against environments through one interface,
``BaseEnv``: ``reset() -> (observation, info)``, ``step(action) -> (observation, reward,
done, info)``, ``close()``, the static ``from_dict(info)`` its engines call with a dataset row
merged with ``env_args``, the static ``is_multithread_safe()`` they assert before stepping
environments from a thread pool, and the optional ``compute_final_reward()`` they call once
a trajectory ends (its value replaces the last step's reward). Its SWE environment
(``rllm.environments.swe.swe.SWEEnv``) wraps R2E-Gym's ``RepoEnv``; so does this one, with
sweworld's :class:`~sweworld.env.r2egym_env.RepoEnv`::

    # from rllm.environments.swe.swe import SWEEnv
    from sweworld.env.rllm_env import SWEEnv

    engine = AgentExecutionEngine(agent_class=SWEAgent, env_class=SWEEnv, env_args={
        "sweworld": {"executor": "simulated", "reward": "swr", "max_steps": 50}}, ...)

rLLM is not on the package index, so its ``BaseEnv`` (an ABC) cannot be imported here: this
class is standalone, with the same method names, signatures, static methods and ``idx``
attribute. rLLM's engines call those methods and never check the base class; to make
``isinstance(env, BaseEnv)`` true as well, register it once where rLLM is installed:
``BaseEnv.register(SWEEnv)``.

Observations are R2E-Gym's strings (rLLM's SWE agent parses R2E-Gym's ``<function=...>``
calls and shows the observation text as it is); ``reset`` returns the issue text, which the
agent wraps in its own user prompt. Each step's reward is 0.0 (plus sweworld's dense signal
when ``dense`` is on); the episode's reward is :meth:`SWEEnv.compute_final_reward`'s.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import EpisodeError
from sweworld.env.r2egym_env import Action, EnvArgs, RepoEnv
from sweworld.env.rewards import EpisodeRewarder

__all__ = ["SCAFFOLD_TOOLS", "SWEEnv"]

#: The tools of rLLM's two SWE scaffolds (R2E-Gym's names; SWE-agent's are aliases).
SCAFFOLD_TOOLS: dict[str, tuple[str, ...]] = {
    "r2egym": ("file_editor", "search", "execute_bash", "finish"),
    "sweagent": ("str_replace_editor", "execute_bash", "submit"),
}

#: ``from_dict`` keys that configure the env rather than describe the task (the last four
#: hold objects: an ``env_args`` dict built in Python may share backends across envs).
_SETTINGS = (
    "step_timeout",
    "reward_timeout",
    "backend",
    "delete_image",
    "verbose",
    "scaffold",
    "config",
    "manager",
    "executor",
    "rewarder",
)
#: ``from_dict`` key holding :class:`EpisodeConfig` options (a mapping or its JSON text).
OPTIONS_KEY = "sweworld"


class SWEEnv:
    """rLLM's ``SWEEnv`` interface on a sweworld episode (one task per env).

    Args:
        entry: the task row (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym fields as they are).
        dataset: rows to pick from when ``entry`` is None (a list or an HF dataset).
        idx: which row of ``dataset`` (random when None).
        step_timeout: seconds per step (None: the config's ``step_timeout_s``).
        reward_timeout: seconds for the real test run of the reward (None: the default).
        backend: rLLM's container backend; accepted, unused (the sandbox replaces it).
        delete_image: accepted, unused (there is no image).
        verbose: log the env's work (R2E-Gym's ``verbose``).
        scaffold: ``r2egym`` or ``sweagent``: which tool names are recorded.
        config, manager, executor, rewarder: see :class:`~sweworld.env.Episode`.
        **episode_options: :class:`EpisodeConfig` fields (``executor``, ``reward``, ...).
    """

    def __init__(
        self,
        entry: Mapping[str, Any] | None = None,
        dataset: Sequence[Mapping[str, Any]] | None = None,
        idx: int | None = None,
        step_timeout: float | None = None,
        reward_timeout: float | None = None,
        backend: str | None = "sweworld",
        delete_image: bool = False,
        verbose: bool = False,
        scaffold: str = "r2egym",
        *,
        config: EpisodeConfig | None = None,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        **episode_options: Any,
    ):
        if scaffold not in SCAFFOLD_TOOLS:
            raise ValueError(f"scaffold must be one of {sorted(SCAFFOLD_TOOLS)}, got {scaffold!r}")
        if entry is None:
            if dataset is None:
                raise EpisodeError(
                    "SWEEnv needs a task: pass entry=ROW or dataset=ROWS (rLLM downloads "
                    "R2E-Gym's dataset here; sweworld does not reach a hub)"
                )
            if len(dataset) == 0:
                raise ValueError("SWEEnv: the dataset is empty")
            if idx is None:
                idx = random.randrange(len(dataset))
            if not 0 <= idx < len(dataset):
                raise IndexError(f"idx {idx} is out of range for {len(dataset)} rows")
            entry = dataset[idx]
        if not isinstance(entry, Mapping):
            raise ValueError(f"a task row is a mapping, not {type(entry).__name__}")
        self.entry = dict(entry)
        self.dataset = dataset
        self.idx = idx
        self.step_timeout = step_timeout
        self.reward_timeout = reward_timeout
        self.backend = backend
        self.delete_image = delete_image
        self.verbose = verbose
        self.scaffold = scaffold
        self.total_steps = 0
        self._backends = {"config": config, "manager": manager, "executor": executor}
        self._rewarder = rewarder
        self._episode_options = dict(episode_options)
        self.env: RepoEnv | None = None
        self._check_row()

    def _check_row(self) -> None:
        """Fail at construction on a row that is not a task (the field is named), not in
        a worker thread at the first reset."""
        from sweworld.env.episode import coerce_task

        coerce_task(self.entry)
        (self._backends["config"] or EpisodeConfig()).replace(**self._episode_options)

    def _make_env(self) -> RepoEnv:
        return RepoEnv(
            EnvArgs(ds=self.entry),
            backend=self.backend,
            verbose=self.verbose,
            step_timeout=self.step_timeout,
            reward_timeout=self.reward_timeout,
            rewarder=self._rewarder,
            **self._backends,
            **self._episode_options,
        )

    # ------------------------------------------------------------------ BaseEnv

    def reset(self) -> tuple[str, dict[str, Any]]:
        """Start the episode on a fresh sandbox: ``(issue text, info)``. ``info`` holds the
        episode's ``instance_id``, ``repo``, ``episode_id`` and ``messages``."""
        if self.env is None:
            self.env = self._make_env()
        self.env.reset()
        self.env.add_commands(SCAFFOLD_TOOLS[self.scaffold])
        self.total_steps = 0
        return self.env.get_task_instruction(), dict(self.env.reset_info)

    def step(self, action: str | Action | Any) -> tuple[str, float, bool, dict[str, Any]]:
        """Run the agent's action (R2E-Gym ``<function=...>`` text, an R2E-Gym ``Action``, or
        an object with that text in ``.action``): ``(observation, reward, done, info)``.

        Raises :class:`~sweworld.env.EpisodeError` before ``reset``,
        :class:`~sweworld.env.EpisodeFinished` after the end,
        :class:`~sweworld.env.EpisodeBusy` when called from two threads at once.
        """
        if self.env is None:
            raise EpisodeError("SWEEnv: call reset() before step()")
        text = getattr(action, "action", None)
        if not hasattr(action, "function_name") and isinstance(text, str):
            action = text  # rLLM's Action(action=...) wrapper
        obs, reward, done, info = self.env.step(action)
        self.total_steps += 1
        return str(obs), reward, done, info

    def compute_final_reward(self) -> float:
        """The episode's reward: the one computed when it ended, or (when the trainer cut
        it short) the current patch graded as an unsubmitted episode."""
        if self.env is None:
            raise EpisodeError("SWEEnv: call reset() before compute_final_reward()")
        return self.env.compute_reward(submitted=self.env.done)

    @property
    def reward_debug(self) -> dict[str, Any]:
        """The last reward with its evidence (empty before one was computed)."""
        final = self.env.last_reward if self.env is not None else None
        return final.to_dict() if final is not None else {}

    def close(self) -> None:
        """Free the sandbox; ``reset`` opens a new one."""
        env, self.env = self.env, None
        if env is not None:
            env.close()

    @staticmethod
    def from_dict(extra_info: Mapping[str, Any] | str) -> SWEEnv:
        """The env for one dataset row merged with rLLM's ``env_args`` (a mapping or its
        JSON text). Keys ``step_timeout``, ``reward_timeout``, ``backend``, ``delete_image``,
        ``verbose``, ``scaffold`` (and the shared backends ``config``, ``manager``,
        ``executor``, ``rewarder``) configure the env; ``sweworld`` holds
        :class:`EpisodeConfig` options (a mapping or JSON text); the rest is the task row."""
        if isinstance(extra_info, (str, bytes)):
            try:
                extra_info = json.loads(extra_info)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"SWEEnv.from_dict: not a JSON task row ({exc})") from None
        if not isinstance(extra_info, Mapping):
            raise ValueError(
                f"SWEEnv.from_dict needs a task row (mapping), not {type(extra_info).__name__}"
            )
        row = dict(extra_info)
        options = row.pop(OPTIONS_KEY, None) or {}
        if isinstance(options, (str, bytes)):
            try:
                options = json.loads(options)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"'{OPTIONS_KEY}' is not JSON options ({exc})") from None
        if not isinstance(options, Mapping):
            raise ValueError(f"'{OPTIONS_KEY}' must map EpisodeConfig options, got {options!r}")
        settings = {key: row.pop(key) for key in _SETTINGS if key in row}
        return SWEEnv(entry=row, **settings, **dict(options))

    @staticmethod
    def is_multithread_safe() -> bool:
        """True: every env owns its episode (its own sandboxed checkout, executor session
        and state); the backends envs may share (session manager, executor, reward model)
        are thread-safe; and one env stepped from two threads at once raises
        :class:`~sweworld.env.EpisodeBusy` instead of mixing the calls."""
        return True

    def __repr__(self) -> str:
        return f"<SWEEnv {self.entry.get('instance_id')} env={self.env!r}>"
