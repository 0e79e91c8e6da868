"""Bug injection: ``ast``-located mutations applied as exact text edits.

Each operator walks a module's AST and proposes :class:`Mutation` objects: a byte span of
the source and its replacement. Only that span changes, so the rest of the file keeps its
formatting byte for byte and the diff of a mutant is one small hunk. Spans come from the
nodes' positions (``lineno``/``col_offset`` are UTF-8 byte offsets, converted exactly);
operators that sit between two operands (``<``, ``+``, ``and``) are found in the text
between them, and only when that text is the operator and nothing else but parentheses.

Operators (:data:`OPERATORS`): ``compare`` (``==``/``!=``, ``<``/``<=``, ``in``/``not in``,
...), ``arith`` (``+``/``-``, ``*``/``//``, ...), ``bool`` (``and``/``or``),
``off_by_one`` (integer constants, slice bounds, ``range`` ends), ``negate`` (the
condition of an ``if``/``while``/conditional expression), ``remove_stmt`` (a statement
replaced by ``pass``), ``return_value`` (a wrong returned value), ``swap_args`` (the first
two positional arguments of a call), ``default`` (a parameter's default value) and
``exception`` (the class raised or caught).

:func:`mutations` lists every mutation of a source in a fixed order; :func:`sample` picks a
seeded, operator-balanced subset. A mutant always parses (checked).
"""

from __future__ import annotations

import ast
import random
from collections import deque
from dataclasses import dataclass

import sweworld.pyast as pyast

__all__ = [
    "OPERATORS",
    "Mutation",
    "SourceText",
    "apply_mutation",
    "mutations",
    "parses",
    "sample",
]


@dataclass(frozen=True)
class Mutation:
    """One edit of one file: bytes ``start:end`` of the UTF-8 source become ``replacement``.

    ``function`` is the qualified name of the enclosing function (``""`` at module level),
    ``line`` the 1-based line of the edit, ``original`` the text replaced.
    """

    path: str
    operator: str
    start: int
    end: int
    original: str
    replacement: str
    line: int
    function: str

    @property
    def key(self) -> str:
        """A stable identity of the mutation (file, span, replacement)."""
        return f"{self.path}:{self.start}:{self.end}:{self.operator}:{self.replacement}"


def apply_mutation(source: str, mutation: Mutation) -> str:
    """``source`` with the mutation's span replaced (byte-exact)."""
    data = source.encode("utf-8")
    if data[mutation.start : mutation.end].decode("utf-8") != mutation.original:
        raise ValueError(f"{mutation.path}: the source at the mutation's span changed")
    return (
        data[: mutation.start] + mutation.replacement.encode("utf-8") + data[mutation.end :]
    ).decode("utf-8")


class SourceText:
    """Byte offsets of a module's lines, and the text of node spans."""

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                self.line_starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def between(self, left: ast.AST, right: ast.AST) -> tuple[int, int]:
        return self.span(left)[1], self.span(right)[0]

    def get(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")


_COMPARE_SWAPS = {
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Lt: "<=",
    ast.LtE: "<",
    ast.Gt: ">=",
    ast.GtE: ">",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
_COMPARE_TEXT = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
_ARITH_TEXT = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Div: "/",
    ast.Mod: "%",
    ast.BitOr: "|",
    ast.BitAnd: "&",
}
_ARITH_SWAPS = {"+": "-", "-": "+", "*": "//", "//": "*", "/": "*", "%": "//", "|": "&", "&": "|"}
_EXCEPTION_SWAPS = {
    "ValueError": "TypeError",
    "TypeError": "ValueError",
    "KeyError": "IndexError",
    "IndexError": "KeyError",
    "AttributeError": "TypeError",
    "RuntimeError": "ValueError",
    "NotImplementedError": "RuntimeError",
    "LookupError": "ValueError",
}


def _operator_in_gap(src: SourceText, start: int, end: int, op: str) -> tuple[int, int] | None:
    """The span of ``op`` in the text between two operands, when that text is only the
    operator, whitespace and parentheses (no comment, no other token)."""
    gap = src.get(start, end)
    bare = " ".join(gap.replace("(", " ").replace(")", " ").replace("\\\n", " ").split())
    if bare != op:
        return None
    first = op.split()[0]
    index = gap.find(first)
    if index < 0:
        return None
    # the operator's own text may hold inner whitespace ("not  in"): cover to its last word
    last = op.split()[-1]
    stop = gap.find(last, index + len(first) - len(last)) + len(last)
    base = start + len(gap[:index].encode("utf-8"))
    return base, base + len(gap[index:stop].encode("utf-8"))


def _int_constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


class _Walker(ast.NodeVisitor):
    """Collects mutations, tracking the enclosing function's qualified name."""

    def __init__(self, src: SourceText, path: str):
        self.src = src
        self.path = path
        self.scope: list[str] = []
        self.found: list[Mutation] = []
        self.docstrings: set[int] = set()

    # -- helpers -----------------------------------------------------------------------

    def add(self, operator: str, start: int, end: int, replacement: str, line: int) -> None:
        original = self.src.get(start, end)
        if original == replacement:
            return
        self.found.append(
            Mutation(
                path=self.path,
                operator=operator,
                start=start,
                end=end,
                original=original,
                replacement=replacement,
                line=line,
                function=".".join(self.scope),
            )
        )

    def add_node(self, operator: str, node: ast.AST, replacement: str) -> None:
        start, end = self.src.span(node)
        self.add(operator, start, end, replacement, node.lineno)  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        return self.src.get(*self.src.span(node))

    # -- scopes ------------------------------------------------------------------------

    def _scoped(self, node: ast.AST, name: str) -> None:
        body = getattr(node, "body", [])
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            self.docstrings.add(id(body[0]))
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._defaults(node)
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._defaults(node)
        self._scoped(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    # -- operators ---------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1:
            op = node.ops[0]
            span = _operator_in_gap(
                self.src, *self.src.between(node.left, node.comparators[0]), _COMPARE_TEXT[type(op)]
            )
            if span is not None:
                self.add("compare", *span, _COMPARE_SWAPS[type(op)], node.lineno)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        text = _ARITH_TEXT.get(type(node.op))
        string_format = isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
        if text is not None and not string_format:
            span = _operator_in_gap(self.src, *self.src.between(node.left, node.right), text)
            if span is not None:
                self.add("arith", *span, _ARITH_SWAPS[text], node.lineno)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        text, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        span = _operator_in_gap(self.src, *self.src.between(node.values[0], node.values[1]), text)
        if span is not None:
            self.add("bool", *span, other, node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if _int_constant(node) and self.scope:
            self.add_node("off_by_one", node, str(node.value + 1))
            if node.value > 0:
                self.add_node("off_by_one", node, str(node.value - 1))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.slice, ast.Slice):
            for bound in (node.slice.lower, node.slice.upper):
                if bound is not None and not _int_constant(bound) and self.scope:
                    self.add_node("off_by_one", bound, f"{self.text(bound)} + 1")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id == "range"
            and node.args
            and not _int_constant(node.args[-1])
            and not isinstance(node.args[-1], ast.Starred)
        ):
            end = node.args[-1] if len(node.args) <= 2 else node.args[1]
            self.add_node("off_by_one", end, f"{self.text(end)} - 1")
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(node.args) >= 2 and len(positional) == len(node.args):
            first, second = node.args[0], node.args[1]
            if self.text(first) != self.text(second):
                start, _ = self.src.span(first)
                _, end = self.src.span(second)
                middle = self.src.get(self.src.span(first)[1], self.src.span(second)[0])
                self.add(
                    "swap_args",
                    start,
                    end,
                    self.text(second) + middle + self.text(first),
                    node.lineno,
                )
        self.generic_visit(node)

    def _condition(self, test: ast.AST) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add_node("negate", test, self.text(test.operand))
        else:
            self.add_node("negate", test, f"not ({self.text(test)})")

    def visit_If(self, node: ast.If) -> None:
        self._condition(node.test)
        self._statements(node.body)
        self._statements(node.orelse)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def _statements(self, body: list[ast.stmt]) -> None:
        """``remove_stmt`` for the plain statements of a body of two or more."""
        if len(body) < 2 or not self.scope:
            return
        for stmt in body:
            if id(stmt) in self.docstrings:
                continue
            if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
                start, end = self.src.span(stmt)
                if stmt.lineno == stmt.end_lineno or isinstance(stmt, ast.Expr):
                    self.add("remove_stmt", start, end, "pass", stmt.lineno)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.With, ast.Try)):
            self._statements(node.body)
        super().generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None:
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                self.add_node("return_value", value, str(not value.value))
            elif isinstance(value, ast.Constant) and value.value is None:
                pass
            elif _int_constant(value):
                pass  # off_by_one covers it
            else:
                self.add_node("return_value", value, "None")
        self.generic_visit(node)

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)  # a default belongs to its function
        try:
            self._default_values(node)
        finally:
            self.scope.pop()

    def _default_values(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]:
            if not isinstance(default, ast.Constant):
                continue
            value = default.value
            if isinstance(value, bool):
                self.add_node("default", default, str(not value))
            elif value is None:
                continue
            elif _int_constant(default):
                self.add_node("default", default, str(value + 1))
            elif isinstance(value, str):
                self.add_node("default", default, repr("") if value else repr(" "))

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        target = exc.func if isinstance(exc, ast.Call) else exc
        if isinstance(target, ast.Name) and target.id in _EXCEPTION_SWAPS:
            self.add_node("exception", target, _EXCEPTION_SWAPS[target.id])
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if isinstance(node.type, ast.Name) and node.type.id in _EXCEPTION_SWAPS:
            self.add_node("exception", node.type, _EXCEPTION_SWAPS[node.type.id])
        self._statements(node.body)
        self.generic_visit(node)


OPERATORS: tuple[str, ...] = (
    "compare",
    "arith",
    "bool",
    "off_by_one",
    "negate",
    "remove_stmt",
    "return_value",
    "swap_args",
    "default",
    "exception",
)


def parses(source: str, mutation: Mutation) -> bool:
    """Whether ``source`` with ``mutation`` applied still parses."""
    try:
        pyast.parse(apply_mutation(source, mutation))
    except (SyntaxError, ValueError):
        return False
    return True


def mutations(source: str, path: str, *, check: bool = True) -> list[Mutation]:
    """Every mutation of ``source`` (the text of ``path``) that still parses, in source
    order; ``[]`` for a source that does not parse. Checking parses the whole mutant once
    per mutation (quadratic in the file's size): with ``check=False`` the caller checks
    only those it uses (:func:`parses`)."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return []
    walker = _Walker(SourceText(source), path)
    walker.visit(tree)
    out: list[Mutation] = []
    seen: set[str] = set()
    for m in sorted(walker.found, key=lambda m: (m.start, m.end, m.operator, m.replacement)):
        if m.key in seen:
            continue
        seen.add(m.key)
        if not check or parses(source, m):
            out.append(m)
    return out


def sample(
    found: list[Mutation], seed: int, limit: int | None = None, *, in_function: bool = True
) -> list[Mutation]:
    """A seeded selection of ``found``: shuffled within each operator, then taken round
    robin across operators (so every kind appears), at most ``limit``. With
    ``in_function`` only mutations inside a function or method are kept."""
    rng = random.Random(seed)
    by_op: dict[str, list[Mutation]] = {}
    for m in found:
        if in_function and not m.function:
            continue
        by_op.setdefault(m.operator, []).append(m)
    for items in by_op.values():
        rng.shuffle(items)
    queues = [deque(by_op[op]) for op in OPERATORS if op in by_op]
    out: list[Mutation] = []
    while any(queues) and (limit is None or len(out) < limit):
        for queue in queues:
            if queue and (limit is None or len(out) < limit):
                out.append(queue.popleft())
    return out
