"""Copy-on-write workspaces over a shared, read-only base checkout.

Two backends implement :class:`Workspace`:

``overlay`` (default where it works: root, or ``CAP_SYS_ADMIN``)
    A kernel overlay mount: the base checkout is the lower layer, each session owns a small
    upper directory, and the mount lives in a private mount namespace held open by file
    descriptors (see :class:`_Mounter`). Creating a session is a few ``mkdir`` and four
    syscalls; an untouched session costs a few KB; writes copy only the file they touch.
    Snapshot and fork copy the upper layer (what the agent changed, not the repository).

``copy`` (portable fallback)
    A full copy of the base (``cp --reflink=auto``: a cheap reflink clone on btrfs/XFS, a real
    copy elsewhere). Correct everywhere, slow and large on big repositories.

``BENCHMARKS.md`` has the numbers behind this choice; hardlink trees were rejected because an
in-place write by any tool (``>>``, ``sed -i`` on some filesystems, editors that truncate)
would write through into the shared base.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class WorkspaceError(RuntimeError):
    """A workspace could not be created, mounted or copied."""


@dataclass(frozen=True)
class WorkspaceChanges:
    """What differs from the base checkout, as paths relative to the workspace root.

    ``written``: files and symlinks added or possibly modified (a superset: a file opened
    for writing counts even if its bytes did not change); ``deleted``: paths of the base that
    are gone; ``dirs``: directories the base does not have (empty ones included, which
    ``written`` cannot show). Paths under ``.git/`` are left out.
    """

    written: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()


class Workspace(Protocol):
    """A writable view of a base checkout, private to one session."""

    backend: str
    root: Path  # path of the merged working tree from this process (``/testbed`` inside)
    bind_source: Path  # the same tree as seen from ``mount_ns_fd``'s namespace
    mount_ns_fd: int | None  # namespace to start the sandbox in (None: this process's own)

    def save(self, dest: Path) -> None:
        """Copy this workspace's state (its changes against the base) into new dir ``dest``."""

    def load(self, src: Path) -> None:
        """Replace this workspace's state with one saved by :meth:`save`."""

    def fork(self, state_dir: Path) -> Workspace:
        """A new independent workspace in ``state_dir`` starting from this one's state."""

    def destroy(self) -> None:
        """Unmount and delete everything the workspace owns; the base is untouched."""

    def disk_usage(self) -> int:
        """Bytes this workspace owns on disk (excluding the shared base)."""

    def changes(self) -> WorkspaceChanges:
        """Paths that differ from the base (computed from files, without running anything)."""


def copy_tree(src: Path, dest: Path) -> None:
    """``cp -a`` keeps what overlay needs: whiteout devices, xattrs, symlinks, modes."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["cp", "-a", "--reflink=auto", f"{src}/.", str(dest)], capture_output=True
    )
    if proc.returncode != 0:
        raise WorkspaceError(f"copy {src} -> {dest} failed: {proc.stderr.decode().strip()}")


def copy_tmp_dir(src: Path, dest: Path) -> None:
    """Copy a session's private ``/tmp`` (world-writable and sticky, like ``/tmp``)."""
    copy_tree(src, dest)
    dest.chmod(0o1777)


def walk(top: Path | str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top)`` (top-down, symlinked directories listed but not entered, unreadable
    folders skipped), without recursion: an agent's folders nested thousands deep made
    Python's recursive ``os.walk`` and ``shutil.rmtree`` raise ``RecursionError``."""
    stack = [os.fspath(top)]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        dirs, files = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield path, dirs, files  # the caller may prune ``dirs``
        for name in reversed(dirs):
            full = os.path.join(path, name)
            if not os.path.islink(full):
                stack.append(full)


def _du(path: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in walk(path):
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def remove_tree(path: Path | str) -> None:
    """Delete a folder whatever the agent put in it: read-only files, folders nested deeper
    than Python's recursion limit (``shutil.rmtree`` raises ``RecursionError``). Never
    raises."""
    path = Path(path)
    with contextlib.suppress(RecursionError):
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):  # fall back to rm, which has no depth limit
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], capture_output=True)


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18


def _escape_option(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise WorkspaceError(f"{what} failed: {os.strerror(ctypes.get_errno())}")


class _Mounter:
    """A dedicated thread that makes one private mount namespace per overlay.

    Each overlay is mounted in a namespace of its own, which the process keeps alive only
    through two file descriptors: the namespace (for ``nsenter`` when a command runs) and the
    merged directory (for in-process file operations, as ``/proc/<pid>/fd/<n>``). The host's
    mount table never grows, so starting a sandbox stays fast however many sessions are live
    (with host mounts, 500 live sessions made every bubblewrap start ~5x slower), and when the
    process dies for any reason the kernel unmounts everything.
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

    @staticmethod
    def mount_overlay(
        clean: int, lower: Path, upper: Path, work: Path, target: Path
    ) -> tuple[int, int]:
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        try:
            # Private propagation: nothing mounted here may leak into the host's namespace.
            _check(
                _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                "making the mount namespace private",
            )
            opts = (
                f"lowerdir={_escape_option(lower)},upperdir={_escape_option(upper)},"
                f"workdir={_escape_option(work)}"
            ).encode()
            _check(
                _libc.mount(b"overlay", str(target).encode(), b"overlay", 0, opts),
                f"overlay mount on {target}",
            )
            ns_fd = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            try:
                dir_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                os.close(ns_fd)  # out of descriptors: hold nothing, the namespace goes too
                raise
            return ns_fd, dir_fd
        finally:
            _check(_libc.setns(clean, _CLONE_NEWNS), "returning to the original namespace")


@functools.lru_cache(maxsize=1)
def _mounter() -> _Mounter:
    return _Mounter()


# A forked child does not inherit the mounter thread: it must start its own.
os.register_at_fork(after_in_child=_mounter.cache_clear)


class OverlayWorkspace:
    """Kernel overlay over the base checkout, in a private mount namespace (module docstring).

    ``root`` (``/proc/<pid>/fd/<n>``) reaches the merged tree from this process;
    ``bind_source`` is the path of the merged tree inside ``mount_ns_fd``'s namespace, where
    the sandbox is started.
    """

    backend = "overlay"

    def __init__(self, lower: Path, state_dir: Path, *, initial_state: Path | None = None):
        self.lower = lower
        self.state_dir = state_dir
        self.upper = state_dir / "upper"
        self.work = state_dir / "work"
        self.bind_source = state_dir / "merged"
        self.mount_ns_fd: int | None = None
        self._dir_fd: int | None = None
        for d in (self.work, self.bind_source):
            d.mkdir(parents=True, exist_ok=True)
        if initial_state is not None:
            copy_tree(initial_state, self.upper)
        else:
            self.upper.mkdir(parents=True, exist_ok=True)
        self._mount()

    def _mount(self) -> None:
        self.mount_ns_fd, self._dir_fd = _mounter().call(
            _Mounter.mount_overlay, self.lower, self.upper, self.work, self.bind_source
        )
        self.root = Path(f"/proc/{os.getpid()}/fd/{self._dir_fd}")

    def _unmount(self) -> None:
        # Closing both descriptors frees the namespace; the kernel unmounts the overlay.
        for fd in (self._dir_fd, self.mount_ns_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._dir_fd = self.mount_ns_fd = None

    def save(self, dest: Path) -> None:
        copy_tree(self.upper, dest)

    def load(self, src: Path) -> None:
        self._unmount()
        remove_tree(self.upper)
        remove_tree(self.work)
        self.work.mkdir()
        copy_tree(src, self.upper)
        self._mount()

    def fork(self, state_dir: Path) -> OverlayWorkspace:
        return OverlayWorkspace(self.lower, state_dir, initial_state=self.upper)

    def destroy(self) -> None:
        self._unmount()
        for d in (self.upper, self.work, self.bind_source):
            remove_tree(d)

    def disk_usage(self) -> int:
        return _du(self.upper) + _du(self.work)

    def changes(self) -> WorkspaceChanges:
        written: list[str] = []
        deleted: list[str] = []
        dirs: list[str] = []
        for dirpath, dirnames, filenames in walk(self.upper):
            rel_dir = os.path.relpath(dirpath, self.upper)
            rel_dir = "" if rel_dir == "." else rel_dir
            if rel_dir == ".git" or rel_dir.startswith(".git/"):
                dirnames[:] = []
                continue
            for name in list(dirnames):
                rel = os.path.join(rel_dir, name)
                if rel == ".git":
                    dirnames.remove(name)
                elif os.path.islink(os.path.join(dirpath, name)):
                    written.append(rel)  # a symlink to a directory is a written entry
                else:
                    if not _is_real_dir(self.lower / rel):
                        dirs.append(rel)
                    if _is_opaque(os.path.join(dirpath, name)):
                        # An opaque directory hides everything the base had below it.
                        deleted += _files_below(self.lower / rel, rel)
            for name in filenames:
                rel = os.path.join(rel_dir, name)
                full = os.path.join(dirpath, name)
                if _is_whiteout(full):
                    target = self.lower / rel
                    deleted += _files_below(target, rel) if target.is_dir() else [rel]
                else:
                    written.append(rel)
        return WorkspaceChanges(
            tuple(sorted(written)), tuple(sorted(set(deleted) - set(written))), tuple(sorted(dirs))
        )


class CopyWorkspace:
    """A full (reflink where possible) copy of the base. See the module docstring."""

    backend = "copy"

    def __init__(self, lower: Path, state_dir: Path, *, initial_state: Path | None = None):
        self.lower = lower
        self.state_dir = state_dir
        self.root = self.bind_source = state_dir / "tree"
        self.mount_ns_fd = None
        copy_tree(initial_state or lower, self.root)

    def save(self, dest: Path) -> None:
        copy_tree(self.root, dest)

    def load(self, src: Path) -> None:
        remove_tree(self.root)
        copy_tree(src, self.root)

    def fork(self, state_dir: Path) -> CopyWorkspace:
        return CopyWorkspace(self.lower, state_dir, initial_state=self.root)

    def destroy(self) -> None:
        remove_tree(self.root)

    def disk_usage(self) -> int:
        return _du(self.root)

    def changes(self) -> WorkspaceChanges:
        my_dirs: set[str] = set()
        base_dirs: set[str] = set()
        mine = _file_stats(self.root, my_dirs)
        base = _file_stats(self.lower, base_dirs)
        written = sorted(p for p, st in mine.items() if base.get(p) != st)
        deleted = sorted(p for p in base if p not in mine)
        return WorkspaceChanges(tuple(written), tuple(deleted), tuple(sorted(my_dirs - base_dirs)))


def _is_whiteout(path: str) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def _files_below(path: Path, rel: str) -> list[str]:
    out = []
    for dirpath, _, filenames in walk(path):
        sub = os.path.relpath(dirpath, path)
        for name in filenames:
            out.append(os.path.normpath(os.path.join(rel, sub, name)))
    return out


def _is_real_dir(path: Path) -> bool:
    """A directory, not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _file_stats(root: Path, dirs: set[str] | None = None) -> dict[str, tuple[int, int, int]]:
    """relative path -> (mode, size, mtime_ns) of files and symlinks, ``.git`` excluded;
    the relative paths of directories go into ``dirs`` when given."""
    out = {}
    for dirpath, dirnames, filenames in walk(root):
        if dirpath == str(root) and ".git" in dirnames:
            dirnames.remove(".git")
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        if dirs is not None:
            dirs.update(
                os.path.relpath(os.path.join(dirpath, d), root) for d in dirnames if d not in links
            )
        for name in [*filenames, *links]:  # a symlink to a directory counts as an entry
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


BACKENDS = {"overlay": OverlayWorkspace, "copy": CopyWorkspace}


@functools.lru_cache(maxsize=8)
def overlay_available(scratch: str) -> bool:
    """Probe once (per scratch folder) whether this process may mount overlays there."""
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=scratch))
    try:
        (probe / "lower").mkdir()
        ws = OverlayWorkspace(probe / "lower", probe / "state")
        ws.destroy()
        return True
    except (WorkspaceError, OSError):
        return False
    finally:
        remove_tree(probe)


def resolve_backend(name: str, scratch: Path) -> str:
    """``auto`` -> ``overlay`` where it can be mounted, else ``copy``."""
    if name == "auto":
        return "overlay" if overlay_available(str(scratch)) else "copy"
    if name not in BACKENDS:
        raise WorkspaceError(f"unknown workspace backend {name!r}; use auto, overlay or copy")
    if name == "overlay" and not overlay_available(str(scratch)):
        raise WorkspaceError(
            "the overlay backend needs permission to mount (root or CAP_SYS_ADMIN) and an "
            "upper directory on a filesystem overlayfs supports; use backend='copy'"
        )
    return name


def make_workspace(backend: str, lower: Path, state_dir: Path) -> Workspace:
    """Create a workspace of the given (resolved) backend."""
    return BACKENDS[backend](lower, state_dir)
