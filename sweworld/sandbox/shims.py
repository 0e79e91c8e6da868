"""Interception of execution commands inside the sandbox.

The agent's shell command runs for real in bash inside bubblewrap, so pipes, ``&&``/``||``,
loops, redirects, heredocs and ``cd`` keep their exact semantics. What must not run for real
(``python``, ``pytest``, ``pip``, ...) is replaced, inside the sandbox only, by a small shim:
it writes the call (argv, cwd, environment, stdin) to a per-session control folder, wakes
the host through a FIFO, waits, and prints what the session's :class:`Executor` answered,
exiting with its exit code. Shell expansion has already happened when the shim runs, so the
executor sees exactly what the command would have received.

Refused commands (``docker``, ``sudo``, network clients, ...) get a second shim that prints
the refusal; the router refuses them statically before anything runs, the shim catches the
dynamic cases (``eval``, ``bash -c "$x"``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from sweworld.dirs import runtime_dir

SANDBOX_DIR = "/.sweworld"  # inside the sandbox
SHIM_BIN = f"{SANDBOX_DIR}/bin"
CTL = f"{SANDBOX_DIR}/ctl"
INIT_SCRIPT = f"{SANDBOX_DIR}/init.sh"
SERVER_SCRIPT = f"{SANDBOX_DIR}/server.sh"

EXECUTION_COMMANDS: tuple[str, ...] = (
    "python",
    "python2",
    "python3",
    *(f"python3.{minor}" for minor in range(6, 15)),
    "pytest",
    "py.test",
    "pip",
    "pip3",
    *(f"pip3.{minor}" for minor in range(6, 15)),
    "tox",
    "nox",
    "make",
    "coverage",
    "ipython",
    "jupyter",
    "django-admin",
    "mypy",
    "flake8",
    "pylint",
    "black",
    "isort",
    "sphinx-build",
    "uv",
    "poetry",
    "hatch",
    "pdm",
    "conda",
    "mamba",
    "node",
    "npm",
    "npx",
)

REFUSED_COMMANDS: dict[str, str] = {
    **dict.fromkeys(
        ("docker", "podman", "docker-compose", "kubectl", "nerdctl"),
        "containers are not available: this environment replaces them",
    ),
    **dict.fromkeys(
        ("sudo", "su", "doas", "pkexec"), "there is no privilege escalation in the sandbox"
    ),
    **dict.fromkeys(
        (
            "apt",
            "apt-get",
            "aptitude",
            "dpkg",
            "yum",
            "dnf",
            "apk",
            "brew",
            "snap",
            "pacman",
            "zypper",
        ),
        "system packages cannot be installed in the sandbox",
    ),
    **dict.fromkeys(
        (
            "curl",
            "wget",
            "ssh",
            "scp",
            "sftp",
            "nc",
            "ncat",
            "netcat",
            "telnet",
            "ftp",
            "rsync",
            "socat",
            "ping",
            "http",
            "aria2c",
        ),
        "the sandbox has no network",
    ),
    **dict.fromkeys(
        (
            "systemctl",
            "service",
            "mount",
            "umount",
            "chroot",
            "reboot",
            "shutdown",
            "halt",
            "poweroff",
            "crontab",
            "nsenter",
            "unshare",
        ),
        "system administration is not available in the sandbox",
    ),
}

# Interpreters that scripts may name by absolute path (``#!/usr/bin/python3``): the shim is
# bound over those that exist on the host.
_ABSOLUTE_DIRS = ("/usr/bin", "/usr/local/bin", "/bin")
_ABSOLUTE_NAMES = re.compile(r"^(python[0-9.]*|pip[0-9.]*|pytest|py\.test)$")
# Host /etc entries the sandbox's /etc copies (dynamic linker, `alternatives` links, zone).
_ETC_PASSTHROUGH = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "nsswitch.conf",
    "mime.types",
)

_SHIM = r"""#!/bin/bash
# sweworld: this command is handed to the session's executor (it is not run here).
# Builtins where possible: every external program costs a fork and an exec. The host
# removes the request folder after the command.
name=${SWEWORLD_SHIM_NAME:-${0##*/}}
unset SWEWORLD_SHIM_NAME
ctl=/.sweworld/ctl
d=$(mktemp -d "$ctl/req/XXXXXXXXXX" 2>/dev/null) || {
  echo "sweworld: $name: cannot reach the session's executor" >&2; exit 126; }
printf '%s\0' "$name" "$@" > "$d/argv"
printf '%s\n' "$PWD" > "$d/cwd"
for v in $(compgen -e); do printf '%s=%s\0' "$v" "${!v}"; done > "$d/env"
# Feed stdin when it is data meant for the command: always for a pipe; for a file or heredoc
# when a Python interpreter reads its program from it (`python - <<EOF`, `python < f`: all of
# it is read); for a file given to `python -c`, `-m` or a script (`python -c '...' < f`, or
# a `while read` loop's file), what is left of it from the current offset, read through a
# new open file so that the shell's offset stays where it is (the loop reads on).
reads_stdin=0
if [ -p /dev/stdin ]; then
  reads_stdin=1
elif [ -f /dev/stdin ]; then
  case $name in
    python*|ipython)
      reads_stdin=1
      skip=0
      for a in "$@"; do
        if [ $skip = 1 ]; then skip=0; continue; fi
        case $a in
          -) break ;;
          -c|-m) reads_stdin=2; break ;;
          -W|-X|--check-hash-based-pycs) skip=1 ;;
          -*) ;;
          *) reads_stdin=2; break ;;
        esac
      done ;;
  esac
fi
if [ $reads_stdin = 1 ]; then
  head -c 1048577 > "$d/stdin"
elif [ $reads_stdin = 2 ]; then
  info=$(< /proc/self/fdinfo/0) 2>/dev/null
  pos=${info%%$'\n'*}; pos=${pos//[!0-9]/}
  tail -c +$((${pos:-0} + 1)) /proc/self/fd/0 2>/dev/null | head -c 1048577 > "$d/stdin"
fi
mkfifo "$d/done" && exec 3<>"$d/done" || {
  echo "sweworld: $name: cannot reach the session's executor" >&2; exit 126; }
printf '%s\n' "${d##*/}" > "$ctl/exec"
read -r -u 3 _
exec 3<&-
rm -f "$d/stdin" 2>/dev/null  # read by now: a loop of calls must not fill the control space
[ -s "$d/stdout" ] && cat "$d/stdout"
[ -s "$d/stderr" ] && cat "$d/stderr" >&2
code=126
read -r code < "$d/exit" 2>/dev/null
exit "$code"
"""

_REFUSE = r"""#!/bin/bash
name=${0##*/}
echo "sweworld: refused: \`$name\` is not available in this sandbox; nothing was run." >&2
exit 126
"""

# Sourced (BASH_ENV) by the `bash -c` of every command before the command itself, so that
# error messages read exactly as they would outside (`bash: line 1: ...`).
_INIT = r"""unset BASH_ENV
cd -- "$SWEWORLD_CWD" 2>/dev/null || cd /testbed 2>/dev/null
__sweworld_cwd_out=$SWEWORLD_CWD_OUT
trap 'pwd > "$__sweworld_cwd_out" 2>/dev/null' EXIT
ulimit -c 0 2>/dev/null
ulimit -t "$SWEWORLD_CPU" -v "$SWEWORLD_MEM" -f "$SWEWORLD_FSIZE" 2>/dev/null
unset SWEWORLD_CWD SWEWORLD_CWD_OUT SWEWORLD_CPU SWEWORLD_MEM SWEWORLD_FSIZE
# A console script the repository declares (`name = module:function` under console_scripts
# in setup.py / setup.cfg, [project.scripts] or [tool.poetry.scripts] in pyproject.toml) is
# not installed here: it goes to the executor like EXECUTION_COMMANDS. The handler is only
# defined in a repository that declares scripts (read with builtins: no process is started).
for __sweworld_f in /testbed/setup.cfg /testbed/setup.py /testbed/pyproject.toml; do
  __sweworld_t=
  [ -f "$__sweworld_f" ] && IFS= read -r -d '' __sweworld_t < "$__sweworld_f"
  case $__sweworld_t in
    *console_scripts*|*project.scripts]*|*poetry.scripts]*)
      command_not_found_handle() {
        case $1 in
          */*|*[!A-Za-z0-9._-]*|'') ;;
          *)
            local f re="(^|[\"'[:space:]])${1//./\\.}[[:space:]]*=[[:space:]]*"
            re+="[\"']?[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_]"
            for f in /testbed/setup.cfg /testbed/setup.py /testbed/pyproject.toml; do
              if [ -f "$f" ] && grep -Eqs -- "$re" "$f"; then
                SWEWORLD_SHIM_NAME=$1 /.sweworld/bin/__sweworld_exec "${@:2}"
                return
              fi
            done ;;
        esac
        printf '%s: line %s: %s: command not found\n' "${0##*/}" "${BASH_LINENO[0]}" "$1" >&2
        return 127
      }
      break ;;
  esac
done
unset __sweworld_f __sweworld_t
"""

# The long-lived shell of a warm sandbox: one `bash -c` per request, each in its own process
# group (job control), which is killed when the command ends, and every other process is
# killed too, so nothing a command started in the background (in that group or out of it,
# with setsid or a double fork) outlives it.
_SERVER = r"""set -m
trap '' PIPE
exec 3<> /.sweworld/ctl/requests
echo ready
while IFS= read -r -u 3 id; do
  case $id in *[!0-9]*|'') continue ;; esac
  d=/.sweworld/ctl/steps/$id
  IFS= read -r -d '' cmd < "$d/cmd"
  IFS= read -r -d '' cwd < "$d/cwd"
  if [ -e "$d/merge" ]; then
    SWEWORLD_CWD=$cwd SWEWORLD_CWD_OUT=$d/cwd_out BASH_ENV=/.sweworld/init.sh \
      bash -c "$cmd" < /dev/null > "$d/out" 2>&1 &
  else
    SWEWORLD_CWD=$cwd SWEWORLD_CWD_OUT=$d/cwd_out BASH_ENV=/.sweworld/init.sh \
      bash -c "$cmd" < /dev/null > "$d/out" 2> "$d/err" &
  fi
  pid=$!
  wait "$pid"
  rc=$?
  kill -KILL -- -"$pid" 2>/dev/null
  # ...and whatever left that group (setsid, double fork): every process of this pid
  # namespace but its init and this server, so that nothing runs between two commands.
  kill -KILL -1 2>/dev/null
  echo "done $id $rc"
done
"""

_ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hostname": "sweworld\n",
    "hosts": "127.0.0.1\tlocalhost sweworld\n::1\tlocalhost\n",
    "resolv.conf": "",
}


@dataclass(frozen=True)
class ShimAssets:
    """Host folders holding the shim scripts and synthetic ``/etc`` files (read-only binds)."""

    root: Path
    bin: Path
    etc: Path
    init: Path
    server: Path
    exec_shim: Path
    refuse_shim: Path
    absolute_overrides: tuple[str, ...]  # host interpreter paths to hide behind the shim


@functools.lru_cache(maxsize=1)
def shim_assets() -> ShimAssets:
    """Write the shim folder once per process (content-addressed, shared by all sessions)."""
    host_etc = [f"/etc/{n}" for n in _ETC_PASSTHROUGH if os.path.lexists(f"/etc/{n}")]
    stamps = [(p, os.lstat(p).st_mtime_ns) for p in host_etc]
    digest = hashlib.sha256(
        (
            _SHIM
            + _REFUSE
            + _INIT
            + _SERVER
            + repr(sorted(_ETC_FILES.items()))
            + repr(EXECUTION_COMMANDS)
            + repr(sorted(REFUSED_COMMANDS))
            + repr(stamps)
        ).encode()
    ).hexdigest()[:12]
    root = runtime_dir() / f"shims-{digest}"
    if not (root / ".complete").exists():
        tmp = root.with_name(f"{root.name}.{os.getpid()}.tmp")
        (tmp / "bin").mkdir(parents=True, exist_ok=True)
        (tmp / "etc").mkdir(exist_ok=True)
        for name, text in (("__sweworld_exec", _SHIM), ("__sweworld_refuse", _REFUSE)):
            path = tmp / "bin" / name
            path.write_text(text)
            path.chmod(0o755)
        for name in EXECUTION_COMMANDS:
            (tmp / "bin" / name).symlink_to("__sweworld_exec")
        for name in REFUSED_COMMANDS:
            (tmp / "bin" / name).symlink_to("__sweworld_refuse")
        (tmp / "init.sh").write_text(_INIT)
        (tmp / "server.sh").write_text(_SERVER)
        for path in host_etc:
            dest = tmp / "etc" / os.path.basename(path)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.copytree(path, dest, symlinks=True)
            else:
                shutil.copy2(path, dest)  # follows a link such as /etc/localtime
        for name, text in _ETC_FILES.items():
            (tmp / "etc" / name).write_text(text)
        (tmp / ".complete").write_text("")
        try:
            os.rename(tmp, root)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    overrides = []
    for d in _ABSOLUTE_DIRS:
        if os.path.islink(d):
            continue
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if _ABSOLUTE_NAMES.match(name) and not os.path.isdir(path):
                    overrides.append(path)
    return ShimAssets(
        root=root,
        bin=root / "bin",
        etc=root / "etc",
        init=root / "init.sh",
        server=root / "server.sh",
        exec_shim=root / "bin" / "__sweworld_exec",
        refuse_shim=root / "bin" / "__sweworld_refuse",
        absolute_overrides=tuple(overrides),
    )


# --------------------------------------------------------------------------- host side

# A request id names one folder inside ``req`` (mktemp's letters and digits): never ``..``
# or a path, which would reach host folders through the host's descriptor of ``req``.
_REQ_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_REQUEST_FILE = 4 * 1024 * 1024


class ShimProtocolError(RuntimeError):
    """A request in the control folder is malformed (or was tampered with)."""


def _read_at(dir_fd: int, name: str, limit: int = MAX_REQUEST_FILE) -> bytes:
    """Read a regular file relative to ``dir_fd`` without following symlinks."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise ShimProtocolError(f"cannot open {name}: {exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ShimProtocolError(f"{name} is not a regular file")
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


@dataclass
class ShimCall:
    """One intercepted command, as read from the control folder."""

    req_id: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    stdin: bytes


def read_call(req_dir_fd: int, req_id: str) -> ShimCall:
    """Parse request ``req_id`` from the ``req`` folder (opened by the host as ``req_dir_fd``)."""
    if not _REQ_ID.fullmatch(req_id):
        raise ShimProtocolError(f"bad request id {req_id!r}")
    try:
        fd = os.open(req_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=req_dir_fd)
    except OSError as exc:
        raise ShimProtocolError(f"request {req_id} is not a folder: {exc}") from exc
    try:
        argv = tuple(a.decode(errors="replace") for a in _read_at(fd, "argv").split(b"\0")[:-1])
        if not argv:
            raise ShimProtocolError(f"request {req_id} has no argv")
        cwd = _read_at(fd, "cwd", 65536).decode(errors="replace").rstrip("\n") or "/testbed"
        env = {}
        for item in _read_at(fd, "env").split(b"\0"):
            key, sep, value = item.decode(errors="replace").partition("=")
            if sep and key:
                env[key] = value
        stdin = _read_at(fd, "stdin", 1024 * 1024 + 1)
        return ShimCall(req_id=req_id, argv=argv, cwd=cwd, env=env, stdin=stdin)
    finally:
        os.close(fd)


def answer_call(req_dir_fd: int, req_id: str, stdout: str, stderr: str, exit_code: int) -> None:
    """Write the executor's answer and wake the waiting shim (never blocks). A malformed
    ``req_id`` (the sandbox writes the ids) is ignored."""
    if not _REQ_ID.fullmatch(req_id):
        return
    try:
        fd = os.open(req_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=req_dir_fd)
    except OSError:
        return  # the shim is gone (killed, or the agent removed its folder)
    try:
        try:
            _write_at(fd, "stdout", stdout.encode("utf-8", errors="replace"))
            _write_at(fd, "stderr", stderr.encode("utf-8", errors="replace"))
            _write_at(fd, "exit", str(int(exit_code) & 0xFF).encode())
        except OSError:
            pass
        try:
            done = os.open("done", os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            return
        try:
            if stat.S_ISFIFO(os.fstat(done).st_mode):
                os.write(done, b"ok\n")
        except OSError:
            pass
        finally:
            os.close(done)
    finally:
        os.close(fd)
