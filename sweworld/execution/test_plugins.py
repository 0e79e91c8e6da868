"""The pytest plugins a repository's own pytest configuration needs.

A library's ``addopts`` often names a plugin's options (parse and semver: ``--cov``), and
its ``required_plugins`` names plugins outright. An environment built with pytest alone
then refuses every plain ``pytest`` run with a usage error ("unrecognized arguments:
--cov=parse", exit 4) that no developer of the library ever sees, and what is recorded
there is not how the library's tests behave. :func:`config_plugin_packages` reads the
configuration pytest would read at the checkout's root and names the PyPI packages that
define those options, so the environment build installs them.
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import tomllib

__all__ = ["OPTION_PACKAGES", "config_plugin_packages", "read_addopts"]

#: Option (or option prefix, ending in ``-``) -> the PyPI package whose plugin defines it.
OPTION_PACKAGES: dict[str, str] = {
    "--cov": "pytest-cov",
    "--cov-": "pytest-cov",
    "--no-cov": "pytest-cov",
    "--no-cov-on-fail": "pytest-cov",
    "-n": "pytest-xdist",
    "--numprocesses": "pytest-xdist",
    "--dist": "pytest-xdist",
    "--maxprocesses": "pytest-xdist",
    "--timeout": "pytest-timeout",
    "--timeout-method": "pytest-timeout",
    "--benchmark-": "pytest-benchmark",
    "--doctest-plus": "pytest-doctestplus",
    "--doctest-rst": "pytest-doctestplus",
    "--reruns": "pytest-rerunfailures",
    "--reruns-delay": "pytest-rerunfailures",
    "--randomly-": "pytest-randomly",
    "--mypy": "pytest-mypy",
    "--flake8": "pytest-flake8",
    "--black": "pytest-black",
    "--isort": "pytest-isort",
    "--html": "pytest-html",
    "--mpl": "pytest-mpl",
    "--remote-data": "pytest-remotedata",
    "--asyncio-mode": "pytest-asyncio",
    "--ds": "pytest-django",
    "--reuse-db": "pytest-django",
    "--hypothesis-": "hypothesis",
}
# what pytest reads, in its order (pytest.ini even without a [pytest] section)
_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_MAX_BYTES = 1 << 20
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
# a whole requirement of a package from the index: a name, extras, version specifiers; no
# URL, path or option (what pip would fetch or build from elsewhere is refused)
_SPECIFIER = r"(?:===|==|!=|~=|>=|<=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_INDEX_REQUIREMENT = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._,\s-]*\])?\s*"
    rf"(?:{_SPECIFIER}(?:\s*,\s*{_SPECIFIER})*)?"
)


def _ini(path: Path, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(path.read_text(errors="replace")[:_MAX_BYTES])
    except configparser.Error:
        return None
    return dict(parser.items(section)) if parser.has_section(section) else None


def _config(root: Path) -> dict[str, object]:
    """The pytest settings of the first configuration file pytest would pick at ``root``."""
    for name in _FILES:
        path = root / name
        if not path.is_file():
            continue
        if path.stat().st_size > _MAX_BYTES:  # not read; pytest would stop at a pytest.ini
            if name in ("pytest.ini", ".pytest.ini"):
                return {}
            continue
        if name == "pyproject.toml":
            try:
                found: object = tomllib.loads(path.read_text(errors="replace"))
            except (tomllib.TOMLDecodeError, ValueError, RecursionError):
                continue
            for key in ("tool", "pytest", "ini_options"):  # any level may be another type
                found = found.get(key) if isinstance(found, dict) else None
            if isinstance(found, dict):
                return found
            continue
        section = {"setup.cfg": "tool:pytest"}.get(name, "pytest")
        found = _ini(path, section)
        if found is not None:
            return dict(found)
        if name in ("pytest.ini", ".pytest.ini"):
            return {}  # pytest stops at a pytest.ini, section or not
    return {}


def _words(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value or ""))
    except ValueError:
        return str(value or "").split()


def read_addopts(root: Path) -> list[str]:
    """The ``addopts`` of the configuration pytest reads at ``root`` (split as pytest does)."""
    return _words(_config(Path(root)).get("addopts"))


def config_plugin_packages(root: Path) -> tuple[str, ...]:
    """PyPI packages the checkout at ``root`` needs for its own pytest configuration: its
    ``required_plugins`` (as written, versions kept; an item that is not a plain
    requirement of a package from the index, such as a URL or a path, is left out) and the
    plugins whose options its
    ``addopts`` use. Sorted, without duplicates; empty when nothing is needed or nothing
    can be read."""
    config = _config(Path(root))
    needed: dict[str, str] = {}  # package name (lower case) -> requirement
    for word in _words(config.get("addopts")):
        name = word.split("=", 1)[0]
        if name.startswith("-n") and not name.startswith("--"):
            name = "-n"  # -n4, -nauto
        package = OPTION_PACKAGES.get(name) or next(
            (p for o, p in OPTION_PACKAGES.items() if o.endswith("-") and name.startswith(o)),
            None,
        )
        if package:
            needed[package] = package
    for item in _words(config.get("required_plugins")):  # a pinned requirement wins
        match = _REQUIREMENT.match(item)
        if match and _INDEX_REQUIREMENT.fullmatch(item):
            needed[match.group(0).lower()] = item
    return tuple(sorted(needed.values()))
