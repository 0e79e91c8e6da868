"""``ast.parse`` behind one process-wide lock.

CPython 3.11 keeps the recursion depth of its C-to-Python AST conversion in interpreter-wide
state: two threads parsing at once (an environment pool stepping many sessions, the world
service) can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905). Every parse in sweworld goes through :func:`parse`; the lock costs
nothing measurable, since parsing holds the GIL anyway.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["parse", "strip_docstrings"]

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any):
    """:func:`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


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
