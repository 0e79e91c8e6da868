"""Reading one test module's AST the way pytest's collectors read the module object."""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.transition.deadline import check_deadline
from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.parametrize import UNKNOWN, ParametrizeReader
from sweworld.transition.facts.pytest_config import PytestConfig
from sweworld.transition.facts.simulation import dotted_name, literal_value

# --------------------------------------------------------------------------- pytest collection


def _pytest_version() -> tuple[int, ...]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return tuple(int(p) for p in version("pytest").split(".")[:2] if p.isdigit())
    except (PackageNotFoundError, ValueError):
        return (99,)


# Until pytest 9.2, a decorated test function's ``pytestmark`` attribute was one of its
# ``-k`` keywords; 9.2 dropped it. Follow the pytest installed here (newest behaviour when
# there is none).
_MARKS_ATTRIBUTE_IS_KEYWORD = _pytest_version() < (9, 2)

#: Most test items one function's stacked ``parametrize`` marks are expanded to (their
#: product): three marks of 100 values are 1,000,000 items and four 100,000,000, from a
#: five-line file; beyond it the function is one uncertain item (the count is not exact).
MAX_FUNCTION_ITEMS = 10_000
#: Most parametrized items one module expands in all (then, uncertain items as above).
MAX_MODULE_ITEMS = 100_000


@dataclass
class Item:
    nodeid: str
    base: str  # nodeid without the [params]
    names: set[str]  # -k names
    markers: set[str]
    uncertain: bool = False


def _prefix_or_glob(patterns: Sequence[str], name: str) -> bool:
    for pattern in patterns:
        if name.startswith(pattern):
            return True
        if any(c in pattern for c in "*?[") and fnmatch.fnmatch(name, pattern):
            return True
    return False


class ModuleScanner(ParametrizeReader):
    """Reads one test module's AST the way pytest's collectors read the module object."""

    def __init__(
        self,
        ws: Workspace,
        path: str,
        tree: ast.Module,
        config: PytestConfig,
        env: Environment,
        param_fixtures: set[str],
        importer: Importer,
    ):
        self.ws = ws
        self.path = path
        self.tree = tree
        self.config = config
        self.env = env
        self.param_fixtures = param_fixtures
        self.importer = importer
        self.functions_patterns = config.getlist("python_functions", ["test"])
        self.classes_patterns = config.getlist("python_classes", ["Test"])
        self.uncertain = False
        self.expanded = 0  # parametrized items expanded so far (bounded: MAX_MODULE_ITEMS)
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.used_marks: set[str] = set()
        self.class_nodes: dict[str, str] = {}  # class node id -> pytest's repr of the node
        self.module_consts: dict[str, Any] = {}
        self.module_defs: dict[str, ast.AST] = {}
        self.imported: dict[str, tuple[str, str, int]] = {}  # name -> (module, attr, level)
        self.module_marks: list[ast.expr] = []
        self._scan_module_names()

    # ---------------------------------------------------------------- module names

    def _scan_module_names(self) -> None:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        ok, value = literal_value(stmt.value)
                        self.module_consts[target.id] = value if ok else UNKNOWN
                        if target.id == "pytestmark":
                            marks = (
                                stmt.value.elts
                                if isinstance(stmt.value, (ast.List, ast.Tuple))
                                else [stmt.value]
                            )
                            self.module_marks = list(marks)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_defs[stmt.name] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        self.uncertain = True
                        self.notes.append(f"{self.path}: `from ... import *` may add tests")
                        continue
                    self.imported[alias.asname or alias.name] = (
                        stmt.module or "",
                        alias.name,
                        stmt.level,
                    )
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    self.imported[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0],
                        "",
                        0,
                    )

    # ---------------------------------------------------------------- items

    def _marks_of(self, decorators: Sequence[ast.expr]) -> tuple[list[str], list[ast.Call]]:
        """(mark names, parametrize calls) of a decorator list, innermost first."""
        names: list[str] = []
        params: list[ast.Call] = []
        for deco in reversed(decorators):
            name, call = self._mark_name(deco)
            if name is None:
                continue
            names.append(name)
            self.used_marks.add(name)
            if name == "parametrize" and call is not None:
                params.append(call)
        return names, params

    def items(self, file_nodeid: str, module_names: list[str]) -> list[Item]:
        if self.module_consts.get("__test__") is False:
            return []
        module_mark_names: list[str] = []
        module_params: list[ast.Call] = []
        for mark in self.module_marks:
            name, call = self._mark_name(mark)
            if name:
                module_mark_names.append(name)
                self.used_marks.add(name)
                if name == "parametrize" and call is not None:
                    module_params.append(call)
        out: list[Item] = []
        seen: set[str] = set()
        for n, stmt in enumerate(self._module_level_defs()):
            if n % 64 == 63:
                check_deadline("collecting the tests")
            if isinstance(stmt, tuple) and stmt[0] == "alias":
                _, alias, original = stmt  # type: ignore[misc]
                if alias in seen or not _prefix_or_glob(self.functions_patterns, alias):
                    continue
                seen.add(alias)
                node = self.module_defs[original]
                renamed = ast.FunctionDef(
                    name=alias,
                    args=node.args,
                    body=node.body,
                    decorator_list=node.decorator_list,
                    returns=None,
                    lineno=node.lineno,
                    col_offset=node.col_offset,
                )
                if not self._is_fixture(node):
                    out.extend(
                        self._function_items(
                            renamed, file_nodeid, [], module_names, module_mark_names,
                            module_params,
                        )
                    )  # fmt: skip
                continue
            if isinstance(stmt, tuple):  # an imported test function or class
                self.uncertain = True
                continue
            if stmt.name in seen:
                continue
            seen.add(stmt.name)
            final = self.module_defs.get(stmt.name, stmt)
            if isinstance(final, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not _prefix_or_glob(self.functions_patterns, final.name):
                    continue
                if self._is_fixture(final):
                    continue
                out.extend(
                    self._function_items(
                        final, file_nodeid, [], module_names, module_mark_names, module_params
                    )
                )
            elif isinstance(final, ast.ClassDef):
                out.extend(
                    self._class_items(
                        final, file_nodeid, [], module_names, module_mark_names, module_params,
                        nested=False,
                    )
                )  # fmt: skip
        return out

    def _module_level_defs(self) -> Iterator[ast.stmt | tuple[str, str]]:
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield stmt
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)) or (
                sys.version_info >= (3, 11) and isinstance(stmt, getattr(ast, "TryStar", ()))
            ):
                for inner in ast.walk(stmt):
                    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        name = inner.name
                        if _prefix_or_glob(self.functions_patterns, name) or _prefix_or_glob(
                            self.classes_patterns, name
                        ):
                            self.uncertain = True
                            self.notes.append(f"{self.path}: {name} is defined conditionally")
                        break
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    bound = alias.asname or alias.name
                    if alias.name != "*" and (
                        _prefix_or_glob(self.functions_patterns, bound)
                        or _prefix_or_glob(self.classes_patterns, bound)
                    ):
                        self.notes.append(f"{self.path}: imported name {bound} may be a test")
                        yield (stmt.module or "", bound)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if not isinstance(target, ast.Name) or not (
                        _prefix_or_glob(self.functions_patterns, target.id)
                        or _prefix_or_glob(self.classes_patterns, target.id)
                    ):
                        continue
                    if literal_value(stmt.value)[0]:
                        continue  # a constant is not collected
                    value = stmt.value
                    if isinstance(value, ast.Name) and isinstance(
                        self.module_defs.get(value.id), (ast.FunctionDef, ast.AsyncFunctionDef)
                    ):
                        yield ("alias", target.id, value.id)  # type: ignore[misc]
                        continue
                    self.uncertain = True
                    self.notes.append(f"{self.path}: {target.id} is assigned")

    def _accepts(self, node: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> bool:
        """Whether the function takes every argument the parametrize call names."""
        if node.args.kwarg is not None:
            return True
        ok, argnames = literal_value(call.args[0]) if call.args else (False, None)
        if not ok:
            return False
        if isinstance(argnames, str):
            names = [n.strip() for n in argnames.split(",") if n.strip()]
        elif isinstance(argnames, (list, tuple)):
            names = [str(n) for n in argnames]
        else:
            return False
        params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        return all(n in params for n in names)

    def _uses_param_fixture(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        names = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        return bool(names & self.param_fixtures)

    def _function_items(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef,
        file_nodeid: str,
        class_path: list[str],
        parent_names: list[str],
        inherited_marks: list[str],
        inherited_params: list[ast.Call],
    ) -> list[Item]:
        base = "::".join([file_nodeid, *class_path, node.name])
        own_marks, own_params = self._marks_of(node.decorator_list)
        marks = set(own_marks) | set(inherited_marks)
        names = {*parent_names, *class_path, node.name}
        if own_marks and _MARKS_ATTRIBUTE_IS_KEYWORD:
            names.add("pytestmark")
        params = own_params + inherited_params
        uncertain = self._uses_param_fixture(node)
        if uncertain:
            self.notes.append(f"{base}: uses a parametrized fixture")
        if not params:
            return [Item(base, base, names | {node.name}, marks, uncertain)]
        ids: list[tuple[str, set[str]]] = [("", set())]
        count = 1
        for call in params:
            result = self._parametrize(call, node.name)
            if result is None:
                self.notes.append(f"{base}: parametrize arguments are not literal")
                return [Item(base + "[?]", base, names, marks, True)]
            sets, exact = result
            if not exact:
                uncertain = True
            if not self._accepts(node, call):
                uncertain = True
                self.notes.append(f"{base}: parametrizes an argument the function lacks")
            count *= len(sets)
            if count > MAX_FUNCTION_ITEMS or self.expanded + count > MAX_MODULE_ITEMS:
                self.notes.append(f"{base}: parametrized into too many items to list")
                return [Item(base + "[?]", base, names, marks, True)]
            new_ids = []
            for prefix, prefix_marks in ids:
                for pset in sets:
                    new_id = f"{prefix}-{pset.id}" if prefix else str(pset.id)
                    new_ids.append((new_id, prefix_marks | set(pset.marks)))
            ids = new_ids
        self.expanded += len(ids)
        out = []
        for pid, pmarks in ids:
            nodeid = f"{base}[{pid}]"
            out.append(
                Item(nodeid, base, names | {f"{node.name}[{pid}]"}, marks | pmarks, uncertain)
            )
        return out

    def _resolve_class(self, name: str) -> tuple[str, ast.ClassDef | None, ModuleScanner | None]:
        """('local', node) for classes of this module, ('testcase', None) for unittest's,
        ('unknown', None) otherwise."""
        if name in self.module_defs and isinstance(self.module_defs[name], ast.ClassDef):
            return "local", self.module_defs[name], self  # type: ignore[return-value]
        head = name.split(".")[0]
        origin = self.imported.get(head)
        tail = name.split(".")[1:]
        if origin is not None:
            module, attr, level = origin
            qual = ".".join([p for p in [module, attr, *tail] if p])
            if qual in ("unittest.TestCase", "unittest.case.TestCase",
                        "unittest.IsolatedAsyncioTestCase", "django.test.TestCase",
                        "django.test.SimpleTestCase", "django.test.TransactionTestCase",
                        "django.test.LiveServerTestCase", "django.test.testcases.TestCase",
                        "django.test.testcases.SimpleTestCase",
                        "django.test.testcases.TransactionTestCase"):  # fmt: skip
                return "testcase", None, None
            other = self._foreign_class(module, attr, level, tail)
            if other is not None:
                return other
        return "unknown", None, None

    def _foreign_class(
        self, module: str, attr: str, level: int, tail: list[str]
    ) -> tuple[str, ast.ClassDef | None, ModuleScanner | None] | None:
        if tail or not attr:
            return None
        if level:
            base_dir = posixpath.dirname(self.path)
            for _ in range(level - 1):
                base_dir = posixpath.dirname(base_dir)
            candidates = [base_dir]
        else:
            candidates = list(self.importer.search_dirs)
        rel = module.replace(".", "/") if module else ""
        for directory in candidates:
            for path in (
                posixpath.join(directory, rel + ".py") if rel else None,
                posixpath.join(directory, rel, "__init__.py"),
            ):
                if not path or not self.ws.is_file(path):
                    continue
                tree = self.ws.tree(path)
                if tree is None:
                    return None
                scanner = ModuleScanner(
                    self.ws, path, tree, self.config, self.env, self.param_fixtures, self.importer
                )
                node = scanner.module_defs.get(attr)
                if isinstance(node, ast.ClassDef):
                    return "local", node, scanner
                if attr in scanner.imported:
                    return scanner._resolve_class(attr)
                return None
        return None

    def _class_info(
        self, node: ast.ClassDef, depth: int = 0
    ) -> tuple[bool, bool, bool, list[tuple[ast.ClassDef, ModuleScanner]]]:
        """(is a unittest TestCase, has __init__/__new__, known completely, MRO chain of
        class nodes with their scanner, the class itself first)."""
        chain: list[tuple[ast.ClassDef, ModuleScanner]] = [(node, self)]
        is_testcase = False
        has_init = any(
            isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            and s.name in ("__init__", "__new__")
            for s in node.body
        )
        known = True
        if depth > 8:
            return False, has_init, False, chain
        for base in node.bases:
            name = dotted_name(base)
            if name in (None, "object"):
                if name is None:
                    known = False
                continue
            kind, base_node, scanner = self._resolve_class(name)
            if kind == "testcase":
                is_testcase = True
            elif kind == "local" and base_node is not None and scanner is not None:
                tc, init, k, sub_chain = scanner._class_info(base_node, depth + 1)
                is_testcase |= tc
                has_init |= init
                known &= k
                chain.extend(c for c in sub_chain if c not in chain)
            else:
                if name.endswith(("TestCase", "Mixin")) or name in ("ABC", "abc.ABC"):
                    is_testcase |= name.endswith("TestCase")
                    if name.endswith("Mixin"):
                        known = False
                    continue
                known = False
        return is_testcase, has_init, known, chain

    def _class_items(
        self,
        node: ast.ClassDef,
        file_nodeid: str,
        class_path: list[str],
        parent_names: list[str],
        inherited_marks: list[str],
        inherited_params: list[ast.Call],
        nested: bool,
    ) -> list[Item]:
        is_testcase, has_init, known, chain = self._class_info(node)
        dunder_test = _class_attr_literal(node, "__test__")
        if (
            not is_testcase
            and not _prefix_or_glob(self.classes_patterns, node.name)
            and (dunder_test is not True)
        ):
            if not known and not nested:
                # An unknown base could make it a TestCase subclass.
                self.uncertain = True
                self.notes.append(f"{self.path}::{node.name}: unknown base classes")
            return []
        if dunder_test is False:
            return []
        if _is_abstract(node):
            return []
        if not known:
            self.uncertain = True
            self.notes.append(f"{self.path}::{node.name}: inherits from unknown base classes")
        path = [*class_path, node.name]
        kind = "UnitTestCase" if is_testcase else "Class"
        self.class_nodes["::".join([file_nodeid, *path])] = f"<{kind} {node.name}>"
        own_marks, own_params = self._marks_of(node.decorator_list)
        marks = own_marks + inherited_marks
        params = own_params + inherited_params
        if is_testcase:
            names: list[str] = []
            for cls, _scanner in chain:
                for stmt in cls.body:
                    target = None
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        target = stmt.name
                    elif isinstance(stmt, ast.Assign):
                        for t in stmt.targets:
                            if isinstance(t, ast.Name):
                                target = t.id
                    if target and target.startswith("test") and target not in names:
                        names.append(target)
            out = []
            base_names = {*parent_names, *path}
            for name in sorted(names):
                nodeid = "::".join([file_nodeid, *path, name])
                out.append(Item(nodeid, nodeid, base_names | {name}, set(marks), False))
            if not names:
                has_runtest = any(
                    isinstance(s, ast.FunctionDef) and s.name == "runTest"
                    for cls, _ in chain
                    for s in cls.body
                )
                if has_runtest:
                    nodeid = "::".join([file_nodeid, *path, "runTest"])
                    out.append(Item(nodeid, nodeid, base_names | {"runTest"}, set(marks)))
            return out
        if has_init:
            self.warnings.append(
                f"cannot collect test class {node.name!r} because it has a __init__ constructor"
            )
            return []
        # Plain test class: walk the MRO, bases' tests first (reverse MRO order).
        dicts: list[list[tuple[ast.stmt, ModuleScanner]]] = []
        seen: set[str] = set()
        for cls, scanner in chain:
            entries = []
            for stmt in cls.body:
                name = getattr(stmt, "name", None)
                if isinstance(stmt, ast.Assign):
                    for t in stmt.targets:
                        if isinstance(t, ast.Name) and (
                            _prefix_or_glob(self.functions_patterns, t.id)
                        ):
                            self.uncertain = True
                    continue
                if name is None or name in seen:
                    continue
                seen.add(name)
                entries.append((stmt, scanner))
            dicts.append(entries)
        out = []
        for entries in reversed(dicts):
            for stmt, scanner in entries:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if not _prefix_or_glob(self.functions_patterns, stmt.name):
                        continue
                    if scanner._is_fixture(stmt):
                        continue
                    out.extend(
                        scanner._function_items(
                            stmt, file_nodeid, path, parent_names, marks, params
                        )
                    )
                elif isinstance(stmt, ast.ClassDef):
                    out.extend(
                        scanner._class_items(
                            stmt, file_nodeid, path, parent_names, marks, params, nested=True
                        )
                    )
        return out


def _class_attr_literal(node: ast.ClassDef, name: str) -> Any:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    ok, value = literal_value(stmt.value)
                    return value if ok else UNKNOWN
    return None


def _is_abstract(node: ast.ClassDef) -> bool:
    bases = {dotted_name(b) for b in node.bases}
    keywords = {dotted_name(k.value) for k in node.keywords if k.arg == "metaclass"}
    if not (bases & {"ABC", "abc.ABC"} or keywords & {"ABCMeta", "abc.ABCMeta"}):
        return False
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in stmt.decorator_list:
                if dotted_name(deco) in ("abstractmethod", "abc.abstractmethod"):
                    return True
    return False
