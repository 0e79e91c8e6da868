"""The environment pool on Ray: episodes held by actors near their repositories.

:class:`RayEnvPool` has the public API of the in-process :class:`~sweworld.env.pool.EnvPool`
(``reset`` / ``step`` / ``areset`` / ``astep`` / ``rollout`` / ``close`` over ``size`` slots),
for users who outgrow one machine:

- a few Ray **actors** (default: one per node of the cluster, spread over the nodes), each
  holding a :class:`~sweworld.sandbox.manager.SessionManager`, one executor, one rewarder and
  the episodes of its slots: slot ``i`` lives in actor ``i % n_actors``, so its sessions stay
  on the node where its repository checkouts are;
- one remote call **per actor per pool step**, not per episode: the actor steps its episodes
  in threads (so a shared model endpoint sees their requests together) and sends back
  :class:`~sweworld.env.episode.StepOutcome` objects;
- the models behind an **endpoint**: ``executor="simulated", model="openai:URL#MODEL"`` sends
  every actor's execution calls to one vLLM server. Any other executor spec works too
  (``local``, ``none``, ``scripted:FILE``, a dotted path). ``model="embedded"`` loads the
  embedded model inside every actor: it works, but it is the slow path (one CPU model per
  actor, no batching across actors).

Nothing hangs: every remote call is awaited with a deadline (``call_timeout_s``, by default
longer than a step's own deadline plus the reward's). An actor that fails or overruns ends
the episodes it held with reason ``error`` (the cause in ``info["error"]``); the next
``reset`` of their slots starts a fresh actor. Bad input is answered as the in-process pool
answers it: actions or tasks of the wrong length are a ``ValueError``; a task row missing
fields, ``step`` before ``reset`` or after the end fail their slot only (checked in the
driver, nothing is sent for them), reported by :class:`~sweworld.env.pool.PoolError` after
the other slots ran; a second call while one runs is :class:`EpisodeBusy`.

Ray is imported only when a pool is made: ``sweworld.env`` imports without it.

>>> from sweworld.env.ray_pool import RayEnvPool                    # doctest: +SKIP
>>> with RayEnvPool(size=8, executor="simulated", model="openai:http://vllm:8000/v1#swt",
...                 reward="real", address="auto") as pool:
...     results = pool.rollout(tasks, make_policy)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import (
    STEP_GRACE_S,
    Episode,
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
    build_executor,
    coerce_task,
)

__all__ = ["EpisodeGroup", "RayEnvPool", "RemoteEpisode"]

log = logging.getLogger(__name__)

#: Seconds added to a remote call's deadline beyond the step's own backstop and the reward.
CALL_GRACE_S = 60.0
#: What the real reward may take on top of a step (its test run's deadline).
REWARD_ALLOWANCE_S = 1800.0
#: Seconds ``close`` waits for an actor to close its sessions before killing it.
CLOSE_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------- the actor


class EpisodeGroup:
    """The episodes of one actor (run as a Ray actor by :class:`RayEnvPool`; a plain class,
    usable in-process too).

    It holds one session manager, one executor and one rewarder shared by its episodes, and
    answers batched calls: ``reset([(slot, task, seed), ...])`` and
    ``step([(slot, action), ...])`` run their items in threads and return one
    ``("ok", value)`` or ``("error", exception)`` per item, in order.
    """

    def __init__(
        self,
        config: EpisodeConfig,
        manager_options: Mapping[str, Any] | None = None,
        lm: Any = None,
        executor: Any = None,
        *,
        name: str = "group",
        max_batch: int = 32,
        batch_wait_s: float = 0.005,
        slots: int = 1,
        warm: Mapping[str, Any] | None = None,
    ):
        from sweworld.env.rewards import EpisodeRewarder
        from sweworld.sandbox.manager import SessionManager

        self.config = config
        self.name = name
        self.manager = SessionManager(**dict(manager_options or {}))
        self.lm: Any = None
        if executor is None and config.executor in ("simulated", "hybrid"):
            executor = self._simulated_executor(lm, max_batch, batch_wait_s, slots)
        self.executor = executor if executor is not None else build_executor(config)
        self.rewarder = EpisodeRewarder(config, manager=self.manager)
        self.warm: Any = None
        if warm is not None:  # this actor's own warm sessions, as the template said
            from sweworld.env.warm import WarmSessions
            from sweworld.sandbox.bwrap import SandboxLimits
            from sweworld.sandbox.session import SessionConfig

            session_config = SessionConfig(
                limits=SandboxLimits(timeout=config.step_timeout_s),
                observation_format=config.observation_format,
            )
            self.warm = WarmSessions(
                self.manager, executor=self.executor, config=session_config, **warm
            )
        self.episodes: dict[int | str, Episode] = {}
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(4, min(slots, 256)), thread_name_prefix="sweworld-ray-episode"
        )

    def _simulated_executor(self, lm: Any, max_batch: int, batch_wait_s: float, slots: int) -> Any:
        """The actor's SWT executor, as the in-process pool builds it: one model (an endpoint
        client, or an embedded model: the slow path) behind a BatchingLM that merges the
        requests of this actor's episodes."""
        from sweworld.env.batching import BatchingLM
        from sweworld.env.pool import build_pool_executor
        from sweworld.models import make_lm

        remote = str(self.config.model).startswith(("openai:", "vllm:")) and lm is None
        self.lm = BatchingLM(
            make_lm(lm if lm is not None else self.config.model),
            max_batch=max_batch,
            batch_wait_s=batch_wait_s,
            max_concurrent=max(1, slots) if remote else 1,  # a server batches on its side
        )
        return build_pool_executor(self.config, self.lm)

    def _episode(self, key: int | str, max_steps: int | None = None) -> Episode:
        episode = self.episodes.get(key)
        config = self.config
        if max_steps is not None and max_steps != config.max_steps:
            config = config.replace(max_steps=max_steps)
        if episode is not None and episode.config.max_steps != config.max_steps:
            self._drop(key)
            episode = None
        if episode is None:
            episode = Episode(
                config=config,
                manager=self.manager,
                executor=self.executor,
                rewarder=self.rewarder,
                open_session=self.warm.acquire if self.warm is not None else None,
            )
            episode.id = f"{self.name}.{episode.id}"  # unique across the pool's actors
            self.episodes[key] = episode
        return episode

    def _drop(self, key: int | str) -> None:
        episode = self.episodes.pop(key, None)
        if episode is not None:
            episode.close()

    def _run_all(self, calls: list[Callable[[], Any]]) -> list[tuple[str, Any]]:
        def guarded(call: Callable[[], Any]) -> tuple[str, Any]:
            try:
                return "ok", call()
            except Exception as exc:  # sent back per item; one bad slot spares the others
                return "error", _portable(exc)

        if len(calls) == 1:
            return [guarded(calls[0])]
        return list(self._threads.map(guarded, calls))

    def reset(self, items: Sequence[tuple[Any, Any, Any, Any]]) -> list[tuple[str, Any]]:
        """Reset ``(key, task, seed, max_steps)`` items: ``(prompt, info)`` per item. A key
        is a pool slot (int) or a rollout's own episode (str)."""
        return self._run_all(
            [
                (lambda k=k, t=t, s=s, m=m: self._episode(k, m).reset(t, seed=s))
                for k, t, s, m in items
            ]
        )

    def step(self, items: Sequence[tuple[Any, Any]]) -> list[tuple[str, Any]]:
        """Step ``(key, action)`` items: a :class:`StepOutcome` per item; for a rollout's
        episode ``(outcome, end)``, ``end`` being ``(trajectory, resolved)`` once it ended
        (the episode is then dropped)."""
        return self._run_all([(lambda k=k, a=a: self._step_one(k, a)) for k, a in items])

    def _step_one(self, key: int | str, action: Any) -> Any:
        episode = self.episodes.get(key)
        if episode is None:
            raise EpisodeError(f"slot {key}: call reset() before step()")
        outcome = episode.step(action)
        if isinstance(key, int):
            return outcome
        if not outcome.done:
            return outcome, None
        end = (episode.trajectory(), episode.final.resolved if episode.final else None)
        self._drop(key)
        return outcome, end

    def stop(self, keys: Sequence[str]) -> list[tuple[str, Any]]:
        """End rollouts whose policy stopped: ``(patch, trajectory)`` each; dropped."""

        def one(key: str) -> tuple[str, Any]:
            episode = self.episodes[key]
            try:
                session = episode.session
                patch = session.get_patch() if session is not None else episode.patch
                return patch or "", episode.trajectory()
            finally:
                self._drop(key)

        return self._run_all([(lambda k=k: one(k)) for k in keys])

    def trajectory(self, key: int | str) -> Any:
        """The data-schema trajectory of a slot's episode."""
        episode = self.episodes.get(key)
        if episode is None:
            raise EpisodeError(f"slot {key}: no episode has started")
        return episode.trajectory()

    def where(self) -> tuple[str, int]:
        """The host name and process id of this actor."""
        return socket.gethostname(), os.getpid()

    def live_sessions(self) -> int:
        """How many sessions this actor's manager holds open (warm ones included)."""
        return len(self.manager.sessions)

    def warm_stats(self) -> dict[str, Any] | None:
        """The warm sessions' hits, misses, capacity, ... (None without them)."""
        return self.warm.stats() if self.warm is not None else None

    def close(self) -> int:
        """Close every episode, the model, the rewarder and the manager; sessions left."""
        for key in list(self.episodes):
            try:
                self._drop(key)
            except Exception:
                log.exception("closing the episode of %s failed", key)
        try:
            if self.warm is not None:
                self.warm.close()
            self.rewarder.close()
            if self.lm is not None:
                self.lm.close()
        finally:
            self.manager.close_all()
            self._threads.shutdown(wait=False, cancel_futures=True)
        return len(self.manager.sessions)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ``RuntimeError`` with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------- driver side


@dataclass
class RemoteEpisode:
    """The driver's view of an episode held by an actor (what ``pool.episodes`` lists):
    ``id``, ``steps``, ``reason``, ``done``, ``patch`` and ``reward`` as the outcomes said;
    ``trajectory()`` fetches the record from the actor."""

    slot: int
    actor: int
    pool: Any = field(repr=False, default=None)
    id: str | None = None
    instance_id: str | None = None
    steps: int = 0
    reason: str | None = None
    patch: str | None = None
    reward: float = 0.0
    started: bool = False
    lost: str | None = None  # why the actor that held it is gone

    @property
    def done(self) -> bool:
        return self.reason is not None

    def trajectory(self) -> Any:
        """The episode as a data-schema trajectory (fetched from its actor)."""
        return self.pool.trajectory(self.slot)

    def _reset(self, info: Mapping[str, Any]) -> None:
        self.id, self.instance_id = info.get("episode_id"), info.get("instance_id")
        self.steps, self.reason, self.patch, self.reward = 0, None, None, 0.0
        self.started, self.lost = True, None

    def _record(self, outcome: StepOutcome) -> None:
        self.steps = outcome.info.get("step", self.steps + 1)
        self.reward += outcome.reward
        if outcome.done:
            self.reason = outcome.info.get("reason") or "error"
            self.patch = outcome.info.get("patch")


class RayEnvPool:
    """``size`` episodes on Ray actors, stepped together (the API of ``EnvPool``).

    Args:
        config: the episode rules; keyword ``overrides`` are applied on top
            (``executor=``, ``model=``, ``reward=``, ``max_steps=``, ...).
        size: number of slots (concurrent episodes).
        lm: the execution model: a spec string (``openai:URL#MODEL`` for a vLLM server; it
            becomes ``config.model``) or a picklable LM object copied into every actor.
        manager: where actors keep sessions: a mapping of
            :class:`~sweworld.sandbox.manager.SessionManager` options (``runtime_root``,
            ``backend``, ``checkout_root``) or a manager whose options are copied (a live
            manager cannot cross processes).
        warm: an unbound :class:`~sweworld.env.warm.WarmSessions` (or a mapping of its
            options, ``tasks`` included) used as a template: every actor keeps its own warm
            sessions with the template's ``per_task`` and ``refill`` and an equal share of its
            memory budget, for the tasks its slots are reset on (live sessions cannot cross
            processes: a bound one is refused).
        max_batch, batch_wait_s: how each actor's :class:`~sweworld.env.batching.BatchingLM`
            merges its episodes' model requests (a vLLM endpoint also batches across actors).
        address: a Ray cluster to join (``"auto"``, ``"ray://host:10001"``); without it a
            local Ray is started when none is running.
        n_actors: number of actors (default: one per alive node, at most ``size``).
        num_cpus: CPUs each actor reserves.
        call_timeout_s: deadline of one remote call (default: twice the step deadline plus
            the step grace, the reward allowance and a minute).
        runtime_env: Ray ``runtime_env`` of the actors (e.g. ``{"pip": ["sweworld"]}``).
        ray_init: extra ``ray.init`` options when this pool starts Ray.
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
        address: str | None = None,
        n_actors: int | None = None,
        num_cpus: float = 1.0,
        call_timeout_s: float | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        ray_init: Mapping[str, Any] | None = None,
        **overrides: Any,
    ):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        if n_actors is not None and (not isinstance(n_actors, int) or n_actors < 1):
            raise ValueError(f"n_actors must be a positive integer, got {n_actors!r}")
        config = config or EpisodeConfig()
        if isinstance(lm, str):
            overrides.setdefault("model", lm)
            lm = None
        self.config = config.replace(**overrides) if overrides else config
        executor = None if isinstance(self.config.executor, str) else self.config.executor
        if executor is None:
            check_executor_spec(self.config)
        self.size = size
        self.max_batch, self.batch_wait_s = max_batch, batch_wait_s
        self.call_timeout_s = call_timeout_s or (
            2 * self.config.step_timeout_s + STEP_GRACE_S + REWARD_ALLOWANCE_S + CALL_GRACE_S
        )
        manager_options = self._manager_options = _manager_options(manager)
        self._closed = False
        self._busy = threading.Lock()
        self._actors: list[Any] = []

        import ray

        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
            }
            if address is None:
                options["num_cpus"] = max(2, int(num_cpus * min(size, n_actors or 1)))
            else:
                options["address"] = address
            ray.init(**{**options, **(ray_init or {})})
        if n_actors is None:
            n_actors = max(1, sum(1 for node in ray.nodes() if node.get("Alive")))
        self.n_actors = min(n_actors, size)
        cpus = ray.cluster_resources().get("CPU", 0.0)
        if self.n_actors * num_cpus > cpus:  # the actors would wait for CPUs forever
            raise ValueError(
                f"{self.n_actors} actors x num_cpus={num_cpus} need more CPUs than the Ray "
                f"cluster has ({cpus:g}); pass a smaller n_actors or num_cpus"
            )
        actor_options: dict[str, Any] = {"num_cpus": num_cpus, "scheduling_strategy": "SPREAD"}
        if runtime_env:
            actor_options["runtime_env"] = dict(runtime_env)
        self._actor_class = ray.remote(EpisodeGroup).options(**actor_options)
        self._actor_args = (self.config, manager_options, lm, executor)
        self._warm = _warm_options(warm, self.n_actors)
        self._starts = 0
        self._rollouts = 0
        self._whereabouts: list[Any] = []  # (host, pid) of every actor started
        self._actors = [self._start_actor(i) for i in range(self.n_actors)]
        self.episodes: list[RemoteEpisode] = [
            RemoteEpisode(slot=i, actor=i % self.n_actors, pool=self) for i in range(size)
        ]

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"<RayEnvPool size={self.size} actors={self.n_actors} executor={self.config.executor}>"
        )

    # ------------------------------------------------------------------ actors

    def _start_actor(self, index: int) -> Any:
        self._starts += 1
        actor = self._actor_class.remote(
            *self._actor_args,
            name=f"a{index}" if self._starts <= self.n_actors else f"a{index}r{self._starts}",
            max_batch=self.max_batch,
            batch_wait_s=self.batch_wait_s,
            slots=len(range(index, self.size, self.n_actors)),
            warm=self._warm,
        )
        self._whereabouts.append(actor.where.remote())
        return actor

    def _actor(self, index: int) -> Any:
        """Actor ``index``, started afresh when it was lost."""
        if self._actors[index] is None:
            self._actors[index] = self._start_actor(index)
        return self._actors[index]

    def _lose_actor(self, index: int, why: str) -> None:
        """Kill actor ``index`` (it failed or overran) and mark its live episodes lost."""
        import ray

        actor, self._actors[index] = self._actors[index], None
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        for episode in self.episodes:
            if episode.actor == index and episode.started and not episode.done:
                episode.lost = why

    def _call(self, method: str, plan: dict[int, list[Any]]) -> dict[int, Any]:
        """One remote call per actor in ``plan``; each actor's reply, or the exception
        that stands for it (the actor failed or missed the deadline; it is then killed)."""
        import ray

        refs = {i: getattr(self._actor(i), method).remote(items) for i, items in plan.items()}
        replies: dict[int, Any] = {}
        deadline = time.monotonic() + self.call_timeout_s
        for index, ref in refs.items():
            try:
                replies[index] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                replies[index] = self._failed(index, self._late(index))
            except ray.exceptions.RayError as exc:
                replies[index] = self._failed(index, f"actor {index} failed: {_short(exc)}")
        return replies

    async def _acall(self, method: str, plan: dict[int, list[Any]]) -> dict[int, Any]:
        """``_call`` for an event loop (its waiting done in a worker thread)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._call, method, plan)

    def _late(self, index: int) -> str:
        return f"actor {index} did not answer within {self.call_timeout_s:g} s"

    def _failed(self, index: int, why: str) -> RuntimeError:
        self._lose_actor(index, why)
        return RuntimeError(why)

    # ------------------------------------------------------------------ reset

    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeError("the pool is closed")

    @contextlib.contextmanager
    def _exclusive(self, what: str) -> Any:
        """One call of the pool at a time (its slots' state is the driver's)."""
        if not self._busy.acquire(blocking=False):
            raise EpisodeBusy(
                f"{what}() while another call of this pool is running; drive a pool from one "
                "thread (or one task) at a time"
            )
        try:
            yield
        finally:
            self._busy.release()

    def _slots(self, items: Sequence[Any], what: str) -> list[Any]:
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise TypeError(f"{what}: expected a sequence with one item per slot")
        if len(items) != self.size:
            raise ValueError(f"{what}: expected {self.size} items (one per slot), got {len(items)}")
        return list(items)

    def _reset_plan(self, tasks: Sequence[Any], seeds: Sequence[int | None] | None) -> Any:
        self._check_open()
        tasks = self._slots(tasks, "reset")
        seeds = self._slots(seeds, "reset seeds") if seeds is not None else [None] * self.size
        plan: dict[int, list[Any]] = {}
        errors: dict[int, BaseException] = {}
        for slot, (task, seed) in enumerate(zip(tasks, seeds, strict=True)):
            if task is None:
                continue
            try:
                task = coerce_task(task)  # a bad row is refused here, before anything is sent
            except ValueError as exc:
                errors[slot] = exc
                continue
            plan.setdefault(slot % self.n_actors, []).append((slot, task, seed, None))
        return plan, errors

    def reset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]] | None]:
        """Start an episode in every slot: ``tasks[i]`` (a Task or a task row; None skips
        the slot) in slot ``i``, one remote call per actor: ``[(prompt, info), ...]``.

        Raises :class:`~sweworld.env.pool.PoolError` when some slots failed (a task row
        that is not one, a repository that cannot be found), after the others were reset.
        """
        with self._exclusive("reset"):
            plan, errors = self._reset_plan(tasks, seeds)
            return self._finish_reset(plan, errors, self._call("reset", plan))

    async def areset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]] | None]:
        """``reset`` for an event loop (awaits the actors without blocking the loop)."""
        with self._exclusive("areset"):
            plan, errors = self._reset_plan(tasks, seeds)
            return self._finish_reset(plan, errors, await self._acall("reset", plan))

    def _finish_reset(
        self, plan: dict[int, list[Any]], errors: dict[int, BaseException], replies: dict
    ) -> list[tuple[str, dict[str, Any]] | None]:
        results: list[Any] = [None] * self.size
        for index, items in plan.items():
            reply = replies[index]
            if isinstance(reply, BaseException):
                reply = [("error", reply)] * len(items)
            for (slot, *_), (status, value) in zip(items, reply, strict=True):
                if status == "ok":
                    self.episodes[slot]._reset(value[1])
                    results[slot] = value
                else:
                    self.episodes[slot].started = False
                    errors[slot] = value
        if errors:
            from sweworld.env.pool import PoolError

            raise PoolError("reset", errors, results)
        return results

    # ------------------------------------------------------------------ step

    def _step_plan(self, actions: Sequence[Any | None]) -> Any:
        self._check_open()
        actions = self._slots(actions, "step")
        plan: dict[int, list[Any]] = {}
        errors: dict[int, BaseException] = {}
        lost: dict[int, StepOutcome] = {}
        for slot, action in enumerate(actions):
            episode = self.episodes[slot]
            if action is None:
                continue
            if not episode.started:
                errors[slot] = EpisodeError(f"slot {slot}: call reset() before step()")
            elif episode.done:
                errors[slot] = EpisodeFinished(
                    f"slot {slot}: its episode ended ({episode.reason}); reset it or pass None"
                )
            elif episode.lost is not None:
                lost[slot] = _error_outcome(episode.id, episode.steps, episode.lost)
            else:
                plan.setdefault(episode.actor, []).append((slot, action))
        return plan, errors, lost

    def step(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """Step every slot whose action is not None (None skips the slot: its result is
        None), one remote call per actor. An actor that fails or misses the deadline ends
        its episodes (terminated, reason ``error``). Raises
        :class:`~sweworld.env.pool.PoolError` for slots whose step raised (not reset,
        already ended), after the others stepped; ``ValueError`` for a wrong length."""
        with self._exclusive("step"):
            plan, errors, lost = self._step_plan(actions)
            return self._finish_step(plan, errors, lost, self._call("step", plan))

    async def astep(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """``step`` for an event loop."""
        with self._exclusive("astep"):
            plan, errors, lost = self._step_plan(actions)
            return self._finish_step(plan, errors, lost, await self._acall("step", plan))

    def _finish_step(
        self,
        plan: dict[int, list[Any]],
        errors: dict[int, BaseException],
        lost: dict[int, StepOutcome],
        replies: dict[int, Any],
    ) -> list[StepOutcome | None]:
        results: list[StepOutcome | None] = [None] * self.size
        for slot, outcome in lost.items():
            self.episodes[slot]._record(outcome)
            results[slot] = outcome
        for index, items in plan.items():
            reply = replies[index]
            for n, (slot, _) in enumerate(items):
                episode = self.episodes[slot]
                if isinstance(reply, BaseException):  # the actor is gone: the episode ends
                    outcome = _error_outcome(episode.id, episode.steps, str(reply))
                elif reply[n][0] == "ok":
                    outcome = reply[n][1]
                else:
                    errors[slot] = reply[n][1]
                    continue
                episode._record(outcome)
                results[slot] = outcome
        if errors:
            from sweworld.env.pool import PoolError

            raise PoolError("step", errors, results)
        return results

    # ------------------------------------------------------------------ rollouts

    def rollout(
        self,
        tasks: Sequence[Any],
        policy_factory: Callable[[], Any],
        *,
        max_steps: int | None = None,
    ) -> list[Any]:
        """Run a fresh policy (``policy_factory()``: ``reset(task, first_observation)``,
        ``act(observation) -> action | None``) on each task to the end, ``size`` episodes
        at a time; one :class:`~sweworld.env.pool.RolloutResult` per task, in order.

        The policies run here, the episodes in the actors (episodes of their own: the
        pool's slots are left as they are); each turn is one remote call per actor. A
        failure (a bad task row, a policy that raises, a lost actor) ends only its rollout,
        with reason ``error``.
        """
        with self._exclusive("rollout"):
            self._check_open()
            return self._rollout(list(tasks), policy_factory, max_steps)

    def _rollout(
        self, tasks: list[Any], policy_factory: Callable[[], Any], max_steps: int | None
    ) -> list[Any]:
        from sweworld.env.pool import RolloutResult

        results: list[Any] = [None] * len(tasks)
        pending = list(range(len(tasks)))[::-1]
        live: dict[str, _Rollout] = {}  # key -> rollout, at most ``size`` of them

        def fail(run: _Rollout, why: str) -> None:
            results[run.index] = RolloutResult(
                run.instance_id, run.total, "error", run.steps, "", None, run.info, run.end,
                why,
            )  # fmt: skip

        while pending or live:
            starting: dict[int, list[Any]] = {}
            while pending and len(live) < self.size:
                index = pending.pop()
                run = _Rollout(index, f"r{self._rollouts}", self._rollouts % self.n_actors)
                self._rollouts += 1
                try:
                    task = coerce_task(tasks[index])
                except ValueError as exc:
                    fail(run, f"{type(exc).__name__}: {exc}")
                    continue
                run.task, run.instance_id = task, task.instance_id
                starting.setdefault(run.actor, []).append((run.key, task, None, max_steps))
                live[run.key] = run
            replies = self._call("reset", starting)
            for index, items in starting.items():
                for n, (key, *_) in enumerate(items):
                    run, reply = live[key], replies[index]
                    status, value = ("error", reply) if isinstance(reply, Exception) else reply[n]
                    if status == "ok":
                        run.observation = value[0]
                        run.error = _guard(lambda r=run: r.start(policy_factory))
                    else:
                        run.error = f"{type(value).__name__}: {value}"
            self._rollout_turn(live, results, fail)
        return results

    def _rollout_turn(self, live: dict[str, _Rollout], results: list[Any], fail: Any) -> None:
        """One turn of every live rollout: its policy acts, the actors step (one call each)."""
        from sweworld.env.pool import RolloutResult

        stepping: dict[int, list[Any]] = {}
        stopping: dict[int, list[Any]] = {}
        for key, run in list(live.items()):
            action = None
            if run.error is None:
                run.error = _guard(lambda r=run: r.act())
                action = run.action
            if run.error is not None or action is None:
                stopping.setdefault(run.actor, []).append(key)
            else:
                stepping.setdefault(run.actor, []).append((key, action))
        replies = self._call("stop", stopping)
        for index, keys in stopping.items():
            for n, key in enumerate(keys):
                run, reply = live.pop(key), replies[index]
                value = reply if isinstance(reply, Exception) else reply[n][1]
                if run.error is None and isinstance(value, Exception):  # its patch is lost
                    run.error = f"{type(value).__name__}: {value}"
                patch, run.end = ("", None) if isinstance(value, Exception) else value
                if run.error is not None:
                    fail(run, run.error)
                else:
                    results[run.index] = RolloutResult(
                        run.instance_id, run.total, "policy_stopped", run.steps, patch or "",
                        None, run.info, run.end,
                    )  # fmt: skip
        replies = self._call("step", stepping)
        for index, items in stepping.items():
            for n, (key, _) in enumerate(items):
                run, reply = live[key], replies[index]
                if isinstance(reply, Exception) or reply[n][0] != "ok":
                    value = reply if isinstance(reply, Exception) else reply[n][1]
                    fail(live.pop(key), f"{type(value).__name__}: {value}")
                    continue
                outcome, end = reply[n][1]
                run.steps += 1
                run.total += outcome.reward
                run.observation, run.info = outcome.observation, outcome.info
                if end is not None:
                    live.pop(key)
                    info = outcome.info
                    results[run.index] = RolloutResult(
                        run.instance_id, run.total, info.get("reason"), run.steps,
                        info.get("patch") or "", end[1], info, end[0], info.get("error"),
                    )  # fmt: skip

    # ------------------------------------------------------------------ records, close

    def trajectory(self, slot: int) -> Any:
        """The data-schema trajectory of the episode in ``slot`` (fetched from its actor)."""
        import ray

        self._check_open()
        episode = self.episodes[slot]
        if episode.lost is not None or self._actors[episode.actor] is None:
            raise EpisodeError(f"slot {slot}: its actor is gone ({episode.lost})")
        return ray.get(
            self._actors[episode.actor].trajectory.remote(slot), timeout=self.call_timeout_s
        )

    def live_sessions(self) -> int:
        """Sessions open in all actors together (warm ones included)."""
        return sum(self._ask_all("live_sessions"))

    def warm_stats(self) -> list[dict[str, Any] | None]:
        """Each live actor's warm-session statistics (None where it keeps none)."""
        return self._ask_all("warm_stats")

    def _ask_all(self, method: str) -> list[Any]:
        import ray

        self._check_open()
        refs = [getattr(a, method).remote() for a in self._actors if a is not None]
        return ray.get(refs, timeout=self.call_timeout_s)

    def close(self) -> None:
        """Close every actor's episodes and sessions, then end the actors (idempotent): once
        it returns, no actor of this pool runs. Ray itself is left running."""
        if self._closed:
            return
        self._closed = True
        import ray

        actors = [a for a in self._actors if a is not None]
        self._actors = [None] * len(self._actors)
        if not actors:
            self._collect_leftovers()
            return
        refs = [a.close.remote() for a in actors]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
        if pending:
            log.warning("%d actor(s) did not close their sessions in time", len(pending))
        exits = [a.__ray_terminate__.remote() for a in actors]  # after close, in queue order
        ray.wait(exits, num_returns=len(exits), timeout=CLOSE_TIMEOUT_S)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._collect_leftovers()

    def _collect_leftovers(self) -> None:
        """Remove the session folders of actors that were killed (on this node; on other
        nodes the next session manager there removes them)."""
        import ray

        from sweworld.dirs import control_dir, runtime_dir
        from sweworld.sandbox.manager import gc_stale_sessions

        here = socket.gethostname()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S / 6
        for ref in self._whereabouts:  # wait for this node's actors to be gone
            try:
                host, pid = ray.get(ref, timeout=1.0)
            except Exception:  # an actor that never started holds no session
                continue
            while host == here and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
        root = self._manager_options.get("runtime_root") or runtime_dir()
        try:
            gc_stale_sessions(Path(root) / "sessions", control_dir())
        except OSError:
            log.debug("collecting stale sessions failed", exc_info=True)

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Rollout:
    """One rollout in flight: its policy and what the driver knows of its episode."""

    index: int
    key: str
    actor: int
    task: Any = None
    instance_id: str = ""
    policy: Any = None
    observation: str = ""
    action: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    total: float = 0.0
    steps: int = 0
    end: Any = None  # the trajectory, once known
    error: str | None = None

    def start(self, policy_factory: Callable[[], Any]) -> None:
        self.policy = policy_factory()
        self.policy.reset(self.task, self.observation)

    def act(self) -> None:
        self.action = self.policy.act(self.observation)


# ---------------------------------------------------------------------- helpers


def _guard(call: Callable[[], Any]) -> str | None:
    """None, or the error ``call`` raised (a policy's bug ends its rollout, not the pool)."""
    try:
        call()
    except Exception as exc:
        log.warning("a rollout's policy failed: %s: %s", type(exc).__name__, exc)
        return f"{type(exc).__name__}: {exc}"
    return None


def check_executor_spec(config: EpisodeConfig) -> None:
    """Refuse an executor spec that cannot work, in the driver (no model is loaded)."""
    spec = config.executor
    if spec in ("simulated", "hybrid"):
        from sweworld.models import check_lm_spec

        check_lm_spec(config.model)
        return
    from sweworld.sandbox.registry import executor_names

    if spec.partition(":")[0] not in executor_names() and "." not in spec:
        raise ValueError(f"unknown executor {spec!r}; known: {', '.join(executor_names())}")


def _manager_options(manager: Any) -> dict[str, Any]:
    if manager is None:
        return {}
    if isinstance(manager, Mapping):
        return dict(manager)
    options = {n: getattr(manager, n, None) for n in ("runtime_root", "checkout_root", "backend")}
    options = {k: v for k, v in options.items() if v is not None}
    if "runtime_root" not in options:
        raise TypeError(
            "manager must be SessionManager options (a mapping) or a SessionManager, "
            f"not {type(manager).__name__}"
        )
    return options


def _warm_options(warm: Any, n_actors: int) -> dict[str, Any] | None:
    """What each actor's WarmSessions is made with, from a template or a mapping."""
    if warm is None or isinstance(warm, Mapping):
        return dict(warm) if warm is not None else None
    if getattr(warm, "manager", None) is not None:
        raise ValueError(
            "warm: a WarmSessions bound to a manager holds live sessions of this process; "
            "give RayEnvPool an unbound one (WarmSessions(tasks=..., per_task=...)) as a "
            "template for its actors"
        )
    try:
        return {
            "per_task": warm.per_task,
            "memory_budget_mb": warm.memory_budget_bytes / (1024 * 1024) / n_actors,
            "refill": warm.refill,
        }
    except AttributeError:
        raise TypeError(
            f"warm must be a WarmSessions or a mapping of its options, not {type(warm).__name__}"
        ) from None


def _error_outcome(episode_id: str | None, steps: int, why: str) -> StepOutcome:
    info = {"episode_id": episode_id, "step": steps + 1, "reason": "error", "error": why}
    info.update(submitted=False, patch="", reward=None, steps=steps + 1)
    observation = f"sweworld: the environment failed ({why}); the episode ends."
    return StepOutcome(observation, 0.0, True, False, info)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:500] if text else type(exc).__name__
