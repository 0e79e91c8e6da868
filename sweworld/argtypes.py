"""argparse types for the command lines: numbers refused by the parser, with a one-line
message, when they are not numbers, not finite or out of their range (a count of 0 workers
or a negative limit is found out before anything runs, not mid-run).

Imports nothing of sweworld.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

__all__ = ["at_least", "bounded"]


def bounded(kind: type, low: float, high: float = math.inf) -> Callable[[str], Any]:
    """An argparse type: a ``kind`` (int or float) in ``[low, high]``, finite (no ``inf``,
    no ``nan``)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or not low <= value <= high:
            if high == math.inf:
                raise argparse.ArgumentTypeError(f"must be at least {low:g}, got {text}")
            raise argparse.ArgumentTypeError(f"{text} is out of range [{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low``."""
    return bounded(int, low)
