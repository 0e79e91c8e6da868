"""Syncing a session's workspace and ``/tmp`` into its container (see the package doc).

Only what changed since the last sync goes over: written files and symlinks in one tar
archive, deleted paths removed, reverted paths put back from the base checkout (or with
``git checkout`` in the container). Files are read without following symlinks.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.execution.docker.common import (
    CONTROL_DIR,
    MAX_ARGS_BYTES,
    REVERT_MARKER,
    REVERT_SCRIPT,
    ContainerGone,
    DockerFailure,
    SessionState,
    is_gone,
)
from sweworld.sandbox.executor import ExecutionRequest

DELETED = ("deleted",)


@dataclass
class _Entry:
    """A file or symlink read (without following links) for the sync archive."""

    signature: tuple
    mode: int
    mtime: float
    data: bytes = b""
    link: str | None = None
    directory: bool = False


@dataclass
class _SyncPlan:
    # (arcname, root, relative path, synced key or None, counter or None): read when packed
    send: list[tuple[str, Path, str, tuple[str, str] | None, str | None]] = field(
        default_factory=list
    )
    remove: set[str] = field(default_factory=set)  # container paths
    git_revert: list[str] = field(default_factory=list)  # relative to the workdir
    record: dict[tuple[str, str], tuple | None] = field(default_factory=dict)  # None: forget
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "sent": 0,
            "deleted": 0,
            "reverted": 0,
            "tmp_sent": 0,
            "tmp_deleted": 0,
            "dirs_sent": 0,
            "bytes": 0,
            "skipped": 0,
        }
    )


class WorkspaceSync:
    """The executor's sync of a session's files into its container, before each command."""

    def _sync(
        self, client: Any, container: Any, state: SessionState, request: ExecutionRequest
    ) -> dict[str, int]:
        """Bring the container's tree and ``/tmp`` in line with the session's."""
        plan = _SyncPlan()
        try:
            if request.workspace is not None and request.changes is not None:
                self._plan_workspace(plan, state, request)
            if request.tmp is not None:
                self._plan_tmp(plan, state, Path(request.tmp))
        except Exception as exc:
            raise DockerFailure(
                f"sweworld: `{request.command}` was not run: reading the session's changes "
                f"failed: {type(exc).__name__}: {exc}\n",
                image=state.image,
            ) from exc
        try:
            self._apply(client, container, plan, request)
        except ContainerGone:
            raise
        except Exception as exc:
            self._drop_container(state)  # its tree is in an unknown state: start afresh
            raise DockerFailure(
                f"sweworld: `{request.command}` was not run: syncing the session's files into "
                f"the container failed: {type(exc).__name__}: {exc}\n",
                image=state.image,
            ) from exc
        for key, signature in plan.record.items():
            if signature is None:
                state.synced.pop(key, None)
            else:
                state.synced[key] = signature
        return plan.counts

    def _apply(self, client: Any, container: Any, plan: _SyncPlan, request: ExecutionRequest):
        if plan.remove:
            self._exec_checked(client, container, ["rm", "-rf", "--"], _outermost(plan.remove))
        if plan.git_revert:
            ref = request.base_commit or getattr(request.task, "base_commit", "") or "HEAD"
            prefix = ["bash", "-c", REVERT_SCRIPT, REVERT_MARKER, self.workdir, ref]
            self._exec_checked(client, container, prefix, plan.git_revert)
        if not (plan.send or request.stdin):
            return
        with tempfile.TemporaryFile() as fh:
            with tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for arcname, root, rel, key, counter in plan.send:
                    entry = _read_entry(root, rel)
                    if entry is None:  # gone since it was listed
                        if key is not None:
                            plan.record[key] = None
                        plan.counts["skipped"] += 1
                        continue
                    _add_to_tar(tar, arcname, entry)
                    if key is not None:
                        plan.record[key] = entry.signature
                    if counter is not None:
                        plan.counts[counter] += 1
                    plan.counts["bytes"] += len(entry.data)
                if request.stdin:
                    stdin = _Entry((), 0o600, time.time(), data=bytes(request.stdin))
                    _add_to_tar(tar, f"{CONTROL_DIR.lstrip('/')}/stdin", stdin)
            fh.seek(0)
            try:
                ok = container.put_archive("/", fh)
            except Exception as exc:
                if is_gone(exc):
                    raise ContainerGone from exc
                raise
        if ok is False:
            raise RuntimeError("the engine refused the archive (put_archive returned False)")

    def _plan_workspace(
        self, plan: _SyncPlan, state: SessionState, request: ExecutionRequest
    ) -> None:
        root = Path(request.workspace)  # type: ignore[arg-type]
        base = Path(request.base) if request.base is not None else None
        changes = request.changes()  # type: ignore[misc]
        written = [p for p in getattr(changes, "written", ()) if safe_rel(p)]
        deleted = [p for p in getattr(changes, "deleted", ()) if safe_rel(p)]
        dirs = [p for p in getattr(changes, "dirs", ()) if safe_rel(p)]
        arc_root = self.workdir.lstrip("/")
        for rel in dirs:  # new directories, empty ones included (a command may write there)
            key = ("w", rel)
            signature = _directory_signature(root, rel)
            if signature is not None and state.synced.get(key) != signature:
                plan.send.append((f"{arc_root}/{rel}", root, rel, key, "dirs_sent"))
        for rel in written:
            key = ("w", rel)
            signature = _signature(root, rel)
            if signature is None:  # gone since, or reached through a symlink: not sent
                plan.record[key] = None
                plan.counts["skipped"] += 1
                continue
            if state.synced.get(key) != signature:
                plan.send.append((f"{arc_root}/{rel}", root, rel, key, "sent"))
                if base is not None and "/" in rel:
                    self._plan_parents(plan, state, base, rel)
        for rel in deleted:
            key = ("w", rel)
            if state.synced.get(key) == DELETED:
                continue
            plan.remove.add(f"{self.workdir}/{_first_missing(root, rel)}")
            plan.record[key] = DELETED
            plan.counts["deleted"] += 1
        current = set(written) | set(deleted) | set(dirs)
        for (kind, rel), sent in list(state.synced.items()):
            if kind != "w" or rel in current:
                continue
            plan.record[(kind, rel)] = None
            plan.counts["reverted"] += 1
            if base is None:
                plan.git_revert.append(rel)
                continue
            if _signature(base, rel) is not None:
                plan.send.append((f"{arc_root}/{rel}", base, rel, None, None))
            elif not os.path.lexists(root / rel):
                plan.remove.add(f"{self.workdir}/{_first_missing(root, rel)}")
            elif sent != DELETED and _is_directory(base, rel):
                # a file or symlink sent where the base has a directory, now back: remove it
                # (the base's files beneath, deleted then, come back as reverted files;
                # sent through a symlink left in place they would land in its target)
                plan.remove.add(f"{self.workdir}/{rel}")

        for (kind, rel), _ in list(state.synced.items()):
            if kind == "d" and not _is_directory(root, rel):  # the base's file is back
                plan.record[(kind, rel)] = None
                if base is not None and rel not in current and _signature(base, rel):
                    plan.send.append((f"{arc_root}/{rel}", base, rel, None, None))

    def _plan_parents(self, plan: _SyncPlan, state: SessionState, base: Path, rel: str):
        """A file below a path that is a file or symlink in the base (the session made a
        directory of it): the container's file goes first, once (key ``("d", path)``)."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            key = ("d", parent)
            if key in state.synced or key in plan.record:
                continue
            if _signature(base, parent) is not None:
                plan.remove.add(f"{self.workdir}/{parent}")
                plan.record[key] = DELETED
                return

    def _plan_tmp(self, plan: _SyncPlan, state: SessionState, tmp: Path) -> None:
        current = dict(_walk_signatures(tmp))
        for rel, signature in current.items():
            key = ("t", rel)
            if state.synced.get(key) != signature:
                plan.send.append((f"tmp/{rel}", tmp, rel, key, "tmp_sent"))
        for kind, rel in list(state.synced):
            if kind == "t" and rel not in current:
                plan.remove.add(f"/tmp/{_first_missing(tmp, rel)}")
                plan.record[(kind, rel)] = None
                plan.counts["tmp_deleted"] += 1

    def _exec_checked(
        self, client: Any, container: Any, prefix: list[str], args: Iterable[str]
    ) -> None:
        """Run ``prefix + args`` in batches that keep each argv small."""
        for batch in batches(list(args), MAX_ARGS_BYTES):
            try:
                exec_id = client.api.exec_create(container.id, [*prefix, *batch])["Id"]
                output = client.api.exec_start(exec_id)
                code = client.api.exec_inspect(exec_id).get("ExitCode")
            except Exception as exc:
                if is_gone(exc):
                    raise ContainerGone from exc
                raise
            if code not in (0, None):
                text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
                raise RuntimeError(f"`{prefix[0]}` exited with {code}: {str(text)[-500:]}")


def safe_rel(rel: str) -> bool:
    """``rel`` is a relative path without empty, ``.`` or ``..`` components."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def open_parent(root: Path, rel: str) -> tuple[int, str] | None:
    """An fd of ``rel``'s directory, reached from ``root`` without following any symlink."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def stat_signature(st: os.stat_result) -> tuple:
    """What tells a file or symlink sent from a changed one: mode, size, mtime."""
    return (st.st_mode, st.st_size, st.st_mtime_ns)


def _signature(root: Path, rel: str) -> tuple | None:
    opened = open_parent(root, rel)
    if opened is None:
        return None
    fd, name = opened
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        return None
    return stat_signature(st)


def _directory_signature(root: Path, rel: str) -> tuple | None:
    """The signature of directory ``rel`` below ``root`` (None: not a directory there)."""
    opened = open_parent(root, rel)
    if opened is None:
        return None
    fd, name = opened
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    return dir_signature(st) if stat.S_ISDIR(st.st_mode) else None


def _is_directory(root: Path, rel: str) -> bool:
    """Whether ``rel`` below ``root`` is a directory (no symlink followed on the way)."""
    opened = open_parent(root, rel)
    if opened is None:
        return False
    fd, name = opened
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_entry(root: Path, rel: str) -> _Entry | None:
    """Read a regular file or a symlink below ``root`` without following symlinks."""
    if not safe_rel(rel):
        return None
    opened = open_parent(root, rel)
    if opened is None:
        return None
    dir_fd, name = opened
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return _Entry(dir_signature(st), stat.S_IMODE(st.st_mode), st.st_mtime, directory=True)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dir_fd)
            return _Entry(stat_signature(st), stat.S_IMODE(st.st_mode), st.st_mtime, link=target)
        if not stat.S_ISREG(st.st_mode):
            return None
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            data = fh.read()
        return _Entry(stat_signature(st), stat.S_IMODE(st.st_mode), st.st_mtime, data=data)
    except OSError:
        return None
    finally:
        os.close(dir_fd)


def dir_signature(st: os.stat_result) -> tuple:
    """A directory's signature: its mode."""
    return ("dir", stat.S_IMODE(st.st_mode))  # not its mtime: that moves with its entries


def _walk_signatures(root: Path, prefix: str = "") -> Iterator[tuple[str, tuple]]:
    """(relative path, signature) of every regular file, symlink and directory below
    ``root`` (directories too: a command may write into an empty one)."""
    try:
        entries = list(os.scandir(root / prefix if prefix else root))
    except OSError:
        return
    for entry in entries:
        rel = f"{prefix}/{entry.name}" if prefix else entry.name
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            yield rel, dir_signature(st)
            yield from _walk_signatures(root, rel)
        elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            yield rel, stat_signature(st)


def _first_missing(root: Path, rel: str) -> str:
    """The shortest prefix of ``rel`` that no longer exists below ``root``."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        if not os.path.lexists(root / prefix):
            return prefix
    return rel


def _outermost(paths: Iterable[str]) -> list[str]:
    """Sorted paths without those inside another one of them."""
    kept: set[str] = set()
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        parts = path.split("/")
        if not any("/".join(parts[:i]) in kept for i in range(1, len(parts))):
            kept.add(path)
    return sorted(kept)


def batches(args: list[str], limit: int) -> Iterator[list[str]]:
    """``args`` in consecutive lists of at most ``limit`` bytes each (one arg at least)."""
    batch: list[str] = []
    size = 0
    for arg in args:
        if batch and size + len(arg) + 1 > limit:
            yield batch
            batch, size = [], 0
        batch.append(arg)
        size += len(arg) + 1
    if batch:
        yield batch


def _add_to_tar(tar: tarfile.TarFile, arcname: str, entry: _Entry) -> None:
    info = tarfile.TarInfo(arcname)
    info.mode = entry.mode
    info.mtime = entry.mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if entry.directory:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    if entry.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link
        tar.addfile(info)
        return
    info.size = len(entry.data)
    tar.addfile(info, io.BytesIO(entry.data))
