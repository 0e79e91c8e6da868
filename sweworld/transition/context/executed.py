"""The executed code: what the command runs (a script, ``-c`` code, stdin, a module, pytest
and unittest targets), with line numbers.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.models.budget import Part, split_text_lines
from sweworld.transition.context.config import ContextConfig
from sweworld.transition.context.outline import (
    NumberedLine,
    Unit,
    abs_path,
    canonical_path,
    outline_units,
    read_source,
    render_numbered,
    render_unit,
    render_whole,
)
from sweworld.transition.types import WORKDIR, WorkspaceView

# ------------------------------------------------------------------------------------------
# What the command executes
# ------------------------------------------------------------------------------------------


@dataclass
class _Source:
    """Code the command runs: its text and the directory its imports resolve from."""

    label: str
    text: str
    directory: str
    path: str | None = None
    pytest: bool = False


@dataclass
class _Item:
    """One thing the command executes, before rendering."""

    kind: str  # "inline" | "stdin" | "file" | "note"
    key: str
    text: str = ""
    names: set[str] | None = None  # file: selected definitions; None = the whole file
    role: str = ""
    compact: bool = False
    pytest: bool = False


@dataclass
class Executed:
    parts: list[Part] = field(default_factory=list)
    sources: list[_Source] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)
    test_files: list[str] = field(default_factory=list)
    stdin_is_script: bool = False
    idents: set[str] = field(default_factory=set)


_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?[dmu]?$")
_PYTEST_NAMES = ("pytest", "py.test")
_PYTEST_VALUE_SHORT = frozenset({"-k", "-m", "-p", "-c", "-o", "-W", "-n", "-r"})
_PYTEST_VALUE_LONG = frozenset(
    {
        "--rootdir",
        "--confcutdir",
        "--tb",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--junitxml",
        "--junit-xml",
        "--maxfail",
        "--durations",
        "--durations-min",
        "--cov",
        "--cov-report",
        "--cov-config",
        "--basetemp",
        "--log-level",
        "--log-cli-level",
        "--log-file",
        "--color",
        "--capture",
        "--import-mode",
        "--override-ini",
        "--timeout",
        "--reruns",
        "--dist",
        "--numprocesses",
        "--randomly-seed",
        "--count",
        "--ds",
        "--settings",
        "--cache-dir",
        "--report-log",
        "--show-capture",
        "--doctest-glob",
        "--config-file",
        "--inifile",
    }
)
_SETUP_NAMES = frozenset(
    {
        "setUp",
        "tearDown",
        "setUpClass",
        "tearDownClass",
        "setup_method",
        "teardown_method",
        "setup_class",
        "teardown_class",
        "setup",
        "teardown",
        "setup_module",
        "teardown_module",
        "setup_function",
        "teardown_function",
        "setUpModule",
        "tearDownModule",
    }
)
_LABEL_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _is_test_file(name: str, pattern: str = "pytest") -> bool:
    base = posixpath.basename(name)
    if not base.endswith(".py"):
        return False
    if pattern == "unittest":
        return base.startswith("test")
    return base.startswith("test_") or base.endswith("_test.py")


def decode_source(data: bytes) -> tuple[str | None, str]:
    if b"\0" in data:
        return None, f"({len(data):,} bytes of binary data)"
    return data.decode("utf-8", errors="replace"), ""


class Collector:
    """Finds what one request executes (phase 1), then renders it (phase 2)."""

    def __init__(self, request: Any, view: WorkspaceView, config: ContextConfig):
        self.request = request
        self.view = view
        self.config = config
        self.cwd = getattr(request, "cwd", None) or WORKDIR
        self.items: dict[str, _Item] = {}
        self.stdin_is_script = False

    # -------------------------------------------------------------- phase 1

    def collect(self, extra_files: Sequence[str] = ()) -> Executed:
        argv = [str(a) for a in getattr(self.request, "argv", ())]
        if argv:
            name = posixpath.basename(argv[0])
            if _PYTHON_RE.match(name):
                self._python(argv[1:])
            elif name in _PYTEST_NAMES:
                self._pytest(argv[1:])
            elif name in ("coverage", "coverage3") and argv[1:2] == ["run"]:
                self._python([a for a in argv[2:] if not a.startswith("--")])
            elif "/" in argv[0] and self.view.is_file(abs_path(argv[0], self.cwd)):
                self._script(argv[0], argv[1:])
        for path in extra_files:
            self._add_file(canonical_path(self.view, path, self.cwd), None, role="executed")
        return self._render()

    def _add(self, item: _Item) -> None:
        if item.key in self.items:
            old = self.items[item.key]
            if old.names is None or item.names is None:
                old.names = None
            else:
                old.names |= item.names
            old.compact = old.compact and item.compact
            return
        if len(self.items) < self.config.max_files:
            self.items[item.key] = item

    def _add_file(
        self,
        path: str,
        names: set[str] | None,
        *,
        role: str,
        compact: bool = False,
        pytest: bool = False,
    ) -> None:
        names = {n for n in names if n} if names is not None else None
        self._add(_Item("file", path, "", names or None, role, compact, pytest))

    # -------------------------------------------------------------- python

    def _python(self, args: list[str]) -> None:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-":
                self._stdin_script()
                return
            if arg == "--":
                if i + 1 < len(args):
                    self._script(args[i + 1], args[i + 2 :])
                return
            if arg.startswith("--"):
                if arg in ("--help", "--version"):
                    return
                i += 2 if arg == "--check-hash-based-pycs" else 1
                continue
            if arg.startswith("-") and len(arg) > 1:
                for j in range(1, len(arg)):
                    ch, rest = arg[j], arg[j + 1 :]
                    if ch in "cm":
                        value = rest or (args[i + 1] if i + 1 < len(args) else None)
                        tail = args[i + 1 :] if rest else args[i + 2 :]
                        if value is not None and ch == "c":
                            self._add(_Item("inline", "python -c", value))
                        elif value is not None:
                            self._module(value, tail)
                        return
                    if ch in "WX":
                        if not rest:
                            i += 1
                        break
                    if ch in "hV?":
                        return
                i += 1
                continue
            self._script(arg, args[i + 1 :])
            return
        if getattr(self.request, "stdin", b""):
            self._stdin_script()

    def _stdin_script(self) -> None:
        self.stdin_is_script = True
        self._add(_Item("stdin", "<stdin>"))

    def _script(self, arg: str, args: list[str]) -> None:
        path = canonical_path(self.view, arg, self.cwd)
        runner = "test" in posixpath.basename(path).lower()
        labels = [a for a in args if not a.startswith("-")] if runner else []
        self._add_file(path, None, role="script")
        before = len(self.items)
        script_dir = posixpath.dirname(path)
        for label in labels:
            # test labels given to a runner script (Django's runtests.py, sympy's bin/test)
            if label.endswith(".py") or "::" in label or "/" in label:
                self._pytest_target(label)
            elif _LABEL_RE.match(label):
                self._unittest_label(label, (script_dir, self.cwd, WORKDIR))
        if len(self.items) > before and path in self.items:
            self.items[path].compact = True  # the tests it runs say more than the runner

    def _module(self, module: str, args: list[str]) -> None:
        if module in ("pytest", "py.test"):
            self._pytest(args)
            return
        if module == "unittest":
            self._unittest(args)
            return
        if module.split(".")[0] in sys.stdlib_module_names or module in ("pip", "pip3"):
            return
        for root in dict.fromkeys((self.cwd, WORKDIR, f"{WORKDIR}/src")):
            base = abs_path(module.replace(".", "/"), root)
            for candidate in (base + ".py", base + "/__main__.py"):
                if self.view.is_file(candidate):
                    path = self.view.resolve(candidate) or candidate
                    self._add_file(path, None, role=f"module {module}")
                    return

    # -------------------------------------------------------------- unittest

    def _unittest(self, args: list[str]) -> None:
        positional: list[str] = []
        start = None
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-s", "--start-directory", "-p", "--pattern", "-t", "--top-level-directory"):
                if arg in ("-s", "--start-directory") and i + 1 < len(args):
                    start = args[i + 1]
                i += 2
                continue
            if not arg.startswith("-"):
                positional.append(arg)
            i += 1
        if not positional or positional[0] == "discover":
            rest = positional[1:]
            directory = start or (rest[0] if rest else ".")
            self._test_dir(canonical_path(self.view, directory, self.cwd), "unittest")
            return
        for label in positional:
            if label.endswith(".py") or "/" in label:
                self._pytest_target(label)
            else:
                self._unittest_label(label, (self.cwd, WORKDIR))

    def _unittest_label(self, label: str, roots: Sequence[str]) -> None:
        parts = label.split(".")
        for root in dict.fromkeys(roots):
            for k in range(len(parts), 0, -1):
                base = abs_path("/".join(parts[:k]), root)
                if self.view.is_file(base + ".py"):
                    path = self.view.resolve(base + ".py") or base + ".py"
                    names = {".".join(parts[k:])} if k < len(parts) else None
                    self._test_file(path, names)
                    return
                if k == len(parts) and self.view.is_dir(base):
                    self._test_dir(self.view.resolve(base) or base, "unittest")
                    return

    # -------------------------------------------------------------- pytest

    def _pytest(self, args: list[str]) -> None:
        targets: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                targets.extend(args[i + 1 :])
                break
            if arg.startswith("--"):
                i += 2 if ("=" not in arg and arg in _PYTEST_VALUE_LONG) else 1
                continue
            if arg.startswith("-") and len(arg) > 1:
                i += 2 if arg in _PYTEST_VALUE_SHORT else 1
                continue
            targets.append(arg)
            i += 1
        if not targets:
            self._test_dir(self.cwd, "pytest")
        for target in targets:
            self._pytest_target(target)

    def _pytest_target(self, target: str) -> None:
        node = target.split("[", 1)[0]
        path_part, _, rest = node.partition("::")
        names = {rest.replace("::", ".")} if rest else None
        candidates = [abs_path(path_part, self.cwd)]
        if not path_part.startswith("/"):
            candidates.append(abs_path(path_part, WORKDIR))
        for candidate in dict.fromkeys(candidates):
            if self.view.is_dir(candidate):
                self._test_dir(self.view.resolve(candidate) or candidate, "pytest")
                return
            if self.view.exists(candidate):
                self._test_file(self.view.resolve(candidate) or candidate, names)
                return
        self._test_file(canonical_path(self.view, path_part, self.cwd), names)

    def _test_dir(self, directory: str, pattern: str) -> None:
        room = max(self.config.max_files - len(self.items) - 1, 0)
        found: list[str] = []
        for path in self.view.iter_files(directory, ".py"):
            if _is_test_file(path, pattern):
                found.append(path)
                if len(found) > room:
                    break
        for path in found[:room]:
            self._test_file(path, None)
        if len(found) > room:
            note = f"more test files under {directory} not shown"
            self.items[f"note:{directory}"] = _Item("note", f"note:{directory}", note)

    def _test_file(self, path: str, names: set[str] | None) -> None:
        self._add_file(path, names, role="test", pytest=True)

    # -------------------------------------------------------------- phase 2

    def _render(self) -> Executed:
        out = Executed(stdin_is_script=self.stdin_is_script)
        numbers = self.config.line_numbers
        for item in self.items.values():
            if item.kind == "note":
                out.parts.append(Part(f"({item.text})", "", item.text))
            elif item.kind == "inline":
                body = render_whole(split_text_lines(item.text), numbers)
                out.parts.append(Part("==> python -c <==", body, "python -c"))
                out.sources.append(_Source("python -c", item.text, self.cwd))
                out.idents |= set(_IDENT_RE.findall(item.text))
            elif item.kind == "stdin":
                text, note = decode_source(bytes(getattr(self.request, "stdin", b"") or b""))
                if text is None:
                    out.parts.append(Part(f"==> <stdin> <== (script; {note})", "", "<stdin>"))
                    continue
                body = render_whole(split_text_lines(text), numbers)
                out.parts.append(Part("==> <stdin> <== (script read from stdin)", body, "stdin"))
                out.sources.append(_Source("<stdin>", text, self.cwd))
                out.idents |= set(_IDENT_RE.findall(text))
            else:
                self._render_file(item, out)
        return out

    def _render_file(self, item: _Item, out: Executed) -> None:
        path = item.key
        out.paths.add(path)
        if item.pytest:
            out.test_files.append(path)
        text, note = read_source(self.view, path, self.config)
        if text is None:
            out.parts.append(Part(f"==> {path} <== ({item.role}; {note})", "", path))
            return
        out.sources.append(_Source(path, text, posixpath.dirname(path), path, item.pytest))
        lines = split_text_lines(text)
        numbers = self.config.line_numbers
        units = outline_units(text, lines) if (item.names or item.compact) else None
        label = "whole file" if item.role == "test" else item.role
        if item.names and units is not None:
            found, missing = _select(units, item.names)
            if found:
                numbered = render_units(lines, units, _test_expander(found))
                label = f"selected: {', '.join(sorted(item.names))}; the rest as signatures"
                if missing:
                    label += f"; not found: {', '.join(sorted(missing))}"
                body = render_numbered(numbered, len(lines), numbers)
                out.parts.append(Part(f"==> {path} <== ({label})", body, path))
                out.idents |= {u.short for u in found} | _body_idents(lines, found)
                return
            label = f"whole file; not found in it: {', '.join(sorted(item.names))}"
        elif item.compact and units is not None:
            body = render_numbered(render_units(lines, units, lambda u: False), len(lines), numbers)
            out.parts.append(Part(f"==> {path} <== ({item.role}; signatures)", body, path))
            return
        out.parts.append(Part(f"==> {path} <== ({label})", render_whole(lines, numbers), path))
        out.idents |= set(_IDENT_RE.findall(text))


def render_units(
    lines: Sequence[str], units: Sequence[Unit], expand: Callable[[Unit], bool]
) -> list[NumberedLine]:
    out: list[NumberedLine] = []
    for unit in units:
        render_unit(lines, unit, expand, out)
    return out


def walk_units(units: Iterable[Unit]) -> Iterable[Unit]:
    for unit in units:
        yield unit
        yield from walk_units(unit.children)


def _select(units: Sequence[Unit], names: set[str]) -> tuple[list[Unit], set[str]]:
    by_name = {u.name: u for u in walk_units(units) if u.name}
    found = [by_name[n] for n in sorted(names) if n in by_name]
    missing = {n for n in names if n not in by_name}
    return found, missing


def _test_expander(found: Sequence[Unit]) -> Callable[[Unit], bool]:
    keys = {u.key for u in found}
    classes = {u.name.rsplit(".", 1)[0] for u in found if "." in u.name} | {
        u.name for u in found if u.kind == "class"
    }
    prefixes = set()
    for name in classes:
        parts = name.split(".")
        prefixes |= {".".join(parts[: i + 1]) for i in range(len(parts))}

    def expand(unit: Unit) -> bool:
        if unit.key in keys or unit.fixture:
            return True
        if unit.kind == "def" and unit.short in _SETUP_NAMES:
            owner = unit.name.rsplit(".", 1)[0] if "." in unit.name else ""
            return owner == "" or owner in prefixes
        return False

    return expand


def _body_idents(lines: Sequence[str], units: Iterable[Unit]) -> set[str]:
    out: set[str] = set()
    for unit in units:
        out |= set(_IDENT_RE.findall("\n".join(lines[unit.start - 1 : unit.end])))
    return out
