"""How two texts of one Python file differ as programs: which definitions changed, and
whether they are the same program once docstrings are removed.

Both questions were answered by dumping whole syntax trees, which costs as much as the
file is long on every step of a session (the gold patch's files are compared with the
state's each time). Here each top-level statement (and each method) is first compared by
its source lines: equal lines are the same subtree, so only the statements whose lines
differ are dumped, and the cost follows the size of the change. Lines are compared by ids
given to the distinct lines of the two texts once, so many statements sharing one long line
stay linear. The answers are the dumps' answers; a text with a carriage return (whose line
numbering the split below would not follow) is compared by its dumps alone. Where a dump
cannot be made (a statement nested deeper than this thread's stack allows, an integer
literal too long to print) the answer is a conservative one that is not kept: a definition
whose lines differ changed, texts that differ are different programs.
"""

from __future__ import annotations

import ast
import copy
import warnings

import sweworld.pyast as pyast

__all__ = ["changed_names", "parse_source", "same_program"]

_CHANGED = pyast.TextCache(256)
_SAME = pyast.TextCache(256)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: what a dump (or a copy) of a parsed tree can raise: not kept in the caches, since a
#: shallower stack may succeed
_UNDUMPABLE = (RecursionError, ValueError, MemoryError)
_Lines = list[int] | None


def parse_source(text: str | None, path: str = "<file>") -> ast.Module | None:
    """``text`` parsed through :func:`sweworld.pyast.parse_shared` (one thread at a time; the
    tree may be shared with other callers: never modify it), warnings silenced; None for no
    text or text that does not parse (or is too deep or too big)."""
    try:
        return _parse(text, path)
    except RecursionError:
        return None


def _parse(text: str | None, path: str = "<file>") -> ast.Module | None:
    """:func:`parse_source`, except that running out of stack is raised (not a property of
    the text alone)."""
    if text is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pyast.parse_shared(text, filename=path)
    except (SyntaxError, ValueError, MemoryError):
        return None


def _line_ids(*texts: str | None) -> list[_Lines]:
    """Each text's lines as ids shared between the texts (equal ids: equal lines); None for
    a text without lines or with a carriage return."""
    ids: dict[str, int] = {}
    out: list[_Lines] = []
    for text in texts:
        if text is None or "\r" in text:
            out.append(None)
        else:
            out.append([ids.setdefault(line, len(ids)) for line in text.split("\n")])
    return out


def _source(node: ast.stmt, lines: _Lines) -> tuple[int, ...] | None:
    """The statement's columns and the ids of its full lines (decorators included), or
    None."""
    if lines is None or node.end_lineno is None:
        return None
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return (node.col_offset, node.end_col_offset or 0, *lines[start - 1 : node.end_lineno])


def _definitions(tree: ast.Module | None) -> dict[str, list[ast.stmt]]:
    """Qualified name -> statements of every function and class (methods as
    ``Cls.meth``), plus ``<module>`` for the module's other top-level statements."""
    if tree is None:
        return {}
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
    return out


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
    if not isinstance(x, _DEFS):
        return _dump(x, strip) == _dump(y, strip)
    for name in x._fields:
        if name != "body" and _value(getattr(x, name, None)) != _value(getattr(y, name, None)):
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
    try:
        return set(_CHANGED.computed(_changed_names, before, after))
    except _UNDUMPABLE:  # not kept: the definitions whose lines differ (or have none)
        a, b = _definitions(parse_source(before)), _definitions(parse_source(after))
        la, lb = _line_ids(before, after)
        out = set(a) ^ set(b)
        for name in set(a) & set(b):
            lines = [_source(n, la) for n in a[name]]
            if None in lines or lines != [_source(n, lb) for n in b[name]]:
                out.add(name)
        return out


def _changed_names(before: str | None, after: str | None) -> frozenset[str]:
    a, b = _definitions(_parse(before)), _definitions(_parse(after))
    la, lb = _line_ids(before, after)
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
    try:
        return bool(_SAME.computed(_same_program, left, right))
    except _UNDUMPABLE:  # not kept: the whole trees' dumps, when they can be made
        try:
            trees = [pyast.strip_docstrings(pyast.parse(t)) for t in (left, right)]
            return ast.dump(trees[0]) == ast.dump(trees[1])
        except (SyntaxError, *_UNDUMPABLE):
            return False


def _same_program(left: str, right: str) -> bool:
    x, y = _parse(left), _parse(right)
    if x is None or y is None:
        return False
    lx, ly = _line_ids(left, right)
    return _same_body(x.body, y.body, lx, ly, strip=True, block=False)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body
