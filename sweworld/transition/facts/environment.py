"""The environment a command would run in (:class:`Environment`), as far as exact answers
depend on it.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from dataclasses import dataclass, field

#: Third-party top-level modules assumed importable when the caller says nothing else
#: (besides the workspace's own declared dependencies, see :func:`declared_dependencies`).
DEFAULT_INSTALLED: frozenset[str] = frozenset({"pytest", "_pytest"})


# --------------------------------------------------------------------------- environment


def _local_dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _local_pytest_versions() -> tuple[str | None, str | None]:
    return _local_dist_version("pytest"), _local_dist_version("pluggy")


def _vtuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    out = []
    for part in re.split(r"[.+-]", version.strip()):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group(0)))
    return tuple(out)


@dataclass(frozen=True)
class Environment:
    """The environment a command would run in, as far as exact answers depend on it.

    Attributes:
        python_version: ``X.Y.Z`` of the interpreter (default: the running one's).
        python_build: the full ``sys.version`` string (``python -VV``); default: the running
            interpreter's when ``python_version`` is its version, else unknown.
        python_bin_dir: directory of the environment's ``python`` (e.g.
            ``/opt/miniconda3/envs/testbed/bin``): ``sys.executable`` appears in some
            messages (``python -m nomod``); unknown by default, and those answers are then
            not exact.
        installed: top-level import names of installed third-party packages.
        pytest_version / pluggy_version: for pytest's header (default: the versions
            installed beside this package).
        pytest_plugins: ``name-version`` entries of the ``plugins:`` header line.
        py_version: the ``py`` library's version, which pytest < 7.2 names in its header.
        platform: ``sys.platform`` of the environment.
    """

    python_version: str = field(default_factory=platform.python_version)
    python_build: str | None = None
    python_bin_dir: str | None = None
    installed: frozenset[str] = DEFAULT_INSTALLED
    pytest_version: str | None = field(default_factory=lambda: _local_pytest_versions()[0])
    pluggy_version: str | None = field(default_factory=lambda: _local_pytest_versions()[1])
    pytest_plugins: tuple[str, ...] = ()
    py_version: str | None = None
    platform: str = sys.platform

    @property
    def python(self) -> tuple[int, ...]:
        return _vtuple(self.python_version) or sys.version_info[:3]

    @property
    def pytest(self) -> tuple[int, ...]:
        return _vtuple(self.pytest_version) or (8, 3)

    @property
    def same_minor(self) -> bool:
        """Whether the environment's Python is the running interpreter's ``major.minor``
        (the condition for claiming interpreter messages exact)."""
        return self.python[:2] == tuple(sys.version_info[:2])

    def full_version(self) -> str | None:
        if self.python_build:
            return self.python_build
        if self.python_version == platform.python_version():
            return sys.version
        return None
