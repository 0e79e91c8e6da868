"""Equivalent rewrites of a module: edits meant to keep its behaviour, for the factory's
alternative right fixes (``alt``).

A real agent rarely submits the gold patch's exact text: it fixes the bug and writes the
code its own way. The factory's ``alt`` candidate is the gold fix with one such rewrite
(:func:`choose`), preferably of the very code the bug changed:

- ``mirror_compare``: ``a < b`` becomes ``b > a`` (``==``/``!=`` keep their operator);
  the operands are evaluated in the other order, and the reflected method answers first
  (``b.__gt__(a)`` before ``a.__lt__(b)``);
- ``temp_return``: ``return EXPR`` becomes ``result = EXPR`` then ``return result``;
- ``rename_local``: a local variable of a function gets another name everywhere in it.

"Meant to": a mirrored comparison changes evaluation order and which comparison method
answers first, and a rename can meet code that reads names at run time. The factory labels
every candidate by a real run, so a rewrite that changes behaviour is a true negative, not
a wrong label. A rewrite is a group of
:class:`~sweworld.data.factory.mutate.Mutation` spans of one file (a rename has one per
occurrence), applied together with :func:`~sweworld.data.factory.tasks.apply_all`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

import sweworld.pyast as pyast
from sweworld.data.factory.mutate import Mutation, SourceText
from sweworld.data.factory.tasks import apply_all

__all__ = ["REWRITES", "choose", "rewrites"]

REWRITES: tuple[str, ...] = ("mirror_compare", "temp_return", "rename_local")

_MIRROR = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: ">", ast.LtE: ">=", ast.Gt: "<", ast.GtE: "<="}
_ATOMS = (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.Subscript)
#: calls that read a frame's names at run time: a rename could change what they see
_NAME_READERS = frozenset({"locals", "vars", "eval", "exec", "dir"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: scopes of their own for binding: a comprehension's target is not the function's local
_BINDING_SCOPES = (*_SCOPES, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _functions(tree: ast.AST) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of the module with its qualified name."""
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((name, child))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _own_nodes(func: ast.AST, scopes: tuple[type, ...] = _SCOPES) -> list[ast.AST]:
    """The nodes of ``func``'s body that belong to it, not to a nested ``scopes`` node."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, scopes):
            stack.extend(ast.iter_child_nodes(node))
    return out


def _group(path: str, operator: str, func: str, edits: Sequence[tuple[int, int, str, str, int]]):
    return tuple(
        Mutation(path, operator, start, end, original, replacement, line, func)
        for start, end, original, replacement, line in edits
    )


def _mirror(src: SourceText, path: str, func: str, node: ast.Compare) -> tuple[Mutation, ...]:
    if len(node.ops) != 1 or type(node.ops[0]) not in _MIRROR:
        return ()
    start, end = src.span(node)
    text = src.get(start, end)
    if "\n" in text or "#" in text:
        return ()

    def operand(child: ast.AST) -> str:
        inner = src.get(*src.span(child))
        return inner if isinstance(child, _ATOMS) else f"({inner})"

    replacement = (
        f"{operand(node.comparators[0])} {_MIRROR[type(node.ops[0])]} {operand(node.left)}"
    )
    return _group(path, "mirror_compare", func, [(start, end, text, replacement, node.lineno)])


def _fresh(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name


def _temp_return(
    src: SourceText, path: str, func: str, node: ast.Return, taken: set[str]
) -> tuple[Mutation, ...]:
    if node.value is None or node.lineno != node.end_lineno:
        return ()
    if isinstance(node.value, ast.Constant):
        return ()
    start, end = src.span(node)
    line_start = src.line_starts[node.lineno - 1]
    indent = src.get(line_start, start)
    if indent.strip():  # ``if x: return y`` on one line
        return ()
    text = src.get(start, end)
    if "#" in text:
        return ()
    name = _fresh("result", taken)
    value = src.get(*src.span(node.value))
    replacement = f"{name} = {value}\n{indent}return {name}"
    return _group(path, "temp_return", func, [(start, end, text, replacement, node.lineno)])


def _renames(
    src: SourceText, path: str, qualname: str, func: ast.AST, taken: set[str]
) -> list[tuple[Mutation, ...]]:
    """One rename per local variable of ``func`` bound only by plain names of its own body
    (not a parameter, an import, an ``except ... as``, a ``global``, nor a name a nested
    function or class binds too). Decorators and defaults are left alone: they are
    evaluated in the enclosing scope."""
    body = getattr(func, "body", [])
    every = [node for stmt in body for node in ast.walk(stmt)]
    for node in every:
        is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if is_call and node.func.id in _NAME_READERS:  # type: ignore[attr-defined]
            return []
    own = [
        node
        for stmt in body
        for node in (
            (stmt,)
            if isinstance(stmt, _BINDING_SCOPES)
            else (stmt, *_own_nodes(stmt, _BINDING_SCOPES))
        )
    ]
    own_ids = {id(node) for node in own}
    args = getattr(func, "args", None)
    other_bindings: set[str] = (
        {a.arg for a in ast.walk(args) if isinstance(a, ast.arg)} if args is not None else set()
    )
    for node in every:
        stored = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        if stored and id(node) not in own_ids:  # bound in a nested scope too
            other_bindings.add(node.id)  # type: ignore[attr-defined]
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            other_bindings.update(node.names)
        elif isinstance(node, ast.arg):
            other_bindings.add(node.arg)
        elif isinstance(node, ast.alias):
            other_bindings.add((node.asname or node.name).split(".")[0])
        elif isinstance(
            node,
            (
                ast.ExceptHandler,
                ast.FunctionDef,
                ast.AsyncFunctionDef,
                ast.ClassDef,
                ast.MatchAs,
                ast.MatchStar,
            ),
        ):
            if node.name:
                other_bindings.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            other_bindings.add(node.rest)
    own_stores = sorted(
        {n.id for n in own if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        - other_bindings
    )
    # f"{name=}" prints the name itself: a rename would change the text
    debug_texts = [
        part.value
        for node in every
        if isinstance(node, ast.JoinedStr)
        for part in node.values
        if isinstance(part, ast.Constant) and isinstance(part.value, str)
    ]
    out: list[tuple[Mutation, ...]] = []
    for name in own_stores:
        if any(re.search(rf"\b{re.escape(name)}\s*=\s*$", text) for text in debug_texts):
            continue
        new = _fresh(f"{name}_value", taken)
        edits = []
        for node in every:
            if isinstance(node, ast.Name) and node.id == name:
                start, end = src.span(node)
                if src.get(start, end) != name:  # a position that is not the name's text
                    edits = []
                    break
                edits.append((start, end, name, new, node.lineno))
        if edits:
            out.append(_group(path, "rename_local", qualname, edits))
    return out


def rewrites(source: str, path: str, *, check: bool = True) -> list[tuple[Mutation, ...]]:
    """Every rewrite of ``source`` (the text of ``path``) inside a function, each a group
    of spans; ``[]`` for a source that does not parse (or has lone carriage returns, which
    the byte offsets do not follow). ``check`` keeps only rewrites whose result parses:
    one parse of the module per rewrite, quadratic in its size; :func:`choose` checks only
    those it picks."""
    if "\r" in source.replace("\r\n", ""):
        return []
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return []
    src = SourceText(source)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    taken |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    taken |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    found: list[tuple[Mutation, ...]] = []
    for qualname, func in _functions(tree):
        for node in _own_nodes(func):
            if isinstance(node, ast.Compare):
                found.append(_mirror(src, path, qualname, node))
            elif isinstance(node, ast.Return):
                found.append(_temp_return(src, path, qualname, node, taken))
        found.extend(_renames(src, path, qualname, func, taken))
    return [group for group in found if group and (not check or _parses(source, group))]


def _parses(source: str, group: Sequence[Mutation]) -> bool:
    try:
        pyast.parse(apply_all(source, group))
    except (SyntaxError, ValueError):
        return False
    return True


def choose(
    source: str, path: str, bugs: Sequence[Mutation], limit: int = 2
) -> list[tuple[Mutation, ...]]:
    """Up to ``limit`` rewrites of ``source`` (the fixed text of ``path``) for alternative
    fixes of ``bugs``, each of another kind where possible. Ranked: a rewrite whose span
    holds a bug's span first (the fixed code itself written otherwise), then one in a
    bug's function, nearest first."""
    here = [b for b in bugs if b.path == path]
    if not here or limit <= 0:
        return []

    def rank(group: tuple[Mutation, ...]) -> tuple[int, int, int, str]:
        covers = any(m.start <= b.start and b.end <= m.end for m in group for b in here)
        same = any(m.function == b.function for m in group for b in here)
        distance = min(abs(m.start - b.start) for m in group for b in here)
        return (0 if covers else 1 if same else 2, distance, len(group), group[0].key)

    ranked = sorted(rewrites(source, path, check=False), key=rank)
    chosen: list[tuple[Mutation, ...]] = []
    failed: set[tuple[Mutation, ...]] = set()

    def take(group: tuple[Mutation, ...]) -> None:
        if group in chosen or group in failed:
            return
        if _parses(source, group):  # only what is picked is parsed: linear in picks
            chosen.append(group)
        else:
            failed.add(group)

    for group in ranked:  # one of each kind first
        if len(chosen) < limit and all(c[0].operator != group[0].operator for c in chosen):
            take(group)
    for group in ranked:
        if len(chosen) < limit:
            take(group)
    return chosen
