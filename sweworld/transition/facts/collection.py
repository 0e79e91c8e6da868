"""pytest's collection from the AST (:func:`collect_pytest`): conftest files, the test files
and the items they hold, registered marks.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sweworld.transition.deadline import check_deadline
from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.interpreter import Simulator
from sweworld.transition.facts.keywords import module_keyword_names
from sweworld.transition.facts.pytest_args import PytestOptions, parse_pytest_args
from sweworld.transition.facts.pytest_config import (
    PytestConfig,
    determine_setup,
    parent_dirs,
    relative_to_root,
)
from sweworld.transition.facts.records import MissingFile, MissingImport, SyntaxErrorInfo
from sweworld.transition.facts.scanner import Item, ModuleScanner
from sweworld.transition.facts.simulation import dotted_name, literal_value
from sweworld.transition.facts.workspace import (
    cached_syntax_error,
    collect_module_imports,
    search_dirs_base,
    static_broken_import,
)
from sweworld.transition.types import WORKDIR, WorkspaceView


@dataclass
class Collection:
    items: list[Item] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # rootdir-relative file paths
    uncertain_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # sandbox paths of collected test files
    syntax_errors: list[SyntaxErrorInfo] = field(default_factory=list)
    missing_imports: list[MissingImport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # collection warnings pytest prints
    classes: dict[str, str] = field(default_factory=dict)  # class node id -> node repr
    exact: bool = True


_NORECURSE_DEFAULT = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv",
                      "{arch}")  # fmt: skip


def _fnmatch_ex(pattern: str, path: str) -> bool:
    if "/" not in pattern:
        return fnmatch.fnmatch(posixpath.basename(path), pattern)
    if not pattern.startswith("/"):
        pattern = "*/" + pattern
    return fnmatch.fnmatch(path, pattern)


# --------------------------------------------------------------------------- pytest facts


def _conftests(ws: Workspace, rootdir: str, path: str) -> list[str]:
    out = []
    directory = posixpath.dirname(path)
    for base in parent_dirs(directory):
        candidate = posixpath.join(base, "conftest.py")
        if ws.is_file(candidate):
            out.append(candidate)
        if base == rootdir or base in ("/", WORKDIR):
            if base != rootdir and rootdir.startswith(base):
                continue
            break
    return out


_COLLECTION_HOOKS = (
    "pytest_collect_file",
    "pytest_collection_modifyitems",
    "pytest_generate_tests",
    "pytest_ignore_collect",
    "pytest_pycollect_makeitem",
    "pytest_collect_directory",
    "pytest_make_parametrize_id",
    "pytest_collection",
)


def _conftest_info(ws: Workspace, path: str) -> tuple[bool, list[str], set[str], list[str]]:
    """(affects collection, collect_ignore entries, parametrized fixture names, notes)."""
    tree = ws.tree(path)
    if tree is None:
        return True, [], set(), [f"{path}: unreadable conftest"]
    affects = False
    notes = []
    ignores: list[str] = []
    fixtures: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name in _COLLECTION_HOOKS:
                affects = True
                notes.append(f"{path}: defines {stmt.name}")
            fixtures |= _param_fixture(stmt)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id in (
                    "collect_ignore", "collect_ignore_glob"
                ):  # fmt: skip
                    ok, value = literal_value(stmt.value)
                    if ok and isinstance(value, list) and target.id == "collect_ignore":
                        ignores += [str(v) for v in value]
                    else:
                        affects = True
                        notes.append(f"{path}: computes {target.id}")
                if isinstance(target, ast.Name) and target.id == "pytest_plugins":
                    affects = True
                    notes.append(f"{path}: loads plugins")
        elif (
            isinstance(stmt, ast.AugAssign)
            and isinstance(stmt.target, ast.Name)
            and (stmt.target.id.startswith("collect_ignore"))
        ):
            affects = True
            notes.append(f"{path}: extends collect_ignore")
        elif isinstance(stmt, (ast.If, ast.Try)):
            for inner in ast.walk(stmt):
                if isinstance(inner, ast.Name) and inner.id.startswith("collect_ignore"):
                    affects = True
                    notes.append(f"{path}: conditionally sets {inner.id}")
                    break
    return affects, ignores, fixtures, notes


def _param_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    for deco in node.decorator_list:
        if isinstance(deco, ast.Call) and (dotted_name(deco.func) or "").endswith("fixture"):
            for kw in deco.keywords:
                if kw.arg == "params":
                    name = node.name
                    for kw2 in deco.keywords:
                        if kw2.arg == "name":
                            ok, value = literal_value(kw2.value)
                            if ok and isinstance(value, str):
                                name = value
                    return {name}
    return set()


def _in_venv(ws: Workspace, path: str) -> bool:
    return ws.is_file(posixpath.join(path, "pyvenv.cfg")) or ws.is_file(
        posixpath.join(path, "bin", "activate")
    )


def collect_pytest(
    ws: Workspace | WorkspaceView,
    options: PytestOptions,
    cwd: str,
    env: Environment | None = None,
    installed: frozenset[str] | None = None,
) -> tuple[Collection, PytestConfig, list[MissingFile], list[str]]:
    """pytest's collection from the AST: (collection, config, missing targets, node ids
    not found)."""
    env = env or Environment()
    if not isinstance(ws, Workspace):
        ws = Workspace(ws)
    config = determine_setup(ws, options, cwd, env)
    addopts = config.getargs("addopts")
    if addopts:
        options = merge_options(parse_pytest_args(addopts), options)
    collection = Collection()
    if (
        options.doctest_modules
        or any(p in ("doctest", "xdoctest") for p in options.plugins)
        or (config.ini.get("doctest_optionflags") and "--doctest-modules" in addopts)
    ):
        collection.exact = False
        collection.notes.append("doctests are collected too")
    if options.pyargs:
        collection.exact = False
        collection.notes.append("--pyargs targets are module names")
    python_files = config.getlist("python_files", ["test_*.py", "*_test.py"])
    norecurse = config.getlist("norecursedirs", list(_NORECURSE_DEFAULT))
    ignores = {posixpath.normpath(posixpath.join(cwd, p)) for p in options.ignore}
    ignore_globs = [posixpath.normpath(posixpath.join(cwd, p)) for p in options.ignore_glob]
    targets = list(options.targets)
    if not targets:
        testpaths = config.getlist("testpaths", [])
        if testpaths and cwd == config.rootdir:
            expanded: list[str] = []
            for pattern in testpaths:
                full = posixpath.join(config.rootdir, pattern)
                if any(c in pattern for c in "*?["):
                    parent = posixpath.dirname(full)
                    expanded += [
                        relative_to_root(posixpath.join(parent, n), cwd)
                        for n in ws.listdir(parent)
                        if fnmatch.fnmatch(n, posixpath.basename(pattern))
                    ]
                elif ws.exists(full):
                    expanded.append(relative_to_root(full, cwd))
            targets = expanded or ["."]
        else:
            targets = ["."]
    importer = Importer(ws, [], installed or env.installed, complete=env.installed_complete)
    base_dirs = search_dirs_base(ws)
    missing: list[MissingFile] = []
    not_found: list[str] = []
    conftest_cache: dict[str, tuple[bool, list[str], set[str], list[str]]] = {}

    def conftest_state(path: str) -> tuple[bool, set[str], list[str]]:
        affects = False
        fixtures: set[str] = set()
        ignore_list: list[str] = []
        for conftest in _conftests(ws, config.rootdir, path):
            if conftest not in conftest_cache:
                conftest_cache[conftest] = _conftest_info(ws, conftest)
            a, ign, fx, notes = conftest_cache[conftest]
            if a:
                affects = True
                for note in notes:
                    if note not in collection.notes:
                        collection.notes.append(note)
            fixtures |= fx
            ignore_list += [posixpath.join(posixpath.dirname(conftest), i) for i in ign]
        return affects, fixtures, ignore_list

    def ignored(path: str) -> bool:
        if path in ignores:
            return True
        if any(fnmatch.fnmatch(path, g) for g in ignore_globs):
            return True
        _, _, conf_ignores = conftest_state(path)
        return posixpath.normpath(path) in {posixpath.normpath(p) for p in conf_ignores}

    def walk(directory: str) -> Iterator[str]:
        check_deadline("collecting the tests")
        entries = ws.listdir(directory)
        files = []
        dirs = []
        for name in entries:
            full = posixpath.join(directory, name)
            if ws.is_dir(full):
                if name == "__pycache__":
                    continue
                if any(fnmatch.fnmatch(name, p) or _fnmatch_ex(p, full) for p in norecurse):
                    continue
                if _in_venv(ws, full):
                    continue
                if ignored(full):
                    continue
                dirs.append((name, full))
            else:
                files.append((name, full))
        if env.pytest >= (8,):
            merged = sorted([(n, f, False) for n, f in files] + [(n, f, True) for n, f in dirs])
            for _, full, is_dir in merged:
                if is_dir:
                    yield from walk(full)
                elif not ignored(full):
                    yield full
        else:
            for _, full in files:
                if not ignored(full):
                    yield full
            for _, full in dirs:
                yield from walk(full)

    file_targets: list[tuple[str, list[str], str]] = []  # (path, node parts, original arg)
    for target in targets:
        path_part, *node_parts = target.split("::")
        full = posixpath.normpath(posixpath.join(cwd, path_part))
        if not ws.exists(full):
            if ws.view.resolve(full) is None or not full.startswith((WORKDIR, "/tmp")):
                collection.exact = False
                collection.notes.append(f"{target}: outside the workspace")
                continue
            what = "file or directory" if env.pytest >= (6,) else "file"
            missing.append(MissingFile(target, full, f"ERROR: {what} not found: {target}\n", 4))
            break
        if ws.is_dir(full):
            if node_parts:
                not_found.append(target)
                continue
            for path in walk(full):
                if path.endswith(".py") and any(_fnmatch_ex(p, path) for p in python_files):
                    file_targets.append((path, [], target))
        else:
            file_targets.append((full, node_parts, target))

    if missing:
        return collection, config, missing, []

    seen_files: dict[str, list[list[str]]] = {}
    order: list[str] = []
    for path, parts, _target in file_targets:
        if path not in seen_files:
            seen_files[path] = []
            order.append(path)
        seen_files[path].append(parts)

    for path in order:
        if not path.endswith(".py"):
            continue
        check_deadline("collecting the tests")  # before a file's parse and scan
        rel = relative_to_root(path, config.rootdir)
        collection.files.append(path)
        affects, fixtures, _ = conftest_state(path)
        if affects:
            collection.exact = False
            if rel not in collection.uncertain_files:
                collection.uncertain_files.append(rel)
        text = ws.text(path)
        if text is None:
            collection.exact = False
            collection.uncertain_files.append(rel)
            continue
        syntax = cached_syntax_error(text, path)
        if syntax is not None:
            collection.errors.append(rel)
            collection.syntax_errors.append(syntax)
            continue
        tree = ws.tree(path)
        if tree is None:
            collection.exact = False
            continue
        importer.search_dirs = _pytest_search_dirs(ws, path, config, base_dirs, cwd, options)
        simulator = Simulator(importer, env)
        outcome = simulator._run_module(tree, path, "test_module", None, 0)
        first_missing = first_missing_import(importer, tree, path, text)
        if outcome.kind != "error":
            broken = static_broken_import(importer, tree, _package_of(ws, path))
            if broken is not None:
                collection.errors.append(rel)
                collection.syntax_errors.append(broken)
                continue
        if outcome.kind == "error":
            # The test module cannot be imported: a collection error.
            collection.errors.append(rel)
            if outcome.syntax is not None:
                collection.syntax_errors.append(outcome.syntax)
            else:
                collection.missing_imports.append(
                    MissingImport(
                        path, outcome.frames[0].lineno, outcome.module, outcome.error, True
                    )
                )
            continue
        if first_missing is not None:
            collection.missing_imports.append(first_missing)
        scanner = ModuleScanner(ws, path, tree, config, env, fixtures, importer)
        module_names = module_keyword_names(ws, path, config.rootdir, env)
        items = scanner.items(rel, module_names)
        collection.warnings += [f"{rel}: {w}" for w in scanner.warnings]
        collection.classes.update(scanner.class_nodes)
        unknown_marks = scanner.used_marks - registered_marks(ws, config, path)
        collection.warnings += [f"{rel}: unknown mark {m!r}" for m in sorted(unknown_marks)]
        if scanner.uncertain:
            collection.exact = False
            if rel not in collection.uncertain_files:
                collection.uncertain_files.append(rel)
        collection.notes += [n for n in scanner.notes if n not in collection.notes]
        selected: list[Item] = []
        chosen: set[int] = set()
        for parts in seen_files[path]:
            if not parts:
                selected.extend(i for i in items if id(i) not in chosen)
                chosen.update(id(i) for i in items)
                continue
            prefix = "::".join([rel, *parts])
            matched = [
                i
                for i in items
                if i.nodeid == prefix
                or i.base == prefix
                or i.nodeid.startswith(prefix + "::")
                or (i.base.startswith(prefix + "::"))
            ]
            if not matched:
                uncertain_match = [i for i in items if i.uncertain and prefix.startswith(i.base)]
                if uncertain_match or scanner.uncertain:
                    collection.exact = False
                    continue
                not_found.append("::".join([path, *parts]))
                continue
            selected.extend(i for i in matched if id(i) not in chosen)
            chosen.update(id(i) for i in matched)
        collection.items.extend(selected)
    if any(i.uncertain for i in collection.items):
        collection.exact = False
    return collection, config, missing, not_found


_BUILTIN_MARKS = frozenset(
    {"filterwarnings", "skip", "skipif", "xfail", "parametrize", "usefixtures", "tryfirst",
     "trylast"}
)  # fmt: skip


def registered_marks(ws: Workspace, config: PytestConfig, path: str) -> set[str]:
    """Marks pytest knows without warning: its own, the ini file's ``markers``, and those a
    conftest registers with ``config.addinivalue_line("markers", ...)`` (plugins' marks are
    unknown)."""
    names = set(_BUILTIN_MARKS)
    for line in config.getlist_lines("markers"):
        match = re.match(r"\s*([\w.]+)", line)
        if match:
            names.add(match.group(1))
    for conftest in _conftests(ws, config.rootdir, path):
        text = ws.text(conftest) or ""
        for match in re.finditer(
            r"""addinivalue_line\(\s*["']markers["']\s*,\s*[fr]?["']\s*([\w.]+)""", text
        ):
            names.add(match.group(1))
    return names


def _package_of(ws: Workspace, path: str) -> str:
    """The dotted package of a test module under pytest's ``prepend`` import mode."""
    parts = []
    directory = posixpath.dirname(path)
    while ws.is_file(posixpath.join(directory, "__init__.py")) and directory != "/":
        parts.append(posixpath.basename(directory))
        directory = posixpath.dirname(directory)
    return ".".join(reversed(parts))


def merge_options(first: PytestOptions, second: PytestOptions) -> PytestOptions:
    merged: dict[str, Any] = {}
    for name in PytestOptions.__dataclass_fields__:
        a, b = getattr(first, name), getattr(second, name)
        if isinstance(a, tuple):
            merged[name] = a + b
        elif isinstance(a, bool):
            merged[name] = a or b
        elif name == "verbosity" or name == "report_chars":
            merged[name] = a + b
        else:
            merged[name] = b if b is not None else a
    return PytestOptions(**merged)


def _pytest_search_dirs(
    ws: Workspace,
    path: str,
    config: PytestConfig,
    base_dirs: list[str],
    cwd: str,
    options: PytestOptions,
) -> list[str]:
    """``sys.path`` for a test module under the default ``prepend`` import mode: the first
    directory upwards without ``__init__.py``, then ``pythonpath`` ini entries, the project."""
    directory = posixpath.dirname(path)
    while ws.is_file(posixpath.join(directory, "__init__.py")) and directory != "/":
        directory = posixpath.dirname(directory)
    dirs = [directory]
    for entry in config.getlist("pythonpath", []):
        dirs.append(posixpath.normpath(posixpath.join(config.rootdir, entry)))
    # conftest.py directories are inserted too (rootdir-level conftest most often).
    for conftest in _conftests(ws, config.rootdir, path):
        base = posixpath.dirname(conftest)
        while ws.is_file(posixpath.join(base, "__init__.py")) and base != "/":
            base = posixpath.dirname(base)
        dirs.append(base)
    return dirs + base_dirs + [cwd]


def first_missing_import(
    importer: Importer, tree: ast.Module, path: str, text: str
) -> MissingImport | None:
    for stmt, module, level in collect_module_imports(tree):
        if level or not module:
            continue
        if importer.exists(module) is False:
            top = module.split(".")[0]
            name = top if importer.find_top(top) is None else module
            return MissingImport(
                path,
                stmt.lineno,
                name,
                f"ModuleNotFoundError: No module named '{name}'",
                False,
            )
    return None
