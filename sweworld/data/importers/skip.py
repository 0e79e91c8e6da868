"""What an importer yields for a unit it could not read (its own module: every importer and
the package's ``__init__`` import it, and nothing of theirs)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Skip"]


@dataclass(frozen=True)
class Skip:
    """A unit an importer could not read (a malformed trajectory, a report without
    ``resolved``, ...): counted with its reason in the import summary."""

    unit: str
    reason: str
