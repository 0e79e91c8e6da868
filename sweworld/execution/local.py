"""LocalExecutor: execution commands run for real, in the session's workspace, in a sandbox.

Each session gets a second warm sandbox of its own for real execution: the same workspace
(``/testbed``) and private ``/tmp``, the repository's Python environment read-only at its own
path (see :mod:`sweworld.execution.envs`), no execution shims, no network, the same limits.
The command the agent ran is executed there with its arguments, working directory,
environment variables and stdin, and its real stdout, stderr and exit code go back to the
agent's shell.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from sweworld.dirs import control_dir
from sweworld.execution.envs import EnvBuilder, EnvRecipe, PythonEnv
from sweworld.sandbox.bwrap import SandboxLimits, SandboxRunner
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult


class LocalExecutor:
    """Real execution without Docker (bubblewrap + a cached per-repository venv).

    Args:
        builder: where and how environments are built (default: ``<cache>/envs``, the
            default recipe ``pip install pytest`` + ``pip install -e .``).
        recipes: a JSON file of per-repository recipes (see :mod:`sweworld.execution.envs`).
        timeout: wall-clock seconds per command.
        limits: CPU / memory / output limits (defaults of :class:`SandboxLimits`).
        max_warm: sandboxes kept warm at once (least recently used ones are stopped).
    """

    name = "local"

    def __init__(
        self,
        *,
        builder: EnvBuilder | None = None,
        recipes: str | Path | None = None,
        python: str | None = None,
        timeout: float = 900.0,
        limits: SandboxLimits | None = None,
        max_warm: int = 64,
    ):
        if builder is None:
            default = EnvRecipe(python=python) if python else None
            builder = (
                EnvBuilder.from_file(recipes, default=default)
                if recipes
                else EnvBuilder(default=default)
            )
        self.builder = builder
        self.timeout = timeout
        self.limits = limits or SandboxLimits(timeout=timeout)
        self.max_warm = max_warm
        self._runners: OrderedDict[tuple, SandboxRunner] = OrderedDict()
        self._lock = threading.Lock()
        self._session_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ environments

    def environment(self, task: Any, base: Path, *, rebuild: bool = False) -> PythonEnv:
        """Build (once) and return the environment of ``task``."""
        return self.builder.ensure(task, base, rebuild=rebuild)

    # ------------------------------------------------------------------ execution

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        started = time.perf_counter()
        if request.base is None or request.workspace_bind is None or request.tmp is None:
            return _failed(
                "sweworld: the local executor needs a session (workspace, base "
                "checkout and /tmp); this request has none\n",
                "error",
                started,
            )
        try:
            env = self.environment(request.task, request.base)
        except Exception as exc:  # a builder bug is reported, not raised into the session
            return _failed(
                f"sweworld: the environment could not be built: {exc}\n", "env_failed", started
            )
        if not env.ok:
            return _failed(
                f"sweworld: the Python environment for {getattr(request.task, 'repo', '?')} "
                f"could not be built, so `{request.command}` was not run. Build log "
                f"({env.root / 'build.log'}), last lines:\n{env.log_tail(1500)}\n",
                "env_failed",
                started,
                env=env.key,
            )
        session_lock = self._session_lock(request.session_id)
        with session_lock:
            runner = self._runner(request, env)
            script = self._script(request, runner)
            try:
                raw = runner.run(script, request.cwd, timeout=self.timeout)
            except Exception as exc:
                runner.stop()
                return _failed(
                    f"sweworld: the execution sandbox failed: {exc}\n",
                    "error",
                    started,
                    env=env.key,
                )
        stdout = raw.stdout.decode("utf-8", errors="replace")
        stderr = raw.stderr.decode("utf-8", errors="replace")
        status = "ok"
        exit_code = raw.exit_code
        if raw.timed_out:
            status, exit_code = "timeout", 124
            stderr += (
                f"\nsweworld: `{request.command}` did not finish within "
                f"{self.timeout:g} s and was stopped.\n"
            )
        elif raw.truncated:
            status, exit_code = "output_truncated", 1
            stderr += (
                f"\nsweworld: `{request.command}` printed more than "
                f"{self.limits.max_output_bytes} bytes; it was stopped.\n"
            )
        return ExecutionResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            info={
                "executor": self.name,
                "executed": True,
                "status": status,
                "env": env.key,
                "latency_s": time.perf_counter() - started,
                "sandbox_wall_s": raw.wall_s,
            },
        )

    def _script(self, request: ExecutionRequest, runner: SandboxRunner) -> str:
        lines = [
            f"export {k}={shlex.quote(v)}"
            for k, v in sorted(request.env.items())
            if k.isidentifier()
        ]
        command = shlex.join(request.argv)
        if request.stdin:
            stdin_file = runner.ctl_dir / "stdin"
            stdin_file.write_bytes(request.stdin)
            command += " < /.sweworld/ctl/stdin"
        lines.append(f"exec {command}")
        return "\n".join(lines)

    def _session_lock(self, session_id: str) -> threading.Lock:
        with self._lock:
            return self._session_locks.setdefault(session_id, threading.Lock())

    def _runner(self, request: ExecutionRequest, env: PythonEnv) -> SandboxRunner:
        key = (request.session_id, request.mount_ns_fd, request.workspace_bind, env.key)
        with self._lock:
            runner = self._runners.get(key)
            if runner is not None:
                self._runners.move_to_end(key)
                return runner
            stale = [k for k in self._runners if k[0] == request.session_id]
            for k in stale:  # the session was restored (new namespace) or changed env
                self._runners.pop(k).remove_files()
            while len(self._runners) >= self.max_warm:
                _, old = self._runners.popitem(last=False)
                old.stop()
            runner = SandboxRunner(
                mounts={"/testbed": request.workspace_bind, "/tmp": request.tmp},
                ctl_dir=control_dir() / f"{request.session_id}-local",
                limits=self.limits,
                mount_ns_fd=request.mount_ns_fd,
                read_only=env.read_only,
                env=env.run_env,
                intercept=False,
            )
            self._runners[key] = runner
            return runner

    # ------------------------------------------------------------------ cleanup

    def close_session(self, session_id: str) -> None:
        """Stop and delete the sandbox of a session that ended."""
        with self._lock:
            keys = [k for k in self._runners if k[0] == session_id]
            runners = [self._runners.pop(k) for k in keys]
            self._session_locks.pop(session_id, None)
        for runner in runners:
            with contextlib.suppress(Exception):
                runner.remove_files()

    def close(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
            self._runners.clear()
        for runner in runners:
            with contextlib.suppress(Exception):
                runner.remove_files()


def _failed(message: str, status: str, started: float, **info: Any) -> ExecutionResult:
    return ExecutionResult(
        stderr=message,
        exit_code=1,
        info={
            "executor": "local",
            "executed": False,
            "status": status,
            "latency_s": time.perf_counter() - started,
            **info,
        },
    )
