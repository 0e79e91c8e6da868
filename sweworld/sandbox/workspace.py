"""Copy-on-write workspaces over a shared, read-only base checkout.

Two backends implement :class:`Workspace`:

``overlay`` (default where it works: root, or ``CAP_SYS_ADMIN``)
    A kernel overlay mount: the base checkout is the lower layer, each session owns a small
    upper directory on a tmpfs of its own whose ``size=`` is the session's disk quota, and
    the mounts live in a private mount namespace held open by file descriptors. Creating a
    session is a few ``mkdir`` and a handful of syscalls; an untouched session costs a few
    KB; writes copy only the file they touch. Snapshots freeze the upper layer as a
    read-only lower layer (they cost what changed). See :mod:`sweworld.sandbox.overlay`.

``copy`` (portable fallback)
    A full copy of the base (``cp --reflink=auto``: a cheap reflink clone on btrfs/XFS, a real
    copy elsewhere). Correct everywhere, slow and large on big repositories. Its quota is
    checked after each step, not enforced by the kernel; snapshots are full copies.

``BENCHMARKS.md`` has the numbers behind this choice; hardlink trees were rejected because an
in-place write by any tool (``>>``, ``sed -i`` on some filesystems, editors that truncate)
would write through into the shared base.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


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
    kernel_quota: bool  # whether the kernel enforces ``quota_bytes`` (else checked per step)
    quota_bytes: int  # the most the session may write (tree, /tmp and snapshots together)
    root: Path  # path of the merged working tree from this process (``/testbed`` inside)
    bind_source: Path  # the same tree as seen from ``mount_ns_fd``'s namespace
    tmp_root: Path  # the session's private ``/tmp`` from this process
    tmp_bind: Path  # the same folder as seen from ``mount_ns_fd``'s namespace
    mount_ns_fd: int | None  # namespace to start the sandbox in (None: this process's own)

    def snapshot(self) -> Any:
        """Save the current state (tree and ``/tmp``); returns a token for :meth:`restore`.
        No process may use the workspace meanwhile (the session stops its sandboxes)."""

    def restore(self, saved: Any) -> None:
        """Return to a state from :meth:`snapshot` (of this workspace or its source)."""

    def fork(self, state_dir: Path) -> Workspace:
        """A new independent workspace in ``state_dir`` starting from this one's state."""

    def destroy(self) -> None:
        """Unmount and delete everything the workspace owns; the base is untouched."""

    def disk_usage(self) -> int:
        """Bytes this workspace owns (excluding the shared base)."""

    def quota_used(self) -> int:
        """Bytes counted against ``quota_bytes``."""

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


class CopyWorkspace:
    """A full (reflink where possible) copy of the base. See the module docstring.

    The quota is not enforced by the kernel here (no mounts without root): the session
    checks :meth:`quota_used` after each step and refuses file-editor writes while it is
    over. Snapshots are full copies of the tree and ``/tmp``.
    """

    backend = "copy"
    kernel_quota = False

    def __init__(
        self,
        lower: Path,
        state_dir: Path,
        *,
        quota_bytes: int = 1 << 30,
        source: CopyWorkspace | None = None,
    ):
        self.lower = lower
        self.state_dir = state_dir
        self.quota_bytes = int(quota_bytes)
        self.root = self.bind_source = state_dir / "tree"
        self.tmp_root = self.tmp_bind = state_dir / "tmp"
        self.mount_ns_fd = None
        self._snapshots = itertools.count(1)
        copy_tree(source.root if source else lower, self.root)
        if source is not None:
            copy_tmp_dir(source.tmp_root, self.tmp_root)
        else:
            self.tmp_root.mkdir(mode=0o1777, exist_ok=True)
            self.tmp_root.chmod(0o1777)
        self._baseline = _du(self.root) if source is None else source._baseline

    def snapshot(self) -> Path:
        """A full copy of the tree and ``/tmp`` (the copy backend has no cheaper way)."""
        dest = self.state_dir / "snapshots" / str(next(self._snapshots))
        copy_tree(self.root, dest / "tree")
        copy_tmp_dir(self.tmp_root, dest / "tmp")
        return dest

    def restore(self, saved: Path) -> None:
        if not Path(saved).is_dir():
            raise WorkspaceError("this snapshot no longer exists (its session was destroyed)")
        remove_tree(self.root)
        copy_tree(saved / "tree", self.root)
        remove_tree(self.tmp_root)
        copy_tmp_dir(saved / "tmp", self.tmp_root)

    def fork(self, state_dir: Path) -> CopyWorkspace:
        return CopyWorkspace(self.lower, state_dir, quota_bytes=self.quota_bytes, source=self)

    def destroy(self) -> None:
        remove_tree(self.root)
        remove_tree(self.tmp_root)

    def disk_usage(self) -> int:
        return _du(self.state_dir)

    def quota_used(self) -> int:
        """Bytes counted against the quota: everything beyond the fresh copy of the base."""
        return max(0, self.disk_usage() - self._baseline)

    def changes(self) -> WorkspaceChanges:
        my_dirs: set[str] = set()
        base_dirs: set[str] = set()
        mine = _file_stats(self.root, my_dirs)
        base = _file_stats(self.lower, base_dirs)
        written = sorted(p for p, st in mine.items() if base.get(p) != st)
        new_dirs = my_dirs - base_dirs
        # a base file that is a directory now is not gone: it is in ``dirs``
        deleted = sorted(p for p in base if p not in mine and p not in new_dirs)
        return WorkspaceChanges(tuple(written), tuple(deleted), tuple(sorted(new_dirs)))


def is_whiteout(path: str) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def files_below(path: Path, rel: str) -> list[str]:
    out = []
    for dirpath, _, filenames in walk(path):
        sub = os.path.relpath(dirpath, path)
        for name in filenames:
            out.append(os.path.normpath(os.path.join(rel, sub, name)))
    return out


def is_real_dir(path: Path) -> bool:
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
