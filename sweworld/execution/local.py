"""LocalExecutor: execution commands run for real, in the session's workspace, in a sandbox.

Each session gets a second warm sandbox of its own for real execution: the same workspace
(``/testbed``) and private ``/tmp``, the repository's Python environment read-only at fixed
paths (see :mod:`sweworld.execution.envs`), no execution shims, no network, the same limits
(a pids cgroup of its own where the host offers one). The command the agent ran is executed
there with its arguments, working directory, environment variables and stdin, and its real
stdout, stderr and exit code go back to the agent's shell.

A command that could not be run at all is never passed off as the command's own result:
an environment that could not be built (``env_failed``), an interpreter that does not start
in the sandbox, or a program the sandbox cannot find or execute (``exec_failed``) come back
with ``info["executed"] = False``, the status and a reason, and are logged (logger
``sweworld.execution.local``, quiet unless the application configures logging).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shlex
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from sweworld.dirs import control_dir
from sweworld.execution.envs import EnvBuilder, EnvRecipe, PythonEnv
from sweworld.execution.prepared import prepared_base
from sweworld.sandbox.bwrap import SandboxRunner
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.sandbox.launch import SandboxUnavailable
from sweworld.sandbox.limits import PidsCgroup, SandboxLimits
from sweworld.sandbox.repos import BaseCheckout

log = logging.getLogger(__name__)
_runner_ids = itertools.count(1)

# What bash prints when the `exec` of the wrapper script cannot start the program.
_EXEC_FAILED_RE = re.compile(
    r"^bash: line \d+: (?:exec: )?[^\n]*: (?:not found|No such file or directory|"
    r"cannot execute[^\n]*|Permission denied|bad interpreter[^\n]*)\n?\Z"
)
_PROBE = 'exec "$VIRTUAL_ENV/bin/python" -c ""'


class LocalExecutor:
    """Real execution without Docker (bubblewrap + a cached per-repository venv).

    Args:
        builder: where and how environments are built (default: ``<cache>/envs``, the
            task environment's recipe, else ``pip install pytest`` + ``pip install -e .``).
        recipes: a JSON file of per-repository recipes (see :mod:`sweworld.execution.envs`).
        python: interpreter for every environment (default: chosen per task, see
            :meth:`EnvBuilder.plan`).
        timeout: wall-clock seconds per command.
        limits: CPU / memory / output limits (defaults of :class:`SandboxLimits`).
        max_warm: sandboxes kept warm at once (least recently used idle ones are stopped;
            sandboxes running a command are never stopped, so more may be live for a while).
        rebuild_env: rebuild each environment once, even if a build (ok or failed) is cached.
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
        rebuild_env: bool = False,
    ):
        if builder is None:
            default = EnvRecipe(python=python) if python else None
            builder = (
                EnvBuilder.from_file(recipes, default=default, rebuild=rebuild_env)
                if recipes
                else EnvBuilder(default=default, rebuild=rebuild_env)
            )
        elif rebuild_env:
            builder.rebuild = True
        self.builder = builder
        self.timeout = timeout
        self.limits = limits or SandboxLimits(timeout=timeout)
        self.max_warm = max_warm
        self._runners: OrderedDict[tuple, _Runner] = OrderedDict()
        self._lock = threading.Lock()
        self._session_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ environments

    def environment(self, task: Any, base: Path, *, rebuild: bool = False) -> PythonEnv:
        """Build (once) and return the environment of ``task``."""
        return self.builder.ensure(task, base, rebuild=rebuild)

    def prepare_base(self, task: Any, base: BaseCheckout) -> BaseCheckout:
        """The base checkout a session of ``task`` opens on: ``base`` with the files the
        environment's build made in ``/testbed`` laid in (:mod:`sweworld.execution.
        prepared`), as the task's image holds them. Builds the environment now (once).
        ``base`` itself where the build failed (the session's first command says why) or
        its products cannot be laid in (logged)."""
        try:
            return prepared_base(base, self.environment(task, base.path))
        except Exception:  # the session still opens; a command reports a failed build
            log.exception("could not lay the build's files under %s", base.path)
            return base

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
            log.exception("the environment of %s could not be built", request.session_id)
            return _failed(
                f"sweworld: the environment could not be built: {exc}\n", "env_failed", started
            )
        if not env.ok:
            return _failed(
                f"sweworld: the Python environment for {getattr(request.task, 'repo', '?')} "
                f"could not be built, so `{request.command}` was not run. Build log "
                f"({env.root / 'build.log'}), last lines:\n{env.log_tail(1500)}\n"
                "Rebuild it with `--rebuild-env` (LocalExecutor(rebuild_env=True)).\n",
                "env_failed",
                started,
                env=env.key,
                **env.python_info,
            )
        if not env.python_exact and env.python_requested:
            log.info(
                "%s: Python %s requested, %s used",
                env.key,
                env.python_requested,
                env.python_info["python_used"],
            )
        with self._session_lock(request.session_id):
            try:
                runner = self._runner(request, env)
                problem = runner.check()
                if problem is not None:
                    return _failed(problem, "exec_failed", started, env=env.key, **env.python_info)
                script = self._script(request, runner.sandbox)
                # the step's own deadline, when the caller gave a shorter one than ours
                left = request.time_left(self.timeout)
                limit = max(self.timeout if left is None else left, 0.01)
                raw = runner.sandbox.run(script, request.cwd, timeout=limit)
            except (SandboxUnavailable, OSError) as exc:
                self._drop(request.session_id)
                return _failed(
                    f"sweworld: the execution sandbox failed: {exc}\n",
                    "exec_failed",
                    started,
                    env=env.key,
                    **env.python_info,
                )
        stdout = raw.stdout.decode("utf-8", errors="replace")
        stderr = raw.stderr.decode("utf-8", errors="replace")
        status = "ok"
        exit_code = raw.exit_code
        executed = True
        if raw.timed_out:
            status, exit_code = "timeout", 124
            stderr += (
                f"\nsweworld: `{request.command}` did not finish within "
                f"{limit:g} s and was stopped.\n"
            )
        elif raw.truncated:
            status, exit_code = "output_truncated", 1
            stderr += (
                f"\nsweworld: `{request.command}` printed more than "
                f"{self.limits.max_output_bytes} bytes; it was stopped.\n"
            )
        elif exit_code in (126, 127) and not stdout and _EXEC_FAILED_RE.match(stderr):
            # the wrapper's `exec` could not start the program: nothing of it ran
            status, executed = "exec_failed", False
            log.warning("%s: `%s` could not be started: %s", env.key, request.command, stderr)
        return ExecutionResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            info={
                "executor": self.name,
                "executed": executed,
                "status": status,
                "env": env.key,
                **env.python_info,
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
            # The program run here can write in its control folder: a `stdin` it left there
            # may be a symlink to a host file, which a plain write would follow.
            stdin_file = runner.ctl_dir / "stdin"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stdin_file)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            with open(os.open(stdin_file, flags, 0o644), "wb") as handle:
                handle.write(request.stdin)
            command += " < /.sweworld/ctl/stdin"
        lines.append(f"exec {command}")
        return "\n".join(lines)

    def _session_lock(self, session_id: str) -> threading.Lock:
        with self._lock:
            return self._session_locks.setdefault(session_id, threading.Lock())

    def _runner(self, request: ExecutionRequest, env: PythonEnv) -> _Runner:
        key = (request.session_id, request.mount_ns_fd, request.workspace_bind, env.key)
        with self._lock:
            runner = self._runners.get(key)
            if runner is not None:
                self._runners.move_to_end(key)
                return runner
            stale = [k for k in self._runners if k[0] == request.session_id]
            for k in stale:  # the session was restored (new namespace) or changed env
                self._runners.pop(k).remove()
            evicted = []
            for old_key in list(self._runners):  # least recently used first
                if len(self._runners) < self.max_warm:
                    break
                # never one whose session is running a command: stopping it under that
                # command left the command's reader waiting for the full timeout
                busy = self._session_locks.get(old_key[0])
                if busy is not None and busy.locked():
                    continue
                evicted.append(self._runners.pop(old_key))
        for old in evicted:  # least recently used: its control folder and cgroup go too
            old.remove()
        # A name of its own per runner: an evicted runner's cgroup and control folder are
        # removed outside the lock, and the same session's next runner under the same name
        # lost its cgroup to that removal ("cgroup.procs: Directory nonexistent").
        name = f"{request.session_id}-local{next(_runner_ids)}"
        cgroup = PidsCgroup.create(name, self.limits.max_processes)
        sandbox = SandboxRunner(
            mounts={"/testbed": request.workspace_bind, "/tmp": request.tmp_bind or request.tmp},
            # on the session's bounded control tmpfs where it has one: the real run can
            # write in its control folder
            ctl_dir=request.ctl_root / name if request.ctl_root else control_dir() / name,
            ctl_bind=request.ctl_bind / name if request.ctl_bind else None,
            limits=self.limits,
            cgroup=cgroup,
            mount_ns_fd=request.mount_ns_fd,
            read_only=env.read_only,
            env=env.run_env,
            intercept=False,
        )
        runner = _Runner(sandbox, cgroup, env)
        with self._lock:
            self._runners[key] = runner
        return runner

    def _drop(self, session_id: str) -> None:
        with self._lock:
            keys = [k for k in self._runners if k[0] == session_id]
            runners = [self._runners.pop(k) for k in keys]
        for runner in runners:
            with contextlib.suppress(Exception):
                runner.remove()

    # ------------------------------------------------------------------ cleanup

    def workspace_replaced(self, session_id: str) -> None:
        """The session is about to snapshot or restore its workspace: stop its sandbox (one
        started before would keep the old mounts, and write into a saved state)."""
        self._drop(session_id)

    def close_session(self, session_id: str) -> None:
        """Stop and delete the sandbox of a session that ended."""
        self._drop(session_id)
        with self._lock:
            self._session_locks.pop(session_id, None)

    def close(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
            self._runners.clear()
        for runner in runners:
            with contextlib.suppress(Exception):
                runner.remove()


class _Runner:
    """One session's execution sandbox, its cgroup, and whether its interpreter starts."""

    def __init__(self, sandbox: SandboxRunner, cgroup: PidsCgroup | None, env: PythonEnv):
        self.sandbox = sandbox
        self.cgroup = cgroup
        self.env = env
        self.checked = False
        self.problem: str | None = None

    def check(self) -> str | None:
        """None when the environment's interpreter starts in the sandbox, else what to fix.

        Run once per sandbox: a layout the sandbox cannot show (an interpreter hidden by a
        mount) must fail here with a message, not as every command's exit 127."""
        if self.checked:
            return self.problem
        raw = self.sandbox.run(_PROBE, "/", timeout=60)
        self.checked = True
        if raw.exit_code != 0:
            python = self.env.python
            where = f"{python.path} (prefix {python.prefix})" if python else "none"
            err = raw.stderr.decode(errors="replace").strip()
            self.problem = (
                f"sweworld: the Python environment {self.env.key} does not start in the "
                f"execution sandbox (exit {raw.exit_code}: {err or 'no output'}). Interpreter: "
                f"{where}; environment: {self.env.venv}. Nothing was run. Rebuild it "
                "(`--rebuild-env`), or choose an interpreter the sandbox can show "
                "(LocalExecutor(python=...)).\n"
            )
            log.error("%s", self.problem.strip())
        return self.problem

    def remove(self) -> None:
        self.sandbox.remove_files()
        if self.cgroup is not None:
            self.cgroup.remove()


def _failed(message: str, status: str, started: float, **info: Any) -> ExecutionResult:
    log.warning("local executor: %s: %s", status, message.strip().splitlines()[0])
    return ExecutionResult(
        stderr=message,
        exit_code=1,
        info={
            "executor": "local",
            "executed": False,
            "status": status,
            "reason": message.strip(),
            "latency_s": time.perf_counter() - started,
            **info,
        },
    )
