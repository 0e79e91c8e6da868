"""The small interpreter: the top level of modules, run as far as its effects are certain."""

from __future__ import annotations

import ast
import sys
import warnings
from collections.abc import Iterable

import sweworld.pyast as pyast
from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.imports import QUIET_STDLIB, Found, Importer
from sweworld.transition.facts.messages import Frame, format_syntax_error
from sweworld.transition.facts.simulation import (
    BUILTIN_NAMES,
    SAFE_BASES,
    SAFE_CALL_DECORATORS,
    SAFE_DECORATORS,
    ModuleState,
    Outcome,
    StopProgram,
    assigned_names,
    contains_bytes,
    dotted_name,
    is_main_guard,
    literal_value,
)


class Simulator:
    """Interprets the top level of modules as far as its effects are certain.

    Statements understood: docstrings, ``pass``, imports (stdlib modules known to import
    silently, ``pytest``, workspace modules recursively), assignments of literals, function
    and class definitions whose decorators, defaults, annotations and bases are known to
    evaluate, ``print`` of literals, ``sys.exit(<literal>)``, and the ``if __name__ ==
    "__main__":`` block of the main module. The first other statement stops it ("unknown").
    """

    MAX_DEPTH = 12

    def __init__(self, importer: Importer, env: Environment):
        self.importer = importer
        self.env = env
        self.loaded: dict[str, Outcome] = {}

    # ---------------------------------------------------------------- entry points

    def run_main(self, source: str, display: str) -> Outcome:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = pyast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return Outcome("unknown")
        return self._run_module(tree, display, "__main__", None, depth=0)

    # ---------------------------------------------------------------- modules

    def _load(self, dotted: str, found: Found, depth: int) -> Outcome:
        if dotted in self.loaded:
            return self.loaded[dotted]
        if found.path is None:  # namespace package: nothing runs
            outcome = Outcome("complete", namespace=None)
            self.loaded[dotted] = outcome
            return outcome
        if depth > self.MAX_DEPTH:
            return Outcome("unknown")
        tree = self.importer.ws.tree(found.path)
        text = self.importer.ws.text(found.path)
        if text is None:
            return Outcome("unknown")
        if tree is None:
            syntax, _ = format_syntax_error(text, found.path)
            if syntax is None:
                return Outcome("unknown")
            return Outcome("error", error=syntax.text.rstrip("\n"), module=dotted, syntax=syntax)
        # Mark as loading first: circular imports see a partial module.
        self.loaded[dotted] = Outcome("unknown")
        package = (
            dotted
            if found.package_dir and found.path.endswith("__init__.py")
            else (dotted.rpartition(".")[0])
        )
        outcome = self._run_module(tree, found.path, dotted, (package, found), depth)
        self.loaded[dotted] = outcome
        return outcome

    def _run_module(
        self,
        tree: ast.Module,
        display: str,
        name: str,
        package: tuple[str, Found] | None,
        depth: int,
    ) -> Outcome:
        state = ModuleState(display, name, package)
        try:
            for stmt in tree.body:
                result = self._stmt(stmt, state, depth)
                if result is not None:
                    return result
        except StopProgram:
            return Outcome("unknown")
        return Outcome(
            "complete",
            namespace=None if state.open_namespace else set(state.names),
        )

    # ---------------------------------------------------------------- statements

    def _frame(self, state: ModuleState, node: ast.stmt) -> Frame:
        return Frame(state.display, node.lineno)

    def _import_error(self, state: ModuleState, node: ast.stmt, module: str, error: str) -> Outcome:
        frame = self._frame(state, node)
        return Outcome("error", frames=[frame], error=error, module=module)

    def _stmt(self, stmt: ast.stmt, state: ModuleState, depth: int) -> Outcome | None:
        if isinstance(stmt, ast.Expr):
            return self._expr_stmt(stmt, state)
        if isinstance(stmt, ast.Pass):
            return None
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                result = self._import(alias.name, stmt, state, depth)
                if result is not None:
                    return result
                bound = alias.asname or alias.name.split(".")[0]
                state.define(bound, "module:" + (alias.name if alias.asname else bound))
            return None
        if isinstance(stmt, ast.ImportFrom):
            return self._import_from(stmt, state, depth)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            return self._assign(stmt, state)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._check_function(stmt, state, class_names=None)
            state.define(stmt.name, "function")
            return None
        if isinstance(stmt, ast.ClassDef):
            self._check_class(stmt, state, depth=0)
            state.define(stmt.name, "class")
            return None
        if isinstance(stmt, ast.If) and is_main_guard(stmt.test):
            if state.name != "__main__":
                return None
            for inner in stmt.body:
                result = self._stmt(inner, state, depth)
                if result is not None:
                    return result
            return None
        raise StopProgram

    def _expr_stmt(self, stmt: ast.Expr, state: ModuleState) -> Outcome | None:
        value = stmt.value
        if isinstance(value, ast.Constant):
            return None
        if not isinstance(value, ast.Call):
            raise StopProgram
        func = dotted_name(value.func)
        if func == "print" and "print" not in state.names:
            # a print of literals runs through (what it prints is the model's to say)
            for arg in value.args:
                ok, lit = literal_value(arg)
                if not ok or isinstance(arg, ast.Starred) or contains_bytes(lit):
                    raise StopProgram  # (str() of bytes warns under -b)
            for kw in value.keywords:
                ok, lit = literal_value(kw.value)
                if not ok or kw.arg not in ("sep", "end", "flush"):
                    raise StopProgram
                if kw.arg in ("sep", "end") and lit is not None and not isinstance(lit, str):
                    raise StopProgram
            return None
        is_exit = (func == "sys.exit" and state.names.get("sys") == "module:sys") or (
            func in ("exit", "quit") and func not in state.names
        )
        if is_exit and not value.keywords and len(value.args) <= 1:
            if value.args and not literal_value(value.args[0])[0]:
                raise StopProgram
            return Outcome("exit")
        raise StopProgram

    def _import(
        self, dotted: str, node: ast.stmt, state: ModuleState, depth: int
    ) -> Outcome | None:
        parts = dotted.split(".")
        top = self.importer.find_top(parts[0])
        if top is None:
            return self._import_error(
                state, node, parts[0], f"ModuleNotFoundError: No module named '{parts[0]}'"
            )
        return self._import_chain(parts, top, node, state, depth)

    def _import_chain(
        self,
        parts: list[str],
        found: Found,
        node: ast.stmt,
        state: ModuleState,
        depth: int,
        prefix: str = "",
    ) -> Outcome | None:
        dotted = prefix + parts[0] if prefix else parts[0]
        for index, part in enumerate(parts):
            if index:
                dotted = f"{dotted}.{part}"
                found_sub = self.importer.find_sub(found, part)
                if found_sub is None:
                    return self._import_error(
                        state, node, dotted, f"ModuleNotFoundError: No module named '{dotted}'"
                    )
                found = found_sub
            if found.kind == "stdlib":
                if index == 0 and part not in QUIET_STDLIB:
                    raise StopProgram
                return None  # submodules of quiet stdlib packages are assumed quiet too
            if found.kind == "installed":
                if part in ("pytest", "_pytest"):
                    return None
                raise StopProgram
            if found.kind == "unsure":
                raise StopProgram
            outcome = self._load(dotted, found, depth + 1)
            if outcome.kind == "error":
                return Outcome(
                    "error",
                    frames=[self._frame(state, node), *outcome.frames],
                    error=outcome.error,
                    module=outcome.module,
                    syntax=outcome.syntax,
                )
            if outcome.kind == "exit":
                return outcome
            if outcome.kind != "complete":
                raise StopProgram
        return None

    def _import_from(self, stmt: ast.ImportFrom, state: ModuleState, depth: int) -> Outcome | None:
        if stmt.module == "__future__":
            for alias in stmt.names:
                if alias.name == "annotations":
                    state.future_annotations = True
            return None
        if stmt.level:
            if state.package is None:
                if state.name == "__main__":
                    return self._import_error(
                        state,
                        stmt,
                        "",
                        "ImportError: attempted relative import with no known parent package",
                    )
                raise StopProgram
            package_name = state.package[0]
            base_parts = package_name.split(".") if package_name else []
            up = stmt.level - 1
            if not base_parts or up > len(base_parts) - 1:
                raise StopProgram
            base_parts = base_parts[: len(base_parts) - up]
            parts = base_parts + (stmt.module.split(".") if stmt.module else [])
            top = self.importer.find_top(parts[0])
            if top is None:
                raise StopProgram
            result = self._import_chain(parts, top, stmt, state, depth)
            target = ".".join(parts)
        else:
            parts = (stmt.module or "").split(".")
            top = self.importer.find_top(parts[0])
            if top is None:
                return self._import_error(
                    state, stmt, parts[0], f"ModuleNotFoundError: No module named '{parts[0]}'"
                )
            result = self._import_chain(parts, top, stmt, state, depth)
            target = stmt.module or ""
        if result is not None:
            return result
        module_outcome = self.loaded.get(target)
        for alias in stmt.names:
            if alias.name == "*":
                state.open_namespace = True
                continue
            state.define(alias.asname or alias.name, "imported")
            if module_outcome is None or module_outcome.kind != "complete":
                continue  # stdlib / pytest: names assumed to exist
            namespace = module_outcome.namespace
            if namespace is None or alias.name in namespace:
                continue
            found = self._resolve_found(target)
            sub = self.importer.find_sub(found, alias.name) if found is not None else None
            if sub is not None:
                if sub.kind != "workspace":
                    raise StopProgram
                result = self._import_chain(
                    [alias.name], sub, stmt, state, depth, prefix=target + "."
                )
                if result is not None:
                    return result
                continue
            if found is None or found.path is None:
                raise StopProgram
            return self._import_error(
                state,
                stmt,
                target,
                f"ImportError: cannot import name '{alias.name}' from '{target}' ({found.path})",
            )
        return None

    def _resolve_found(self, dotted: str) -> Found | None:
        parts = dotted.split(".")
        found = self.importer.find_top(parts[0])
        for part in parts[1:]:
            if found is None:
                return None
            found = self.importer.find_sub(found, part)
        return found

    def _assign(self, stmt: ast.Assign | ast.AnnAssign, state: ModuleState) -> None:
        if isinstance(stmt, ast.AnnAssign):
            if not isinstance(stmt.target, ast.Name):
                raise StopProgram
            if not state.future_annotations:
                self._check_annotation(stmt.annotation, state)
            if stmt.value is not None:
                self._check_expr(stmt.value, state)
            state.define(stmt.target.id, "value")
            return None
        self._check_expr(stmt.value, state)
        for target in stmt.targets:
            for name in assigned_names(target, stmt.value):
                state.define(name, "value")
        return None

    # ---------------------------------------------------------------- expressions

    def _check_expr(self, node: ast.AST, state: ModuleState, extra: Iterable[str] = ()) -> None:
        """Raise StopProgram unless evaluating ``node`` is certain to succeed silently."""
        ok, _ = literal_value(node)
        if ok:
            return
        if isinstance(node, ast.Name):
            if (
                node.id in state.names
                or node.id in extra
                or (node.id in BUILTIN_NAMES and not node.id.startswith("_"))
            ):
                return
            raise StopProgram
        if isinstance(node, ast.Attribute):
            root = dotted_name(node)
            if root is None:
                raise StopProgram
            head = root.split(".")[0]
            kind = state.names.get(head, "")
            if kind.startswith("module:"):
                module = kind[len("module:") :].split(".")[0]
                if module in QUIET_STDLIB:
                    return  # attributes of the standard library are assumed to exist
            raise StopProgram
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for elt in node.elts:
                self._check_expr(elt, state, extra)
            return
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    self._check_expr(key, state, extra)
            for value in node.values:
                self._check_expr(value, state, extra)
            return
        raise StopProgram

    def _check_annotation(self, node: ast.AST, state: ModuleState, extra=()) -> None:
        if isinstance(node, ast.Constant):
            return
        if isinstance(node, ast.Subscript):
            base = dotted_name(node.value)
            if base in ("list", "dict", "tuple", "set", "frozenset", "type") and (
                self.env.python < (3, 9)
            ):
                raise StopProgram
            self._check_annotation(node.value, state, extra)
            inner = node.slice
            if sys.version_info < (3, 9) and isinstance(inner, ast.Index):  # pragma: no cover
                inner = inner.value  # type: ignore[attr-defined]
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            for elt in elts:
                if isinstance(elt, ast.List):
                    for sub in elt.elts:
                        self._check_annotation(sub, state, extra)
                else:
                    self._check_annotation(elt, state, extra)
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            if self.env.python < (3, 10):
                raise StopProgram
            self._check_annotation(node.left, state, extra)
            self._check_annotation(node.right, state, extra)
            return
        self._check_expr(node, state, extra)

    def _check_function(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef,
        state: ModuleState,
        class_names: set[str] | None,
    ) -> None:
        extra = class_names or set()
        for deco in node.decorator_list:
            name = dotted_name(deco)
            if name in SAFE_DECORATORS and (name.split(".")[0] not in state.names or "." in name):
                continue
            if name and name.count(".") == 1 and name.split(".")[1] in (
                "setter", "getter", "deleter"
            ) and name.split(".")[0] in extra:  # fmt: skip
                continue
            if isinstance(deco, ast.Call) and dotted_name(deco.func) in SAFE_CALL_DECORATORS:
                for arg in [*deco.args, *(k.value for k in deco.keywords)]:
                    if not literal_value(arg)[0]:
                        raise StopProgram
                continue
            raise StopProgram
        args = node.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self._check_expr(default, state, extra)
        if not state.future_annotations:
            all_args = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            if args.vararg:
                all_args.append(args.vararg)
            if args.kwarg:
                all_args.append(args.kwarg)
            for arg in all_args:
                if arg.annotation is not None:
                    self._check_annotation(arg.annotation, state, extra)
            if node.returns is not None:
                self._check_annotation(node.returns, state, extra)

    def _check_class(self, node: ast.ClassDef, state: ModuleState, depth: int) -> None:
        if node.decorator_list or node.keywords or depth > 3:
            raise StopProgram
        for base in node.bases:
            name = dotted_name(base)
            if name is None:
                raise StopProgram
            if name in SAFE_BASES and name.split(".")[0] not in state.names:
                continue
            if state.names.get(name) == "class":
                continue
            head = name.split(".")[0]
            if (
                "." in name
                and state.names.get(head, "").startswith("module:")
                and name in (SAFE_BASES)
            ):
                continue
            raise StopProgram
        class_names: set[str] = set()
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if isinstance(stmt, ast.Pass):
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name == "__init_subclass__" or stmt.name == "__set_name__":
                    raise StopProgram
                self._check_function(stmt, state, class_names)
                class_names.add(stmt.name)
                continue
            if isinstance(stmt, ast.Assign):
                self._check_expr(stmt.value, state, class_names)
                for target in stmt.targets:
                    class_names.update(assigned_names(target, stmt.value))
                continue
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if not state.future_annotations:
                    self._check_annotation(stmt.annotation, state, class_names)
                if stmt.value is not None:
                    self._check_expr(stmt.value, state, class_names)
                class_names.add(stmt.target.id)
                continue
            if isinstance(stmt, ast.ClassDef):
                self._check_class(stmt, state, depth + 1)
                class_names.add(stmt.name)
                continue
            raise StopProgram
