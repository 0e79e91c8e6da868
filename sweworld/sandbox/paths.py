"""Mapping between the paths an agent sees inside the sandbox and host paths.

The sandbox namespace is a set of *mounts*: sandbox roots such as ``/testbed`` or ``/tmp``,
each backed by a host directory. An agent path is resolved entirely in that namespace:

1. a relative path is joined with the current directory (the workdir by default);
2. ``.`` and ``..`` are normalised lexically (``/testbed/../../etc`` is ``/etc``);
3. symbolic links are followed component by component *inside the sandbox*: a link whose
   target is absolute (``/testbed/pkg/x.py``) points into the sandbox, not into the host
   filesystem; a relative target is taken relative to the link's directory; at most
   :data:`MAX_SYMLINK_HOPS` links are followed; a missing final component is allowed so
   that new files can be created;
4. the result must lie under one of the mounts, else :class:`PathOutsideWorkspace`.

Only host paths that are already known to lie inside a mount's host directory are ever
inspected (``os.lstat`` / ``os.readlink``), so resolving a hostile path never touches the
host outside the mounts.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "MAX_SYMLINK_HOPS",
    "PathOutsideWorkspace",
    "SandboxPaths",
    "SymlinkLoop",
]

MAX_SYMLINK_HOPS = 40


class PathOutsideWorkspace(ValueError):
    """A sandbox path (or host path) that does not lie under any mount of the sandbox."""

    def __init__(self, path: str, roots: Iterable[str] = (), reason: str = "") -> None:
        self.path = str(path)
        self.roots = tuple(roots)
        where = ", ".join(self.roots) if self.roots else "the workspace"
        message = reason or (
            f"The path '{self.path}' is outside the workspace: only paths under {where} "
            "can be accessed."
        )
        super().__init__(message)


class SymlinkLoop(PathOutsideWorkspace):
    """Resolving a path needed more than :data:`MAX_SYMLINK_HOPS` symbolic links."""

    def __init__(self, path: str, roots: Iterable[str] = ()) -> None:
        super().__init__(
            path,
            roots,
            reason=(
                f"The path '{path}' could not be resolved: too many levels of symbolic links "
                f"(more than {MAX_SYMLINK_HOPS})."
            ),
        )


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _lexical(parts: Iterable[str]) -> list[str]:
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return out


def _join(parts: list[str]) -> str:
    return "/" + "/".join(parts)


class SandboxPaths:
    """Translate sandbox paths to host paths and back.

    Args:
        mounts: sandbox root -> host directory, e.g.
            ``{"/testbed": Path(merged), "/tmp": Path(session_tmp)}``.
        workdir: the default current directory for relative paths.
    """

    def __init__(self, mounts: Mapping[str, Path], workdir: str = "/testbed") -> None:
        if not mounts:
            raise ValueError("SandboxPaths needs at least one mount")
        table: list[tuple[tuple[str, ...], Path]] = []
        for root, host in mounts.items():
            if not str(root).startswith("/"):
                raise ValueError(f"sandbox mount root must be absolute: {root!r}")
            parts = tuple(_lexical(_split(str(root))))
            if not parts:
                raise ValueError("the sandbox root '/' cannot be a mount")
            table.append((parts, Path(os.path.abspath(host))))
        # Longest root first, so that nested mounts win over their parents.
        table.sort(key=lambda item: len(item[0]), reverse=True)
        self._mounts = table
        self._roots = tuple(_join(list(parts)) for parts, _ in table)
        self.workdir = self.normalize(workdir, "/")

    # ------------------------------------------------------------------ helpers
    @property
    def roots(self) -> tuple[str, ...]:
        """The sandbox roots, longest first."""
        return self._roots

    @property
    def mounts(self) -> dict[str, Path]:
        return {_join(list(parts)): host for parts, host in self._mounts}

    def _mount_of(self, parts: list[str]) -> tuple[tuple[str, ...], Path] | None:
        for root, host in self._mounts:
            if tuple(parts[: len(root)]) == root:
                return root, host
        return None

    def _host_of(self, parts: list[str]) -> Path | None:
        found = self._mount_of(parts)
        if found is None:
            return None
        root, host = found
        rest = parts[len(root) :]
        return host.joinpath(*rest) if rest else host

    def _outside(self, path: str) -> PathOutsideWorkspace:
        return PathOutsideWorkspace(path, sorted(self._roots))

    # ------------------------------------------------------------------ public API
    def normalize(self, path: str, cwd: str | None = None) -> str:
        """Join ``path`` with ``cwd`` and normalise ``.``/``..`` lexically (no symlinks)."""
        path = str(path)
        if path.startswith("/"):
            parts = _split(path)
        else:
            base = cwd if cwd is not None else self.workdir
            if not str(base).startswith("/"):
                base = posixpath.join(self.workdir, str(base))
            parts = _split(str(base)) + _split(path)
        return _join(_lexical(parts))

    def resolve(self, path: str, cwd: str | None = None) -> str:
        """The canonical sandbox path of ``path``: symlinks followed in the sandbox namespace.

        Raises:
            PathOutsideWorkspace: the result (or a link on the way) leaves every mount.
            SymlinkLoop: more than :data:`MAX_SYMLINK_HOPS` links were followed.
        """
        original = str(path)
        pending = _lexical(_split(self.normalize(original, cwd)))
        pending.reverse()  # a stack: the next component is at the end
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = [*resolved, part]
            found = self._mount_of(candidate)
            if found is None:
                # Not inside a mount: nothing to inspect on the host. Keep it lexically;
                # either a later ".." brings the path back, or the final check refuses it.
                resolved = candidate
                continue
            root, _host = found
            if len(candidate) == len(root):
                # A mount root itself is a directory of the sandbox, never a link.
                resolved = candidate
                continue
            host_path = self._host_of(candidate)
            assert host_path is not None
            try:
                info = os.lstat(host_path)
            except (OSError, ValueError):
                # Missing (or a file used as a directory): keep it; later components are
                # still inspected one by one, so a ".." that climbs back out of the
                # missing part cannot smuggle an unresolved link through.
                resolved = candidate
                continue
            if not stat.S_ISLNK(info.st_mode):
                resolved = candidate
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise SymlinkLoop(original, sorted(self._roots))
            try:
                target = os.readlink(host_path)
            except (OSError, ValueError):
                resolved = candidate
                continue
            target_parts = _split(target)
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed(target_parts))
        if self._mount_of(resolved) is None:
            raise self._outside(original)
        return _join(resolved)

    def to_host(self, path: str, cwd: str | None = None) -> Path:
        """The host path behind the sandbox path ``path`` (relative to ``cwd``)."""
        canonical = self.resolve(path, cwd)
        host = self._host_of(_split(canonical))
        if host is None:  # pragma: no cover - resolve() already checked
            raise self._outside(str(path))
        return host

    def read_file(self, path: str, cwd: str | None = None, *, limit: int) -> bytes | None:
        """The bytes of the regular file at ``path``, or None when it is missing, not a
        regular file or larger than ``limit`` bytes.

        The path is resolved in the sandbox's namespace, then opened from its mount's host
        folder one component at a time without following any link: processes of a command
        that is still running can swap a component for a link between the two, and then the
        read fails instead of reaching a host file. A FIFO is never opened for reading.
        """
        try:
            canonical = self.resolve(path, cwd)
        except PathOutsideWorkspace:
            return None
        parts = _split(canonical)
        found = self._mount_of(parts)
        if found is None:  # pragma: no cover - resolve() already checked
            return None
        root, host = found
        rest = parts[len(root) :]
        if not rest:
            return None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            for name in rest[:-1]:
                next_fd = os.open(name, flags | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            file_fd = os.open(rest[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            info = os.fstat(file_fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                return None
            with os.fdopen(file_fd, "rb", closefd=False) as handle:
                data = handle.read(limit + 1)
            return data if len(data) <= limit else None
        except OSError:
            return None
        finally:
            os.close(file_fd)

    def is_inside(self, path: str, cwd: str | None = None) -> bool:
        """Whether ``path`` resolves to a location under one of the mounts."""
        try:
            self.resolve(path, cwd)
        except PathOutsideWorkspace:
            return False
        return True

    def __repr__(self) -> str:
        mounts = ", ".join(f"{_join(list(p))!r}: {str(h)!r}" for p, h in self._mounts)
        return f"SandboxPaths({{{mounts}}}, workdir={self.workdir!r})"
