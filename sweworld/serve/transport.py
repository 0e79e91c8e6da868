"""The transport of the world service's Python client: its errors, one API call
(:class:`ApiCall`) and :class:`WorldConnection` (bearer token, timeouts, retries of
connections that could not be made, optional waiting out a quota).

:class:`~sweworld.serve.client.WorldClient` adds the episode calls (``create``, ``attach``)
on top; :class:`~sweworld.serve.remote.RemoteEpisode` talks through a connection. Both
import this module, and it imports neither (the imports point one way).

Needs ``httpx`` (extra ``serve``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from sweworld.env.episode import EpisodeBusy, EpisodeError, EpisodeFinished
from sweworld.serve.world import schemas

__all__ = [
    "CONNECT_TIMEOUT_S",
    "TOKEN_ENV",
    "ApiCall",
    "WorldAuthError",
    "WorldBadRequest",
    "WorldConnection",
    "WorldError",
    "WorldInvalid",
    "WorldNotFound",
    "WorldQuotaExceeded",
    "WorldTimeout",
    "WorldUnavailable",
]

#: Where the token comes from when neither ``token=`` nor ``world_token`` gives one.
TOKEN_ENV = "SWEWORLD_WORLD_TOKEN"
#: Seconds to wait for a connection (the request timeout bounds the rest).
CONNECT_TIMEOUT_S = 5.0


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
class ApiCall:
    """One request and what turns its response body into a result."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    finish: Callable[[Any], Any] = lambda data: data
    idempotent: bool = False


class WorldConnection:
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
        return f"<{type(self).__name__} {self.url}>"

    def __enter__(self) -> WorldConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clone(self) -> WorldConnection:
        """A new client to the same service with the same settings (its own connections)."""
        return type(self)(
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
        return self._send(ApiCall("GET", "/health", None, schemas.Health.model_validate, True))

    async def ahealth(self) -> schemas.Health:
        call = ApiCall("GET", "/health", None, schemas.Health.model_validate, True)
        return await self._asend(call)

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

    def _pause(self, call: ApiCall, attempt: int, waited: float, outcome: Any) -> float | None:
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

    def _result(self, call: ApiCall, response: httpx.Response) -> Any:
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

    def _send(self, call: ApiCall) -> Any:
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

    async def _asend(self, call: ApiCall) -> Any:
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
