"""``ast.parse`` behind one process-wide lock.

CPython 3.11 keeps the recursion depth of its C-to-Python AST conversion in interpreter-wide
state: two threads parsing at once (an environment pool stepping many sessions, the world
service) can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905). Every parse in sweworld goes through :func:`parse`; the lock costs
nothing measurable, since parsing holds the GIL anyway.

:func:`parse_shared` keeps recent trees: a simulated step reads the same unchanged files
as the step before it (collection, import checks, reachability), and parsing them again was
about half of a step's time on a repository like pytest. The cache holds at most
``SWEWORLD_AST_CACHE_MB`` (default 4) megabytes of source text, least recently used first
out; a tree takes about 30 times its source in memory.
"""

from __future__ import annotations

import ast
import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["cache_limit", "parse", "parse_shared", "strip_docstrings"]

_LOCK = threading.Lock()
_SHARED: OrderedDict[bytes, tuple[ast.Module, int]] = OrderedDict()
_shared_bytes = 0  # the source bytes of the kept trees


def cache_limit() -> int:
    """Bytes of source :func:`parse_shared` keeps trees of (``SWEWORLD_AST_CACHE_MB``)."""
    try:
        return max(0, int(float(os.environ.get("SWEWORLD_AST_CACHE_MB", "4")) * 1_000_000))
    except ValueError:
        return 4_000_000


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any):
    """:func:`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


def parse_shared(source: str, filename: str = "<unknown>") -> ast.Module:
    """:func:`parse` of a module's text, the tree shared between calls with the same text
    (the same object comes back): **the caller must not modify it**. Errors are raised as
    :func:`parse` raises them (and not kept)."""
    global _shared_bytes
    limit = cache_limit()
    size = len(source)
    if size * 4 > limit:  # never worth keeping
        return parse(source, filename)
    key = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _LOCK:
        found = _SHARED.get(key)
        if found is not None:
            _SHARED.move_to_end(key)
            return found[0]
    tree = parse(source, filename)
    with _LOCK:
        if key not in _SHARED:
            _SHARED[key] = (tree, size)
            _shared_bytes += size
            while _SHARED and _shared_bytes > limit:
                _, (_, dropped) = _SHARED.popitem(last=False)
                _shared_bytes -= dropped
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
