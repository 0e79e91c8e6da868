"""A session: one agent's private, copy-on-write view of a task's repository.

``step(action)`` takes what an agent sends (an R2E-Gym ``<function=...>`` call, a
mini-swe-agent response with one bash block, a raw bash command, or a tool-call mapping) and
returns the observation in the agent's own format. File operations run for real in the
session's sandbox; execution commands go to the session's executor; refused commands are
answered without running anything. ``snapshot``/``restore``/``fork`` branch the state for
best-of-N and tree search; ``destroy`` removes every trace.

Sessions are created by :class:`sweworld.sandbox.manager.SessionManager`. Each session
serialises its own steps with a lock; different sessions share nothing mutable, so many
sessions can be stepped from many threads at once.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sweworld.sandbox.actions import ActionParseError, parse_action
from sweworld.sandbox.bwrap import SandboxRunner
from sweworld.sandbox.executor import Executor
from sweworld.sandbox.launch import SandboxUnavailable
from sweworld.sandbox.limits import PidsCgroup, SandboxLimits
from sweworld.sandbox.paths import SandboxPaths
from sweworld.sandbox.quota import (
    PatchTooLarge,
    SnapshotLimitReached,
    control_full,
    refused_edit,
)
from sweworld.sandbox.render import (
    check_submission,
    render_mini_swe_agent,
    render_mini_swe_agent_timeout,
    render_r2egym,
)
from sweworld.sandbox.repos import BaseCheckout
from sweworld.sandbox.router import REFUSED_EXIT_CODE, find_refusal
from sweworld.sandbox.session_calls import ExecutionCalls
from sweworld.sandbox.tools import TOOL_ALIASES, ToolConfig, ToolContext, run_tool
from sweworld.sandbox.types import BashOutcome, StepResult, clean_text, clean_value
from sweworld.sandbox.workspace import Workspace, WorkspaceError, remove_tree

WORKDIR = "/testbed"
BASE_GIT = "/.sweworld/base-git"  # the base checkout's own .git, read-only (for get_patch)
SANDBOX_ERROR_EXIT_CODE = 126
log = logging.getLogger(__name__)


class SessionClosed(RuntimeError):
    """The session was destroyed; open a new one."""


@dataclass
class SessionConfig:
    """How a session behaves.

    Attributes:
        limits: resource limits for every command.
        tools: R2E-Gym tool settings (``python_only``, truncation, timeouts).
        observation_format: ``auto`` renders function calls the R2E-Gym way and bash actions
            the mini-swe-agent way; ``r2egym`` or ``mini`` force one; ``raw`` returns the
            output unrendered (stdout and stderr merged), for agents whose own templates
            render it (mini-swe-agent's environment protocol).
    """

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    tools: ToolConfig = field(default_factory=ToolConfig)
    observation_format: str = "auto"


@dataclass(frozen=True)
class Snapshot:
    """A saved state of a session (files, private /tmp, cwd, editor history)."""

    id: str
    session_id: str
    base: Path
    state: Any  # the workspace's token (overlay: a stack of frozen layers; copy: a folder)
    cwd: str
    history: dict[str, list[str]]
    created: float
    executor_state: Any = None  # what the executor remembers (SWT's ledger and history)


_snapshot_ids = itertools.count(1)


class Session(ExecutionCalls):
    """One agent's sandboxed workspace. Create with ``SessionManager.open``."""

    def __init__(
        self,
        *,
        session_id: str,
        base: BaseCheckout,
        workspace: Workspace,
        state_dir: Path,
        executor: Executor,
        config: SessionConfig,
        task: Any = None,
        on_destroy: Callable[[Session], None] | None = None,
        cwd: str = WORKDIR,
        history: dict[str, list[str]] | None = None,
        ctl_dir: Path | None = None,
    ):
        self.id = session_id
        self.base = base
        self.workspace = workspace
        self.state_dir = state_dir
        self.executor = executor
        self.config = config
        self.task = task
        # the control folder: on the workspace's own bounded tmpfs where it has one
        # (writable from inside the sandbox), else the manager's control folder
        ctl_fs = getattr(workspace, "ctl_root", None)
        self.ctl_dir = ctl_fs / "ctl" if ctl_fs else ctl_dir or state_dir / "ctl"
        self.ctl_bind = workspace.ctl_bind / "ctl" if ctl_fs else self.ctl_dir
        self.cwd = cwd
        self.history: dict[str, list[str]] = history or {}
        self.steps = 0
        self.done = False
        self._lock = threading.RLock()
        self._call_deadline: float | None = None  # the running command's (monotonic)
        self._closed = False
        self._scripts: frozenset[str] | None = None
        self._on_destroy = on_destroy
        self._snapshots: dict[str, Snapshot] = {}
        self.snapshots_taken = 0  # against limits.max_snapshots
        self._cgroup = PidsCgroup.create(f"{state_dir.name}", config.limits.max_processes)
        self.paths = SandboxPaths({WORKDIR: workspace.root, "/tmp": self.tmp_dir}, WORKDIR)
        self._runner = self._make_runner()

    @property
    def tmp_dir(self) -> Path:
        """Host path of the session's private ``/tmp`` (it lives in the workspace)."""
        return self.workspace.tmp_root

    def _make_runner(self) -> SandboxRunner:
        return SandboxRunner(
            mounts={WORKDIR: self.workspace.bind_source, "/tmp": self.workspace.tmp_bind},
            ctl_dir=self.ctl_dir,
            ctl_bind=self.ctl_bind,
            limits=self.config.limits,
            cgroup=self._cgroup,
            mount_ns_fd=self.workspace.mount_ns_fd,
            read_only=[(self.base.path / ".git", BASE_GIT)],
        )

    # ------------------------------------------------------------------ properties

    @property
    def root(self) -> Path:
        """Host path of the workspace (``/testbed`` inside the sandbox)."""
        return self.workspace.root

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed(f"session {self.id} was destroyed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"cwd={self.cwd!r} steps={self.steps}"
        return f"<Session {self.id} {self.workspace.backend} {state}>"

    # ------------------------------------------------------------------ stepping

    def step(self, action: str | Mapping[str, Any], *, timeout: float | None = None) -> StepResult:
        """Run one agent action and return its observation (never raises on bad input).

        ``timeout`` bounds a bash action's command (the session's limit otherwise).

        Text is valid Unicode on both sides: a lone surrogate in the action (not encodable
        as UTF-8) is replaced by U+FFFD before anything runs (``info["action_cleaned"]``),
        and the observation is cleaned the same way.
        """
        with self._lock:
            self._check_open()
            self.steps += 1
            started = time.perf_counter()
            cleaned = clean_value(action)
            result = self._step(cleaned, timeout)
            if cleaned != action:
                result.info["action_cleaned"] = True
            result.observation = clean_text(result.observation)
            result.info["latency_s"] = time.perf_counter() - started
            if result.done:
                self.done = True
            return result

    def _step(self, action: str | Mapping[str, Any], timeout: float | None = None) -> StepResult:
        try:
            parsed = parse_action(action)
        except ActionParseError as exc:
            return StepResult(
                observation=exc.message,
                exit_code=-1,
                done=False,
                info={"error": "parse", "n_actions": exc.n_actions},
            )
        fmt = self.config.observation_format
        if parsed.kind == "bash" and fmt != "r2egym":
            result = self._step_bash(parsed.command, timeout)
        elif parsed.kind == "bash":
            result = self._step_tool("execute_bash", {"cmd": parsed.command}, timeout)
        else:
            result = self._step_tool(parsed.function, parsed.parameters, timeout)
        return result

    def _step_tool(
        self, function: str, params: Mapping[str, str], timeout: float | None = None
    ) -> StepResult:
        message = refused_edit(self.workspace, TOOL_ALIASES.get(function, function), params)
        if message is not None:  # the copy backend has no kernel quota: edits wait
            raw_format = self.config.observation_format == "raw"
            return StepResult(
                observation=message if raw_format else render_r2egym(function, message, 1),
                exit_code=1,
                info={"tool": function, "disk_quota_exceeded": True},
            )
        ctx = ToolContext(
            paths=self.paths,
            cwd=self.cwd,
            history=self.history,
            run_bash=self.run if timeout is None else partial(self.run, timeout=timeout),
            config=self.config.tools,
        )
        out = run_tool(function, ctx, params)
        info = dict(out.info)
        info["tool"] = function
        if self.config.observation_format == "raw":
            obs = out.output
        elif self.config.observation_format == "mini":
            obs = render_mini_swe_agent(out.output, out.exit_code)
        else:
            obs = render_r2egym(function, out.output, out.exit_code)
        if out.done:
            info["patch"] = self.get_patch()
        return StepResult(observation=obs, exit_code=out.exit_code, done=out.done, info=info)

    def _step_bash(self, command: str, timeout: float | None = None) -> StepResult:
        outcome = self.run(command, merge_stderr=True, timeout=timeout)
        info = dict(outcome.info)
        raw = self.config.observation_format == "raw"
        if outcome.timed_out:
            info["timed_out"] = True
            obs = outcome.output if raw else render_mini_swe_agent_timeout(command, outcome.output)
            return StepResult(observation=obs, exit_code=-1, info=info)
        # only what really ran submits; the patch is the workspace's diff, never printed text
        # (raw: mini-swe-agent 2.x's rule, which also wants exit code 0)
        returncode = outcome.exit_code if raw else None
        submission = check_submission(outcome.output, returncode, info.get("execution_calls"))
        if submission.accepted:
            info["patch"] = self.get_patch()
            obs = outcome.output if raw else submission.text
            return StepResult(observation=obs, exit_code=outcome.exit_code, done=True, info=info)
        if submission.refused:
            info["submission_refused"] = submission.refused
        return StepResult(
            observation=submission.output
            if raw
            else render_mini_swe_agent(submission.output, outcome.exit_code),
            exit_code=outcome.exit_code,
            info=info,
        )

    def run(
        self, command: str, *, timeout: float | None = None, merge_stderr: bool = False
    ) -> BashOutcome:
        """Run one shell command through the router (real / executor / refused).

        A sandbox that cannot run (out of file descriptors or processes, bubblewrap failing)
        is an outcome with exit code 126, the reason in ``stderr`` and ``info["error"]``;
        the session stays usable and the next command tries again.
        """
        with self._lock:
            self._check_open()
            command = clean_text(command)
            size = len(command.encode("utf-8", errors="replace"))
            if size > self.config.limits.max_command_bytes:
                return BashOutcome(
                    stderr=(
                        f"sweworld: the command is {size} bytes long; commands may be at most "
                        f"{self.config.limits.max_command_bytes} bytes. Nothing was run. Write "
                        "long content with file_editor create, or in several smaller steps.\n"
                    ),
                    exit_code=REFUSED_EXIT_CODE,
                    info={"refused": "command_too_long", "command_bytes": size},
                )
            refusal = find_refusal(command, self.cwd)
            if refusal is not None:
                return BashOutcome(
                    stderr=refusal.message,
                    exit_code=REFUSED_EXIT_CODE,
                    info={"refused": refusal.reason},
                )
            limit = self.config.limits.timeout if timeout is None else timeout
            # the executor's answers are due by the command's deadline (ExecutionRequest)
            self._call_deadline = time.monotonic() + limit
            self._reclaim_control()
            try:
                raw = self._runner.run(
                    command,
                    self.cwd,
                    on_call=self._serve_call,
                    timeout=timeout,
                    merge_stderr=merge_stderr,
                )
            except SandboxUnavailable as exc:
                log.warning("session %s: %s", self.id, exc)
                return BashOutcome(
                    stderr=f"sweworld: {exc}\n",
                    exit_code=SANDBOX_ERROR_EXIT_CODE,
                    info={"error": "sandbox", "message": str(exc), "routes": self._routes(command)},
                )
            finally:
                self._call_deadline = None
            if raw.cwd:
                self.cwd = raw.cwd
            return self._outcome(raw, command, limit)

    # ------------------------------------------------------------------ files and patch

    def read_file(self, path: str) -> str:
        """Read a file as the agent would see it (``/testbed/...``, ``/tmp/...`` or relative).

        Only a regular file is read: a FIFO the agent made there raises ``OSError`` rather
        than block the caller (and the session's lock) forever.
        """
        with self._lock:
            self._check_open()
            host = self.paths.to_host(path, self.cwd)
            fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            with open(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", path)
                return handle.read().decode()

    def write_file(self, path: str, text: str) -> None:
        """Write a file in the workspace (parents created), as an agent's edit would."""
        from sweworld.sandbox.tools.base import atomic_write_text

        with self._lock:
            self._check_open()
            host = self.paths.to_host(clean_text(path), self.cwd)
            host.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(host, clean_text(text))

    def get_patch(self) -> str:
        """The session's changes against the base commit, as ``git diff`` prints them.

        New files are included (``git add -A`` on a private copy of the index, so the agent's
        own index is untouched); files ignored by ``.gitignore`` are not. Nothing the agent
        set up in the workspace's ``.git`` or in git's global configuration shapes the
        patch: it is computed with a private git folder holding the base checkout's pristine
        configuration and index (no colour, prefixes, external diff, textconv or clean
        filter, assume-unchanged bit or ``-diff`` attribute of the agent's).
        """
        with self._lock:
            self._check_open()
            script = (
                "cd /testbed || exit 3\n"
                f"b={BASE_GIT} g=/.sweworld/ctl/patch-git\n"
                'rm -rf "$g" && mkdir -p "$g/objects/info" "$g/refs" "$g/info" || exit 4\n'
                'echo "$b/objects" > "$g/objects/info/alternates"\n'
                f'echo {self.base.head} > "$g/HEAD"\n'
                'cp "$b/config" "$g/config" || exit 4\n'
                'if [ -f "$b/shallow" ]; then cp "$b/shallow" "$g/shallow"; fi\n'
                'if [ -f "$b/index" ]; then cp "$b/index" "$g/index"; fi\n'
                "echo '* !diff !filter !text !eol !crlf !ident !working-tree-encoding' "
                '> "$g/info/attributes"\n'
                'export GIT_DIR="$g" GIT_WORK_TREE=/testbed GIT_INDEX_FILE="$g/index" '
                "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 HOME=/nonexistent\n"
                "git add -A >/dev/null 2>&1 || exit 4\n"
                "git -c core.quotePath=false diff --cached --no-ext-diff --no-textconv "
                f"--no-color {self.base.head}\n"
            )
            self._reclaim_control()
            try:
                raw = self._runner.run(script, WORKDIR, on_call=None, timeout=600)
            except SandboxUnavailable as exc:
                raise RuntimeError(
                    f"could not compute the patch of session {self.id}: {exc}"
                ) from exc
            if raw.truncated:
                raise PatchTooLarge(
                    f"the patch is over {len(raw.stdout)} bytes, the "
                    "output limit (limits.max_output_bytes): remove or shrink changed files"
                )
            if raw.exit_code != 0 or raw.timed_out:
                err = raw.stderr.decode(errors="replace").strip()
                raise RuntimeError(
                    f"could not compute the patch of session {self.id} "
                    f"(exit {raw.exit_code}): {err}"
                )
            return raw.stdout.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ branching

    def _reclaim_control(self) -> None:
        """The control folder is writable from inside the sandbox, on a bounded tmpfs: when
        a command filled it, stop the sandboxes (a sandbox's start empties its control
        folder), so that the next command and ``get_patch`` still run."""
        if control_full(self.workspace):
            log.info("session %s: its control folder was filled; restarting its sandbox", self.id)
            self._release_workspace()

    def _release_workspace(self) -> None:
        """Stop every sandbox that has the workspace mounted (this session's, and a real
        executor's): a snapshot freezes the upper layer, and a sandbox started before it
        would keep writing into a saved state."""
        self._runner.stop()
        reset = getattr(self.executor, "workspace_replaced", None)
        if reset is not None:
            reset(self.id)

    def snapshot(self) -> Snapshot:
        """Save the current state; :meth:`restore` returns to it (also in a fork).

        On the overlay backend it copies nothing (the changes since the last snapshot become
        a frozen layer). Raises :class:`SnapshotLimitReached` past ``limits.max_snapshots``.
        """
        with self._lock:
            self._check_open()
            limit = self.config.limits.max_snapshots
            if self.snapshots_taken >= limit:
                raise SnapshotLimitReached(
                    f"session {self.id} has taken {self.snapshots_taken} snapshots, the most "
                    f"it may take (limits.max_snapshots={limit}); restore or fork instead"
                )
            snap_id = f"snap-{next(_snapshot_ids)}"
            self._release_workspace()
            state = self.workspace.snapshot()
            self._remounted()
            self.snapshots_taken += 1
            save = getattr(self.executor, "snapshot_session", None)
            snap = Snapshot(
                executor_state=save(self.id) if save is not None else None,
                id=snap_id,
                session_id=self.id,
                base=self.base.path,
                state=state,
                cwd=self.cwd,
                history=copy.deepcopy(self.history),
                created=time.time(),
            )
            self._snapshots[snap_id] = snap
            return snap

    def restore(self, snapshot: Snapshot) -> None:
        """Return to a snapshot of this session or of a session it was forked from."""
        with self._lock:
            self._check_open()
            if snapshot.base != self.base.path:
                raise ValueError(f"snapshot {snapshot.id} is of another repository state")
            self._release_workspace()
            try:
                self.workspace.restore(snapshot.state)
            except WorkspaceError as exc:
                raise ValueError(f"snapshot {snapshot.id} cannot be restored: {exc}") from exc
            self.cwd = snapshot.cwd
            self.history = copy.deepcopy(snapshot.history)
            load = getattr(self.executor, "restore_session", None)
            if load is not None and snapshot.executor_state is not None:
                load(self.id, snapshot.executor_state)
            self.done = False
            self._remounted()

    def _remounted(self) -> None:
        """The workspace was mounted anew (snapshot, restore, fork): new paths to it."""
        self.paths = SandboxPaths({WORKDIR: self.workspace.root, "/tmp": self.tmp_dir}, WORKDIR)
        self._runner = self._make_runner()

    def fork(self) -> Session:
        """An independent copy of this session in its current state (same executor).

        On the overlay backend the current changes become a frozen layer both share, so the
        sandboxes using this session's workspace are stopped first, as for a snapshot."""
        with self._lock:
            self._check_open()
            if self._on_fork is None:
                raise RuntimeError("this session was not created by a SessionManager")
            self._release_workspace()
            try:
                return self._on_fork(self)
            finally:
                self._remounted()

    _on_fork: Callable[[Session], Session] | None = None

    # ------------------------------------------------------------------ teardown

    def destroy(self) -> None:
        """Unmount and delete everything the session owns. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                close = getattr(self.executor, "close_session", None)
                if close is not None:
                    with contextlib.suppress(Exception):
                        close(self.id)
                self._runner.remove_files()
                self.workspace.destroy()
            finally:
                remove_tree(self.state_dir)
                if self._cgroup is not None:
                    self._cgroup.remove()
                if self._on_destroy is not None:
                    self._on_destroy(self)

    close = destroy
