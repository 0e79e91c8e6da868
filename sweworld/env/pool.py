"""Many episodes at once in one process: threads, asyncio, one batched LM.

:class:`EnvPool` holds ``size`` :class:`~sweworld.env.episode.Episode` objects that share
ONE session manager, ONE executor and ONE :class:`~sweworld.env.rewards.EpisodeRewarder`.
For a simulated (or hybrid) executor the SWT language model is loaded once and wrapped in a
:class:`~sweworld.env.batching.BatchingLM`, so the model calls of concurrent episodes are
merged into batches. Three ways to drive it:

- **vectorised**: ``reset(tasks)`` / ``step(actions)`` step every slot in parallel (a
  thread pool sized to the pool); ``None`` as an action skips that slot;
- **asyncio**: ``areset`` / ``astep`` for a trainer's event loop;
- **rollouts**: ``rollout(tasks, policy_factory)`` runs one policy per task to the end
  (``size`` at a time) and returns a :class:`RolloutResult` per task, in order.

A failure stays in its episode: an executor or reward that fails ends that episode with
reason ``error`` (the episode's rule); a slot whose call raises (a bad task row, a step
after the end) is reported by :class:`PoolError` after every other slot finished, and the
other slots' results are in ``PoolError.results``. ``rollout`` never raises for one task:
its result has ``reason="error"`` and the error text.

A warm pool (:class:`~sweworld.env.warm.WarmSessions`) given as ``warm=`` opens sessions
ahead of time; it is bound to the pool's manager and executor when it has none of its own.

With ``world=URL`` in the config the episodes run on that ``sweworld serve world`` service
(the remote episode: :func:`~sweworld.env.opening.open_episode`): the pool then holds no
manager, model, executor or rewarder of its own (``lm``, ``manager``, ``warm`` and a
:class:`~sweworld.world.World` are refused). Otherwise the pool's shared parts are one
:class:`~sweworld.world.World` (its own, built from the config, or one given).

The Ray version (:mod:`sweworld.env.ray_pool`) has the same public API.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import Episode, EpisodeError, StepOutcome, coerce_task
from sweworld.env.opening import open_episode
from sweworld.env.rollouts import (
    POLICY_THREADS,
    POLICY_TIMEOUT_S,
    RolloutResult,
    check_policy_timeout,
    instance_id_of,
    patch_now,
    policy_timed_out,
)
from sweworld.env.workers import CallTimeout, IdleThreadPool, call_with_deadline, idle_seconds
from sweworld.world import World

__all__ = [
    "EnvPool",
    "PoolError",
    "RolloutResult",
    "SlotPool",
    "check_policy_timeout",
    "session_config",
]

log = logging.getLogger(__name__)

#: Seconds ``EnvPool.close`` waits for calls in flight (steps of the episodes it just closed,
#: a policy still thinking) before it lets their threads go.
CLOSE_WAIT_S = 30.0

_POOL_DEFAULT: Any = object()  # rollout(policy_timeout_s=...) not given: the pool's


class PoolError(EpisodeError):
    """Some slots of a pool call raised. ``errors`` maps a slot to its exception;
    ``results`` holds every slot's result (None for the failed and skipped ones)."""

    def __init__(self, what: str, errors: dict[int, BaseException], results: list[Any]):
        first = min(errors)
        exc = errors[first]
        super().__init__(
            f"{what}: {len(errors)} slot(s) failed ({sorted(errors)}); slot {first}: "
            f"{type(exc).__name__}: {exc}"
        )
        self.errors = errors
        self.results = results


def session_config(config: EpisodeConfig) -> Any:
    """The :class:`~sweworld.sandbox.session.SessionConfig` of an episode config's sessions
    (what a pool's warm sessions are opened with)."""
    from sweworld.sandbox.bwrap import SandboxLimits
    from sweworld.sandbox.session import SessionConfig

    return SessionConfig(
        limits=SandboxLimits(timeout=config.step_timeout_s),
        observation_format=config.observation_format,
    )


_Pool = TypeVar("_Pool", bound="SlotPool")


class SlotPool:
    """What :class:`EnvPool` and :class:`~sweworld.env.ray_pool.RayEnvPool` share: ``size``
    slots, refusal of calls once closed and of per-slot arguments of the wrong length, and
    a context manager that closes the pool."""

    def __init__(self, size: int):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.size = size
        self._closed = False

    def close(self) -> None:
        """Release what the pool holds (idempotent)."""
        raise NotImplementedError

    def __enter__(self: _Pool) -> _Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.size

    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeError("the pool is closed")

    def _slots(self, items: Iterable[Any], what: str) -> list[Any]:
        # A string (or a mapping) of the pool's length would be split into one character
        # (or key) per slot: refused, like anything that is not an iterable of items.
        if isinstance(items, (str, bytes, bytearray, Mapping)) or not isinstance(items, Iterable):
            raise TypeError(
                f"{what}: expected a list with one item per slot, not {type(items).__name__}"
            )
        items = list(items)
        if len(items) != self.size:
            raise ValueError(f"{what}: expected {self.size} items (one per slot), got {len(items)}")
        return items


class EnvPool(SlotPool):
    """``size`` episodes sharing one manager, executor, rewarder and (batched) LM.

    Args:
        config: the episodes' rules; keyword ``overrides`` are applied on top.
        size: number of episode slots (and worker threads).
        lm: the SWT model for a simulated / hybrid executor: an LM instance or a
            ``make_lm`` spec (default: ``config.model``). It is wrapped in a
            :class:`~sweworld.env.batching.BatchingLM` (unless it already is one).
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to share (one is made
            and closed with the pool otherwise).
        warm: a :class:`~sweworld.env.warm.WarmSessions` to take sessions from.
        world: a :class:`~sweworld.world.World` to share (its manager, executor, model,
            rewarder and warm sessions; left open at :meth:`close`); otherwise the pool
            builds one from the config and closes it. A string is ``EpisodeConfig.world``.
        max_batch: most model requests merged into one call.
        batch_wait_s: how long a model request waits for others to join its batch.
        policy_timeout_s: deadline of one policy call in :meth:`rollout`; the calls then run
            on worker threads (a policy bound to one thread: None, no deadline, and the
            calls run on the rollout's own thread).
    """

    def __init__(
        self,
        config: EpisodeConfig | None = None,
        *,
        size: int,
        lm: Any = None,
        manager: Any = None,
        warm: Any = None,
        max_batch: int = 32,
        batch_wait_s: float = 0.005,
        policy_timeout_s: float | None = POLICY_TIMEOUT_S,
        world: World | str | None = None,
        **overrides: Any,
    ):
        if isinstance(world, str):  # EpisodeConfig.world: a service's URL
            overrides["world"], world = world, None
        super().__init__(size)
        self.policy_timeout_s = check_policy_timeout(policy_timeout_s)
        config = config or EpisodeConfig()
        self.config = config.replace(**overrides) if overrides else config
        self._live_lock = threading.Lock()
        self._live: set[Episode] = set()  # the episodes of rollouts in flight
        self._in_flight: set[concurrent.futures.Future] = set()
        remote = self.config.world is not None
        given = [n for n, v in (("lm", lm), ("manager", manager), ("warm", warm)) if v is not None]
        if remote and given:
            raise ValueError(f"{given}: local backends, but world= runs the episodes remotely")
        if remote and world is not None:
            raise ValueError("a World is local, but world= runs the episodes remotely")
        if world is not None and given:
            raise ValueError(f"{given}: give them to the World, not beside it")
        self.world: World | None = None
        self._own_world = world is None and not remote
        self.manager: Any = None
        self.lm: Any = None
        self.executor = self.rewarder = self.warm = self._open_session = None
        try:
            if not remote:  # else the service's backends
                self.world = world or World.for_episode(
                    self.config,
                    batch_lm=True,
                    max_batch=max_batch,
                    batch_wait_s=batch_wait_s,
                    manager=manager,
                    lm=lm,
                    warm=warm,
                )
                self.manager = self.world.manager
                self.lm = self.world.lm
                self.executor = self.world.executor
                self.rewarder = self.world.rewarder
                self.warm = self.world.warm
                self._open_session = self.world.session_opener(session_config(self.config))
            self.episodes: list[Episode] = [self._new_episode(self.config) for _ in range(size)]
            self._threads = IdleThreadPool(  # threads idle for a while exit
                size, idle_s=idle_seconds(), thread_name_prefix="sweworld-pool"
            )
            self._policy_threads = IdleThreadPool(  # policy calls, each with a deadline
                POLICY_THREADS, idle_s=idle_seconds(), thread_name_prefix="sweworld-policy"
            )
        except BaseException:
            self._close_shared()
            raise

    def _new_episode(self, config: EpisodeConfig) -> Episode:
        if config.world is not None:
            return open_episode(config=config)
        return open_episode(
            config=config,
            manager=self.manager,
            executor=self.executor,
            rewarder=self.rewarder,
            open_session=self._open_session,
        )

    def __repr__(self) -> str:
        return f"<EnvPool size={self.size} executor={self.config.executor}>"

    # ------------------------------------------------------------------ vectorised

    def _submit(self, call: Callable[[], Any]) -> concurrent.futures.Future:
        """``call`` on the pool's threads, tracked until done (``close`` waits for it)."""
        with self._live_lock:
            self._check_open()
            try:
                future = self._threads.submit(call)
            except RuntimeError:  # shut down by close() meanwhile
                raise EpisodeError("the pool is closed") from None
            self._in_flight.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: concurrent.futures.Future) -> None:
        with self._live_lock:
            self._in_flight.discard(future)

    def _gather(self, what: str, calls: list[Callable[[], Any] | None]) -> list[Any]:
        futures = [self._submit(c) if c is not None else None for c in calls]
        results: list[Any] = [None] * len(calls)
        errors: dict[int, BaseException] = {}
        for slot, fut in enumerate(futures):
            if fut is None:
                continue
            try:
                results[slot] = fut.result()
            except Exception as exc:
                errors[slot] = exc
        if errors:
            raise PoolError(what, errors, results)
        return results

    def reset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]] | None]:
        """Reset every slot on its task (in parallel): ``[(prompt, info), ...]``. A ``None``
        task skips its slot (None in the result). Raises :class:`PoolError` when a slot
        failed (a task row that is not one, ...) after the others were reset."""
        self._check_open()
        tasks = self._slots(tasks, "reset")
        seeds = self._slots(seeds, "reset seeds") if seeds is not None else [None] * self.size
        calls = [
            None if task is None else _bind(ep.reset, task, seed)
            for ep, task, seed in zip(self.episodes, tasks, seeds, strict=True)
        ]
        return self._gather("reset", calls)

    def step(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """Step every slot whose action is not None (in parallel). Raises
        :class:`PoolError` when a slot's call raised (a step after its end, ...), after
        the others stepped."""
        self._check_open()
        actions = self._slots(actions, "step")
        calls = [
            None if action is None else _bind_step(ep, action)
            for ep, action in zip(self.episodes, actions, strict=True)
        ]
        return self._gather("step", calls)

    async def areset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]] | None]:
        """``reset`` for an event loop (each slot's ``areset``)."""
        self._check_open()
        tasks = self._slots(tasks, "reset")
        seeds = self._slots(seeds, "reset seeds") if seeds is not None else [None] * self.size
        coros = [
            ep.areset(task, seed=seed) if task is not None else None
            for ep, task, seed in zip(self.episodes, tasks, seeds, strict=True)
        ]
        return await _agather("reset", coros)

    async def astep(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """``step`` for an event loop (each slot's ``astep``)."""
        self._check_open()
        actions = self._slots(actions, "step")
        coros = [
            ep.astep(action) if action is not None else None
            for ep, action in zip(self.episodes, actions, strict=True)
        ]
        return await _agather("step", coros)

    # ------------------------------------------------------------------ rollouts

    def rollout(
        self,
        tasks: Sequence[Any],
        policy_factory: Callable[[], Any],
        *,
        max_steps: int | None = None,
        policy_timeout_s: Any = _POOL_DEFAULT,
    ) -> list[RolloutResult]:
        """Run a fresh policy (``policy_factory()``) on each task to the end, ``size``
        episodes at a time; one :class:`RolloutResult` per task, in order. Uses episodes
        of its own (the pool's slots are left as they are).

        Every policy call (``policy_factory()``, ``reset``, ``act``) has a deadline,
        ``policy_timeout_s`` (default: the pool's): one that does not return in time ends
        its episode with reason ``error`` (not scored; ``error`` names the call and the
        deadline) and is left to finish on its own thread; the other rollouts go on."""
        self._check_open()
        timeout = self.policy_timeout_s
        if policy_timeout_s is not _POOL_DEFAULT:
            timeout = check_policy_timeout(policy_timeout_s)
        config = self.config.replace(max_steps=max_steps) if max_steps else self.config
        tasks = list(tasks)
        results: list[RolloutResult | None] = [None] * len(tasks)
        todo: queue.Queue[int] = queue.Queue()
        for index in range(len(tasks)):
            todo.put(index)

        def worker() -> None:
            while True:
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                if self._closed:  # close() ran: the tasks not started are not run
                    results[index] = RolloutResult(
                        instance_id_of(tasks[index]), 0.0, "error", 0, "",
                        error="EpisodeError: the pool was closed",
                    )  # fmt: skip
                    continue
                results[index] = self._rollout_one(tasks[index], policy_factory, config, timeout)

        workers = min(self.size, len(tasks))
        futures = [self._submit(worker) for _ in range(workers)]
        for fut in futures:
            fut.result()
        return [r for r in results if r is not None]

    def _rollout_one(
        self,
        task: Any,
        policy_factory: Callable[[], Any],
        config: EpisodeConfig,
        timeout: float | None = None,
    ) -> RolloutResult:
        instance_id = ""
        episode: Episode | None = None
        total = 0.0
        info: dict[str, Any] = {}

        def policy_call(fn: Callable[[], Any], what: str) -> Any:
            return call_with_deadline(self._policy_threads, fn, timeout, f"the policy's {what}")

        try:
            task = coerce_task(task)
            instance_id = task.instance_id
            episode = self._new_episode(config)
            with self._live_lock:
                if self._closed:
                    raise EpisodeError("the pool was closed")
                self._live.add(episode)
            observation, _ = episode.reset(task)
            policy = policy_call(policy_factory, "factory")
            first = observation
            policy_call(lambda: policy.reset(task, first), "reset()")
            while not episode.done:
                action = policy_call(partial(policy.act, observation), "act()")
                if action is None:
                    if self._closed:  # its session went with the pool: nothing to report
                        raise EpisodeError("the pool was closed")
                    patch = patch_now(episode)
                    return RolloutResult(
                        instance_id, total, "policy_stopped", episode.steps, patch or "",
                        None, info, episode.trajectory(),
                    )  # fmt: skip
                outcome = episode.step(action)
                observation, info = outcome.observation, outcome.info
                total += outcome.reward
            final = episode.final
            return RolloutResult(
                instance_id,
                total,
                episode.reason,
                episode.steps,
                episode.patch or "",
                final.resolved if final is not None else None,
                info,
                episode.trajectory(),
                info.get("error"),
            )
        except CallTimeout as exc:  # the policy is stuck: the episode ends, the pool goes on
            log.warning("rollout of %s: %s; the episode ends", instance_id or "?", exc)
            return policy_timed_out(instance_id, total, episode, info, str(exc))
        except Exception as exc:
            log.warning("rollout of %s failed: %s: %s", instance_id or "?", type(exc).__name__, exc)
            steps = episode.steps if episode is not None else 0
            trajectory = None
            if episode is not None and episode.task is not None:
                try:
                    trajectory = episode.trajectory()
                except Exception:
                    trajectory = None
            return RolloutResult(
                instance_id, total, "error", steps, "", None, info, trajectory,
                f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        finally:
            if episode is not None:
                episode.close()
                with self._live_lock:
                    self._live.discard(episode)

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Close every episode (their sessions; those of rollouts in flight too: a rollout
        running now ends with reason ``error``, its tasks not started are not run), the
        thread pool, the model, the rewarder, and the manager when the pool made it.
        Waits at most ``CLOSE_WAIT_S`` for calls in flight (a policy that never returns is
        left behind). Idempotent."""
        with self._live_lock:
            if self._closed:
                return
            self._closed = True
            live = list(self._live)
            in_flight = list(self._in_flight)
        for episode in [*getattr(self, "episodes", []), *live]:
            try:
                episode.close()
            except Exception:
                log.exception("closing episode %s failed", episode.id)
        threads = getattr(self, "_threads", None)
        if threads is not None:
            _, pending = concurrent.futures.wait(in_flight, timeout=CLOSE_WAIT_S)
            if pending:
                log.warning("EnvPool.close: %d call(s) still running; left behind", len(pending))
            threads.shutdown(wait=not pending, cancel_futures=True)
        policy_threads = getattr(self, "_policy_threads", None)
        if policy_threads is not None:  # a stuck policy keeps its thread until it returns
            policy_threads.shutdown(wait=False, cancel_futures=True)
        self._close_shared()

    def _close_shared(self) -> None:
        # A warm pool given to the pool belongs to the caller (close it yourself), and so
        # does a World given to it.
        if self._own_world and self.world is not None:
            self.world.close()


def _bind(reset: Callable[..., Any], task: Any, seed: int | None) -> Callable[[], Any]:
    return lambda: reset(task, seed=seed)


def _bind_step(episode: Episode, action: Any) -> Callable[[], Any]:
    return lambda: episode.step(action)


async def _agather(what: str, coros: list[Any]) -> list[Any]:
    live = [(slot, c) for slot, c in enumerate(coros) if c is not None]
    outcomes = await asyncio.gather(*(c for _, c in live), return_exceptions=True)
    results: list[Any] = [None] * len(coros)
    errors: dict[int, BaseException] = {}
    for (slot, _), outcome in zip(live, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            errors[slot] = outcome
        else:
            results[slot] = outcome
    if errors:
        raise PoolError(what, errors, results)
    return results
