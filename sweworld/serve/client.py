"""The Python client of the world service (``sweworld serve world``).

:class:`WorldClient` talks to one service (bearer token, timeouts, retries of connections
that could not be made, optional waiting out a quota); :class:`RemoteEpisode` is an episode
that runs there, with the public interface of :class:`sweworld.env.Episode` that trainers and
the adapters use, sync and async::

    client = WorldClient("http://host:8800", token)
    with client.create(task=row, config={"max_steps": 30}) as episode:
        obs, info = episode.observation, episode.reset_info     # started by create()
        obs, reward, terminated, truncated, info = episode.step(action)

The adapters switch to a remote world by configuration: ``EpisodeConfig(world=URL)`` (token
from ``world_token`` or ``$SWEWORLD_WORLD_TOKEN``) makes
:func:`sweworld.env.stepping.open_episode` return a :class:`RemoteEpisode` where it would
construct an :class:`~sweworld.env.Episode`.

Differences: ``info["episode_id"]`` is the service's id; an action that is neither text
nor a mapping is a ``TypeError`` (a local episode answers it with an observation); the
trajectory goes with the episode at ``close``. Not available remotely: the sandbox
``session`` (always None: the files live on the service), ``manager`` / ``executor`` /
``rewarder`` (the service's) and ``tokens``. The config fields that differ from
:class:`~sweworld.env.EpisodeConfig`'s defaults are sent as overrides, the rest are the
service's (its trajectory's ``meta["config"]`` records what it ran with).

Errors: 401 / 403 :class:`WorldAuthError` (a ``PermissionError``); 404
:class:`WorldNotFound` (a ``KeyError``); 409 ``EpisodeBusy`` / ``EpisodeFinished`` /
``EpisodeError`` (sweworld.env's own classes, so code behaves the same remote or local);
400 :class:`WorldBadRequest` (an ``EpisodeError`` and a ``ValueError``); 413 / 422
:class:`WorldInvalid` (a ``ValueError``); 429 :class:`WorldQuotaExceeded` (with
``retry_after``); 503 and a service that cannot be reached :class:`WorldUnavailable` (a
``ConnectionError``); 504 and a read past the client's timeout :class:`WorldTimeout` (a
``TimeoutError``). Every one is also a :class:`WorldError` with ``status``, ``code`` and
``episode_id``.

Needs ``httpx`` (extra ``serve``); nothing in ``sweworld`` imports this module eagerly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import httpx

from sweworld.env.config import END_REASONS, EpisodeConfig
from sweworld.env.episode import (
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    StepOutcome,
    coerce_task,
)
from sweworld.env.rewards import FinalReward
from sweworld.serve.world import schemas

__all__ = [
    "TOKEN_ENV",
    "RemoteEpisode",
    "WorldAuthError",
    "WorldBadRequest",
    "WorldClient",
    "WorldError",
    "WorldInvalid",
    "WorldNotFound",
    "WorldQuotaExceeded",
    "WorldTimeout",
    "WorldUnavailable",
    "config_overrides",
]

log = logging.getLogger(__name__)

#: Where the token comes from when neither ``token=`` nor ``world_token`` gives one.
TOKEN_ENV = "SWEWORLD_WORLD_TOKEN"
#: Seconds to wait for a connection (the request timeout bounds the rest).
CONNECT_TIMEOUT_S = 5.0
#: Config fields that never go to the service (where it is; the secret).
_LOCAL_FIELDS = ("world", "world_token")
_unstarted_ids = itertools.count(1)


# ---------------------------------------------------------------------- errors


class WorldError(Exception):
    """A call the world service refused or could not answer.

    Attributes:
        status: the HTTP status (None when no response came).
        code: the service's machine-readable ``error`` code.
        episode_id: the episode concerned, when the service named one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        episode_id: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.episode_id = episode_id

    def __str__(self) -> str:
        return self.message


class WorldAuthError(WorldError, PermissionError):
    """401: a missing or wrong token; 403: an episode of another token."""


class WorldNotFound(WorldError, KeyError):
    """404: an unknown (or expired, or closed) episode or snapshot."""


class WorldBadRequest(WorldError, EpisodeError, ValueError):
    """400: the call does not fit the episode's state or the service's tasks."""


class WorldInvalid(WorldError, ValueError):
    """413: the body is over the service's limit; 422: invalid fields."""


class WorldQuotaExceeded(WorldError):
    """429: the token's quota is spent; ``retry_after`` says when to try again (seconds)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **where: Any):
        super().__init__(message, **where)
        self.retry_after = retry_after


class WorldUnavailable(WorldError, ConnectionError):
    """503, or no connection: the service is down, draining, or its model server is."""


class WorldTimeout(WorldError, TimeoutError):
    """504 (a step passed the service's deadline) or no answer within the client's timeout."""


class _Busy(WorldError, EpisodeBusy):
    """409: another call of the episode is running."""


class _Finished(WorldError, EpisodeFinished):
    """409: the episode has ended; reset it."""


class _Conflict(WorldError, EpisodeError):
    """409: the episode cannot take the call now (closed, not started)."""


def _error_for(response: httpx.Response, url: str) -> WorldError:
    """The exception for an error response (its body is an ``ErrorBody`` when the service
    wrote it, FastAPI's ``{"detail": ...}`` or text otherwise)."""
    status = response.status_code
    code: str | None = None
    episode_id: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, Mapping) and "message" in body:
        code, message = body.get("error"), str(body["message"])
        episode_id = body.get("episode_id")
    elif isinstance(body, Mapping) and "detail" in body:
        message = str(body["detail"])
    else:
        message = response.text[:500] or response.reason_phrase
    where = {"status": status, "code": code, "episode_id": episode_id}
    text = f"{status} {message}"
    if status == 401:
        text += f" (give the token as WorldClient(token=...), world_token= or ${TOKEN_ENV})"
    elif status == 503:
        text += f" (the world service at {url})"
    elif status == 429:
        return WorldQuotaExceeded(text, retry_after=_retry_after(response), **where)
    elif status == 409:  # codes: busy, finished, not_running (closed, not started)
        kind = {"busy": _Busy, "finished": _Finished}.get(code or "", _Conflict)
        return kind(text, **where)
    return _BY_STATUS.get(status, WorldError)(text, **where)


_BY_STATUS: dict[int, type[WorldError]] = {
    400: WorldBadRequest,
    401: WorldAuthError,
    403: WorldAuthError,
    404: WorldNotFound,
    413: WorldInvalid,
    422: WorldInvalid,
    503: WorldUnavailable,
    504: WorldTimeout,
}


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


# ---------------------------------------------------------------------- client


@dataclass
class _Call:
    """One request and what turns its response body into a result."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    finish: Callable[[Any], Any] = lambda data: data
    idempotent: bool = False


class WorldClient:
    """A connection to one world service (thread-safe; async calls share one client per
    event loop).

    Args:
        url: the service's base URL (``http://host:8800``).
        token: its bearer token (default: ``$SWEWORLD_WORLD_TOKEN``; None sends none).
        timeout: seconds a request may take (a step runs its command and, at the end, the
            reward: keep it above the episodes' ``step_timeout_s``).
        retries: how many times a connection that could not be made is tried again (the
            request was not sent, so every call is safe to retry), and a read of state
            refused with 503.
        retry_backoff_s: first pause between tries (doubled each time).
        quota_wait_s: at most this many seconds in all are spent waiting out 429 answers
            (their ``Retry-After``) before :class:`WorldQuotaExceeded` is raised; 0 raises
            at once.
        transport: an ``httpx`` transport for the sync client (tests, proxies).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 600.0,
        retries: int = 2,
        retry_backoff_s: float = 0.1,
        quota_wait_s: float = 0.0,
        transport: httpx.BaseTransport | None = None,
    ):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"the world's URL must be http(s)://HOST:PORT, got {url!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        if not quota_wait_s >= 0:
            raise ValueError(f"quota_wait_s must be >= 0, got {quota_wait_s!r}")
        self.url = url.rstrip("/")
        self._token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.timeout = float(timeout)
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.quota_wait_s = float(quota_wait_s)
        self._lock = threading.Lock()
        self._transport = transport
        self._http: httpx.Client | None = None
        self._ahttp: httpx.AsyncClient | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def __repr__(self) -> str:  # never the token
        return f"<WorldClient {self.url}>"

    def __enter__(self) -> WorldClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clone(self) -> WorldClient:
        """A new client to the same service with the same settings (its own connections)."""
        return WorldClient(
            self.url,
            self._token,
            timeout=self.timeout,
            retries=self.retries,
            retry_backoff_s=self.retry_backoff_s,
            quota_wait_s=self.quota_wait_s,
            transport=self._transport,
        )

    # ------------------------------------------------------------------ API

    def health(self) -> schemas.Health:
        """``GET /health`` (no token needed)."""
        return self._send(_Call("GET", "/health", None, schemas.Health.model_validate, True))

    async def ahealth(self) -> schemas.Health:
        return await self._asend(_Call("GET", "/health", None, schemas.Health.model_validate, True))

    def create(
        self,
        task: Any = None,
        instance_id: str | None = None,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> RemoteEpisode:
        """Open and start an episode on the service: a task row (or Task), or the id of a
        task the service was started with. Its first observation is ``.observation`` and
        ``.reset_info``; ``reset()`` starts it again."""
        episode = RemoteEpisode(self, task, config, instance_id=instance_id)
        episode.reset(seed=seed)
        return episode

    async def acreate(
        self,
        task: Any = None,
        instance_id: str | None = None,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> RemoteEpisode:
        """:meth:`create` for an event loop."""
        episode = RemoteEpisode(self, task, config, instance_id=instance_id)
        await episode.areset(seed=seed)
        return episode

    def attach(self, episode_id: str, config: EpisodeConfig | None = None) -> RemoteEpisode:
        """A handle on an episode that exists on the service (opened by this token, e.g.
        before a restart): ``KeyError`` (:class:`WorldNotFound`) for an unknown one."""
        state = self._send(
            _Call("GET", f"/v1/episodes/{episode_id}", None, schemas.EpisodeState.model_validate)
        )
        episode = RemoteEpisode(self, None, config, instance_id=state.instance_id)
        episode._remote_id = state.episode_id
        episode.steps, episode.reason = state.steps, state.reason
        return episode

    def close(self) -> None:
        """Close the connections (episodes opened through this client stay on the service
        until closed or expired)."""
        with self._lock:
            self._closed = True
            http, self._http = self._http, None
            ahttp, loop = self._ahttp, self._aloop
            self._ahttp = self._aloop = None
        if http is not None:
            http.close()
        if ahttp is not None and loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                loop.create_task(ahttp.aclose())
            elif not loop.is_running():
                loop.run_until_complete(ahttp.aclose())
            # else: a loop running in another thread owns it; its sockets close with it

    async def aclose(self) -> None:
        """:meth:`close` from inside the event loop the async calls ran on."""
        with self._lock:
            ahttp, self._ahttp, self._aloop = self._ahttp, None, None
        if ahttp is not None:
            await ahttp.aclose()
        self.close()

    # ------------------------------------------------------------------ transport

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        return headers

    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT_S))

    def _sync_http(self) -> httpx.Client:
        with self._lock:
            if self._closed:
                raise WorldError(f"the client of {self.url} is closed")
            if self._http is None:
                self._http = httpx.Client(
                    base_url=self.url,
                    headers=self._headers(),
                    timeout=self._timeout(),
                    transport=self._transport,
                )
            return self._http

    def _async_http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise WorldError(f"the client of {self.url} is closed")
            if self._ahttp is None or self._aloop is not loop:
                # an AsyncClient belongs to the loop it first ran on: a new loop gets its own
                self._ahttp = httpx.AsyncClient(
                    base_url=self.url, headers=self._headers(), timeout=self._timeout()
                )
                self._aloop = loop
            return self._ahttp

    def _unreachable(self, exc: Exception) -> WorldUnavailable:
        return WorldUnavailable(
            f"cannot reach the world service at {self.url} ({type(exc).__name__}: {exc}); "
            "is `sweworld serve world` running at that URL?"
        )

    def _pause(self, call: _Call, attempt: int, waited: float, outcome: Any) -> float | None:
        """How long to wait before trying ``call`` again after ``outcome`` (an exception or
        a response), or None to give up (the caller raises)."""
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            if status == 429:
                delay = _retry_after(outcome)
                delay = 1.0 if delay is None else delay
                return delay if waited + delay <= self.quota_wait_s else None
            if status == 503 and call.idempotent and attempt < self.retries:
                return self.retry_backoff_s * 2**attempt
            return None
        if isinstance(outcome, (httpx.ConnectError, httpx.ConnectTimeout)):
            return self.retry_backoff_s * 2**attempt if attempt < self.retries else None
        return None

    def _result(self, call: _Call, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _error_for(response, self.url)
        try:
            data = response.json()
        except ValueError:
            raise WorldError(
                f"the world service at {self.url} answered {call.method} {call.path} with "
                f"something that is not JSON: {response.text[:200]!r}",
                status=response.status_code,
            ) from None
        return call.finish(data)

    def _failure(self, exc: httpx.HTTPError) -> WorldError:
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return self._unreachable(exc)
        if isinstance(exc, httpx.TimeoutException):
            return WorldTimeout(
                f"the world service at {self.url} did not answer within {self.timeout:.0f} s "
                f"({type(exc).__name__}); the call may have run"
            )
        return WorldUnavailable(
            f"the connection to the world service at {self.url} failed mid-request "
            f"({type(exc).__name__}: {exc}); the call may have run"
        )

    def _send(self, call: _Call) -> Any:
        http = self._sync_http()
        attempt, waited = 0, 0.0
        while True:
            try:
                response = http.request(call.method, call.path, json=call.body)
            except httpx.HTTPError as exc:
                outcome: Any = exc
            else:
                outcome = response
            delay = self._pause(call, attempt, waited, outcome)
            if delay is None:
                if isinstance(outcome, Exception):
                    raise self._failure(outcome) from None
                return self._result(call, outcome)
            time.sleep(delay)
            attempt, waited = attempt + 1, waited + delay

    async def _asend(self, call: _Call) -> Any:
        http = self._async_http()
        attempt, waited = 0, 0.0
        while True:
            try:
                response = await http.request(call.method, call.path, json=call.body)
            except httpx.HTTPError as exc:
                outcome: Any = exc
            else:
                outcome = response
            delay = self._pause(call, attempt, waited, outcome)
            if delay is None:
                if isinstance(outcome, Exception):
                    raise self._failure(outcome) from None
                return self._result(call, outcome)
            await asyncio.sleep(delay)
            attempt, waited = attempt + 1, waited + delay


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
        client: the :class:`WorldClient` to call through.
        task: a Task or task row (sent to the service), or None with ``instance_id`` (a task
            of the service's tasks file) or a task given to ``reset``.
        config: the episode's rules; its non-default fields are sent as overrides.
        instance_id: a task the service was started with.
        own_client: close ``client`` with the episode.
    """

    def __init__(
        self,
        client: WorldClient,
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
        client = WorldClient(config.world, config.world_token)
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
        call = _Call(method, self._path(tail), body, finish, idempotent=method == "GET")
        return self.client._send(call)

    # ------------------------------------------------------------------ reset

    def _reset_call(self, task: Any, seed: int | None) -> _Call:
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

        return _Call("POST", path, request.model_dump(exclude_none=False), finish)

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

    def _step_call(self, action: Any, timeout: float | None) -> _Call:
        if timeout is not None and not (
            isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not isinstance(action, (str, Mapping)):
            raise TypeError(
                f"an action must be text or a tool-call mapping, not {type(action).__name__}"
            )
        body = {"action": action if isinstance(action, str) else dict(action), "timeout": timeout}
        return _Call("POST", self._path("/step"), body, self._outcome)

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

    def _end_call(self, reason: str, error: str | None) -> _Call:
        body = schemas.EndRequest(reason=reason, error=error).model_dump()  # type: ignore[arg-type]
        return _Call("POST", self._path("/end"), body, self._outcome)

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
        service recorded)."""
        from sweworld.data.policies import trajectory_from_dict

        if self._remote_id is None:
            raise EpisodeError("no episode has started")
        if self._closed:
            raise EpisodeError(f"episode {self.id} is closed (its trajectory went with it)")
        data = self._send("GET", "/trajectory", _field(schemas.TrajectoryResponse, "trajectory"))
        trajectory = trajectory_from_dict(data)
        trajectory.meta["episode_id"] = self._remote_id
        return trajectory

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
        with self._closing_quietly(remote_id):
            if remote_id is not None:
                self.client._send(_Call("DELETE", f"/v1/episodes/{remote_id}", None, _drop_body))
        if self._own_client:
            self.client.close()

    async def aclose(self) -> None:
        """:meth:`close` for an event loop."""
        first, remote_id = self._closing()
        if not first:
            return
        with self._closing_quietly(remote_id):
            if remote_id is not None:
                call = _Call("DELETE", f"/v1/episodes/{remote_id}", None, _drop_body)
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
