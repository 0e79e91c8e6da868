"""``-k`` / ``-m`` expressions (:func:`keyword_matches`) and the deselection of items."""

from __future__ import annotations

import posixpath
import re

from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.imports import Workspace
from sweworld.transition.facts.pytest_args import PytestOptions
from sweworld.transition.facts.pytest_config import relative_to_root
from sweworld.transition.facts.scanner import Item

# --------------------------------------------------------------------------- -k / -m


class _ExprError(ValueError):
    pass


def _tokenize_match_expr(text: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch in " \t":
            pos += 1
        elif ch in "()":
            tokens.append((ch, ch))
            pos += 1
        else:
            m = re.match(r"(:?\w|:|\+|-|\.|\[|\]|\\|/)+", text[pos:])
            if not m:
                raise _ExprError(f"unexpected character {ch!r}")
            value = m.group(0)
            kind = value if value in ("or", "and", "not") else "ident"
            tokens.append((kind, value))
            pos += len(value)
    tokens.append(("eof", ""))
    return tokens


def keyword_matches(expression: str, matcher) -> bool:
    """Evaluate a ``-k`` / ``-m`` expression (``and``, ``or``, ``not``, parentheses,
    identifiers) with ``matcher(ident) -> bool``; an empty expression is False (as
    pytest's grammar says; pytest itself skips filtering for an empty ``-k``)."""
    tokens = _tokenize_match_expr(expression)
    pos = 0

    def peek() -> str:
        return tokens[pos][0]

    def advance() -> tuple[str, str]:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        return token

    def expr() -> bool:
        value = and_expr()
        while peek() == "or":
            advance()
            right = and_expr()
            value = value or right
        return value

    def and_expr() -> bool:
        value = not_expr()
        while peek() == "and":
            advance()
            right = not_expr()
            value = value and right
        return value

    def not_expr() -> bool:
        kind = peek()
        if kind == "not":
            advance()
            return not not_expr()
        if kind == "(":
            advance()
            value = expr()
            if advance()[0] != ")":
                raise _ExprError("expected )")
            return value
        if kind == "ident":
            return bool(matcher(advance()[1]))
        raise _ExprError(f"unexpected {kind}")

    if peek() == "eof":
        return False
    value = expr()
    if peek() != "eof":
        raise _ExprError("trailing tokens")
    return value


def module_keyword_names(ws: Workspace, path: str, rootdir: str, env: Environment) -> list[str]:
    """Names of the module's parent nodes that ``-k`` matches (pytest >= 8: the module's
    file name and every directory between it and the rootdir; before: packages' and
    the module's paths relative to their parent node)."""
    rel = relative_to_root(path, rootdir)
    parts = rel.split("/")
    if env.pytest >= (8,):
        return [p for p in parts if p not in ("", ".", "..")]
    names = []
    directory = posixpath.dirname(path)
    package_dirs = []
    while ws.is_file(posixpath.join(directory, "__init__.py")) and directory.startswith(rootdir):
        package_dirs.append(directory)
        directory = posixpath.dirname(directory)
    parent = directory if package_dirs else rootdir
    for package in reversed(package_dirs):
        names.append(relative_to_root(package, parent))
        parent = package
    names.append(relative_to_root(path, package_dirs[0] if package_dirs else rootdir))
    return names


def select_items(
    items: list[Item], options: PytestOptions, cwd: str, rootdir: str
) -> tuple[list[Item], list[Item], bool]:
    """(selected, deselected, exact) after ``--deselect``, ``-k`` and ``-m``."""
    exact = True
    selected = list(items)
    deselected: list[Item] = []
    if options.deselect:
        prefixes = []
        for value in options.deselect:
            path, sep, rest = value.partition("::")
            full = posixpath.normpath(posixpath.join(cwd, path))
            prefixes.append(relative_to_root(full, rootdir) + sep + rest)
        keep = []
        for item in selected:
            if any(item.nodeid.startswith(p) for p in prefixes):
                deselected.append(item)
            else:
                keep.append(item)
        selected = keep
    if options.keyword:
        expression = options.keyword
        keep = []
        try:
            for item in selected:
                names = [n.lower() for n in item.names | item.markers]

                def match(ident: str, names=names) -> bool:
                    ident = ident.lower()
                    return any(ident in name for name in names)

                if keyword_matches(expression, match):
                    keep.append(item)
                else:
                    deselected.append(item)
        except _ExprError:
            return items, [], False
        selected = keep
    if options.markexpr:
        keep = []
        try:
            for item in selected:
                if keyword_matches(options.markexpr, lambda ident, m=item.markers: ident in m):
                    keep.append(item)
                else:
                    deselected.append(item)
        except _ExprError:
            return items, [], False
        selected = keep
    return selected, deselected, exact
