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

The actors (what runs in them, and how the driver starts, calls and ends them) are in
:mod:`sweworld.env.ray_actor`; this module holds the pool's slots, episodes and rollouts.
Ray is imported only when a pool is made: ``sweworld.env`` imports without it.

>>> from sweworld.env.ray_pool import RayEnvPool                    # doctest: +SKIP
>>> with RayEnvPool(size=8, executor="simulated", model="openai:http://vllm:8000/v1#swt",
...                 reward="real", address="auto") as pool:
...     results = pool.rollout(tasks, make_policy)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import (
    STEP_GRACE_S,
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
    coerce_task,
)
from sweworld.env.pool import PoolError, SlotPool
from sweworld.env.ray_actor import ActorSet, EpisodeGroup
from sweworld.env.rollouts import (
    POLICY_THREADS,
    POLICY_TIMEOUT_S,
    RolloutResult,
    check_policy_timeout,
    run_policy_calls,
)
from sweworld.env.workers import IdleThreadPool, idle_seconds

__all__ = ["EpisodeGroup", "RayEnvPool", "RemoteEpisode"]

log = logging.getLogger(__name__)

#: Seconds added to a remote call's deadline beyond the step's own backstop and the reward.
CALL_GRACE_S = 60.0
#: What the real reward may take on top of a step (its test run's deadline).
REWARD_ALLOWANCE_S = 1800.0


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


class RayEnvPool(SlotPool):
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
        policy_timeout_s: deadline of one policy call in :meth:`rollout` (the policies of a
            turn run at once on driver threads; one past it ends its rollout with reason
            ``error``); None: none.
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
        policy_timeout_s: float | None = POLICY_TIMEOUT_S,
        **overrides: Any,
    ):
        super().__init__(size)
        self.policy_timeout_s = check_policy_timeout(policy_timeout_s)
        if n_actors is not None and (not isinstance(n_actors, int) or n_actors < 1):
            raise ValueError(f"n_actors must be a positive integer, got {n_actors!r}")
        config = config or EpisodeConfig()
        if isinstance(lm, str):
            overrides.setdefault("model", lm)
            lm = None
        self.config = config.replace(**overrides) if overrides else config
        if self.config.world:
            raise ValueError(
                "RayEnvPool runs episodes in Ray actors; for episodes on a world service "
                "use EnvPool(world=...)"
            )
        self.max_batch, self.batch_wait_s = max_batch, batch_wait_s
        self.call_timeout_s = call_timeout_s or (
            2 * self.config.step_timeout_s + STEP_GRACE_S + REWARD_ALLOWANCE_S + CALL_GRACE_S
        )
        self._busy = threading.Lock()
        self._actors = ActorSet(
            self.config,
            size=size,
            lm=lm,
            manager=manager,
            warm=warm,
            max_batch=max_batch,
            batch_wait_s=batch_wait_s,
            address=address,
            n_actors=n_actors,
            num_cpus=num_cpus,
            runtime_env=runtime_env,
            ray_init=ray_init,
            on_lost=self._mark_lost,
        )
        self.n_actors = self._actors.n
        self._rollouts = 0
        self._policy_threads = IdleThreadPool(  # policy calls, each with a deadline
            POLICY_THREADS, idle_s=idle_seconds(), thread_name_prefix="sweworld-policy"
        )
        self.episodes: list[RemoteEpisode] = [
            RemoteEpisode(slot=i, actor=i % self.n_actors, pool=self) for i in range(size)
        ]

    def __repr__(self) -> str:
        return (
            f"<RayEnvPool size={self.size} actors={self.n_actors} executor={self.config.executor}>"
        )

    # ------------------------------------------------------------------ actors

    def _mark_lost(self, index: int, why: str) -> None:
        """Actor ``index`` was killed (it failed or overran): its live episodes are lost."""
        for episode in self.episodes:
            if episode.actor == index and episode.started and not episode.done:
                episode.lost = why

    def _call(self, method: str, plan: dict[int, list[Any]]) -> dict[int, Any]:
        """One remote call per actor in ``plan``; each actor's reply, or the exception
        that stands for it (the actor failed or missed the deadline; it is then killed)."""
        return self._actors.call(method, plan, self.call_timeout_s)

    async def _acall(self, method: str, plan: dict[int, list[Any]]) -> dict[int, Any]:
        """``_call`` for an event loop (its waiting done in a worker thread)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._call, method, plan)

    # ------------------------------------------------------------------ reset

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
            elif (why := _unsendable(action)) is not None:
                errors[slot] = TypeError(f"slot {slot}: {why}")
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
                    else:
                        run.error = f"{type(value).__name__}: {value}"
            fresh = sorted(
                (live[key] for items in starting.values() for key, *_ in items),
                key=lambda r: r.index,
            )
            for run in fresh:  # in task order (the factory's calls keep their order)
                if run.error is None:
                    self._policy_calls([run], lambda r: r.start(policy_factory), "reset()")
            self._rollout_turn(live, results, fail)
        return results

    def _rollout_turn(self, live: dict[str, _Rollout], results: list[Any], fail: Any) -> None:
        """One turn of every live rollout: its policy acts, the actors step (one call each)."""
        stepping: dict[int, list[Any]] = {}
        stopping: dict[int, list[Any]] = {}
        self._policy_calls([r for r in live.values() if r.error is None], _Rollout.act, "act()")
        for key, run in list(live.items()):
            action = None
            if run.error is None:
                action = run.action
                if run.error is None and action is not None:
                    run.error = _unsendable(action)
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
        self._check_open()
        episode = self.episodes[slot]
        if episode.lost is not None or not self._actors.alive(episode.actor):
            raise EpisodeError(f"slot {slot}: its actor is gone ({episode.lost})")
        return self._actors.ask(episode.actor, "trajectory", slot, timeout_s=self.call_timeout_s)

    def live_sessions(self) -> int:
        """Sessions open in all actors together (warm ones included)."""
        return sum(self._ask_all("live_sessions"))

    def warm_stats(self) -> list[dict[str, Any] | None]:
        """Each live actor's warm-session statistics (None where it keeps none)."""
        return self._ask_all("warm_stats")

    def _ask_all(self, method: str) -> list[Any]:
        self._check_open()
        return self._actors.ask_all(method, self.call_timeout_s)

    def _policy_calls(
        self, runs: list[_Rollout], call: Callable[[_Rollout], Any], what: str
    ) -> None:
        """``call(run)`` for every run at once, within ``policy_timeout_s``; a call that
        raised or did not return in time sets its run's ``error``."""
        run_policy_calls(self._policy_threads, runs, call, what, self.policy_timeout_s, _guard)

    def close(self) -> None:
        """Close every actor's episodes and sessions, then end the actors (idempotent): once
        it returns, no actor of this pool runs. Ray itself is left running."""
        if self._closed:
            return
        self._closed = True
        self._policy_threads.shutdown(wait=False, cancel_futures=True)
        self._actors.close()


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


def _unsendable(action: Any) -> str | None:
    """Why ``action`` cannot be sent to an actor (Ray could not serialize it), or None.
    Checked per slot in the driver: one such action fails its own slot, not the whole call
    (whose other actors would have stepped with their outcomes lost)."""
    if isinstance(action, str):
        return None
    import ray.cloudpickle

    try:
        ray.cloudpickle.dumps(action)
    except Exception as exc:
        return f"the action cannot be sent to its actor ({type(exc).__name__}: {exc})"[:500]
    return None


def _guard(call: Callable[[], Any]) -> str | None:
    """None, or the error ``call`` raised (a policy's bug ends its rollout, not the pool)."""
    try:
        call()
    except Exception as exc:
        log.warning("a rollout's policy failed: %s: %s", type(exc).__name__, exc)
        return f"{type(exc).__name__}: {exc}"
    return None


def _error_outcome(episode_id: str | None, steps: int, why: str) -> StepOutcome:
    info = {"episode_id": episode_id, "step": steps + 1, "reason": "error", "error": why}
    info.update(submitted=False, patch="", reward=None, steps=steps + 1)
    observation = f"sweworld: the environment failed ({why}); the episode ends."
    return StepOutcome(observation, 0.0, True, False, info)
