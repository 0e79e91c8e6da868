"""A Docker executor: execution commands run for real in a per-session container.

Each session gets one long-lived container, started on its first execution command from the
task's image (by default the SWE-bench evaluation image of the instance), kept alive by a
bash loop around ``sleep infinity`` that also reaps orphans, with the network off, memory
capped, and the label ``sweworld.session=<id>``. The session's files stay on the host: file
operations run in the sandbox as always, and before every command the executor brings the
container's ``/testbed`` (and ``/tmp``) in line with the session, sending only what changed
since its last sync:

- files and symlinks the session wrote (``request.changes().written``) go over in one tar
  archive (``put_archive``), with their modes; a file whose ``(mode, size, mtime)`` is the
  one last sent is not sent again;
- paths the session deleted are removed (the highest missing directory at once, so that a
  deleted package leaves no empty directory behind to import as a namespace package);
- paths sent at an earlier sync that no longer differ from the base (the agent reverted
  them) are put back: from the session's base checkout when the request names one, else
  with ``git checkout <base_commit> -- <path>`` inside the container; new files are deleted;
- the session's private ``/tmp`` is mirrored the same way (agents keep scripts there).

Files are read without following symlinks (a symlink is sent as a symlink; a path whose
directories include a symlink is skipped), so nothing outside the session's trees is read.

The command then runs as ``bash -lc``: the environment is activated (SWE-bench's images:
``source /opt/miniconda3/bin/activate && conda activate testbed``), the agent's variables
are set, the shell enters the working directory and runs ``timeout <n> argv...`` with stdin
fed from a file sent along with the sync. stdout and stderr come back separately, each
capped (a command that prints more is stopped). When the command ends, every process it
left in the container is killed, as in the sandbox.

Then what the command changed in the container comes back (``copyback.py``), as one shared
filesystem would show it: files, symlinks and directories it created or modified below
``/testbed`` (``.git`` left out) and in ``/tmp``, and what it deleted there. The run script
touches a marker just before the command; afterwards ``find -cnewer`` lists what changed
(capped at ``COPY_BACK_ENTRIES`` paths), the children of changed directories show
deletions, and the files travel in one ``tar`` (capped at ``copy_back_bytes``). They are
written without following symlinks, setuid bits dropped, and recorded as synced so they are
not sent again. ``info["sync"]`` counts them (``copied_back``, ``copy_back_deleted``,
``copy_back_bytes``, ``copy_back_skipped``); ``info["copy_back_skipped"]`` names what was
left out and why. Not copied back: anything outside the tree and ``/tmp`` (installed
packages, ``$HOME``), ``.git``, devices, FIFOs and sockets, owners, and times.

The ``docker`` package is an optional dependency (``pip install 'sweworld[docker]'``);
it is imported only when a command first needs the engine. The executor never raises into
the session: a missing package, an unreachable engine, a missing image or a container that
fails to start all become results with ``info["status"] == "env_failed"`` and a message.

Imports: :mod:`sweworld.tasks`, :mod:`sweworld.sandbox`, :mod:`sweworld.execution`.
"""

from sweworld.execution.docker.common import (
    CHANGE_MARKER,
    CONTROL_DIR,
    COPY_BACK_BYTES,
    COPY_BACK_ENTRIES,
    DEFAULT_ACTIVATE,
    INSTALL_HINT,
    KEEPALIVE_SCRIPT,
    KILL_ARGV,
    KILL_GRACE_S,
    KILL_JOIN_S,
    LIST_MARKER,
    LIST_SCRIPT,
    MAX_ARGS_BYTES,
    REVERT_MARKER,
    REVERT_SCRIPT,
    RUN_MARKER,
    RUN_SCRIPT,
    SANDBOX_ROOT,
    TIMEOUT_EXIT_CODE,
    WATCHDOG_GRACE_S,
)
from sweworld.execution.docker.executor import DockerExecutor
from sweworld.execution.docker.naming import swebench_image_name

__all__ = [
    "CHANGE_MARKER",
    "CONTROL_DIR",
    "COPY_BACK_BYTES",
    "COPY_BACK_ENTRIES",
    "DEFAULT_ACTIVATE",
    "INSTALL_HINT",
    "KEEPALIVE_SCRIPT",
    "KILL_ARGV",
    "KILL_GRACE_S",
    "KILL_JOIN_S",
    "LIST_MARKER",
    "LIST_SCRIPT",
    "MAX_ARGS_BYTES",
    "REVERT_MARKER",
    "REVERT_SCRIPT",
    "RUN_MARKER",
    "RUN_SCRIPT",
    "SANDBOX_ROOT",
    "TIMEOUT_EXIT_CODE",
    "WATCHDOG_GRACE_S",
    "DockerExecutor",
    "swebench_image_name",
]
