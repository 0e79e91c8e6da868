"""The related code: the workspace modules the executed code imports, the conftest files of a
pytest run and the files the agent changed, as outlines filled in while the budget allows.
"""

from __future__ import annotations

import ast
import posixpath
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import sweworld.pyast as pyast
from sweworld.models.budget import (
    LineTokens,
    Part,
    fit_parts,
    split_text_lines,
    truncate_text,
)
from sweworld.tasks.patches import PatchError, split_patch
from sweworld.transition.context.config import ContextConfig
from sweworld.transition.context.executed import Executed, render_units, walk_units
from sweworld.transition.context.outline import (
    NumberedLine,
    Unit,
    abs_path,
    outline_units,
    read_source,
    render_numbered,
    render_unit,
    render_whole,
)
from sweworld.transition.types import WORKDIR, WorkspaceView

# ------------------------------------------------------------------------------------------
# Related code: imported modules, conftest files, changed files
# ------------------------------------------------------------------------------------------

_IMPORT_RE = re.compile(r"^\s*import\s+([\w., ]+)")
_FROM_RE = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?\s*([\w, ]*)")


def _imports(text: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(level, module, names) of every import statement, in source order."""
    out: list[tuple[int, str, tuple[str, ...]]] = []
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        for line in text.splitlines():
            match = _FROM_RE.match(line)
            if match:
                names = tuple(
                    n.strip().split(" ")[0] for n in match.group(3).split(",") if n.strip()
                )
                out.append((len(match.group(1)), match.group(2), names))
                continue
            match = _IMPORT_RE.match(line)
            if match:
                for item in match.group(1).split(","):
                    name = item.strip().split(" ")[0]
                    if name:
                        out.append((0, name, ()))
        return out
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, ast.Import):
            out.extend((0, alias.name, ()) for alias in node.names)
        else:
            out.append((node.level, node.module or "", tuple(a.name for a in node.names)))
    return out


def _pytest_rootdir(view: WorkspaceView, directory: str) -> str:
    """The directory pytest's ``rootdir``-less import mode inserts: the first one upwards
    that is not a package."""
    current = directory
    while current not in ("/", "") and view.is_file(posixpath.join(current, "__init__.py")):
        current = posixpath.dirname(current)
    return current


@dataclass
class RelatedFile:
    path: str
    reason: str
    lines: list[str]
    units: list[Unit] | None
    changed: frozenset[int] = frozenset()


class _Resolver:
    def __init__(self, view: WorkspaceView, cwd: str):
        self.view = view
        self.cwd = cwd
        self._cache: dict[tuple[str, str], str | None] = {}

    def module_file(self, dotted: str, roots: Sequence[str]) -> str | None:
        rel = dotted.replace(".", "/")
        for root in roots:
            key = (root, rel)
            if key not in self._cache:
                found = None
                base = abs_path(rel, root) if rel else root
                for candidate in (base + ".py", base + "/__init__.py"):
                    if self.view.is_file(candidate):
                        found = self.view.resolve(candidate) or candidate
                        break
                self._cache[key] = found
            if self._cache[key]:
                return self._cache[key]
        return None

    def resolve_imports(self, source_text: str, directory: str, pytest: bool) -> list[str]:
        """Workspace files of the modules imported by a source (direct imports first), plus
        the ``__init__.py`` of their parent packages (returned separately by the caller)."""
        roots = [directory]
        if pytest:
            roots.append(_pytest_rootdir(self.view, directory))
        roots += [self.cwd, WORKDIR, f"{WORKDIR}/src", f"{WORKDIR}/lib"]
        roots = list(dict.fromkeys(roots))
        out: list[str] = []
        for level, module, names in _imports(source_text):
            if level == 0:
                top = module.split(".")[0]
                if not module or top in sys.stdlib_module_names or top == "__future__":
                    continue
                search = roots
                prefix = module
            else:
                base = directory
                for _ in range(level - 1):
                    base = posixpath.dirname(base)
                search = [base]
                prefix = module
            found_sub = False
            for name in names:
                if name == "*":
                    continue
                sub = f"{prefix}.{name}" if prefix else name
                path = self.module_file(sub, search)
                if path is not None and path.endswith(".py"):
                    out.append(path)
                    found_sub = True
            if not found_sub:
                path = self.module_file(prefix, search) if prefix else None
                if path is not None:
                    out.append(path)
        return list(dict.fromkeys(out))


def _parent_inits(view: WorkspaceView, path: str) -> list[str]:
    out = []
    directory = posixpath.dirname(path)
    if posixpath.basename(path) == "__init__.py":
        directory = posixpath.dirname(directory)
    while directory.startswith(WORKDIR + "/") or directory.startswith("/tmp/"):
        init = posixpath.join(directory, "__init__.py")
        if not view.is_file(init):
            break
        out.append(init)
        directory = posixpath.dirname(directory)
    return out


def changed_lines(diff: str) -> dict[str, set[int]]:
    """New-side line numbers the diff adds (and where it removes), per /testbed path of each
    file the diff changes as text (deleted and binary files left out). A diff that does not
    parse gives nothing."""
    try:
        parts = split_patch(diff)
    except (PatchError, ValueError):
        return {}
    out: dict[str, set[int]] = {}
    for part in parts:
        if part.status == "deleted" or part.is_binary or not part.hunks:
            continue
        lines = out.setdefault(f"{WORKDIR}/{part.path}", set())
        for hunk in part.hunks:
            new_line = hunk.new_start
            for kind, _ in hunk.lines:
                if kind == "+":
                    lines.add(new_line)
                    new_line += 1
                elif kind == "-":
                    lines.add(max(new_line, 1))
                else:
                    new_line += 1
    return out


def related_files(
    view: WorkspaceView,
    executed: Executed,
    changed: dict[str, set[int]],
    cwd: str,
    config: ContextConfig,
) -> tuple[list[RelatedFile], list[Part]]:
    resolver = _Resolver(view, cwd)
    shown = set(executed.paths)
    direct: list[str] = []
    for source in executed.sources:
        direct += resolver.resolve_imports(source.text, source.directory, source.pytest)
    direct = [p for p in dict.fromkeys(direct) if p not in shown]
    touched = [p for p in changed if p.endswith(".py") and p not in shown]
    conftests: list[str] = []
    for test_file in executed.test_files:
        directory = posixpath.dirname(test_file)
        chain = []
        while directory.startswith(WORKDIR):
            chain.append(posixpath.join(directory, "conftest.py"))
            if directory == WORKDIR:
                break
            directory = posixpath.dirname(directory)
        conftests += [c for c in reversed(chain) if view.is_file(c)]
    second: list[str] = []
    for path in direct:
        second += _parent_inits(view, path)
        text, _ = read_source(view, path, config)
        if text is not None:
            second += resolver.resolve_imports(text, posixpath.dirname(path), False)

    ordered: list[tuple[str, str]] = []
    ordered += [(p, "imported; changed by the agent") for p in direct if p in changed]
    ordered += [(p, "imported") for p in direct if p not in changed]
    ordered += [(p, "conftest") for p in conftests]
    ordered += [(p, "changed by the agent") for p in touched]
    ordered += [(p, "imported indirectly") for p in second]
    seen: set[str] = set(shown)
    files: list[RelatedFile] = []
    notes: list[Part] = []
    for path, reason in ordered:
        if path in seen:
            continue
        seen.add(path)
        if len(files) + len(notes) >= config.max_related_files:
            break
        text, note = read_source(view, path, config)
        if text is None:
            notes.append(Part(f"==> {path} <== ({reason}; {note})", "", path))
            continue
        if not text.strip():
            continue  # an empty __init__.py says nothing
        lines = split_text_lines(text)
        units = outline_units(text, lines)
        files.append(RelatedFile(path, reason, lines, units, frozenset(changed.get(path, ()))))
    return files, notes


def related_text(
    files: Sequence[RelatedFile],
    notes: Sequence[Part],
    idents: set[str],
    budget: int,
    tok: LineTokens,
    numbers: bool,
) -> tuple[str, int]:
    """Outlines of every file first, then bodies while the budget allows: changed
    definitions, then definitions the executed code names, then the rest, in file order."""
    expanded: list[set[tuple[int, int]]] = [set() for _ in files]

    def header(i: int) -> str:
        return f"==> {files[i].path} <== ({files[i].reason})"

    def body(i: int) -> str:
        f = files[i]
        if f.units is None:
            return render_whole(f.lines, numbers)
        keys = expanded[i]
        numbered = render_units(f.lines, f.units, lambda u: u.key in keys)
        return render_numbered(numbered, len(f.lines), numbers)

    def unit_cost(i: int, unit: Unit) -> int:
        f = files[i]
        keys = expanded[i]
        out: list[NumberedLine] = []
        render_unit(f.lines, unit, lambda u: u.key in keys, out)
        return tok.lines(render_numbered(out, len(f.lines), numbers).split("\n"))

    note_cost = sum(tok.line(n.header) + 1 for n in notes)
    costs = [tok.line(header(i)) + tok.lines(body(i).split("\n")) + 1 for i in range(len(files))]
    total = sum(costs) + note_cost
    if total > budget:
        parts = [Part(header(i), body(i), files[i].path) for i in range(len(files))]
        return fit_parts([*parts, *notes], budget, tok)

    candidates: list[tuple[int, Unit, Unit]] = []  # (file, top-level owner, unit)
    for i, f in enumerate(files):
        for top in f.units or ():
            for unit in walk_units([top]):
                if unit.kind in ("def", "class", "stmt") and any(
                    unit.start <= n <= unit.end for n in f.changed
                ):
                    inner = [
                        c for c in unit.children if any(c.start <= n <= c.end for n in f.changed)
                    ]
                    if not inner:
                        candidates.append((i, top, unit))
    for i, f in enumerate(files):
        for top in f.units or ():
            for unit in walk_units([top]):
                if unit.kind in ("def", "class") and unit.short in idents:
                    candidates.append((i, top, unit))
    for i, f in enumerate(files):
        for top in f.units or ():
            if top.kind in ("def", "class", "stmt"):
                candidates.append((i, top, top))
    for i, f in enumerate(files):
        for top in f.units or ():
            for unit in walk_units(top.children):
                if unit.kind == "def":
                    candidates.append((i, top, unit))

    for i, top, unit in candidates:
        if unit.key in expanded[i] or top.key in expanded[i]:
            continue
        before = unit_cost(i, top)
        expanded[i].add(unit.key)
        after = unit_cost(i, top)
        if total + after - before <= budget:
            total += after - before
        else:
            expanded[i].discard(unit.key)
    chunks = [f"{header(i)}\n{body(i)}".rstrip("\n") for i in range(len(files))]
    chunks += [n.header for n in notes]
    text = "\n\n".join(chunks)
    return truncate_text(text, budget, tok)
