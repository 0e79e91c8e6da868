"""What an episode's steps need besides its rules: tasks from rows, action sizing, text
limits, executor failures and deadlines on worker threads (the executor a config names comes
from :mod:`sweworld.world`; :mod:`sweworld.env.opening` opens local or remote episodes).

Pure functions and process-wide worker pools, shared by :mod:`sweworld.env.episode` and the
adapters.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.workers import IdleThreadPool, idle_seconds
from sweworld.tasks.schema import Task

__all__ = [
    "MAX_ACTION_DEPTH",
    "MAX_PROBLEM_CHARS",
    "action_text",
    "approx_tokens",
    "async_pool",
    "bound_task",
    "coerce_task",
    "destroy_session",
    "executor_failure",
    "measure_action",
    "parse_episode_action",
    "run_with_deadline",
    "step_info",
    "step_pool",
    "truncate_text",
]

log = logging.getLogger(__name__)


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


def measure_action(action: Any, limit: int) -> tuple[int, int]:
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


def action_text(action: Any, limit: int) -> str:
    """The action as the trajectory records it: itself, or a mapping's ``repr`` (a short
    description when that cannot be printed or would be too long)."""
    if isinstance(action, str):
        return action
    size, depth = measure_action(action, limit)
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


def approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


#: Longest problem statement an episode keeps, in characters: a longer one (a 50 MB issue
#: text made a 50 MB first observation, and every SWT/SWR prompt read it whole) keeps its
#: head and tail around a ``[... N characters cut by sweworld ...]`` marker. The first
#: observation is further bounded by ``max_observation_chars``.
MAX_PROBLEM_CHARS = 100_000


def bound_task(task: Task, limit: int = MAX_PROBLEM_CHARS) -> Task:
    """``task`` with its problem statement cut to ``limit`` characters (head and tail kept
    around a visible marker); the task itself when it fits."""
    text = task.problem_statement or ""
    if len(text) <= limit:
        return task
    cut, _ = truncate_text(text, limit)
    return task.model_copy(update={"problem_statement": cut})


def parse_episode_action(
    action: Any, config: EpisodeConfig, info: dict[str, Any]
) -> tuple[Any, str | None]:
    """``(parsed action, None)``, or ``(None, observation)`` for an action that is not run
    (not text or a mapping, nested too deep, too long, unreadable); ``info["action_error"]``
    says which."""
    from sweworld.sandbox.actions import ActionParseError, parse_action

    if not isinstance(action, (str, Mapping)):
        info["action_error"] = "type"
        kind = type(action).__name__
        return None, f"sweworld: an action must be text or a tool-call mapping, not {kind}"
    size, depth = measure_action(action, config.max_action_chars)
    if depth > MAX_ACTION_DEPTH:
        info["action_error"] = "too_deep"
        return None, (
            f"sweworld: the tool-call mapping is nested more than {MAX_ACTION_DEPTH} "
            "levels deep. Nothing was run."
        )
    if size > config.max_action_chars:  # a tool-call mapping is measured by its text
        info["action_error"] = "too_long"
        return None, (
            f"sweworld: the action is {size} characters long; the limit is "
            f"{config.max_action_chars}. Nothing was run."
        )
    try:
        return parse_action(action, config.action_format), None  # type: ignore[arg-type]
    except ActionParseError as exc:
        info["action_error"] = "parse"
        return None, exc.message
    except (ValueError, TypeError, RecursionError) as exc:  # a value with no text form
        info["action_error"] = "parse"
        return None, (
            f"sweworld: the action could not be read ({type(exc).__name__}). Nothing was run."
        )


_async_workers: IdleThreadPool | None = None
_async_lock = threading.Lock()


def async_pool() -> IdleThreadPool:
    """The worker threads behind ``areset`` / ``astep`` (``$SWEWORLD_ASYNC_WORKERS``, 512);
    a thread idle for ``$SWEWORLD_WORKER_IDLE_S`` (60 s) exits."""
    global _async_workers
    with _async_lock:
        if _async_workers is None:
            workers = int(os.environ.get("SWEWORLD_ASYNC_WORKERS", "512"))
            _async_workers = IdleThreadPool(
                workers, idle_s=idle_seconds(), thread_name_prefix="sweworld-episode"
            )
        return _async_workers


def destroy_session(session: Any) -> None:
    try:
        session.destroy()
    except Exception:  # cleanup must not mask the episode's result
        log.exception("destroying session %s failed", getattr(session, "id", "?"))


def executor_failure(calls: list[dict[str, Any]]) -> str | None:
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


def step_info(result_info: Mapping[str, Any], info: dict[str, Any]) -> str | None:
    """Copy what a session step's ``result_info`` says into the episode's step ``info``
    (execution calls, latency, ``timed_out`` also when an execution call stopped at the
    step's deadline, a refused submission, the executor's failure); that failure or None."""
    calls = result_info.get("execution_calls") or []
    info["execution_calls"] = calls
    info["latency_s"] = result_info.get("latency_s")
    for key in ("timed_out", "submission_refused"):
        if result_info.get(key):
            info[key] = result_info[key]
    for call in calls:
        call_info = call.get("info") if isinstance(call, Mapping) else None
        if isinstance(call_info, Mapping) and call_info.get("timed_out"):
            info["timed_out"] = True
    failure = executor_failure(calls)
    if failure is not None:
        info["executor_error"] = failure
    return failure


def run_with_deadline(fn: Callable[[], Any], timeout: float) -> tuple[Any, str | None]:
    """``(fn(), None)``, or ``(None, why)`` when it raised or did not return in ``timeout``
    seconds (the thread is left to finish on its own; its result is dropped)."""
    # Pooled workers rather than a thread per step (sandboxes themselves are started from
    # sweworld.sandbox.bwrap.spawn's long-lived threads, whatever thread steps them).
    future = step_pool().submit(fn)
    try:
        return future.result(timeout), None
    except concurrent.futures.TimeoutError:
        return None, f"the step did not finish within {timeout:.0f} s"
    except Exception as exc:
        log.error("session step failed: %s: %s", type(exc).__name__, exc)
        return None, f"the session failed: {type(exc).__name__}: {exc}"


_step_workers: IdleThreadPool | None = None


def step_pool() -> IdleThreadPool:
    """The threads that run session steps and rewards (``$SWEWORLD_STEP_WORKERS``, 1024);
    a thread idle for ``$SWEWORLD_WORKER_IDLE_S`` (60 s) exits. (Sandboxes are started from
    :mod:`sweworld.sandbox.bwrap`'s own long-lived spawner threads, so a step thread may end
    without taking its sandbox with it.)"""
    global _step_workers
    with _async_lock:
        if _step_workers is None:
            workers = int(os.environ.get("SWEWORLD_STEP_WORKERS", "1024"))
            _step_workers = IdleThreadPool(
                workers, idle_s=idle_seconds(), thread_name_prefix="sweworld-step"
            )
        return _step_workers
