"""Workspace-wide facts: the imports a module certainly makes (and the syntax errors they
reach), where the workspace's packages are importable from, and its declared dependencies.
"""

from __future__ import annotations

import ast
import configparser
import posixpath
import re
import warnings

import sweworld.pyast as pyast
from sweworld.tasks.repo_metadata import read_metadata
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.messages import format_syntax_error
from sweworld.transition.facts.records import SyntaxErrorInfo
from sweworld.transition.facts.simulation import dotted_name, literal_value
from sweworld.transition.types import WORKDIR, WorkspaceView

_ImportStmt = tuple[int, tuple[str, ...], str]  # (level, names, module); names for Import
_Summary = tuple[SyntaxErrorInfo | None, tuple[_ImportStmt, ...]]
_SUMMARIES = pyast.TextCache(20000)  # (path, text) -> _Summary, for the process
_COMPILED = pyast.TextCache(20000)  # (path, text) -> the syntax error or None


def _module_summary(path: str, text: str) -> _Summary:
    """(syntax error, module-level unconditional imports up to the first statement that may
    exit) of a module's text; cached for the process by content, since parsing a large
    package's import closure is the expensive part of collecting its tests."""
    return _SUMMARIES.computed(_summarise, path, text)


def _summarise(path: str, text: str) -> _Summary:
    imports: list[_ImportStmt] = []
    error = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pyast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
        error, _ = format_syntax_error(text, path)
    if tree is not None:
        for stmt in tree.body:
            if isinstance(stmt, ast.Raise):
                break
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                if "exit" in (dotted_name(stmt.value.func) or ""):
                    break
                continue
            if isinstance(stmt, ast.Import):
                imports.append((0, tuple(alias.name for alias in stmt.names), ""))
            elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
                names = tuple(a.name for a in stmt.names if a.name != "*")
                imports.append((stmt.level or 0, names, stmt.module or ""))
    return error, tuple(imports)


def cached_syntax_error(text: str, path: str) -> SyntaxErrorInfo | None:
    """:func:`format_syntax_error`'s error, cached for the process by content."""
    return _COMPILED.computed(lambda p, t: format_syntax_error(t, p)[0], path, text)


def static_broken_import(
    importer: Importer, tree: ast.Module | None, package: str, limit: int = 300,
    text: str | None = None, path: str = "",
) -> SyntaxErrorInfo | None:  # fmt: skip
    """A syntax error in a workspace module that importing a module certainly imports
    (module-level, unconditional imports, followed through the workspace), or None.

    Such an import fails whatever else happens first, so the module cannot be imported
    (a script dies, a test module is a collection error). At most ``limit`` modules are
    read, in a fixed order, so that the answer does not depend on caches.
    """
    seen: set[str] = set()
    checked = importer.ws.import_checked  # modules already found fine in this computation
    budget = [limit]

    def statements(module_tree: ast.Module | None, module_text: str | None, module_path: str):
        if module_text is not None:
            return _module_summary(module_path, module_text)[1]
        out: list[_ImportStmt] = []
        for stmt in module_tree.body if module_tree is not None else []:
            if isinstance(stmt, ast.Raise):
                break
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                if "exit" in (dotted_name(stmt.value.func) or ""):
                    break
                continue
            if isinstance(stmt, ast.Import):
                out.append((0, tuple(alias.name for alias in stmt.names), ""))
            elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
                names = tuple(a.name for a in stmt.names if a.name != "*")
                out.append((stmt.level or 0, names, stmt.module or ""))
        return tuple(out)

    def visit(imports: tuple[_ImportStmt, ...], package_name: str) -> SyntaxErrorInfo | None:
        for level, names, module in imports:
            targets: list[str]
            if not module and not level:
                targets = list(names)
            else:
                base = module
                if level:
                    parts = package_name.split(".") if package_name else []
                    if not parts or level - 1 > len(parts) - 1:
                        continue
                    parts = parts[: len(parts) - (level - 1)]
                    base = ".".join([*parts, *([module] if module else [])])
                if not base:
                    continue
                targets = [base] + [f"{base}.{name}" for name in names]
            for dotted in targets:
                error = visit_module(dotted)
                if error is not None:
                    return error
        return None

    def visit_module(dotted: str) -> SyntaxErrorInfo | None:
        parts = dotted.split(".")
        found = importer.find_top(parts[0])
        for index in range(len(parts)):
            if index:
                found = importer.find_sub(found, parts[index]) if found else None
            if found is None or found.kind != "workspace":
                return None
            name = ".".join(parts[: index + 1])
            if found.path is None or name in seen:
                continue
            seen.add(name)
            if name in checked:
                if checked[name] is not None:
                    return checked[name]
                continue
            budget[0] -= 1
            if budget[0] < 0:
                return None
            text = importer.ws.text(found.path)
            if text is None:
                return None
            syntax, imports = _module_summary(found.path, text)
            if syntax is not None:
                checked[name] = syntax
                return syntax
            is_package = found.path.endswith("__init__.py")
            error = visit(imports, name if is_package else name.rpartition(".")[0])
            if error is not None:
                return error
            if budget[0] >= 0:
                checked[name] = None
        return None

    return visit(statements(tree, text, path), package)


def collect_module_imports(tree: ast.Module) -> list[tuple[ast.stmt, str, int]]:
    """Module-level imports not guarded by try/except or conditions:
    (statement, dotted module, relative level)."""
    out: list[tuple[ast.stmt, str, int]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                out.append((stmt, alias.name, 0))
        elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            out.append((stmt, stmt.module or "", stmt.level))
    return out


# --------------------------------------------------------------------------- workspace facts


def search_dirs_base(ws: Workspace) -> list[str]:
    """Directories where the workspace's own packages are importable from (an editable
    install of the project: its root, ``src/``, ``lib/`` and declared package dirs)."""
    dirs = [WORKDIR]
    for sub in ("src", "lib"):
        if ws.is_dir(f"{WORKDIR}/{sub}"):
            dirs.append(f"{WORKDIR}/{sub}")
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        text = ws.text(f"{WORKDIR}/{name}") or ""
        for match in re.finditer(
            r"""(?:package_dir\s*=\s*\{\s*['"]{2}\s*:\s*|where\s*=\s*\[?\s*)['"]([\w./-]+)['"]""",
            text,
        ):
            candidate = posixpath.normpath(posixpath.join(WORKDIR, match.group(1)))
            if candidate.startswith(WORKDIR) and ws.is_dir(candidate):
                dirs.append(candidate)
    return dirs


_DIST_TO_IMPORT = {
    "scikit-learn": "sklearn",
    "scikit-image": "skimage",
    "pillow": "PIL",
    "pyyaml": "yaml",
    "beautifulsoup4": "bs4",
    "python-dateutil": "dateutil",
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "pyjwt": "jwt",
    "protobuf": "google",
    "attrs": "attr",
    "msgpack-python": "msgpack",
    "pyopenssl": "OpenSSL",
    "pycryptodome": "Crypto",
    "python-magic": "magic",
    "setuptools": "pkg_resources",
    "typing-extensions": "typing_extensions",
    "importlib-metadata": "importlib_metadata",
    "pygments": "pygments",
    "jinja2": "jinja2",
    "markupsafe": "markupsafe",
    "docutils": "docutils",
    "sphinx": "sphinx",
    "mpmath": "mpmath",
    "pytz": "pytz",
    "sqlparse": "sqlparse",
    "asgiref": "asgiref",
    "tomli": "tomli",
    "pyerfa": "erfa",
}


def _dist_import_names(requirement: str) -> set[str]:
    name = re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0].strip()
    if not name or name.startswith(("-", "#")):
        return set()
    low = name.lower()
    out = {low.replace("-", "_").replace(".", "_"), name.replace("-", "_")}
    if low in _DIST_TO_IMPORT:
        out.add(_DIST_TO_IMPORT[low])
    if low == "attrs":
        out.add("attrs")
    if low == "setuptools":
        out.add("setuptools")
    return out


def declared_dependencies(view: WorkspaceView) -> frozenset[str]:
    """Top-level import names of the packages the workspace declares it needs (pyproject,
    setup.cfg, setup.py literal lists, requirements files): installed in its environment."""
    ws = view if isinstance(view, Workspace) else Workspace(view)
    requirements: list[str] = []
    pyproject = ws.text(f"{WORKDIR}/pyproject.toml")
    if pyproject:
        data = load_toml(pyproject) or {}
        project = data.get("project", {}) if isinstance(data, dict) else {}
        requirements += [r for r in project.get("dependencies", []) if isinstance(r, str)]
        for extra in (project.get("optional-dependencies") or {}).values():
            requirements += [r for r in extra if isinstance(r, str)]
        poetry = data.get("tool", {}).get("poetry", {}) if isinstance(data, dict) else {}
        for key in ("dependencies", "dev-dependencies"):
            requirements += list((poetry.get(key) or {}).keys())
    setup_cfg = ws.text(f"{WORKDIR}/setup.cfg")
    if setup_cfg:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(setup_cfg)
        except configparser.Error:
            parser = None
        if parser is not None:
            for section in ("options", "options.extras_require"):
                if parser.has_section(section):
                    for key, value in parser.items(section):
                        if section == "options" and key not in (
                            "install_requires", "tests_require", "setup_requires"
                        ):  # fmt: skip
                            continue
                        requirements += [v for v in value.splitlines() if v.strip()]
    setup_py = ws.tree(f"{WORKDIR}/setup.py")
    if setup_py is not None:
        for node in ast.walk(setup_py):
            if isinstance(node, ast.keyword) and node.arg in (
                "install_requires", "tests_require", "setup_requires", "extras_require"
            ):  # fmt: skip
                ok, value = literal_value(node.value)
                if ok and isinstance(value, (list, tuple)):
                    requirements += [v for v in value if isinstance(v, str)]
                elif ok and isinstance(value, dict):
                    for items in value.values():
                        if isinstance(items, (list, tuple)):
                            requirements += [v for v in items if isinstance(v, str)]
    root = ws.view.host(WORKDIR)
    if root is not None:  # install_requires through a name bound to a literal, and the like
        requirements += list(read_metadata(root).requirements)
    for directory in (WORKDIR, f"{WORKDIR}/requirements"):
        for name in ws.listdir(directory):
            wanted = name.startswith("requirements") or directory.endswith("requirements")
            if wanted and name.endswith((".txt", ".in")):
                requirements += (ws.text(f"{directory}/{name}") or "").splitlines()
    names: set[str] = set()
    for requirement in requirements:
        names |= _dist_import_names(requirement)
    return frozenset(names)


def load_toml(text: str) -> dict | None:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return None
    try:
        return tomllib.loads(text)
    except Exception:
        return None
