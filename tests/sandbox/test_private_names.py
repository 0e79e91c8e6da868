"""No module imports a private (underscore) name of the action parsers, renderers or tools,
and they import none from other modules."""

from __future__ import annotations

import ast
from pathlib import Path

import sweworld

PACKAGE = Path(sweworld.__file__).parent
OWNED = ("sweworld.sandbox.actions", "sweworld.sandbox.render", "sweworld.sandbox.tools")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_imports(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [
                (node.module, alias.name)
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_no_private_name_crosses_a_module_boundary():
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for module, name in _private_imports(path):
            if module == importer:
                continue
            if module.startswith(OWNED) or importer.startswith(OWNED):
                offending.append(f"{importer}: from {module} import {name}")
    assert offending == []
    assert any(_module_name(p).startswith(OWNED) for p in PACKAGE.rglob("*.py"))
