"""``DockerExecutor``: one container per session, commands run in it with ``docker exec``,
their output streamed back under caps and a time limit (see the package doc)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sweworld.execution.docker.common import (
    CHANGE_MARKER,
    CONTROL_DIR,
    COPY_BACK_BYTES,
    DEFAULT_ACTIVATE,
    INSTALL_HINT,
    KEEPALIVE_SCRIPT,
    KILL_ARGV,
    KILL_GRACE_S,
    KILL_JOIN_S,
    RUN_MARKER,
    RUN_SCRIPT,
    SANDBOX_ROOT,
    TIMEOUT_EXIT_CODE,
    WATCHDOG_GRACE_S,
    ContainerGone,
    DockerFailure,
    SessionState,
    is_gone,
    remove_container,
)
from sweworld.execution.docker.copyback import CopyBack
from sweworld.execution.docker.naming import ImageResolver
from sweworld.execution.docker.sync import WorkspaceSync
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult

log = logging.getLogger(__name__)

# Interpreters a script may name by absolute path (a shebang): in the container the
# activated environment's one must run, not the system's.
_SYSTEM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/bin")
_INTERPRETER = re.compile(r"^(python[0-9.]*|pip[0-9.]*|pytest|py\.test)$")
_DEFAULT_SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerExecutor(ImageResolver, WorkspaceSync, CopyBack):
    """Runs execution commands in one Docker container per session (see the module doc).

    Args:
        image: the image: a name, a callable ``task -> name``, or None for the SWE-bench
            evaluation image of ``task.instance_id`` (``swebench/sweb.eval...``, or the
            harness's local key ``sweb.eval...`` when only that one is present).
        namespace: Docker Hub namespace of the SWE-bench images (None: local keys only).
        arch: architecture in the SWE-bench image name.
        client: a ``docker.DockerClient`` (default: ``docker.from_env()`` on first use).
        workdir: where the repository is in the container (the sandbox's ``/testbed``).
        timeout: seconds a command may run before it is stopped (exit code 124).
        max_output_bytes: cap on stdout and on stderr each; past it the command is stopped.
        mem_limit: the container's memory limit (Docker's syntax), None for none.
        activate: shell code run before each command (empty: none).
        network: give the container a network (off by default).
        pull: pull a missing image instead of failing (SWE-bench images are GBs).
        pids_limit: the container's process limit, None for the engine's default.
        copy_back: copy what a command changed in the container's tree and ``/tmp`` back
            into the session (as one shared filesystem would show it).
        copy_back_bytes: cap on the bytes of files copied back after one command.
    """

    name = "docker"

    def __init__(
        self,
        *,
        image: str | Callable[[Any], str] | None = None,
        namespace: str | None = "swebench",
        arch: str = "x86_64",
        client: Any = None,
        workdir: str = "/testbed",
        timeout: float = 300.0,
        max_output_bytes: int = 2_000_000,
        mem_limit: str | None = "4g",
        activate: str | None = DEFAULT_ACTIVATE,
        network: bool = False,
        pull: bool = False,
        pids_limit: int | None = None,
        copy_back: bool = True,
        copy_back_bytes: int = COPY_BACK_BYTES,
    ):
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if not workdir.startswith("/") or workdir.rstrip("/") == "":
            raise ValueError(f"workdir must be an absolute path below /, not {workdir!r}")
        self.image = image
        self.namespace = namespace
        self.arch = arch
        self.workdir = workdir.rstrip("/")
        self.timeout = float(timeout)
        self.max_output_bytes = int(max_output_bytes)
        self.mem_limit = mem_limit
        self.activate = activate or ""
        self.network = network
        self.pull = pull
        self.pids_limit = pids_limit
        self.copy_back = copy_back
        self.copy_back_bytes = int(copy_back_bytes)
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()  # guards _sessions and _client
        self._sessions: dict[str, SessionState] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------------ protocol

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        started = time.perf_counter()
        try:
            return self._execute(request, started)
        except DockerFailure as failure:
            return self._failed(failure.message, failure.status, started, **failure.info)
        except Exception as exc:  # never into the session
            return self._failed(
                f"sweworld: the docker executor failed on `{request.command}`: "
                f"{type(exc).__name__}: {exc}\n",
                "error",
                started,
            )

    def close_session(self, session_id: str) -> None:
        """Remove the container of a session that ended (best effort, never raises)."""
        with self._lock:
            state = self._sessions.pop(session_id, None)
        if state is not None:
            state.closed = True
            remove_container(state.container)
            state.container = None

    def close(self) -> None:
        """Remove every container this executor started (best effort, never raises)."""
        with self._lock:
            states = list(self._sessions.values())
            self._sessions.clear()
        for state in states:
            state.closed = True
            remove_container(state.container)
            state.container = None
        if self._owns_client:
            with self._lock:
                client, self._client = self._client, None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def containers(self) -> dict[str, Any]:
        """Session id -> its live container (for inspection and tests)."""
        with self._lock:
            return {sid: s.container for sid, s in self._sessions.items() if s.container}

    # ------------------------------------------------------------------ one command

    def _execute(self, request: ExecutionRequest, started: float) -> ExecutionResult:
        client = self._get_client()
        state = self._state(request.session_id)
        with state.lock:
            for attempt in (1, 2):
                if state.closed:
                    raise DockerFailure(
                        f"sweworld: `{request.command}` was not run: the session's container "
                        "was closed.\n"
                    )
                container = self._ensure_container(client, state, request)
                state.base = request.base
                try:
                    t0 = time.perf_counter()
                    counts = self._sync(client, container, state, request)
                    sync_s = time.perf_counter() - t0
                    return self._run(client, container, state, request, started, counts, sync_s)
                except ContainerGone:
                    self._drop_container(state)
                    if attempt == 2:
                        raise DockerFailure(
                            f"sweworld: `{request.command}` was not run: the container of "
                            f"image {state.image or '?'} stopped twice in a row.\n"
                        ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(
        self,
        client: Any,
        container: Any,
        state: SessionState,
        request: ExecutionRequest,
        started: float,
        counts: dict[str, int],
        sync_s: float,
    ) -> ExecutionResult:
        front, back = _path_additions(request.env.get("PATH"))
        left = request.time_left(self.timeout)  # the step's own deadline, when sooner
        limit = max(self.timeout if left is None else left, 0.01)
        env = {k: v for k, v in request.env.items() if k.isidentifier() and k != "PATH"}
        argv = [self._container_arg(a) for a in _command_argv(request.argv)]
        stdin_path = f"{CONTROL_DIR}/stdin" if request.stdin else ""
        copy_back = self.copy_back and (request.workspace is not None or request.tmp is not None)
        cmd = [
            "bash",
            "-lc",
            RUN_SCRIPT,
            RUN_MARKER,
            self.activate,
            self._container_path(request.cwd or SANDBOX_ROOT),
            f"{limit:g}",
            stdin_path,
            front,
            back,
            CHANGE_MARKER if copy_back else "",
            *argv,
        ]
        t0 = time.perf_counter()
        try:
            exec_id = client.api.exec_create(
                container.id, cmd, stdout=True, stderr=True, environment=env, workdir=self.workdir
            )["Id"]
            stream = client.api.exec_start(exec_id, stream=True, demux=True)
        except Exception as exc:
            if is_gone(exc):
                raise ContainerGone from exc
            raise DockerFailure(
                f"sweworld: `{request.command}` could not be started in the container: "
                f"{type(exc).__name__}: {exc}\n",
                image=state.image,
            ) from exc
        out, err, truncated, cut_off, stuck = self._collect(client, container, stream)
        if stuck:  # the container may still kill things: the next command gets a new one
            self._drop_container(state)
        exit_code: int | None = None
        with contextlib.suppress(Exception):
            exit_code = client.api.exec_inspect(exec_id).get("ExitCode")
        exec_s = time.perf_counter() - t0

        back_info: dict[str, Any] = {}
        copy_back_s = 0.0
        if copy_back and not stuck:
            t1 = time.perf_counter()
            back_info = self._copy_back(client, container, state, request)
            counts = {**counts, **back_info.pop("counts")}
            copy_back_s = time.perf_counter() - t1

        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        status = "ok"
        if cut_off or exit_code == TIMEOUT_EXIT_CODE or (exit_code == 128 + 9 and exec_s >= limit):
            status, exit_code = "timeout", TIMEOUT_EXIT_CODE
            stderr += (
                f"\nsweworld: `{request.command}` did not finish within {limit:g} s "
                "in the container and was stopped.\n"
            )
        elif truncated:
            status, exit_code = "output_truncated", 1
            stderr += (
                f"\nsweworld: `{request.command}` printed more than {self.max_output_bytes} "
                "bytes on one stream; the output was cut there and the command was stopped.\n"
            )
        elif exit_code is None:
            status, exit_code = "error", 1
            stderr += "\nsweworld: the command's exit status could not be read from Docker.\n"
        return ExecutionResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=int(exit_code),
            info={
                "executor": self.name,
                "executed": True,
                "status": status,
                "latency_s": time.perf_counter() - started,
                "image": state.image,
                "container": str(getattr(container, "id", ""))[:12],
                "sync": counts,
                "sync_s": sync_s,
                "exec_s": exec_s,
                "copy_back_s": copy_back_s,
                **back_info,
            },
        )

    def _collect(
        self, client: Any, container: Any, stream: Any
    ) -> tuple[bytes, bytes, bool, bool, bool]:
        """Read a demultiplexed exec stream, keeping at most ``max_output_bytes`` per stream.

        A stream past its cap stops the command (every process in the container); a stream
        still open long after the time limit is abandoned. The kill runs in a thread while
        the stream is drained: the engine does not start it while the stream is backed up.
        Returns stdout, stderr, truncated, cut off, and whether a kill never completed.
        """
        cap = self.max_output_bytes
        bufs = [bytearray(), bytearray()]
        truncated = False
        cut_off = threading.Event()
        kill_lock = threading.Lock()
        killers: list[threading.Thread] = []

        def kill() -> None:
            with kill_lock:
                if not killers:
                    thread = threading.Thread(
                        target=self._kill_all, args=(client, container), daemon=True
                    )
                    killers.append(thread)
                    thread.start()

        def watchdog() -> None:
            cut_off.set()
            kill()
            with contextlib.suppress(Exception):
                stream.close()

        timer = threading.Timer(self.timeout + KILL_GRACE_S + WATCHDOG_GRACE_S, watchdog)
        timer.daemon = True
        timer.start()
        try:
            for chunk in _iter_stream(stream):
                for i, data in enumerate(chunk):
                    if not data:
                        continue
                    room = cap - len(bufs[i])
                    if len(data) > room:
                        bufs[i] += data[: max(room, 0)]
                        if not truncated:
                            truncated = True
                            kill()
                    else:
                        bufs[i] += data
        except Exception:
            if not cut_off.is_set():
                raise
        finally:
            timer.cancel()
            with contextlib.suppress(Exception):
                stream.close()
        with kill_lock:
            killer = killers[0] if killers else None
        if killer is not None:
            # A kill landing later would hit the session's next command.
            killer.join(KILL_JOIN_S)
        stuck = killer is not None and killer.is_alive()
        return bytes(bufs[0]), bytes(bufs[1]), truncated, cut_off.is_set(), stuck

    def _kill_all(self, client: Any, container: Any) -> None:
        with contextlib.suppress(Exception):
            exec_id = client.api.exec_create(container.id, list(KILL_ARGV))["Id"]
            client.api.exec_start(exec_id)

    # ------------------------------------------------------------------ containers

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            try:
                import docker
            except ImportError:
                raise DockerFailure(
                    "sweworld: the docker executor needs the `docker` Python package, which "
                    f"is not installed; install it with `{INSTALL_HINT}`.\n"
                ) from None
            try:
                self._client = docker.from_env()
            except Exception as exc:
                raise DockerFailure(
                    "sweworld: cannot reach the Docker engine (is it running, and may this "
                    f"user use its socket? DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}"
                    f"): {exc}\n"
                ) from exc
            return self._client

    def _state(self, session_id: str) -> SessionState:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                state = self._sessions[session_id] = SessionState(session_id)
            return state

    def _ensure_container(self, client: Any, state: SessionState, request: ExecutionRequest):
        if state.container is not None:
            return state.container
        image = self._find_image(client, self._image_candidates(request.task))
        kwargs: dict[str, Any] = {
            "entrypoint": ["bash", "-c", KEEPALIVE_SCRIPT],
            "detach": True,
            "network_disabled": not self.network,
            "labels": {"sweworld.session": state.session_id, "sweworld.pid": str(os.getpid())},
            "working_dir": self.workdir,
        }
        if self.mem_limit:
            kwargs["mem_limit"] = self.mem_limit
        if self.pids_limit:
            kwargs["pids_limit"] = self.pids_limit
        try:
            container = client.containers.run(image, **kwargs)
        except Exception as exc:
            raise DockerFailure(
                f"sweworld: the container of image {image} failed to start: {exc}\n", image=image
            ) from exc
        state.container = container
        state.image = image
        state.synced.clear()
        return container

    def _drop_container(self, state: SessionState) -> None:
        remove_container(state.container)
        state.container = None
        state.synced.clear()

    # ------------------------------------------------------------------ paths

    def _container_path(self, path: str) -> str:
        """A sandbox path as the container sees it (``/testbed`` -> ``workdir``)."""
        if path == SANDBOX_ROOT or path.startswith(SANDBOX_ROOT + "/"):
            return self.workdir + path[len(SANDBOX_ROOT) :]
        return path

    def _container_arg(self, arg: str) -> str:
        return self._container_path(arg) if arg.startswith(SANDBOX_ROOT) else arg

    def _failed(self, message: str, status: str, started: float, **info: Any) -> ExecutionResult:
        log.warning("docker executor: %s: %s", status, message.strip().splitlines()[:1])
        return ExecutionResult(
            stderr=message,
            exit_code=1,
            info={
                "executor": self.name,
                "executed": False,
                "status": status,
                "reason": message.strip(),
                "latency_s": time.perf_counter() - started,
                **info,
            },
        )


# ---------------------------------------------------------------------- helpers


_LIVE: weakref.WeakSet[DockerExecutor] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    """Containers must not outlive the process: remove those of every live executor."""
    for executor in list(_LIVE):
        with contextlib.suppress(Exception):
            executor.close()


def _iter_stream(stream: Any) -> Iterator[tuple[bytes | None, bytes | None]]:
    for item in stream:
        if isinstance(item, tuple):
            yield item[0], item[1]
        else:  # a non-demultiplexed chunk counts as stdout
            yield item, None


def _command_argv(argv: Iterable[str]) -> list[str]:
    argv = list(argv)
    if argv and argv[0].startswith("/"):
        head, _, name = argv[0].rpartition("/")
        if head in _SYSTEM_BIN_DIRS and _INTERPRETER.match(name):
            argv[0] = name
    return argv


def _sandbox_path_entries() -> list[str]:
    try:
        from sweworld.sandbox.bwrap import SANDBOX_PATH as path
    except Exception:  # the sandbox module is optional here
        path = _DEFAULT_SANDBOX_PATH
    return path.split(":")


def _path_additions(agent_path: str | None) -> tuple[str, str]:
    """Entries the agent added to the sandbox's ``PATH``, before and after the default ones.

    The sandbox's own entries (its shims, the host's system directories) mean nothing in the
    container, whose ``PATH`` comes from its image and the activation.
    """
    if not agent_path:
        return "", ""
    default = set(_sandbox_path_entries())
    entries = agent_path.split(":")
    first = next((i for i, e in enumerate(entries) if e in default), len(entries))
    front = [e for e in entries[:first] if e and e not in default]
    back = [e for e in entries[first:] if e and e not in default]
    return ":".join(front), ":".join(back)
