"""Copying back what a command changed in its container into the session (see the package doc).

After each command: one exec lists every path below the container's tree (``.git`` left out)
and ``/tmp`` whose status changed since the marker the run script touched just before the
command (``find -cnewer``: writes, renames, ``chmod``, new links); a second lists the
children of the directories that changed (to see what was deleted) and everything below new
directories (a moved-in tree keeps its old times); the files are packed in one ``tar`` in the
container and fetched with ``get_archive``. Everything is capped: the paths listed
(``COPY_BACK_ENTRIES``; past it nothing is deleted, since a cut listing cannot tell a deleted
path from an unlisted one) and the bytes of files (``copy_back_bytes``); what is left out is
counted and named in the result's info.

Writing into the session follows the sync's care when reading: directories are opened one
component at a time without following symlinks; only regular files, directories and
symlinks are written (a hard link becomes a copy of its file, anything else is skipped); a
symlink comes back as a symlink, never as its target; setuid and setgid bits are dropped;
an entry that differs is replaced (unlinked first, so a hard link to another file in the
session never writes through to it). What was written is recorded as synced, so the next
command does not send it back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.execution.docker.common import (
    CHANGE_MARKER,
    COPY_BACK_ENTRIES,
    COPY_BACK_TAR,
    LIST_MARKER,
    LIST_SCRIPT,
    MAX_ARGS_BYTES,
    ContainerGone,
    SessionState,
    is_gone,
)
from sweworld.execution.docker.sync import (
    DELETED,
    batches,
    dir_signature,
    open_parent,
    safe_rel,
    stat_signature,
)
from sweworld.sandbox.executor import ExecutionRequest

_MAX_NAMED = 20  # skipped paths named in the info


@dataclass
class _Side:
    """One tree copied back: the container's path of it, the session's, its synced key."""

    key: str  # "w" (workspace) or "t" (tmp)
    container: str
    host: Path


@dataclass
class _CopyBack:
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "copied_back": 0,
            "copy_back_deleted": 0,
            "copy_back_bytes": 0,
            "copy_back_skipped": 0,
        }
    )
    skipped: list[str] = field(default_factory=list)

    def skip(self, path: str, reason: str) -> None:
        self.counts["copy_back_skipped"] += 1
        if len(self.skipped) < _MAX_NAMED:
            self.skipped.append(f"{path}: {reason}")


class CopyBack:
    """The executor's copy of a command's changes in the container back into the session."""

    copy_back_bytes: int
    workdir: str

    def _copy_back(
        self, client: Any, container: Any, state: SessionState, request: ExecutionRequest
    ) -> dict[str, Any]:
        """Bring what the command changed in the container into the session; the info."""
        sides = []
        if request.workspace is not None:
            sides.append(_Side("w", self.workdir, Path(request.workspace)))
        if request.tmp is not None:
            sides.append(_Side("t", "/tmp", Path(request.tmp)))
        result = _CopyBack()
        if not sides:
            return {"counts": result.counts}
        info: dict[str, Any] = {}
        try:
            self._copy_back_sides(client, container, state, sides, result)
        except ContainerGone:
            info["copy_back_error"] = "the container stopped"
        except Exception as exc:
            info["copy_back_error"] = f"{type(exc).__name__}: {exc}"
        info["counts"] = result.counts
        if result.skipped:
            info["copy_back_skipped"] = result.skipped
        return info

    def _copy_back_sides(
        self,
        client: Any,
        container: Any,
        state: SessionState,
        sides: list[_Side],
        result: _CopyBack,
    ) -> None:
        changed, complete = self._list(client, container, [f"={s.container}" for s in sides])
        if changed is None:
            raise RuntimeError("the change marker is missing in the container")
        located = [(p, t, n, _locate(sides, p)) for p, (t, n) in changed.items()]
        located = [(p, t, n, loc) for p, t, n, loc in located if loc is not None]
        # directories that changed: their children (deletions), or all below (new ones)
        ops = []
        for path, kind, _, (side, rel) in located:
            if kind == "d":
                exists = _lstat(side.host, rel)
                ops.append(path if exists and stat.S_ISDIR(exists.st_mode) else f"+{path}")
        children: dict[str, set[str]] = {}
        if ops:
            listed, more = self._list(client, container, ops)
            complete = complete and more
            shallow = {op for op in ops if not op.startswith("+")}
            for path, entry in (listed or {}).items():
                parent, _, name = path.rpartition("/")
                if parent in shallow:  # a child of a directory the session has
                    children.setdefault(parent, set()).add(name)
                else:  # below a new directory: all of it comes back
                    changed.setdefault(path, entry)
        if complete:
            for op in ops:
                if not op.startswith("+"):
                    self._delete_missing(state, sides, op, children.get(op, set()), result)
        else:
            result.skip("(deletions)", f"more than {COPY_BACK_ENTRIES} paths changed")
        fetch: list[str] = []
        budget = self.copy_back_bytes
        for path in sorted(changed, key=lambda p: (p.count("/"), p)):
            kind, size = changed[path]
            loc = _locate(sides, path)
            if loc is None or kind == "d":
                if loc is not None and loc[1]:
                    self._write_dir(state, loc[0], loc[1], result)
                continue
            if kind not in ("f", "l"):
                result.skip(path, "not a regular file, directory or symlink")
            elif kind == "f" and size > budget:
                result.skip(path, f"over the copy-back cap of {self.copy_back_bytes} bytes")
            else:
                budget -= size if kind == "f" else 0
                fetch.append(path)
        if fetch:
            self._fetch(client, container, state, sides, fetch, result)

    # ------------------------------------------------------------------ container side

    def _list(
        self, client: Any, container: Any, ops: list[str]
    ) -> tuple[dict[str, tuple[str, int]] | None, bool]:
        """Run the listing script; path -> (type, size), and whether the cap was not hit."""
        cmd = ["bash", "-c", LIST_SCRIPT, LIST_MARKER, str(COPY_BACK_ENTRIES + 1)]
        cmd += [CHANGE_MARKER, f"{self.workdir}/.git", *ops]
        code, out = _exec(client, container, cmd)
        if code == 3:
            return None, False
        records = [r for r in out.split(b"\0") if r]
        complete = len(records) <= COPY_BACK_ENTRIES
        entries: dict[str, tuple[str, int]] = {}
        for record in records[:COPY_BACK_ENTRIES]:
            kind, _, rest = record.partition(b" ")
            size, _, path = rest.partition(b" ")
            try:
                entries[path.decode("utf-8", "surrogateescape")] = (kind.decode(), int(size))
            except ValueError:
                continue
        return entries, complete

    def _fetch(
        self,
        client: Any,
        container: Any,
        state: SessionState,
        sides: list[_Side],
        paths: list[str],
        result: _CopyBack,
    ) -> None:
        names = [p.lstrip("/") for p in paths]
        for i, batch in enumerate(batches(names, MAX_ARGS_BYTES)):
            flag = "-cf" if i == 0 else "-rf"
            tar = ["tar", flag, COPY_BACK_TAR, "--no-recursion", "-C", "/"]
            _exec(client, container, [*tar, *batch])
        try:
            stream, _ = container.get_archive(COPY_BACK_TAR)
        except Exception as exc:
            if is_gone(exc):
                raise ContainerGone from exc
            raise
        limit = self.copy_back_bytes + 64 * 1024 * 1024  # headers and tar's own padding
        with tempfile.TemporaryFile() as fh:
            written = 0
            for chunk in stream:
                written += len(chunk)
                if written > limit:
                    raise RuntimeError("the copy-back archive grew past its cap")
                fh.write(chunk)
            fh.seek(0)
            with tarfile.open(fileobj=fh, mode="r:") as outer:
                member = next((m for m in outer if m.isfile()), None)
                inner_file = outer.extractfile(member) if member is not None else None
                if inner_file is None:
                    raise RuntimeError("the copy-back archive is empty")
                with tarfile.open(fileobj=inner_file, mode="r:") as inner:
                    for item in inner:
                        self._apply_member(state, sides, inner, item, result)

    # ------------------------------------------------------------------ session side

    def _apply_member(
        self,
        state: SessionState,
        sides: list[_Side],
        tar: tarfile.TarFile,
        member: tarfile.TarInfo,
        result: _CopyBack,
    ) -> None:
        path = "/" + member.name.strip("/")
        loc = _locate(sides, path)
        if loc is None or not loc[1]:
            result.skip(path, "outside the copied trees")
            return
        side, rel = loc
        mode = member.mode & 0o1777  # no setuid / setgid
        if member.isdir():
            self._write_dir(state, side, rel, result)
            return
        if member.issym():
            done = _write_entry(side.host, rel, mode, link=member.linkname)
        elif member.isfile() or member.islnk():
            handle = tar.extractfile(member)
            if handle is None:
                result.skip(path, "a hard link to a file not copied back")
                return
            data = handle.read()
            done = _write_entry(side.host, rel, mode, data=data)
            result.counts["copy_back_bytes"] += len(data) if done else 0
        else:
            result.skip(path, "not a regular file, directory or symlink")
            return
        if done is None:
            result.skip(path, "its directory is a symlink or not writable in the session")
            return
        if done:
            result.counts["copied_back"] += 1
        _record(state, side, rel)

    def _write_dir(self, state: SessionState, side: _Side, rel: str, result: _CopyBack) -> None:
        st = _lstat(side.host, rel)
        if st is not None and stat.S_ISDIR(st.st_mode):
            return
        if _write_entry(side.host, rel, 0o755, directory=True) is None:
            result.skip(f"{side.container}/{rel}", "its directory is a symlink in the session")
            return
        result.counts["copied_back"] += 1
        _record(state, side, rel)

    def _delete_missing(
        self,
        state: SessionState,
        sides: list[_Side],
        dir_path: str,
        present: set[str],
        result: _CopyBack,
    ) -> None:
        loc = _locate(sides, dir_path)
        if loc is None:
            return
        side, rel = loc
        opened = _open_dir(side.host, rel)
        if opened is None:
            return
        try:
            names = os.listdir(opened)
            for name in names:
                if name in present or (side.key == "w" and not rel and name == ".git"):
                    continue
                child = f"{rel}/{name}" if rel else name
                _remove(opened, name)
                result.counts["copy_back_deleted"] += 1
                prefix = child + "/"
                for key in [k for k in state.synced if k[0] == side.key]:
                    if key[1] == child or key[1].startswith(prefix):
                        state.synced.pop(key, None)
                if side.key == "w" and _base_has_file(state, child):
                    state.synced[(side.key, child)] = DELETED
        finally:
            os.close(opened)


# ---------------------------------------------------------------------- helpers


def _exec(client: Any, container: Any, cmd: list[str]) -> tuple[int | None, bytes]:
    try:
        exec_id = client.api.exec_create(container.id, cmd, stdout=True, stderr=False)["Id"]
        out = client.api.exec_start(exec_id)
        code = client.api.exec_inspect(exec_id).get("ExitCode")
    except Exception as exc:
        if is_gone(exc):
            raise ContainerGone from exc
        raise
    return code, out if isinstance(out, bytes) else b""


def _locate(sides: list[_Side], path: str) -> tuple[_Side, str] | None:
    """(tree, path relative to it) of a container path, None outside them or unsafe."""
    for side in sides:
        if path == side.container:
            return side, ""
        if path.startswith(side.container + "/"):
            rel = path[len(side.container) + 1 :]
            if not safe_rel(rel) or "\0" in rel:
                return None
            if side.key == "w" and (rel == ".git" or rel.startswith(".git/")):
                return None
            return side, rel
    return None


def _base_has(state: SessionState, rel: str) -> bool:
    """The session's base checkout has ``rel`` (a directory too)."""
    base = getattr(state, "base", None)
    return base is not None and os.path.lexists(Path(base) / rel)


def _base_has_file(state: SessionState, rel: str) -> bool:
    """The base has ``rel`` as a file or symlink (what ``changes().deleted`` lists)."""
    return _base_has(state, rel) and not stat.S_ISDIR(os.lstat(Path(state.base) / rel).st_mode)


def _open_dir(root: Path, rel: str, create: bool = False) -> int | None:
    """An fd of directory ``rel`` below ``root``, no symlink followed (``create``: make the
    missing directories, replacing a file or symlink in the way)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for part in rel.split("/") if rel else []:
        try:
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                if not create:
                    raise
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part, dir_fd=fd)
                os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nfd
    return fd


def _lstat(root: Path, rel: str) -> os.stat_result | None:
    if not rel:
        return os.stat(root)
    opened = open_parent(root, rel)
    if opened is None:
        return None
    fd, name = opened
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def _remove(dir_fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based: never follows a symlink
    else:
        os.unlink(name, dir_fd=dir_fd)


def _write_entry(
    root: Path,
    rel: str,
    mode: int,
    *,
    data: bytes | None = None,
    link: str | None = None,
    directory: bool = False,
) -> bool | None:
    """Put one entry at ``rel`` below ``root``: True written, False already so, None refused."""
    parent, _, name = rel.rpartition("/")
    fd = _open_dir(root, parent, create=True)
    if fd is None:
        return None
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if _same(fd, name, st, mode, data, link, directory):
                return False
            _remove(fd, name)
        if directory:
            os.mkdir(name, mode, dir_fd=fd)
        elif link is not None:
            os.symlink(link, name, dir_fd=fd)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            out = os.open(name, flags, 0o600, dir_fd=fd)
            with os.fdopen(out, "wb") as fh:
                fh.write(data or b"")
                os.fchmod(fh.fileno(), mode)
        return True
    except OSError:
        return None
    finally:
        os.close(fd)


def _same(fd, name, st, mode, data, link, directory) -> bool:
    if directory:
        return stat.S_ISDIR(st.st_mode)
    if link is not None:
        return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=fd) == link
    if not stat.S_ISREG(st.st_mode) or st.st_size != len(data or b""):
        return False
    if stat.S_IMODE(st.st_mode) != mode or st.st_nlink != 1:
        return False
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    with os.fdopen(src, "rb") as fh:
        return fh.read() == (data or b"")


def _record(state: SessionState, side: _Side, rel: str) -> None:
    """The session's entry now matches the container's: not to be sent again."""
    st = _lstat(side.host, rel)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        if side.key == "w" and _base_has(state, rel):
            return  # a directory of the base: never in the session's changes
        state.synced[(side.key, rel)] = dir_signature(st)
    else:
        state.synced[(side.key, rel)] = stat_signature(st)
