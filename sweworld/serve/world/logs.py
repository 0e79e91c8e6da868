"""Structured logs of the world service: one JSON object per line, request ids, no secrets.

- :class:`JsonFormatter` writes each record as one line of JSON: ``time`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message`` and, when known, ``request_id``, ``episode_id``,
  ``method``, ``route`` (the route template, never the raw path), ``status``,
  ``latency_ms``, ``exception`` (a traceback: logs are for operators; HTTP bodies never
  carry one). Fields come from the record (``log.info(..., extra={"episode_id": ...})``)
  or from the request being answered (:func:`bind`).
- :func:`configure_logging` installs it (or a plain-text twin) on the root logger, once,
  and routes uvicorn's loggers through it (its access log is replaced by ours).
- :class:`RequestIdMiddleware` (ASGI) gives every request an id: the client's
  ``X-Request-ID`` when it is sane (1-128 characters of ``A-Za-z0-9._:-``), else a fresh
  one; echoes it in the response's ``X-Request-ID``; and writes one access line per request
  (logger ``sweworld.serve.world.access``).
- Secrets: nothing here reads a request body or the ``Authorization`` header; every line
  is scrubbed of ``Bearer <token>`` / ``token=<...>`` shapes and of the values given to
  :func:`add_secrets` (the service registers its tokens), in the message, its arguments and
  tracebacks alike.

Needs only the standard library (the middleware is plain ASGI).
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import itertools
import json as _json
import logging
import re
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = [
    "ACCESS_LOGGER",
    "CONTEXT_FIELDS",
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "RequestIdMiddleware",
    "TextFormatter",
    "add_secrets",
    "bind",
    "configure_logging",
    "current_request_id",
    "redact",
    "request_context",
    "route_template",
    "sane_request_id",
]

REQUEST_ID_HEADER = "x-request-id"
ACCESS_LOGGER = "sweworld.serve.world.access"
#: Request fields a line carries when known, in this order after the fixed four.
CONTEXT_FIELDS = ("request_id", "episode_id", "method", "route", "status", "latency_ms")
UNMATCHED_ROUTE = "<unmatched>"

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# "Bearer abc", "authorization: xyz", "token=abc", "api_key": "abc" (linear: no nesting).
_SECRET_SHAPES = re.compile(
    r"(?i)(\bbearer\s+|\bbasic\s+|\b(?:authorization|token|api[_-]?key|secret|password)"
    r"[\"']?\s*[:=]\s*[\"']?)(?!\[redacted\])[^\s\"',;&]+"
)
_REDACTED = "[redacted]"
_MAX_MESSAGE_CHARS = 20_000

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "sweworld_request_context", default=None
)
_secrets: set[str] = set()
_secrets_lock = threading.Lock()

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


# ---------------------------------------------------------------------- secrets


def add_secrets(values: Iterable[str]) -> None:
    """Never write these strings (the service's bearer tokens) in a log line."""
    with _secrets_lock:
        _secrets.update(v for v in values if isinstance(v, str) and len(v) >= 4)


def redact(text: str) -> str:
    """``text`` without secrets: registered ones and anything shaped like a credential."""
    text = _SECRET_SHAPES.sub(lambda m: m.group(1) + _REDACTED, text)
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _REDACTED)
    return text


# ---------------------------------------------------------------------- request context

# A fresh id is this process's random prefix and a counter: unique, and no system call per
# request (os.urandom releases the GIL, and under load getting it back costs milliseconds).
_ID_PREFIX = uuid.uuid4().hex[:12]
_ID_COUNTER = itertools.count(1)


def _new_request_id() -> str:
    return f"{_ID_PREFIX}-{next(_ID_COUNTER):x}"


def sane_request_id(value: str | bytes | None) -> str | None:
    """``value`` when it is a usable request id (1-128 of ``A-Za-z0-9._:-``), else None."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str) and _REQUEST_ID.fullmatch(value):
        return value
    return None


def current_request_id() -> str | None:
    """The id of the request being answered in this context (None outside a request)."""
    ctx = _context.get()
    return None if ctx is None else ctx.get("request_id")


def bind(**fields: Any) -> None:
    """Add fields (``episode_id=...``) to the request being answered: every later line of
    this request, and its access line, carry them. Outside a request it does nothing."""
    ctx = _context.get()
    if ctx is not None:
        ctx.update({k: v for k, v in fields.items() if k in CONTEXT_FIELDS})


@contextmanager
def request_context(**fields: Any) -> Iterator[dict[str, Any]]:
    """Lines logged inside carry ``fields`` (for work outside the middleware: a
    background expiry, a worker thread given ``contextvars.copy_context()``)."""
    ctx = {k: v for k, v in fields.items() if k in CONTEXT_FIELDS}
    token = _context.set(ctx)
    try:
        yield ctx
    finally:
        _context.reset(token)


# ---------------------------------------------------------------------- formatters


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    ctx = _context.get()
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is None and ctx is not None:
            value = ctx.get(name)
        if value is not None:
            fields[name] = value
    return fields


def _message(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception as exc:  # bad %-arguments: say so rather than lose the line
        text = f"{record.msg!r} (unformattable arguments: {type(exc).__name__})"
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[:_MAX_MESSAGE_CHARS] + f"... [{len(text) - _MAX_MESSAGE_CHARS} more]"
    return redact(text)


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _dt.datetime.fromtimestamp(record.created, tz=_dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(record),
        }
        for name, value in _record_fields(record).items():
            line[name] = value if isinstance(value, (int, float, bool)) else redact(str(value))
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = redact(record.exc_text)
        return _json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The same facts for a terminal: ``time level logger: message key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        when = _dt.datetime.fromtimestamp(record.created, tz=_dt.timezone.utc)
        text = f"{when:%Y-%m-%dT%H:%M:%S}Z {record.levelname:<7} {record.name}: {_message(record)}"
        extra = " ".join(f"{k}={redact(str(v))}" for k, v in _record_fields(record).items())
        if extra:
            text += " " + extra
        if record.exc_info:
            text += "\n" + redact(self.formatException(record.exc_info))
        return text


_HANDLER_MARK = "_sweworld_serve_handler"


def configure_logging(
    level: int | str = "INFO", json: bool = True, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log line (the service's, sweworld's, uvicorn's) to ``stream`` (stderr)
    as JSON lines (``json=True``) or text, at ``level`` and above. Calling it again
    replaces the handler it installed (not others'). uvicorn's own access log is silenced
    (it writes raw paths with their query strings); :class:`RequestIdMiddleware` writes
    ours. Returns the handler."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        uv = logging.getLogger(name)
        for old in list(uv.handlers):
            uv.removeHandler(old)
        uv.propagate = True
    access = logging.getLogger("uvicorn.access")
    for old in list(access.handlers):
        access.removeHandler(old)
    access.propagate = False
    access.disabled = True
    return handler


# ---------------------------------------------------------------------- middleware


def route_template(app: Any, scope: Mapping[str, Any]) -> str:
    """The template of the route that answered ``scope`` (``/v1/episodes/{episode_id}``),
    or ``<unmatched>``: Starlette's ``scope["route"]`` once its router matched, else the
    first route of ``app.routes`` that matches fully (or only by method)."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    partial = None
    for candidate in getattr(app, "routes", ()) or ():
        matches = getattr(candidate, "matches", None)
        candidate_path = getattr(candidate, "path", None)
        if matches is None or not isinstance(candidate_path, str):
            continue
        try:
            match, _ = matches(scope)
        except Exception:
            continue
        name = getattr(match, "name", "")
        if name == "FULL":
            return candidate_path
        if name == "PARTIAL" and partial is None:
            partial = candidate_path
    return partial or UNMATCHED_ROUTE


class RequestIdMiddleware:
    """ASGI middleware: a request id per HTTP request (the client's ``X-Request-ID`` when
    sane, else a new one), echoed in the response, bound to every line logged while the
    request is answered, and one access line at its end (method, route template, status,
    latency, episode id when the path has one). Bodies and headers are never logged."""

    def __init__(self, app: ASGIApp, routes_of: Any = None, access_log: bool = True) -> None:
        self.app = app
        self.routes_of = routes_of if routes_of is not None else app
        self.access_log = access_log
        self.log = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers") or ():
            if name.lower() == b"x-request-id":
                given = sane_request_id(value)
                break
        request_id = given or _new_request_id()
        ctx: dict[str, Any] = {"request_id": request_id, "method": str(scope.get("method", ""))}
        token = _context.set(ctx)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        header = (REQUEST_ID_HEADER.encode(), request_id.encode())

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 500))
                headers = [
                    (k, v) for k, v in message.get("headers") or () if k.lower() != header[0]
                ]
                message["headers"] = [*headers, header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            ctx["route"] = route_template(self.routes_of, scope)
            ctx["status"] = status
            ctx["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
            params = scope.get("path_params")
            if "episode_id" not in ctx and isinstance(params, Mapping):
                episode = sane_request_id(str(params.get("episode_id", "")))
                if episode is not None:
                    ctx["episode_id"] = episode
            if self.access_log:
                level = logging.ERROR if status >= 500 else logging.INFO
                self.log.log(level, "%s %s %s", ctx["method"], ctx["route"], status)
            _context.reset(token)


def install(app: Any, access_log: bool = True) -> None:
    """Add :class:`RequestIdMiddleware` to a FastAPI / Starlette ``app`` (add it after the
    metrics middleware so that it is the outermost: its id then covers everything)."""
    app.add_middleware(RequestIdMiddleware, routes_of=app, access_log=access_log)
