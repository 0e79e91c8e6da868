"""Host interpreters for real execution: finding one that matches a task's Python, and
where it and a virtualenv appear inside a sandbox.

A virtualenv records absolute paths (``bin/python`` links to its base interpreter,
``pyvenv.cfg`` names the base's folder, console scripts start with ``#!<venv>/bin/python``).
They must hold both in the build sandbox and in every run sandbox, whatever the host layout:
a cache under ``/tmp`` (which a session's own ``/tmp`` hides), an interpreter under
``/root`` or ``/opt``. So the virtualenv lives at the fixed sandbox path :data:`VENV_MOUNT`
in both, and the base interpreter at its own path where the sandbox can show it there, else
at :data:`PYTHON_MOUNT`.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MOUNT_ROOT = "/opt/sweworld"
VENV_MOUNT = f"{MOUNT_ROOT}/venv"
PYTHON_MOUNT = f"{MOUNT_ROOT}/python"
PIP_CACHE_MOUNT = f"{MOUNT_ROOT}/pip-cache"
# Shown by every sandbox as is (read-only system folders): nothing to bind.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Hidden or replaced inside a sandbox: an interpreter there must move to PYTHON_MOUNT.
_SHADOWED = ("/tmp", "/testbed", "/proc", "/dev", "/sys", "/etc", "/.sweworld", MOUNT_ROOT)

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass(frozen=True)
class Interpreter:
    """A host interpreter and where a sandbox shows it.

    Attributes:
        path: the interpreter on the host (symlinks resolved).
        version: its major.minor (``"3.11"``).
        prefix: its ``sys.base_prefix`` on the host.
        prefix_inside: where a sandbox shows ``prefix``.
    """

    path: str
    version: str
    prefix: str
    prefix_inside: str

    @property
    def needs_bind(self) -> bool:
        """Whether a sandbox must bind ``prefix`` (it is not a system folder)."""
        return not _under(self.prefix, _SYSTEM)

    @property
    def path_inside(self) -> str:
        """The interpreter's path inside a sandbox."""
        rel = os.path.relpath(self.path, self.prefix)
        return os.path.normpath(os.path.join(self.prefix_inside, rel))

    @property
    def relocated(self) -> bool:
        """Whether a sandbox shows the interpreter somewhere else than on the host."""
        return self.prefix_inside != self.prefix

    def env(self) -> dict[str, str]:
        """Variables the interpreter needs in a sandbox: a relocated build linked against
        its own ``libpython`` (run path = its host prefix) finds it through
        ``LD_LIBRARY_PATH``."""
        return {"LD_LIBRARY_PATH": f"{self.prefix_inside}/lib"} if self.relocated else {}

    def binds(self) -> list[tuple[Path, str]]:
        """``(host, inside)`` read-only binds a sandbox needs for this interpreter."""
        return [(Path(self.prefix), self.prefix_inside)] if self.needs_bind else []


def prefix_inside(prefix: str) -> str:
    """Where a sandbox shows an interpreter installed under ``prefix``."""
    if _under(prefix, _SYSTEM) or not _under(prefix, _SHADOWED):
        return prefix
    return PYTHON_MOUNT


@functools.lru_cache(maxsize=64)
def probe(python: str) -> Interpreter | None:
    """Run ``python`` once to learn its version and prefix; None if it cannot run."""
    code = (
        "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.base_prefix); "
        "print(sys.executable)"
    )
    try:
        out = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 3 or not _VERSION_RE.match(lines[0]):
        return None
    # sys.executable, not ``python``: a pyenv shim or a wrapper script is not the interpreter
    path = os.path.realpath(lines[2] or python)
    prefix = os.path.realpath(lines[1])
    return Interpreter(path, lines[0], prefix, prefix_inside(prefix))


def _pyenv_roots() -> list[str]:
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv"), "/root/.pyenv"]
    seen: list[str] = []
    for root in roots:
        if root and os.path.isdir(os.path.join(root, "versions")) and root not in seen:
            seen.append(root)
    return seen


def candidates(version: str) -> list[str]:
    """Paths that may hold an interpreter of ``version`` (major.minor), best first:
    ``pythonX.Y`` on ``PATH``, pyenv versions, ``/usr/bin`` and ``/usr/local/bin``."""
    name = f"python{version}"
    found: list[str] = []
    on_path = shutil.which(name)
    if on_path:
        found.append(on_path)
    for root in _pyenv_roots():
        pattern = os.path.join(root, "versions", f"{version}.*", "bin", name)
        found += sorted(glob.glob(pattern), reverse=True)
        found += glob.glob(os.path.join(root, "versions", version, "bin", name))
    for folder in ("/usr/bin", "/usr/local/bin"):
        found.append(os.path.join(folder, name))
    unique: list[str] = []
    for path in found:
        if os.path.isfile(path) and os.access(path, os.X_OK) and path not in unique:
            unique.append(path)
    return unique


def find_interpreter(version: str) -> Interpreter | None:
    """An interpreter of ``version`` (major.minor) on this machine, or None."""
    for path in candidates(version):
        interp = probe(path)
        if interp is not None and interp.version == version:
            return interp
    return None


def host_interpreter() -> Interpreter | None:
    """The interpreter running sweworld."""
    return probe(os.path.realpath(sys.executable))


def installed_versions() -> list[str]:
    """Major.minor versions found on this machine (for messages), newest first."""
    versions = set()
    for root in _pyenv_roots():
        for path in glob.glob(os.path.join(root, "versions", "*")):
            m = re.match(r"^(\d+\.\d+)", os.path.basename(path))
            if m:
                versions.add(m.group(1))
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]:
        for path in glob.glob(os.path.join(folder or ".", "python[0-9].[0-9]*")):
            m = re.match(r"^python(\d+\.\d+)$", os.path.basename(path))
            if m:
                versions.add(m.group(1))
    return sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)


__all__ = [
    "MOUNT_ROOT",
    "PIP_CACHE_MOUNT",
    "PYTHON_MOUNT",
    "VENV_MOUNT",
    "Interpreter",
    "candidates",
    "find_interpreter",
    "host_interpreter",
    "installed_versions",
    "prefix_inside",
    "probe",
]
