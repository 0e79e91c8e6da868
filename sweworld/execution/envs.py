"""Per-repository Python environments for real execution, built once and cached.

An environment is a virtualenv made from a host interpreter for one (repository, version,
recipe, interpreter). It is built in a sandbox that sees the host (network, pip
configuration, local wheel folders) plus ``/testbed``: a throwaway copy-on-write view of the
task's base checkout, so that ``pip install -e .`` records ``/testbed`` as the project's
location. The virtualenv sits at the fixed sandbox path ``/opt/sweworld/venv`` in the build
and in every run, and its base interpreter where both can show it (see
:mod:`sweworld.execution.interpreters`), so any host layout works: a cache under ``/tmp``
(which a session's ``/tmp`` hides), an interpreter under ``/root`` or ``/opt``. At run time
``/testbed`` is the session's workspace: the editable install imports the agent's code.
Building may use the package index; running never does. A build sees only the host
variables it needs (package index, proxies, certificates: :func:`build_env`), never the rest.

The interpreter follows the task's environment (:func:`sweworld.tasks.environment.
task_environment`): a task that runs on Python 3.6 gets a virtualenv from a host 3.6 when the
machine has one (``python3.6`` on ``PATH``, pyenv versions, ``/usr/bin``); otherwise the
host's Python, and the environment says so (``python_exact`` False).

Recipes say how to install a repository: commands run in ``/testbed`` with the environment
active. The default is the task environment's install recipe, else ``pip install pytest``
then ``pip install -e .``; per-repository recipes come from code or a JSON file
(``{"owner/name": {"install": [...], "packages": [...]}, "owner/name@version": {...}}``).

A build that fails for a reason that may pass (network errors, a timeout) is retried a
bounded number of times, and a cached transient failure is retried by the next builder that
loads it; ``rebuild=True`` rebuilds whatever is cached.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import stat
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sweworld.dirs import cache_dir
from sweworld.execution.envbuild import PRODUCTS_TAR, BuildOutcome, run_build
from sweworld.execution.interpreters import (
    VENV_MOUNT,
    Interpreter,
    find_interpreter,
    host_interpreter,
    installed_versions,
    probe,
)
from sweworld.execution.test_plugins import config_plugin_packages
from sweworld.sandbox.launch import SYSTEM_PATH

BUILD_LOG_TAIL = 4000
LAYOUT = 3  # 3: the build's products kept; 2: venv at VENV_MOUNT; 1: venv at its host path
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnvRecipe:
    """How to build a repository's environment.

    Attributes:
        python: host interpreter the virtualenv is made from; None picks one per task (the
            task environment's Python when the machine has it, else the host's).
        packages: test requirements installed first (``pip install ...``).
        install: shell commands run in ``/testbed`` with the environment active.
        env: extra variables for the build and for every run.
    """

    python: str | None = None
    packages: tuple[str, ...] = ("pytest",)
    install: tuple[str, ...] = ("pip install -e .",)
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EnvRecipe:
        unknown = set(data) - {"python", "packages", "install", "env"}
        if unknown:
            raise ValueError(
                f"unknown recipe keys {sorted(unknown)}; known: python, packages, install, env"
            )
        python = data.get("python")
        return cls(
            python=str(python) if python else None,
            packages=tuple(data.get("packages", ("pytest",))),
            install=tuple(data.get("install", ("pip install -e .",))),
            env=dict(data.get("env", {})),
        )

    def script(self, python: str, venv: str = VENV_MOUNT) -> str:
        """The build script, for the interpreter at ``python`` (a sandbox path)."""
        lines = [
            "set -e",
            f"{shlex.quote(python)} -m venv {shlex.quote(venv)}",
            f". {shlex.quote(venv + '/bin/activate')}",
            "cd /testbed",
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        if self.packages:
            lines.append("pip install " + " ".join(shlex.quote(p) for p in self.packages))
        lines += list(self.install)
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PythonEnv:
    """A built (or failed) environment.

    ``read_only`` lists the ``(host, sandbox path)`` folders a run sandbox must show;
    ``run_env`` the variables a run needs (``PATH`` with the environment first). ``python``
    is the interpreter it was made from; ``python_requested`` the task environment's Python
    (None when unknown) and ``python_exact`` whether ``python`` fits it. ``products`` is the
    tar of the files the build made in ``/testbed`` that git ignores (None when it made
    none, or failed): :mod:`sweworld.execution.prepared` lays them under session bases.
    """

    key: str
    root: Path
    venv: Path
    ok: bool
    log: str
    build_s: float
    recipe: EnvRecipe
    python: Interpreter | None = None
    python_requested: str | None = None
    python_exact: bool = True
    transient: bool = False
    attempts: int = 1
    products: Path | None = None

    @property
    def base_prefix(self) -> Path:
        return Path(self.python.prefix) if self.python else Path("/")

    @property
    def read_only(self) -> tuple[tuple[Path, str], ...]:
        binds = [(self.venv, VENV_MOUNT)]
        if self.python is not None:
            binds += self.python.binds()
        return tuple(binds)

    @property
    def run_env(self) -> dict[str, str]:
        return {
            "PATH": f"{VENV_MOUNT}/bin:{SYSTEM_PATH}",
            "VIRTUAL_ENV": VENV_MOUNT,
            "PYTHONDONTWRITEBYTECODE": "1",
            **(self.python.env() if self.python else {}),
            **self.recipe.env,
        }

    @property
    def python_info(self) -> dict[str, Any]:
        """What an execution result says about the interpreter (``info``)."""
        return {
            "python_requested": self.python_requested,
            "python_used": self.python.version if self.python else None,
            "python_exact": self.python_exact,
        }

    def log_tail(self, limit: int = BUILD_LOG_TAIL) -> str:
        return self.log[-limit:]


@dataclass(frozen=True)
class EnvPlan:
    """What will be built for a task: the recipe and the interpreter chosen for it, and
    ``build_env``: variables for the build only (see :func:`scm_version_env`)."""

    recipe: EnvRecipe
    python: Interpreter | None
    requested: str | None
    exact: bool
    note: str = ""
    build_env: Mapping[str, str] = field(default_factory=dict)
    packaging: str = ""


_PACKAGING_FILES = ("setup.py", "setup.cfg", "pyproject.toml")


def _small_regular_file(path: Path, limit: int = 1 << 20) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes (not
    through a symlink: the checkout is the repository's), else a marker of what it is."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return b"\0missing"
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return f"\0special {info.st_mode:o} {info.st_size}".encode()
        return handle.read(limit + 1)


def packaging_digest(base: Path | None) -> str:
    """A digest of the base checkout's packaging files (setup.py, setup.cfg,
    pyproject.toml). An install depends on them (entry points, dependencies, the version
    file), and SWE-bench installs each task at its own base commit: two bases whose
    packaging differs get environments of their own (pytest 5.4's ``pytest:main`` became
    ``pytest:console_main`` within the version), equal ones share one."""
    if base is None:
        return ""
    digest = hashlib.sha256()
    for name in _PACKAGING_FILES:
        data = _small_regular_file(base / name)
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


_RELEASE_RE = re.compile(r"[0-9]+(?:\.[0-9]+){1,2}")


def scm_version_env(task: Any, recipe: EnvRecipe) -> dict[str, str]:
    """The version a setuptools_scm build of the task's project reports, from the task's
    release (``"5.4"`` -> ``5.4.0``). A base checkout keeps no tags (they may point past
    the base), so without it setuptools_scm says ``0.1.dev1`` and a ``minversion`` check
    refuses the project's own pytest; SWE-bench's image, which keeps the tags older than
    the base, says ``5.4.1.devN+g<sha>``. Given for the project's distribution only
    (``SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST``: a dependency built from source keeps
    its own version). Empty when the task has no release or the recipe sets one."""
    version = str(getattr(task, "version", None) or "")
    name = str(getattr(task, "repo", None) or "").rsplit("/", 1)[-1]
    dist = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper()
    if not _RELEASE_RE.fullmatch(version) or not dist:
        return {}
    key = f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{dist}"
    if key in recipe.env or "SETUPTOOLS_SCM_PRETEND_VERSION" in recipe.env:
        return {}
    parts = version.split(".")
    return {key: ".".join(parts + ["0"] * (3 - len(parts)))}


def _previous_venv(root: Path) -> str | None:
    """The folder name of the build a status file points to (kept through one rebuild)."""
    try:
        return Path(json.loads((root / "status.json").read_text())["venv"]).name
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _task_environment(task: Any, base: Path | None) -> Any:
    """The task's environment description, or None when it cannot be read."""
    if task is None:
        return None
    try:
        from sweworld.tasks.environment import task_environment
    except ImportError:
        return None
    try:
        return task_environment(task, base)
    except Exception:  # a malformed row: fall back to the defaults, loudly
        log.warning("could not read the environment of %r", task, exc_info=True)
        return None


class EnvBuilder:
    """Builds and caches environments under ``root`` (default ``<cache>/envs``). Thread- and
    process-safe: a file lock per environment; a finished build (ok or failed) is reused,
    except that ``rebuild=True`` rebuilds each environment once for this builder and a
    failure that may be transient is retried once by each new builder.

    Args:
        attempts: tries per build when a failure may be transient (network, timeout).
        retry_delay: seconds before the second try (doubled for each further one).
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        recipes: Mapping[str, EnvRecipe | Mapping[str, Any]] | None = None,
        default: EnvRecipe | None = None,
        timeout: float = 1800.0,
        rebuild: bool = False,
        attempts: int = 3,
        retry_delay: float = 2.0,
    ):
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1 (got {attempts})")
        self.root = Path(root) if root else cache_dir() / "envs"
        self.recipes = {
            k: v if isinstance(v, EnvRecipe) else EnvRecipe.from_mapping(v)
            for k, v in (recipes or {}).items()
        }
        self.default = default or EnvRecipe()
        self.timeout = timeout
        self.rebuild = rebuild
        self.attempts = attempts
        self.retry_delay = retry_delay
        self._ready: dict[str, PythonEnv] = {}  # loaded environments, by key
        self._retried: set[str] = set()  # keys rebuilt by this builder (rebuild / transient)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> EnvBuilder:
        return cls(recipes=json.loads(Path(path).read_text()), **kwargs)

    def recipe_for(self, task: Any) -> EnvRecipe:
        """The configured recipe for ``task`` (per repository and version, else default)."""
        repo = getattr(task, "repo", "") or ""
        version = getattr(task, "version", None)
        return self.recipes.get(f"{repo}@{version}") or self.recipes.get(repo) or self.default

    def _configured(self, task: Any) -> bool:
        repo = getattr(task, "repo", "") or ""
        version = getattr(task, "version", None)
        return f"{repo}@{version}" in self.recipes or repo in self.recipes

    def plan(self, task: Any, base: Path | None = None) -> EnvPlan:
        """The recipe and interpreter for ``task``: a configured ``python`` is used as
        given; otherwise the task environment's Python when the machine has one, else the
        host's (``exact`` False). A configured recipe keeps its commands; otherwise the task
        environment's install recipe and pinned pytest are used (no pytest where the
        harness's environment has none: SymPy's), and where the environment has no install
        recipe of its own, the pytest plugins the checkout's pytest configuration needs
        (:func:`~sweworld.execution.test_plugins.config_plugin_packages`)."""
        recipe = self.recipe_for(task)
        tenv = _task_environment(task, base)
        requested = tenv.python if tenv is not None and tenv.python_known else None
        note = ""
        if recipe.python:
            interp = probe(recipe.python)
        else:
            interp = find_interpreter(requested) if requested else None
            if interp is None and tenv is not None and tenv.python_requires:
                host = host_interpreter()
                if host is not None and tenv.accepts_python(host.version):
                    interp = host
                else:
                    for version in installed_versions():
                        if tenv.accepts_python(version):
                            interp = find_interpreter(version)
                            if interp is not None:
                                break
            if interp is None:
                interp = host_interpreter()
                if requested and interp is not None and interp.version != requested:
                    note = (
                        f"the task's environment is Python {requested}, which this machine "
                        f"does not have (found: {', '.join(installed_versions()) or 'none'}); "
                        f"Python {interp.version} is used instead"
                    )
        if tenv is not None and not self._configured(task) and recipe == self.default:
            changes: dict[str, Any] = {}
            if tenv.install and recipe.install == EnvRecipe().install:
                changes["install"] = tuple(tenv.install)
            pin = tenv.runner_version if tenv.test_runner == "pytest" else None
            if pin and recipe.packages == ("pytest",):
                changes["packages"] = (f"pytest=={pin}",)
            if not tenv.pytest_installed and recipe.packages == ("pytest",):
                changes["packages"] = ()  # as the harness's environment: no pytest
            if tenv.packages and recipe.packages == ("pytest",):
                # the harness's pins (pytest's own suite needs its pluggy, seaborn's tests
                # matplotlib 3.7): after the runner, so that they win
                changes["packages"] = (*changes.get("packages", recipe.packages), *tenv.packages)
            if base is not None and not tenv.install:
                # no harness recipe (a factory library, an unknown repository): the plugins
                # the repository's own pytest configuration needs (parse's --cov)
                plugins = config_plugin_packages(base)
                if plugins:
                    changes["packages"] = (*changes.get("packages", recipe.packages), *plugins)
            recipe = replace(recipe, **changes)
        if interp is not None:
            exact = tenv.accepts_python(interp.version) if tenv is not None else True
        else:
            exact = False
        return EnvPlan(
            recipe=recipe,
            python=interp,
            requested=requested,
            exact=exact,
            note=note,
            build_env=scm_version_env(task, recipe),
            packaging=packaging_digest(base),
        )

    def key_for(self, task: Any, plan: EnvPlan) -> str:
        blob = json.dumps(
            [
                LAYOUT,
                getattr(task, "repo", ""),
                getattr(task, "version", None),
                getattr(task, "environment_setup_commit", None) or getattr(task, "base_commit", ""),
                asdict(plan.python) if plan.python else None,
                asdict(plan.recipe),
                dict(plan.build_env),
                plan.packaging,
            ],
            sort_keys=True,
            default=str,
        )
        slug = (getattr(task, "repo", "") or "repo").replace("/", "__")
        return f"{slug}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"

    def ensure(self, task: Any, base: Path, *, rebuild: bool = False) -> PythonEnv:
        """The environment for ``task`` (built from ``base``, its base checkout)."""
        plan = self.plan(task, base)
        key = self.key_for(task, plan)
        with self._lock:
            ready = self._ready.get(key)
            if self.rebuild and key not in self._retried:
                rebuild = True
                self._retried.add(key)
        if ready is not None and not rebuild and ready.venv.is_dir():
            return ready  # (another process's rebuild may have replaced it: then reload)
        env = self._ensure(key, plan, base, rebuild)
        with self._lock:
            self._ready[key] = env
        return env

    def _ensure(self, key: str, plan: EnvPlan, base: Path, rebuild: bool) -> PythonEnv:
        root = self.root / key
        root.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (root / "status.json").exists() and not rebuild:
                env = self._load(key, root, plan)
                if env is not None and (env.ok or not env.transient):
                    return env
                with self._lock:
                    retry = key not in self._retried
                    self._retried.add(key)
                if env is not None and not retry:
                    return env
                log.info("environment %s: retrying a build that failed transiently", key)
            return self._build(key, root, plan, base)

    def _load(self, key: str, root: Path, plan: EnvPlan) -> PythonEnv | None:
        try:
            data = json.loads((root / "status.json").read_text())
        except (OSError, ValueError):
            return None  # a torn or foreign status file: build again
        log_path = root / "build.log"
        products = data.get("products")
        return PythonEnv(
            key=key,
            root=root,
            venv=root / str(data.get("venv", "venv")),
            ok=bool(data.get("ok")),
            log=log_path.read_text(errors="replace") if log_path.exists() else "",
            build_s=float(data.get("build_s", 0.0)),
            recipe=plan.recipe,
            python=plan.python,
            python_requested=plan.requested,
            python_exact=plan.exact,
            transient=bool(data.get("transient", False)),
            attempts=int(data.get("attempts", 1)),
            products=root / str(products) if isinstance(products, str) and products else None,
        )

    def _build(self, key: str, root: Path, plan: EnvPlan, base: Path) -> PythonEnv:
        # A new folder per build: sandboxes of other processes that bound the previous
        # environment keep it while this one is built; older builds are removed afterwards.
        previous = _previous_venv(root)
        venv = root / "venvs" / f"{time.time_ns():x}-{os.getpid()}"
        made = root / "products" / venv.name
        (root / "status.json").unlink(missing_ok=True)
        started = time.monotonic()
        logs: list[str] = []
        if plan.note:
            logs.append(f"sweworld: {plan.note}\n")
        outcome = BuildOutcome(False, "", False)
        attempt = 0
        if plan.python is None:
            logs.append("sweworld: no Python interpreter can be run on this machine\n")
        else:
            script = plan.recipe.script(plan.python.path_inside)
            for attempt in range(1, self.attempts + 1):
                outcome = run_build(
                    script,
                    base,
                    venv,
                    pip_cache=cache_dir() / "pip",
                    timeout=self.timeout,
                    binds=plan.python.binds(),
                    extra_env={**plan.python.env(), **plan.build_env, **plan.recipe.env},
                    products=made,
                )
                if self.attempts > 1:
                    logs.append(f"sweworld: build attempt {attempt} of {self.attempts}\n")
                logs.append(outcome.log)
                if outcome.ok or not outcome.transient or attempt == self.attempts:
                    break
                log.warning("environment %s: transient build failure, retrying", key)
                time.sleep(self.retry_delay * 2 ** (attempt - 1))
        text = "".join(logs)
        build_s = time.monotonic() - started
        products = _products(made / PRODUCTS_TAR) if outcome.ok else None
        if not outcome.ok:
            log.warning("environment %s could not be built (%d attempts)", key, attempt)
        (root / "build.log").write_text(text)
        (root / "status.json").write_text(
            json.dumps(
                {
                    "ok": outcome.ok,
                    "build_s": build_s,
                    "transient": outcome.transient and not outcome.ok,
                    "attempts": attempt,
                    "python": asdict(plan.python) if plan.python else None,
                    "python_requested": plan.requested,
                    "recipe": asdict(plan.recipe),
                    "build_env": dict(plan.build_env),
                    "layout": LAYOUT,
                    "venv": str(venv.relative_to(root)),
                    "products": str(products.relative_to(root)) if products else None,
                },
                default=str,
                indent=1,
            )
        )
        keep = {venv.name, previous}
        for folder in ("venvs", "products", "bases"):
            for old in (root / folder).iterdir() if (root / folder).is_dir() else ():
                if old.name not in keep:
                    shutil.rmtree(old, ignore_errors=True)
        return PythonEnv(
            key=key,
            root=root,
            venv=venv,
            ok=outcome.ok,
            log=text,
            build_s=build_s,
            recipe=plan.recipe,
            python=plan.python,
            python_requested=plan.requested,
            python_exact=plan.exact,
            transient=outcome.transient and not outcome.ok,
            attempts=attempt,
            products=products,
        )


def _products(tar: Path) -> Path | None:
    """The products tar when the build made any file (an empty tar is 10 KiB of zeros)."""
    try:
        with tarfile.open(tar) as archive:
            return tar if archive.next() is not None else None
    except (OSError, tarfile.TarError):
        return None


__all__ = ["BUILD_LOG_TAIL", "EnvBuilder", "EnvPlan", "EnvRecipe", "PythonEnv", "run_build"]
