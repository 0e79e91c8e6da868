"""Resolve a candidate patch into a :class:`~sweworld.reward.types.CandidateView`.

:func:`view_candidate` parses a unified diff (never raising: a malformed diff gives a view
with ``parse_error``), collects each file's hunks as fragments and, when the task's base
checkout is given, applies the patch to a private copy of the touched files to read their
whole text before and after (``scope == "files"``).

Application follows the SWE-bench harness: ``git apply``, then ``patch --batch --fuzz=5
-p1``. Only the files the patch names are copied (same relative paths) into a temporary
folder, so the cost is a few file copies and one or two short subprocesses, whatever the
size of the repository. Paths that are absolute, contain ``..`` or point into ``.git`` are
refused before anything is written.

Hunks are :mod:`sweworld.tasks.patches`'s (:class:`Hunk`, :func:`parse_hunks`,
:func:`patch_hunks`, re-exported here), and so is the exact in-memory applier.

Test files (``ChangedFile.is_test``) follow :func:`is_test_file`: test code by
:func:`sweworld.tasks.patches.is_test_path`, plus test-runner configuration.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from sweworld.reward.types import CandidateView, ChangedFile
from sweworld.tasks.patch_paths import split_lines
from sweworld.tasks.patches import (
    FilePatch,
    Hunk,
    apply_hunks,
    is_test_path,
    parse_hunks,
    patch_hunks,
    split_patch,
)

__all__ = [
    "Hunk",
    "is_runner_config",
    "is_test_file",
    "parse_hunks",
    "patch_hunks",
    "view_candidate",
    "view_gold",
]

APPLY_TIMEOUT_S = 20.0
_MAX_MESSAGE = 600

# --------------------------------------------------------------------------------------
# Test files and test-runner configuration
# --------------------------------------------------------------------------------------

_ALWAYS_CONFIG = frozenset({"conftest.py", "pytest.ini", "tox.ini", "noxfile.py", "runtests.py"})
_SECTION_CONFIG = frozenset({"setup.cfg", "pyproject.toml"})
_SECTION_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def is_runner_config(path: str) -> bool | None:
    """Whether ``path`` is test-runner configuration by its name alone.

    True for ``conftest.py``, ``pytest.ini``, ``tox.ini``, ``noxfile.py`` and
    ``runtests.py`` (any folder: Django's ``tests/runtests.py``); None for ``setup.cfg`` and
    ``pyproject.toml`` (they are test configuration only where the change lies in a pytest
    section, see :func:`is_test_file`); False otherwise.
    """
    name = PurePosixPath(path.replace("\\", "/")).name
    if name in _ALWAYS_CONFIG:
        return True
    if name in _SECTION_CONFIG:
        return None
    return False


def _is_pytest_section(name: str | None) -> bool:
    return name is not None and "pytest" in name.lower()


def touches_pytest_config(hunks: Sequence[Hunk], before: str | None = None) -> bool:
    """Whether any changed line of ``hunks`` lies in a pytest section (``[pytest]``,
    ``[tool:pytest]``, ``[tool.pytest.ini_options]``) or itself mentions pytest.

    The section of a hunk's first line is read from ``before`` (whole file) when known,
    else from the hunk's header; section headers inside the hunk update it.
    """
    before_lines = before.split("\n") if before is not None else None
    for hunk in hunks:
        section: str | None = None
        if before_lines is not None:
            for line in reversed(before_lines[: max(hunk.old_start - 1, 0)]):
                match = _SECTION_RE.match(line)
                if match:
                    section = match.group(1)
                    break
        else:
            match = _SECTION_RE.match(hunk.section)
            section = match.group(1) if match else None
        for kind, text in hunk.lines:
            match = _SECTION_RE.match(text)
            if match:
                section = match.group(1)
            if kind != " " and (_is_pytest_section(section) or "pytest" in text.lower()):
                return True
    return False


def is_test_file(path: str, hunks: Sequence[Hunk] = (), before: str | None = None) -> bool:
    """The rule behind ``ChangedFile.is_test``.

    A file is a test file when :func:`~sweworld.tasks.patches.is_test_path` says so (test
    folders, ``test_*.py``, ``*_test.py``, ``conftest.py``, ...), when it is a test runner's
    own file (``pytest.ini``, ``tox.ini``, ``noxfile.py``, ``runtests.py``), or when it is
    ``setup.cfg`` / ``pyproject.toml`` and the change touches their pytest configuration
    (see :func:`touches_pytest_config`).
    """
    if is_test_path(path):
        return True
    config = is_runner_config(path)
    if config is None:
        return touches_pytest_config(hunks, before)
    return config


# --------------------------------------------------------------------------------------
# The view
# --------------------------------------------------------------------------------------


def _short(text: str, limit: int = _MAX_MESSAGE) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _unsafe_reason(path: str) -> str | None:
    if not path or path == "/dev/null":
        return "empty path"
    if "\0" in path:
        return "NUL byte in path"
    if path.startswith("/"):
        return "absolute path"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        return "empty path"
    if ".." in parts:
        return "'..' in path"
    if parts[0] == ".git":
        return "path inside .git"
    return None


def _decode(data: bytes, limit: int) -> tuple[str | None, str | None]:
    """(text, error) of a file's bytes."""
    if len(data) > limit:
        return None, f"too large ({len(data)} bytes > {limit})"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"


def _status(part: FilePatch) -> str:
    return "added" if part.status == "copied" else part.status


def view_candidate(
    patch: str | None,
    *,
    base_dir: str | Path | None = None,
    max_file_bytes: int = 2_000_000,
) -> CandidateView:
    """Parse ``patch`` and, with ``base_dir`` (a checkout of the base commit), read every
    touched file's whole text before and after the patch.

    Never raises for bad input: a diff that does not parse gives ``parse_error`` (also for
    paths escaping the repository), a diff that does not apply gives ``apply_error`` and
    ``scope == "hunks"``. Files that are binary, larger than ``max_file_bytes`` or not UTF-8
    get ``error`` and no text. Added files get ``after`` (deleted files ``before``) from the
    patch itself even without ``base_dir``.
    """
    original = patch or ""
    if not original.strip():
        return CandidateView(patch=original)
    text = _encodable(original)
    try:
        parts = split_patch(text)
    except Exception as exc:
        return CandidateView(patch=original, parse_error=_short(f"malformed patch: {exc}"))
    if not parts:
        return CandidateView(patch=original, parse_error="no file header found: not a unified diff")

    view = CandidateView(patch=original)
    unsafe: list[str] = []
    hunks_by_file: list[list[Hunk]] = []
    for part in parts:
        status = _status(part)
        changed = ChangedFile(
            path=part.path,
            old_path=None if status == "added" else part.old_path,
            status=status,
            binary=part.is_binary,
            is_python=part.path.endswith((".py", ".pyi")),
        )
        hunks = [] if part.is_binary else list(part.hunks)
        hunks_by_file.append(hunks)
        changed.before_fragments = [h.old_text for h in hunks]
        changed.after_fragments = [h.new_text for h in hunks]
        reasons = {p: _unsafe_reason(p) for p in {part.path, part.old_path}}
        bad = [f"{p!r}: {r}" for p, r in reasons.items() if r]
        if bad:
            changed.error = "unsafe path " + "; ".join(bad)
            unsafe.extend(bad)
        elif part.is_binary:
            changed.error = "binary patch: no text"
        elif status == "added" and len(hunks) <= 1:
            changed.after, changed.error = _from_patch(
                "".join(changed.after_fragments), max_file_bytes
            )
        elif status == "deleted" and len(hunks) <= 1:
            changed.before, changed.error = _from_patch(
                "".join(changed.before_fragments), max_file_bytes
            )
        view.files.append(changed)
    if unsafe:
        view.parse_error = _short("unsafe path in patch: " + "; ".join(unsafe))
    elif base_dir is not None:
        try:
            _resolve_files(view, parts, hunks_by_file, Path(base_dir), max_file_bytes)
        except Exception as exc:  # unreadable base file, full disk, ...: hunks only
            view.apply_error = _short(f"could not resolve files: {type(exc).__name__}: {exc}")
            view.scope = "hunks"
    for changed, hunks in zip(view.files, hunks_by_file, strict=True):
        changed.is_test = is_test_file(changed.path, hunks, changed.before)
    return view


def _encodable(text: str) -> str:
    """``text`` with lone surrogates that UTF-8 cannot carry even with ``surrogateescape``
    (e.g. ``\\ud800`` from JSON) turned into escaped bytes, so that every later
    ``encode("utf-8", "surrogateescape")`` works."""
    try:
        text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="surrogatepass").decode("utf-8", "surrogateescape")
    return text


def _from_patch(text: str, limit: int) -> tuple[str | None, str | None]:
    """A whole text carried by the patch (added / deleted file), checked like a file."""
    return _decode(text.encode("utf-8", errors="surrogateescape"), limit)


def view_gold(task: Any, base_dir: str | Path | None = None, **kwargs: Any) -> CandidateView | None:
    """The view of a task's gold patch (``task.patch``), or None when it has none."""
    gold = task.get("patch") if isinstance(task, dict) else getattr(task, "patch", None)
    if not gold or not str(gold).strip():
        return None
    return view_candidate(str(gold), base_dir=base_dir, **kwargs)


# --------------------------------------------------------------------------------------
# Applying to a private copy of the touched files
# --------------------------------------------------------------------------------------


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` resolved, or None when it leaves ``root`` (symlinks followed)."""
    target = (root / rel).resolve()
    try:
        target.relative_to(root)
    except ValueError:
        return None
    return target


def _resolve_files(
    view: CandidateView,
    parts: list[FilePatch],
    hunks_by_file: list[list[Hunk]],
    base_dir: Path,
    limit: int,
) -> None:
    """Fill ``before``/``after`` of ``view.files`` by applying the patch to the base.

    Hunks that match the base exactly at their stated positions are applied in memory (the
    result is then what ``git apply`` gives); anything else goes through ``git apply`` and
    ``patch`` on copies of the touched files.
    """
    try:
        root = base_dir.resolve(strict=True)
    except OSError as exc:
        view.apply_error = _short(f"base checkout not readable: {exc}")
        return
    originals: dict[str, bytes] = {}
    selected: list[int] = []  # indices of the parts that are applied
    problems: list[str] = []
    for index, (part, changed) in enumerate(zip(parts, view.files, strict=True)):
        if part.is_binary:
            continue  # binary hunks are left out; the file keeps its error
        if part.status in ("added", "copied"):
            target = _inside(root, part.path)
            if target is not None and target.exists():
                problems.append(f"{part.path}: already exists in the base checkout")
        if part.status != "added" and part.old_path not in originals:
            source = _inside(root, part.old_path)
            if source is None or not source.is_file():
                problems.append(f"{part.old_path}: no such file in the base checkout")
                continue
            size = source.stat().st_size
            if size > limit:
                changed.error = f"too large ({size} bytes > {limit})"
                changed.before = changed.after = None
                continue
            originals[part.old_path] = source.read_bytes()
        selected.append(index)
    if problems:
        view.apply_error = _short("patch does not apply: " + "; ".join(problems))
        return
    results: dict[int, bytes] | str | None = _apply_in_memory(
        parts, hunks_by_file, selected, originals
    )
    if results is None:
        results = _apply_with_tools(parts, selected, originals)
    if isinstance(results, str):
        view.apply_error = results
        return
    for index in selected:
        part, changed = parts[index], view.files[index]
        before = after = None
        errors: list[str] = []
        if part.status not in ("added", "copied"):
            before, err = _decode(originals[part.old_path], limit)
            errors += [err] if err else []
        if part.status != "deleted":
            after, err = _decode(results[index], limit)
            errors += [err] if err else []
        changed.before, changed.after = before, after
        changed.error = "; ".join(dict.fromkeys(errors)) or None
    view.scope = "files"


def _apply_in_memory(
    parts: list[FilePatch],
    hunks_by_file: list[list[Hunk]],
    selected: list[int],
    originals: dict[str, bytes],
) -> dict[int, bytes] | None:
    """New contents by index, or None when some hunk does not match exactly where it says
    (or anything unusual happens): the caller then uses the real tools."""
    results: dict[int, bytes] = {}
    consumed: set[str] = set()
    for index in selected:
        part, hunks = parts[index], hunks_by_file[index]
        if part.status == "copied":
            return None
        if part.status == "added":
            old_lines: list[str] = []
        else:
            if part.old_path in consumed:
                return None  # two sections on one file: let git decide
            consumed.add(part.old_path)
            old_lines = split_lines(originals[part.old_path].decode("utf-8", "surrogateescape"))
        applied = apply_hunks(old_lines, hunks)
        if applied is None:
            return None
        new_lines = applied[0]
        if part.status == "deleted":
            if new_lines:
                return None
            results[index] = b""
            continue
        results[index] = "".join(new_lines).encode("utf-8", "surrogateescape")
    return results


def _apply_with_tools(
    parts: list[FilePatch], selected: list[int], originals: dict[str, bytes]
) -> dict[int, bytes] | str:
    """New contents by index after ``git apply`` / ``patch`` on copies, or an error."""
    with tempfile.TemporaryDirectory(prefix="swr-apply-") as tmp:
        work = Path(tmp) / "w"
        work.mkdir()
        for rel, data in originals.items():
            dest = work / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        patch = "".join(parts[i].text for i in selected)
        error = _apply(work, Path(tmp) / "candidate.patch", patch) if patch else None
        if error is not None:
            return error
        results: dict[int, bytes] = {}
        root = work.resolve()
        for index in selected:
            part = parts[index]
            if part.status == "deleted":
                results[index] = b""
                continue
            result = _inside(root, part.path)
            if result is None or not result.is_file():
                return f"{part.path}: missing after applying the patch"
            results[index] = result.read_bytes()
        return results


def _apply(work: Path, patch_file: Path, patch: str) -> str | None:
    """Apply ``patch`` inside ``work``; None on success, else a short error message."""
    patch_file.write_bytes(patch.encode("utf-8", errors="surrogateescape"))
    env = dict(os.environ)
    env.update(
        GIT_CEILING_DIRECTORIES=str(work.parent),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        LC_ALL="C",
    )
    attempts = (
        ["git", "apply", "--whitespace=nowarn", str(patch_file)],
        ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-i", str(patch_file)],
    )
    logs: list[str] = []
    for argv in attempts:
        try:
            proc = subprocess.run(
                argv,
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=APPLY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logs.append(f"{argv[0]}: {exc}")
            continue
        if proc.returncode == 0:
            return None
        output = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
        logs.append(f"{' '.join(argv[:2])}: {output.strip()[-300:]}")
    return _short("patch does not apply: " + " | ".join(logs))
