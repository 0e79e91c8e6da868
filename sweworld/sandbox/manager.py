"""Opening sessions: base checkouts, workspaces, executors, cleanup.

>>> from sweworld import SessionManager, load_tasks
>>> task = load_tasks("data/toy/tasks.jsonl")[0]
>>> with SessionManager() as manager:
...     session = manager.open(task)
...     print(session.step("ls").observation)
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import secrets
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sweworld.dirs import control_dir, runtime_dir
from sweworld.sandbox.backends import make_workspace, resolve_backend
from sweworld.sandbox.executor import Executor, NoExecutor, session_base
from sweworld.sandbox.launch import SandboxUnavailable, bwrap_path
from sweworld.sandbox.limits import (
    PidsCgroup,
    SandboxLimits,
    descriptor_message,
    out_of_descriptors,
)
from sweworld.sandbox.repos import BaseCheckout, find_repo_source, materialize
from sweworld.sandbox.session import Session, SessionConfig
from sweworld.sandbox.tools import ToolConfig
from sweworld.sandbox.workspace import remove_tree

_counter = itertools.count(1)


class DiskBudgetExceeded(SandboxUnavailable):
    """A new session's disk would not fit in the manager's ``disk_budget_bytes``."""


_live_managers: weakref.WeakSet[SessionManager] = weakref.WeakSet()


class SessionManager:
    """Creates and tracks sessions; shares base checkouts between them. Thread-safe.

    Args:
        backend: ``auto`` (overlay where this process may mount, else copy), ``overlay`` or
            ``copy``; see :mod:`sweworld.sandbox.workspace`.
        executor: default executor object for new sessions (an
            :class:`~sweworld.sandbox.executor.Executor`; None: the no-op executor, which
            answers every execution command with "not available"). A spec string
            (``local``, ``outcome``, ...) is refused with ``TypeError``: build it with
            ``sweworld.world.executor_from_spec(spec)``, or give the spec to
            :class:`~sweworld.env.Episode` / ``EpisodeConfig``, which build it through the
            world.
        limits: default resource limits for commands, the disk quota of each session
            (``disk_mb``, default 1 GiB or ``$SWEWORLD_DISK_MB``) and its snapshot limit
            (``max_snapshots``) included.
        tools: default R2E-Gym tool settings.
        runtime_root: where live session state goes (default ``$SWEWORLD_RUNTIME_DIR`` or
            ``<tmp>/sweworld-<uid>``).
        checkout_root: where base checkouts are cached (default ``<cache>/checkouts``).
        disk_budget_bytes: the most all live sessions' disks may hold together (None: no
            bound). An overlay session's disk is a tmpfs (RAM), so ``sessions x quota`` is
            what the host must be able to hold; a session (or fork) whose disk would not
            fit is refused with :class:`DiskBudgetExceeded` before anything is mounted.
            Counted per disk: each session's quota plus its 64 MiB control tmpfs and its
            sandbox's two ``scratch_mb`` tmpfs mounts, and the disk of a destroyed session
            as long as a fork of it keeps its layers alive.
    """

    def __init__(
        self,
        *,
        backend: str = "auto",
        executor: Any = None,
        limits: SandboxLimits | None = None,
        tools: ToolConfig | None = None,
        observation_format: str = "auto",
        runtime_root: Path | None = None,
        checkout_root: Path | None = None,
        disk_budget_bytes: int | None = None,
    ):
        bwrap_path()  # fail early, with the install hint, when bubblewrap is missing
        _raise_fd_limit()
        self.runtime_root = Path(runtime_root) if runtime_root else runtime_dir()
        self.sessions_dir = self.runtime_root / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        self.control_root = control_dir()
        self.backend = resolve_backend(backend, self.sessions_dir)
        self.default_executor = _executor_object(executor)
        self.default_config = SessionConfig(
            limits=limits or SandboxLimits(),
            tools=tools or ToolConfig(),
            observation_format=observation_format,
        )
        self.checkout_root = checkout_root
        self.disk_budget_bytes = disk_budget_bytes
        self._pending_bytes = 0  # disks of sessions being opened (counted at once)
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._checkouts: dict[tuple, BaseCheckout] = {}
        # Descriptors held in reserve: released to clean up after running out of them.
        self._reserve = _Reserve()
        self._leftovers: list[str] = []  # state folders that could not be removed yet
        gc_stale_sessions(self.sessions_dir, self.control_root)
        _live_managers.add(self)

    # ------------------------------------------------------------------ opening

    def checkout(
        self,
        task: Any = None,
        *,
        repo: str | None = None,
        base_commit: str | None = None,
        repo_path: str | Path | None = None,
        setup_patch: str = "",
        history: str = "full",
    ) -> BaseCheckout:
        """The shared base checkout for a task (or repo + commit, or a plain directory)."""
        if task is not None:
            repo = repo or task.repo
            base_commit = base_commit or task.base_commit
            setup_patch = setup_patch or getattr(task, "setup_patch", "") or ""
        if repo is None and repo_path is None:
            raise ValueError("open a session with a task, a repo name, or a repo_path")
        repo = repo or Path(repo_path).name  # type: ignore[arg-type]
        key = (repo, base_commit, setup_patch, history, str(repo_path or ""))
        with self._lock:
            cached = self._checkouts.get(key)
        if cached is not None:
            return cached
        source = find_repo_source(repo, repo_path=repo_path)
        base = materialize(
            source,
            repo=repo,
            base_commit=base_commit,
            setup_patch=setup_patch,
            history=history,
            root=self.checkout_root,
        )
        with self._lock:
            self._checkouts[key] = base
        return base

    def open(
        self,
        task: Any = None,
        *,
        executor: Any = None,
        repo: str | None = None,
        base_commit: str | None = None,
        repo_path: str | Path | None = None,
        history: str = "full",
        config: SessionConfig | None = None,
    ) -> Session:
        """Open a new session on ``task`` (a :class:`~sweworld.tasks.Task`) or on a repository.

        The executor defaults to the manager's; pass an executor object as ``executor=``
        to override it (a spec string raises ``TypeError``, as for the manager).
        """
        exec_obj = _executor_object(executor) if executor is not None else self.default_executor
        base = self.checkout(
            task, repo=repo, base_commit=base_commit, repo_path=repo_path, history=history
        )
        base = session_base(exec_obj, task, base)
        return self._new_session(base, exec_obj, config or self.default_config, task)

    def _new_session(
        self,
        base: BaseCheckout,
        executor: Any,
        config: SessionConfig,
        task: Any,
        source: Session | None = None,
    ) -> Session:
        quota = source.workspace.quota_bytes if source else config.limits.disk_mb << 20
        cost = self._take_budget(quota + _memory_apart(config, self.backend == "overlay"))
        try:
            return self._open_workspace(base, executor, config, task, source, quota)
        finally:
            with self._lock:
                self._pending_bytes -= cost

    def committed_bytes(self) -> int:
        """What the live sessions' disks may hold together (see ``disk_budget_bytes``)."""
        with self._lock:
            return self._committed()

    def _committed(self) -> int:
        """Under the lock: each distinct disk's quota (a fork keeps its destroyed
        sources' disks alive: they are among its ``owners``), and each session's tmpfs
        mounts apart from its disk."""
        disks: dict[str, int] = {}
        total = 0
        for session in self._sessions.values():
            workspace = session.workspace
            quota = int(getattr(workspace, "quota_bytes", 0))
            for owner in getattr(workspace, "owners", None) or (session.id,):
                disks[owner] = quota
            total += _memory_apart(session.config, getattr(workspace, "kernel_quota", False))
        return total + sum(disks.values())

    def _take_budget(self, cost: int) -> int:
        """Count a new session's ``cost`` as pending (DiskBudgetExceeded when it would not
        fit); returns it."""
        with self._lock:
            budget = self.disk_budget_bytes
            if budget is not None:
                used = self._committed() + self._pending_bytes
                if used + cost > budget:
                    raise DiskBudgetExceeded(
                        f"no room for another session: the live sessions' disks hold up to "
                        f"{used >> 20} MiB of the {budget >> 20} MiB budget and a new one "
                        f"needs {cost >> 20} MiB; retry when sessions close"
                    )
            self._pending_bytes += cost
        return cost

    def _open_workspace(
        self,
        base: BaseCheckout,
        executor: Any,
        config: SessionConfig,
        task: Any,
        source: Session | None,
        quota: int,
    ) -> Session:
        sid = f"{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
        state_dir = self.sessions_dir / sid
        state_dir.mkdir(mode=0o700)
        workspace = None
        try:
            if source is None:
                workspace = make_workspace(self.backend, base.path, state_dir, quota_bytes=quota)
            else:
                workspace = source.workspace.fork(state_dir)
            session = Session(
                session_id=sid,
                base=base,
                workspace=workspace,
                state_dir=state_dir,
                executor=executor,
                config=config,
                task=task,
                on_destroy=self._forget,
                cwd=source.cwd if source else "/testbed",
                history=_copy_history(source.history) if source else None,
                ctl_dir=self.control_root / sid,
            )
        except BaseException as exc:
            # Leave nothing behind: the namespace's descriptors, the state folder, a cgroup.
            with self._reserve.released():
                if workspace is not None:
                    with contextlib.suppress(Exception):
                        workspace.destroy()
                remove_tree(state_dir)
                PidsCgroup.remove_named(state_dir.name)
            if state_dir.exists():
                with self._lock:
                    self._leftovers.append(str(state_dir))
            cause = exc if out_of_descriptors(exc) else (exc.__cause__ or exc.__context__)
            if cause is not None and out_of_descriptors(cause):
                what = f"could not open a session ({len(self._sessions)} open)"
                raise SandboxUnavailable(descriptor_message(what, cause)) from exc
            raise
        session._on_fork = self._fork
        with self._lock:
            self._sessions[sid] = session
        return session

    def _fork(self, session: Session) -> Session:
        child = self._new_session(
            session.base, session.executor, session.config, session.task, source=session
        )
        fork_memory = getattr(session.executor, "fork_session", None)
        if fork_memory is not None:
            fork_memory(session.id, child.id)
        return child

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
            leftovers, self._leftovers = self._leftovers, []
        for path in leftovers:  # descriptors were freed: finish an earlier cleanup
            remove_tree(path)
            PidsCgroup.remove_named(Path(path).name)
            if os.path.exists(path):
                with self._lock:
                    self._leftovers.append(path)

    # ------------------------------------------------------------------ bookkeeping

    @property
    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def close_all(self) -> None:
        """Destroy every live session of this manager."""
        for session in self.sessions:
            with contextlib.suppress(Exception):
                session.destroy()

    close = close_all

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()

    def __iter__(self) -> Iterator[Session]:
        return iter(self.sessions)


class _Reserve:
    """A few descriptors held in reserve, released while cleaning up after the process ran
    out of them (removing a folder tree needs descriptors). Closed with their manager."""

    SIZE = 8

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._lock = threading.Lock()
        self._fill()
        weakref.finalize(self, _close_fds, self._fds)

    def _fill(self) -> None:
        while len(self._fds) < self.SIZE:
            try:
                self._fds.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                return

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        with self._lock:
            _close_fds(self._fds)
            try:
                yield
            finally:
                self._fill()


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def _executor_object(executor: Any) -> Any:
    """``executor`` as a session's executor: an object as is, None as the no-op executor;
    a spec string is for the world to build (``TypeError``, saying how)."""
    if executor is None:
        return NoExecutor()
    if isinstance(executor, str):
        raise TypeError(
            f"the sandbox takes executor objects, not the spec {executor!r}: build it with "
            "sweworld.world.executor_from_spec(spec) (or give the spec to Episode / "
            "EpisodeConfig, which build it through the world)"
        )
    if not isinstance(executor, Executor):
        raise TypeError(f"{executor!r} does not implement the Executor protocol")
    return executor


def _raise_fd_limit() -> None:
    """Each session holds a few descriptors (its namespace, its workspace, a warm sandbox's
    pipes): lift the soft limit to the hard one so that hundreds of sessions fit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _memory_apart(config: SessionConfig, overlay: bool) -> int:
    """RAM a session's agent can fill besides its disk: its sandbox's scratch tmpfs mounts
    (``/root`` and ``/dev/shm``, ``scratch_mb`` each) and, on the overlay backend, its
    control tmpfs."""
    from sweworld.sandbox.overlay import CONTROL_BYTES

    return 2 * (config.limits.scratch_mb << 20) + (CONTROL_BYTES if overlay else 0)


def _copy_history(history: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: list(v) for k, v in history.items()}


def gc_stale_sessions(*folders: Path) -> list[str]:
    """Remove session state and pids cgroups left by processes that no longer run.

    ``folders`` default to the runtime and control folders; the session cgroups of dead
    processes (empty, named ``<pid>-...``) are removed wherever their folder went. Overlay
    mounts need no cleanup: they live in private mount namespaces that the kernel tears down
    with their process.
    """
    folders = folders or (runtime_dir() / "sessions", control_dir())
    removed = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            pid_text = entry.name.split("-", 1)[0]
            if not pid_text.isdigit() or _pid_alive(int(pid_text)):
                continue
            if entry.is_dir() and not entry.is_symlink():
                remove_tree(entry)
                PidsCgroup.remove_named(entry.name)
                removed.append(entry.name)
            else:
                entry.unlink(missing_ok=True)
    for name in PidsCgroup.stale():
        pid_text = name.split("-", 1)[0]
        dead = pid_text.isdigit() and not _pid_alive(int(pid_text))
        if dead and PidsCgroup.remove_named(name) and name not in removed:
            removed.append(name)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@atexit.register
def _close_all_managers() -> None:
    for manager in list(_live_managers):
        with contextlib.suppress(Exception):
            manager.close_all()
