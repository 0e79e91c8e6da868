"""The values and helpers of the small interpreter (:mod:`.interpreter`): its outcome, the
state of one module, and the AST helpers that decide what is certain.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Any

from sweworld.transition.facts.imports import Found
from sweworld.transition.facts.messages import Frame
from sweworld.transition.facts.records import SyntaxErrorInfo

# --------------------------------------------------------------------------- simulation


class StopProgram(Exception):
    """The interpretation reached a statement whose effect is not known."""


@dataclass
class Outcome:
    kind: str  # complete | error | exit | unknown
    frames: list[Frame] = field(default_factory=list)
    error: str = ""
    module: str = ""
    namespace: set[str] | None = None  # names a completed module defines (None: open)
    syntax: SyntaxErrorInfo | None = None  # a syntax error of an imported module


SAFE_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "property", "abstractmethod", "cache", "overload",
     "cached_property", "abc.abstractmethod", "functools.cache", "typing.overload",
     "functools.cached_property"}
)  # fmt: skip
SAFE_CALL_DECORATORS = frozenset({"lru_cache", "functools.lru_cache"})
SAFE_BASES = frozenset(
    {"object", "ABC", "abc.ABC", "str", "int", "float", "dict", "list", "set", "tuple",
     "unittest.TestCase", "TestCase"}
) | frozenset(
    n for n in dir(builtins) if n.endswith(("Error", "Exception", "Warning"))
)  # fmt: skip
BUILTIN_NAMES = frozenset(dir(builtins))


def dotted_name(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def literal_value(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


class ModuleState:
    def __init__(
        self,
        display: str,
        name: str,
        package: tuple[str, Found] | None,
    ):
        self.display = display
        self.name = name
        self.package = package
        self.names: dict[str, str] = {}
        self.future_annotations = False
        self.open_namespace = False

    def define(self, name: str, kind: str) -> None:
        self.names[name] = kind


def assigned_names(target: ast.AST, value: ast.AST) -> list[str]:
    """Names an assignment binds; raises StopProgram unless the unpacking certainly succeeds
    (a tuple target needs a literal tuple or list of the same length)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
        if len(target.elts) != len(value.elts) or any(
            isinstance(e, ast.Starred) for e in [*target.elts, *value.elts]
        ):
            raise StopProgram
        out: list[str] = []
        for sub_target, sub_value in zip(target.elts, value.elts, strict=True):
            out += assigned_names(sub_target, sub_value)
        return out
    raise StopProgram


def contains_bytes(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray)):
        return True
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(contains_bytes(v) for v in value)
    if isinstance(value, dict):
        return any(contains_bytes(k) or contains_bytes(v) for k, v in value.items())
    return False


def is_main_guard(test: ast.AST) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    left, right = test.left, test.comparators[0]
    pair = {_const_or_name(left), _const_or_name(right)}
    return pair == {("name", "__name__"), ("const", "__main__")}


def _const_or_name(node: ast.AST) -> tuple[str, Any]:
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Constant):
        return ("const", node.value)
    return ("other", None)
