"""Per-repository Python environments for real execution, built once and cached.

An environment is a virtualenv made from a host interpreter for one (repository, version,
recipe). It is built in a sandbox that sees the host (network, pip configuration, local
wheel folders) plus ``/testbed``: a throwaway copy-on-write view of the task's base
checkout, so that ``pip install -e .`` records ``/testbed`` as the project's location. At
run time the virtualenv and the interpreter it was made from appear read-only at their own
paths inside the session's sandbox, where ``/testbed`` is the session's workspace: the
editable install then imports the agent's code. Building may use the package index;
running never does.

Recipes say how to install a repository: commands run in ``/testbed`` with the
environment active. The default is ``pip install pytest`` then ``pip install -e .``;
per-repository recipes come from code or a JSON file (``{"owner/name": {"install": [...],
"packages": [...]}, "owner/name@version": {...}}``).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweworld.dirs import cache_dir

BUILD_LOG_TAIL = 4000


@dataclass(frozen=True)
class EnvRecipe:
    """How to build a repository's environment.

    Attributes:
        python: host interpreter the virtualenv is made from.
        packages: test requirements installed first (``pip install ...``).
        install: shell commands run in ``/testbed`` with the environment active.
        env: extra variables for the build and for every run.
    """

    python: str = field(default_factory=lambda: os.path.realpath(sys.executable))
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
        return cls(
            python=str(data.get("python", os.path.realpath(sys.executable))),
            packages=tuple(data.get("packages", ("pytest",))),
            install=tuple(data.get("install", ("pip install -e .",))),
            env=dict(data.get("env", {})),
        )

    def script(self, venv: Path) -> str:
        lines = [
            "set -e",
            f"{shlex.quote(self.python)} -m venv {shlex.quote(str(venv))}",
            f". {shlex.quote(str(venv / 'bin' / 'activate'))}",
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

    ``read_only`` lists the host folders a run sandbox must show at their own paths;
    ``run_env`` the variables a run needs (``PATH`` with the environment first).
    """

    key: str
    root: Path
    venv: Path
    base_prefix: Path
    ok: bool
    log: str
    build_s: float
    recipe: EnvRecipe

    @property
    def read_only(self) -> tuple[Path, ...]:
        return (self.venv, self.base_prefix)

    @property
    def run_env(self) -> dict[str, str]:
        from sweworld.sandbox.bwrap import SANDBOX_PATH

        system = SANDBOX_PATH.split(":", 1)[1]  # without the shim folder
        return {
            "PATH": f"{self.venv}/bin:{system}",
            "VIRTUAL_ENV": str(self.venv),
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.recipe.env,
        }

    def log_tail(self, limit: int = BUILD_LOG_TAIL) -> str:
        return self.log[-limit:]


class EnvBuilder:
    """Builds and caches environments under ``root`` (default ``<cache>/envs``). Thread- and
    process-safe: a file lock per environment; a finished build (ok or failed) is reused
    until :meth:`ensure` is called with ``rebuild=True``."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        recipes: Mapping[str, EnvRecipe | Mapping[str, Any]] | None = None,
        default: EnvRecipe | None = None,
        timeout: float = 1800.0,
    ):
        self.root = Path(root) if root else cache_dir() / "envs"
        self.recipes = {
            k: v if isinstance(v, EnvRecipe) else EnvRecipe.from_mapping(v)
            for k, v in (recipes or {}).items()
        }
        self.default = default or EnvRecipe()
        self.timeout = timeout
        self._ready: dict[str, PythonEnv] = {}  # loaded environments, by key
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> EnvBuilder:
        return cls(recipes=json.loads(Path(path).read_text()), **kwargs)

    def recipe_for(self, task: Any) -> EnvRecipe:
        repo = getattr(task, "repo", "") or ""
        version = getattr(task, "version", None)
        return self.recipes.get(f"{repo}@{version}") or self.recipes.get(repo) or self.default

    def key_for(self, task: Any, recipe: EnvRecipe) -> str:
        python_version = _python_version(recipe.python)
        blob = json.dumps(
            [
                getattr(task, "repo", ""),
                getattr(task, "version", None),
                getattr(task, "environment_setup_commit", None) or getattr(task, "base_commit", ""),
                python_version,
                asdict(recipe),
            ],
            sort_keys=True,
            default=str,
        )
        slug = (getattr(task, "repo", "") or "repo").replace("/", "__")
        return f"{slug}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"

    def ensure(self, task: Any, base: Path, *, rebuild: bool = False) -> PythonEnv:
        """The environment for ``task`` (built from ``base``, its base checkout)."""
        recipe = self.recipe_for(task)
        key = self.key_for(task, recipe)
        with self._lock:
            ready = self._ready.get(key)
        if ready is not None and not rebuild:
            return ready
        env = self._ensure(key, recipe, base, rebuild)
        with self._lock:
            self._ready[key] = env
        return env

    def _ensure(self, key: str, recipe: EnvRecipe, base: Path, rebuild: bool) -> PythonEnv:
        root = self.root / key
        root.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            status = root / "status.json"
            if status.exists() and not rebuild:
                return self._load(key, root, recipe)
            return self._build(key, root, recipe, base)

    def _load(self, key: str, root: Path, recipe: EnvRecipe) -> PythonEnv:
        data = json.loads((root / "status.json").read_text())
        log = (
            (root / "build.log").read_text(errors="replace")
            if (root / "build.log").exists()
            else ""
        )
        return PythonEnv(
            key=key,
            root=root,
            venv=root / "venv",
            base_prefix=Path(data["base_prefix"]),
            ok=bool(data["ok"]),
            log=log,
            build_s=float(data["build_s"]),
            recipe=recipe,
        )

    def _build(self, key: str, root: Path, recipe: EnvRecipe, base: Path) -> PythonEnv:
        venv = root / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        (root / "status.json").unlink(missing_ok=True)
        started = time.monotonic()
        base_prefix = _base_prefix(recipe.python)
        if base_prefix is None:
            ok, log = False, f"interpreter {recipe.python} cannot be run\n"
        else:
            ok, log = run_build(
                recipe.script(venv), base, venv, pip_cache=cache_dir() / "pip", timeout=self.timeout
            )
        build_s = time.monotonic() - started
        (root / "build.log").write_text(log)
        (root / "status.json").write_text(
            json.dumps(
                {
                    "ok": ok,
                    "build_s": build_s,
                    "base_prefix": str(base_prefix or ""),
                    "recipe": asdict(recipe),
                },
                default=str,
                indent=1,
            )
        )
        return PythonEnv(
            key=key,
            root=root,
            venv=venv,
            base_prefix=Path(base_prefix or "/"),
            ok=ok,
            log=log,
            build_s=build_s,
            recipe=recipe,
        )


@functools.lru_cache(maxsize=32)
def _python_version(python: str) -> str:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return "missing"
    return out.stdout.strip() or "missing"


@functools.lru_cache(maxsize=32)
def _base_prefix(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _host_view_args(writable: Sequence[Path]) -> list[str]:
    """bubblewrap options showing the host's top-level folders read-only (network kept)."""
    args = ["--die-with-parent", "--unshare-pid", "--proc", "/proc", "--dev", "/dev"]
    for name in sorted(os.listdir("/")):
        path = f"/{name}"
        if name in ("proc", "dev", "tmp", "testbed", "sys") or not os.path.lexists(path):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/sys", "/sys", "--tmpfs", "/tmp"]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    return args


def run_build(
    script: str, base: Path, venv: Path, *, pip_cache: Path, timeout: float
) -> tuple[bool, str]:
    """Run a build script in the host-view sandbox with ``/testbed`` = a scratch copy of
    ``base`` (copy-on-write, discarded afterwards). Returns (ok, log)."""
    from sweworld.dirs import runtime_dir
    from sweworld.sandbox.bwrap import bwrap_path, nsenter_path
    from sweworld.sandbox.workspace import make_workspace, resolve_backend

    venv.mkdir(parents=True, exist_ok=True)
    pip_cache.mkdir(parents=True, exist_ok=True)
    scratch_root = Path(tempfile.mkdtemp(prefix="envbuild-", dir=runtime_dir()))
    workspace = None
    try:
        backend = resolve_backend("auto", scratch_root)
        workspace = make_workspace(backend, base, scratch_root / "ws")
        argv = [
            bwrap_path(),
            *_host_view_args([venv, pip_cache]),
            "--bind",
            str(workspace.bind_source),
            "/testbed",
            "--chdir",
            "/testbed",
            "--setenv",
            "PIP_CACHE_DIR",
            str(pip_cache),
            "--setenv",
            "HOME",
            "/tmp",
            "--unsetenv",
            "PYTHONPATH",
            "--unsetenv",
            "VIRTUAL_ENV",
            "bash",
            "-c",
            script,
        ]
        pass_fds: tuple[int, ...] = ()
        if workspace.mount_ns_fd is not None:
            argv = [nsenter_path(), f"--mount=/proc/self/fd/{workspace.mount_ns_fd}", *argv]
            pass_fds = (workspace.mount_ns_fd,)
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                timeout=timeout,
                pass_fds=pass_fds,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            return False, out.decode(errors="replace") + f"\nbuild timed out after {timeout}s\n"
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        return proc.returncode == 0, log + f"\nbuild exit code {proc.returncode}\n"
    finally:
        if workspace is not None:
            workspace.destroy()
        shutil.rmtree(scratch_root, ignore_errors=True)
