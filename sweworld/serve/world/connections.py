"""The world service's connections: timeouts, a connection limit, JSON errors on the wire.

uvicorn's own HTTP protocol leaves a fresh connection open for ever while it sends nothing
or half a request head (its keep-alive timer is armed only after a first response), waits
for a body as long as the client trickles it, and accepts connections until the process
runs out of file descriptors, after which ``accept`` fails and nothing, ``/health``
included, is answered. Measured before this module: 560 idle connections under a
512-descriptor limit left ``/health`` unanswered for 20 s.

:func:`protocol_class` returns a subclass of uvicorn's h11 protocol (passed to
``uvicorn.Config(http=...)``) that, per connection:

- closes it when a request head is not complete ``header_timeout_s`` after the connection
  opened or after the first byte of a new request on a kept-alive one (slowloris);
- answers 408 (JSON) and closes it when a body is not complete ``body_timeout_s`` after its
  head (the route under it sees a disconnect);
- keeps it at most ``keepalive_timeout_s`` between requests (uvicorn's keep-alive timer);
- counts it in a :class:`ConnectionTracker`: past ``max_connections`` open, the connection
  idle for longest (no request being answered) is closed to make room; when every one is
  answering a request, the new one gets 503 (JSON) and is closed. The bound sits below the
  process's descriptor limit (:func:`default_max_connections`), so ``accept`` never fails
  for want of one and ``/health`` is answered at any number of idle clients;
- answers a request uvicorn cannot parse with 400 as JSON (uvicorn's is plain text).

:class:`ConnectionTracker.abort_all` answers every request in flight with 503 (JSON) and
closes every connection: what a second SIGTERM does before the process exits.
"""

from __future__ import annotations

import asyncio
import collections
import http
import json
import logging
import math
import resource
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "ACCEPT_BURST",
    "FD_RESERVE",
    "LISTEN_BACKLOG",
    "ConnectionLimits",
    "ConnectionTracker",
    "connection_budget",
    "default_max_connections",
    "error_bytes",
    "fd_limit",
    "protocol_class",
]

log = logging.getLogger("sweworld.serve.world")

#: Descriptors kept out of the connection budget whatever the limit: the listening socket,
#: logs, the tasks file, Python's own, the session manager's reserve.
FD_RESERVE = 64
#: Connections asyncio accepts per wake-up of the listening socket (uvicorn's ``backlog``,
#: which asyncio also uses as the burst of ``accept`` calls before any connection is seen
#: by the protocol): each burst takes descriptors before the tracker can close idle
#: connections, so two bursts are kept out of the connection budget. The kernel's queue
#: of pending connections stays long (:data:`LISTEN_BACKLOG`, set again after start).
ACCEPT_BURST = 64
LISTEN_BACKLOG = 2048
#: Largest connection limit chosen automatically (a limit of millions of descriptors does
#: not make millions of connections a good idea).
MAX_AUTO_CONNECTIONS = 10_000


def fd_limit() -> int:
    """The process's soft limit on open descriptors (``RLIMIT_NOFILE``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def default_max_connections(nofile: int | None = None) -> int:
    """The connection limit for a descriptor limit of ``nofile``: half of what
    :data:`FD_RESERVE` and two accept bursts leave (:func:`connection_budget`), the other
    half for the sessions (each live session holds a few descriptors: its sandbox
    server's pipes, its workspace), at least 8."""
    return max(8, min(MAX_AUTO_CONNECTIONS, connection_budget(nofile) // 2))


def connection_budget(nofile: int | None = None) -> int:
    """The most connections a descriptor limit of ``nofile`` allows at all: the limit less
    :data:`FD_RESERVE` and two :data:`ACCEPT_BURST` (``--max-connections`` at most this)."""
    nofile = fd_limit() if nofile is None else nofile
    return nofile - FD_RESERVE - 2 * ACCEPT_BURST


def error_bytes(status: int, error: str, message: str) -> bytes:
    """A whole ``HTTP/1.1`` error response whose body is the service's ``ErrorBody`` JSON,
    with ``Connection: close`` (written straight to a transport that is then closed)."""
    body = json.dumps({"error": error, "message": message}).encode()
    phrase = http.HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may take and how many may be open (see the module docstring).

    Attributes:
        header_timeout_s: a request head must be complete this long after it began.
        body_timeout_s: a request body must be complete this long after its head.
        keepalive_timeout_s: an idle kept-alive connection is closed after this long.
        max_connections: connections open at once (None: :func:`default_max_connections`).
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_connections: int | None = None

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
                or not 0 < value <= 3600
            ):
                raise ValueError(f"{name} must be a number of seconds in (0, 3600], got {value!r}")
        if self.max_connections is not None:
            limit = connection_budget()
            value = self.max_connections
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
                raise ValueError(
                    f"max_connections must be an integer in [1, {limit}] (the descriptor "
                    f"limit {fd_limit()} less {FD_RESERVE + 2 * ACCEPT_BURST} kept in "
                    f"reserve), got {value!r}"
                )

    @property
    def connections(self) -> int:
        """The connection limit in force."""
        return self.max_connections or default_max_connections()


class ConnectionTracker:
    """The open connections of one server, least recently active first (activity: a
    request head completed or a response sent; bytes of a head that never completes do
    not count, so a slowloris connection is evicted before a working client's).

    Called only on the event loop's thread (the protocol's callbacks). ``metrics`` (a
    :class:`~sweworld.serve.world.metrics.Metrics`, optional) gets the count and why each
    connection was closed by the service.
    """

    def __init__(self, limits: ConnectionLimits, metrics: Any = None) -> None:
        self.limits = limits
        self.max_connections = limits.connections
        self.metrics = metrics
        self._open: collections.OrderedDict[int, TrackedProtocol] = collections.OrderedDict()
        self.closed: collections.Counter[str] = collections.Counter()

    def __len__(self) -> int:
        return len(self._open)

    def _count(self, reason: str) -> None:
        self.closed[reason] += 1
        if self.metrics is not None:
            self.metrics.connection_closed(reason)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.http_connections.set(len(self._open))

    def admit(self, proto: TrackedProtocol) -> bool:
        """Count a new connection; past the limit close the longest-idle other one, or
        refuse this one (False) when every other is answering a request."""
        self._open[id(proto)] = proto
        while len(self._open) > self.max_connections:
            victim = next((p for p in self._open.values() if p is not proto and not p.busy), None)
            if victim is None:
                del self._open[id(proto)]
                self._count("refused")
                self._gauge()
                return False
            del self._open[id(victim)]
            self._count("evicted")
            victim.transport.close()
        self._gauge()
        return True

    def touch(self, proto: TrackedProtocol) -> None:
        """``proto`` was active: it becomes the last to be evicted."""
        if id(proto) in self._open:
            self._open.move_to_end(id(proto))

    def discard(self, proto: TrackedProtocol) -> None:
        """``proto``'s connection is gone."""
        if self._open.pop(id(proto), None) is not None:
            self._gauge()

    def count(self, reason: str) -> None:
        """Record that the service closed a connection for ``reason``."""
        self._count(reason)

    def abort_all(self, message: str) -> int:
        """Answer every request in flight 503 (JSON, ``error: stopped``) and close every
        connection (the loop writes what it can before the process exits); how many
        requests were in flight."""
        answered = 0
        for proto in list(self._open.values()):
            if proto.abandon(503, "stopped", message):
                answered += 1
            proto.transport.close()
        self._open.clear()
        self._gauge()
        return answered


class TrackedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the timeouts and the tracking of the module docstring
    (:func:`protocol_class` binds it to a tracker)."""

    tracker: ConnectionTracker

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ state

    @property
    def busy(self) -> bool:
        """A request is being answered (its head arrived, its response is not complete)."""
        return self.cycle is not None and not self.cycle.response_complete

    def abandon(self, status: int, error: str, message: str) -> bool:
        """Answer the request in flight with a JSON error now, when its response has not
        started (the route under it then sees a disconnect); whether one was answered."""
        cycle = self.cycle
        if cycle is None or cycle.response_started or self.transport.is_closing():
            return False
        self.transport.write(error_bytes(status, error, message))
        cycle.response_started = cycle.response_complete = True
        cycle.disconnected = True  # the app's receive() says disconnect; its sends are dropped
        cycle.message_event.set()
        return True

    # ------------------------------------------------------------------ timers

    def _arm(self, seconds: float, callback: Any) -> asyncio.TimerHandle:
        return self.loop.call_later(seconds, callback)

    def _cancel_header(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and not self.busy:
            self.tracker.count("header_timeout")
            self.transport.close()

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        self.tracker.count("body_timeout")
        seconds = self.tracker.limits.body_timeout_s
        self.abandon(408, "timeout", f"the request body was not complete within {seconds:g} s")
        self.transport.close()

    def _after_events(self) -> None:
        """Arm or cancel the timers from the parser's state after bytes were handled."""
        if self.transport.is_closing():
            self._cancel_header()
            self._cancel_body()
            return
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._cancel_header()
        if state is h11.SEND_BODY and self.busy:
            if self._body_timer is None:
                self._body_timer = self._arm(self.tracker.limits.body_timeout_s, self._body_timeout)
        else:
            self._cancel_body()

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.tracker.admit(self):
            transport.write(error_bytes(503, "overloaded", "too many connections; retry later"))
            transport.close()
            return
        self._header_timer = self._arm(self.tracker.limits.header_timeout_s, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header()
        self._cancel_body()
        self.tracker.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        idle = self.conn.their_state is h11.IDLE
        if self._header_timer is None and idle:
            self._header_timer = self._arm(
                self.tracker.limits.header_timeout_s, self._header_timeout
            )
        super().data_received(data)
        if idle and self.conn.their_state is not h11.IDLE:
            self.tracker.touch(self)  # a whole head: activity (a trickle of bytes is not)
        self._after_events()

    def on_response_complete(self) -> None:
        self.tracker.touch(self)
        super().on_response_complete()
        self._after_events()
        # a pipelined head that is still partial: it too has header_timeout_s
        if (
            self._header_timer is None
            and not self.transport.is_closing()
            and self.conn.their_state is h11.IDLE
            and self.conn.trailing_data[0]
        ):
            self._header_timer = self._arm(
                self.tracker.limits.header_timeout_s, self._header_timeout
            )

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP: 400 as JSON (uvicorn's own is plain text)."""
        self.tracker.count("bad_request")
        self.transport.write(error_bytes(400, "bad_request", msg))
        self.transport.close()


def protocol_class(tracker: ConnectionTracker) -> type[TrackedProtocol]:
    """A :class:`TrackedProtocol` subclass bound to ``tracker``, for
    ``uvicorn.Config(http=...)``."""
    return type("WorldHttpProtocol", (TrackedProtocol,), {"tracker": tracker})
