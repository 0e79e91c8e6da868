"""Read-only views of a workspace state for the outcome model's features.

A :class:`FileState` answers three questions, cheaply and without running anything: the text
of a file now, its text at the base commit, and which paths differ from the base. Two
sources build one:

* :meth:`FileState.from_dirs`: a live session (the executor's request: the merged workspace,
  the base checkout and the session's ``changes()``);
* :meth:`FileState.from_diff`: a stored record (a base checkout on disk plus the record's
  ``git diff`` applied in memory with :func:`sweworld.tasks.patches.apply_hunks`).

Reads are bounded (:data:`MAX_FILE_BYTES` per file) and cached, so features stay linear in
the size of what a command reaches.
"""

from __future__ import annotations

import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweworld.tasks.patches import apply_hunks, patch_hunks, split_patch

__all__ = ["MAX_FILE_BYTES", "WORKDIR", "FileState", "apply_patch_text", "diff_overlay"]

WORKDIR = "/testbed"
#: Files larger than this are treated as unreadable (features stay bounded).
MAX_FILE_BYTES = 1_000_000


def _read(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


class _BaseReads:
    """Texts of base-checkout files shared by every state on that checkout (a checkout does
    not change once extracted): the module resolution of one record, step or session is then
    a dictionary hit for the next. Bounded by the characters held (least recently used out)."""

    def __init__(self, max_chars: int = 200_000_000):
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def read(self, base: Path, root: str, rel: str) -> str | None:
        key = (root, rel)
        with self._lock:
            if key in self._texts:
                self._texts.move_to_end(key)
                return self._texts[key]
        text = _read(base / rel)
        with self._lock:
            if key not in self._texts:
                self._texts[key] = text
                self._chars += len(text or "") + 64
                while self._chars > self.max_chars and self._texts:
                    _, old = self._texts.popitem(last=False)
                    self._chars -= len(old or "") + 64
        return text


_BASE_READS = _BaseReads()


def _noise(rel: str) -> bool:
    """Paths a run leaves behind that say nothing about the agent's change (``.git``,
    ``.pytest_cache``, ``__pycache__``, other dot folders)."""
    parts = rel.split("/")
    return any(p.startswith(".") or p == "__pycache__" for p in parts[:-1]) or rel.endswith(".pyc")


def apply_patch_text(base_text: str | None, hunks: list) -> str | None:
    """``base_text`` with one file's ``hunks`` applied (offsets allowed); None when they do
    not apply. A new file has ``base_text`` None."""
    lines = (base_text or "").splitlines(keepends=True)
    applied = apply_hunks(lines, hunks, offsets=True)
    if applied is None:
        return None
    return "".join(applied[0])


def diff_overlay(base: Path, diff: str) -> dict[str, str | None]:
    """relative path -> text after ``diff`` is applied to the checkout ``base`` (None: deleted
    or its hunks do not apply); noise paths (caches) are left out."""
    overlay: dict[str, str | None] = {}
    try:
        parts = split_patch(diff or "")
    except ValueError:
        parts = []
    hunks = patch_hunks(diff)
    for part in parts:
        if _noise(part.path):
            continue
        if part.status == "deleted":
            overlay[part.path] = None
            continue
        if part.old_path != part.path:
            overlay[part.old_path] = None
        old = _read(Path(base) / part.old_path) if part.status != "added" else None
        overlay[part.path] = apply_patch_text(old, hunks.get(part.path, []))
    return overlay


class FileState:
    """Current and base text of workspace files, by path relative to ``/testbed``.

    Args:
        current: reads a relative path now (None: absent or unreadable).
        base: reads a relative path at the base commit.
        changed: relative paths that differ from the base (written or deleted).
        tmp: reads a path under the session's ``/tmp`` (relative to it).
    """

    def __init__(
        self,
        current: Callable[[str], str | None],
        base: Callable[[str], str | None],
        changed: Iterable[str],
        tmp: Callable[[str], str | None] | None = None,
    ):
        self._current_reader = current
        self._base_reader = base
        self._tmp_reader = tmp
        self.changed = sorted({p for p in changed if not _noise(p)})
        self._current: dict[str, str | None] = {}
        self._base: dict[str, str | None] = {}
        #: values derived from this state by the feature functions, kept for the rest of
        #: the step (e.g. which file a module name resolves to)
        self.memo: dict[Any, Any] = {}

    # ------------------------------------------------------------------ builders

    @classmethod
    def from_dirs(
        cls,
        workspace: Path,
        base: Path | None,
        changed: Iterable[str],
        tmp: Path | None = None,
        *,
        exact_changes: bool = False,
    ) -> FileState:
        """A live workspace (``workspace`` is ``/testbed`` on the host). With
        ``exact_changes`` (``changed`` is every path that differs from the base), a file
        not in ``changed`` is read from the base checkout through a cache every state on
        that checkout shares."""
        ws, b = Path(workspace), Path(base) if base is not None else None
        changed = list(changed)
        tmp_reader = (lambda rel: _read(Path(tmp) / rel)) if tmp is not None else None
        if b is None:
            return cls(lambda rel: _read(ws / rel), lambda rel: None, changed, tmp_reader)
        root = str(b)
        if not exact_changes:
            return cls(
                lambda rel: _read(ws / rel),
                lambda rel: _BASE_READS.read(b, root, rel),
                changed,
                tmp_reader,
            )
        touched = {posixpath.normpath(p) for p in changed}

        def current(rel: str) -> str | None:
            return _read(ws / rel) if rel in touched else _BASE_READS.read(b, root, rel)

        return cls(current, lambda rel: _BASE_READS.read(b, root, rel), changed, tmp_reader)

    @classmethod
    def from_diff(cls, base: Path, diff: str, tmp_files: dict[str, str] | None = None) -> FileState:
        """A base checkout on disk with ``diff`` applied in memory. Files whose hunks do not
        apply read as absent (the record's state cannot be rebuilt there)."""
        base = Path(base)
        overlay = diff_overlay(base, diff)
        tmp = dict(tmp_files or {})

        def current(rel: str) -> str | None:
            if rel in overlay:
                return overlay[rel]
            return _read(base / rel)

        return cls(current, lambda rel: _read(base / rel), overlay, tmp.get)

    # ------------------------------------------------------------------ reads

    # ------------------------------------------------------------------ reads

    def text(self, rel: str) -> str | None:
        """The file's text now."""
        rel = posixpath.normpath(rel)
        if rel not in self._current:
            self._current[rel] = self._current_reader(rel)
        return self._current[rel]

    def base_text(self, rel: str) -> str | None:
        """The file's text at the base commit."""
        rel = posixpath.normpath(rel)
        if rel not in self._base:
            self._base[rel] = self._base_reader(rel)
        return self._base[rel]

    def sandbox_text(self, path: str, cwd: str = WORKDIR) -> tuple[str, str | None]:
        """(kind, text) of a sandbox path: kind ``workspace`` (then the text is the
        workspace's), ``tmp``, or ``outside``."""
        full = posixpath.normpath(posixpath.join(cwd, path))
        if full == WORKDIR or full.startswith(WORKDIR + "/"):
            return "workspace", self.text(posixpath.relpath(full, WORKDIR))
        if full.startswith("/tmp/"):
            rel = full[len("/tmp/") :]
            return "tmp", self._tmp_reader(rel) if self._tmp_reader else None
        return "outside", None

    def relative(self, path: str, cwd: str = WORKDIR) -> str | None:
        """A sandbox path relative to ``/testbed``, or None outside it."""
        full = posixpath.normpath(posixpath.join(cwd, path))
        if full == WORKDIR or full.startswith(WORKDIR + "/"):
            return posixpath.relpath(full, WORKDIR)
        return None
