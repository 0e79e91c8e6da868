"""The world service's FastAPI app: a thin router over :class:`WorldHandler`.

``create_app(config)`` builds the app: the routes of :mod:`sweworld.serve.world.schemas`,
bearer-token authentication (every route but ``/health``; ``/docs`` and
``/openapi.json`` are FastAPI's own and open), a request-body bound (413 from the
``Content-Length`` alone, or as soon as the streamed body passes it), 503 for every route
but ``/health`` and ``/metrics`` while the service drains, and errors as
:class:`~sweworld.serve.world.schemas.ErrorBody` (never a traceback). The idle-episode
reaper runs with the app's lifespan; the handler is closed when the app shuts down.

Requires the ``serve`` extra (FastAPI); nothing in ``sweworld`` imports this module eagerly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sweworld.serve.world import schemas as s
from sweworld.serve.world.auth import ANONYMOUS, TokenSet
from sweworld.serve.world.handler import WorldConfig, WorldError, WorldHandler

__all__ = ["WorldConfig", "create_app"]

log = logging.getLogger(__name__)

#: How the token is read (and shown in the OpenAPI spec); a missing one is our 401.
_BEARER = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]

#: Routes answered while the service drains.
OPEN_WHILE_DRAINING = ("/health", "/metrics")


def _error(exc: WorldError) -> JSONResponse:
    return JSONResponse(
        exc.body.model_dump(exclude_none=True), status_code=exc.status, headers=exc.headers
    )


class Gate:
    """ASGI middleware in front of every route: 503 while the service drains (but for
    :data:`OPEN_WHILE_DRAINING`), and 413 for a body over ``limit`` bytes without reading
    it whole (its ``Content-Length`` is checked first, then the stream is counted and
    buffered up to the limit only). Pure ASGI: a client that disconnects does not cancel
    the route under it."""

    def __init__(self, app: Any, world: WorldHandler, limit: int):
        self.app = app
        self.world = world
        self.limit = limit
        self.metrics = world.metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
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
                    self.metrics.http_error(too_large.status, too_large.body.error)
                    await _error(too_large)(scope, receive, send)
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
                self.metrics.http_error(413, "too_large")
                await _error(too_large)(scope, receive, send)
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


def create_app(config: WorldConfig, handler: WorldHandler | None = None) -> FastAPI:
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

    app.add_middleware(Gate, world=world, limit=config.max_body_bytes)
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
