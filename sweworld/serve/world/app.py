"""The world service's FastAPI app: a thin router over :class:`WorldHandler`.

``create_app(config)`` builds the app: the routes of :mod:`sweworld.serve.world.schemas`,
bearer-token authentication checked by :class:`Gate` from the request head, before a byte
of the body is read (every path but :data:`OPEN_PATHS`: ``/health``, and ``/docs`` and
``/openapi.json``, which describe the API and hold no data, so that the browsable docs
work; an unknown path without a token is 401, not 404), a request-body bound (413 from the
``Content-Length`` alone, or as soon as the streamed body passes it), 503 for every route
but ``/health`` and ``/metrics`` while the service drains, and errors as
:class:`~sweworld.serve.world.schemas.ErrorBody` (never a traceback). :class:`JsonErrors`,
which the server wraps around the app, makes every other failure JSON too (a route that
raises, a request cancelled at shutdown). The idle-episode reaper runs with the app's
lifespan; the handler is closed when the app shuts down.

Requires the ``serve`` extra (FastAPI); nothing in ``sweworld`` imports this module eagerly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from sweworld.serve.world import schemas as s
from sweworld.serve.world.auth import ANONYMOUS, TokenSet
from sweworld.serve.world.handler import ServiceConfig, WorldError, WorldHandler

__all__ = ["OPEN_PATHS", "Gate", "JsonErrors", "ServiceConfig", "create_app"]

log = logging.getLogger(__name__)

#: How the token is read (and shown in the OpenAPI spec); a missing one is our 401.
_BEARER = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]

#: Routes answered while the service drains.
OPEN_WHILE_DRAINING = ("/health", "/metrics")
#: A body declared at most this much over the bound is read away before its 413 (a body
#: left unread when the connection closes resets it, and the client never reads the 413).
DRAIN_BYTES = 1 << 20
#: Paths answered without a token: the health check, and the API's description.
OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/openapi.json"})


def _error(exc: WorldError) -> JSONResponse:
    return JSONResponse(
        exc.body.model_dump(exclude_none=True), status_code=exc.status, headers=exc.headers
    )


def _has_body(scope: dict) -> bool:
    """Whether the request head announces a body (a length over 0, or chunks)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _bearer(scope: dict) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


class Gate:
    """ASGI middleware in front of every route, deciding from the request head alone:
    401 without a valid bearer token (but for :data:`OPEN_PATHS`; ``tokens`` None: no
    authentication), 503 while the service drains (but for :data:`OPEN_WHILE_DRAINING`),
    then 413 for a body over ``limit`` bytes without reading it whole (its
    ``Content-Length`` is checked first, then the stream is counted and buffered up to the
    limit only). A request refused with a body unread is answered with
    ``Connection: close``: the body is never read, but for a token holder's declared at
    most :data:`DRAIN_BYTES` over the limit, read away first so that the close does not
    reset the connection before the client reads its 413. Pure ASGI: a client that disconnects
    does not cancel the route under it."""

    def __init__(self, app: Any, world: WorldHandler, limit: int, tokens: TokenSet | None = None):
        self.app = app
        self.world = world
        self.limit = limit
        self.tokens = tokens
        self.metrics = world.metrics

    async def _refuse(self, scope: dict, receive: Any, send: Any, exc: WorldError) -> None:
        self.metrics.http_error(exc.status, exc.body.error)
        if _has_body(scope):
            exc.headers = {**exc.headers, "Connection": "close"}
        await _error(exc)(scope, receive, send)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tokens, path = self.tokens, scope["path"]
        if tokens is not None and path not in OPEN_PATHS and tokens.owner(_bearer(scope)) is None:
            denied = WorldError(401, "unauthorized", "a valid bearer token is required",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
            await self._refuse(scope, receive, send, denied)
            return
        if self.world.draining and scope["path"] not in OPEN_WHILE_DRAINING:
            self.metrics.http_error(503, "draining")
            await _error(WorldError(503, "draining", "the service is shutting down"))(
                scope, receive, send
            )
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        too_large = WorldError(413, "too_large", f"the request body is over {self.limit} bytes")
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    if declared < 0:
                        too_large = WorldError(400, "bad_request", "bad Content-Length")
                    elif declared <= self.limit + DRAIN_BYTES:
                        # a token holder's body a little over the bound: read it away first,
                        # so that closing with it unread does not reset the connection (the
                        # client then loses the 413 for ECONNRESET)
                        await _drain(receive)
                    await self._refuse(scope, receive, send, too_large)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _drain(receive: Any) -> None:
    """Read a request's body and drop it (the protocol's body timeout bounds the wait)."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _send_json(send: Any, status: int, error: str, message: str) -> None:
    """Send a whole JSON error response (``ErrorBody``'s shape), built from nothing but
    the standard library so that it works whatever else failed."""
    import json

    body = json.dumps({"error": error, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class JsonErrors:
    """ASGI wrapper (outermost, around the whole app) that answers every failure with an
    :class:`~sweworld.serve.world.schemas.ErrorBody`'s JSON: a request whose app raised, or
    returned, without starting a response gets 500, and one cancelled while the server
    stops (uvicorn's graceful-shutdown timeout) gets 503 ``stopped``; where uvicorn's own
    would be plain text ``Internal Server Error``. A response already started is left to
    uvicorn (it closes the connection)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if not started:
                with contextlib.suppress(Exception):
                    await _send_json(send, 503, "stopped", "the service stopped before answering")
            raise
        except Exception:
            if not started:
                log.exception("internal error on %s %s", scope.get("method"), scope.get("path"))
                await _send_json(send, 500, "internal", "internal error (see the server's log)")
        else:
            if not started:
                await _send_json(send, 500, "internal", "the request was not answered")


def create_app(config: ServiceConfig, handler: WorldHandler | None = None) -> FastAPI:
    """The world service's app (``handler`` is made from ``config`` when not given; the
    app closes it at shutdown either way)."""
    world = handler if handler is not None else WorldHandler(config)
    tokens = TokenSet(config.tokens)
    if config.no_auth:
        log.warning("the world service runs WITHOUT authentication (--no-auth): anyone who "
                    "reaches the port can run episodes")  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        reaper = asyncio.create_task(world.reaper())
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.get_running_loop().run_in_executor(None, world.close)

    app = FastAPI(
        title="sweworld world service",
        version=s.API_VERSION,
        description="Episodes of the sweworld world model over HTTP (see "
        "sweworld.serve.world.schemas). Every route but /health needs "
        "`Authorization: Bearer <token>`.",
        lifespan=lifespan,
    )
    app.state.world = world

    def owner(creds: Credentials) -> str:
        if config.no_auth:
            return ANONYMOUS
        found = tokens.owner(creds.credentials if creds is not None else None)
        if found is None:
            raise WorldError(401, "unauthorized", "a valid bearer token is required",
                             headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        return found

    @app.exception_handler(WorldError)
    async def world_error(request: Request, exc: WorldError) -> JSONResponse:
        world.metrics.http_error(exc.status, exc.body.error)
        return _error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # the router's own 404 / 405 in the service's shape, not FastAPI's {"detail": ...}
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        world.metrics.http_error(exc.status_code, code)
        return _error(WorldError(exc.status_code, code, message, headers=exc.headers))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', '')}"
            for err in exc.errors()[:10]
        )
        world.metrics.http_error(422, "invalid")
        return _error(WorldError(422, "invalid", fields or "invalid request"))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        world.metrics.http_error(500, "internal")
        return _error(WorldError(500, "internal", "internal error (see the server's log)"))

    app.add_middleware(
        Gate, world=world, limit=config.max_body_bytes, tokens=None if config.no_auth else tokens
    )
    from sweworld.serve.world import logs, metrics

    metrics.install(app, world.metrics)
    logs.add_secrets(config.tokens)
    logs.install(app)  # outermost: its request id covers everything

    # ------------------------------------------------------------------ routes

    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": s.ErrorBody} for code in (401, 404, 409, 413, 422, 429, 503, 504)
    }
    Owner = Depends(owner)

    @app.get("/health", response_model=s.Health, tags=["operations"])
    def health() -> s.Health:
        return world.health()

    @app.get("/metrics", tags=["operations"], responses={401: {"model": s.ErrorBody}})
    def prometheus(who: str = Owner) -> Response:
        body, content_type = world.metrics.render()
        return Response(body, media_type=content_type)

    v1 = "/v1/episodes"

    @app.post(v1, response_model=s.EpisodeStarted, responses=errors, tags=["episodes"])
    async def create(body: s.CreateEpisode, who: str = Owner) -> s.EpisodeStarted:
        return await world.create(who, body)

    @app.post(v1 + "/{episode_id}/reset", response_model=s.EpisodeStarted, responses=errors)
    async def reset(episode_id: str, body: s.ResetEpisode, who: str = Owner) -> s.EpisodeStarted:
        return await world.reset(who, episode_id, body)

    @app.post(v1 + "/{episode_id}/step", response_model=s.StepResponse, responses=errors)
    async def step(episode_id: str, body: s.StepRequest, who: str = Owner) -> s.StepResponse:
        return await world.step(who, episode_id, body)

    @app.post(v1 + "/{episode_id}/end", response_model=s.StepResponse, responses=errors)
    async def end(episode_id: str, body: s.EndRequest, who: str = Owner) -> s.StepResponse:
        return await world.end(who, episode_id, body)

    @app.post(v1 + "/{episode_id}/snapshot", response_model=s.SnapshotTaken, responses=errors)
    async def snapshot(episode_id: str, who: str = Owner) -> s.SnapshotTaken:
        return await world.snapshot(who, episode_id)

    @app.post(v1 + "/{episode_id}/restore", response_model=s.EpisodeState, responses=errors)
    async def restore(episode_id: str, body: s.RestoreRequest, who: str = Owner) -> s.EpisodeState:
        return await world.restore(who, episode_id, body)

    @app.post(v1 + "/{episode_id}/fork", response_model=s.EpisodeStarted, responses=errors)
    async def fork(episode_id: str, who: str = Owner) -> s.EpisodeStarted:
        return await world.fork(who, episode_id)

    @app.get(v1 + "/{episode_id}/patch", response_model=s.PatchResponse, responses=errors)
    async def patch(episode_id: str, who: str = Owner) -> s.PatchResponse:
        return await world.patch(who, episode_id)

    @app.post(v1 + "/{episode_id}/reward", response_model=s.RewardResponse, responses=errors)
    async def reward(episode_id: str, body: s.RewardRequest, who: str = Owner) -> s.RewardResponse:
        return await world.reward(who, episode_id, body)

    @app.get(v1 + "/{episode_id}", response_model=s.EpisodeState, responses=errors)
    def state(episode_id: str, who: str = Owner) -> s.EpisodeState:
        return world.state(who, episode_id)

    @app.get(v1 + "/{episode_id}/trajectory", response_model=s.TrajectoryResponse,
             responses=errors)  # fmt: skip
    async def trajectory(episode_id: str, who: str = Owner) -> s.TrajectoryResponse:
        return await world.trajectory(who, episode_id)

    @app.delete(v1 + "/{episode_id}", response_model=s.Closed, responses=errors)
    async def close(episode_id: str, who: str = Owner) -> s.Closed:
        return await world.delete(who, episode_id)

    return app
