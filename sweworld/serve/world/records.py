"""What the world service's handler keeps per live episode (:class:`EpisodeRecord`) and per
owner (:class:`OwnerWindows`); :mod:`sweworld.serve.world.handler` holds them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sweworld.env import Episode
from sweworld.serve.world.auth import RateWindow
from sweworld.serve.world.components import Lease

__all__ = ["EpisodeRecord", "OwnerWindows"]


@dataclass
class EpisodeRecord:
    """One live episode of the service."""

    id: str
    owner: str
    episode: Episode
    lease: Lease | None = None  # the shared parts it uses (given back when it closes)
    forked: bool = False
    snapshots: int = 0  # held since the last reset (reserved before a snapshot runs)
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False

    @property
    def live(self) -> bool:
        """Whether it holds (or may be about to hold) a session."""
        return self.busy or self.episode.session is not None


@dataclass
class OwnerWindows:
    """One owner's rate windows: steps and creations per minute."""

    steps: RateWindow
    creates: RateWindow
