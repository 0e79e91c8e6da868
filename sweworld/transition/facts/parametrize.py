"""pytest's parametrization: the ids of parameter values (:func:`parametrize_id`) and the
scanner's reading of marks and ``@pytest.mark.parametrize`` calls.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from typing import Any

from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.simulation import dotted_name, literal_value


def _bytes_escape(value: bytes) -> str:
    text = value.decode("ascii", "backslashreplace")
    return _translate_nonprintable(text)


def _translate_nonprintable(text: str) -> str:
    table = {i: f"\\x{i:02x}" for i in range(128) if i not in range(32, 127)}
    table.update({ord("\t"): "\\t", ord("\r"): "\\r", ord("\n"): "\\n"})
    return text.translate(table)


def _ascii_escaped(value: str | bytes) -> str:
    if isinstance(value, bytes):
        return _bytes_escape(value)
    return _translate_nonprintable(value.encode("unicode_escape").decode("ascii"))


UNKNOWN = object()


class _Named:
    """A value pytest would name by its ``__name__`` (a class, a function)."""

    def __init__(self, name: str):
        self.__name__ = name


def parametrize_id(value: Any, argname: str, index: int) -> str | None:
    """pytest's id for one parameter value (``_idval_from_value``), or None when the value
    is not one pytest names (then the id is ``argname`` + index)."""
    if isinstance(value, (str, bytes)):
        return _ascii_escaped(value)
    if value is None or isinstance(value, (float, int, bool, complex)):
        return str(value)
    if isinstance(value, re.Pattern):
        return _ascii_escaped(value.pattern)
    name = getattr(value, "__name__", None)
    if isinstance(name, str):
        return name
    return None


@dataclass
class _ParamSet:
    values: list[Any]
    id: str | None = None
    marks: list[str] = field(default_factory=list)


def _make_unique(ids: list[str], env: Environment) -> list[str]:
    if len(set(ids)) == len(ids):
        return ids
    from collections import Counter, defaultdict

    counts = Counter(ids)
    out = list(ids)
    if env.pytest >= (8,):
        suffixes: dict[str, int] = defaultdict(int)
        for index, value in enumerate(out):
            if counts[value] > 1:
                suffix = "_" if value and value[-1].isdigit() else ""
                new = f"{value}{suffix}{suffixes[value]}"
                while new in set(out):
                    suffixes[value] += 1
                    new = f"{value}{suffix}{suffixes[value]}"
                out[index] = new
                suffixes[value] += 1
        return out
    suffixes = defaultdict(int)
    for index, value in enumerate(out):
        if counts[value] > 1:
            out[index] = f"{value}{suffixes[value]}"
            suffixes[value] += 1
    return out


class ParametrizeReader:
    """Reading marks and ``@pytest.mark.parametrize`` calls: the base class of
    :class:`~sweworld.transition.facts.scanner.ModuleScanner`, whose attributes
    (``imported``, ``module_consts``, ``module_defs``, ``env``, ...) it uses."""

    # ---------------------------------------------------------------- helpers

    def _is_pytest_name(self, dotted: str | None, attr: str) -> bool:
        """Whether ``dotted`` names ``pytest.<attr>`` (``pytest.mark.parametrize``, ...)."""
        if not dotted:
            return False
        parts = dotted.split(".")
        head = parts[0]
        origin = self.imported.get(head)
        if origin is None:
            return False
        module, name, _level = origin
        full = [*module.split("."), *([name] if name else []), *parts[1:]]
        if full[0] == "_pytest":
            full = ["pytest", *full[2:]] if len(full) > 2 else full
        return ".".join(full) == f"pytest.{attr}"

    def _mark_name(self, node: ast.expr) -> tuple[str | None, ast.Call | None]:
        """('parametrize', call) for ``@pytest.mark.parametrize(...)``; (name, call) for
        other marks; (None, None) for decorators that are not marks."""
        call = node if isinstance(node, ast.Call) else None
        target = node.func if call is not None else node
        dotted = dotted_name(target)
        if not dotted:
            return None, None
        parts = dotted.split(".")
        for i in range(len(parts)):
            if self._is_pytest_name(".".join(parts[: i + 1]), "mark") and i + 1 < len(parts):
                return parts[i + 1], call
        return None, None

    def _is_fixture(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            dotted = dotted_name(target)
            if dotted and (self._is_pytest_name(dotted, "fixture") or dotted.endswith("fixture")):
                return True
        return False

    def _value(self, node: ast.expr) -> Any:
        """The parameter value of an argvalues element, as far as pytest's id needs it."""
        ok, value = literal_value(node)
        if ok:
            return value
        if isinstance(node, ast.Name):
            if node.id in self.module_consts:
                return self.module_consts[node.id]
            if node.id in self.module_defs:
                return _Named(node.id)
            if node.id in self.imported:
                module, attr, _ = self.imported[node.id]
                self.uncertain_params = True
                return _Named(attr or module.split(".")[-1])
            builtin = getattr(builtins, node.id, None)
            if builtin is not None and (callable(builtin)) and not node.id.startswith("_"):
                return _Named(node.id)
            return UNKNOWN
        if isinstance(node, ast.Lambda):
            return _Named("<lambda>")
        if isinstance(node, ast.Call):
            func = dotted_name(node.func)
            if func in ("float", "int", "str", "bytes", "complex", "bool") and all(
                literal_value(a)[0] for a in node.args
            ) and not node.keywords:  # fmt: skip
                try:
                    return getattr(builtins, func)(*[literal_value(a)[1] for a in node.args])
                except Exception:
                    return UNKNOWN
            if func in ("re.compile", "compile") and node.args and not node.keywords:
                ok, pattern = literal_value(node.args[0])
                if ok and isinstance(pattern, (str, bytes)) and len(node.args) == 1:
                    return _Named(_ascii_escaped(pattern))
            if func in ("Decimal", "decimal.Decimal", "Fraction", "fractions.Fraction", "object",
                        "dict", "list", "set", "frozenset", "tuple", "Path", "pathlib.Path",
                        "datetime", "datetime.datetime", "date", "datetime.date", "timedelta",
                        "datetime.timedelta"):  # fmt: skip
                return object()
            return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                             ast.SetComp, ast.GeneratorExp, ast.JoinedStr)):  # fmt: skip
            if isinstance(node, ast.JoinedStr):
                return UNKNOWN
            return object()
        return UNKNOWN

    def _argvalues(self, node: ast.expr) -> list[ast.expr] | None:
        if isinstance(node, (ast.List, ast.Tuple)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return list(node.elts)
        if isinstance(node, ast.Name) and node.id in self.module_defs:
            return None
        if isinstance(node, ast.Name):
            for stmt in self.tree.body:
                if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets
                ):
                    found = self._argvalues(stmt.value)
                    return found
            return None
        if isinstance(node, ast.Call) and dotted_name(node.func) == "range" and not node.keywords:
            values = [literal_value(a) for a in node.args]
            if all(ok for ok, _ in values) and 1 <= len(values) <= 3:
                try:
                    numbers = list(range(*[v for _, v in values]))
                except (TypeError, ValueError):
                    return None
                if len(numbers) > 10000:
                    return None
                return [ast.Constant(n) for n in numbers]
        return None

    def _parametrize(self, call: ast.Call, func_name: str) -> tuple[list[_ParamSet], bool] | None:
        """(parameter sets with their ids, exact) of one parametrize mark, or None when
        its argument list is not known."""
        args = list(call.args)
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        argnames_node = args[0] if args else kwargs.get("argnames")
        argvalues_node = args[1] if len(args) > 1 else kwargs.get("argvalues")
        if argnames_node is None or argvalues_node is None:
            return None
        ok, argnames = literal_value(argnames_node)
        if not ok:
            return None
        force_tuple = False
        if isinstance(argnames, str):
            names = [n.strip() for n in argnames.split(",") if n.strip()]
            force_tuple = len(names) != 1
        elif isinstance(argnames, (list, tuple)):
            names = [str(n) for n in argnames]
            force_tuple = True
        else:
            return None
        elements = self._argvalues(argvalues_node)
        if elements is None:
            return None
        exact = True
        self.uncertain_params = False
        sets: list[_ParamSet] = []
        for element in elements:
            param_id = None
            marks: list[str] = []
            node = element
            if isinstance(node, ast.Call) and self._is_param_call(node):
                values_nodes = list(node.args)
                for kw in node.keywords:
                    if kw.arg == "id":
                        ok, pid = literal_value(kw.value)
                        if ok and (pid is None or isinstance(pid, str)):
                            param_id = pid
                        else:
                            exact = False
                    elif kw.arg == "marks":
                        marks_nodes = (
                            kw.value.elts
                            if isinstance(kw.value, (ast.List, ast.Tuple))
                            else [kw.value]
                        )
                        for mark_node in marks_nodes:
                            name, _ = self._mark_name(mark_node)
                            if name:
                                marks.append(name)
                                self.used_marks.add(name)
                values = [self._value(v) for v in values_nodes]
                if not force_tuple and len(values) != 1:
                    exact = False
            elif force_tuple:
                if isinstance(node, (ast.Tuple, ast.List)):
                    values = [self._value(v) for v in node.elts]
                else:
                    ok, value = literal_value(node)
                    if ok and isinstance(value, (tuple, list)):
                        values = list(value)
                    else:
                        return None
            else:
                values = [self._value(node)]
            if any(v is UNKNOWN for v in values):
                exact = False
            sets.append(_ParamSet(values=values, id=param_id, marks=marks))
        if self.uncertain_params:
            exact = False
        ids_node = kwargs.get("ids")
        if len(args) > 3 and ids_node is None:
            ids_node = args[3]
        explicit_ids: list[Any] | None = None
        if ids_node is not None:
            ok, value = literal_value(ids_node)
            if ok and isinstance(value, (list, tuple)):
                explicit_ids = list(value)
            elif ok and value is None:
                explicit_ids = None
            else:
                exact = False
                explicit_ids = None
        if not sets:
            # An empty parameter set: pytest makes one (skipped) test; pytest 9 names it
            # NOTSET, older versions after the argnames.
            empty_id = "NOTSET" if self.env.pytest >= (9,) else "-".join(f"{n}0" for n in names)
            empty = _ParamSet(values=[], id=empty_id, marks=["skip"])
            return [empty], exact and self.env.pytest >= (9,)
        resolved: list[str] = []
        for index, pset in enumerate(sets):
            if pset.id is not None:
                resolved.append(_ascii_escaped(pset.id))
            elif (
                explicit_ids is not None
                and index < len(explicit_ids)
                and (explicit_ids[index] is not None)
            ):
                value = parametrize_id(explicit_ids[index], "", index)
                if value is None:
                    exact = False
                    value = str(explicit_ids[index])
                resolved.append(value)
            else:
                parts = []
                for value, argname in zip(pset.values, names, strict=False):
                    idval = None if value is UNKNOWN else parametrize_id(value, argname, index)
                    parts.append(idval if idval is not None else f"{argname}{index}")
                if len(pset.values) != len(names):
                    exact = False
                resolved.append("-".join(parts))
        resolved = _make_unique(resolved, self.env)
        for pset, rid in zip(sets, resolved, strict=True):
            pset.id = rid
        return sets, exact

    def _is_param_call(self, node: ast.Call) -> bool:
        dotted = dotted_name(node.func)
        return bool(dotted) and (self._is_pytest_name(dotted, "param") or dotted == "param")
