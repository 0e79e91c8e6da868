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
- quotas per owner (**429** with ``Retry-After``): live episodes (those holding a session;
  an ended episode holds none and counts apart, up to ``max_ended_per_token``, past which
  the owner's least recently used ended episode is closed), live forks, snapshots per
  episode and per owner, distinct component configs (:mod:`.components`; freed when no
  episode uses them), episodes created per minute (create, fork, reset), steps per
  minute. Every limit is per owner: no token can make another's call fail;
- for all owners together (**503**, ``Retry-After``): ``max_live_episodes`` and the
  sessions' disks (RAM) within ``disk_budget_mb``; running out of descriptors is 503 too;
- what a client may ask for is :mod:`.policy`'s: config overrides on the operator's
  allow-list and bounded by the server's values, task rows as data (a repository name
  resolved in the repo cache, a commit id; with ``allow_task_rows`` off, only the
  server's own tasks), error texts without host paths, responses without lone
  surrogates (an observation always reaches its client);
- an episode idle longer than ``idle_timeout_s`` (no call) is closed by :meth:`reap`;
- while draining (shutdown) new calls get **503**; :meth:`drain` waits for calls in
  flight, then closes every episode and the shared parts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from sweworld.env import Episode, EpisodeConfig, EpisodeError
from sweworld.serve.world import schemas as s
from sweworld.serve.world.auth import RateWindow
from sweworld.serve.world.components import Components, ConfigsExhausted, Lease
from sweworld.serve.world.config import ServiceConfig
from sweworld.serve.world.policy import (
    ALL_CLIENT_KEYS,
    PolicyError,
    check_overrides,
    client_task,
)
from sweworld.serve.world.records import EpisodeRecord, OwnerWindows
from sweworld.serve.world.replies import (
    WorldError,
    capacity_error,
    client_error,
    current_patch,
    json_safe,
    quota_error,
    step_response,
    text_safe,
)

__all__ = ["CLIENT_KEYS", "ServiceConfig", "WorldError", "WorldHandler"]

log = logging.getLogger(__name__)

#: Every override key a client may name at all (the operator's allow-list decides which
#: it may change: :attr:`ServiceConfig.allowed_client_keys`).
CLIENT_KEYS = ALL_CLIENT_KEYS


class WorldHandler:
    """The service's episodes and the calls on them (see the module docstring).

    Args:
        config: the service's :class:`ServiceConfig`.
        manager: a session manager to share (one is made under ``runtime_root`` otherwise,
            and closed by :meth:`drain`).
        metrics: a metrics object (``episode_opened``, ``step_done``, ...; made otherwise).
    """

    def __init__(self, config: ServiceConfig, *, manager: Any = None, metrics: Any = None):
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
            manager = SessionManager(runtime_root=root, disk_budget_bytes=config.disk_budget_bytes)
        self.manager = manager
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._records: dict[str, EpisodeRecord] = {}
        self._owners: dict[str, OwnerWindows] = {}
        self._reserved: dict[str, int] = {}  # creations in progress per owner
        self._forking: dict[str, int] = {}  # forks in progress per owner
        self.components = Components(manager, config.episode, config.max_configs_per_token)
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

    def _episode_config(self, overrides: dict[str, Any]) -> EpisodeConfig:
        """The config of a client's overrides, under :mod:`.policy`'s rules (422)."""
        try:
            return check_overrides(self.config.episode, overrides, self.config.allowed_client_keys)
        except PolicyError as exc:
            raise WorldError(422, exc.code, str(exc)) from None

    def _task(self, task: dict[str, Any] | None, instance_id: str | None) -> Any:
        """The task of a request: a server task by id, or a client's row (data only)."""
        try:
            return client_task(task, instance_id, self._tasks or {}, self.config.allow_task_rows)
        except PolicyError as exc:
            raise WorldError(exc.status, exc.code, str(exc)) from None

    # ------------------------------------------------------------------ bookkeeping

    def _owner(self, owner: str) -> OwnerWindows:
        found = self._owners.get(owner)
        if found is None:
            cfg = self.config
            found = self._owners[owner] = OwnerWindows(
                RateWindow(cfg.max_steps_per_minute), RateWindow(cfg.max_creates_per_minute)
            )
        return found

    def _check_open(self) -> None:
        if self.draining or self._closed:
            raise WorldError(503, "draining", "the service is shutting down")

    def _live(self, owner: str) -> int:
        """``owner``'s episodes that hold a session (or a slot being filled); under the lock."""
        live = sum(r.owner == owner and r.live for r in self._records.values())
        return live + self._reserved.get(owner, 0)

    def _reserve(self, owner: str, *, rate: bool = True) -> None:
        """Hold one live-episode slot of ``owner`` (429 when none is left); ``rate``: take
        one creation of the owner's per-minute window too."""
        with self._lock:
            self._check_open()
            everyone = sum(r.live for r in self._records.values()) + sum(self._reserved.values())
            if everyone >= self.config.max_live_episodes:
                raise capacity_error(everyone, self.config.reap_interval_s)
            live = self._live(owner)
            if live >= self.config.max_episodes_per_token:
                raise quota_error(
                    f"this token holds {live} live episodes, the most allowed "
                    f"(delete or end some, or wait for idle ones to expire)",
                    self.config.reap_interval_s,
                )
            if rate:
                wait = self._owner(owner).creates.take()
                if wait is not None:
                    raise quota_error("too many episodes created in the last minute", wait)
            self._reserved[owner] = self._reserved.get(owner, 0) + 1

    def _evict_ended(self, owner: str) -> None:
        """Close ``owner``'s least recently used ended episodes past
        ``max_ended_per_token`` (on a worker thread: closing may free a model)."""
        with self._lock:
            ended = sorted(
                (r for r in self._records.values() if r.owner == owner and not r.live),
                key=lambda r: r.last_used,
            )
            evicted = ended[: max(0, len(ended) - self.config.max_ended_per_token)]
            for record in evicted:
                del self._records[record.id]
        for record in evicted:
            self._close_record(record, "ended episodes over the token's limit")

    def _unfork(self, owner: str) -> None:
        with self._lock:
            self._forking[owner] -= 1

    def _unreserve(self, owner: str) -> None:
        with self._lock:
            self._reserved[owner] -= 1

    def _get(self, owner: str, episode_id: str) -> EpisodeRecord:
        record = self._records.get(episode_id)
        if record is None or not secrets.compare_digest(record.owner, owner):
            raise WorldError(404, "not_found", f"no episode {episode_id!r}", episode_id)
        return record

    async def _call(
        self,
        owner: str,
        episode_id: str,
        fn: Callable[[EpisodeRecord], Any],
        *,
        deadline: float | Callable[[EpisodeRecord], float] | None = None,
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
                if exclusive and record.episode.session is None:  # the call ended it
                    self._evict_ended(owner)

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
        except (EpisodeError, KeyError, ValueError, TypeError, RuntimeError, OSError) as exc:
            error = client_error(exc, record.episode.id, episode_id)
            if error is None:
                raise
            raise error from None

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

    def _register(
        self, owner: str, episode: Episode, lease: Lease | None, *, forked: bool = False
    ) -> str:
        episode_id = "w-" + secrets.token_hex(12)
        with self._lock:
            self._records[episode_id] = EpisodeRecord(episode_id, owner, episode, lease, forked)
        self.metrics.episode_opened()
        log.info("episode %s opened by %s (%s)", episode_id, owner, episode.id)
        return episode_id

    def _step_deadline(self, record: EpisodeRecord) -> float:
        if self.config.request_deadline_s is not None:
            return self.config.request_deadline_s
        return 2 * record.episode.config.step_timeout_s + 60.0

    def _end_deadline(self, record: EpisodeRecord) -> float:
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
            lease = self.components.acquire(owner, config)
            episode = Episode(config=config, manager=self.manager, executor=lease.executor,
                              rewarder=lease.rewarder)  # fmt: skip
            try:
                observation, info = episode.reset(task, seed=body.seed)
            except BaseException:
                episode.close()
                self.components.release(lease)
                raise
            # registered here, not by the request: a client gone meanwhile leaves an
            # episode that idle expiry closes, not a session nobody knows of
            return self._register(owner, episode, lease), observation, info

        try:
            episode_id, observation, info = await self._run_free(open_episode)
        except ConfigsExhausted as exc:
            raise WorldError(429, "too_many_configs", str(exc),
                             headers={"Retry-After": str(math.ceil(self.config.reap_interval_s))},
                             ) from None  # fmt: skip
        except (ValueError, TypeError, EpisodeError, RuntimeError, OSError) as exc:
            error = client_error(exc, "", "")
            if error is None:
                raise
            raise WorldError(error.status, error.body.error, error.body.message,
                             headers=error.headers) from None  # fmt: skip
        finally:
            self._unreserve(owner)
        return s.EpisodeStarted(episode_id=episode_id, observation=text_safe(observation),
                                info=json_safe(info))  # fmt: skip

    async def reset(self, owner: str, episode_id: str, body: s.ResetEpisode) -> s.EpisodeStarted:
        task = None
        if body.task is not None or body.instance_id is not None:
            task = self._task(body.task, body.instance_id)
        wait = self._owner_window(owner, episode_id, "creates")
        if wait is not None:
            raise quota_error("too many episodes created in the last minute", wait)
        with self._lock:  # an ended episode holds no session: it needs a live slot again
            needs_slot = not self._get(owner, episode_id).live
        if needs_slot:
            self._reserve(owner, rate=False)

        def restart(record: EpisodeRecord) -> tuple[str, dict[str, Any]]:
            started = record.episode.reset(task, seed=body.seed)
            with self._lock:
                record.snapshots = 0  # the reset dropped them with the old session
            return started

        try:
            observation, info = await self._call(owner, episode_id, restart)
        finally:
            if needs_slot:
                self._unreserve(owner)
        return s.EpisodeStarted(episode_id=episode_id, observation=text_safe(observation),
                                info=json_safe(info))  # fmt: skip

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
            raise quota_error("too many steps in the last minute", wait)
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
        return step_response(outcome)

    async def end(self, owner: str, episode_id: str, body: s.EndRequest) -> s.StepResponse:
        outcome = await self._call(
            owner, episode_id,
            lambda r: r.episode.end(body.reason, error=body.error),
            deadline=self._end_deadline,
        )  # fmt: skip
        return step_response(outcome)

    async def snapshot(self, owner: str, episode_id: str) -> s.SnapshotTaken:
        cfg = self.config

        def take(record: EpisodeRecord) -> str:
            with self._lock:  # checked and counted at once: concurrent calls cannot pass
                mine = (r for r in self._records.values() if r.owner == owner and r.live)
                held = sum(r.snapshots for r in mine)
                wait = cfg.reap_interval_s
                if record.snapshots >= cfg.max_snapshots_per_episode:
                    why = f"this episode holds {record.snapshots} snapshots, the most allowed "
                    raise quota_error(why + "(reset the episode to drop them)", wait)
                if held >= cfg.max_snapshots_per_token:
                    why = f"this token's episodes hold {held} snapshots, the most allowed "
                    raise quota_error(why + "(reset, end or delete episodes)", wait)
                record.snapshots += 1
            try:
                return record.episode.snapshot()
            except BaseException:
                with self._lock:
                    record.snapshots -= 1
                raise

        snap = await self._call(owner, episode_id, take)
        return s.SnapshotTaken(snapshot_id=snap)

    async def restore(self, owner: str, episode_id: str, body: s.RestoreRequest) -> s.EpisodeState:
        await self._call(owner, episode_id, lambda r: r.episode.restore(body.snapshot_id))
        return self.state(owner, episode_id)

    async def fork(self, owner: str, episode_id: str) -> s.EpisodeStarted:
        with self._lock:
            self._get(owner, episode_id)
            forks = sum(r.owner == owner and r.forked and r.live for r in self._records.values())
            forks += self._forking.get(owner, 0)  # counted at once: concurrent forks cannot pass
            if forks >= self.config.max_forks_per_token:
                raise quota_error(f"this token holds {forks} live forks, the most allowed",
                                  self.config.reap_interval_s)  # fmt: skip
            self._forking[owner] = self._forking.get(owner, 0) + 1
        try:
            self._reserve(owner)
        except WorldError:
            self._unfork(owner)
            raise

        def fork_one(record: EpisodeRecord) -> str:
            lease = self.components.share(record.lease) if record.lease is not None else None
            try:
                other = record.episode.fork()
            except BaseException:
                self.components.release(lease)
                raise
            return self._register(owner, other, lease, forked=True)

        try:
            new_id = await self._call(owner, episode_id, fork_one)
        finally:
            self._unreserve(owner)
            self._unfork(owner)
        return s.EpisodeStarted(episode_id=new_id, observation="", info={"forked_from": episode_id})

    async def patch(self, owner: str, episode_id: str) -> s.PatchResponse:
        text = await self._call(owner, episode_id, lambda r: current_patch(r.episode))
        return s.PatchResponse(patch=text_safe(text))

    async def reward(self, owner: str, episode_id: str, body: s.RewardRequest) -> s.RewardResponse:
        def score(record: EpisodeRecord) -> Any:
            episode = record.episode
            patch = body.patch if body.patch is not None else current_patch(episode)
            return episode.score(patch, submitted=body.submitted)

        final = await self._call(owner, episode_id, score, deadline=self._end_deadline)
        return s.RewardResponse(**json_safe(final.to_dict()))

    def state(self, owner: str, episode_id: str) -> s.EpisodeState:
        with self._lock:
            self._check_open()
            record = self._get(owner, episode_id)
            idle = 0.0 if record.busy else time.monotonic() - record.last_used
        episode = record.episode
        return s.EpisodeState(
            episode_id=episode_id,
            instance_id=text_safe(episode.task.instance_id) if episode.task else None,
            steps=episode.steps,
            done=episode.done,
            reason=episode.reason,
            idle_s=idle,
        )

    async def trajectory(self, owner: str, episode_id: str) -> s.TrajectoryResponse:
        trajectory = await self._call(
            owner, episode_id, lambda r: r.episode.trajectory(), exclusive=False
        )
        return s.TrajectoryResponse(trajectory=json_safe(dataclasses.asdict(trajectory)))

    async def delete(self, owner: str, episode_id: str) -> s.Closed:
        with self._lock:
            self._check_open()
            record = self._get(owner, episode_id)
            if record.busy:
                raise WorldError(409, "busy", "another call of this episode is running", episode_id)
            del self._records[episode_id]
        await self._run_free(lambda: self._close_record(record, "deleted"))
        return s.Closed(episode_id=episode_id)

    def _close_record(self, record: EpisodeRecord, why: str) -> None:
        try:
            record.episode.close()
        except Exception:
            log.exception("closing episode %s failed", record.id)
        self.components.release(record.lease)
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
        for record in records:
            self._close_record(record, "shutdown")
        self.components.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._own_manager:
            self.manager.close_all()
