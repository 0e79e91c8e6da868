"""The environment a command would run in (:class:`Environment`), as far as the facts
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


@functools.lru_cache(maxsize=1)
def _local_pytest_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest")
    except PackageNotFoundError:
        return None


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
    """The environment a command would run in, as far as the facts depend on it.

    Built with no arguments it describes the interpreter running sweworld (tests compare
    facts against real runs of it); :meth:`for_task` describes a task's environment from
    its one description (:func:`sweworld.tasks.environment.task_environment`), with what is
    not known left unknown (None), so that nothing that depends on it is answered exactly.

    Attributes:
        python_version: ``X.Y.Z`` or ``X.Y`` of the interpreter (default: the running one's);
            None when unknown.
        installed: top-level import names of installed third-party packages.
        installed_complete: whether ``installed`` (plus the workspace's declared
            dependencies) is everything installed: only then is a top-level module found
            nowhere certainly missing.
        pytest_version: pytest's version, which decides some collection rules (default: the
            version installed beside this package); None when unknown.
    """

    python_version: str | None = field(default_factory=platform.python_version)
    installed: frozenset[str] = DEFAULT_INSTALLED
    installed_complete: bool = True
    pytest_version: str | None = field(default_factory=_local_pytest_version)

    @classmethod
    def for_task(cls, task: Any, repo_dir: Path | str | None = None) -> Environment:
        """The environment of ``task`` (a task or row; None: nothing is known), read from
        its environment description and the checkout ``repo_dir``'s metadata.

        Known: the Python when the description states it, the pytest version when pinned,
        that pytest is absent where the description says so (SymPy's harness image).
        Unknown: what is installed beyond the declared dependencies unless these are static
        and nothing else installs packages (not a SWE-bench harness environment, whose
        recipe installs more, nor a custom install recipe).
        """
        from sweworld.tasks.environment import task_environment

        described = task_environment(task if task is not None else {}, repo_dir)
        static = described.requirements_static
        pytest_version = described.runner_version if described.test_runner == "pytest" else None
        return cls(
            python_version=(
                (described.python_full or described.python) if described.python_known else None
            ),
            # an environment known to have no pytest (SymPy's harness image) has none here
            installed=DEFAULT_INSTALLED if described.pytest_installed else frozenset(),
            installed_complete=(
                static and described.source != "swebench-spec" and not described.install
            ),
            pytest_version=pytest_version,
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
