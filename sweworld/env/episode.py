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
import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweworld.env.config import END_REASONS, TERMINATED_REASONS, EpisodeConfig
from sweworld.env.prompts import first_observation, prompt_messages
from sweworld.env.rewards import EpisodeRewarder, FinalReward, reward_deadline
from sweworld.env.signals import TestTracker, dense_signal, signals_info
from sweworld.sandbox.actions import ActionParseError, parse_action
from sweworld.tasks.schema import Task

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


class EpisodeError(RuntimeError):
    """The episode cannot do what was asked (no task, not reset, closed)."""


class EpisodeFinished(EpisodeError):
    """``step`` after the episode ended; call ``reset``."""


class EpisodeBusy(EpisodeError):
    """``step`` or ``reset`` while another call of the same episode is running."""


@dataclass
class StepOutcome:
    """What one step returns (Gymnasium's 5-tuple, plus the fields by name)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):  # obs, reward, terminated, truncated, info = episode.step(a)
        return iter((self.observation, self.reward, self.terminated, self.truncated, self.info))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def coerce_task(task: Any) -> Task:
    """A :class:`Task` from a task, a dataset row (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym)
    or a JSON string of one; a clear ``ValueError`` for anything else."""
    if isinstance(task, Task):
        return task
    if isinstance(task, str):
        import json

        try:
            task = json.loads(task)
        except (ValueError, RecursionError):
            raise ValueError(
                "a task given as a string must be a JSON task row; to use an instance id, "
                "load the task first (sweworld.load_tasks / get_task)"
            ) from None
    if isinstance(task, Mapping):
        try:
            return Task.from_row(task)  # TaskValidationError (a ValueError) names the field
        except RecursionError:  # a field holding JSON nested past the parser's depth
            raise ValueError("the task row holds a value nested too deeply to read") from None
    raise ValueError(f"a task must be a Task or a task row (mapping), not {type(task).__name__}")


#: Deepest nesting of a tool-call mapping accepted; a deeper one is answered, not run.
MAX_ACTION_DEPTH = 32


def _measure_action(action: Any, limit: int) -> tuple[int, int]:
    """``(characters, depth)`` of an action: a string's length, or about the length of a
    tool-call mapping's text. Walked without recursion, each container once, and stopped
    as soon as the size passes ``limit`` or the depth :data:`MAX_ACTION_DEPTH` (so the cost
    is bounded by ``limit``, whatever the mapping holds)."""
    if isinstance(action, str):
        return len(action), 0
    size = max_depth = 0
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(action, 1)]
    while stack:
        value, depth = stack.pop()
        max_depth = max(max_depth, depth)
        if size > limit or max_depth > MAX_ACTION_DEPTH:
            break
        if isinstance(value, (str, bytes)):
            size += len(value) + 2
        elif isinstance(value, int):
            size += value.bit_length() * 3 // 10 + 1
        elif isinstance(value, (Mapping, list, tuple, set, frozenset)):
            if id(value) in seen:
                size += 5
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, Mapping) else ((None, v) for v in value)
            for key, item in items:
                size += 2
                if key is not None:
                    stack.append((key, depth + 1))
                stack.append((item, depth + 1))
                if len(stack) > limit:
                    size = limit + 1
                    break
        else:
            size += 24
    return size, max_depth


def _action_text(action: Any, limit: int) -> str:
    """The action as the trajectory records it: itself, or a mapping's ``repr`` (a short
    description when that cannot be printed or would be too long)."""
    if isinstance(action, str):
        return action
    size, depth = _measure_action(action, limit)
    if size <= limit and depth <= MAX_ACTION_DEPTH:
        try:
            return repr(action)
        except (ValueError, RecursionError):  # e.g. an int past Python's digit limit
            pass
    return f"<{type(action).__name__} action that sweworld could not record>"


def truncate_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text, False
    marker = f"\n[... {len(text) - limit} characters cut by sweworld ...]\n"
    keep = max(0, limit - len(marker))
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :], True


def _approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


_async_pool: concurrent.futures.ThreadPoolExecutor | None = None
_async_lock = threading.Lock()


def async_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads behind ``areset`` / ``astep`` (``$SWEWORLD_ASYNC_WORKERS``, 512)."""
    global _async_pool
    with _async_lock:
        if _async_pool is None:
            workers = int(os.environ.get("SWEWORLD_ASYNC_WORKERS", "512"))
            _async_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="sweworld-episode"
            )
        return _async_pool


class Episode:
    """One agent episode on one task at a time (``reset`` starts the next).

    Args:
        task: a :class:`~sweworld.tasks.Task` or a task row; may be given to ``reset``.
        config: the rules (:class:`EpisodeConfig`); keyword ``overrides`` are applied on top.
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to open sessions with
            (shared by a pool); one is made and closed with the episode otherwise.
        executor: an executor instance to use (shared by a pool); built from the config
            otherwise.
        rewarder: an :class:`EpisodeRewarder` (shared by a pool); built otherwise.
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
        **overrides: Any,
    ):
        config = config or EpisodeConfig()
        self.config = config.replace(**overrides) if overrides else config
        self.task: Task | None = coerce_task(task) if task is not None else None
        self._manager = manager
        self._own_manager = manager is None
        self._executor = executor
        self._rewarder = rewarder
        self._own_rewarder = rewarder is None
        self._open_session = open_session
        self._count_tokens = token_counter or _approx_tokens
        self._call_lock = threading.Lock()
        self._session: Any = None
        self._abandoned = False  # a step overran its deadline and may still hold the session
        self._closed = False
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

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (``step`` raises until ``reset``)."""
        return self.reason is not None

    @property
    def session(self) -> Any:
        """The live session (None before ``reset`` and after the episode ended)."""
        return self._session

    @property
    def manager(self) -> Any:
        if self._manager is None:
            from sweworld.sandbox.manager import SessionManager

            self._manager = SessionManager()
        return self._manager

    @property
    def executor(self) -> Any:
        if self._executor is None:
            self._executor = build_executor(self.config)
        return self._executor

    @property
    def rewarder(self) -> EpisodeRewarder:
        if self._rewarder is None:
            self._rewarder = EpisodeRewarder(self.config, manager=self.manager)
        return self._rewarder

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
            self._drop_session()
            self.task = new_task
            self._new_state()
            self.seed = seed
            self._tracker = TestTracker.for_task(new_task)
            self._session = self._open(new_task)
            if self._closed:  # close() ran while the session opened: it must not outlive it
                self._drop_session()
                raise EpisodeError(f"episode {self.id} was closed during reset()")
            prompt = first_observation(new_task, self.config.prompt_format)
            info = {
                "episode_id": self.id,
                "instance_id": new_task.instance_id,
                "repo": new_task.repo,
                "messages": prompt_messages(new_task, self.config.prompt_format),
                "seed": seed,
            }
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
        raw = _action_text(action, cfg.max_action_chars)
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
        if not isinstance(action, (str, Mapping)):
            info["action_error"] = "type"
            return (
                f"sweworld: an action must be text or a tool-call mapping, not "
                f"{type(action).__name__}",
                -1,
                False,
                None,
            )
        size, depth = _measure_action(action, cfg.max_action_chars)
        if depth > MAX_ACTION_DEPTH:
            info["action_error"] = "too_deep"
            return (
                f"sweworld: the tool-call mapping is nested more than {MAX_ACTION_DEPTH} "
                "levels deep. Nothing was run.",
                -1,
                False,
                None,
            )
        if size > cfg.max_action_chars:  # a tool-call mapping is measured by its text
            info["action_error"] = "too_long"
            return (
                f"sweworld: the action is {size} characters long; the limit is "
                f"{cfg.max_action_chars}. Nothing was run.",
                -1,
                False,
                None,
            )
        try:
            parsed = parse_action(action, cfg.action_format)  # type: ignore[arg-type]
        except ActionParseError as exc:
            info["action_error"] = "parse"
            return exc.message, -1, False, None
        except (ValueError, TypeError, RecursionError) as exc:  # a value with no text form
            info["action_error"] = "parse"
            return (
                f"sweworld: the action could not be read ({type(exc).__name__}). Nothing was run.",
                -1,
                False,
                None,
            )
        info["command"] = parsed.command if parsed.kind == "bash" else ""
        info["tool"] = parsed.function if parsed.kind != "bash" else "bash"
        limit = cfg.step_timeout_s if timeout is None else min(timeout, cfg.step_timeout_s)
        result, error = _with_deadline(
            lambda: self._session.step(parsed.to_dict(), timeout=limit),
            2 * cfg.step_timeout_s + STEP_GRACE_S,
        )
        if result is None:
            self._abandoned = self._abandoned or "did not finish" in str(error)
            return "sweworld: the step did not finish in time; the episode ends.", -1, False, error
        calls = result.info.get("execution_calls") or []
        info["execution_calls"] = calls
        info["latency_s"] = result.info.get("latency_s")
        for key in ("timed_out", "submission_refused"):
            if result.info.get(key):
                info[key] = result.info[key]
        failure = _executor_failure(calls)
        if failure is not None:
            info["executor_error"] = failure
            if cfg.end_on_executor_error:
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
        rewarder, task, steps = self.rewarder, self.task, self.steps
        deadline = getattr(rewarder, "deadline_s", None) or reward_deadline(self.config)
        future = _step_pool().submit(
            lambda: rewarder.score(task, patch, steps=steps, submitted=submitted)
        )
        try:
            return future.result(deadline)
        except concurrent.futures.TimeoutError:
            log.error("episode %s: the reward did not answer within %.0f s", self.id, deadline)
            why = f"the reward did not answer within {deadline:.0f} s"
        except Exception as exc:
            log.exception("episode %s: the reward failed", self.id)
            why = f"{type(exc).__name__}: {exc}"
        return FinalReward(0.0, None, "none", "error", error=why)

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
            threading.Thread(target=_destroy, args=(session,), daemon=True).start()
        else:
            _destroy(session)
        hook = getattr(self._executor, "close_session", None)
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
        if self._own_rewarder and self._rewarder is not None:
            self._rewarder.close()
        if self._own_manager and self._manager is not None:
            self._manager.close_all()


def _destroy(session: Any) -> None:
    try:
        session.destroy()
    except Exception:  # cleanup must not mask the episode's result
        log.exception("destroying session %s failed", getattr(session, "id", "?"))


def build_executor(config: EpisodeConfig) -> Any:
    """The executor an episode config names (simulated ones get its model, mode, seed and
    step deadline)."""
    from sweworld.sandbox.registry import make_executor

    spec = config.executor
    if spec in ("simulated", "hybrid"):
        from sweworld.models import check_lm_spec

        check_lm_spec(config.model)
        return make_executor(
            spec,
            lm=config.model,
            mode=config.mode,
            step_timeout=config.step_timeout_s,
            seed=config.seed,
        )
    if spec == "local":
        return make_executor("local", timeout=config.step_timeout_s)
    return make_executor(spec)


def _executor_failure(calls: list[dict[str, Any]]) -> str | None:
    """The error of the first execution call whose executor raised or whose model could not
    be called (unreachable, failed to load); a simulator that fell back to its conservative
    answer because the model's answers were invalid is not a failure."""
    for call in calls:
        info = call.get("info") or {}
        if not isinstance(info, Mapping):
            continue
        if info.get("source") == "error":
            return str(info.get("error") or "executor error")[:2000]
        if info.get("source") == "fallback":  # the model answered, badly: not a failure
            for attempt in info.get("attempts") or ():  # ... unless a model call raised
                if isinstance(attempt, Mapping) and attempt.get("error"):
                    return str(attempt["error"])[:2000]
            continue
        if info.get("error"):
            return str(info["error"])[:2000]
    return None


def _with_deadline(fn: Callable[[], Any], timeout: float) -> tuple[Any, str | None]:
    """``(fn(), None)``, or ``(None, why)`` when it raised or did not return in ``timeout``
    seconds (the thread is left to finish on its own; its result is dropped)."""
    # Pooled workers rather than a thread per step (sandboxes themselves are started from
    # sweworld.sandbox.bwrap.spawn's long-lived threads, whatever thread steps them).
    future = _step_pool().submit(fn)
    try:
        return future.result(timeout), None
    except concurrent.futures.TimeoutError:
        return None, f"the step did not finish within {timeout:.0f} s"
    except Exception as exc:
        log.error("session step failed: %s: %s", type(exc).__name__, exc)
        return None, f"the session failed: {type(exc).__name__}: {exc}"


_step_workers: concurrent.futures.ThreadPoolExecutor | None = None


def _step_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that run session steps (``$SWEWORLD_STEP_WORKERS``, 1024); they live as
    long as the process, like the sandboxes they start."""
    global _step_workers
    with _async_lock:
        if _step_workers is None:
            workers = int(os.environ.get("SWEWORLD_STEP_WORKERS", "1024"))
            _step_workers = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="sweworld-step"
            )
        return _step_workers
