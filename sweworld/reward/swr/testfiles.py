"""The test files an SWR prompt shows, and how they are cut to a budget.

- **Oracle**: the files of the task's ``test_patch`` as the test command runs them (the new
  side). With the base checkout, each file is the base file with the patch applied
  (:func:`sweworld.tasks.patches.apply_hunks`: exact context, nearest offset); without it,
  or when a hunk does not apply, only the hunks' new sides are known and are shown as
  fragments.
- **Blind**: test files of the base checkout related to the modules the candidate changes
  (named after the module, or importing it), best first.

A file that does not fit its share of the budget is cut around its *focus* lines (the lines
the test patch adds, the definitions of the listed tests, or in blind mode the lines naming
what the candidate changed), with ``... [N lines cut] ...`` markers; windows shrink until it
fits. Everything here is deterministic.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sweworld.models.budget import LineTokens, truncate_chars, truncate_text, waterfill
from sweworld.tasks.patch_paths import split_lines
from sweworld.tasks.patches import apply_hunks, parse_hunks, patch_hunks

__all__ = [
    "TestFile",
    "blind_test_files",
    "changed_identifiers",
    "fit_test_files",
    "oracle_test_files",
    "patched_lines",
    "render_file",
]

_DEF_RE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".tox", ".nox", ".venv", "venv"}
    | {".eggs", "build", "dist", ".mypy_cache", ".pytest_cache", "site-packages"}
)
_WINDOWS = (30, 15, 8, 4, 2, 1, 0)
_MIN_FILE_TOKENS = 40


@dataclass
class TestFile:
    """One test file as the prompt shows it.

    ``lines`` are the text's lines (no line endings); ``focus`` the indices of the lines to
    keep first when the file must be cut; ``note`` says what the text is (whole file,
    fragments, ...)."""

    __test__ = False  # not a pytest class

    path: str
    lines: list[str]
    focus: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def header(self) -> str:
        return f"--- {self.path}" + (f" {self.note}" if self.note else "")


# ----------------------------------------------------------------------------- applying


def _unended(text: str) -> str:
    text = text[:-1] if text.endswith("\n") else text
    return text[:-1] if text.endswith("\r") else text


def patched_lines(base: str, section: str) -> tuple[list[str], list[int]] | None:
    """The new side of ``base`` after one file's diff section (lines without their endings)
    and the indices of the added lines; None when a hunk does not apply. Hunks whose context
    moved are placed at the nearest offset (:func:`~sweworld.tasks.patches.apply_hunks`)."""
    applied = apply_hunks(split_lines(base), parse_hunks(section), offsets=True)
    if applied is None:
        return None
    lines, added = applied
    return [_unended(line) for line in lines], added


def _fragments(section: str) -> tuple[list[str], list[int]]:
    """The new sides of a diff's hunks, each under a line-number header."""
    out: list[str] = []
    focus: list[int] = []
    for hunk in parse_hunks(section):
        new_lines = [_unended(text) for kind, text in hunk.lines if kind != "-"]
        last = hunk.new_start + max(len(new_lines) - 1, 0)
        out.append(f"@@ lines {hunk.new_start}-{last} @@")
        for kind, text in hunk.lines:
            if kind == "+":
                focus.append(len(out))
            if kind != "-":
                out.append(_unended(text))
    return out, focus


def _read(base_dir: Path | None, path: str, max_bytes: int) -> str | None:
    if base_dir is None:
        return None
    target = base_dir / path
    try:
        if not target.is_file() or target.stat().st_size > max_bytes:
            return None
        return target.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _test_names(tests: Iterable[str], path: str) -> set[str]:
    """Function names of the listed tests that live in ``path`` (``path::[Class::]name[..]``)."""
    names = set()
    for test in tests:
        if not test.startswith(path + "::"):
            continue
        name = test.split("::")[-1].split("[", 1)[0].strip()
        if name:
            names.add(name)
    return names


def oracle_test_files(
    test_patch: str,
    base_dir: str | Path | None = None,
    *,
    tests: Sequence[str] = (),
    skip_suffixes: tuple[str, ...] = (),
    max_file_bytes: int = 1_000_000,
) -> list[TestFile]:
    """The files of ``test_patch`` as they are after it (deleted and binary files and paths
    ending in ``skip_suffixes`` left out). ``tests``: listed test ids, whose definitions are
    kept in focus."""
    from sweworld.tasks.patches import PatchError, split_patch

    try:
        parts = split_patch(test_patch or "")
    except (PatchError, ValueError, IndexError, KeyError):
        return []
    root = Path(base_dir) if base_dir else None
    out: list[TestFile] = []
    for part in parts:
        if part.status == "deleted" or part.is_binary or part.path.endswith(skip_suffixes):
            continue
        base = "" if part.status == "added" else _read(root, part.old_path, max_file_bytes)
        applied = patched_lines(base, part.text) if base is not None else None
        if applied is not None:
            lines, focus = applied
            note = "(new file)" if part.status == "added" else "(with the test patch applied)"
        else:
            lines, focus = _fragments(part.text)
            note = "(only the changed parts: the whole file is not available)"
        names = _test_names(tests, part.path)
        if names:
            for index, line in enumerate(lines):
                match = _DEF_RE.match(line)
                if match and match.group(1) in names:
                    focus.append(index)
        out.append(TestFile(part.path, lines, sorted(set(focus)), note))
    return out


# ----------------------------------------------------------------------------- blind


def _module_keys(path: str) -> tuple[str, str]:
    """(stem, dotted module) of a source path: ``pkg/sub/mod.py`` -> ``mod``,
    ``pkg.sub.mod``; a package's ``__init__.py`` is named after its folder."""
    parts = path.removesuffix(".pyi").removesuffix(".py").split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    if parts and parts[0] in ("src", "lib") and len(parts) > 1:
        parts = parts[1:]
    return parts[-1], ".".join(parts)


def _walk_tests(root: Path, limit: int) -> list[str]:
    from sweworld.tasks.patches import is_test_path

    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        rel_folder = os.path.relpath(folder, root)
        for name in sorted(files):
            if not name.endswith(".py") or name == "conftest.py":
                continue
            rel = name if rel_folder == "." else f"{rel_folder}/{name}".replace(os.sep, "/")
            if is_test_path(rel):
                found.append(rel)
                if len(found) >= limit:
                    return found
    return found


def blind_test_files(
    base_dir: str | Path | None,
    changed_paths: Sequence[str],
    *,
    identifiers: Iterable[str] = (),
    limit: int = 8,
    max_scan: int = 20_000,
    max_file_bytes: int = 1_000_000,
) -> list[TestFile]:
    """Test files of the base checkout related to the changed (non-test) Python modules.

    A test file named after a module (``test_<mod>.py``, ``<mod>_test.py``,
    ``test_<mod>s.py``) ranks first, then one whose name contains the module's name, then
    one that imports it (its dotted name or ``import <mod>``); ties by path. At most
    ``limit`` files; ``identifiers`` (names the candidate changes) set the focus lines."""
    from sweworld.tasks.patches import is_test_path

    if not base_dir:
        return []
    root = Path(base_dir)
    modules = [
        _module_keys(p)
        for p in changed_paths
        if p.endswith((".py", ".pyi")) and not is_test_path(p)
    ]
    if not modules or not root.is_dir():
        return []
    ranked: list[tuple[int, int, str, str]] = []
    for rel in _walk_tests(root, max_scan):
        name = rel.rsplit("/", 1)[-1].removesuffix(".py")
        score = 0
        for stem, _ in modules:
            if name in (f"test_{stem}", f"{stem}_test", f"test_{stem}s", f"tests_{stem}"):
                score = max(score, 3)
            elif len(stem) > 2 and stem in name:
                score = max(score, 2)
        text = _read(root, rel, max_file_bytes)
        if text is None:
            continue
        if score == 0:
            for stem, dotted in modules:
                word = re.escape(stem)
                pattern = (
                    rf"(?m)^\s*(?:from\s+\S*\b{word}\b|(?:from\s+\S+\s+)?import\s.*\b{word}\b)"
                )
                if (dotted.count(".") and dotted in text) or re.search(pattern, text):
                    score = 1
                    break
        if score:
            ranked.append((-score, rel.count("/"), rel, text))
    ranked.sort()
    words = [w for w in dict.fromkeys(identifiers) if w and not w.startswith("__")]
    named = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b") if words else None
    out = []
    for _, _, rel, text in ranked[:limit]:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        focus = [i for i, line in enumerate(lines) if named and named.search(line)]
        out.append(TestFile(rel, lines, focus, "(as in the repository)"))
    return out


def changed_identifiers(patch: str) -> list[str]:
    """Names of the functions and classes a patch touches: for each changed line, the
    innermost definition above it in its hunk (context lines included), else the one the
    hunk header names; definitions on changed lines count too. In order, no duplicates;
    none for a patch that does not parse."""
    names: dict[str, None] = {}
    for hunks in patch_hunks(patch).values():
        for hunk in hunks:
            match = _DEF_RE.match(hunk.section)
            current = match.group(1) if match else None
            for kind, text in hunk.lines:
                match = _DEF_RE.match(text)
                if match:
                    current = match.group(1)
                if kind != " " and current:
                    names.setdefault(current, None)
    return list(names)


# ----------------------------------------------------------------------------- fitting


def _render(lines: list[str], keep: set[int]) -> tuple[str, int]:
    out: list[str] = []
    cut = run = 0
    for index, line in enumerate(lines):
        if index in keep:
            if run:
                out.append(f"... [{run} lines cut] ...")
                run = 0
            out.append(line)
        else:
            run += 1
            cut += 1
    if run:
        out.append(f"... [{run} lines cut] ...")
    return "\n".join(out), cut


def render_file(file: TestFile, budget: int, tok: LineTokens) -> tuple[str, int]:
    """The file's text in at most ``budget`` tokens (header included) and the lines cut:
    whole when it fits, else windows around the focus lines, else head and tail."""
    header = file.header
    room = budget - tok.line(header)
    whole = "\n".join(file.lines)
    if tok(whole) <= room:
        return f"{header}\n{whole}".rstrip("\n"), 0
    if room <= 0:
        return truncate_chars(header, max(budget, 0), tok)[0], len(file.lines)
    text, cut = "", len(file.lines)
    if file.focus:
        n = len(file.lines)
        for window in _WINDOWS:
            keep = {
                j for i in file.focus for j in range(max(0, i - window), min(n, i + window + 1))
            }
            text, cut = _render(file.lines, keep)
            if tok(text) <= room:
                return f"{header}\n{text}", cut
        text, more = truncate_text(text, room, tok)
        return f"{header}\n{text}", cut + more
    text, cut = truncate_text(whole, room, tok)
    return f"{header}\n{text}", cut


def fit_test_files(
    files: Sequence[TestFile], budget: int, tok: LineTokens
) -> tuple[str, int, list[str]]:
    """The files together in at most ``budget`` tokens: the budget is shared (files that
    need less keep what they need), files that would get almost nothing are left out with a
    note. Returns the text, the lines cut, and the paths shown."""
    shown = list(files)
    while True:
        dropped = files[len(shown) :]
        note = ""
        if dropped:
            names = ", ".join(f.path for f in dropped)
            note, _ = truncate_chars(
                f"({len(dropped)} more test files not shown: {names})", 60, tok
            )
        room = budget - (tok(note) + 1 if note else 0) - len(shown)
        demands = [tok.line(f.header) + tok("\n".join(f.lines)) for f in shown]
        alloc = waterfill(demands, [1.0] * len(shown), max(room, 0))
        starved = any(a < d and a < _MIN_FILE_TOKENS for a, d in zip(alloc, demands, strict=True))
        if starved and len(shown) > 1:
            shown = shown[:-1]
            continue
        break
    chunks: list[str] = []
    cut = sum(len(f.lines) for f in files[len(shown) :])
    for file, share in zip(shown, alloc, strict=True):
        text, lines_cut = render_file(file, share, tok)
        chunks.append(text)
        cut += lines_cut
    if note:
        chunks.append(note)
    text = "\n\n".join(chunks)
    if tok(text) > budget:
        text, more = truncate_text(text, budget, tok)
        cut += more
    return text, cut, [f.path for f in shown]
