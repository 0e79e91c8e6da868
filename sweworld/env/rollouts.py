"""Rollouts' shared parts: :class:`RolloutResult`, and the deadline of a policy's calls.

A rollout runs the trainer's policy (``policy_factory()``, ``reset``, ``act``), which this
package cannot interrupt: each call runs on a worker thread of its own and is waited for at
most ``policy_timeout_s`` seconds. Past it the rollout ends with reason ``error`` and an
error naming the call and the deadline; the thread is left to finish (and exits once idle).
Used by :class:`~sweworld.env.pool.EnvPool` and :class:`~sweworld.env.ray_pool.RayEnvPool`.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

__all__ = [
    "POLICY_THREADS",
    "POLICY_TIMEOUT_S",
    "RolloutResult",
    "check_policy_timeout",
    "instance_id_of",
    "patch_now",
    "policy_timed_out",
    "run_policy_calls",
]

log = logging.getLogger(__name__)

#: Default deadline of one policy call in ``rollout`` (``policy_factory()``, ``reset``,
#: ``act``): past it the rollout ends with reason ``error`` and the pool goes on.
POLICY_TIMEOUT_S = 600.0

#: Most threads running policy calls at once (a policy that never returns keeps one).
POLICY_THREADS = 1024


@dataclass
class RolloutResult:
    """The end of one rollout.

    Attributes:
        instance_id: the task's id ("" when the task row could not be read).
        reward: the final reward (plus dense rewards when they are on), summed over steps.
        reason: why it ended: an episode end reason (``submitted``, ``max_steps``, ...),
            ``policy_stopped`` (the policy returned None before the end: not scored) or
            ``error`` (also when a policy call passed its deadline: ``error`` says so).
        steps: actions run.
        patch: the episode's patch (``git diff`` against the base).
        resolved: whether the patch resolves the task, when the reward knows.
        info: the last step's info (the reward and its evidence under ``"reward"``).
        trajectory: the data-schema trajectory (None when the episode never started).
        error: what went wrong, for reason ``error``.
    """

    instance_id: str
    reward: float
    reason: str | None
    steps: int
    patch: str
    resolved: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)
    trajectory: Any = None
    error: str | None = None


def check_policy_timeout(value: Any) -> float | None:
    """A policy deadline: a positive, finite number of seconds, or None (no deadline)."""
    if value is None:
        return None
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not 0 < value < float("inf")
    ):
        raise ValueError(
            f"policy_timeout_s must be a positive number of seconds or None, got {value!r}"
        )
    return float(value)


def policy_timed_out(
    instance_id: str, total: float, episode: Any, info: dict[str, Any], why: str
) -> RolloutResult:
    """The result of a rollout whose policy passed its deadline: its episode ended with
    reason ``error`` (not scored), ``why`` as the error."""
    trajectory = None
    steps = 0
    if episode is not None:
        steps = episode.steps
        try:
            if episode.task is not None and not episode.done:
                outcome = episode.end("error", error=why)
                info, total = outcome.info, total + outcome.reward
            if episode.task is not None:
                trajectory = episode.trajectory()
        except Exception as exc:  # the episode cannot end cleanly: the result still says why
            log.warning("rollout of %s: ending the episode failed: %s", instance_id, exc)
    return RolloutResult(instance_id, total, "error", steps, "", None, info, trajectory, why)


def patch_now(episode: Any) -> str:
    """The running episode's diff (a remote one asks its service)."""
    if episode.session is not None:
        return episode.session.get_patch()
    current = getattr(episode, "current_patch", None)  # a RemoteEpisode
    return current() if current is not None and not episode.done else ""


def instance_id_of(task: Any) -> str:
    """A task's id, as far as it can be told without reading the row."""
    found = (
        task.get("instance_id") if isinstance(task, Mapping) else getattr(task, "instance_id", "")
    )
    return found if isinstance(found, str) else ""


def run_policy_calls(
    threads: concurrent.futures.Executor,
    runs: list[Any],
    call: Callable[[Any], Any],
    what: str,
    timeout: float | None,
    guard: Callable[[Callable[[], Any]], str | None],
) -> None:
    """``call(run)`` for every run at once on ``threads``, all within one deadline
    (``timeout`` seconds from now; None: none, one after the other here). Each run's
    ``error`` becomes what ``guard`` returned (None when the call went well), or says that
    the policy's ``what`` did not return in time (the call is left to finish)."""
    if timeout is None:
        for run in runs:
            run.error = guard(partial(call, run))
        return
    futures = [(run, threads.submit(guard, partial(call, run))) for run in runs]
    done, _ = concurrent.futures.wait([f for _, f in futures], timeout=timeout)
    for run, future in futures:
        if future in done:
            run.error = future.result()
        else:  # stuck in the trainer's code
            future.cancel()
            run.error = f"CallTimeout: the policy's {what} did not return within {timeout:g} s"
            log.warning("rollout %s: %s", getattr(run, "key", "?"), run.error)
