"""pytest's configuration: the rootdir and the ini-file, found the way pytest finds them."""

from __future__ import annotations

import configparser
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.imports import Workspace
from sweworld.transition.facts.pytest_args import PytestOptions
from sweworld.transition.facts.workspace import load_toml

# --------------------------------------------------------------------------- pytest config


@dataclass
class PytestConfig:
    rootdir: str
    inifile: str | None
    ini: dict[str, Any]
    ini_exact: bool = True

    def getlist(self, key: str, default: Sequence[str]) -> list[str]:
        value = self.ini.get(key)
        if value is None:
            return list(default)
        if isinstance(value, list):
            return [str(v) for v in value]
        return str(value).split()

    def getlist_lines(self, key: str) -> list[str]:
        value = self.ini.get(key)
        if value is None:
            return []
        if isinstance(value, list):
            return [str(v) for v in value]
        return [line for line in str(value).splitlines() if line.strip()]

    def getargs(self, key: str) -> list[str]:
        value = self.ini.get(key)
        if value is None:
            return []
        if isinstance(value, list):
            return [str(v) for v in value]
        try:
            return shlex.split(str(value))
        except ValueError:
            return str(value).split()


def _read_ini_section(text: str, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if not parser.has_section(section):
        return None
    return {k: v.strip() for k, v in parser.items(section)}


def _config_from_file(ws: Workspace, path: str) -> dict[str, Any] | None:
    text = ws.text(path)
    if text is None:
        return None
    name = posixpath.basename(path)
    if name.endswith(".ini"):
        section = _read_ini_section(text, "pytest")
        if section is not None:
            return section
        return {} if name in ("pytest.ini", ".pytest.ini") else None
    if name.endswith(".cfg"):
        return _read_ini_section(text, "tool:pytest")
    if name.endswith(".toml"):
        data = load_toml(text)
        if data is None:
            return None
        if name in ("pytest.toml", ".pytest.toml"):
            return dict(data.get("pytest", {}) or {})
        tool = (data.get("tool") or {}).get("pytest")
        if not isinstance(tool, dict):
            return None
        native = {k: v for k, v in tool.items() if k != "ini_options"}
        if native:
            return native
        if "ini_options" in tool:
            return {k: v if isinstance(v, list) else str(v) for k, v in tool["ini_options"].items()}
    return None


_CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                 "tox.ini", "setup.cfg")  # fmt: skip


def parent_dirs(path: str) -> list[str]:
    out = [path]
    while path != "/":
        path = posixpath.dirname(path)
        out.append(path)
    return out


def _locate_config(
    ws: Workspace, dirs: Sequence[str], env: Environment
) -> tuple[str | None, str | None, dict[str, Any]]:
    names = _CONFIG_NAMES if env.pytest >= (9,) else _CONFIG_NAMES[2:]
    found_pyproject = None
    for arg in dirs:
        for base in parent_dirs(arg):
            for name in names:
                candidate = posixpath.join(base, name)
                if not ws.is_file(candidate):
                    continue
                if name == "pyproject.toml" and found_pyproject is None:
                    found_pyproject = candidate
                config = _config_from_file(ws, candidate)
                if config is not None:
                    return base, candidate, config
    if found_pyproject is not None and env.pytest >= (8, 1):
        return posixpath.dirname(found_pyproject), found_pyproject, {}
    return None, None, {}


def _common_ancestor(ws: Workspace, cwd: str, paths: Sequence[str]) -> str:
    common: str | None = None
    for path in paths:
        if not ws.exists(path):
            continue
        if common is None:
            common = path
        elif path == common or common in parent_dirs(path)[1:]:
            continue
        elif path in parent_dirs(common)[1:]:
            common = path
        else:
            common = posixpath.commonpath([path, common])
    if common is None:
        return cwd
    if ws.is_file(common):
        return posixpath.dirname(common)
    return common


def determine_setup(
    ws: Workspace, options: PytestOptions, cwd: str, env: Environment
) -> PytestConfig:
    def absolute(path: str) -> str:
        return posixpath.normpath(posixpath.join(cwd, path))

    targets = [absolute(t.split("::")[0]) for t in options.targets]
    dirs = [t if ws.is_dir(t) else posixpath.dirname(t) for t in targets if ws.exists(t)]
    rootdir: str | None
    if options.inifile:
        inipath: str | None = absolute(options.inifile)
        ini = _config_from_file(ws, inipath) or {}
        rootdir = posixpath.dirname(inipath)
    else:
        ancestor = _common_ancestor(ws, cwd, dirs)
        rootdir, inipath, ini = _locate_config(ws, [ancestor], env)
        if rootdir is None:
            for possible in parent_dirs(ancestor):
                if ws.is_file(posixpath.join(possible, "setup.py")):
                    rootdir = possible
                    break
            else:
                if dirs != [ancestor]:
                    rootdir, inipath, ini = _locate_config(ws, dirs, env)
                if rootdir is None:
                    rootdir = _common_ancestor(ws, cwd, [cwd, ancestor])
                    if rootdir == "/":
                        rootdir = ancestor
    if options.rootdir:
        rootdir = absolute(options.rootdir)
    ini = dict(ini)
    for override in options.override_ini:
        key, _, value = override.partition("=")
        ini[key.strip()] = value
    assert rootdir is not None
    return PytestConfig(rootdir=rootdir, inifile=inipath, ini=ini)


def relative_to_root(path: str, root: str) -> str:
    if path == root:
        return "."
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return posixpath.relpath(path, root)
