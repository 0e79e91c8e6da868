"""Pure functions on unified diffs in git format.

Everything here works on text only: no repository, no subprocess. The parser understands
what ``git diff`` writes (``diff --git`` headers, extended header lines, hunks, the
``\\ No newline at end of file`` marker) and also plain ``diff -u`` output (``---``/``+++``
headers without a ``diff --git`` line), which is what many agents submit.

Hunks are read by their line counts, so a removed line that happens to start with ``--``
is never mistaken for a file header. This is sweworld's one hunk parser (each
:class:`FilePatch` carries its :class:`Hunk` list) and :func:`apply_hunks` its one pure
applier; path quoting lives in :mod:`sweworld.tasks.patch_paths` and diff writing in
:mod:`sweworld.tasks.unified_diff` (both re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sweworld.tasks.patch_paths import (
    DEV_NULL,
    PatchError,
    header_path,
    is_test_path,
    line_ending,
    split_git_header,
    split_lines,
    strip_eol,
    strip_path_prefix,
    unquote_path,
)
from sweworld.tasks.unified_diff import make_unified_diff

__all__ = [
    "DEV_NULL",
    "FilePatch",
    "FileStatus",
    "Hunk",
    "PatchError",
    "apply_hunks",
    "files_in_patch",
    "is_test_path",
    "make_unified_diff",
    "parse_hunks",
    "patch_hunks",
    "reverse_patch",
    "split_patch",
]

FileStatus = Literal["added", "deleted", "modified", "renamed", "copied"]

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_EXTENDED_HEADERS = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "copy from ",
    "copy to ",
    "rename from ",
    "rename to ",
    "rename old ",
    "rename new ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
    "Binary files ",
    "GIT binary patch",
)


# --------------------------------------------------------------------------------------
# Parsed representation
# --------------------------------------------------------------------------------------


@dataclass
class _HunkLine:
    kind: str  # " ", "-", "+"
    text: str  # the line as written, including its first character and line ending
    marker: str | None = None  # a following "\ No newline at end of file" line, verbatim


@dataclass
class _Hunk:
    header: str
    old_range: str
    new_range: str
    section: str
    eol: str
    lines: list[_HunkLine] = field(default_factory=list)


@dataclass
class _FileSection:
    git: bool
    header_lines: list[str] = field(default_factory=list)
    minus_line: str | None = None
    plus_line: str | None = None
    hunks: list[_Hunk] = field(default_factory=list)
    binary: bool = False
    text_parts: list[str] = field(default_factory=list)

    def header_value(self, prefix: str) -> str | None:
        for line in self.header_lines:
            if line.startswith(prefix):
                return strip_eol(line)[len(prefix) :]
        return None


@dataclass(frozen=True)
class FilePatch:
    """One file's part of a patch.

    ``path`` is the file's path after the patch (for a deleted file, the path it had);
    ``old_path`` its path before (equal to ``path`` unless renamed or copied). ``text`` is
    this file's section of the patch, verbatim, so ``"".join(p.text for p in parts)``
    gives the patch back without any text outside file sections.
    """

    path: str
    old_path: str
    status: FileStatus
    text: str
    is_binary: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    hunk_count: int = 0
    hunks: tuple[Hunk, ...] = ()


@dataclass(frozen=True)
class Hunk:
    """One hunk of one file: ``lines`` holds ``(kind, text)`` with kind ``" "``, ``"-"`` or
    ``"+"`` and the text without its first character (line ending kept; a line followed by
    ``\\ No newline at end of file`` has none). ``section`` is the text after the second
    ``@@`` (a function name, say), stripped."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str
    lines: tuple[tuple[str, str], ...]

    @property
    def old_text(self) -> str:
        """The hunk's old side: context and removed lines."""
        return "".join(t for k, t in self.lines if k != "+")

    @property
    def new_text(self) -> str:
        """The hunk's new side: context and added lines."""
        return "".join(t for k, t in self.lines if k != "-")

    @property
    def removed(self) -> list[str]:
        """Removed lines, in order."""
        return [t for k, t in self.lines if k == "-"]

    @property
    def added(self) -> list[str]:
        """Added lines, in order."""
        return [t for k, t in self.lines if k == "+"]


def _parse(patch: str) -> list[str | _FileSection]:
    """Parse a patch into file sections and the text between them (kept verbatim)."""
    lines = split_lines(patch)
    segments: list[str | _FileSection] = []
    current: _FileSection | None = None
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.startswith("diff --git "):
            current = _FileSection(git=True, header_lines=[line], text_parts=[line])
            segments.append(current)
            i += 1
            while i < n and lines[i].startswith(_EXTENDED_HEADERS):
                if lines[i].startswith(("GIT binary patch", "Binary files ")):
                    current.binary = True
                if lines[i].startswith("GIT binary patch"):
                    # Binary data runs until the next file section.
                    while i < n and not lines[i].startswith("diff --git "):
                        current.header_lines.append(lines[i])
                        current.text_parts.append(lines[i])
                        i += 1
                    break
                current.header_lines.append(lines[i])
                current.text_parts.append(lines[i])
                i += 1
            continue
        if line.startswith("--- ") and i + 1 < n and lines[i + 1].startswith("+++ "):
            if not (
                current is not None
                and current.git
                and current.minus_line is None
                and not current.hunks
                and segments
                and segments[-1] is current
            ):
                current = _FileSection(git=False)
                segments.append(current)
            current.minus_line, current.plus_line = line, lines[i + 1]
            current.text_parts.extend([line, lines[i + 1]])
            i += 2
            continue
        if line.startswith("@@ "):
            if current is None or (current.minus_line is None and not current.git):
                raise PatchError(f"hunk without a file header at patch line {i + 1}: {line!r}")
            i = _parse_hunk(lines, i, current)
            continue
        # Text outside any file section (commit message, "-- " signature, blank line...).
        if segments and isinstance(segments[-1], str):
            segments[-1] += line
        else:
            segments.append(line)
        current = None
        i += 1
    return segments


def _parse_hunk(lines: list[str], i: int, section: _FileSection) -> int:
    header = lines[i]
    match = _HUNK_RE.match(strip_eol(header))
    if not match:
        raise PatchError(f"malformed hunk header at patch line {i + 1}: {header!r}")
    old_len = int(match.group(2)) if match.group(2) is not None else 1
    new_len = int(match.group(4)) if match.group(4) is not None else 1
    body = strip_eol(header)
    old_range = match.group(1) + ("," + match.group(2) if match.group(2) is not None else "")
    new_range = match.group(3) + ("," + match.group(4) if match.group(4) is not None else "")
    hunk = _Hunk(
        header=header,
        old_range=old_range,
        new_range=new_range,
        section=match.group(5),
        eol=header[len(body) :],
    )
    section.hunks.append(hunk)
    section.text_parts.append(header)
    i += 1
    n = len(lines)
    while old_len > 0 or new_len > 0:
        if i >= n:
            raise PatchError(f"truncated hunk {header.strip()!r} in {_section_path(section)}")
        line = lines[i]
        if line.startswith("\\"):
            if not hunk.lines:
                raise PatchError(f"'\\' marker before any line in hunk {header.strip()!r}")
            hunk.lines[-1].marker = line
        elif line.startswith(" ") or line in ("\n", "\r\n"):
            hunk.lines.append(_HunkLine(" ", line))
            old_len -= 1
            new_len -= 1
        elif line.startswith("-"):
            hunk.lines.append(_HunkLine("-", line))
            old_len -= 1
        elif line.startswith("+"):
            hunk.lines.append(_HunkLine("+", line))
            new_len -= 1
        else:
            raise PatchError(
                f"unexpected line in hunk {header.strip()!r} of {_section_path(section)}: "
                f"{line!r} (the hunk's line counts do not match its body)"
            )
        if old_len < 0 or new_len < 0:
            raise PatchError(
                f"hunk {header.strip()!r} of {_section_path(section)} has more lines than "
                "its header counts"
            )
        section.text_parts.append(line)
        i += 1
    if i < n and lines[i].startswith("\\") and hunk.lines:
        hunk.lines[-1].marker = lines[i]
        section.text_parts.append(lines[i])
        i += 1
    return i


# --------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------


def _section_paths(section: _FileSection) -> tuple[str, str]:
    """(old path, new path); /dev/null stands for a missing side."""
    old = section.header_value("rename from ") or section.header_value("copy from ")
    new = section.header_value("rename to ") or section.header_value("copy to ")
    if old is not None and new is not None:
        return unquote_path(old), unquote_path(new)
    minus, plus = header_path(section.minus_line), header_path(section.plus_line)
    git_old = git_new = None
    if section.git:
        tok_a, tok_b = split_git_header(section.header_lines[0][len("diff --git ") :])
        git_old, git_new = strip_path_prefix(tok_a), strip_path_prefix(tok_b)
    if section.header_value("new file mode ") is not None:
        return DEV_NULL, plus if plus not in (None, DEV_NULL) else (git_new or "")
    if section.header_value("deleted file mode ") is not None:
        return minus if minus not in (None, DEV_NULL) else (git_old or ""), DEV_NULL
    return (minus or git_old or ""), (plus or git_new or "")


def _section_path(section: _FileSection) -> str:
    try:
        old, new = _section_paths(section)
    except PatchError:
        return "<unknown file>"
    return new if new != DEV_NULL else old


def _to_file_patch(section: _FileSection) -> FilePatch:
    old, new = _section_paths(section)
    status: FileStatus
    if section.header_value("rename from ") is not None:
        status = "renamed"
    elif section.header_value("copy from ") is not None:
        status = "copied"
    elif old == DEV_NULL:
        status = "added"
    elif new == DEV_NULL:
        status = "deleted"
    else:
        status = "modified"
    path = new if new != DEV_NULL else old
    old_path = old if old != DEV_NULL else new
    old_mode = section.header_value("old mode ") or section.header_value("deleted file mode ")
    new_mode = section.header_value("new mode ") or section.header_value("new file mode ")
    return FilePatch(
        path=path,
        old_path=old_path,
        status=status,
        text="".join(section.text_parts),
        is_binary=section.binary,
        old_mode=old_mode,
        new_mode=new_mode,
        hunk_count=len(section.hunks),
        hunks=tuple(_public_hunk(h) for h in section.hunks),
    )


def _range(text: str) -> tuple[int, int]:
    start, _, length = text.partition(",")
    return int(start), int(length) if length else 1


def _public_hunk(hunk: _Hunk) -> Hunk:
    lines: list[tuple[str, str]] = []
    for line in hunk.lines:
        text = line.text if line.text in ("\n", "\r\n") else line.text[1:]  # a bare blank line
        if line.marker is not None and text.endswith("\n"):
            text = text[:-1]
        lines.append((line.kind, text))
    old_start, old_len = _range(hunk.old_range)
    new_start, new_len = _range(hunk.new_range)
    return Hunk(old_start, old_len, new_start, new_len, hunk.section.strip(), tuple(lines))


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def split_patch(patch: str) -> list[FilePatch]:
    """Split a patch into per-file parts, in order."""
    return [_to_file_patch(s) for s in _parse(patch) if isinstance(s, _FileSection)]


def files_in_patch(patch: str, *, include_old_paths: bool = False) -> list[str]:
    """Paths a patch touches, in order of appearance, without duplicates.

    Each file contributes its path after the patch (a deleted file: the path it had).
    With ``include_old_paths=True`` the source path of a rename or copy is listed too.
    """
    seen: dict[str, None] = {}
    for part in split_patch(patch):
        if include_old_paths and part.old_path != part.path:
            seen.setdefault(part.old_path, None)
        seen.setdefault(part.path, None)
    return list(seen)


def reverse_patch(patch: str) -> str:
    """The patch that undoes ``patch`` (what ``git apply -R`` would apply).

    Swaps the a/ and b/ sides of every header, ``---``/``+++`` lines, hunk ranges, added
    and removed lines (keeping ``\\ No newline at end of file`` markers on the line they
    belong to), new/deleted file modes, old/new modes, rename from/to and index hashes.
    Text outside file sections is kept as is. Binary diffs and copies cannot be reversed
    from the text alone and raise :class:`PatchError`.
    """
    out: list[str] = []
    for segment in _parse(patch):
        if isinstance(segment, str):
            out.append(segment)
            continue
        if segment.binary:
            raise PatchError(
                f"cannot reverse the binary diff of {_section_path(segment)!r}: "
                "binary hunks carry no reversible text"
            )
        out.extend(_reverse_header(segment))
        if segment.minus_line is not None and segment.plus_line is not None:
            out.append("--- " + _swap_side(strip_eol(segment.plus_line)[4:], "a/"))
            out.append(line_ending(segment.minus_line))
            out.append("+++ " + _swap_side(strip_eol(segment.minus_line)[4:], "b/"))
            out.append(line_ending(segment.plus_line))
        for hunk in segment.hunks:
            out.extend(_reverse_hunk(hunk))
    return "".join(out)


def _swap_side(token: str, new_prefix: str) -> str:
    """Give a path token the other side's prefix: ``b/x`` -> ``a/x`` (quoted or not)."""
    old_prefix = "b/" if new_prefix == "a/" else "a/"
    if token.startswith('"' + old_prefix):
        return '"' + new_prefix + token[3:]
    if token.startswith(old_prefix):
        return new_prefix + token[2:]
    return token


def _reverse_header(section: _FileSection) -> list[str]:
    out: list[str] = []
    old_mode = section.header_value("old mode ")
    new_mode = section.header_value("new mode ")
    rename_from = section.header_value("rename from ")
    rename_to = section.header_value("rename to ")
    for line in section.header_lines:
        body, eol = strip_eol(line), line_ending(line)
        if body.startswith("diff --git "):
            tok_a, tok_b = split_git_header(body[len("diff --git ") :])
            body = f"diff --git {_swap_side(tok_b, 'a/')} {_swap_side(tok_a, 'b/')}"
        elif body.startswith(("copy from ", "copy to ")):
            raise PatchError(
                f"cannot reverse the copy to {_section_path(section)!r}: undoing a copy "
                "means deleting the copy, whose content the patch does not carry"
            )
        elif body.startswith("old mode ") and new_mode is not None:
            body = "old mode " + new_mode
        elif body.startswith("new mode ") and old_mode is not None:
            body = "new mode " + old_mode
        elif body.startswith("new file mode "):
            body = "deleted file mode " + body[len("new file mode ") :]
        elif body.startswith("deleted file mode "):
            body = "new file mode " + body[len("deleted file mode ") :]
        elif body.startswith("rename from ") and rename_to is not None:
            body = "rename from " + rename_to
        elif body.startswith("rename to ") and rename_from is not None:
            body = "rename to " + rename_from
        elif body.startswith("rename old ") or body.startswith("rename new "):
            body = ("rename new " if body.startswith("rename old ") else "rename old ") + body[11:]
        elif body.startswith("index "):
            hashes, sep, mode = body[len("index ") :].partition(" ")
            before, dots, after = hashes.partition("..")
            if dots:
                body = f"index {after}..{before}{sep}{mode}"
        out.append(body + eol)
    return out


def _reverse_hunk(hunk: _Hunk) -> list[str]:
    out = [f"@@ -{hunk.new_range} +{hunk.old_range} @@{hunk.section}{hunk.eol}"]
    removed: list[_HunkLine] = []  # lines the reversed hunk removes (were "+")
    added: list[_HunkLine] = []  # lines the reversed hunk adds (were "-")

    def flush() -> None:
        for line in removed:
            out.append("-" + line.text[1:])
            if line.marker is not None:
                out.append(line.marker)
        for line in added:
            out.append("+" + line.text[1:])
            if line.marker is not None:
                out.append(line.marker)
        removed.clear()
        added.clear()

    for line in hunk.lines:
        if line.kind == "+":
            removed.append(line)
        elif line.kind == "-":
            added.append(line)
        else:
            flush()
            out.append(line.text)
            if line.marker is not None:
                out.append(line.marker)
    flush()
    return out


# --------------------------------------------------------------------------------------
# Hunks: reading and applying
# --------------------------------------------------------------------------------------


def parse_hunks(section_text: str) -> list[Hunk]:
    """The hunks of a patch's file sections (e.g. one :attr:`FilePatch.text`), in order.

    Never raises: a text that does not parse as a diff gives ``[]``.
    """
    try:
        parts = split_patch(section_text)
    except (PatchError, ValueError):
        return []
    return [hunk for part in parts for hunk in part.hunks]


def patch_hunks(patch: str | None) -> dict[str, list[Hunk]]:
    """Hunks of every file of a patch, by the file's path after the patch (a deleted file:
    the path it had). Empty for an empty or malformed patch."""
    try:
        parts = split_patch(patch or "")
    except (PatchError, ValueError):
        return {}
    out: dict[str, list[Hunk]] = {}
    for part in parts:
        out.setdefault(part.path, []).extend(part.hunks)
    return out


def _locate(lines: Sequence[str], old: list[str], start: int, floor: int) -> int | None:
    """The position nearest ``start`` (not before ``floor``) where ``old`` matches."""
    last = len(lines) - len(old)
    if last < floor:
        return None
    start = min(max(start, floor), last)
    for offset in range(0, last - floor + 1):
        for at in (start - offset, start + offset):
            if floor <= at <= last and list(lines[at : at + len(old)]) == old:
                return at
    return None


def apply_hunks(
    lines: Sequence[str], hunks: Sequence[Hunk], *, offsets: bool = False
) -> tuple[list[str], list[int]] | None:
    """Apply one file's hunks to its ``lines`` (line endings kept, as :func:`split_lines`
    gives them): the new lines and the indices of the added ones, or None when a hunk does
    not apply.

    Exact by default, as ``git apply`` without fuzz: each hunk's old side must match at
    the line its header states, and a hunk without trailing context must end the file.
    With ``offsets=True`` a hunk whose context moved is placed where its old side matches
    nearest to the stated line (after the previous hunk), as ``patch`` does.
    """
    out: list[str] = []
    added: list[int] = []
    pos = 0  # next unread line of ``lines``
    for hunk in hunks:
        old = [t for k, t in hunk.lines if k != "+"]
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if offsets:
            at = _locate(lines, old, start, pos) if old else min(max(start, pos), len(lines))
            if at is None:
                return None
            start = at
        else:
            if start < pos or list(lines[start : start + len(old)]) != old:
                return None
            trailing = next((i for i, (k, _) in enumerate(reversed(hunk.lines)) if k != " "), 0)
            if trailing == 0 and start + len(old) != len(lines):
                return None  # git anchors such a hunk at the end of the file
        out.extend(lines[pos:start])
        for kind, text in hunk.lines:
            if kind == "+":
                added.append(len(out))
            if kind != "-":
                out.append(text)
        pos = start + len(old)
    out.extend(lines[pos:])
    return out, added
