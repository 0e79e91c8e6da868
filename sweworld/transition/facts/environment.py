"""The environment a command would run in (:class:`Environment`), as far as exact answers
depend on it.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def _host_vendor() -> str:
    match = re.search(r"\|([^|]+)\|", sys.version)
    return match.group(1).strip() if match else ""


def _build_suffix(build: str) -> str:
    """What ``python --version`` prints after the version for a distributor's build
    (``|Anaconda, Inc.|`` in ``sys.version`` -> `` :: Anaconda, Inc.``)."""
    match = re.search(r"\|([^|]+)\|", build)
    return f" :: {match.group(1).strip()}" if match else ""


@dataclass(frozen=True)
class Environment:
    """The environment a command would run in, as far as exact answers depend on it.

    Built with no arguments it describes the interpreter running sweworld (tests compare
    facts against real runs of it); :meth:`for_task` describes a task's environment from
    its one description (:func:`sweworld.tasks.environment.task_environment`), with what is
    not known left unknown (None), so that nothing that depends on it is answered exactly.

    Attributes:
        python_version: ``X.Y.Z`` or ``X.Y`` of the interpreter (default: the running one's);
            None when unknown.
        python_build: the full ``sys.version`` string (``python -VV``); default: the running
            interpreter's when ``python_version`` is its version, else unknown.
        python_vendor: the distributor ``python --version`` names after the version
            (``Anaconda, Inc.``), ``""`` for a plain build (default: the running one's), None
            when unknown (then ``--version`` is not exact).
        python_bin_dir: directory of the environment's ``python`` (e.g.
            ``/opt/miniconda3/envs/testbed/bin``): ``sys.executable`` appears in some
            messages (``python -m nomod``); unknown by default, and those answers are then
            not exact.
        installed: top-level import names of installed third-party packages.
        installed_complete: whether ``installed`` (plus the workspace's declared
            dependencies) is everything installed: only then is a top-level module found
            nowhere certainly missing.
        pytest_version / pluggy_version: for pytest's header (default: the versions
            installed beside this package); None when unknown.
        pytest_plugins: ``name-version`` entries of the ``plugins:`` header line; None
            when unknown.
        py_version: the ``py`` library's version, which pytest < 7.2 names in its header.
        platform: ``sys.platform`` of the environment.
    """

    python_version: str | None = field(default_factory=platform.python_version)
    python_build: str | None = None
    python_vendor: str | None = field(default_factory=_host_vendor)
    python_bin_dir: str | None = None
    installed: frozenset[str] = DEFAULT_INSTALLED
    installed_complete: bool = True
    pytest_version: str | None = field(default_factory=lambda: _local_pytest_versions()[0])
    pluggy_version: str | None = field(default_factory=lambda: _local_pytest_versions()[1])
    pytest_plugins: tuple[str, ...] | None = ()
    py_version: str | None = None
    platform: str = sys.platform

    @classmethod
    def for_task(cls, task: Any, repo_dir: Path | str | None = None) -> Environment:
        """The environment of ``task`` (a task or row; None: nothing is known), read from
        its environment description and the checkout ``repo_dir``'s metadata.

        Known: the Python when the description states it (``"3.6"``: messages of that
        version; ``"3.6.15"``: also ``python --version``), the pytest version when pinned.
        Unknown: the interpreter's build and path, pluggy and the plugins (so pytest's
        header is never exact), and what is installed beyond the declared dependencies
        unless these are static and nothing else installs packages (not a SWE-bench
        harness environment, whose recipe installs more, nor a custom install recipe).
        """
        from sweworld.tasks.environment import task_environment

        described = task_environment(task if task is not None else {}, repo_dir)
        static = described.requirements_static
        pytest_version = described.runner_version if described.test_runner == "pytest" else None
        return cls(
            python_version=(
                (described.python_full or described.python) if described.python_known else None
            ),
            python_build=None,
            # the distributor is only known for the running interpreter ("host", the toy)
            python_vendor=(
                _host_vendor() if described.python_full == platform.python_version() else None
            ),
            python_bin_dir=None,
            installed=DEFAULT_INSTALLED,
            installed_complete=(
                static and described.source != "swebench-spec" and not described.install
            ),
            pytest_version=pytest_version,
            pluggy_version=None,
            pytest_plugins=None,
        )

    @property
    def python(self) -> tuple[int, ...]:
        """The version as a tuple, for choosing message formats (the running one's when
        unknown: formats chosen so are never claimed exact, see :attr:`same_minor`)."""
        return _vtuple(self.python_version) or sys.version_info[:3]

    @property
    def pytest(self) -> tuple[int, ...]:
        return _vtuple(self.pytest_version) or (8, 3)

    @property
    def python_known(self) -> bool:
        """Whether the environment's Python version is known (at least major.minor)."""
        return len(_vtuple(self.python_version)) >= 2

    @property
    def same_minor(self) -> bool:
        """Whether the environment's Python is known and is the running interpreter's
        ``major.minor`` (the condition for claiming interpreter messages exact)."""
        return _vtuple(self.python_version)[:2] == tuple(sys.version_info[:2])

    @property
    def pytest_known(self) -> bool:
        """Whether pytest's version is known (its output formats depend on it)."""
        return bool(_vtuple(self.pytest_version))

    @property
    def header_known(self) -> bool:
        """Whether pytest's session header (Python, pytest, pluggy, plugins) is known."""
        return (
            len(_vtuple(self.python_version)) >= 3
            and self.pytest_known
            and bool(self.pluggy_version)
            and self.pytest_plugins is not None
        )

    def full_version(self) -> str | None:
        """``sys.version`` of the environment (``python -VV``), or None when unknown."""
        if self.python_build:
            return self.python_build
        if self.python_version == platform.python_version():
            return sys.version
        return None

    def version_line(self) -> str | None:
        """``python --version``'s output, or None when it is not known: the full version
        and the distributor (conda's builds print ``Python 3.6.13 :: Anaconda, Inc.``)."""
        if self.python_build:
            return f"Python {self.python_build.split()[0]}{_build_suffix(self.python_build)}\n"
        if len(_vtuple(self.python_version)) < 3 or self.python_vendor is None:
            return None
        vendor = f" :: {self.python_vendor}" if self.python_vendor else ""
        return f"Python {self.python_version}{vendor}\n"
