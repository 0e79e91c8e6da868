"""Worlds shared by the world service's episodes, by lease.

Episodes whose configs agree on :data:`COMPONENT_KEYS` share one
:class:`~sweworld.world.World`: one executor, one rewarder and (for simulated executors)
one batching model, as :class:`~sweworld.env.EnvPool`'s
episodes do. :class:`Components` hands them out as :class:`Lease` objects and counts them:
a set of parts no episode holds any more is closed (its model's memory freed), except
the server's own (the default config's parts stay, so that the common case never reloads
a model).

Each owner (token) may hold parts of at most ``max_per_owner`` distinct non-default
configs at once. The limit is per owner, never global: what one token holds cannot make
another token's create fail (the service's memory is bounded by tokens x the limit).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sweworld.env import EpisodeConfig
from sweworld.world import World

__all__ = ["COMPONENT_KEYS", "Components", "ConfigsExhausted", "Lease", "component_key"]

log = logging.getLogger(__name__)

#: The fields that decide which executor and rewarder an episode needs.
COMPONENT_KEYS = ("executor", "model", "mode", "reward", "reward_preset", "swr_stages", "swr_model")


class ConfigsExhausted(Exception):
    """An owner already holds parts of ``max_per_owner`` distinct configs."""


def component_key(config: EpisodeConfig) -> tuple[str, ...]:
    """The tuple that names ``config``'s shared parts."""
    return tuple(
        json.dumps(getattr(config, k), sort_keys=True, default=str) for k in COMPONENT_KEYS
    )


@dataclass
class _Entry:
    refs: int = 0
    parts: World | None = None  # the config's world (lm, executor, rewarder) once built
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(eq=False)
class Lease:
    """One episode's hold on a set of shared parts (give it back with
    :meth:`Components.release`, once)."""

    key: tuple[str, ...]
    owner: str
    executor: Any
    rewarder: Any
    released: bool = False


class Components:
    """The shared parts, reference-counted (see the module docstring).

    Args:
        manager: the session manager the rewarders use.
        default: the server's episode config (its parts are never closed before
            :meth:`close`, nor counted against an owner's limit).
        max_per_owner: distinct non-default configs one owner may hold at once.
    """

    def __init__(self, manager: Any, default: EpisodeConfig, max_per_owner: int):
        self.manager = manager
        self.default_key = component_key(default)
        self.max_per_owner = max_per_owner
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, ...], _Entry] = {}
        self._held: dict[str, Counter[tuple[str, ...]]] = {}
        self._closed = False

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values() if e.parts is not None)

    def held(self, owner: str) -> int:
        """Distinct non-default configs ``owner`` holds parts of now."""
        with self._lock:
            return sum(1 for k in self._held.get(owner, ()) if k != self.default_key)

    def acquire(self, owner: str, config: EpisodeConfig) -> Lease:
        """A lease on ``config``'s parts for ``owner`` (built on first use, on this thread;
        a concurrent acquire of the same key waits for that build).
        :class:`ConfigsExhausted` past the owner's limit; a build's own error otherwise."""
        key = component_key(config)
        with self._lock:
            if self._closed:
                raise RuntimeError("the service's components are closed")
            held = self._held.setdefault(owner, Counter())
            if key != self.default_key and key not in held:
                distinct = sum(1 for k in held if k != self.default_key)
                if distinct >= self.max_per_owner:
                    raise ConfigsExhausted(
                        f"this token's episodes use {distinct} distinct configs (executor, "
                        "model, mode, reward), the most allowed; delete episodes of another "
                        "config or use one already in use"
                    )
            entry = self._entries.get(key)
            build = entry is None
            if build:
                entry = self._entries[key] = _Entry()
            entry.refs += 1
            held[key] += 1
        if build:
            try:
                entry.parts = _build(config, self.manager)
            except BaseException as exc:
                entry.error = exc
                with self._lock:
                    self._entries.pop(key, None)
                raise self._undo(owner, key, entry, exc) from None
            finally:
                entry.ready.set()
        else:
            entry.ready.wait()
            if entry.error is not None or entry.parts is None:
                raise self._undo(owner, key, entry, entry.error)
        return Lease(key, owner, entry.parts.executor, entry.parts.rewarder)

    def _undo(self, owner: str, key: tuple[str, ...], entry: _Entry, exc: Any) -> BaseException:
        with self._lock:
            entry.refs -= 1
            self._forget(owner, key)
        return exc if isinstance(exc, BaseException) else RuntimeError("building parts failed")

    def _forget(self, owner: str, key: tuple[str, ...]) -> None:
        held = self._held.get(owner)
        if held is not None:
            held[key] -= 1
            if held[key] <= 0:
                del held[key]
            if not held:
                del self._held[owner]

    def share(self, lease: Lease) -> Lease:
        """A second lease on ``lease``'s parts for the same owner (a fork; never refused:
        the owner holds that config already)."""
        with self._lock:
            entry = self._entries[lease.key]
            entry.refs += 1
            self._held.setdefault(lease.owner, Counter())[lease.key] += 1
        return Lease(lease.key, lease.owner, lease.executor, lease.rewarder)

    def release(self, lease: Lease | None) -> None:
        """Give ``lease`` back; the parts no lease holds are closed (not the default's)."""
        if lease is None or lease.released:
            return
        lease.released = True
        with self._lock:
            self._forget(lease.owner, lease.key)
            entry = self._entries.get(lease.key)
            if entry is None:
                return
            entry.refs -= 1
            if entry.refs > 0 or lease.key == self.default_key or self._closed:
                return
            del self._entries[lease.key]
        if entry.parts is not None:
            log.info("closing the parts of a config no episode uses any more")
            entry.parts.close()

    def close(self) -> None:
        """Close every set of parts (at shutdown, after the episodes)."""
        with self._lock:
            self._closed = True
            entries = list(self._entries.values())
            self._entries.clear()
            self._held.clear()
        for entry in entries:
            if entry.parts is not None:
                entry.parts.close()


def _build(config: EpisodeConfig, manager: Any) -> World:
    """The world of ``config`` on the service's manager (left open by the world): its model
    wrapped in one BatchingLM so that the calls of concurrent episodes are batched, its
    executor and rewarder built now (a bad spec fails the create that asked for it)."""
    world = World.for_episode(config, batch_lm=True, manager=manager)
    try:
        world.executor  # noqa: B018 (built now, on this thread)
        world.rewarder  # noqa: B018
    except BaseException:
        world.close()
        raise
    return world
