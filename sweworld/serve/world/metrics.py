"""Prometheus metrics of the world service: episodes, steps, model calls, cache hits, HTTP.

:class:`Metrics` keeps its own :class:`prometheus_client.CollectorRegistry` (never the
process-wide default one: several services, or a test's apps, live in one process), and
:func:`install` adds an ASGI middleware that counts every request by method, **route
template** (``/v1/episodes/{episode_id}/step``, never the raw path with its ids) and status,
and times it. Every label takes values from a bounded set: paths that match no route are
``<unmatched>``, error kinds and execution sources outside a small vocabulary are ``other``;
a service that sees millions of episode ids exports the same few dozen series.

==============================================  ==============================================
metric                                          meaning
==============================================  ==============================================
``sweworld_episodes_live``                      episodes open now (gauge)
``sweworld_episodes_opened_total``              episodes created (reset, fork included)
``sweworld_episodes_closed_total``              episodes closed (by the client, expiry, drain)
``sweworld_episodes_ended_total{reason}``       episodes that reached an end, by reason
``sweworld_steps_total{outcome}``               steps: ``ok`` or the error kind
``sweworld_step_latency_seconds``               wall time of a step (histogram)
``sweworld_action_errors_total{kind}``          actions refused without running (parse, ...)
``sweworld_execution_calls_total{source}``      execution calls by who answered: ``real``,
                                                ``cache``, ``model``, ``exact``, ``hint``,
                                                ``fallback``, ``error``, ``other``
``sweworld_model_calls_total``                  model calls (every attempt of the simulator)
``sweworld_model_errors_total``                 model calls that failed (unreachable, ...)
``sweworld_cache_hits_total``                   simulated answers served from the cache
``sweworld_real_runs_total``                    commands run for real in the sandbox
``sweworld_fallbacks_total``                    conservative answers (no valid prediction)
``sweworld_http_requests_total{method,route,    every HTTP response
status}``
``sweworld_http_request_duration_seconds{       its wall time (histogram)
method,route}``
``sweworld_http_requests_in_flight``            requests being answered now (gauge)
``sweworld_http_errors_total{status,error}``    error bodies the service's handlers answered
==============================================  ==============================================

Importing this module requires ``prometheus_client`` (extra ``serve``); :func:`install`
needs nothing else (it is plain ASGI; Starlette's router, when present, names the route).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from sweworld.serve.world.logs import UNMATCHED_ROUTE, route_template

__all__ = [
    "EXECUTION_SOURCES",
    "LATENCY_BUCKETS",
    "UNMATCHED_ROUTE",
    "Metrics",
    "MetricsMiddleware",
    "install",
    "route_template",
]

#: Step and request latency buckets (seconds): from a cached answer (~1 ms) to a slow model
#: call or a real test run (minutes).
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)  # fmt: skip

#: Who answered an execution call (``info["execution_calls"][i]["info"]``).
EXECUTION_SOURCES = ("real", "cache", "model", "exact", "hint", "fallback", "error", "other")

#: Most distinct free-form label values (error kinds, end reasons) kept per label; later
#: new values are counted as ``other``.
MAX_LABEL_VALUES = 32

_LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


class _Vocabulary:
    """A label's values: the known ones, then the first ``MAX_LABEL_VALUES`` well-formed
    others seen; anything else is ``other`` (bounded cardinality whatever callers pass)."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._known = set(known)
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        text = str(value)
        if text in self._known or text in self._seen:
            return text
        if not _LABEL_VALUE.fullmatch(text):
            return "other"
        with self._lock:
            if len(self._seen) >= MAX_LABEL_VALUES:
                return "other"
            self._seen.add(text)
        return text


class Metrics:
    """The service's metrics in a registry of their own.

    The episode and step hooks are called by the service (any thread); ``render`` answers
    ``/metrics``. Every method is cheap (a few dictionary lookups) and never raises on odd
    values: an unknown error kind or reason becomes ``other``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.episodes_live = Gauge("sweworld_episodes_live", "Episodes open now", registry=reg)
        self.episodes_opened = Counter("sweworld_episodes_opened", "Episodes created", registry=reg)
        self.episodes_closed = Counter("sweworld_episodes_closed", "Episodes closed", registry=reg)
        self.episodes_ended = Counter(
            "sweworld_episodes_ended", "Episodes that reached an end", ["reason"], registry=reg
        )
        self.steps = Counter("sweworld_steps", "Steps by outcome", ["outcome"], registry=reg)
        self.step_latency = Histogram(
            "sweworld_step_latency_seconds", "Wall time of a step", buckets=LATENCY_BUCKETS,
            registry=reg,
        )  # fmt: skip
        self.action_errors = Counter(
            "sweworld_action_errors", "Actions refused without running", ["kind"], registry=reg
        )
        self.execution_calls = Counter(
            "sweworld_execution_calls", "Execution calls by who answered", ["source"],
            registry=reg,
        )  # fmt: skip
        self.model_calls_total = Counter(
            "sweworld_model_calls", "Model calls (simulator attempts)", registry=reg
        )
        self.model_errors = Counter(
            "sweworld_model_errors", "Model calls that failed", registry=reg
        )
        self.cache_hits = Counter(
            "sweworld_cache_hits", "Simulated answers from the cache", registry=reg
        )
        self.real_runs = Counter("sweworld_real_runs", "Commands run for real", registry=reg)
        self.fallbacks = Counter(
            "sweworld_fallbacks", "Conservative answers (no valid prediction)", registry=reg
        )
        self.http_requests = Counter(
            "sweworld_http_requests", "HTTP responses", ["method", "route", "status"],
            registry=reg,
        )  # fmt: skip
        self.http_latency = Histogram(
            "sweworld_http_request_duration_seconds", "Wall time of an HTTP request",
            ["method", "route"], buckets=LATENCY_BUCKETS, registry=reg,
        )  # fmt: skip
        self.http_in_flight = Gauge(
            "sweworld_http_requests_in_flight", "HTTP requests being answered", registry=reg
        )
        self.http_errors = Counter(
            "sweworld_http_errors", "Error responses of the service's handlers",
            ["status", "error"], registry=reg,
        )  # fmt: skip
        self.http_connections = Gauge(
            "sweworld_http_connections", "HTTP connections open", registry=reg
        )
        self.http_connections_closed = Counter(
            "sweworld_http_connections_closed",
            "Connections the service closed: evicted (idle, at the connection limit), "
            "refused, header_timeout, body_timeout, bad_request",
            ["reason"], registry=reg,
        )  # fmt: skip
        from sweworld.env.config import END_REASONS

        self._outcomes = _Vocabulary(("ok",))
        self._reasons = _Vocabulary(END_REASONS)
        self._action_kinds = _Vocabulary(("type", "too_deep", "too_long", "parse"))
        self._error_codes = _Vocabulary()
        self._close_reasons = _Vocabulary(
            ("evicted", "refused", "header_timeout", "body_timeout", "bad_request")
        )

    # ------------------------------------------------------------------ episodes

    def episode_opened(self) -> None:
        """An episode was created (it is live until :meth:`episode_closed`)."""
        self.episodes_opened.inc()
        self.episodes_live.inc()

    def episode_closed(self) -> None:
        """A live episode was closed (deleted, expired or drained)."""
        self.episodes_closed.inc()
        self.episodes_live.dec()

    def episode_ended(self, reason: str) -> None:
        """An episode reached its end (``submitted``, ``max_steps``, ...); it may stay open."""
        self.episodes_ended.labels(self._reasons(reason)).inc()

    # ------------------------------------------------------------------ steps

    def step_done(self, latency_s: float, error: str | None) -> None:
        """A step answered in ``latency_s`` seconds; ``error`` is its error kind (a short
        code such as ``busy``, ``finished``, ``timeout``) or None when it succeeded."""
        self.steps.labels("ok" if error is None else self._outcomes(error)).inc()
        if latency_s >= 0:
            self.step_latency.observe(latency_s)

    def model_calls(self, n: int) -> None:
        """``n`` model calls were made (the simulator's attempts of a step)."""
        if n > 0:
            self.model_calls_total.inc(n)

    def cache_hit(self) -> None:
        """A simulated answer came from the prediction cache."""
        self.cache_hits.inc()

    def observe_step_info(self, info: Mapping[str, Any]) -> None:
        """Count what a step's ``info`` says: its execution calls (who answered each: the
        sandbox, the cache, the model with its attempts, exact facts, a fallback), a refused
        action, and the episode's end reason when the step ended it."""
        if not isinstance(info, Mapping):
            return
        kind = info.get("action_error")
        if kind is not None:
            self.action_errors.labels(self._action_kinds(kind)).inc()
        calls = info.get("execution_calls")
        for call in calls if isinstance(calls, list) else ():
            call_info = call.get("info") if isinstance(call, Mapping) else None
            if isinstance(call_info, Mapping):
                self._observe_call(call_info)
        reason = info.get("reason")
        if reason is not None:
            self.episode_ended(str(reason))

    def _observe_call(self, info: Mapping[str, Any]) -> None:
        if info.get("executed"):
            source = "real"
            self.real_runs.inc()
        elif info.get("cache_hit"):  # a cached answer keeps its first answer's info
            source = "cache"
            self.cache_hit()
        else:
            raw = info.get("source")
            source = raw if raw in EXECUTION_SOURCES else "other"
            attempts = info.get("attempts")
            if isinstance(attempts, list):
                self.model_calls(len(attempts))
                failed = sum(1 for a in attempts if isinstance(a, Mapping) and a.get("error"))
                if failed:
                    self.model_errors.inc(failed)
            if source == "fallback" or info.get("fallback"):
                self.fallbacks.inc()
        self.execution_calls.labels(source).inc()

    # ------------------------------------------------------------------ HTTP

    def http_error(self, status: int, error: str | None = None) -> None:
        """The service answered an error body with ``status`` (and its ``error`` code)."""
        self.http_errors.labels(_status_label(status), self._error_codes(error or "-")).inc()

    def http_request(self, method: str, route: str, status: int, latency_s: float) -> None:
        """One HTTP response (called by the middleware; ``route`` must be a template)."""
        method = method if method in _METHODS else "OTHER"
        self.http_requests.labels(method, route, _status_label(status)).inc()
        self.http_latency.labels(method, route).observe(max(latency_s, 0.0))

    def connection_closed(self, reason: str) -> None:
        """The service closed a connection for ``reason`` (see the counter's help)."""
        self.http_connections_closed.labels(self._close_reasons(reason)).inc()

    def render(self) -> tuple[bytes, str]:
        """The body and content type of ``/metrics`` (Prometheus text format)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _status_label(status: object) -> str:
    return str(status) if isinstance(status, int) and 100 <= status <= 599 else "other"


# ---------------------------------------------------------------------- middleware


class MetricsMiddleware:
    """ASGI middleware: counts and times every HTTP request of ``app`` in ``metrics``.

    The route label is read after the request was answered (the router has then matched
    it); an exception out of the app counts as a 500 and is raised on.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, routes_of: Any = None) -> None:
        self.app = app
        self.metrics = metrics
        self.routes_of = routes_of if routes_of is not None else app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_watch(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 500))
            await send(message)

        self.metrics.http_in_flight.inc()
        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            self.metrics.http_in_flight.dec()
            route = route_template(self.routes_of, scope)
            method = str(scope.get("method", "OTHER"))
            self.metrics.http_request(method, route, status, time.perf_counter() - started)


def install(app: Any, metrics: Metrics, *, path: str | None = None) -> Metrics:
    """Count ``app``'s requests in ``metrics`` (a FastAPI / Starlette app: the middleware
    is added to it) and, when ``path`` is given and the app has no route there yet, serve
    :meth:`Metrics.render` at ``path`` with no authentication (by default the service
    serves ``/metrics`` itself, behind its own checks). Returns ``metrics``."""
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes_of=app)
    if path is not None and not any(getattr(r, "path", None) == path for r in app.routes):
        from starlette.responses import Response

        async def metrics_endpoint(request: Any) -> Response:
            body, content_type = metrics.render()
            return Response(body, media_type=content_type)

        app.add_route(path, metrics_endpoint, methods=["GET"], include_in_schema=False)
    return metrics
