"""An episode that runs on a world service: :class:`RemoteEpisode`, with the public
interface of :class:`sweworld.env.Episode` that trainers and the adapters use, sync and
async, over a :class:`~sweworld.serve.client.WorldClient` (also importable from
:mod:`sweworld.serve.client`). It registers itself as the world named ``remote``
(:mod:`sweworld.sandbox.registry`; ``pyproject.toml`` declares the same entry point), which
is how :func:`sweworld.env.opening.open_episode` finds it without importing ``serve``.

Differences: ``info["episode_id"]`` is the service's id; an action that is neither text
nor a mapping is a ``TypeError`` (a local episode answers it with an observation); the
service forgets the episode at ``close``, so ``close`` fetches its trajectory first and
``trajectory()`` afterwards returns that copy (when the config records one and the service
answered). Not available remotely: the sandbox
``session`` (always None: the files live on the service), ``manager`` / ``executor`` /
``rewarder`` (the service's) and ``tokens``. The config fields that differ from
:class:`~sweworld.env.EpisodeConfig`'s defaults are sent as overrides, the rest are the
service's (its trajectory's ``meta["config"]`` records what it ran with).

Errors are :mod:`sweworld.serve.client`'s. Needs ``httpx`` (extra ``serve``); nothing in
``sweworld`` imports this module eagerly.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from typing import Any

from sweworld.env.config import END_REASONS, EpisodeConfig
from sweworld.env.episode import (
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
    coerce_task,
)
from sweworld.env.rewards import FinalReward
from sweworld.sandbox.registry import register
from sweworld.serve.transport import (
    ApiCall,
    WorldConnection,
    WorldError,
    WorldNotFound,
    WorldTimeout,
    WorldUnavailable,
)
from sweworld.serve.world import schemas

__all__ = ["RemoteEpisode", "config_overrides"]

log = logging.getLogger(__name__)

#: Config fields that never go to the service (where it is; the secret).
_LOCAL_FIELDS = ("world", "world_token")
_unstarted_ids = itertools.count(1)


def config_overrides(config: EpisodeConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    """What a client sends as the episode's config: the fields that differ from
    :class:`EpisodeConfig`'s defaults (the others are the service's), never ``world`` or
    ``world_token``. A mapping is validated as an EpisodeConfig first."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        config = EpisodeConfig.from_dict(dict(config))
    if not isinstance(config, EpisodeConfig):
        raise TypeError(f"config must be an EpisodeConfig or a mapping, not {type(config)}")
    if not isinstance(config.executor, str):
        raise ValueError(
            "an executor instance runs in this process; a remote episode runs on the service's "
            "executor (give a spec string such as 'local' or 'simulated', or none)"
        )
    default = EpisodeConfig()
    data = config.to_dict()
    base = default.to_dict()
    return {
        f.name: data[f.name]
        for f in fields(EpisodeConfig)
        if f.name not in _LOCAL_FIELDS and data[f.name] != base[f.name]
    }


# ---------------------------------------------------------------------- episode


class RemoteEpisode:
    """An episode that runs on a world service, with :class:`sweworld.env.Episode`'s public
    interface (see the module docstring for what is not available remotely).

    It is created on the service at the first ``reset`` (or by :meth:`WorldClient.create`),
    so constructing one, as the adapters do, costs nothing until it starts.

    Args:
        client: the :class:`~sweworld.serve.client.WorldClient` (or any
            :class:`~sweworld.serve.transport.WorldConnection`) to call through.
        task: a Task or task row (sent to the service), or None with ``instance_id`` (a task
            of the service's tasks file) or a task given to ``reset``.
        config: the episode's rules; its non-default fields are sent as overrides.
        instance_id: a task the service was started with.
        own_client: close ``client`` with the episode.
    """

    def __init__(
        self,
        client: WorldConnection,
        task: Any = None,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        *,
        instance_id: str | None = None,
        own_client: bool = False,
    ):
        if isinstance(config, Mapping):
            config = EpisodeConfig.from_dict(dict(config))
        self.config = config or EpisodeConfig()
        self._overrides = config_overrides(self.config)
        self.client = client
        self._own_client = own_client
        self._task: Any = coerce_task(task) if task is not None else None
        self._instance_id = instance_id
        self._remote_id: str | None = None
        self._placeholder = f"remote-unstarted-{next(_unstarted_ids)}"
        self._call_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False
        self._kept: Any = None  # the trajectory fetched at close, before the service forgot it
        #: The first observation and info of the last ``reset`` (``create`` returns started).
        self.observation: str | None = None
        self.reset_info: dict[str, Any] = {}
        self._new_state(None)

    @classmethod
    def from_config(cls, task: Any = None, config: EpisodeConfig | None = None) -> RemoteEpisode:
        """An episode on ``config.world`` (token: ``config.world_token`` or
        ``$SWEWORLD_WORLD_TOKEN``), with a client of its own."""
        config = config or EpisodeConfig()
        if config.world is None:
            raise ValueError("config.world is None: the episode would run in this process")
        client = WorldConnection(config.world, config.world_token)
        return cls(client, task, config, own_client=True)

    def _new_state(self, seed: int | None) -> None:
        self.steps = 0
        self.reason: str | None = None
        self.patch: str | None = None
        self.final: FinalReward | None = None
        self.rewards: list[float] = []
        self.seed = seed

    # ------------------------------------------------------------------ state

    @property
    def id(self) -> str:
        """The service's episode id (a local placeholder before the first ``reset``)."""
        return self._remote_id or self._placeholder

    @property
    def created(self) -> bool:
        """Whether the episode exists on the service (``Episode.started``, a clock reading,
        has no remote counterpart)."""
        return self._remote_id is not None

    @property
    def task(self) -> Any:
        """The :class:`~sweworld.tasks.Task` (read from the service once when it was named
        by instance id)."""
        if self._task is None and self._remote_id is not None and not self._closed:
            self._task = coerce_task(self.trajectory().task)
        return self._task

    @property
    def done(self) -> bool:
        return self.reason is not None

    @property
    def session(self) -> None:
        """None: the sandbox session lives on the service."""
        return None

    def __getattr__(self, name: str) -> Any:
        if name in ("manager", "executor", "rewarder", "tokens"):
            raise AttributeError(
                f"a RemoteEpisode has no {name}: the episode runs on the world service, which "
                "holds its session, executor and reward model (and counts its tokens)"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __enter__(self) -> RemoteEpisode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        task = self._task.instance_id if self._task is not None else self._instance_id
        return (
            f"<RemoteEpisode {self.id} at {self.client.url} task={task} steps={self.steps} "
            f"reason={self.reason}>"
        )

    @contextlib.contextmanager
    def _hold(self, what: str, *, started: bool = True, running: bool = False) -> Iterator[None]:
        """One call at a time, as :class:`~sweworld.env.Episode` (the service checks too)."""
        if not self._call_lock.acquire(blocking=False):
            raise EpisodeBusy(f"episode {self.id}: {what}() while another call is running")
        try:
            if self._closed:
                raise EpisodeError(f"episode {self.id} is closed")
            if running and self.reason is not None:
                raise EpisodeFinished(
                    f"episode {self.id} ended ({self.reason}); call reset() to start another"
                )
            if started and self._remote_id is None:
                raise EpisodeError(f"episode {self.id}: call reset() before {what}()")
            yield
        finally:
            self._call_lock.release()

    def _path(self, tail: str = "") -> str:
        return f"/v1/episodes/{self._remote_id}{tail}"

    def _send(self, method: str, tail: str, finish: Callable[[Any], Any], body: Any = None) -> Any:
        """One call on this episode's route ``tail`` (GETs may be retried on 503)."""
        call = ApiCall(method, self._path(tail), body, finish, idempotent=method == "GET")
        return self.client._send(call)

    # ------------------------------------------------------------------ reset

    def _reset_call(self, task: Any, seed: int | None) -> ApiCall:
        new_task = coerce_task(task) if task is not None else None
        row = new_task.to_row() if new_task is not None else None
        if self._remote_id is None:
            if new_task is None and self._task is None and self._instance_id is None:
                raise EpisodeError(
                    "reset() needs a task: pass one to the episode (task= or instance_id=) "
                    "or to reset(task=...)"
                )
            if row is None and self._task is not None:
                row = self._task.to_row()
            request = schemas.CreateEpisode(
                task=row,
                instance_id=None if row is not None else self._instance_id,
                config=self._overrides,
                seed=seed,
            )
            path = "/v1/episodes"
        else:
            request = schemas.ResetEpisode(task=row, seed=seed)
            path = self._path("/reset")

        def finish(data: Any) -> tuple[str, dict[str, Any]]:
            started = schemas.EpisodeStarted.model_validate(data)
            self._remote_id = started.episode_id
            if new_task is not None:
                self._task = new_task
            elif self._task is not None and started.info.get("instance_id") not in (
                None,
                self._task.instance_id,
            ):
                self._task = None  # read back lazily
            self._new_state(seed)
            info = {**started.info, "episode_id": started.episode_id}  # the service's id
            self.observation, self.reset_info = started.observation, info
            return started.observation, dict(info)

        return ApiCall("POST", path, request.model_dump(exclude_none=False), finish)

    def reset(self, task: Any = None, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start the episode (on ``task``, else the current one): ``(prompt, info)``; the
        first call creates it on the service."""
        with self._hold("reset", started=False):
            return self.client._send(self._reset_call(task, seed))

    async def areset(
        self, task: Any = None, *, seed: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        """``reset`` for an event loop (an async HTTP request, no thread)."""
        with self._hold("reset", started=False):
            return await self.client._asend(self._reset_call(task, seed))

    # ------------------------------------------------------------------ step, end

    def _outcome(self, data: Any) -> StepOutcome:
        response = schemas.StepResponse.model_validate(data)
        info = {**response.info, "episode_id": self._remote_id}  # the service's id
        self.steps = int(info.get("steps", info.get("step", self.steps + 1)))
        self.rewards.append(float(response.reward))
        if response.terminated or response.truncated:
            self.reason = info.get("reason") or ("error" if response.terminated else "max_steps")
            self.patch = info.get("patch")
            reward = info.get("reward")
            if isinstance(reward, Mapping):
                self.final = _final_reward(reward)
        return StepOutcome(
            response.observation, response.reward, response.terminated, response.truncated, info
        )

    def _step_call(self, action: Any, timeout: float | None) -> ApiCall:
        if timeout is not None and not (
            isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not isinstance(action, (str, Mapping)):
            raise TypeError(
                f"an action must be text or a tool-call mapping, not {type(action).__name__}"
            )
        body = {"action": action if isinstance(action, str) else dict(action), "timeout": timeout}
        return ApiCall("POST", self._path("/step"), body, self._outcome)

    def step(self, action: str | Mapping[str, Any], *, timeout: float | None = None) -> StepOutcome:
        """Run one agent action on the service (see :meth:`sweworld.env.Episode.step`).
        An action that is neither text nor a mapping is a ``TypeError`` here (a local
        episode answers it with an observation)."""
        with self._hold("step", running=True):
            return self.client._send(self._step_call(action, timeout))

    async def astep(
        self, action: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> StepOutcome:
        """``step`` for an event loop (an async HTTP request, no thread)."""
        with self._hold("step", running=True):
            return await self.client._asend(self._step_call(action, timeout))

    def _end_call(self, reason: str, error: str | None) -> ApiCall:
        body = schemas.EndRequest(reason=reason, error=error).model_dump()  # type: ignore[arg-type]
        return ApiCall("POST", self._path("/end"), body, self._outcome)

    def end(self, reason: str = "max_steps", *, error: str | None = None) -> StepOutcome:
        """End the running episode without an action (see :meth:`sweworld.env.Episode.end`)."""
        _check_reason(reason)
        with self._hold("end", running=True):
            return self.client._send(self._end_call(reason, error))

    async def aend(self, reason: str = "max_steps", *, error: str | None = None) -> StepOutcome:
        _check_reason(reason)
        with self._hold("end", running=True):
            return await self.client._asend(self._end_call(reason, error))

    # ------------------------------------------------------------------ reward, patch

    def score(self, patch: str | None = None, *, submitted: bool = True) -> FinalReward:
        """The service's verdict on ``patch`` (the episode's current one when None); the
        episode goes on."""
        if patch is not None and not isinstance(patch, str):
            raise TypeError(f"a patch is text, not {type(patch).__name__}")
        body = schemas.RewardRequest(patch=patch, submitted=submitted).model_dump()
        with self._hold("score"):
            return self._send("POST", "/reward", _final_reward, body)

    def current_patch(self) -> str:
        """The workspace's diff against the base commit now (the final one after the end)."""
        with self._hold("current_patch"):
            return self._send("GET", "/patch", _field(schemas.PatchResponse, "patch"))

    def state(self) -> schemas.EpisodeState:
        """Where the episode stands on the service (steps, done, reason, idle time)."""
        with self._hold("state"):
            return self._send("GET", "", schemas.EpisodeState.model_validate)

    # ------------------------------------------------------------------ branching

    def snapshot(self) -> str:
        """Save the running episode's state on the service; its id for :meth:`restore`."""
        with self._hold("snapshot", running=True):
            return self._send("POST", "/snapshot", _field(schemas.SnapshotTaken, "snapshot_id"))

    def restore(self, snapshot_id: str) -> None:
        """Go back to a :meth:`snapshot` (``KeyError`` for an unknown id)."""

        def finish(data: Any) -> None:
            state = schemas.EpisodeState.model_validate(data)
            self.steps = state.steps
            self.rewards = self.rewards[: state.steps]

        with self._hold("restore", running=True):
            body = schemas.RestoreRequest(snapshot_id=snapshot_id).model_dump()
            self._send("POST", "/restore", finish, body)

    def fork(self) -> RemoteEpisode:
        """An independent copy of the running episode on the service (same files, same
        steps so far); it has a client of its own when this episode owns its client."""
        with self._hold("fork", running=True):
            started = self._send("POST", "/fork", schemas.EpisodeStarted.model_validate)
        client = self.client.clone() if self._own_client else self.client
        other = RemoteEpisode(client, None, self.config, own_client=self._own_client)
        other._task, other._instance_id = self._task, self._instance_id
        other._remote_id = started.episode_id
        other.steps, other.rewards, other.seed = self.steps, list(self.rewards), self.seed
        other.observation = started.observation
        other.reset_info = {**started.info, "episode_id": started.episode_id}
        return other

    # ------------------------------------------------------------------ records, close

    def trajectory(self) -> Any:
        """The episode as a data-schema :class:`~sweworld.data.schema.Trajectory` (what the
        service recorded); after :meth:`close`, the copy fetched just before the service
        forgot the episode."""
        if self._remote_id is None:
            raise EpisodeError("no episode has started")
        if self._closed:
            if self._kept is not None:
                return copy.deepcopy(self._kept)
            raise EpisodeError(
                f"episode {self.id} is closed and its trajectory could not be kept (the config "
                "does not record one, or the service did not answer at close)"
            )
        return self.client._send(self._trajectory_call(self._remote_id))

    def _trajectory_call(self, remote_id: str) -> ApiCall:
        from sweworld.data.policies import trajectory_from_dict

        read = _field(schemas.TrajectoryResponse, "trajectory")

        def finish(data: Any) -> Any:
            trajectory = trajectory_from_dict(read(data))
            trajectory.meta["episode_id"] = remote_id
            return trajectory

        path = f"/v1/episodes/{remote_id}/trajectory"
        return ApiCall("GET", path, None, finish, idempotent=True)

    def _closing(self) -> tuple[bool, str | None]:
        with self._close_lock:  # not the call lock: close never waits for a step
            if self._closed:
                return False, None
            self._closed = True
            return True, self._remote_id

    @contextlib.contextmanager
    def _closing_quietly(self, remote_id: str | None) -> Iterator[None]:
        try:
            yield
        except (WorldNotFound, WorldUnavailable, WorldTimeout) as exc:  # gone already
            log.info("episode %s: close: %s", remote_id, exc)
        except WorldError as exc:
            log.warning("episode %s: close failed: %s", remote_id, exc)

    def close(self) -> None:
        """Close the episode on the service (its session is freed) and the client when the
        episode owns it. Never raises for a service that is gone or forgot the episode."""
        first, remote_id = self._closing()
        if not first:
            return
        if remote_id is not None and self.config.record:
            with self._closing_quietly(remote_id):
                self._kept = self.client._send(self._trajectory_call(remote_id))
        with self._closing_quietly(remote_id):
            if remote_id is not None:
                self.client._send(ApiCall("DELETE", f"/v1/episodes/{remote_id}", None, _drop_body))
        if self._own_client:
            self.client.close()

    async def aclose(self) -> None:
        """:meth:`close` for an event loop."""
        first, remote_id = self._closing()
        if not first:
            return
        if remote_id is not None and self.config.record:
            with self._closing_quietly(remote_id):
                self._kept = await self.client._asend(self._trajectory_call(remote_id))
        with self._closing_quietly(remote_id):
            if remote_id is not None:
                call = ApiCall("DELETE", f"/v1/episodes/{remote_id}", None, _drop_body)
                await self.client._asend(call)
        if self._own_client:
            await self.client.aclose()


def _check_reason(reason: str) -> None:
    if reason not in END_REASONS:
        raise ValueError(f"reason must be one of {END_REASONS}, not {reason!r}")


def _drop_body(data: Any) -> None:
    return None


def _final_reward(data: Mapping[str, Any]) -> FinalReward:
    reward = schemas.RewardResponse.model_validate(dict(data))
    return FinalReward(**reward.model_dump())


def _field(model: Any, name: str) -> Callable[[Any], Any]:
    """A finisher: the body validated as ``model``, then its field ``name``."""
    return lambda data: getattr(model.model_validate(data), name)


register("world", "remote", f"{__name__}:RemoteEpisode")
