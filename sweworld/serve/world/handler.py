"""The world service's handler: episodes by id, their owners, quotas, idle expiry, deadlines.

:class:`WorldHandler` holds every live episode of the service under a random id and the
owner (a token's :func:`~sweworld.serve.world.auth.owner_id`) that created it. Episodes
share ONE session manager, executor and rewarder (as :class:`~sweworld.env.EnvPool` does;
a simulated executor's model is wrapped in one :class:`~sweworld.env.BatchingLM`, so the
model calls of concurrent episodes are batched). Every blocking call runs on the handler's
own thread pool, never on the event loop.

Rules (the statuses are :class:`WorldError`'s, rendered by :mod:`~sweworld.serve.world.app`):

- an episode of another owner answers **404**, exactly as an id that does not exist (the
  service never tells a client which ids exist);
- one call at a time per episode: a second one while the first runs is **409** ``busy``
  (so is any call while a step that passed its deadline is still running); a step after
  the end is **409** ``finished``;
- a call that passes its deadline answers **504**; the call itself goes on in its thread
  and the episode stays consistent (it is busy until the call ends). A client that
  disconnects mid-step changes nothing either: the step completes;
- quotas per owner: live episodes (ended ones count until deleted or expired), episodes
  created per minute (create, fork, reset), steps per minute: **429** with ``Retry-After``;
- an episode idle longer than ``idle_timeout_s`` (no call) is closed by :meth:`reap`;
- while draining (shutdown) new calls get **503**; :meth:`drain` waits for calls in
  flight, then closes every episode and the shared parts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sweworld.env import Episode, EpisodeBusy, EpisodeConfig, EpisodeError, EpisodeFinished
from sweworld.serve.world import schemas as s
from sweworld.serve.world.auth import RateWindow
from sweworld.serve.world.config import WorldConfig

__all__ = ["CLIENT_KEYS", "WorldConfig", "WorldError", "WorldHandler"]

log = logging.getLogger(__name__)

#: EpisodeConfig fields a client may never set unless the server allows it: they choose
#: code (a dotted-path executor class) or models on the server.
GUARDED_KEYS = frozenset({"executor", "model", "swr_model"})
#: The fields that decide which executor and rewarder an episode needs; episodes with the
#: same values share them (a small, bounded set of combinations).
COMPONENT_KEYS = ("executor", "model", "mode", "reward", "reward_preset", "swr_stages", "swr_model")
#: Every override a client may send (GUARDED_KEYS only with ``allow_config_executor``).
CLIENT_KEYS = frozenset(EpisodeConfig.__dataclass_fields__) - {"extra", "world", "world_token"}
#: Most distinct executor/rewarder combinations the service keeps.
MAX_COMPONENTS = 8


class WorldError(Exception):
    """A request the service answers with an error status and an :class:`ErrorBody`."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        episode_id: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.body = s.ErrorBody(error=error, message=message, episode_id=episode_id)
        self.headers = headers or {}


def _quota(what: str, retry_after: float) -> WorldError:
    wait = max(1, math.ceil(retry_after))
    headers = {"Retry-After": str(wait)}
    return WorldError(429, "quota", f"{what}; retry in {wait} s", headers=headers)


@dataclass
class _Record:
    """One live episode of the service."""

    id: str
    owner: str
    episode: Episode
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False


@dataclass
class _Owner:
    steps: RateWindow
    creates: RateWindow


class WorldHandler:
    """The service's episodes and the calls on them (see the module docstring).

    Args:
        config: the service's :class:`WorldConfig`.
        manager: a session manager to share (one is made under ``runtime_root`` otherwise,
            and closed by :meth:`drain`).
        metrics: a metrics object (``episode_opened``, ``step_done``, ...; made otherwise).
    """

    def __init__(self, config: WorldConfig, *, manager: Any = None, metrics: Any = None):
        self.config = config
        if metrics is None:
            from sweworld.serve.world.metrics import Metrics

            metrics = Metrics()
        self.metrics = metrics
        self.started = time.monotonic()
        self._own_manager = manager is None
        if manager is None:
            from pathlib import Path

            from sweworld.sandbox.manager import SessionManager

            root = Path(config.runtime_root) if config.runtime_root else None
            manager = SessionManager(runtime_root=root)
        self.manager = manager
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._records: dict[str, _Record] = {}
        self._owners: dict[str, _Owner] = {}
        self._reserved: dict[str, int] = {}  # creations in progress per owner
        self._components: dict[tuple, tuple[Any, Any, Any]] = {}  # key -> (lm, executor, rewarder)
        self._in_flight = 0
        self.draining = False
        self._closed = False
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.workers, thread_name_prefix="sweworld-world"
        )
        self._tasks: dict[str, Any] | None = None
        if config.tasks:
            from sweworld.tasks import load_tasks

            self._tasks = {task.instance_id: task for task in load_tasks(config.tasks)}

    # ------------------------------------------------------------------ shared parts

    def _component(self, config: EpisodeConfig) -> tuple[Any, Any]:
        """The executor and rewarder shared by every episode with ``config``'s component
        keys (built once, on a worker thread)."""
        from sweworld.env.pool import build_pool_executor
        from sweworld.env.rewards import EpisodeRewarder

        key = tuple(
            json.dumps(getattr(config, k), sort_keys=True, default=str) for k in COMPONENT_KEYS
        )
        with self._lock:
            found = self._components.get(key)
            if found is None and len(self._components) >= MAX_COMPONENTS:
                raise WorldError(422, "too_many_configs", "too many distinct episode configs")
        if found is not None:
            return found[1], found[2]
        lm = None
        if config.executor in ("simulated", "hybrid"):
            from sweworld.env.batching import BatchingLM
            from sweworld.models import check_lm_spec, make_lm

            check_lm_spec(config.model)
            lm = BatchingLM(make_lm(config.model))
        executor = build_pool_executor(config, lm)
        rewarder = EpisodeRewarder(config, manager=self.manager)
        with self._lock:
            if key in self._components:  # built twice at once: keep the first
                _close_parts(rewarder, executor, lm)
                return self._components[key][1], self._components[key][2]
            self._components[key] = (lm, executor, rewarder)
        return executor, rewarder

    def _episode_config(self, overrides: dict[str, Any]) -> EpisodeConfig:
        unknown = sorted(set(overrides) - CLIENT_KEYS)
        if unknown:
            raise WorldError(422, "invalid", f"config: unknown or refused option(s) {unknown}")
        defaults = self.config.episode
        guarded = sorted(
            key for key in GUARDED_KEYS & set(overrides)
            if overrides[key] != getattr(defaults, key)  # the server's own value is fine
        )  # fmt: skip
        if guarded and not self.config.allow_config_executor:
            raise WorldError(
                422, "refused",
                f"config: {guarded} may not be set by clients on this server "
                "(it runs with the executor and models it was started with)",
            )  # fmt: skip
        try:
            return self.config.episode.replace(**overrides) if overrides else self.config.episode
        except (ValueError, TypeError) as exc:
            raise WorldError(422, "invalid", f"config: {exc}") from None

    def _task(self, task: dict[str, Any] | None, instance_id: str | None) -> Any:
        from sweworld.env import coerce_task

        if (task is None) == (instance_id is None):
            raise WorldError(422, "invalid", "give exactly one of task (a row) or instance_id")
        if instance_id is not None:
            found = (self._tasks or {}).get(instance_id)
            if found is None:
                raise WorldError(404, "unknown_task", f"this server has no task {instance_id!r}")
            return found
        try:
            return coerce_task(task)
        except ValueError as exc:  # TaskValidationError names the field
            raise WorldError(422, "invalid_task", f"task: {exc}") from None

    # ------------------------------------------------------------------ bookkeeping

    def _owner(self, owner: str) -> _Owner:
        found = self._owners.get(owner)
        if found is None:
            cfg = self.config
            found = self._owners[owner] = _Owner(
                RateWindow(cfg.max_steps_per_minute), RateWindow(cfg.max_creates_per_minute)
            )
        return found

    def _check_open(self) -> None:
        if self.draining or self._closed:
            raise WorldError(503, "draining", "the service is shutting down")

    def _reserve(self, owner: str) -> None:
        """Hold one live-episode slot of ``owner`` (429 when none is left)."""
        with self._lock:
            self._check_open()
            live = sum(r.owner == owner for r in self._records.values())
            live += self._reserved.get(owner, 0)
            if live >= self.config.max_episodes_per_token:
                raise _quota(
                    f"this token holds {live} episodes, the most allowed "
                    f"(delete some or wait for idle ones to expire)",
                    self.config.reap_interval_s,
                )
            wait = self._owner(owner).creates.take()
            if wait is not None:
                raise _quota("too many episodes created in the last minute", wait)
            self._reserved[owner] = self._reserved.get(owner, 0) + 1

    def _unreserve(self, owner: str) -> None:
        with self._lock:
            self._reserved[owner] -= 1

    def _get(self, owner: str, episode_id: str) -> _Record:
        record = self._records.get(episode_id)
        if record is None or not secrets.compare_digest(record.owner, owner):
            raise WorldError(404, "not_found", f"no episode {episode_id!r}", episode_id)
        return record

    async def _call(
        self,
        owner: str,
        episode_id: str,
        fn: Callable[[_Record], Any],
        *,
        deadline: float | Callable[[_Record], float] | None = None,
        exclusive: bool = True,
    ) -> Any:
        """Run ``fn(record)`` on a worker thread, holding the episode (409 when busy), and
        wait at most ``deadline`` seconds (504 past it; the call goes on)."""
        with self._lock:
            self._check_open()
            record = self._get(owner, episode_id)
            if exclusive:
                if record.busy:
                    raise WorldError(409, "busy", "another call of this episode is running",
                                     episode_id)  # fmt: skip
                record.busy = True
            record.last_used = time.monotonic()
            self._in_flight += 1
        if callable(deadline):
            deadline = deadline(record)

        def run() -> Any:
            try:
                return fn(record)
            finally:
                with self._lock:
                    if exclusive:
                        record.busy = False
                    record.last_used = time.monotonic()
                    self._in_flight -= 1
                    self._idle.notify_all()

        try:
            future = self._threads.submit(run)
        except RuntimeError:  # the pool shut down meanwhile
            with self._lock:
                record.busy = False if exclusive else record.busy
                self._in_flight -= 1
            raise WorldError(503, "draining", "the service is shutting down") from None
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), deadline)
        except asyncio.TimeoutError:
            raise WorldError(
                504, "deadline",
                f"the call did not finish within {deadline:.1f} s; it goes on, and the "
                "episode is busy until it ends",
                episode_id,
            ) from None  # fmt: skip
        except WorldError:
            raise
        except (EpisodeError, KeyError, ValueError, TypeError) as exc:
            raise _client_error(exc, record.episode.id, episode_id) from None

    async def _run_free(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on a worker thread, counted as in flight (for creation)."""
        with self._lock:
            self._check_open()
            self._in_flight += 1

        def run() -> Any:
            try:
                return fn()
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self._idle.notify_all()

        return await asyncio.wrap_future(self._threads.submit(run))

    def _register(self, owner: str, episode: Episode) -> str:
        episode_id = "w-" + secrets.token_hex(12)
        with self._lock:
            self._records[episode_id] = _Record(episode_id, owner, episode)
        self.metrics.episode_opened()
        log.info("episode %s opened by %s (%s)", episode_id, owner, episode.id)
        return episode_id

    def _step_deadline(self, record: _Record) -> float:
        if self.config.request_deadline_s is not None:
            return self.config.request_deadline_s
        return 2 * record.episode.config.step_timeout_s + 60.0

    def _end_deadline(self, record: _Record) -> float:
        if self.config.request_deadline_s is not None:
            return self.config.request_deadline_s
        rewarder = record.episode.rewarder
        return float(getattr(rewarder, "deadline_s", 3600.0)) + 60.0

    # ------------------------------------------------------------------ routes

    async def create(self, owner: str, body: s.CreateEpisode) -> s.EpisodeStarted:
        config = self._episode_config(body.config)
        task = self._task(body.task, body.instance_id)
        self._reserve(owner)

        def open_episode() -> tuple[str, str, dict[str, Any]]:
            executor, rewarder = self._component(config)
            episode = Episode(config=config, manager=self.manager, executor=executor,
                              rewarder=rewarder)  # fmt: skip
            try:
                observation, info = episode.reset(task, seed=body.seed)
            except BaseException:
                episode.close()
                raise
            # registered here, not by the request: a client gone meanwhile leaves an
            # episode that idle expiry closes, not a session nobody knows of
            return self._register(owner, episode), observation, info

        from sweworld.sandbox.repos import RepoError

        try:
            episode_id, observation, info = await self._run_free(open_episode)
        except (ValueError, TypeError) as exc:
            raise WorldError(422, "invalid", str(exc)) from None
        except RepoError as exc:  # a row whose repository or commit cannot be checked out
            raise WorldError(422, "invalid_task", f"task: {exc}") from None
        except EpisodeError as exc:
            raise WorldError(409, "not_running", str(exc)) from None
        finally:
            self._unreserve(owner)
        return s.EpisodeStarted(episode_id=episode_id, observation=observation, info=_json(info))

    async def reset(self, owner: str, episode_id: str, body: s.ResetEpisode) -> s.EpisodeStarted:
        task = None
        if body.task is not None or body.instance_id is not None:
            task = self._task(body.task, body.instance_id)
        wait = self._owner_window(owner, episode_id, "creates")
        if wait is not None:
            raise _quota("too many episodes created in the last minute", wait)
        observation, info = await self._call(
            owner, episode_id, lambda r: r.episode.reset(task, seed=body.seed)
        )
        return s.EpisodeStarted(episode_id=episode_id, observation=observation, info=_json(info))

    def _owner_window(self, owner: str, episode_id: str, which: str) -> float | None:
        """Take one event of ``owner``'s ``which`` window (an unknown episode is 404 first,
        so that it uses no quota); the seconds to wait when the window is full."""
        with self._lock:
            self._check_open()
            self._get(owner, episode_id)
            return getattr(self._owner(owner), which).take()

    async def step(self, owner: str, episode_id: str, body: s.StepRequest) -> s.StepResponse:
        wait = self._owner_window(owner, episode_id, "steps")
        if wait is not None:
            raise _quota("too many steps in the last minute", wait)
        started = time.perf_counter()
        error: str | None = None
        try:
            outcome = await self._call(
                owner, episode_id,
                lambda r: r.episode.step(body.action, timeout=body.timeout),
                deadline=self._step_deadline,
            )  # fmt: skip
        except WorldError as exc:
            error = exc.body.error
            raise
        finally:
            self.metrics.step_done(time.perf_counter() - started, error)
        self.metrics.observe_step_info(outcome.info)
        return _step_response(outcome)

    async def end(self, owner: str, episode_id: str, body: s.EndRequest) -> s.StepResponse:
        outcome = await self._call(
            owner, episode_id,
            lambda r: r.episode.end(body.reason, error=body.error),
            deadline=self._end_deadline,
        )  # fmt: skip
        return _step_response(outcome)

    async def snapshot(self, owner: str, episode_id: str) -> s.SnapshotTaken:
        snap = await self._call(owner, episode_id, lambda r: r.episode.snapshot())
        return s.SnapshotTaken(snapshot_id=snap)

    async def restore(self, owner: str, episode_id: str, body: s.RestoreRequest) -> s.EpisodeState:
        await self._call(owner, episode_id, lambda r: r.episode.restore(body.snapshot_id))
        return self.state(owner, episode_id)

    async def fork(self, owner: str, episode_id: str) -> s.EpisodeStarted:
        with self._lock:
            self._get(owner, episode_id)
        self._reserve(owner)
        try:
            new_id = await self._call(
                owner, episode_id, lambda r: self._register(owner, r.episode.fork())
            )
        finally:
            self._unreserve(owner)
        return s.EpisodeStarted(episode_id=new_id, observation="", info={"forked_from": episode_id})

    async def patch(self, owner: str, episode_id: str) -> s.PatchResponse:
        text = await self._call(owner, episode_id, lambda r: _current_patch(r.episode))
        return s.PatchResponse(patch=text)

    async def reward(self, owner: str, episode_id: str, body: s.RewardRequest) -> s.RewardResponse:
        def score(record: _Record) -> Any:
            episode = record.episode
            patch = body.patch if body.patch is not None else _current_patch(episode)
            return episode.score(patch, submitted=body.submitted)

        final = await self._call(owner, episode_id, score, deadline=self._end_deadline)
        return s.RewardResponse(**_json(final.to_dict()))

    def state(self, owner: str, episode_id: str) -> s.EpisodeState:
        with self._lock:
            self._check_open()
            record = self._get(owner, episode_id)
            idle = 0.0 if record.busy else time.monotonic() - record.last_used
        episode = record.episode
        return s.EpisodeState(
            episode_id=episode_id,
            instance_id=episode.task.instance_id if episode.task else None,
            steps=episode.steps,
            done=episode.done,
            reason=episode.reason,
            idle_s=idle,
        )

    async def trajectory(self, owner: str, episode_id: str) -> s.TrajectoryResponse:
        trajectory = await self._call(
            owner, episode_id, lambda r: r.episode.trajectory(), exclusive=False
        )
        return s.TrajectoryResponse(trajectory=_json(dataclasses.asdict(trajectory)))

    async def delete(self, owner: str, episode_id: str) -> s.Closed:
        with self._lock:
            self._check_open()
            record = self._get(owner, episode_id)
            if record.busy:
                raise WorldError(409, "busy", "another call of this episode is running", episode_id)
            del self._records[episode_id]
        await self._run_free(lambda: self._close_record(record, "deleted"))
        return s.Closed(episode_id=episode_id)

    def _close_record(self, record: _Record, why: str) -> None:
        try:
            record.episode.close()
        except Exception:
            log.exception("closing episode %s failed", record.id)
        self.metrics.episode_closed()
        log.info("episode %s closed (%s)", record.id, why)

    def health(self) -> s.Health:
        with self._lock:
            count = len(self._records)
        status = "draining" if self.draining or self._closed else "ok"
        return s.Health(status=status, episodes=count, uptime_s=time.monotonic() - self.started)

    # ------------------------------------------------------------------ expiry, shutdown

    def reap(self, now: float | None = None) -> list[str]:
        """Close the episodes idle longer than ``idle_timeout_s`` (not those in a call);
        their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            expired = [
                r for r in self._records.values()
                if not r.busy and now - r.last_used > self.config.idle_timeout_s
            ]  # fmt: skip
            for record in expired:
                del self._records[record.id]
        for record in expired:
            self._close_record(record, "idle")
        return [r.id for r in expired]

    async def reaper(self) -> None:
        """Run :meth:`reap` every ``reap_interval_s`` until cancelled."""
        while not self._closed:
            await asyncio.sleep(self.config.reap_interval_s)
            try:
                await asyncio.get_running_loop().run_in_executor(self._threads, self.reap)
            except RuntimeError:  # the threads shut down: the service is closing
                return

    def start_draining(self) -> None:
        """Refuse new calls (503) from now on; calls in flight go on."""
        with self._lock:
            self.draining = True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight (at most ``timeout`` s); whether none is."""
        end = time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def close(self) -> None:
        """Drain (at most ``drain_timeout_s``), then close every episode, the shared
        executors, rewarders and models, the threads and the manager. Idempotent."""
        self.start_draining()
        with self._lock:
            if self._closed:
                return
        if not self.wait_idle(self.config.drain_timeout_s):
            log.warning("shutdown: %d call(s) still running after %.0f s; closing anyway",
                        self._in_flight, self.config.drain_timeout_s)  # fmt: skip
        with self._lock:
            self._closed = True
            records = list(self._records.values())
            self._records.clear()
            components = list(self._components.values())
            self._components.clear()
        for record in records:
            self._close_record(record, "shutdown")
        for lm, executor, rewarder in components:
            _close_parts(rewarder, executor, lm)
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._own_manager:
            self.manager.close_all()


def _client_error(exc: Exception, inner_id: str, episode_id: str) -> WorldError:
    """The status of an episode's exception (its message names the service's id)."""
    text = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
    text = text.replace(f"episode {inner_id}", f"episode {episode_id}")
    if isinstance(exc, EpisodeBusy):
        return WorldError(409, "busy", text, episode_id)
    if isinstance(exc, EpisodeFinished):
        return WorldError(409, "finished", text, episode_id)
    if isinstance(exc, EpisodeError):
        return WorldError(409, "not_running", text, episode_id)
    if isinstance(exc, KeyError):
        return WorldError(404, "unknown_snapshot", text, episode_id)
    return WorldError(422, "invalid", text, episode_id)


def _close_parts(*parts: Any) -> None:
    for part in parts:
        closer = getattr(part, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                log.exception("closing %s failed", type(part).__name__)


def _current_patch(episode: Episode) -> str:
    if episode.session is not None:
        return episode.session.get_patch() or ""
    if episode.task is None:
        raise EpisodeError(f"episode {episode.id}: no episode has started")
    return episode.patch or ""


def _json(value: Any) -> Any:
    """``value`` with everything JSON cannot hold turned into text (a NaN into None)."""

    def clean(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return None
        if isinstance(item, dict):
            return {str(k): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        return item

    return clean(json.loads(json.dumps(value, default=str)))


def _step_response(outcome: Any) -> s.StepResponse:
    reward = outcome.reward if math.isfinite(outcome.reward) else 0.0
    return s.StepResponse(
        observation=outcome.observation,
        reward=reward,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        info=_json(outcome.info),
    )
