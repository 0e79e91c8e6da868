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
``reset`` of their slots starts a fresh actor. Bad input (a task row missing fields, actions
of the wrong length, ``step`` before ``reset`` or after the end) is refused in the driver
before anything is sent, with the exception the in-process pool raises.

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
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import (
    STEP_GRACE_S,
    Episode,
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
        self.episodes: dict[int, Episode] = {}
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(4, min(slots, 256)), thread_name_prefix="sweworld-ray-episode"
        )

    def _simulated_executor(self, lm: Any, max_batch: int, batch_wait_s: float, slots: int) -> Any:
        """The actor's SWT executor: one model (an endpoint client, or an embedded model on
        the slow path) whose requests from this actor's episodes are merged into batches."""
        from sweworld.env.batching import BatchingLM
        from sweworld.models import make_lm
        from sweworld.sandbox.registry import make_executor

        config = self.config
        model = make_lm(lm if lm is not None else config.model)
        remote = isinstance(config.model, str) and config.model.startswith(("openai:", "vllm:"))
        self.lm = BatchingLM(
            model,
            max_batch=max_batch,
            batch_wait_s=batch_wait_s,
            max_concurrent=max(1, slots) if remote and lm is None else 1,
            timeout_s=2 * config.step_timeout_s,
        )
        return make_executor(
            config.executor,
            lm=self.lm,
            mode=config.mode,
            step_timeout=config.step_timeout_s,
            seed=config.seed,
        )

    def _episode(self, slot: int) -> Episode:
        episode = self.episodes.get(slot)
        if episode is None:
            episode = Episode(
                config=self.config,
                manager=self.manager,
                executor=self.executor,
                rewarder=self.rewarder,
            )
            episode.id = f"{self.name}.{episode.id}"  # unique across the pool's actors
            self.episodes[slot] = episode
        return episode

    def _run_all(self, calls: list[Callable[[], Any]]) -> list[tuple[str, Any]]:
        def guarded(call: Callable[[], Any]) -> tuple[str, Any]:
            try:
                return "ok", call()
            except Exception as exc:  # sent back per item; one bad slot spares the others
                return "error", _portable(exc)

        if len(calls) == 1:
            return [guarded(calls[0])]
        return list(self._threads.map(guarded, calls))

    def reset(self, items: Sequence[tuple[int, Any, int | None]]) -> list[tuple[str, Any]]:
        """Reset the episodes of the given slots: ``(prompt, info)`` per item."""
        calls = [
            (lambda s=slot, t=task, d=seed: self._episode(s).reset(t, seed=d))
            for slot, task, seed in items
        ]
        return self._run_all(calls)

    def step(self, items: Sequence[tuple[int, Any]]) -> list[tuple[str, Any]]:
        """Step the episodes of the given slots: a :class:`StepOutcome` per item."""
        calls = [(lambda s=slot, a=action: self._episode(s).step(a)) for slot, action in items]
        return self._run_all(calls)

    def trajectory(self, slot: int) -> Any:
        """The data-schema trajectory of a slot's episode."""
        episode = self.episodes.get(slot)
        if episode is None:
            raise EpisodeError(f"slot {slot}: no episode has started")
        return episode.trajectory()

    def live_sessions(self) -> int:
        """How many sessions this actor's manager holds open."""
        return len(self.manager.sessions)

    def sessions_dir(self) -> str:
        return str(self.manager.sessions_dir)

    def close(self) -> int:
        """Close every episode, the rewarder and the manager; the sessions left (0)."""
        for episode in self.episodes.values():
            try:
                episode.close()
            except Exception:
                log.exception("closing episode %s failed", episode.id)
        self.episodes.clear()
        try:
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
    """The driver's view of an episode held by an actor (what ``pool.episodes`` lists).

    It mirrors the read-only state of an :class:`~sweworld.env.episode.Episode` (``id``,
    ``steps``, ``reason``, ``done``, ``patch``, ``reward``), updated from each outcome;
    ``trajectory()`` fetches the record from the actor.
    """

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
    lost: str | None = None  # why the actor holding it is gone

    @property
    def done(self) -> bool:
        return self.reason is not None

    def trajectory(self) -> Any:
        """The episode as a data-schema trajectory (fetched from its actor)."""
        return self.pool.trajectory(self.slot)

    def _reset(self, info: Mapping[str, Any]) -> None:
        self.id = info.get("episode_id")
        self.instance_id = info.get("instance_id")
        self.steps, self.reason, self.patch, self.reward = 0, None, None, 0.0
        self.started, self.lost = True, None

    def _record(self, outcome: StepOutcome) -> None:
        self.steps = outcome.info.get("step", self.steps + 1)
        self.reward += outcome.reward
        if outcome.terminated or outcome.truncated:
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
        warm: not supported on Ray (each actor opens its own sessions); must be None.
        max_batch, batch_wait_s: accepted for API parity; batching happens at the model
            endpoint (vLLM batches the requests of all actors).
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
        if warm is not None:
            raise ValueError(
                "warm sessions live in one process; RayEnvPool's actors open their own "
                "sessions (pass warm=None)"
            )
        config = config or EpisodeConfig()
        lm_object = None
        if isinstance(lm, str):
            overrides.setdefault("model", lm)
        elif lm is not None:
            lm_object = lm
        self.config = config.replace(**overrides) if overrides else config
        executor = self.config.executor
        executor_object = None if isinstance(executor, str) else executor
        if executor_object is None:
            build_executor_check(self.config)
        self.size = size
        self.max_batch, self.batch_wait_s = max_batch, batch_wait_s
        self.call_timeout_s = call_timeout_s or (
            2 * self.config.step_timeout_s + STEP_GRACE_S + REWARD_ALLOWANCE_S + CALL_GRACE_S
        )
        self._manager_options = _manager_options(manager)
        self._closed = False

        import ray

        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
                "configure_logging": True,
            }
            if address is None:
                options["num_cpus"] = max(2, int(num_cpus * min(size, 2)))
            else:
                options["address"] = address
            options.update(ray_init or {})
            ray.init(**options)
        if n_actors is None:
            alive = [node for node in ray.nodes() if node.get("Alive")]
            n_actors = max(1, len(alive))
        if not isinstance(n_actors, int) or n_actors < 1:
            raise ValueError(f"n_actors must be a positive integer, got {n_actors!r}")
        self.n_actors = min(n_actors, size)
        actor_options: dict[str, Any] = {"num_cpus": num_cpus, "scheduling_strategy": "SPREAD"}
        if runtime_env:
            actor_options["runtime_env"] = dict(runtime_env)
        self._actor_class = ray.remote(EpisodeGroup).options(**actor_options)
        self._actor_args = (self.config, self._manager_options, lm_object, executor_object)
        self._starts = 0
        self._actors: list[Any] = [self._start_actor(i) for i in range(self.n_actors)]
        self.episodes: list[RemoteEpisode] = [
            RemoteEpisode(slot=i, actor=i % self.n_actors, pool=self) for i in range(size)
        ]

    # ------------------------------------------------------------------ actors

    def _start_actor(self, index: int) -> Any:
        self._starts += 1
        return self._actor_class.remote(
            *self._actor_args,
            name=f"a{index}" if self._starts <= self.n_actors else f"a{index}r{self._starts}",
            max_batch=self.max_batch,
            batch_wait_s=self.batch_wait_s,
            slots=len(range(index, self.size, self.n_actors)),
        )

    def _lose_actor(self, index: int, why: str) -> None:
        """Kill actor ``index`` (it failed or overran) and mark its episodes lost."""
        import ray

        actor, self._actors[index] = self._actors[index], None
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                log.debug("killing actor %d failed", index, exc_info=True)
        for episode in self.episodes:
            if episode.actor == index and episode.started and not episode.done:
                episode.lost = why

    # ------------------------------------------------------------------ checks

    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeError("the pool is closed")

    def _check_length(self, name: str, values: Sequence[Any]) -> None:
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise TypeError(f"{name} must be a sequence with one item per slot")
        if len(values) != self.size:
            raise ValueError(f"{name} has {len(values)} items; the pool has {self.size} slots")

    def _reset_plan(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None
    ) -> dict[int, list[tuple[int, Any, int | None]]]:
        self._check_open()
        self._check_length("tasks", tasks)
        if seeds is not None:
            self._check_length("seeds", seeds)
        coerced = []
        for slot, task in enumerate(tasks):
            if task is None:
                raise EpisodeError(f"slot {slot}: reset needs a task")
            try:
                coerced.append(coerce_task(task))
            except ValueError as exc:
                raise ValueError(f"slot {slot}: {exc}") from exc
        plan: dict[int, list[tuple[int, Any, int | None]]] = {}
        for slot, task in enumerate(coerced):
            seed = seeds[slot] if seeds is not None else None
            plan.setdefault(slot % self.n_actors, []).append((slot, task, seed))
        for index in plan:
            if self._actors[index] is None:  # lost earlier: its slots start on a fresh actor
                self._actors[index] = self._start_actor(index)
        return plan

    def _step_plan(
        self, actions: Sequence[Any | None]
    ) -> tuple[dict[int, list[tuple[int, Any]]], dict[int, StepOutcome]]:
        self._check_open()
        self._check_length("actions", actions)
        plan: dict[int, list[tuple[int, Any]]] = {}
        lost: dict[int, StepOutcome] = {}
        for slot, action in enumerate(actions):
            if action is None:
                continue
            episode = self.episodes[slot]
            if not episode.started:
                raise EpisodeError(f"slot {slot}: call reset() before step()")
            if episode.done:
                raise EpisodeFinished(
                    f"slot {slot}: episode ended ({episode.reason}); reset it or pass None"
                )
        for slot, action in enumerate(actions):
            if action is None:
                continue
            episode = self.episodes[slot]
            if episode.lost is not None or self._actors[episode.actor] is None:
                lost[slot] = _error_outcome(episode, episode.lost or "its actor is gone")
            else:
                plan.setdefault(episode.actor, []).append((slot, action))
        return plan, lost

    # ------------------------------------------------------------------ reset

    def reset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Start an episode in every slot: ``tasks[i]`` (a Task or a task row) in slot ``i``.

        Returns ``(prompt, info)`` per slot. Raises ``ValueError`` for a task row that is not
        one (naming the slot and the field) before anything is sent, and re-raises what an
        actor's reset raised (a repository that cannot be found, ...).
        """
        plan = self._reset_plan(tasks, seeds)
        refs = {i: self._actors[i].reset.remote(items) for i, items in plan.items()}
        return self._finish_reset(plan, self._collect(refs))

    async def areset(
        self, tasks: Sequence[Any], seeds: Sequence[int | None] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """``reset`` for an event loop (awaits the actors without blocking the loop)."""
        plan = self._reset_plan(tasks, seeds)
        refs = {i: self._actors[i].reset.remote(items) for i, items in plan.items()}
        return self._finish_reset(plan, await self._acollect(refs))

    def _finish_reset(
        self, plan: dict[int, list[tuple[int, Any, int | None]]], replies: dict[int, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        results: list[Any] = [None] * self.size
        first_error: BaseException | None = None
        for index, items in plan.items():
            reply = replies[index]
            if isinstance(reply, BaseException):
                self._lose_actor(index, str(reply))
                for slot, _, _ in items:
                    self.episodes[slot].started = False
                first_error = first_error or EpisodeError(f"actor {index}: {reply}")
                continue
            for (slot, _, _), (status, value) in zip(items, reply, strict=True):
                if status == "ok":
                    self.episodes[slot]._reset(value[1])
                    results[slot] = value
                else:
                    self.episodes[slot].started = False
                    first_error = first_error or _with_slot(value, slot)
        if first_error is not None:
            raise first_error
        return results

    # ------------------------------------------------------------------ step

    def step(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """Step every slot whose action is not None (None skips the slot: its result is
        None). One remote call per actor. Raises :class:`EpisodeError` for a slot not reset,
        :class:`EpisodeFinished` for a slot whose episode ended, ``ValueError`` when
        ``actions`` does not have one item per slot: all before anything runs."""
        plan, lost = self._step_plan(actions)
        refs = {i: self._actors[i].step.remote(items) for i, items in plan.items()}
        return self._finish_step(plan, lost, self._collect(refs))

    async def astep(self, actions: Sequence[Any | None]) -> list[StepOutcome | None]:
        """``step`` for an event loop."""
        plan, lost = self._step_plan(actions)
        refs = {i: self._actors[i].step.remote(items) for i, items in plan.items()}
        return self._finish_step(plan, lost, await self._acollect(refs))

    def _finish_step(
        self,
        plan: dict[int, list[tuple[int, Any]]],
        lost: dict[int, StepOutcome],
        replies: dict[int, Any],
    ) -> list[StepOutcome | None]:
        results: list[StepOutcome | None] = [None] * self.size
        for slot, outcome in lost.items():
            results[slot] = outcome
            self.episodes[slot]._record(outcome)
        for index, items in plan.items():
            reply = replies[index]
            if isinstance(reply, BaseException):
                self._lose_actor(index, f"the actor failed: {reply}")
                reply = [("error", reply)] * len(items)
            for (slot, _), (status, value) in zip(items, reply, strict=True):
                episode = self.episodes[slot]
                if status == "ok":
                    outcome = value
                else:
                    outcome = _error_outcome(episode, f"{type(value).__name__}: {value}")
                episode._record(outcome)
                results[slot] = outcome
        return results

    # ------------------------------------------------------------------ waiting

    def _collect(self, refs: dict[int, Any]) -> dict[int, Any]:
        """Each actor's reply, or the exception that stands for it (failure, deadline)."""
        import ray

        replies: dict[int, Any] = {}
        deadline = time.monotonic() + self.call_timeout_s
        for index, ref in refs.items():
            left = max(0.0, deadline - time.monotonic())
            try:
                replies[index] = ray.get(ref, timeout=left)
            except ray.exceptions.GetTimeoutError:
                replies[index] = TimeoutError(
                    f"actor {index} did not answer within {self.call_timeout_s:.0f} s"
                )
            except ray.exceptions.RayError as exc:
                replies[index] = RuntimeError(f"actor {index} failed: {_short(exc)}")
        return replies

    async def _acollect(self, refs: dict[int, Any]) -> dict[int, Any]:
        import ray

        async def one(index: int, ref: Any) -> Any:
            try:
                return await asyncio.wait_for(ref, self.call_timeout_s)
            except asyncio.TimeoutError:
                return TimeoutError(
                    f"actor {index} did not answer within {self.call_timeout_s:.0f} s"
                )
            except ray.exceptions.RayError as exc:
                return RuntimeError(f"actor {index} failed: {_short(exc)}")

        values = await asyncio.gather(*(one(i, ref) for i, ref in refs.items()))
        return dict(zip(refs, values, strict=True))

    # ------------------------------------------------------------------ rollouts, records

    def rollout(
        self,
        tasks: Sequence[Any],
        policy_factory: Callable[..., Any],
        *,
        max_steps: int | None = None,
    ) -> list[Any]:
        """Run one episode per slot to its end, the policies in this process."""
        from sweworld.env.pool import run_rollout

        return run_rollout(self, tasks, policy_factory, max_steps=max_steps)

    def trajectory(self, slot: int) -> Any:
        """The data-schema trajectory of the episode in ``slot`` (fetched from its actor)."""
        import ray

        self._check_open()
        actor = self._actors[self.episodes[slot].actor]
        if actor is None:
            raise EpisodeError(f"slot {slot}: its actor is gone ({self.episodes[slot].lost})")
        return ray.get(actor.trajectory.remote(slot), timeout=self.call_timeout_s)

    def live_sessions(self) -> int:
        """Sessions open in all actors together."""
        import ray

        self._check_open()
        refs = [a.live_sessions.remote() for a in self._actors if a is not None]
        return sum(ray.get(refs, timeout=self.call_timeout_s))

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Close every actor's episodes and sessions, then kill the actors."""
        if self._closed:
            return
        self._closed = True
        import ray

        actors = [a for a in self._actors if a is not None]
        self._actors = [None] * len(self._actors)
        refs = [a.close.remote() for a in actors]
        if refs:
            ready, pending = ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            if pending:
                log.warning("%d actor(s) did not close in time; killing them", len(pending))
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as exc:
                    log.warning("an actor failed to close: %s", _short(exc))
        # Let each actor exit (its queue is empty now), wait for it, then kill what is left:
        # after close() returns, no actor of this pool runs.
        exits = [a.__ray_terminate__.remote() for a in actors]
        if exits:
            ray.wait(exits, num_returns=len(exits), timeout=CLOSE_TIMEOUT_S)
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                log.debug("killing an actor failed", exc_info=True)

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------- helpers


def build_executor_check(config: EpisodeConfig) -> None:
    """Refuse an executor spec that cannot work, in the driver (models are not loaded)."""
    spec = config.executor
    if spec in ("simulated", "hybrid"):
        from sweworld.models import check_lm_spec

        check_lm_spec(config.model)
        return
    from sweworld.sandbox.registry import executor_names

    name = spec.partition(":")[0]
    if name not in executor_names() and "." not in spec:
        raise ValueError(f"unknown executor {spec!r}; known: {', '.join(executor_names())}")


def _manager_options(manager: Any) -> dict[str, Any]:
    if manager is None:
        return {}
    if isinstance(manager, Mapping):
        return dict(manager)
    options: dict[str, Any] = {}
    for name in ("runtime_root", "checkout_root"):
        value = getattr(manager, name, None)
        if value is not None:
            options[name] = Path(value)
    backend = getattr(manager, "backend", None)
    if isinstance(backend, str):
        options["backend"] = backend
    if not options:
        raise TypeError(
            f"manager must be SessionManager options (a mapping) or a SessionManager, "
            f"not {type(manager).__name__}"
        )
    return options


def _error_outcome(episode: RemoteEpisode, why: str) -> StepOutcome:
    info = {
        "episode_id": episode.id,
        "step": episode.steps + 1,
        "reason": "error",
        "error": why,
        "submitted": False,
        "patch": "",
        "reward": None,
    }
    observation = f"sweworld: the environment failed ({why}); the episode ends."
    return StepOutcome(observation, 0.0, True, False, info)


def _with_slot(exc: BaseException, slot: int) -> BaseException:
    with contextlib.suppress(Exception):  # add_note needs a real exception instance
        exc.add_note(f"(slot {slot})")
    return exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:500] if text else type(exc).__name__
