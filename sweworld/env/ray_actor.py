"""The actors of :class:`~sweworld.env.ray_pool.RayEnvPool`: what runs in them, and the
driver's hold on them.

- :class:`EpisodeGroup` runs in an actor: one session manager, one executor, one rewarder and
  the episodes of the actor's slots; each call is a batch (one item per episode) stepped in
  threads. A plain class, usable in-process too.
- :class:`ActorSet` is the driver's side: it starts Ray when none runs, starts the actors
  (one per alive node by default, spread over the nodes), sends one call per actor with a
  deadline, kills an actor that fails or overruns (the next call starts a fresh one) and, on
  ``close``, ends the actors and collects the sessions of those that were killed.

The slots, episodes and rollouts the actors serve are :mod:`sweworld.env.ray_pool`'s. Ray
is imported inside functions only: importing this module does not need it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import Episode, EpisodeError
from sweworld.env.pool import session_config
from sweworld.env.workers import IdleThreadPool, idle_seconds
from sweworld.world import World, WorldConfig

__all__ = ["ActorSet", "EpisodeGroup", "check_executor_spec"]

log = logging.getLogger(__name__)

#: Seconds ``close`` waits for an actor to close its sessions before killing it.
CLOSE_TIMEOUT_S = 60.0


class EpisodeGroup:
    """The episodes of one actor (run as a Ray actor by :class:`ActorSet`; a plain class,
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
        from sweworld.sandbox.manager import SessionManager

        self.config = config
        self.name = name
        # the actor's own world, built from the same config as every other actor's
        remote = str(config.model).startswith(("openai:", "vllm:")) and lm is None
        self.world = World.for_episode(
            config,
            batch_lm=True,
            max_batch=max_batch,
            batch_wait_s=batch_wait_s,
            lm_concurrency=max(1, slots) if remote else 1,  # a server batches on its side
            manager=SessionManager(**dict(manager_options or {})),
            executor=executor,
            lm=lm,
        )
        self.manager = self.world.manager
        self.lm: Any = self.world.lm
        self.executor = self.world.executor
        self.rewarder = self.world.rewarder
        self.warm: Any = None
        if warm is not None:  # this actor's own warm sessions, as the template said
            from sweworld.env.warm import WarmSessions

            self.warm = WarmSessions(
                self.manager, executor=self.executor, config=session_config(config), **warm
            )
        self.episodes: dict[int | str, Episode] = {}
        self._threads = IdleThreadPool(  # threads idle for a while exit
            max(4, min(slots, 256)),
            idle_s=idle_seconds(),
            thread_name_prefix="sweworld-ray-episode",
        )

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
            self.world.close()  # the model, executor and rewarder it built
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


class ActorSet:
    """The driver's :class:`EpisodeGroup` actors: actor ``i`` holds slots ``i``,
    ``i + n``, ... of ``size`` (``n`` actors).

    The arguments are :class:`~sweworld.env.ray_pool.RayEnvPool`'s (see there). An
    executor spec that cannot work, manager or warm options that cannot cross processes,
    and actors that need more CPUs than the cluster has are refused here, before any actor
    starts. ``on_lost(index, why)`` is told when an actor is killed for failing or overrunning.
    """

    def __init__(
        self,
        config: EpisodeConfig,
        *,
        size: int,
        lm: Any,
        manager: Any,
        warm: Any,
        max_batch: int,
        batch_wait_s: float,
        address: str | None,
        n_actors: int | None,
        num_cpus: float,
        runtime_env: Mapping[str, Any] | None,
        ray_init: Mapping[str, Any] | None,
        on_lost: Callable[[int, str], None],
    ):
        executor = None if isinstance(config.executor, str) else config.executor
        if executor is None:
            check_executor_spec(config)
        self._manager_options = _manager_options(manager)
        self._on_lost = on_lost
        self.handles: list[Any] = []  # None where an actor was lost

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
        self.n = min(n_actors, size)
        cpus = ray.cluster_resources().get("CPU", 0.0)
        if self.n * num_cpus > cpus:  # the actors would wait for CPUs forever
            raise ValueError(
                f"{self.n} actors x num_cpus={num_cpus} need more CPUs than the Ray "
                f"cluster has ({cpus:g}); pass a smaller n_actors or num_cpus"
            )
        actor_options: dict[str, Any] = {"num_cpus": num_cpus, "scheduling_strategy": "SPREAD"}
        if runtime_env:
            actor_options["runtime_env"] = dict(runtime_env)
        self._actor_class = ray.remote(EpisodeGroup).options(**actor_options)
        self._actor_args = (config, self._manager_options, lm, executor)
        self._actor_kwargs = {
            "max_batch": max_batch,
            "batch_wait_s": batch_wait_s,
            "warm": _warm_options(warm, self.n),
        }
        self._size = size
        self._starts = 0
        self._whereabouts: list[Any] = []  # (host, pid) of every actor started
        self.handles = [self._start(i) for i in range(self.n)]

    def _start(self, index: int) -> Any:
        self._starts += 1
        actor = self._actor_class.remote(
            *self._actor_args,
            name=f"a{index}" if self._starts <= self.n else f"a{index}r{self._starts}",
            slots=len(range(index, self._size, self.n)),
            **self._actor_kwargs,
        )
        self._whereabouts.append(actor.where.remote())
        return actor

    def alive(self, index: int) -> bool:
        """Whether actor ``index`` is running (not lost since it was last used)."""
        return self.handles[index] is not None

    def _actor(self, index: int) -> Any:
        """Actor ``index``, started afresh when it was lost."""
        if self.handles[index] is None:
            self.handles[index] = self._start(index)
        return self.handles[index]

    def _lose(self, index: int, why: str) -> RuntimeError:
        """Kill actor ``index`` (it failed or overran); the error that stands for its reply."""
        import ray

        actor, self.handles[index] = self.handles[index], None
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._on_lost(index, why)
        return RuntimeError(why)

    def call(self, method: str, plan: Mapping[int, list[Any]], timeout_s: float) -> dict[int, Any]:
        """One remote call per actor in ``plan`` (actor index -> items), all within
        ``timeout_s``: each actor's reply, or the ``RuntimeError`` that stands for it (the
        actor failed or missed the deadline; it is then killed)."""
        import ray

        refs: dict[int, Any] = {}
        replies: dict[int, Any] = {}
        for index, items in plan.items():
            try:
                refs[index] = getattr(self._actor(index), method).remote(items)
            except Exception as exc:  # not serializable: this actor's reply, not the call's
                replies[index] = RuntimeError(f"actor {index}: the call could not be sent: {exc}")
        deadline = time.monotonic() + timeout_s
        for index, ref in refs.items():
            try:
                replies[index] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                replies[index] = self._lose(
                    index, f"actor {index} did not answer within {timeout_s:g} s"
                )
            except ray.exceptions.RayError as exc:
                replies[index] = self._lose(index, f"actor {index} failed: {_short(exc)}")
        return replies

    def ask(self, index: int, method: str, *args: Any, timeout_s: float) -> Any:
        """What live actor ``index``'s ``method(*args)`` returns (its error raised here)."""
        import ray

        return ray.get(getattr(self.handles[index], method).remote(*args), timeout=timeout_s)

    def ask_all(self, method: str, timeout_s: float) -> list[Any]:
        """``method()`` of every live actor, in order."""
        import ray

        refs = [getattr(a, method).remote() for a in self.handles if a is not None]
        return ray.get(refs, timeout=timeout_s)

    def close(self) -> None:
        """Close every actor's episodes and sessions, then end the actors: once it returns,
        none of them runs. Ray itself is left running."""
        import ray

        actors = [a for a in self.handles if a is not None]
        self.handles = [None] * len(self.handles)
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


def check_executor_spec(config: EpisodeConfig) -> None:
    """Refuse an executor or model spec that cannot work, in the driver (no model is
    loaded): :meth:`sweworld.world.WorldConfig.check`."""
    WorldConfig.from_episode(config).check()


def _manager_options(manager: Any) -> dict[str, Any]:
    """The SessionManager options an actor's manager is made with (a live one cannot cross
    processes: its options are copied)."""
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


def _short(exc: BaseException) -> str:
    """The last line of an error's text (a remote traceback's own message)."""
    text = str(exc).strip().splitlines()
    return text[-1][:500] if text else type(exc).__name__
