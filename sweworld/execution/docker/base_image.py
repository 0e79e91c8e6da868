"""The base of every task image (:mod:`sweworld.execution.docker.images`): a Debian root
file system made once by ``debootstrap`` (``minbase`` with Python, venv, git and CA
certificates), cached under ``<cache>/docker/base-<key>/rootfs``; the layout's constants,
the build error and record, and the process helpers a build runs with (a lock, a process
group killed at its deadline, mounts cleared before a folder is removed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sweworld.dirs import cache_dir
from sweworld.sandbox.repos import file_lock

__all__ = [
    "ACTIVATE_SHIM",
    "BASE_PACKAGES",
    "ENV_PREFIX",
    "HOST_MOUNT",
    "IMAGE_KEY_LABEL",
    "LAYOUT",
    "MIRROR",
    "PIP_CACHE_MOUNT",
    "PIP_OWN_SETTINGS",
    "SUITE",
    "TEST_IMAGE",
    "VENV_PATH",
    "ImageBuild",
    "ImageBuildError",
    "base_image_name",
    "base_python",
    "build_base_rootfs",
    "docker_cache_dir",
    "tail_of",
]

LAYOUT = 1  # bump when the image layout changes: every image key changes with it
SUITE = "bookworm"
MIRROR = os.environ.get("SWEWORLD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_PACKAGES = ("python3", "python3-venv", "git", "ca-certificates")
ENV_PREFIX = "/opt/miniconda3"
VENV_PATH = f"{ENV_PREFIX}/envs/testbed"
TEST_IMAGE = "sweworld/docker-test:bookworm"
LOG_TAIL = 4000
HOST_MOUNT = "/run/sweworld/host"  # where the host's pip folders appear during a build
PIP_CACHE_MOUNT = "/run/sweworld/pip-cache"
IMAGE_KEY_LABEL = "sweworld.image-key"
# pip settings a build sets itself (the config file is read here and passed as variables)
PIP_OWN_SETTINGS = frozenset(
    {"cert", "cache-dir", "client-cert", "config-file", "target", "prefix", "root", "user"}
)

# Defines `conda activate NAME` / `conda deactivate` over virtualenvs in envs/NAME.
ACTIVATE_SHIM = f"""\
# sweworld: SWE-bench-layout compatible activation, not conda. Sourcing this file defines a
# `conda` shell function: `conda activate NAME` activates the virtualenv
# {ENV_PREFIX}/envs/NAME, `conda deactivate` leaves it; nothing else of conda exists here.
conda() {{
  case "$1" in
    activate)
      if [ "${{2:-base}}" = base ]; then return 0; fi
      if [ ! -f "{ENV_PREFIX}/envs/$2/bin/activate" ]; then
        echo "conda (sweworld shim): no environment named $2" >&2
        return 1
      fi
      . "{ENV_PREFIX}/envs/$2/bin/activate" ;;
    deactivate)
      if command -v deactivate >/dev/null 2>&1; then deactivate; fi ;;
    *)
      echo "conda (sweworld shim): only 'conda activate NAME' and 'conda deactivate' exist" >&2
      return 1 ;;
  esac
}}
"""


class ImageBuildError(RuntimeError):
    """An image could not be built; ``log_tail`` is the end of the build's output."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(f"{message}\n{log_tail}".rstrip() if log_tail else message)
        self.message = message
        self.log_tail = log_tail


@dataclass(frozen=True)
class ImageBuild:
    """A task image on the engine.

    Attributes:
        name: the image's name (``swebench/sweb.eval.x86_64.<id>:latest`` for a task).
        seconds: wall time of this call (the base's build included when it ran).
        built: True when this call built the image; False when an up-to-date one was there.
        log_tail: the end of the build's output ("" when nothing was built).
        image_id: the engine's id of the image.
        base: the base image it was built on.
        note: what the image differs in from the task's environment (another Python).
    """

    name: str
    seconds: float
    built: bool
    log_tail: str = ""
    image_id: str = ""
    base: str = ""
    note: str = ""

    @property
    def cached(self) -> bool:
        return not self.built


def docker_cache_dir(root: str | Path | None = None) -> Path:
    """``root``, else ``<cache>/docker``: where base file systems are kept."""
    path = Path(root) if root else cache_dir() / "docker"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _base_key() -> str:
    blob = json.dumps([LAYOUT, SUITE, MIRROR, BASE_PACKAGES])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def base_image_name() -> str:
    """The engine's name of the base image (``sweworld/base:<key>``)."""
    return f"sweworld/base:{SUITE}-{_base_key()}"


def tail_of(text: str, limit: int = LOG_TAIL) -> str:
    """The last ``limit`` characters of a build's log."""
    return text[-limit:]


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(f"sweworld: building {what} needs root (debootstrap, bubblewrap)")


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mounts), deepest first."""
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mounts") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 1:
                point = fields[1].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    return sorted(found, key=len, reverse=True)


def _remove_tree(path: Path) -> None:
    """Remove a build folder, unmounting first what debootstrap may have left mounted
    (never deleting through a mount: /proc, /sys or /dev would be the host's)."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    left = _mounts_under(path)
    if left:
        raise ImageBuildError(f"sweworld: {path} still has mounts ({', '.join(left)}); not removed")
    shutil.rmtree(path, ignore_errors=True)


def _run_group(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run ``argv`` in a process group of its own: its exit code and output (stdout and
    stderr). Past ``timeout`` the whole group is killed (debootstrap's dpkg and apt runs
    too, which would go on writing into a folder being removed) and TimeoutExpired raised."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a process that left the group holds the pipe
                out = b""
            raise subprocess.TimeoutExpired(argv, timeout, output=out) from None
        finally:
            if proc.poll() is None:  # interrupted: nothing of the group outlives the call
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
    return proc.returncode, out.decode(errors="replace")


def build_base_rootfs(
    cache: str | Path | None = None, *, rebuild: bool = False, timeout: float = 1200.0
) -> Path:
    """The base root file system (debootstrap ``minbase`` of Debian bookworm with
    :data:`BASE_PACKAGES`), built once into ``<cache>/base-<key>/rootfs`` and reused.

    Raises:
        ImageBuildError: not root, no debootstrap, or debootstrap failed (with its log).
    """
    root = docker_cache_dir(cache) / f"base-{SUITE}-{_base_key()}"
    rootfs = root / "rootfs"
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".lock"):
        if (root / "ok").exists() and rootfs.is_dir() and not rebuild:
            return rootfs
        _require_root("the base file system")
        if shutil.which("debootstrap") is None:
            raise ImageBuildError(
                "sweworld: debootstrap is not installed (apt-get install debootstrap)"
            )
        (root / "ok").unlink(missing_ok=True)
        _remove_tree(rootfs)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
        try:
            target = work / "rootfs"
            argv = [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                SUITE,
                str(target),
                MIRROR,
            ]
            try:
                returncode, log = _run_group(argv, timeout)
            except subprocess.TimeoutExpired as exc:
                raise ImageBuildError(
                    f"sweworld: debootstrap did not finish in {timeout:.0f} s",
                    tail_of((exc.output or b"").decode(errors="replace")),
                ) from exc
            (root / "debootstrap.log").write_text(log)
            if returncode != 0:
                raise ImageBuildError(
                    f"sweworld: debootstrap failed (exit {returncode})", tail_of(log)
                )
            _finish_base(target)
            os.rename(target, rootfs)
            (root / "ok").write_text(json.dumps({"suite": SUITE, "packages": BASE_PACKAGES}))
        finally:
            _remove_tree(work)
    return rootfs


def _finish_base(target: Path) -> None:
    """Trim the package caches; add the mount points a build needs and ``python``."""
    for folder in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (target / folder).glob("*"):
            if entry.is_file():
                entry.unlink()
    for folder in ("testbed", ENV_PREFIX.lstrip("/"), "run"):
        (target / folder).mkdir(parents=True, exist_ok=True)
    resolv = target / "etc/resolv.conf"
    if resolv.is_symlink() or not resolv.exists():
        resolv.unlink(missing_ok=True)
        resolv.write_text("")
    python = target / "usr/local/bin/python"
    if not python.is_symlink() and not python.exists():
        python.parent.mkdir(parents=True, exist_ok=True)
        python.symlink_to("/usr/bin/python3")


def base_python(rootfs: Path) -> str:
    """The major.minor of the base's Python (from its standard library folder)."""
    versions = [
        p.name.removeprefix("python")
        for p in (rootfs / "usr/lib").glob("python3.*")
        if p.name.removeprefix("python").replace(".", "").isdigit()
    ]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")), default="")
