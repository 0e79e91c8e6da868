"""The ``Executor`` protocol: how a session hands an execution command to something that runs it.

A session runs file operations for real in its sandbox. Commands that need the project's
environment (``python``, ``pytest``, ``pip``, ...) are intercepted inside the sandbox and
passed, one call at a time, to an :class:`Executor`. Simulated (SWT), local (bubblewrap +
per-repository venv), docker and scripted executors all implement the same protocol, so the
rest of the package never knows which one answered.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ExecutionRequest:
    """One execution command, as the sandbox saw it when the agent ran it.

    Attributes:
        argv: the argument vector, ``argv[0]`` being the command name as invoked
            (``python``, ``pytest``, ...); shell expansion has already happened.
        cwd: working directory inside the sandbox (for example ``/testbed/src``).
        stdin: bytes fed to the command (a heredoc or a pipe), empty when none.
        env: environment variables the agent set that differ from the sandbox default.
        workspace: host path of the session's merged workspace (``/testbed`` inside).
        tmp: host path of the session's private ``/tmp``.
        task: the task row (a :class:`sweworld.tasks.Task`) when the session has one.
        session_id: id of the session that issued the command.
        base: host path of the session's read-only base checkout.
        base_commit: the commit ``base`` is at (what ``git diff`` compares against).
        changes: returns what differs from the base (``written`` / ``deleted`` paths,
            relative to the workspace), read from files without running anything; an
            executor that keeps its own copy of the repository (Docker) syncs with it.
        mount_ns_fd: the mount namespace in which ``workspace_bind`` is the workspace
            (None: this process's own); what a sandboxing executor starts its sandbox in.
        workspace_bind: path of the workspace inside ``mount_ns_fd``'s namespace.
        tmp_bind: path of the session's ``/tmp`` inside ``mount_ns_fd``'s namespace (None:
            ``tmp``); what a sandboxing executor binds as ``/tmp``.
        ctl_root: a folder of the session's, bounded in size, where a sandboxing executor
            puts its sandbox's control files (writable from inside); None: its own choice.
        ctl_bind: ``ctl_root`` as seen from ``mount_ns_fd``'s namespace.
        deadline: ``time.monotonic()`` value by which the answer is due: the end of the
            command's time limit (the step's ``timeout`` when the caller gave one). An
            executor stops its work there (a model call, a real run) and answers that the
            command timed out; None: only the executor's own limit applies.
    """

    argv: tuple[str, ...]
    cwd: str = "/testbed"
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    workspace: Path | None = None
    tmp: Path | None = None
    task: Any = None
    session_id: str = ""
    base: Path | None = None
    base_commit: str = ""
    changes: Callable[[], Any] | None = None
    mount_ns_fd: int | None = None
    workspace_bind: Path | None = None
    tmp_bind: Path | None = None
    ctl_root: Path | None = None
    ctl_bind: Path | None = None
    deadline: float | None = None

    @property
    def command(self) -> str:
        """The command as one shell-quoted string, e.g. ``python -m pytest tests -rA``."""
        return shlex.join(self.argv)

    def time_left(self, limit: float | None = None) -> float | None:
        """Seconds this request may still take: the smaller of ``limit`` (an executor's own
        limit, None for none) and what is left until ``deadline``; None when neither is set.
        Never negative."""
        if self.deadline is None:
            return limit
        import time

        left = max(self.deadline - time.monotonic(), 0.0)
        return left if limit is None else min(limit, left)


@dataclass
class ExecutionResult:
    """``{stdout, stderr, exit_code}`` (the SWT target) plus ``info`` about who produced it."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "info": dict(self.info),
        }


@runtime_checkable
class Executor(Protocol):
    """Runs (or predicts) one execution command. Must be safe to call from many threads.

    Optional hooks a session manager calls where an executor has them: ``prepare_base(task,
    base)`` (the base checkout a new session opens on, see :func:`session_base`),
    ``fork_session``, ``close_session`` and ``workspace_replaced``."""

    name: str

    def execute(self, request: ExecutionRequest) -> ExecutionResult: ...


def session_base(executor: Any, task: Any, base: Any) -> Any:
    """The base checkout a session of ``executor`` opens on: what its ``prepare_base`` hook
    returns (the local executor lays in the files its environment build made in
    ``/testbed``), else ``base``. Executors that wrap a real one pass the call on to it."""
    hook = getattr(executor, "prepare_base", None)
    return hook(task, base) if hook is not None else base


NO_EXECUTOR_EXIT_CODE = 126


class NoExecutor:
    """The executor of a session opened without one: every execution command is declined."""

    name = "none"

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(
            stdout="",
            stderr=(
                f"sweworld: no executor: `{request.command}` needs execution, and this session "
                "was opened without an executor, so it was not run. File operations still run "
                "for real. Open the session with an executor (for example "
                "executor=sweworld.world.executor_from_spec('local'), or 'outcome' or "
                "'simulated') to run or predict it.\n"
            ),
            exit_code=NO_EXECUTOR_EXIT_CODE,
            info={"executor": self.name, "executed": False},
        )
