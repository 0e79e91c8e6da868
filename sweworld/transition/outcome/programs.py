"""How two texts of one Python file differ as programs: which definitions changed, and
whether they are the same program once docstrings are removed.

Both questions were answered by dumping whole syntax trees, which costs as much as the
file is long on every step of a session (the gold patch's files are compared with the
state's each time). Here each top-level statement (and each method) is first compared by
its source lines: equal lines are the same subtree, so only the statements whose lines
differ are dumped, and the cost follows the size of the change. The answers are the
dumps' answers; a text with a carriage return (whose line numbering the split below would
not follow) is compared by its dumps alone, and a statement nested too deep to dump (which
parses, but overflows Python's recursion limit) differs when its lines differ.
"""

from __future__ import annotations

import ast
import copy
import warnings

import sweworld.pyast as pyast

__all__ = ["changed_names", "parse_source", "same_program"]

_CHANGED = pyast.TextCache(256)
_SAME = pyast.TextCache(256)


def parse_source(text: str | None, path: str = "<file>") -> ast.Module | None:
    """``text`` parsed through :func:`sweworld.pyast.parse_shared` (one thread at a time; the
    tree may be shared with other callers: never modify it), warnings silenced; None for no
    text or text that does not parse (or is too deep or too big)."""
    if text is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pyast.parse_shared(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _lines(text: str) -> list[str] | None:
    return None if "\r" in text else text.split("\n")


def _source(node: ast.stmt, lines: list[str] | None) -> str | None:
    """The full lines of a statement (decorators included) with its columns, or None."""
    if lines is None or node.end_lineno is None:
        return None
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    text = "\n".join(lines[start - 1 : node.end_lineno])
    return f"{node.col_offset}:{node.end_col_offset}:{text}"


_Lines = list[str] | None
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _definitions(text: str | None) -> tuple[_Lines, dict[str, list[ast.stmt]]]:
    """(the text's lines, qualified name -> statements) of every function and class
    (methods as ``Cls.meth``), plus ``<module>`` for the module's other top-level
    statements."""
    tree = parse_source(text)
    if tree is None or text is None:
        return None, {}
    out: dict[str, list[ast.stmt]] = {}
    rest: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, _DEFS):
            out[node.name] = [node]
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out[f"{node.name}.{sub.name}"] = [sub]
        else:
            rest.append(node)
    out["<module>"] = rest
    return _lines(text), out


def _same_body(
    xs: list[ast.stmt], ys: list[ast.stmt], lx: _Lines, ly: _Lines, strip: bool, block: bool
) -> bool:
    """Whether two statement lists dump alike (with ``strip``: once docstrings are
    removed; ``block``: a class's or function's body, which keeps a ``pass`` when its
    docstring was all it had)."""
    if strip:
        xs, ys = _without_docstring(xs), _without_docstring(ys)
        if block and not xs and not ys:
            return True
        if block and (not xs or not ys):
            rest = xs or ys
            return len(rest) == 1 and isinstance(rest[0], ast.Pass)
    if len(xs) != len(ys):
        return False
    return all(_same(x, y, lx, ly, strip) for x, y in zip(xs, ys, strict=True))


def _same(x: ast.stmt, y: ast.stmt, lx: _Lines, ly: _Lines, strip: bool) -> bool:
    """Whether two statements dump alike: equal source lines are; a class or function
    whose lines differ is compared field by field and its body statement by statement, so
    only the statements that changed are dumped."""
    source = _source(x, lx)
    if source is not None and source == _source(y, ly):
        return True
    if type(x) is not type(y):
        return False
    try:
        if not isinstance(x, _DEFS):
            return _dump(x, strip) == _dump(y, strip)
        for name in x._fields:
            if name != "body" and _value(getattr(x, name, None)) != _value(getattr(y, name, None)):
                return False
    except RecursionError:  # an expression nested too deep to dump: its lines differ
        return False
    return _same_body(x.body, y.body, lx, ly, strip, block=True)


def _value(value: object) -> object:
    if isinstance(value, ast.AST):
        return ast.dump(value)
    if isinstance(value, list):
        return tuple(_value(v) for v in value)
    return value


def _dump(node: ast.stmt, strip: bool) -> str:
    if strip and any(isinstance(n, _DEFS) for n in ast.walk(node)):
        node = pyast.strip_docstrings(copy.deepcopy(node))  # the tree is shared: a copy
    return ast.dump(node)


def changed_names(before: str | None, after: str | None) -> set[str]:
    """Definitions whose syntax tree differs between two texts of one file (kept for
    recent pairs: every step of a session compares the same changed files and the gold
    patch's)."""
    return set(_CHANGED.computed(_changed_names, before, after))


def _changed_names(before: str | None, after: str | None) -> frozenset[str]:
    (la, a), (lb, b) = _definitions(before), _definitions(after)
    return frozenset(
        name
        for name in set(a) | set(b)
        if name not in a
        or name not in b
        or not _same_body(a[name], b[name], la, lb, strip=False, block=False)
    )


def same_program(left: str | None, right: str | None) -> bool:
    """Whether two texts of a file are the same program: equal syntax trees once docstrings
    are removed (the semantic stage's equivalence with the gold patch), equal text when one
    does not parse."""
    if left is None or right is None:
        return left is right
    if left == right:
        return True
    return bool(_SAME.computed(_same_program, left, right))


def _same_program(left: str, right: str) -> bool:
    x, y = parse_source(left), parse_source(right)
    if x is None or y is None:
        return False
    return _same_body(x.body, y.body, _lines(left), _lines(right), strip=True, block=False)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body
