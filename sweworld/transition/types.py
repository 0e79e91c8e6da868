"""Values shared by the transition model's parts: the prediction and the view of a workspace."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweworld.sandbox.paths import PathOutsideWorkspace, SandboxPaths

WORKDIR = "/testbed"
MAX_READ_BYTES = 2 * 1024 * 1024
# Changed files up to this size are hashed by content; larger ones by size and mtime.
MAX_HASHED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Prediction:
    """What a command prints and returns: the SWT target (``reasoning`` is optional)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    reasoning: str = ""

    def to_dict(self, *, with_reasoning: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not with_reasoning:
            out.pop("reasoning")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        return cls(
            stdout=str(data.get("stdout", "") or ""),
            stderr=str(data.get("stderr", "") or ""),
            exit_code=int(data.get("exit_code", 0) or 0),
            reasoning=str(data.get("reasoning", "") or ""),
        )


class WorkspaceView:
    """Read-only access to a session's files as a command sees them (never runs anything).

    Paths are sandbox paths (``/testbed/...``, ``/tmp/...``) or relative to ``cwd``; symlinks
    are resolved inside the sandbox's namespace, so nothing outside the workspace is read.
    ``base`` is the untouched base checkout (for diffs); ``changes`` returns the workspace's
    :class:`~sweworld.sandbox.workspace.WorkspaceChanges`.
    """

    def __init__(
        self,
        root: Path,
        *,
        tmp: Path | None = None,
        base: Path | None = None,
        cwd: str = WORKDIR,
        changes: Any = None,
    ):
        mounts = {WORKDIR: Path(root)}
        if tmp is not None:
            mounts["/tmp"] = Path(tmp)
        self.paths = SandboxPaths(mounts, WORKDIR)
        self.root = Path(root)
        self.tmp = tmp
        self.base = base
        self.cwd = cwd
        self._changes = changes

    @classmethod
    def from_request(cls, request: Any) -> WorkspaceView:
        return cls(
            request.workspace,
            tmp=request.tmp,
            base=request.base,
            cwd=request.cwd,
            changes=request.changes,
        )

    # -------------------------------------------------------------- paths

    def resolve(self, path: str) -> str | None:
        """Canonical sandbox path, or None when it leaves the workspace."""
        try:
            return self.paths.resolve(path, self.cwd)
        except PathOutsideWorkspace:
            return None

    def host(self, path: str) -> Path | None:
        try:
            return self.paths.to_host(path, self.cwd)
        except PathOutsideWorkspace:
            return None

    def exists(self, path: str) -> bool:
        host = self.host(path)
        return host is not None and host.exists()

    def is_file(self, path: str) -> bool:
        host = self.host(path)
        return host is not None and host.is_file()

    def is_dir(self, path: str) -> bool:
        host = self.host(path)
        return host is not None and host.is_dir()

    def listdir(self, path: str) -> list[str]:
        host = self.host(path)
        if host is None or not host.is_dir():
            return []
        return sorted(os.listdir(host))

    def read_text(self, path: str, limit: int = MAX_READ_BYTES) -> str | None:
        """Text of a file, or None when it is missing, not a regular file, binary, or larger
        than ``limit`` bytes."""
        data = self.paths.read_file(path, self.cwd, limit=limit)
        if data is None or b"\0" in data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def iter_files(
        self, under: str = WORKDIR, suffix: str = ".py", limit: int = 20000
    ) -> Iterator[str]:
        """Sandbox paths of files below ``under`` ending in ``suffix`` (hidden dirs skipped)."""
        host = self.host(under)
        if host is None or not host.is_dir():
            return
        start = self.resolve(under) or under
        count = 0
        for dirpath, dirnames, filenames in os.walk(host):
            dirnames[:] = sorted(
                d for d in dirnames if not d.startswith(".") and d != "__pycache__"
            )
            rel = os.path.relpath(dirpath, host)
            for name in sorted(filenames):
                if name.endswith(suffix):
                    yield os.path.normpath(os.path.join(start, rel, name))
                    count += 1
                    if count >= limit:
                        return

    # -------------------------------------------------------------- state

    def changed_paths(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(written, deleted) paths relative to /testbed; empty when unknown."""
        if self._changes is None:
            return (), ()
        changes = self._changes()
        return tuple(changes.written), tuple(changes.deleted)

    def diff(self, limit: int = 200_000) -> str:
        """The agent's changes against the base as a unified diff (text files only),
        computed from the files themselves."""
        from sweworld.tasks.patches import make_unified_diff

        written, deleted = self.changed_paths()
        parts: list[str] = []
        size = 0
        for rel in sorted(set(written) | set(deleted)):
            old = self._base_text(rel)
            new = None if rel in deleted else self.read_text(f"{WORKDIR}/{rel}")
            if rel not in deleted and new is None:
                continue  # binary or unreadable
            if old == new:
                continue
            piece = make_unified_diff(rel, old, new)
            size += len(piece)
            if size > limit:
                parts.append(f"... (diff truncated after {limit} characters)\n")
                break
            parts.append(piece)
        return "".join(parts)

    def _base_text(self, rel: str) -> str | None:
        if self.base is None:
            return None
        path = self.base / rel
        try:
            if not path.is_file() or path.is_symlink():
                return None
            data = path.read_bytes()
            return None if b"\0" in data else data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _stat_key(self, rel: str) -> bytes:
        """Size, type and modification time of a file too large (or too odd) to hash."""
        host = self.host(f"{WORKDIR}/{rel}")
        try:
            info = os.lstat(host) if host is not None else None
        except OSError:
            info = None
        if info is None:
            return b"?"
        return f"{info.st_mode:o}:{info.st_size}:{info.st_mtime_ns}".encode()

    def _base_bytes(self, rel: str) -> bytes | None:
        if self.base is None:
            return None
        path = self.base / rel
        try:
            return None if path.is_symlink() or not path.is_file() else path.read_bytes()
        except OSError:
            return None

    def state_hash(self, extra_paths: tuple[str, ...] = ()) -> str:
        """A hash of everything that differs from the base (and of ``extra_paths``, such as
        files in /tmp): equal hashes mean the same workspace state."""
        digest = hashlib.sha256()
        written, deleted = self.changed_paths()
        for rel in sorted(written):
            data = self.paths.read_file(f"{WORKDIR}/{rel}", limit=MAX_HASHED_BYTES)
            if data is not None and self._base_bytes(rel) == data:
                continue  # rewritten with the base's own content: not a change
            digest.update(b"W" + rel.encode() + b"\0")
            if data is not None:
                digest.update(hashlib.sha256(data).digest())
            else:
                digest.update(self._stat_key(rel))
        for rel in sorted(deleted):
            digest.update(b"D" + rel.encode() + b"\0")
        for path in sorted(extra_paths):
            digest.update(b"X" + path.encode() + b"\0")
            text = self.read_text(path)
            digest.update(hashlib.sha256((text or "").encode()).digest())
        return digest.hexdigest()
