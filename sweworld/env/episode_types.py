"""What an episode's calls return and raise: :class:`StepOutcome` and the
:class:`EpisodeError` family (shared by local and remote episodes; re-exported by
:mod:`sweworld.env.episode`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpisodeBusy", "EpisodeError", "EpisodeFinished", "StepOutcome"]


class EpisodeError(RuntimeError):
    """The episode cannot do what was asked (no task, not reset, closed)."""


class EpisodeFinished(EpisodeError):
    """``step`` after the episode ended; call ``reset``."""


class EpisodeBusy(EpisodeError):
    """``step`` or ``reset`` while another call of the same episode is running."""


@dataclass
class StepOutcome:
    """What one step returns (Gymnasium's 5-tuple, plus the fields by name)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):  # obs, reward, terminated, truncated, info = episode.step(a)
        return iter((self.observation, self.reward, self.terminated, self.truncated, self.info))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated
