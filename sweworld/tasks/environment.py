"""One environment description per task: Python, test runner, install recipe.

Everything that depends on the environment a task's code runs in reads it from here: the
exact facts of the transition model (what they may answer exactly), the LocalExecutor
(which interpreter to pick) and the grader's test command. :func:`task_environment`
takes it, in order, from:

1. the task row (``python`` / ``python_version``, ``test_runner``, ``runner_version`` /
   ``pytest_version``, ``install``, ``test_cmd``, or all of them under ``environment``),
2. the SWE-bench harness's environment for SWE-bench repositories
   (:mod:`sweworld.tasks.swebench_specs`, per repository and version),
   or, for this project's own toy repository (``sweworld/stockroom``), which only ever runs
   with the interpreter running sweworld: that interpreter (source ``local``),
3. the repository's own metadata when a checkout is given (``python_requires``, the test
   runner its configuration names; :mod:`sweworld.tasks.repo_metadata`),
4. the default: the host's Python, runner ``pytest``.

``python`` is what is known, not a guess: only rows 1, 2 and 4 set it, and
:attr:`TaskEnvironment.python_known` is False for the default.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from sweworld.tasks.repo_metadata import RepoMetadata, read_metadata
from sweworld.tasks.swebench_specs import (
    HARNESS_WITHOUT_PYTEST,
    harness_spec,
    repo_python,
    runner_of_command,
)
from sweworld.tasks.toy import TOY_REPO_NAME

__all__ = [
    "HOST_PYTHON",
    "TaskEnvironment",
    "host_python",
    "task_environment",
]

SOURCES = ("task", "swebench-spec", "local", "repository", "default")


def host_python() -> str:
    """The major.minor of the interpreter running sweworld."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


HOST_PYTHON = host_python()


@dataclass(frozen=True)
class TaskEnvironment:
    """The environment a task's code runs in.

    Attributes:
        python: major.minor (``"3.6"``), or None when unknown.
        test_runner: ``pytest``, ``django`` (tests/runtests.py), ``sympy`` (bin/test),
            ``python``, or ``unknown``.
        runner_version: the runner's version when known (a pinned pytest), else None.
        install: the install recipe's commands; empty means the default recipe.
        source: where ``python`` came from: ``task``, ``swebench-spec``, ``local``,
            ``repository`` or ``default`` (see the module docstring).
        test_command: the test command without directives (the harness's ``test_cmd``),
            or None for the default ``python -m pytest -rA -p no:cacheprovider``.
        python_requires: the Python versions the repository declares it supports.
        requirements_static: False when the repository's declared dependencies cannot be
            read statically (``install_requires=read_requirements()``, ``**kwargs``).
        python_full: the full ``X.Y.Z`` when the description states it (a row's
            ``"python": "3.8.10"``, or ``"host"``: the interpreter running sweworld, which
            is what the LocalExecutor runs when a task names no other), else None.
        pytest_installed: False where the environment is known to have no pytest (the
            harness environment of a repository that runs another runner:
            :data:`~sweworld.tasks.swebench_specs.HARNESS_WITHOUT_PYTEST`).
        packages: packages the environment pins (the harness's ``pip_packages``), installed
            before ``install``.
    """

    python: str | None
    test_runner: str
    runner_version: str | None
    install: tuple[str, ...]
    source: str
    test_command: str | None = None
    python_requires: str | None = None
    python_full: str | None = None
    requirements_static: bool = True
    pytest_installed: bool = True
    packages: tuple[str, ...] = ()

    @property
    def python_known(self) -> bool:
        """Whether ``python`` is known from the task's description (not the default)."""
        return self.python is not None and self.source != "default"

    @property
    def python_is_host(self) -> bool:
        """Whether the environment's Python is known and is the host's major.minor: only
        then do facts computed with the host interpreter hold for the environment."""
        return self.python_known and self.python == HOST_PYTHON

    def accepts_python(self, version: str) -> bool:
        """Whether an interpreter of ``version`` (major.minor) fits this environment: the
        known Python exactly, else the repository's ``python_requires`` (when declared)."""
        if self.python is not None and self.source != "default":
            return _major_minor(version) == _major_minor(self.python)
        if self.python_requires:
            return _satisfies(version, self.python_requires)
        return True


def _major_minor(version: str) -> tuple[int, ...]:
    parts = []
    for piece in str(version).strip().split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _major_minor_micro(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.strip().split(".")[:3]:
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _satisfies(version: str, specifier: str) -> bool:
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # packaging ships with pip/setuptools; be lenient without it
        return True
    try:
        spec = SpecifierSet(specifier.replace(" ", ""))
    except InvalidSpecifier:
        return True
    return spec.contains(".".join(map(str, _major_minor(version))) + ".0", prereleases=True) or (
        spec.contains(".".join(map(str, _major_minor(version))) + ".99", prereleases=True)
    )


def _get(task: Any, name: str) -> Any:
    if isinstance(task, Mapping):
        return task.get(name)
    return getattr(task, name, None)


def _row_fields(task: Any) -> dict[str, Any]:
    """The environment fields a row states explicitly (top level, ``extra``, or a nested
    ``environment`` mapping)."""
    fields: dict[str, Any] = {}
    sources: list[Any] = [task]
    extra = _get(task, "extra")
    if isinstance(extra, Mapping):
        sources.append(extra)
    for source in list(sources):
        nested = source.get("environment") if isinstance(source, Mapping) else None
        if isinstance(nested, Mapping):
            sources.append(nested)
    aliases = {
        "python": ("python", "python_version"),
        "test_runner": ("test_runner",),
        "runner_version": ("runner_version", "pytest_version"),
        "install": ("install", "install_commands"),
        "test_command": ("test_cmd", "test_command"),
    }
    for source in sources:
        for field_name, keys in aliases.items():
            for key in keys:
                value = source.get(key) if isinstance(source, Mapping) else None
                if value not in (None, "", [], ()):
                    fields[field_name] = value
    return fields


def _python_of(value: Any) -> str | None:
    parts = _major_minor(str(value))
    return ".".join(map(str, parts)) if len(parts) == 2 else None


def _install_of(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(line for line in value.splitlines() if line.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value if str(v).strip())
    return ()


@lru_cache(maxsize=256)
def _metadata(repo_dir: str) -> RepoMetadata:
    return read_metadata(repo_dir)


def task_environment(task: Any, repo_dir: Path | str | None = None) -> TaskEnvironment:
    """The environment description of ``task`` (a :class:`~sweworld.tasks.Task` or a row
    mapping); ``repo_dir``, a checkout of the task's repository, adds its own metadata."""
    repo = str(_get(task, "repo") or "")
    spec = harness_spec(repo, _get(task, "version")) if repo else None
    meta = _metadata(str(repo_dir)) if repo_dir is not None and Path(repo_dir).is_dir() else None

    if spec is not None:
        env = TaskEnvironment(
            python=spec.python if spec.matched else repo_python(repo),
            test_runner=spec.test_runner,
            runner_version=spec.pytest if spec.matched else None,
            install=spec.install_commands() if spec.matched else (),
            source="swebench-spec",
            test_command=spec.test_command,
            pytest_installed=repo.lower() not in HARNESS_WITHOUT_PYTEST,
            packages=spec.pip_packages if spec.matched else (),
        )
    elif repo.lower() == TOY_REPO_NAME:
        env = TaskEnvironment(
            python=HOST_PYTHON,
            test_runner="pytest",
            runner_version=None,
            install=(),
            source="local",
            python_full=platform.python_version(),
        )
    elif meta is not None and (meta.declares_package or meta.test_runner):
        env = TaskEnvironment(
            python=None,
            test_runner=meta.test_runner or "pytest",
            runner_version=None,
            install=(),
            source="repository",
        )
    else:
        env = TaskEnvironment(
            python=HOST_PYTHON,
            test_runner="pytest",
            runner_version=None,
            install=(),
            source="default",
        )
    if meta is not None:
        env = replace(
            env, python_requires=meta.python_requires, requirements_static=meta.requirements_static
        )

    row = _row_fields(task)
    if row:
        changes: dict[str, Any] = {}
        if str(row.get("python", "")).strip().lower() == "host":
            changes.update(python=HOST_PYTHON, python_full=platform.python_version())
            changes["source"] = "task"
        elif "python" in row and _python_of(row["python"]):
            changes["python"] = _python_of(row["python"])
            parts = _major_minor_micro(str(row["python"]))
            changes["python_full"] = ".".join(map(str, parts)) if len(parts) == 3 else None
            changes["source"] = "task"
        if "test_command" in row:
            changes["test_command"] = str(row["test_command"])
            changes["test_runner"] = runner_of_command(str(row["test_command"]))
        if "test_runner" in row:
            changes["test_runner"] = str(row["test_runner"])
        if "runner_version" in row:
            changes["runner_version"] = str(row["runner_version"])
        if "install" in row:
            changes["install"] = _install_of(row["install"])
        if "install" in row or changes.get("test_runner") == "pytest":
            changes["pytest_installed"] = True  # a recipe of the row's own may install it
        if changes.get("source") is None and env.source == "default":
            # a row that states its runner but not its Python: the Python is still unknown
            changes["python"] = None
            changes["source"] = "task"
        env = replace(env, **changes)
    return env
