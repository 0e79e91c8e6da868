"""The sandbox an environment build runs in: the host's folders read-only (network kept),
``/testbed`` a throwaway copy-on-write view of the base checkout, the virtualenv writable at
its fixed sandbox path, and an environment of only the variables a build needs.

What the build leaves in ``/testbed`` that git ignores (``*.egg-info``, a setuptools_scm
``_version.py``, extensions compiled in place) is the build's *products*: they are packed
into a tar beside the virtualenv, and :mod:`sweworld.execution.prepared` lays them under
each session's base checkout, as the task's Docker image holds them in its ``/testbed``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sweworld.execution.interpreters import MOUNT_ROOT, PIP_CACHE_MOUNT, VENV_MOUNT
from sweworld.sandbox.launch import build_env, bwrap_path, nsenter_path

# Failures that may pass on another try: the network, the package index, a proxy.
TRANSIENT_RE = re.compile(
    r"Temporary failure in name resolution|Name or service not known|"
    r"Connection (?:refused|reset|aborted|timed out)|NewConnectionError|ConnectTimeoutError|"
    r"ReadTimeoutError|Read timed out|Max retries exceeded|Network is unreachable|"
    r"ProxyError|IncompleteRead|HTTP error 5\d\d|\b50[234] (?:Server Error|Service Unavailable|"
    r"Bad Gateway|Gateway Time-?out)|ChunkedEncodingError|RemoteDisconnected"
)
_HIDDEN = frozenset({"proc", "dev", "tmp", "testbed", "sys", "opt"})

PRODUCTS_TAR = "products.tar"
PRODUCTS_MOUNT = f"{MOUNT_ROOT}/products"
# After a build that succeeded: the files git ignores in /testbed, less bytecode, as a tar
# (a failure here is reported in the log, never the build's). The system's git and tar, not
# what the build may have put first on PATH; whatever the build left in the products
# folder goes first. The host reads the tar as hostile all the same (prepared.py).
_COLLECT = f"""
cd /testbed && (
  export PATH=/usr/bin:/bin GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  rm -rf {PRODUCTS_MOUNT}/all {PRODUCTS_MOUNT}/list {PRODUCTS_MOUNT}/{PRODUCTS_TAR} &&
  git -c safe.directory='*' -c core.quotePath=false ls-files -z --others --ignored \\
    --exclude-standard > {PRODUCTS_MOUNT}/all &&
  {{ grep -zv -e '__pycache__/' -e '\\.py[co]$' {PRODUCTS_MOUNT}/all || [ $? = 1 ]; }} \\
    > {PRODUCTS_MOUNT}/list &&
  tar --null --no-recursion -T {PRODUCTS_MOUNT}/list -cf {PRODUCTS_MOUNT}/{PRODUCTS_TAR}
) || {{
  rm -f {PRODUCTS_MOUNT}/{PRODUCTS_TAR}
  echo "sweworld: the files the build made in /testbed could not be collected" >&2
}}
"""


@dataclass(frozen=True)
class BuildOutcome:
    """``ok``; the build's output; ``transient``: the failure may pass on another try."""

    ok: bool
    log: str
    transient: bool


def may_be_transient(log: str) -> bool:
    """Whether a failed build's output shows a failure that may pass (network, index)."""
    return bool(TRANSIENT_RE.search(log))


def host_view_args(binds: Sequence[tuple[Path, str, bool]] = ()) -> list[str]:
    """bubblewrap options showing the host's top-level folders read-only (network kept),
    then ``binds`` (``host, sandbox path, writable``). ``/opt`` is shown entry by entry so
    that ``/opt/sweworld`` can hold the environment's fixed paths."""
    args = ["--die-with-parent", "--unshare-pid", "--proc", "/proc", "--dev", "/dev"]
    for name in sorted(os.listdir("/")):
        path = f"/{name}"
        if name in _HIDDEN or not os.path.lexists(path):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isdir("/opt") and not os.path.islink("/opt"):
        for name in sorted(os.listdir("/opt")):
            path = f"/opt/{name}"
            if path == MOUNT_ROOT:
                continue
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            else:
                args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/sys", "/sys", "--tmpfs", "/tmp"]
    for host, inside, writable in binds:
        args += ["--bind" if writable else "--ro-bind", str(host), inside]
    return args


def run_build(
    script: str,
    base: Path,
    venv: Path,
    *,
    pip_cache: Path,
    timeout: float,
    binds: Sequence[tuple[Path, str]] = (),
    extra_env: Mapping[str, str] = (),
    products: Path | None = None,
) -> BuildOutcome:
    """Run a build script in the host-view sandbox with ``/testbed`` = a scratch copy of
    ``base`` (copy-on-write, discarded afterwards), ``venv`` at ``/opt/sweworld/venv`` and
    ``binds`` (the base interpreter) read-only. ``venv`` is emptied first.

    With ``products`` (a folder, emptied first), a build that succeeds leaves there
    :data:`PRODUCTS_TAR`: the files it made in ``/testbed`` that git ignores, bytecode
    apart."""
    from sweworld.dirs import runtime_dir
    from sweworld.sandbox.backends import make_workspace, resolve_backend

    shutil.rmtree(venv, ignore_errors=True)
    venv.mkdir(parents=True, exist_ok=True)
    if products is not None:
        shutil.rmtree(products, ignore_errors=True)
        products.mkdir(parents=True)
        script = script.rstrip("\n") + "\n" + _COLLECT
    pip_cache.mkdir(parents=True, exist_ok=True)
    scratch_root = Path(tempfile.mkdtemp(prefix="envbuild-", dir=runtime_dir()))
    workspace = None
    try:
        backend = resolve_backend("auto", scratch_root)
        workspace = make_workspace(backend, base, scratch_root / "ws")
        mounts = [
            *((host, inside, False) for host, inside in binds),
            (venv, VENV_MOUNT, True),
            (pip_cache, PIP_CACHE_MOUNT, True),
            *([(products, PRODUCTS_MOUNT, True)] if products is not None else []),
        ]
        argv = [
            bwrap_path(),
            *host_view_args(mounts),
            "--bind",
            str(workspace.bind_source),
            "/testbed",
            "--chdir",
            "/testbed",
            "bash",
            "-c",
            script,
        ]
        env = build_env({"PIP_CACHE_DIR": PIP_CACHE_MOUNT, "HOME": "/tmp", **dict(extra_env)})
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
                env=env,
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            text = out.decode(errors="replace") + f"\nbuild timed out after {timeout}s\n"
            return BuildOutcome(False, text, True)
        text = (proc.stdout + proc.stderr).decode(errors="replace")
        text += f"\nbuild exit code {proc.returncode}\n"
        ok = proc.returncode == 0
        return BuildOutcome(ok, text, not ok and may_be_transient(text))
    finally:
        if workspace is not None:
            workspace.destroy()
        shutil.rmtree(scratch_root, ignore_errors=True)


__all__ = [
    "PRODUCTS_TAR",
    "TRANSIENT_RE",
    "BuildOutcome",
    "host_view_args",
    "may_be_transient",
    "run_build",
]
