"""The episode: the one place that knows an episode's rules.

An :class:`Episode` binds a task, a sandboxed session, an executor (simulated, hybrid or
real) and a reward backend (SWR, the real test run, or both). ``reset`` opens a fresh
session and returns the task prompt; ``step`` runs one agent action and returns a
:class:`StepOutcome` (observation, reward, terminated, truncated, info) as Gymnasium
separates them. The episode ends when the agent submits (terminated), when the executor or
the reward fails (terminated, reason ``error``), or when a limit is reached (truncated:
``max_steps``, ``timeout``, ``max_tokens``); the final step carries the reward and its
evidence in ``info["reward"]``, the patch in ``info["patch"]``.

``areset`` / ``astep`` are the same calls for an event loop: they run in a worker thread, so
hundreds of episodes can be stepped from one loop.

Episodes share nothing mutable: each has its own session; the executor, the reward model and
the session manager they are given are thread-safe and may be shared (that is how a pool
batches model calls across episodes). One episode may not be stepped from two threads at
once: the second call gets :class:`EpisodeBusy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sweworld.env.config import END_REASONS, TERMINATED_REASONS, EpisodeConfig
from sweworld.env.episode_types import EpisodeBusy, EpisodeError, EpisodeFinished, StepOutcome
from sweworld.env.prompts import bounded_prompt
from sweworld.env.rewards import EpisodeRewarder, FinalReward, score_in_time
from sweworld.env.signals import TestTracker, dense_signal, signals_info
from sweworld.env.stepping import (
    action_text,
    approx_tokens,
    async_pool,
    bound_task,
    coerce_task,
    destroy_session,
    parse_episode_action,
    run_with_deadline,
    step_info,
    truncate_text,
)
from sweworld.tasks.schema import Task
from sweworld.world import World

__all__ = [
    "Episode",
    "EpisodeBusy",
    "EpisodeError",
    "EpisodeFinished",
    "StepOutcome",
    "coerce_task",
    "truncate_text",
]

log = logging.getLogger(__name__)


_ids = itertools.count(1)

#: Extra seconds past twice the step deadline after which a step that has not returned is
#: abandoned and the episode ends with reason ``error`` (a backstop: commands and model
#: calls have their own deadlines).
STEP_GRACE_S = 30.0


class Episode:
    """One agent episode on one task at a time (``reset`` starts the next).

    Args:
        task: a :class:`~sweworld.tasks.Task` or a task row; may be given to ``reset``.
        config: the rules (:class:`EpisodeConfig`); keyword ``overrides`` are applied on top.
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to open sessions with
            (shared by a pool); one is made and closed with the episode otherwise.
        executor: an executor instance to use (shared by a pool); built from the config
            otherwise. A spec string (``"local"``) is the config's ``executor``: the world
            builds it.
        rewarder: an :class:`EpisodeRewarder` (shared by a pool); built otherwise.
        world: a :class:`~sweworld.world.World` whose parts (manager, executor, rewarder)
            the episode uses and leaves open (a pool's, a service's); otherwise the episode
            builds its own from the config, lazily, and closes it. A string here is
            ``EpisodeConfig.world`` (the URL of a world service), as before.
        open_session: ``f(task) -> Session``, e.g. a warm pool's ``acquire``; the manager's
            ``open`` otherwise.
        token_counter: ``f(text) -> int`` for ``max_tokens`` (characters / 4 otherwise).
    """

    def __init__(
        self,
        task: Any = None,
        config: EpisodeConfig | None = None,
        *,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        open_session: Callable[[Task], Any] | None = None,
        token_counter: Callable[[str], int] | None = None,
        world: World | str | None = None,
        **overrides: Any,
    ):
        if isinstance(executor, str):  # a spec: EpisodeConfig.executor, built by the world
            overrides["executor"], executor = executor, None
        if world is None or isinstance(world, str):  # EpisodeConfig.world: a service's URL
            if world is not None:
                overrides["world"] = world
            world = None
        config = config or EpisodeConfig()
        self.config = config.replace(**overrides) if overrides else config
        if self.config.world:
            raise ValueError(
                "EpisodeConfig.world is set: this episode belongs on the world service; "
                "open it with sweworld.env.opening.open_episode (or WorldClient.create)"
            )
        self.task: Task | None = coerce_task(task) if task is not None else None
        self._given = {"manager": manager, "executor": executor, "rewarder": rewarder}
        self._world = world
        self._own_world = world is None
        self._open_session = open_session
        self._count_tokens = token_counter or approx_tokens
        self._call_lock = threading.Lock()
        self._session: Any = None
        self._abandoned = False  # a step overran its deadline and may still hold the session
        self._closed = False
        self._snapshots: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.id = f"ep{next(_ids)}"
        self._new_state()

    # ------------------------------------------------------------------ state

    def _new_state(self) -> None:
        self.steps = 0
        self.tokens = 0
        self.started = time.monotonic()
        self.reason: str | None = None
        self.patch: str | None = None
        self.final: FinalReward | None = None
        self.rewards: list[float] = []
        self._trajectory: list[Any] = []
        self._tracker: TestTracker | None = None
        self.seed: int | None = None
        self._snapshots = {}

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (``step`` raises until ``reset``)."""
        return self.reason is not None

    @property
    def session(self) -> Any:
        """The live session (None before ``reset`` and after the episode ended)."""
        return self._session

    @property
    def world(self) -> World:
        """The world whose parts this episode uses (its own, built from the config on
        first use, unless one was given)."""
        if self._world is None:
            self._world = World.for_episode(self.config, **self._given)
        return self._world

    def _part(self, name: str) -> Any:
        given = self._given[name]
        return given if given is not None else getattr(self.world, name)

    @property
    def manager(self) -> Any:
        return self._part("manager")

    @property
    def executor(self) -> Any:
        return self._part("executor")

    @property
    def rewarder(self) -> EpisodeRewarder:
        return self._part("rewarder")

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        task = self.task.instance_id if self.task else None
        return f"<Episode {self.id} task={task} steps={self.steps} reason={self.reason}>"

    # ------------------------------------------------------------------ reset

    def reset(self, task: Any = None, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode (on ``task``, else the current one): ``(prompt, info)``.

        ``info`` holds ``instance_id``, ``repo``, ``messages`` (the prompt as chat messages)
        and ``episode_id``. Raises :class:`EpisodeError` without a task, ``ValueError`` for a
        task row that is not one.
        """
        if not self._call_lock.acquire(blocking=False):
            raise EpisodeBusy(f"episode {self.id}: reset() while another call is running")
        try:
            if self._closed:
                raise EpisodeError(f"episode {self.id} is closed")
            new_task = coerce_task(task) if task is not None else self.task
            if new_task is None:
                raise EpisodeError(
                    "reset() needs a task: pass one to Episode(task=...) or reset(task=...)"
                )
            bounded = bound_task(new_task)  # a 50 MB issue text is not a 50 MB prompt
            problem_cut, new_task = bounded is not new_task, bounded
            self._drop_session()
            self.task = new_task
            self._new_state()
            self.seed = seed
            self._tracker = TestTracker.for_task(new_task)
            self._session = self._open(new_task)
            if self._closed:  # close() ran while the session opened: it must not outlive it
                self._drop_session()
                raise EpisodeError(f"episode {self.id} was closed during reset()")
            prompt, messages, cut = bounded_prompt(
                new_task, self.config.prompt_format, self.config.max_observation_chars
            )
            info = {
                "episode_id": self.id,
                "instance_id": new_task.instance_id,
                "repo": new_task.repo,
                "messages": messages,
                "seed": seed,
            }
            if cut or problem_cut:
                info["observation_truncated"] = True
            self.tokens = self._count_tokens(prompt)
            return prompt, info
        finally:
            self._call_lock.release()

    def _open(self, task: Task) -> Any:
        if self._open_session is not None:
            return self._open_session(task)
        from sweworld.sandbox.bwrap import SandboxLimits
        from sweworld.sandbox.session import SessionConfig

        config = SessionConfig(
            limits=SandboxLimits(timeout=self.config.step_timeout_s),
            observation_format=self.config.observation_format,
        )
        return self.manager.open(task, executor=self.executor, config=config)

    async def areset(
        self, task: Any = None, *, seed: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        """``reset`` for an event loop (runs in a worker thread)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(async_pool(), lambda: self.reset(task, seed=seed))

    # ------------------------------------------------------------------ step

    def step(self, action: str | Mapping[str, Any], *, timeout: float | None = None) -> StepOutcome:
        """Run one agent action: R2E-Gym ``<function=...>`` text, a response with one bash
        block, a raw command, or a tool-call mapping (as ``action_format`` allows).
        ``timeout`` bounds a bash command's run (at most ``step_timeout_s``, the default).

        Raises :class:`EpisodeFinished` after the end, :class:`EpisodeError` before
        ``reset``, :class:`EpisodeBusy` when called concurrently. Bad actions are answered
        with an observation that says what is wrong.
        """
        if not self._call_lock.acquire(blocking=False):
            raise EpisodeBusy(
                f"episode {self.id}: step() while another call of this episode is running; "
                "step each episode from one thread at a time"
            )
        try:
            if self._closed:
                raise EpisodeError(f"episode {self.id} is closed")
            if self.reason is not None:
                raise EpisodeFinished(
                    f"episode {self.id} ended ({self.reason}); call reset() to start another"
                )
            if self._session is None or self.task is None:
                raise EpisodeError(f"episode {self.id}: call reset() before step()")
            if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
                raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
            return self._step(action, timeout)
        finally:
            self._call_lock.release()

    async def astep(
        self, action: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> StepOutcome:
        """``step`` for an event loop (runs in a worker thread)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(async_pool(), lambda: self.step(action, timeout=timeout))

    def end(self, reason: str = "max_steps", *, error: str | None = None) -> StepOutcome:
        """End the running episode without an action: for a limit the trainer or the agent's
        own loop enforces (its step, token or time budget) or a failure outside the episode.

        The episode ends as after a step with that ``reason`` (one of ``END_REASONS``): the
        patch is taken and scored (an unsubmitted one only with ``score_unsubmitted``; an
        ``error`` is not scored) and the session is freed. Returns the final
        :class:`StepOutcome`: an empty observation, the final reward (also appended to
        ``rewards``), ``terminated`` / ``truncated`` by the reason, ``info`` as at the end of
        a step (``reason``, ``patch``, ``reward``, ..., ``error`` when given).

        Raises ``ValueError`` for an unknown reason, and what ``step`` raises after the end,
        before ``reset`` or while another call runs.
        """
        if reason not in END_REASONS:
            raise ValueError(f"reason must be one of {END_REASONS}, not {reason!r}")
        if not self._call_lock.acquire(blocking=False):
            raise EpisodeBusy(f"episode {self.id}: end() while another call is running")
        try:
            if self._closed:
                raise EpisodeError(f"episode {self.id} is closed")
            if self.reason is not None:
                raise EpisodeFinished(f"episode {self.id} already ended ({self.reason})")
            if self._session is None or self.task is None:
                raise EpisodeError(f"episode {self.id}: call reset() before end()")
            info: dict[str, Any] = {"episode_id": self.id, "step": self.steps, "ended_by": "end"}
            if error is not None:
                info["error"] = error
            final = self._finish(reason, info)
            terminated = self.reason in TERMINATED_REASONS
            self.rewards.append(final.value)
            return StepOutcome("", final.value, terminated, not terminated, info)
        finally:
            self._call_lock.release()

    def _step(self, action: str | Mapping[str, Any], timeout: float | None = None) -> StepOutcome:
        cfg = self.config
        self.steps += 1
        info: dict[str, Any] = {"episode_id": self.id, "step": self.steps}
        raw = action_text(action, cfg.max_action_chars)
        observation, exit_code, submitted, error = self._run_action(action, info, timeout)
        observation, cut = truncate_text(observation, cfg.max_observation_chars)
        if cut:
            info["observation_truncated"] = True
        self.tokens += self._count_tokens(raw[: cfg.max_action_chars]) + self._count_tokens(
            observation
        )
        assert self._tracker is not None
        delta, changes = self._tracker.update(observation)
        dense = dense_signal(delta, step_penalty=cfg.step_penalty, test_weight=cfg.test_weight)
        info["signals"] = signals_info(self._tracker, delta, changes, dense)
        info["exit_code"] = exit_code
        if cfg.record:
            from sweworld.data.schema import TrajectoryStep

            command = info.get("command", "")
            self._trajectory.append(
                TrajectoryStep(command=command, output=observation, exit_code=exit_code, action=raw)
            )
        reason = self._end_reason(submitted, error)
        reward = dense if cfg.dense else 0.0
        terminated = truncated = False
        if reason is not None:
            if error is not None:
                info["error"] = error
            final = self._finish(reason, info)
            reward += final.value
            terminated = self.reason in TERMINATED_REASONS
            truncated = not terminated
        self.rewards.append(reward)
        return StepOutcome(observation, reward, terminated, truncated, info)

    def _run_action(
        self, action: str | Mapping[str, Any], info: dict[str, Any], timeout: float | None = None
    ) -> tuple[str, int, bool, str | None]:
        """Run the action in the session: ``(observation, exit code, submitted, error)``."""
        cfg = self.config
        parsed, refusal = parse_episode_action(action, cfg, info)
        if refusal is not None:
            return refusal, -1, False, None
        info["command"] = parsed.command if parsed.kind == "bash" else ""
        info["tool"] = parsed.function if parsed.kind != "bash" else "bash"
        limit = cfg.step_timeout_s if timeout is None else min(timeout, cfg.step_timeout_s)
        # the session hands ``limit`` on to the executor (ExecutionRequest.deadline): a
        # simulated or real execution call stops there, so the backstop follows the limit
        result, error = run_with_deadline(
            lambda: self._session.step(parsed.to_dict(), timeout=limit),
            2 * limit + STEP_GRACE_S,
        )
        if result is None:
            self._abandoned = self._abandoned or "did not finish" in str(error)
            return "sweworld: the step did not finish in time; the episode ends.", -1, False, error
        failure = step_info(result.info, info)
        if failure is not None and cfg.end_on_executor_error:
            error = f"executor failed: {failure}"
        if result.done:
            self.patch = result.info.get("patch")
        return result.observation, result.exit_code, bool(result.done), error

    def _end_reason(self, submitted: bool, error: str | None) -> str | None:
        cfg = self.config
        if error is not None:
            return "error"
        if submitted:
            return "submitted"
        if self.steps >= cfg.max_steps:
            return "max_steps"
        if cfg.max_wall_s is not None and time.monotonic() - self.started > cfg.max_wall_s:
            return "timeout"
        if cfg.max_tokens is not None and self.tokens >= cfg.max_tokens:
            return "max_tokens"
        return None

    def _finish(self, reason: str, info: dict[str, Any]) -> FinalReward:
        """End the episode: take the patch, score it, free the session."""
        assert self.task is not None
        self.reason = reason
        submitted = reason == "submitted"
        try:
            if self.patch is None and self._session is not None and reason != "error":
                self.patch = self._session.get_patch()
        except Exception as exc:  # a session that cannot give its patch ends in error
            log.exception("episode %s: get_patch failed", self.id)
            self.reason = reason = "error"
            info["error"] = f"the patch could not be read: {type(exc).__name__}: {exc}"
        patch = self.patch or ""
        if reason == "error" or not (submitted or self.config.score_unsubmitted):
            final = FinalReward(0.0, None, "none", "not_scored")
        else:
            final = self.score(patch, submitted=submitted)
            if final.error is not None:
                self.reason = "error"
                info["error"] = f"reward failed: {final.error}"
        self.final = final
        info.update(
            reason=self.reason,
            submitted=submitted,
            patch=patch,
            reward=final.to_dict(),
            steps=self.steps,
            tokens=self.tokens,
            wall_s=time.monotonic() - self.started,
        )
        self._drop_session()
        return final

    def score(self, patch: str, *, submitted: bool = True) -> FinalReward:
        """The rewarder's verdict on ``patch`` for the current task and step count (the
        episode goes on), or an ``error`` one when it raised or did not answer within its
        ``deadline_s`` (left to finish on its own; its result dropped)."""
        if self.task is None:
            raise EpisodeError("no episode has started")
        return score_in_time(
            self.rewarder, self.config, self.task, patch, self.steps, submitted, self.id
        )

    # ------------------------------------------------------------------ branching

    @contextlib.contextmanager
    def _running(self, what: str) -> Iterator[None]:
        """Hold the episode for one call: not concurrent, not closed, started, not ended."""
        if not self._call_lock.acquire(blocking=False):
            raise EpisodeBusy(f"episode {self.id}: {what}() while another call is running")
        try:
            if self._closed:
                raise EpisodeError(f"episode {self.id} is closed")
            if self.reason is not None:
                raise EpisodeFinished(f"episode {self.id} ended ({self.reason}); reset() it")
            if self._session is None or self.task is None:
                raise EpisodeError(f"episode {self.id}: call reset() before {what}()")
            yield
        finally:
            self._call_lock.release()

    def _state(self) -> dict[str, Any]:
        assert self._tracker is not None
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "rewards": list(self.rewards),
            "trajectory": list(self._trajectory),
            "known": dict(self._tracker.known),
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        assert self._tracker is not None
        self.steps = state["steps"]
        self.tokens = state["tokens"]
        self.rewards = list(state["rewards"])
        self._trajectory = list(state["trajectory"])
        self._tracker.known = dict(state["known"])

    def snapshot(self) -> str:
        """Save the running episode's state (files, step count, trajectory, signals); its
        id for :meth:`restore`. Wall time keeps running across a restore."""
        with self._running("snapshot"):
            snap = self._session.snapshot()
            self._snapshots[snap.id] = (snap, self._state())
            return snap.id

    def restore(self, snapshot_id: str) -> None:
        """Go back to a :meth:`snapshot` of this episode (``KeyError`` for an unknown id)."""
        with self._running("restore"):
            if snapshot_id not in self._snapshots:
                raise KeyError(f"episode {self.id} has no snapshot {snapshot_id!r}")
            snap, state = self._snapshots[snapshot_id]
            self._session.restore(snap)
            self._set_state(state)

    def fork(self) -> Episode:
        """An independent copy of the running episode (its own session with the same files,
        the same steps so far), sharing this episode's manager, executor and rewarder."""
        with self._running("fork"):
            other = Episode(
                self.task,
                self.config,
                manager=self.manager,
                executor=self.executor,
                rewarder=self.rewarder,
                open_session=self._open_session,
                token_counter=self._count_tokens,
            )
            other._tracker = TestTracker.for_task(self.task)
            other._set_state(self._state())
            other.seed = self.seed
            other.started = self.started
            other._session = self._session.fork()
            return other

    # ------------------------------------------------------------------ records, close

    def trajectory(self) -> Any:
        """The episode as a data-schema :class:`~sweworld.data.schema.Trajectory`."""
        from sweworld.data.schema import Trajectory

        if self.task is None:
            raise EpisodeError("no episode has started")
        final = self.final.to_dict() if self.final else None
        report = None
        if self.final is not None and self.final.resolved is not None:
            report = {"resolved": self.final.resolved, "source": self.final.source}
        return Trajectory(
            source="episode",
            instance_id=self.task.instance_id,
            repo=self.task.repo,
            task=self.task.to_row(),
            steps=list(self._trajectory),
            submission=self.patch or "",
            report=report,
            meta={
                "episode_id": self.id,
                "reason": self.reason,
                "reward": final,
                "rewards": list(self.rewards),
                "config": self.config.to_dict(),
                "seed": self.seed,
            },
        )

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if self._abandoned:  # its step still runs: destroy it when the step lets go
            self._abandoned = False
            threading.Thread(target=destroy_session, args=(session,), daemon=True).start()
        else:
            destroy_session(session)
        executor = self._given["executor"]
        if executor is None and self._world is not None:
            executor = self._world.built("executor")  # None when never built
        hook = getattr(executor, "close_session", None)
        if hook is not None:
            try:
                hook(session.id)
            except Exception:
                log.exception("episode %s: executor close_session failed", self.id)

    def close(self) -> None:
        """Free the session (and the manager and reward model the episode made itself)."""
        if self._closed:
            return
        self._closed = True
        self._drop_session()
        if self._own_world and self._world is not None:
            self._world.close()  # what it built: the rewarder, executor, manager's sessions
