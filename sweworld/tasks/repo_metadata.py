"""What a repository declares about itself, read statically (nothing is executed).

:func:`read_metadata` reads ``setup.py`` (its ``setup(...)`` call, through the ``ast``),
``setup.cfg`` and ``pyproject.toml`` (PEP 621 ``[project]`` and Poetry) for the Python
versions the package supports, its declared dependencies, its console scripts and the test
runner its configuration names.

Where a value is computed at run time (``install_requires=requirements`` read from a file,
``setup(**kwargs)``, ``dynamic = ["dependencies"]``) it cannot be derived statically: the
result says so (:attr:`RepoMetadata.requirements_static` is False) rather than guessing,
so that nothing downstream treats an incomplete list as complete.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

import sweworld.pyast as pyast

__all__ = ["RepoMetadata", "read_metadata"]

_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class RepoMetadata:
    """A repository's declarations.

    Attributes:
        python_requires: the supported Python versions (``">=3.6"``), or None.
        requirements: declared install requirements (distribution names, as written).
        requirements_static: False when some requirement source could not be read
            statically (a variable, ``**kwargs``, a dynamic field): ``requirements`` is then
            incomplete and a missing module may still be installed.
        console_scripts: names of the console scripts the package declares.
        scripts_static: False when the entry points could not be read statically.
        test_runner: ``pytest`` / ``django`` / ``sympy`` when the repository's layout or
            configuration names it, else None.
    """

    python_requires: str | None = None
    requirements: tuple[str, ...] = ()
    requirements_static: bool = True
    console_scripts: tuple[str, ...] = ()
    scripts_static: bool = True
    test_runner: str | None = None

    @property
    def declares_package(self) -> bool:
        """Whether any packaging metadata was found."""
        return bool(self.python_requires or self.requirements or self.console_scripts)


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


class _Collected:
    def __init__(self) -> None:
        self.python_requires: str | None = None
        self.requirements: list[str] = []
        self.requirements_static = True
        self.scripts: list[str] = []
        self.scripts_static = True


def _script_name(spec: str) -> str | None:
    name = spec.split("=", 1)[0].strip()
    return name if "=" in spec and name else None


def _literal(node: ast.AST, assigned: dict[str, ast.AST]) -> Any:
    """The value of a literal, following module-level names bound once to a literal;
    raises ValueError when it is computed."""
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal(node.left, assigned) + _literal(node.right, assigned)
    return ast.literal_eval(node)


def _module_assignments(tree: ast.Module) -> dict[str, ast.AST]:
    counts: dict[str, int] = {}
    values: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                counts[target.id] = counts.get(target.id, 0) + 1
                if isinstance(node, ast.Assign):
                    values[target.id] = node.value
        # requirements.append(...) / .extend(...) changes a list bound once
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.attr in ("append", "extend", "insert", "update")
        ):
            counts[node.func.value.id] = counts.get(node.func.value.id, 0) + 2
    return {name: values[name] for name, n in counts.items() if n == 1 and name in values}


def _setup_calls(tree: ast.Module) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "setup":
                calls.append(node)
    return calls


def _from_setup_py(text: str, out: _Collected) -> None:
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        out.requirements_static = out.scripts_static = False
        return
    assigned = _module_assignments(tree)
    for call in _setup_calls(tree):
        keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        if any(kw.arg is None for kw in call.keywords):  # setup(**kwargs)
            out.requirements_static = out.scripts_static = False
        if "python_requires" in keywords:
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                out.python_requires = str(_literal(keywords["python_requires"], assigned))
        if "install_requires" in keywords:
            try:
                out.requirements.extend(
                    str(r) for r in _literal(keywords["install_requires"], assigned)
                )
            except (ValueError, TypeError, SyntaxError):
                out.requirements_static = False
        if "entry_points" in keywords:
            try:
                value = _literal(keywords["entry_points"], assigned)
                scripts = value.get("console_scripts", []) if isinstance(value, dict) else []
                if isinstance(scripts, str):
                    scripts = scripts.splitlines()
                out.scripts.extend(n for s in scripts if (n := _script_name(str(s))))
            except (ValueError, TypeError, SyntaxError, AttributeError):
                out.scripts_static = False


def _lines(value: str) -> list[str]:
    return [
        line.strip()
        for line in value.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _from_setup_cfg(text: str, out: _Collected) -> str | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if parser.has_option("options", "python_requires"):
        out.python_requires = parser.get("options", "python_requires").strip()
    if parser.has_option("options", "install_requires"):
        value = parser.get("options", "install_requires")
        if value.strip().startswith(("file:", "attr:")):
            out.requirements_static = False
        else:
            out.requirements.extend(_lines(value))
    if parser.has_option("options.entry_points", "console_scripts"):
        value = parser.get("options.entry_points", "console_scripts")
        out.scripts.extend(n for s in _lines(value) if (n := _script_name(s)))
    return "pytest" if parser.has_section("tool:pytest") else None


def _from_pyproject(text: str, out: _Collected) -> str | None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    project = data.get("project") or {}
    if isinstance(project, dict):
        if isinstance(project.get("requires-python"), str):
            out.python_requires = project["requires-python"]
        out.requirements.extend(str(r) for r in project.get("dependencies") or [])
        out.scripts.extend(str(n) for n in (project.get("scripts") or {}))
        dynamic = project.get("dynamic") or []
        if "dependencies" in dynamic:
            out.requirements_static = False
        if "scripts" in dynamic or "entry-points" in dynamic:
            out.scripts_static = False
    tool = data.get("tool") or {}
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    if isinstance(poetry, dict):
        deps = poetry.get("dependencies") or {}
        python = deps.get("python") if isinstance(deps, dict) else None
        if isinstance(python, str) and out.python_requires is None:
            out.python_requires = python
        out.requirements.extend(str(n) for n in deps if str(n) != "python")
        out.scripts.extend(str(n) for n in (poetry.get("scripts") or {}))
    if isinstance(tool, dict) and isinstance(tool.get("pytest"), dict):
        return "pytest"
    return None


def _layout_runner(root: Path) -> str | None:
    if (root / "tests" / "runtests.py").is_file():
        return "django"
    if (root / "bin" / "test").is_file() and (root / "sympy").is_dir():
        return "sympy"
    if (root / "pytest.ini").is_file() or (root / "conftest.py").is_file():
        return "pytest"
    tox = _read(root / "tox.ini")
    if tox and re.search(r"^\[pytest\]|^\s*(?:commands\s*=.*)?\bpytest\b", tox, re.M):
        return "pytest"
    return None


def read_metadata(repo_dir: Path | str) -> RepoMetadata:
    """Read ``repo_dir``'s packaging metadata and test-runner configuration."""
    root = Path(repo_dir)
    out = _Collected()
    runner = None
    setup_cfg = _read(root / "setup.cfg")
    if setup_cfg is not None:
        runner = _from_setup_cfg(setup_cfg, out) or runner
    pyproject = _read(root / "pyproject.toml")
    if pyproject is not None:
        runner = _from_pyproject(pyproject, out) or runner
    setup_py = _read(root / "setup.py")
    if setup_py is not None:
        _from_setup_py(setup_py, out)
    runner = _layout_runner(root) or runner
    return RepoMetadata(
        python_requires=out.python_requires,
        requirements=tuple(dict.fromkeys(out.requirements)),
        requirements_static=out.requirements_static,
        console_scripts=tuple(dict.fromkeys(out.scripts)),
        scripts_static=out.scripts_static,
        test_runner=runner,
    )
