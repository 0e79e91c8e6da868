"""``ast.parse`` behind one process-wide lock.

CPython 3.11 keeps the recursion depth of its C-to-Python AST conversion in interpreter-wide
state: two threads parsing at once (an environment pool stepping many sessions, the world
service) can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905). Every parse in sweworld goes through :func:`parse`; the lock costs
nothing measurable, since parsing holds the GIL anyway.

:func:`parse_shared` keeps recent trees: a simulated step reads the same unchanged files
as the step before it (collection, import checks, reachability), and parsing them again was
about half of a step's time on a repository like pytest. Its memory is bounded by
an upper estimate, 350 bytes per token of source (measured: ~150 on ordinary code, up to
~340 on code made of the smallest statements), at most ``SWEWORLD_AST_CACHE_MB`` (default
256) megabytes, least recently used out first; a file whose trees would take over a quarter
of that is parsed every time.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = [
    "TextCache",
    "cache_limit",
    "parse",
    "parse_shared",
    "strip_docstrings",
    "text_key",
    "tree_cost",
]

_LOCK = threading.Lock()
_TOKEN = re.compile(r"\w+|[^\w\s]")
#: an upper estimate of a tree's memory per token of its source
BYTES_PER_TOKEN = 350
_DEFAULT_MB = 256.0
_MISSING = object()


def text_key(*texts: str | None) -> tuple[bytes, ...]:
    """A key for values computed from ``texts``: their digests (``b""`` for None), so a
    cache keyed by it does not keep the texts alive."""
    return tuple(
        b"" if t is None
        else hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        for t in texts
    )  # fmt: skip


class TextCache:
    """Values computed from texts under :func:`text_key` keys, least recently used out
    first, at most ``limit`` in total cost (an int, or a function read on every insert); a
    value costing over a quarter of the limit is not kept. Thread-safe."""

    def __init__(self, limit: int | Callable[[], int]):
        self._limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[bytes, ...], tuple[Any, int]] = OrderedDict()
        self._cost = 0

    def limit(self) -> int:
        return self._limit() if callable(self._limit) else self._limit

    def get(self, key: tuple[bytes, ...], default: Any = None) -> Any:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return default
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: tuple[bytes, ...], value: Any, cost: int = 1) -> None:
        limit = self.limit()
        if cost * 4 > limit:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, cost)
            self._cost += cost
            while self._items and self._cost > limit:
                _, (_, dropped) = self._items.popitem(last=False)
                self._cost -= dropped

    def computed(self, compute: Callable[..., Any], *texts: str | None) -> Any:
        """``compute(*texts)``, kept (cost 1 each)."""
        key = text_key(*texts)
        found = self.get(key, _MISSING)
        if found is _MISSING:
            found = compute(*texts)
            self.put(key, found)
        return found


def cache_limit() -> int:
    """The estimated bytes of trees :func:`parse_shared` keeps (``SWEWORLD_AST_CACHE_MB``;
    0 keeps none; a value that is not a finite number: the default)."""
    try:
        mb = float(os.environ.get("SWEWORLD_AST_CACHE_MB", _DEFAULT_MB))
    except ValueError:
        mb = _DEFAULT_MB
    if not math.isfinite(mb):
        mb = _DEFAULT_MB
    return int(min(max(mb, 0.0), 1e6) * 1_000_000)


def tree_cost(source: str) -> int:
    """An upper estimate of the memory of ``source``'s tree, in bytes (linear time)."""
    return _TOKEN.subn("", source)[1] * BYTES_PER_TOKEN


_SHARED = TextCache(cache_limit)


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any):
    """:func:`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


def parse_shared(source: str, filename: str = "<unknown>") -> ast.Module:
    """:func:`parse` of a module's text, the tree shared between calls with the same text
    (the same object comes back): **the caller must not modify it**. Errors are raised as
    :func:`parse` raises them (and not kept)."""
    if not cache_limit():
        return parse(source, filename)
    key = text_key(source)
    tree = _SHARED.get(key)
    if tree is None:
        tree = parse(source, filename)
        _SHARED.put(key, tree, tree_cost(source))
    return tree


def strip_docstrings(tree: ast.AST) -> ast.AST:
    """Remove, in place, the docstring of the module and of every class and function in
    ``tree`` (an emptied body gets ``pass``), and return ``tree``: two sources that differ
    only in docstrings then dump and unparse alike."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            del body[0]
            if not body and not isinstance(node, ast.Module):
                body.append(ast.Pass())
    return tree
