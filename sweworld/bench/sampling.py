"""Seeded, stratified samples: every stratum represented, the same sample for the same seed.

:func:`stratified_sample` orders the items by a nested round robin over their strata
(``key(item)`` is a tuple of levels, e.g. ``(command kind, repository)`` or ``(label,
repository)``): the first level's values take turns, and within each value the next
level's values take turns, each stratum's items in a seeded shuffled order. The first
``limit`` items of that order are the sample: as balanced as the data allows on the first
level, spread over the second. Linear in the number of items (plus sorting the keys).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

__all__ = ["stratified_order", "stratified_sample"]

T = TypeVar("T")


def _rng(seed: int, path: tuple[Hashable, ...]) -> random.Random:
    """A generator for one stratum: depends on the seed and the stratum's name only (not on
    the order of the input or on other strata)."""
    digest = hashlib.sha256(repr((seed, path)).encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def _interleave(groups: list[list[T]]) -> list[T]:
    out: list[T] = []
    longest = max((len(g) for g in groups), default=0)
    for i in range(longest):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def _order(
    items: list[tuple[tuple[Hashable, ...], Any, T]],
    depth: int,
    seed: int,
    path: tuple[Hashable, ...],
) -> list[T]:
    if not items:
        return []
    if depth >= len(items[0][0]):
        ordered = sorted(items, key=lambda kv: kv[1])  # a stable id first, then shuffled
        _rng(seed, path).shuffle(ordered)
        return [item for _, _, item in ordered]
    groups: dict[Hashable, list[tuple[tuple[Hashable, ...], Any, T]]] = {}
    for entry in items:
        groups.setdefault(entry[0][depth], []).append(entry)
    names = sorted(groups, key=repr)
    _rng(seed, (*path, "order")).shuffle(names)  # which stratum goes first: seeded too
    return _interleave([_order(groups[n], depth + 1, seed, (*path, n)) for n in names])


def stratified_order(
    items: Sequence[T],
    key: Callable[[T], tuple[Hashable, ...]],
    *,
    seed: int = 0,
    ident: Callable[[T], Any] | None = None,
) -> list[T]:
    """All ``items`` in the nested round-robin order described in the module docstring.

    ``ident(item)`` (default: the position) makes the order independent of the input's
    order: two runs over the same items listed differently give the same order when ids
    are given. Every key must have the same number of levels.
    """
    keyed = [(tuple(key(item)), ident(item) if ident else i, item) for i, item in enumerate(items)]
    if len({len(k) for k, _, _ in keyed}) > 1:
        raise ValueError("every stratum key must have the same number of levels")
    return _order(keyed, 0, seed, ())


def stratified_sample(
    items: Sequence[T],
    key: Callable[[T], tuple[Hashable, ...]],
    limit: int | None,
    *,
    seed: int = 0,
    ident: Callable[[T], Any] | None = None,
) -> list[T]:
    """The first ``limit`` items of :func:`stratified_order` (all of them for None)."""
    ordered = stratified_order(items, key, seed=seed, ident=ident)
    return ordered if limit is None else ordered[: max(limit, 0)]
