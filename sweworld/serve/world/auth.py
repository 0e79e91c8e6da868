"""Bearer tokens and per-token quotas of the world service.

A token is never stored in a log or a response: an episode's owner is the token's
:func:`owner_id` (a short hash). Quotas are sliding one-minute windows per owner.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import threading
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ANONYMOUS", "RateWindow", "TokenSet", "owner_id", "read_tokens_file"]

#: The owner of every episode when the service runs with ``--no-auth``.
ANONYMOUS = "anonymous"


def owner_id(token: str) -> str:
    """A stable, non-reversible name for a token (what logs and episodes record)."""
    return "tok-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def read_tokens_file(path: str | Path) -> list[str]:
    """Tokens from a file, one per line (blank lines and ``#`` comments skipped)."""
    tokens = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            tokens.append(line)
    return tokens


class TokenSet:
    """The accepted bearer tokens; :meth:`owner` compares in constant time per token."""

    def __init__(self, tokens: Iterable[str]):
        self._tokens = [t.encode("utf-8", "surrogatepass") for t in tokens if t]
        for token in self._tokens:
            if len(token) < 8 or any(c in token for c in b" \t\r\n"):
                raise ValueError("a token must be at least 8 characters, without spaces")

    def __len__(self) -> int:
        return len(self._tokens)

    def owner(self, presented: str | None) -> str | None:
        """The owner id of ``presented`` when it is one of the tokens, else None."""
        if not presented:
            return None
        given = presented.encode("utf-8", "surrogatepass")
        found = False
        for token in self._tokens:  # no early exit: the time does not tell which matched
            found |= hmac.compare_digest(given, token)
        return owner_id(presented) if found else None


class RateWindow:
    """At most ``limit`` events per ``window_s`` seconds (a sliding window; thread-safe)."""

    def __init__(self, limit: int, window_s: float = 60.0):
        self.limit = limit
        self.window_s = window_s
        self._events: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def take(self, now: float | None = None) -> float | None:
        """Record one event and return None, or return the seconds to wait (nothing
        recorded) when the window is full."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._events and now - self._events[0] >= self.window_s:
                self._events.popleft()
            if len(self._events) >= self.limit:
                return max(0.0, self.window_s - (now - self._events[0]))
            self._events.append(now)
            return None
