"""Python outlines (imports, signatures, first docstring lines, bodies on demand) and reading
source files from the workspace.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sweworld.pyast as pyast
from sweworld.transition.context.config import ContextConfig
from sweworld.transition.types import WorkspaceView

# ------------------------------------------------------------------------------------------
# Python outlines
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """A top-level or class-level piece of a Python file, by 1-based line numbers."""

    kind: str  # "def" | "class" | "import" | "doc" | "stmt"
    name: str  # dotted qualified name for def/class ("" otherwise)
    start: int
    end: int
    head_end: int  # last line of the signature (def/class)
    doc: tuple[int, int] | None = None  # lines of the docstring's first line
    children: tuple[Unit, ...] = ()
    fixture: bool = False

    @property
    def key(self) -> tuple[int, int]:
        return (self.start, self.end)

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


_QUOTE_ONLY_RE = re.compile(r"^[rRbBuU]{0,2}(\"\"\"|''')\s*\\?$")


def _doc_lines(lines: Sequence[str], start: int, end: int) -> tuple[int, int]:
    first = lines[start - 1].strip() if 0 < start <= len(lines) else ""
    if _QUOTE_ONLY_RE.match(first) and start < end:
        return (start, start + 1)
    return (start, start)


def _ast_units(text: str, lines: Sequence[str]) -> list[Unit]:
    tree = pyast.parse(text)
    return [_ast_unit(node, "", lines) for node in tree.body]


def _ast_doc(body: list[ast.stmt], lines: Sequence[str]) -> tuple[int, int] | None:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        node = body[0]
        return _doc_lines(lines, node.lineno, node.end_lineno or node.lineno)
    return None


def _ast_unit(node: ast.stmt, prefix: str, lines: Sequence[str]) -> Unit:
    end = node.end_lineno or node.lineno
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        decorators = node.decorator_list
        start = min([node.lineno, *(d.lineno for d in decorators)])
        first_body = node.body[0].lineno
        head_end = max(node.lineno, first_body - 1)
        if node.body[0].lineno == node.lineno or head_end > end:
            head_end = end
        doc = _ast_doc(node.body, lines)
        name = prefix + node.name
        fixture = any("fixture" in ast.unparse(d) for d in decorators)
        if isinstance(node, ast.ClassDef):
            body = node.body[1:] if doc else node.body
            children = tuple(_ast_unit(child, name + ".", lines) for child in body)
            return Unit("class", name, start, end, head_end, doc, children, fixture)
        return Unit("def", name, start, end, head_end, doc, (), fixture)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return Unit("import", "", node.lineno, end, end)
    if (
        not prefix
        and node.lineno == 1 + _leading_comment_lines(lines)
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ):
        return Unit("doc", "", node.lineno, end, end, _doc_lines(lines, node.lineno, end))
    return Unit("stmt", "", node.lineno, end, end)


def _leading_comment_lines(lines: Sequence[str]) -> int:
    count = 0
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        count += 1
    return count


def _ts_units(text: str, lines: Sequence[str]) -> list[Unit] | None:
    """Outline with tree-sitter-python (tolerates syntax errors); None when unavailable."""
    try:
        import tree_sitter
        import tree_sitter_python
    except ImportError:
        return None
    try:
        parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))
        tree = parser.parse(text.encode("utf-8"))
    except Exception:
        return None
    return [_ts_unit(node, "", lines) for node in tree.root_node.named_children]


def _ts_unit(node: Any, prefix: str, lines: Sequence[str]) -> Unit:
    start = node.start_point[0] + 1
    end = max(start, node.end_point[0] + 1 - (1 if node.end_point[1] == 0 else 0))
    definition = node
    fixture = False
    if node.type == "decorated_definition":
        definition = node.child_by_field_name("definition") or node
        fixture = any(
            c.type == "decorator" and b"fixture" in (c.text or b"") for c in node.children
        )
    if definition.type in ("function_definition", "class_definition"):
        name_node = definition.child_by_field_name("name")
        name = prefix + (name_node.text.decode("utf-8", "replace") if name_node else "?")
        body = definition.child_by_field_name("body")
        head_end = end
        doc = None
        children: tuple[Unit, ...] = ()
        if body is not None:
            body_row = body.start_point[0] + 1
            head_end = max(definition.start_point[0] + 1, body_row - 1)
            if body_row == definition.start_point[0] + 1:
                head_end = end
            stmts = list(body.named_children)
            if (
                stmts
                and stmts[0].type == "expression_statement"
                and stmts[0].named_children
                and stmts[0].named_children[0].type == "string"
            ):
                d = stmts[0]
                doc = _doc_lines(lines, d.start_point[0] + 1, d.end_point[0] + 1)
                stmts = stmts[1:]
            if definition.type == "class_definition":
                children = tuple(
                    _ts_unit(c, name + ".", lines) for c in stmts if c.type != "comment"
                )
        kind = "class" if definition.type == "class_definition" else "def"
        return Unit(kind, name, start, end, min(head_end, end), doc, children, fixture)
    if node.type in ("import_statement", "import_from_statement", "future_import_statement"):
        return Unit("import", "", start, end, end)
    return Unit("stmt", "", start, end, end)


def outline_units(text: str, lines: Sequence[str]) -> list[Unit] | None:
    try:
        return _ast_units(text, lines)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _ts_units(text, lines)


NumberedLine = tuple[int | None, str]


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def render_unit(
    lines: Sequence[str],
    unit: Unit,
    expand: Callable[[Unit], bool],
    out: list[NumberedLine],
) -> None:
    def span(a: int, b: int) -> None:
        out.extend((i, lines[i - 1]) for i in range(a, min(b, len(lines)) + 1))

    if unit.kind == "import" or expand(unit):
        span(unit.start, unit.end)
        return
    if unit.kind == "doc":
        assert unit.doc is not None
        span(*unit.doc)
        if unit.end > unit.doc[1]:
            out.append((None, "..."))
        return
    if unit.kind == "stmt":
        if unit.end - unit.start < 3:
            span(unit.start, unit.end)
        else:
            span(unit.start, unit.start)
            out.append((None, _indent_of(lines[unit.start - 1]) + "    ..."))
        return
    if unit.head_end >= unit.end:  # a one-line definition
        span(unit.start, unit.end)
        return
    span(unit.start, unit.head_end)
    shown_to = unit.head_end
    if unit.doc is not None and unit.doc[1] > shown_to:
        span(max(unit.doc[0], shown_to + 1), unit.doc[1])
        shown_to = unit.doc[1]
    if unit.kind == "class" and unit.children:
        for child in unit.children:
            render_unit(lines, child, expand, out)
    elif unit.end > shown_to:
        indent = _indent_of(lines[unit.start - 1]) if unit.start <= len(lines) else ""
        for i in range(unit.head_end + 1, min(unit.end, len(lines)) + 1):
            if lines[i - 1].strip():
                indent = _indent_of(lines[i - 1])
                break
        out.append((None, indent + "..."))


def render_numbered(numbered: Sequence[NumberedLine], total_lines: int, numbers: bool) -> str:
    if not numbers:
        return "\n".join(text for _, text in numbered)
    width = len(str(max(total_lines, 1)))
    pad = " " * (width + 1)
    return "\n".join(
        (f"{n:>{width}} {text}" if n is not None else pad + text).rstrip() for n, text in numbered
    )


def render_whole(lines: Sequence[str], numbers: bool) -> str:
    return render_numbered(list(enumerate(lines, 1)), len(lines), numbers)


# ------------------------------------------------------------------------------------------
# Reading files
# ------------------------------------------------------------------------------------------


def read_source(view: WorkspaceView, path: str, config: ContextConfig) -> tuple[str | None, str]:
    """(text, "") or (None, a one-line note saying why it is not shown)."""
    host = view.host(path)
    if host is None:
        return None, "outside the workspace"
    try:
        if not host.exists():
            return None, "no such file"
        if host.is_dir():
            return None, "a directory"
        size = host.stat().st_size
    except OSError:
        return None, "unreadable"
    if size > config.max_file_bytes:
        return None, f"skipped: {size:,} bytes, larger than {config.max_file_bytes:,}"
    text = view.read_text(path, limit=config.max_file_bytes)
    if text is None:
        return None, "skipped: binary or not UTF-8"
    return text, ""


def abs_path(path: str, cwd: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, path))


def canonical_path(view: WorkspaceView, path: str, cwd: str) -> str:
    return view.resolve(abs_path(path, cwd)) or abs_path(path, cwd)
