"""The overlay workspace: a size-limited session disk and snapshots made of frozen layers.

Each session gets a private mount namespace (held open by file descriptors, see
:class:`_Mounter`) holding three mounts:

``<state>/d``: a tmpfs with ``size=`` the session's disk quota
    Everything the session can write lives here: the upper and work directories of both
    overlays, the frozen layers of its snapshots, and (through the ``/tmp`` overlay) its
    private ``/tmp``. The kernel enforces the quota: a write past it fails with ``ENOSPC``
    ("No space left on device") and nothing reaches the host's disk. The cost is memory:
    a tmpfs holds its files in RAM (no swap here), so ``sessions x quota`` is the worst case
    a host must be able to hold; an untouched session costs a few KB (see BENCHMARKS.md).
``<state>/merged``: overlay ``lowerdir=<frozen layers...>:<base>``, ``upperdir=d/u<n>``
    what the sandbox sees as ``/testbed``.
``<state>/c``: a 64 MiB tmpfs for the control files of the session's sandboxes
    (bound at ``/.sweworld/ctl``, writable from inside), kept apart from the quota so that
    a full disk never stops the next command (an ``rm``) from starting.
``<state>/tmpm``: overlay ``lowerdir=<frozen tmp layers...>:d/empty``, ``upperdir=d/t<n>``
    what the sandbox sees as ``/tmp``.

A snapshot freezes the current upper directories: they are renamed into read-only layers
(``d/l/<n>``, ``d/tl/<n>``) and fresh empty uppers are mounted over the longer stack. It
copies nothing, so it costs what changed since the previous snapshot (nothing when nothing
changed: the stack is reused). Frozen layers are never written again: overlayfs copies a
file up into the current upper before any write, so an in-place write (``>>``, ``sed -i``,
``truncate``) can never reach a saved state. A restore mounts a fresh upper over the
snapshot's stack; a fork freezes its source, then mounts the same stack in a namespace
copied from the source's (so the source's layers stay reachable, and alive, for as long as
the fork lives) over a tmpfs of its own.

Frozen layers count against the quota of the session that froze them: removing a file that
a snapshot holds hides it but frees nothing, as on any filesystem with snapshots.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sweworld.sandbox.workspace import (
    WorkspaceChanges,
    WorkspaceError,
    files_below,
    is_opaque,
    is_real_dir,
    is_whiteout,
    remove_tree,
    walk,
)

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MS_NOSUID = 2
_MNT_DETACH = 2
_MS_BIND = 4096
# The legacy mount(2) call takes at most one page of options: with layer paths relative to
# the sessions folder (``<id>/d/l/<n>``, ~30 bytes) this keeps a stack well inside it.
MAX_LAYERS = 96
DEFAULT_QUOTA_BYTES = 1 << 30
# The control files of the session's sandboxes (FIFOs, commands, execution requests and
# their stdin, get_patch's private index) are writable from inside: a tmpfs of their own,
# apart from the quota so that a full disk never stops the session from running `rm`.
CONTROL_BYTES = 64 << 20


class QuotaExceeded(WorkspaceError):
    """A workspace operation needed more room than the session's disk quota left."""


@dataclass(frozen=True)
class LayerStack:
    """A saved state of an overlay workspace: its frozen layers, newest first, as paths
    relative to the sessions folder (valid in the namespace of the session that froze them
    and of every fork made after)."""

    tree: tuple[str, ...] = ()
    tmp: tuple[str, ...] = ()


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise WorkspaceError(f"{what} failed: {os.strerror(err)}")


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


class _Mounter:
    """A dedicated thread that makes and changes the sessions' private mount namespaces.

    Each workspace lives in a namespace of its own, which the process keeps alive only
    through file descriptors: the namespace (for ``nsenter`` when a command runs) and the
    mounted directories (for in-process file operations, as ``/proc/<pid>/fd/<n>``). The
    host's mount table never grows, so starting a sandbox stays fast however many sessions
    are live (with host mounts, 500 live sessions made every bubblewrap start ~5x slower),
    and when the process dies for any reason the kernel unmounts everything. The thread's
    working directory (private to it: unsharing a mount namespace unshares it) is set to the
    sessions folder while it mounts, so layer paths stay short.
    """

    def __init__(self) -> None:
        import queue
        import threading

        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="sweworld-mounter", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        clean = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY)
        while True:
            job, args, reply = self._jobs.get()
            try:
                reply.put((True, job(clean, *args)))
            except BaseException as exc:  # handed back to the caller
                reply.put((False, exc))

    def call(self, job, *args):
        import queue

        reply: queue.Queue = queue.Queue(maxsize=1)
        self._jobs.put((job, args, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value


@functools.lru_cache(maxsize=1)
def _mounter() -> _Mounter:
    return _Mounter()


# A forked child does not inherit the mounter thread: it must start its own.
os.register_at_fork(after_in_child=_mounter.cache_clear)


def _open_dir(path: Path | str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


class OverlayWorkspace:
    """Kernel overlay over the base checkout on a size-limited tmpfs (module docstring).

    ``root`` and ``tmp_root`` (``/proc/<pid>/fd/<n>``) reach ``/testbed`` and ``/tmp`` from
    this process; ``bind_source`` and ``tmp_bind`` are their paths inside ``mount_ns_fd``'s
    namespace, where the sandbox is started. ``quota_bytes`` bounds everything the session
    writes, kernel-enforced.
    """

    backend = "overlay"
    kernel_quota = True

    def __init__(
        self,
        lower: Path,
        state_dir: Path,
        *,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        source: OverlayWorkspace | None = None,
    ):
        self.lower = Path(lower)
        self.state_dir = Path(state_dir)
        self.quota_bytes = int(quota_bytes)
        if self.quota_bytes < 1 << 20:
            raise WorkspaceError(f"a disk quota of {self.quota_bytes} bytes is below 1 MiB")
        self.sessions = self.state_dir.parent
        self.name = self.state_dir.name
        self.disk = self.state_dir / "d"
        self.bind_source = self.tmp_bind = self.state_dir / "m0"  # set when mounted
        self.ctl_bind = self.state_dir / "c"
        for d in (self.disk, self.ctl_bind):
            d.mkdir(parents=True, exist_ok=True)
        self.mount_ns_fd: int | None = None
        self._disk_fd: int | None = None
        self._ctl_fd: int | None = None
        self._dir_fd: int | None = None
        self._tmp_fd: int | None = None
        self._seq = 0  # names of uppers, work dirs and layers, never reused
        stack = LayerStack()
        # where each disk holding layers of this workspace is, relative to the sessions
        # folder, in this workspace's namespace: its own, and its sources' (a fork)
        self.owners: dict[str, str] = {}
        self._owner_fds: dict[str, int] = {}
        if source is not None:
            stack = source.freeze()
            self.owners = {owner: f"{self.name}/x/{owner}" for owner in source.owners}
        self.owners[self.name] = f"{self.name}/d"
        plan = self._plan(stack, 1)  # one trip to the mounter thread makes it all
        try:
            fds = _mounter().call(self._mount_disk, source, plan)
            self.mount_ns_fd, self._disk_fd, self._ctl_fd, dir_fd, tmp_fd = fds
            self._adopt(1, stack, plan[2], dir_fd, tmp_fd)
        except BaseException:
            self._unmount()
            raise

    # ------------------------------------------------------------------ mounting

    @property
    def disk_root(self) -> Path:
        """The session's tmpfs, reached from this process."""
        return Path(f"/proc/{os.getpid()}/fd/{self._disk_fd}")

    @property
    def ctl_root(self) -> Path:
        """The session's control tmpfs (sandbox control files), reached from this process."""
        return Path(f"/proc/{os.getpid()}/fd/{self._ctl_fd}")

    @property
    def upper(self) -> Path:
        """The current upper directory of ``/testbed``, reached from this process."""
        return self.disk_root / f"u{self._seq}"

    def _mount_disk(
        self, clean: int, source: OverlayWorkspace | None, plan: tuple[str, str, tuple[Path, Path]]
    ) -> tuple[int, ...]:
        """In the mounter thread: a new namespace (copied from the source's for a fork),
        private, with the session's tmpfs mounted and laid out, and the overlays of
        ``plan`` (see :meth:`_plan`) mounted; returns the namespace's, the disks' and the
        merged directories' descriptors. A fork bind-mounts every
        disk its source's layers live on under its own folder (``x/<owner>``): the source's
        own mount points vanish from this namespace when the source is destroyed."""
        if source is not None:
            _check(_libc.setns(source.mount_ns_fd, _CLONE_NEWNS), "entering the source's namespace")
        try:
            _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            # Private propagation: nothing mounted here may leak into the host's namespace.
            _check(
                _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                "making the mount namespace private",
            )
            if source is not None:
                for target in (source.bind_source, source.tmp_bind):  # not this session's
                    _libc.umount2(str(target).encode(), _MNT_DETACH)
                for owner, rel in source.owners.items():
                    mine = self.state_dir / "x" / owner
                    mine.mkdir(parents=True, exist_ok=True)
                    _check(
                        _libc.mount(
                            str(self.sessions / rel).encode(),
                            str(mine).encode(),
                            None,
                            _MS_BIND,
                            None,
                        ),
                        "sharing the source's layers with the fork",
                    )
                    self._owner_fds[owner] = _open_dir(mine)
                # the source's own mounts, copied into this namespace, are not needed here
                # (its layers are bound above): detached, they hold none of its memory
                for rel in (
                    *source.owners.values(),
                    os.path.relpath(source.ctl_bind, self.sessions),
                ):
                    _libc.umount2(str(self.sessions / rel).encode(), _MNT_DETACH)
            inodes = max(16384, self.quota_bytes // 8192)
            opts = f"size={self.quota_bytes},nr_inodes={inodes},mode=0700".encode()
            _check(
                _libc.mount(b"sweworld", str(self.disk).encode(), b"tmpfs", _MS_NOSUID, opts),
                "mounting the session's disk (tmpfs)",
            )
            for sub, mode in (("l", 0o700), ("tl", 0o700), ("empty", 0o755)):
                os.mkdir(self.disk / sub, mode)
            opts = f"size={CONTROL_BYTES},nr_inodes=16384,mode=0700".encode()
            _check(
                _libc.mount(b"sweworld", str(self.ctl_bind).encode(), b"tmpfs", _MS_NOSUID, opts),
                "mounting the session's control folder (tmpfs)",
            )
            _make_uppers(self.disk, 1)
            fds: list[int] = []
            try:
                fds.append(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
                fds.append(_open_dir(self.disk))
                fds.append(_open_dir(self.ctl_bind))
                fds.extend(self._overlays_here((), *plan))
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
            return tuple(fds)
        finally:
            _check(_libc.setns(clean, _CLONE_NEWNS), "returning to the original namespace")

    def _plan(self, stack: LayerStack, seq: int) -> tuple[str, str, tuple[Path, Path]]:
        """The overlays' mount options for ``stack`` with uppers number ``seq``, and where
        they go; raises (changing nothing) when ``stack`` cannot be mounted here."""
        tree_layers = [*map(self._resolve, stack.tree), str(self.lower)]
        tmp_layers = [*map(self._resolve, stack.tmp), f"{self.name}/d/empty"]
        me = f"{self.name}/d"
        tree_opts = (
            f"lowerdir={':'.join(map(_escape, tree_layers))},"
            f"upperdir={me}/u{seq},workdir={me}/w{seq}"
        )
        tmp_opts = (
            f"lowerdir={':'.join(map(_escape, tmp_layers))},"
            f"upperdir={me}/t{seq},workdir={me}/tw{seq}"
        )
        if max(len(tree_opts), len(tmp_opts)) >= 4000:  # mount(2) reads one page
            raise QuotaExceeded(
                "this workspace's stack of saved layers is too deep to mount; restore an "
                "earlier snapshot or open a new session"
            )
        new = (self.state_dir / f"m{seq}", self.state_dir / f"tm{seq}")
        for d in new:
            d.mkdir(exist_ok=True)
        return tree_opts, tmp_opts, new

    def _mount_stack(self, stack: LayerStack) -> None:
        """Fresh empty uppers over ``stack`` (which becomes ``self.stack``), mounted at new
        paths (a sandbox or executor keyed on the old path sees the change); reopens the
        merged directories. Nothing changes when ``stack`` cannot be resolved here."""
        seq = self._seq + 1
        tree_opts, tmp_opts, new = self._plan(stack, seq)
        _make_uppers(self.disk_root, seq)
        old = (self.bind_source, self.tmp_bind)
        self._close_views()
        dir_fd, tmp_fd = _mounter().call(
            self._mount_overlays, self.mount_ns_fd, old, new, tree_opts, tmp_opts
        )
        self._adopt(seq, stack, new, dir_fd, tmp_fd)
        for d in old:
            with contextlib.suppress(OSError):
                d.rmdir()

    def _adopt(
        self, seq: int, stack: LayerStack, new: tuple[Path, Path], dir_fd: int, tmp_fd: int
    ) -> None:
        """Record a mount made by the mounter thread."""
        self._seq, self.stack = seq, stack
        self._dir_fd, self._tmp_fd = dir_fd, tmp_fd
        self.bind_source, self.tmp_bind = new
        self.root = Path(f"/proc/{os.getpid()}/fd/{dir_fd}")
        self.tmp_root = Path(f"/proc/{os.getpid()}/fd/{tmp_fd}")

    def _resolve(self, layer: str) -> str:
        """A stack entry (``<owner>/<sub>``) as a path relative to the sessions folder in
        this workspace's namespace."""
        owner, _, sub = layer.partition("/")
        if owner not in self.owners:
            raise WorkspaceError("this snapshot belongs to a session this one was not forked from")
        return f"{self.owners[owner]}/{sub}"

    def _mount_overlays(
        self,
        clean: int,
        ns_fd: int,
        old: tuple[Path, ...],
        new: tuple[Path, Path],
        tree: str,
        tmp: str,
    ) -> tuple[int, int]:
        _check(_libc.setns(ns_fd, _CLONE_NEWNS), "entering the session's namespace")
        try:
            return self._overlays_here(old, tree, tmp, new)
        finally:
            _check(_libc.setns(clean, _CLONE_NEWNS), "returning to the original namespace")

    def _overlays_here(
        self, old: tuple[Path, ...], tree: str, tmp: str, new: tuple[Path, Path]
    ) -> tuple[int, int]:
        """In the mounter thread, inside the session's namespace: unmount ``old``, mount
        both overlays at ``new``, open them."""
        # Only here, after this thread unshared a namespace (which unshared its working
        # directory from the process's), is changing directory private to the thread.
        os.chdir(self.sessions)
        for target in old:
            _libc.umount2(str(target).encode(), _MNT_DETACH)  # the previous stack's
        for target, opts in zip(new, (tree, tmp), strict=True):
            _check(
                _libc.mount(b"overlay", str(target).encode(), b"overlay", 0, opts.encode()),
                f"overlay mount on {target.name}",
            )
        dir_fd = _open_dir(new[0])
        try:
            return dir_fd, _open_dir(new[1])
        except OSError:
            os.close(dir_fd)
            raise

    def _close_views(self) -> None:
        for name in ("_dir_fd", "_tmp_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            setattr(self, name, None)

    def _unmount(self) -> None:
        # Closing every descriptor frees the namespace; the kernel unmounts the overlays
        # and the tmpfs (its memory is freed once no fork's namespace holds it either).
        self._close_views()
        for fd in self._owner_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owner_fds = {}
        for name in ("_ctl_fd", "_disk_fd", "mount_ns_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            setattr(self, name, None)

    # ------------------------------------------------------------------ snapshots

    def _upper_names(self) -> tuple[str, str, str, str]:
        s = self._seq
        return f"u{s}", f"w{s}", f"t{s}", f"tw{s}"

    def freeze(self) -> LayerStack:
        """Turn the current uppers into frozen layers (only those holding anything) and
        mount fresh ones over the new stack; returns the stack, the state at this moment.
        The caller stops every process that uses the workspace first."""
        upper, _, tmp_upper, _ = self._upper_names()
        disk = self.disk_root
        tree, tmp = self.stack.tree, self.stack.tmp
        grow_tree = bool(os.listdir(disk / upper))
        grow_tmp = bool(os.listdir(disk / tmp_upper)) or _differs(disk / tmp_upper)
        if not grow_tree and not grow_tmp:
            return self.stack
        if len(tree) + len(tmp) + grow_tree + grow_tmp > MAX_LAYERS:
            raise QuotaExceeded(
                f"this workspace holds {len(tree) + len(tmp)} saved layers, the most it may "
                "hold; restore an earlier snapshot or open a new session"
            )
        seq = self._seq
        if grow_tree:
            os.rename(disk / upper, disk / "l" / str(seq))
            tree = (f"{self.name}/l/{seq}", *tree)
        if grow_tmp:
            os.rename(disk / tmp_upper, disk / "tl" / str(seq))
            tmp = (f"{self.name}/tl/{seq}", *tmp)
        try:
            self._mount_stack(LayerStack(tree, tmp))
        except QuotaExceeded:  # refused before anything was mounted: undo the renames
            if grow_tree:
                os.rename(disk / "l" / str(seq), disk / upper)
            if grow_tmp:
                os.rename(disk / "tl" / str(seq), disk / tmp_upper)
            raise
        self._drop_uppers(seq, keep_tree=grow_tree, keep_tmp=grow_tmp)
        return self.stack

    def _drop_uppers(self, seq: int, *, keep_tree: bool = False, keep_tmp: bool = False) -> None:
        """Delete the uppers and work dirs of mount number ``seq`` (no longer mounted)."""
        disk = self.disk_root
        names = [f"w{seq}", f"tw{seq}"]
        if not keep_tree:
            names.append(f"u{seq}")
        if not keep_tmp:
            names.append(f"t{seq}")
        for name in names:
            if os.path.lexists(disk / name):
                remove_tree(disk / name)

    def snapshot(self) -> LayerStack:
        """The current state, frozen (see :meth:`freeze`)."""
        return self.freeze()

    def restore(self, stack: LayerStack) -> None:
        """Return to a state from :meth:`snapshot` (of this workspace or of one it was
        forked from): fresh uppers over its layers; what changed since is discarded."""
        seq = self._seq
        self._mount_stack(stack)
        self._drop_uppers(seq)

    def fork(self, state_dir: Path) -> OverlayWorkspace:
        """A new workspace (own namespace, own quota) starting from this one's state."""
        return OverlayWorkspace(self.lower, state_dir, quota_bytes=self.quota_bytes, source=self)

    def destroy(self) -> None:
        self._unmount()
        for d in (self.disk, self.ctl_bind, self.bind_source, self.tmp_bind, self.state_dir / "x"):
            remove_tree(d)

    # ------------------------------------------------------------------ reading state

    def disk_usage(self) -> int:
        """Memory the session's tmpfs holds (uppers, layers, /tmp): the kernel's count of
        data pages in use, plus ~1 KiB of kernel memory per file and directory (which
        tmpfs does not count as blocks, but bounds with ``nr_inodes``)."""
        st = os.statvfs(self.disk_root)
        return (st.f_blocks - st.f_bfree) * st.f_frsize + (st.f_files - st.f_ffree) * 1024

    def quota_used(self) -> int:
        """Bytes counted against the quota (the kernel's count of data pages in use)."""
        st = os.statvfs(self.disk_root)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def free_bytes(self) -> int:
        st = os.statvfs(self.disk_root)
        return st.f_bavail * st.f_frsize

    def changes(self) -> WorkspaceChanges:
        """What differs from the base, read from the frozen layers (oldest first) and the
        current upper: whiteouts and opaque directories hide what is below them."""
        state: dict[str, bool] = {}  # path -> True written, False deleted from the base
        dirs: set[str] = set()
        layers = [self._layer_path(p) for p in reversed(self.stack.tree)]
        for layer in [*layers, self.upper]:
            _apply_layer(layer, self.lower, state, dirs)
        written = sorted(p for p, w in state.items() if w)
        # a base path that is a directory now is not gone (a file the agent replaced by a
        # directory): it is in ``dirs``, as the changes' contract has it
        deleted = sorted(p for p, w in state.items() if not w and p not in dirs)
        return WorkspaceChanges(tuple(written), tuple(deleted), tuple(sorted(dirs)))

    def _layer_path(self, layer: str) -> Path:
        """A frozen layer, reached from this process (through its disk's descriptor)."""
        owner, _, sub = layer.partition("/")
        fd = self._disk_fd if owner == self.name else self._owner_fds[owner]
        return Path(f"/proc/{os.getpid()}/fd/{fd}/{sub}")


def _make_uppers(disk: Path, seq: int) -> None:
    """The empty upper and work directories of mount number ``seq`` on the session's disk."""
    os.mkdir(disk / f"u{seq}", 0o755)
    os.mkdir(disk / f"w{seq}", 0o700)
    os.mkdir(disk / f"t{seq}", 0o1777)
    os.chmod(disk / f"t{seq}", 0o1777)  # /tmp's own mode (the umask took the sticky bit)
    os.mkdir(disk / f"tw{seq}", 0o700)


def _differs(tmp_upper: Path) -> bool:
    """Whether the /tmp upper's own attributes changed (its mode, as ``chmod /tmp``)."""
    return stat.S_IMODE(os.stat(tmp_upper).st_mode) != 0o1777


def _hide_below(rel: str, lower: Path, state: dict[str, bool], dirs: set[str]) -> None:
    """Everything at or below ``rel`` from older layers and the base is hidden."""
    prefix = rel + "/"
    for path in [p for p in state if p == rel or p.startswith(prefix)]:
        del state[path]
    for path in [d for d in dirs if d == rel or d.startswith(prefix)]:
        dirs.discard(path)
    target = lower / rel
    if is_real_dir(target):
        for path in files_below(target, rel):
            state[path] = False
    elif os.path.lexists(target):
        state[rel] = False


def _apply_layer(layer: Path, lower: Path, state: dict[str, bool], dirs: set[str]) -> None:
    """Apply one overlay layer's entries (whiteouts, opaque dirs, files) on ``state``."""
    if not layer.is_dir():
        return
    for dirpath, dirnames, filenames in walk(layer):
        rel_dir = os.path.relpath(dirpath, layer)
        rel_dir = "" if rel_dir == "." else rel_dir
        if rel_dir == ".git" or rel_dir.startswith(".git/"):
            dirnames[:] = []
            continue
        for name in list(dirnames):
            rel = os.path.join(rel_dir, name)
            full = os.path.join(dirpath, name)
            if rel == ".git":
                dirnames.remove(name)
            elif os.path.islink(full):
                _hide_below(rel, lower, state, dirs)
                state[rel] = True  # a symlink to a directory is a written entry
            else:
                if is_opaque(full) or state.get(rel) is True:
                    _hide_below(rel, lower, state, dirs)
                if not is_real_dir(lower / rel):
                    dirs.add(rel)
        for name in filenames:
            rel = os.path.join(rel_dir, name)
            full = os.path.join(dirpath, name)
            _hide_below(rel, lower, state, dirs)
            if not is_whiteout(full):
                state[rel] = True


__all__ = ["DEFAULT_QUOTA_BYTES", "LayerStack", "OverlayWorkspace", "QuotaExceeded"]
