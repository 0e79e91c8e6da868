"""What every sandbox launch shares: the tools, the sandbox's root and environment, and the
minimal environment of the host-side processes that start it.

A sandbox must never see the host process's environment (API keys, tokens, cloud
credentials). ``bwrap --clearenv`` only cleans the command bubblewrap runs; bubblewrap
itself, its pid-1 reaper and ``nsenter`` keep whatever environment they were started with,
and ``/proc/1/environ`` shows it inside the sandbox. So the launch chain itself is started
with :func:`launcher_env` (a fixed ``PATH`` and locale, nothing taken from the host), and the
command inside gets :data:`BASE_ENV` plus what the caller adds explicitly.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping

from sweworld.sandbox.shims import INIT_SCRIPT, SERVER_SCRIPT, SHIM_BIN, shim_assets

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_PATH = f"{SHIM_BIN}:{SYSTEM_PATH}"
BASE_ENV = {
    "PATH": SANDBOX_PATH,
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "SHELL": "/bin/bash",
    "HOSTNAME": "sweworld",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
}
# Variables bash itself sets or that only steer the wrapper: never reported as agent settings.
SHELL_OWN_ENV = frozenset(
    {
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "BASH_ENV",
        "SWEWORLD_CWD",
        "SWEWORLD_CPU",
        "SWEWORLD_MEM",
        "SWEWORLD_FSIZE",
    }
)
# Host variables an environment build may need (package index, proxies, certificates,
# locale). Everything else of the host's environment stays out, builds included.
BUILD_PASSTHROUGH_PREFIXES = ("PIP_", "UV_")
BUILD_PASSTHROUGH = frozenset(
    {
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "SOURCE_DATE_EPOCH",
    }
)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing, cannot create namespaces here, or the host ran out of a
    resource a sandbox needs (file descriptors, processes); the message says which."""


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if not path:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap` "
            "(Debian/Ubuntu) or `dnf install bubblewrap`"
        )
    return path


@functools.lru_cache(maxsize=1)
def nsenter_path() -> str:
    path = shutil.which("nsenter")
    if not path:
        raise SandboxUnavailable("`nsenter` (util-linux) is needed by the overlay workspace")
    return path


def launcher_env() -> dict[str, str]:
    """The whole environment of a process that starts a sandbox (bwrap, nsenter, the cgroup
    wrapper): a fixed ``PATH`` and locale, nothing inherited from the host."""
    return {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}


def build_env(extra: Mapping[str, str] = ()) -> dict[str, str]:
    """The environment of an environment build: :func:`launcher_env`, the host's package
    index / proxy / certificate settings (:data:`BUILD_PASSTHROUGH`), and ``extra``."""
    env = launcher_env()
    for key, value in os.environ.items():
        if key in BUILD_PASSTHROUGH or key.startswith(BUILD_PASSTHROUGH_PREFIXES):
            env[key] = value
    if "PIP_CONFIG_FILE" not in env:  # builds run with HOME=/tmp: keep the user's pip config
        user_conf = os.path.expanduser("~/.config/pip/pip.conf")
        if os.path.isfile(user_conf) and not user_conf.startswith("/tmp/"):
            env["PIP_CONFIG_FILE"] = user_conf
    env.update(dict(extra))
    return env


def root_args(intercept: bool = True) -> list[str]:
    """bubblewrap options for the sandbox's read-only system; ``intercept`` installs the
    execution shims."""
    args: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    assets = shim_assets()
    args += ["--ro-bind", str(assets.etc), "/etc"]
    if intercept:
        for path in assets.absolute_overrides:
            args += ["--ro-bind", str(assets.exec_shim), path]
    args += [
        "--ro-bind",
        str(assets.bin),
        SHIM_BIN,
        "--ro-bind",
        str(assets.init),
        INIT_SCRIPT,
        "--ro-bind",
        str(assets.server),
        SERVER_SCRIPT,
    ]
    return args


__all__ = [
    "BASE_ENV",
    "BUILD_PASSTHROUGH",
    "SANDBOX_PATH",
    "SHELL_OWN_ENV",
    "SYSTEM_DIRS",
    "SYSTEM_PATH",
    "SandboxUnavailable",
    "build_env",
    "bwrap_path",
    "launcher_env",
    "nsenter_path",
    "root_args",
]
