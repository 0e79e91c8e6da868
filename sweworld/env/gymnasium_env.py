"""Gymnasium 1.x adapter: :class:`SWEWorldEnv`, an ``Env[str, str]`` over an :class:`Episode`.

>>> import gymnasium, sweworld
>>> env = gymnasium.make("sweworld/SWEWorld-v0", task="sweworld__stockroom-1",
...                      executor="local", reward="real")
>>> prompt, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step("git status")

``import sweworld`` registers the id ``sweworld/SWEWorld-v0`` with gymnasium (lazily: see
``sweworld/__init__.py``); ``gymnasium.make`` imports this module when it builds the env.
This module imports gymnasium at its top, so nothing in sweworld imports it eagerly.

The env has no episode logic of its own: the :class:`~sweworld.env.Episode` decides
observations, rewards, limits and end reasons. What the adapter adds:

* spaces: :class:`UnicodeText` (gymnasium's ``Text`` that holds any character), bounded by
  the config's ``max_observation_chars`` / ``max_action_chars``;
* tasks: ``task=`` or ``reset(options={"task": ...})`` take a :class:`~sweworld.tasks.Task`,
  a task row, or an instance id (of ``tasks_file=``, else of the toy tasks); an env made
  with ``tasks_file=`` and no task draws a task from the file at each ``reset`` with
  ``self.np_random`` (so ``reset(seed=...)`` picks the same one again);
* determinism: wall-clock measurements (latencies, wall time, cache hits) are taken out of
  ``info`` and kept in :attr:`SWEWorldEnv.timings`, so that the same seed and actions give
  the same ``info``, as ``gymnasium.utils.env_checker.check_env`` requires;
* ``render_mode="ansi"``: the last action and observation as text.

Time limits and reward shaping are wrappers (:mod:`sweworld.env.gymnasium_wrappers` and
gymnasium's own ``TimeLimit``), not options of the env.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium
from gymnasium import spaces

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import EpisodeError, coerce_task, truncate_text
from sweworld.env.opening import open_episode

__all__ = [
    "ENV_ID",
    "MEASUREMENT_KEYS",
    "SWEWorldEnv",
    "Shared",
    "UnicodeText",
    "split_measurements",
]

log = logging.getLogger(__name__)

#: The id ``import sweworld`` registers (``gymnasium.make(ENV_ID, task=...)``).
ENV_ID = "sweworld/SWEWorld-v0"

#: ``info`` keys (at any depth) that measure how long something took or whether a cache
#: answered; they vary between identical runs, so the env moves them to ``timings``.
MEASUREMENT_KEYS = frozenset({"latency_s", "timings_s", "hybrid_latency_s", "wall_s", "cache_hit"})


class UnicodeText(spaces.Text):
    """gymnasium's ``Text`` space whose members may hold any character.

    ``Text`` admits only the characters of its charset; an agent's actions and a
    repository's outputs hold any Unicode character, so membership here checks the length
    alone. Sampling still draws from ``charset`` (alphanumeric by default: a random sample
    is one word, which the sandbox answers with ``command not found``).
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        charset: frozenset[str] | str = spaces.text.alphanumeric,
        seed: int | Any = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string of an allowed length (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """False: arbitrary characters have no index in a fixed charset."""
        return False

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
            and self.character_set == other.character_set
        )


def split_measurements(data: Any, path: str = "") -> tuple[Any, dict[str, Any]]:
    """A copy of ``data`` without :data:`MEASUREMENT_KEYS`, and those values by dotted path
    (``{"latency_s": ..., "execution_calls.0.latency_s": ..., "reward.latency_s": ...}``).

    The copy shares no dict or list with ``data`` (callers may keep and modify it).
    """
    found: dict[str, Any] = {}
    if isinstance(data, Mapping):
        kept = {}
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if key in MEASUREMENT_KEYS:
                found[where] = value
                continue
            kept[key], inner = split_measurements(value, where)
            found.update(inner)
        return kept, found
    if isinstance(data, (list, tuple)):
        items = []
        for i, value in enumerate(data):
            item, inner = split_measurements(value, f"{path}.{i}" if path else str(i))
            items.append(item)
            found.update(inner)
        return (items if isinstance(data, list) else tuple(items)), found
    return data, found


class Shared:
    """A reference that copies as itself.

    gymnasium deep-copies an env's ``spec`` (wrappers read ``env.spec``; ``check_env`` and
    users call ``env.spec.make()``); a session manager, an executor or a reward model must be
    shared, not copied (they hold locks, threads and loaded models). The env keeps such
    constructor arguments in its spec inside a ``Shared``, and unwraps them when built.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __copy__(self) -> Shared:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Shared:
        return self

    def __repr__(self) -> str:
        return f"Shared({type(self.value).__name__})"


def _unshared(value: Any) -> Any:
    return value.value if isinstance(value, Shared) else value


#: Constructor arguments that are shared objects rather than settings (when not strings).
_SHARED_ARGS = ("manager", "executor", "rewarder", "token_counter", "config")


class SWEWorldEnv(gymnasium.Env[str, str]):
    """A software-engineering task as a Gymnasium environment (text in, text out).

    Args:
        task: a :class:`~sweworld.tasks.Task`, a task row (SWE-bench, SWE-Gym, SWE-smith,
            R2E-Gym), a JSON row, or an instance id looked up in ``tasks_file`` (the toy
            tasks when ``tasks_file`` is not given). May instead be given to ``reset``.
        config: an :class:`EpisodeConfig` or a mapping of its fields.
        tasks_file: where instance ids are looked up (anything ``load_tasks`` reads); with
            no ``task``, each ``reset()`` draws one of its tasks with ``self.np_random``.
        render_mode: ``"ansi"`` or None.
        manager: a shared :class:`~sweworld.sandbox.manager.SessionManager` (one is made and
            closed with the env otherwise).
        executor: an executor name (``simulated``, ``hybrid``, ``local``, ``none``, ...: the
            config field) or an executor instance to share.
        rewarder: a shared :class:`~sweworld.env.EpisodeRewarder`.
        token_counter: ``f(text) -> int`` for ``max_tokens``.
        **overrides: any :class:`EpisodeConfig` field (``max_steps=``, ``reward=``, ...);
            an unknown name is a ``ValueError`` that lists the known ones.

    ``step`` after the episode ended raises :class:`~sweworld.env.EpisodeFinished`;
    ``reset`` without any task raises :class:`~sweworld.env.EpisodeError`.
    """

    #: ``render_fps`` only paces a viewer that replays ``ansi`` frames (one step a second).
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    _spec: Any = None

    def __init__(
        self,
        task: Any = None,
        *,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        tasks_file: str | None = None,
        render_mode: str | None = None,
        manager: Any = None,
        executor: Any = None,
        rewarder: Any = None,
        token_counter: Callable[[str], int] | None = None,
        **overrides: Any,
    ) -> None:
        config, manager, executor, rewarder, token_counter = map(
            _unshared, (config, manager, executor, rewarder, token_counter)
        )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be 'ansi' or None, got {render_mode!r}")
        self.render_mode = render_mode
        if config is None:
            base = EpisodeConfig()
        elif isinstance(config, EpisodeConfig):
            base = config
        elif isinstance(config, Mapping):
            base = EpisodeConfig.from_dict(dict(config))
        else:
            raise TypeError(f"config must be an EpisodeConfig or a mapping, not {type(config)}")
        shared_executor = None
        if executor is not None:
            overrides["executor"] = executor
            if not isinstance(executor, str):
                shared_executor = executor
        self.config = base.replace(**overrides) if overrides else base
        self.tasks_file = tasks_file
        self._task_pool: list[Any] | None = None
        self._draw_tasks = task is None and tasks_file is not None
        self.episode = open_episode(
            self._resolve_task(task) if task is not None else None,
            self.config,
            manager=manager,
            executor=shared_executor,
            rewarder=rewarder,
            token_counter=token_counter,
        )
        self.observation_space = UnicodeText(self.config.max_observation_chars, min_length=0)
        self.action_space = UnicodeText(self.config.max_action_chars, min_length=1)
        #: Measurements of the last ``reset`` / ``step`` taken out of ``info`` (by dotted path).
        self.timings: dict[str, Any] = {}
        self._last_action: str | None = None
        self._last_observation: str | None = None

    @property
    def spec(self) -> Any:
        """The ``EnvSpec`` ``gymnasium.make`` built this env from (None otherwise)."""
        return self._spec

    @spec.setter
    def spec(self, value: Any) -> None:
        # shared objects ride in the spec's kwargs inside Shared, so copies of the spec
        # (and envs made from it) share them instead of copying them
        kwargs = getattr(value, "kwargs", None)
        if kwargs:
            wrapped = {k: Shared(v) if _is_shared_arg(k, v) else v for k, v in kwargs.items()}
            if wrapped != kwargs:
                value = copy.copy(value)
                value.kwargs = wrapped
        self._spec = value

    # ------------------------------------------------------------------ tasks

    def _resolve_task(self, task: Any) -> Any:
        """A Task from a Task, a row, a JSON row or an instance id."""
        if isinstance(task, str) and not task.lstrip().startswith("{"):
            from sweworld.tasks.loaders import get_task

            return get_task(self._tasks_source(), task)
        return coerce_task(task)

    def _tasks_source(self) -> str:
        if self.tasks_file is not None:
            return str(self.tasks_file)
        from sweworld.tasks.toy import toy_tasks_path

        return str(toy_tasks_path())

    def _draw_task(self) -> Any:
        if self._task_pool is None:
            from sweworld.tasks.loaders import load_tasks

            self._task_pool = list(load_tasks(self._tasks_source()))
            if not self._task_pool:
                raise EpisodeError(f"no tasks in {self.tasks_file!r}")
        return self._task_pool[int(self.np_random.integers(len(self._task_pool)))]

    @property
    def task(self) -> Any:
        """The task of the current (or last) episode; None before the first one."""
        return self.episode.task

    # ------------------------------------------------------------------ API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``(prompt, info)``.

        ``options={"task": ...}`` switches to another task (a Task, row, JSON row or
        instance id); later resets without it keep that task (or, for an env made with
        ``tasks_file=`` and no task, draw a new one). ``seed`` seeds ``self.np_random``
        and is recorded in the trajectory. ``info`` holds ``instance_id``, ``repo``,
        ``messages`` (the prompt as chat messages) and ``episode_id``.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; the only one is 'task'")
        task = options.get("task")
        if task is not None:
            task = self._resolve_task(task)
        elif self._draw_tasks:
            task = self._draw_task()
        elif self.episode.task is None:
            raise EpisodeError(
                "SWEWorldEnv.reset() needs a task: gymnasium.make('sweworld/SWEWorld-v0', "
                "task=...), SWEWorldEnv(tasks_file=...), or env.reset(options={'task': row})"
            )
        prompt, info = self.episode.reset(task, seed=seed)
        limit = self.config.max_observation_chars
        if len(prompt) > limit:
            log.warning(
                "task %s: prompt of %d characters cut to max_observation_chars=%d",
                info.get("instance_id"),
                len(prompt),
                limit,
            )
            prompt, _ = truncate_text(prompt, limit)
            info["observation_truncated"] = True
        info, self.timings = split_measurements(info)
        self._last_action, self._last_observation = None, prompt
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one action (R2E-Gym function call, a bash block, a raw command, or a
        tool-call mapping): ``(observation, reward, terminated, truncated, info)``.

        The last step of an episode carries ``info["reason"]``, ``info["patch"]`` and
        ``info["reward"]`` (the final reward and its evidence).
        """
        outcome = self.episode.step(action)
        info, self.timings = split_measurements(outcome.info)
        self._last_action = action if isinstance(action, str) else repr(action)
        self._last_observation = outcome.observation
        return (
            outcome.observation,
            float(outcome.reward),
            bool(outcome.terminated),
            bool(outcome.truncated),
            info,
        )

    def render(self) -> str | None:
        """``ansi``: the last action and its observation (the prompt after ``reset``)."""
        if self.render_mode != "ansi":
            return None
        episode = self.episode
        head = f"[{episode.task.instance_id if episode.task else 'no task'}] step {episode.steps}"
        if episode.reason is not None:
            head += f", ended: {episode.reason}"
        if self._last_observation is None:
            return head + "\n(not reset)\n"
        parts = [head]
        if self._last_action is not None:
            parts.append("action:\n" + self._last_action)
        parts.append("observation:\n" + self._last_observation)
        return "\n".join(parts) + "\n"

    def trajectory(self) -> Any:
        """The current episode as a data-schema :class:`~sweworld.data.schema.Trajectory`."""
        return self.episode.trajectory()

    def close(self) -> None:
        """Free the session (and the manager and reward model the env made itself).
        Calling it again does nothing."""
        self.episode.close()
        super().close()


def _is_shared_arg(name: str, value: Any) -> bool:
    if name not in _SHARED_ARGS or value is None or isinstance(value, (str, Shared)):
        return False
    if name == "config":  # a config is copied, unless it holds an executor instance
        executor = getattr(value, "executor", None)
        if isinstance(value, Mapping):
            executor = value.get("executor")
        return executor is not None and not isinstance(executor, str)
    return True
