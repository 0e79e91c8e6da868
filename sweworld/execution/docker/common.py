"""What the docker executor's modules share: settings, the scripts run in the container,
the failures turned into results, a session's state, and the engine's error classes."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

INSTALL_HINT = "pip install 'sweworld[docker]'"
SANDBOX_ROOT = "/testbed"  # where the session's workspace appears in the sandbox
CONTROL_DIR = "/var/tmp/sweworld"  # inside the container: the stdin file
DEFAULT_ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"
KILL_GRACE_S = 5  # `timeout -k`: SIGKILL this long after SIGTERM
WATCHDOG_GRACE_S = 30.0  # host side: give up on a stream this long after the timeout
KILL_JOIN_S = 30.0  # wait this long for a kill to land before giving the container up
MAX_ARGS_BYTES = 64 * 1024  # per exec of `rm` / revert, to stay far below ARG_MAX
TIMEOUT_EXIT_CODE = 124

# Markers (argv[3] of a `bash -c SCRIPT MARKER args...` exec) naming the scripts below.
RUN_MARKER = "sweworld-run"
REVERT_MARKER = "sweworld-revert"
LIST_MARKER = "sweworld-list"

# Copy-back: the run script touches CHANGE_MARKER just before the command (back-dated by
# MARKER_BACKDATE_NS, since file times come from a coarse clock: a write in the same tick
# must still count as newer); afterwards every path whose status changed since is listed.
CHANGE_MARKER = f"{CONTROL_DIR}/changed-since"
COPY_BACK_TAR = f"{CONTROL_DIR}/copy-back.tar"
MARKER_BACKDATE_NS = 20_000_000
COPY_BACK_BYTES = 32 * 1024 * 1024  # default cap on the bytes copied back per command
COPY_BACK_ENTRIES = 20_000  # cap on the paths listed per command

# $1 activation, $2 working directory, $3 time limit (s), $4 stdin file ("": none),
# $5 / $6 PATH entries the agent put before / after the default ones, $7 the change marker
# to touch ("": none), then argv.
RUN_SCRIPT = f"""\
act=$1 cwd=$2 limit=$3 input=$4 front=$5 back=$6 mark=$7
shift 7
if [ -n "$act" ]; then
  eval "$act" >/dev/null 2>&1 ||
    echo "sweworld: warning: the environment activation failed in the container: $act" >&2
fi
if [ -n "$front" ]; then PATH="$front:$PATH"; fi
if [ -n "$back" ]; then PATH="$PATH:$back"; fi
export PATH
mkdir -p -- "$cwd" 2>/dev/null
cd -- "$cwd" || {{ echo "sweworld: cannot enter $cwd in the container" >&2; exit 1; }}
if [ -n "$input" ]; then exec 0<"$input"; rm -f -- "$input"; else exec 0</dev/null; fi
if [ -n "$mark" ]; then
  mkdir -p -- "${{mark%/*}}" 2>/dev/null
  t=$(date +%s%N) && t=$((t - {MARKER_BACKDATE_NS})) &&
    touch -d "@${{t%?????????}}.${{t: -9}}" -- "$mark" 2>/dev/null || rm -f -- "$mark"
fi
timeout -k {KILL_GRACE_S} "$limit" "$@"
status=$?
kill -s KILL -- -1 2>/dev/null
exit $status
"""

# $1 working tree, $2 commit, then paths relative to the tree: each is checked out from the
# commit (HEAD when the container's repository lacks it), or deleted when git does not
# know it (a file the session had added).
REVERT_SCRIPT = """\
tree=$1 ref=$2
shift 2
cd -- "$tree" || exit 1
git cat-file -e "$ref^{commit}" 2>/dev/null || ref=HEAD
for p in "$@"; do
  git checkout -q "$ref" -- "$p" 2>/dev/null || rm -rf -- "$p"
done
"""

# $1 entry cap, $2 marker, $3 the tree's .git (pruned), then operands: `=DIR` lists what
# changed below DIR since the marker, `DIR` lists DIR's children, `+DIR` everything below DIR.
# One NUL-terminated record per path: type (find's %y), size, path. No marker: exit 3.
LIST_SCRIPT = """\
cap=$1 mark=$2 git=$3
shift 3
for op in "$@"; do case $op in =*) [ -e "$mark" ] || exit 3 ;; esac; done
for op in "$@"; do
  case $op in
    =*) find "${op#=}" -path "$git" -prune -o -cnewer "$mark" -printf '%y %s %p\\0' ;;
    +*) find "${op#+}" -mindepth 1 -path "$git" -prune -o -printf '%y %s %p\\0' ;;
    *) find "$op" -mindepth 1 -maxdepth 1 -path "$git" -prune -o -printf '%y %s %p\\0' ;;
  esac
done 2>/dev/null | head -z -n "$cap"
"""

# The container's init: keeps it alive (`sleep infinity`, restarted when a kill takes it) and,
# as bash does for any child, reaps the orphans a killed command leaves (no zombies pile up).
KEEPALIVE_SCRIPT = "trap 'exit 0' TERM; while :; do sleep infinity & wait $!; done"

# Kills every process of the container but its init and this shell.
KILL_ARGV = ("bash", "-c", "kill -s KILL -- -1 2>/dev/null; true")


class DockerFailure(Exception):
    """A failure turned into a result: ``message`` for stderr, ``status`` for ``info``."""

    def __init__(self, message: str, status: str = "env_failed", **info: Any):
        super().__init__(message)
        self.message = message
        self.status = status
        self.info = info


class ContainerGone(Exception):
    """The session's container disappeared or stopped: start a new one and sync again."""


@dataclass
class SessionState:
    session_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    container: Any = None
    image: str = ""
    # ("w" | "t", relative path) -> signature last sent, or sync.DELETED
    synced: dict[tuple[str, str], tuple] = field(default_factory=dict)
    closed: bool = False
    base: Any = None  # the session's base checkout (a Path), None when the request names none


def remove_container(container: Any) -> None:
    if container is not None:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def error_named(exc: BaseException, name: str) -> bool:
    """``exc`` is a docker error of class ``name`` (by name: the package may be absent)."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def is_gone(exc: BaseException) -> bool:
    """The container no longer exists or no longer runs."""
    if error_named(exc, "NotFound"):
        return True
    if error_named(exc, "APIError"):
        code = getattr(exc, "status_code", None)
        return code == 409 or "is not running" in str(exc)
    return False
