"""Pure functions on unified diffs in git format.

Everything here works on text only: no repository, no subprocess. The parser understands
what ``git diff`` writes (``diff --git`` headers, extended header lines, hunks, the
``\\ No newline at end of file`` marker) and also plain ``diff -u`` output (``---``/``+++``
headers without a ``diff --git`` line), which is what many agents submit.

Hunks are read by their line counts, so a removed line that happens to start with ``--``
is never mistaken for a file header.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FilePatch",
    "FileStatus",
    "PatchError",
    "files_in_patch",
    "is_test_path",
    "make_unified_diff",
    "reverse_patch",
    "split_patch",
]

FileStatus = Literal["added", "deleted", "modified", "renamed", "copied"]

DEV_NULL = "/dev/null"
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
_NULL_BLOB = "0000000"


class PatchError(ValueError):
    """A diff that cannot be parsed or transformed."""


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
                return _strip_eol(line)[len(prefix) :]
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


def _split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping line endings (``str.splitlines`` also splits on
    form feeds, ``\\x1c`` and friends, which are ordinary characters inside source lines)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _strip_eol(line: str) -> str:
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


def _eol(line: str) -> str:
    return line[len(_strip_eol(line)) :]


def _parse(patch: str) -> list[str | _FileSection]:
    """Parse a patch into file sections and the text between them (kept verbatim)."""
    lines = _split_lines(patch)
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
    match = _HUNK_RE.match(_strip_eol(header))
    if not match:
        raise PatchError(f"malformed hunk header at patch line {i + 1}: {header!r}")
    old_len = int(match.group(2)) if match.group(2) is not None else 1
    new_len = int(match.group(4)) if match.group(4) is not None else 1
    body = _strip_eol(header)
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

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(token: str) -> str:
    """Decode a git C-style quoted path (``"a/f\\303\\266o"``); plain tokens pass through."""
    if len(token) < 2 or not (token.startswith('"') and token.endswith('"')):
        return token
    body = token[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            digits = body[i + 1 : i + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8))
                i += 4
                continue
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
        out.extend(ch.encode("utf-8"))
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _needs_quoting(path: str) -> bool:
    return any(c in '"\\' or ord(c) < 32 or ord(c) > 126 for c in path)


def _quote(path: str) -> str:
    """Quote a path the way git does when it holds special characters."""
    if not _needs_quoting(path):
        return path
    reverse = {v: k for k, v in _ESCAPES.items() if k not in '"\\'}
    out = []
    for byte in path.encode("utf-8", errors="surrogateescape"):
        if byte in (34, 92):
            out.append("\\" + chr(byte))
        elif byte in reverse:
            out.append("\\" + reverse[byte])
        elif byte < 32 or byte > 126:
            out.append(f"\\{byte:03o}")
        else:
            out.append(chr(byte))
    return '"' + "".join(out) + '"'


def _split_git_header(rest: str) -> tuple[str, str]:
    """Split the ``a/X b/Y`` part of a ``diff --git`` line into its two raw tokens."""
    rest = _strip_eol(rest)
    if rest.startswith('"'):
        end = _quoted_end(rest)
        return rest[: end + 1], rest[end + 1 :].lstrip(" ")
    if rest.endswith('"'):
        start = rest.rfind(' "')
        if start != -1:
            return rest[:start], rest[start + 1 :]
    # Unquoted: when both sides name the same path (no rename) the line is symmetric.
    if (len(rest) - 1) % 2 == 0:
        half = (len(rest) - 1) // 2
        left, right = rest[:half], rest[half + 1 :]
        if rest[half] == " " and left[2:] == right[2:] and left[:2] != right[:2]:
            return left, right
    idx = rest.find(" b/")
    if idx != -1:
        return rest[:idx], rest[idx + 1 :]
    left, _, right = rest.partition(" ")
    return left, right


def _quoted_end(text: str) -> int:
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    raise PatchError(f"unterminated quoted path in {text!r}")


def _strip_prefix(token: str) -> str:
    path = _unquote(token)
    if path == DEV_NULL:
        return path
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def _header_path(line: str | None) -> str | None:
    """Path of a ``---``/``+++`` line, without the a/ b/ prefix or a trailing timestamp."""
    if line is None:
        return None
    value = _strip_eol(line)[4:]
    if value.startswith('"'):
        value = value[: _quoted_end(value) + 1]
    elif "\t" in value:
        value = value.split("\t", 1)[0]
    return _strip_prefix(value)


def _section_paths(section: _FileSection) -> tuple[str, str]:
    """(old path, new path); /dev/null stands for a missing side."""
    old = section.header_value("rename from ") or section.header_value("copy from ")
    new = section.header_value("rename to ") or section.header_value("copy to ")
    if old is not None and new is not None:
        return _unquote(old), _unquote(new)
    minus, plus = _header_path(section.minus_line), _header_path(section.plus_line)
    git_old = git_new = None
    if section.git:
        tok_a, tok_b = _split_git_header(section.header_lines[0][len("diff --git ") :])
        git_old, git_new = _strip_prefix(tok_a), _strip_prefix(tok_b)
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
    )


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
            out.append("--- " + _swap_side(_strip_eol(segment.plus_line)[4:], "a/"))
            out.append(_eol(segment.minus_line))
            out.append("+++ " + _swap_side(_strip_eol(segment.minus_line)[4:], "b/"))
            out.append(_eol(segment.plus_line))
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
        body, eol = _strip_eol(line), _eol(line)
        if body.startswith("diff --git "):
            tok_a, tok_b = _split_git_header(body[len("diff --git ") :])
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
# Test paths
# --------------------------------------------------------------------------------------

_TEST_DIRS = frozenset(
    {"test", "tests", "testing", "e2e", "__tests__", "unittests", "testcases", "spec", "specs"}
)
_TEST_FILE_RE = re.compile(
    r"""(
        ^test_.+            # test_foo.py
      | ^tests?\.[^.]+$     # test.py, tests.py
      | .+_tests?\.[^.]+$   # foo_test.py, foo_tests.py, foo_test.go
      | ^conftest\.py$
      | .+\.(test|spec)\.[jt]sx?$   # foo.test.js, foo.spec.ts
      | .+Tests?\.(java|kt|scala|cs)$   # FooTest.java
    )""",
    re.VERBOSE,
)


def is_test_path(path: str) -> bool:
    """Whether a repository path is test code, by SWE-bench-style conventions.

    True for anything under a ``test``/``tests``/``testing``/``e2e``/``__tests__``/``spec``
    directory (any depth, any case), and for files named ``test_*``, ``*_test.*``,
    ``*_tests.*``, ``test.py``/``tests.py``, ``conftest.py``, ``*.test.js``/``*.spec.ts``,
    ``FooTest.java``.
    """
    normalized = path.replace("\\", "/").strip("/")
    parts = [p for p in normalized.split("/") if p]
    if not parts:
        return False
    if any(p.lower() in _TEST_DIRS for p in parts[:-1]):
        return True
    return bool(_TEST_FILE_RE.match(parts[-1]))


# --------------------------------------------------------------------------------------
# Building diffs
# --------------------------------------------------------------------------------------


def _blob_id(text: str | None) -> str:
    if text is None:
        return _NULL_BLOB
    data = text.encode("utf-8", errors="surrogateescape")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _path_token(prefix: str, path: str) -> str:
    return _quote(prefix + path)


def _file_header_line(marker: str, prefix: str, path: str | None) -> str:
    if path is None:
        return f"{marker} {DEV_NULL}\n"
    token = _path_token(prefix, path)
    # git ends a ---/+++ line with a tab when the (unquoted) path contains a space.
    tail = "\t" if " " in path and not token.startswith('"') else ""
    return f"{marker} {token}{tail}\n"


def _hunk_range(start: int, length: int) -> str:
    if length == 1:
        return str(start)
    if length == 0:
        return f"{max(start - 1, 0)},0"
    return f"{start},{length}"


def _hunks(old_lines: list[str], new_lines: list[str], context: int) -> Iterator[str]:
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        old_start, old_end = first[1], last[2]
        new_start, new_end = first[3], last[4]
        yield (
            f"@@ -{_hunk_range(old_start + 1, old_end - old_start)} "
            f"+{_hunk_range(new_start + 1, new_end - new_start)} @@\n"
        )
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in old_lines[i1:i2]:
                    yield from _emit(" ", line)
                continue
            for line in old_lines[i1:i2]:
                yield from _emit("-", line)
            for line in new_lines[j1:j2]:
                yield from _emit("+", line)


def _emit(kind: str, line: str) -> Iterator[str]:
    if line.endswith("\n"):
        yield kind + line
    else:
        yield kind + line + "\n"
        yield "\\ No newline at end of file\n"


def make_unified_diff(
    path: str,
    old_text: str | None,
    new_text: str | None,
    *,
    context: int = 3,
    mode: str = "100644",
) -> str:
    """A ``git diff``-style patch turning ``old_text`` into ``new_text`` at ``path``.

    ``old_text=None`` means the file is added, ``new_text=None`` that it is deleted. Line
    endings are kept byte for byte (CRLF files stay CRLF) and a missing final newline gets
    git's ``\\ No newline at end of file`` marker, so ``git apply`` reproduces
    ``new_text`` exactly. Returns ``""`` when nothing changes.
    """
    if old_text is None and new_text is None:
        raise ValueError(f"make_unified_diff({path!r}): old_text and new_text are both None")
    if old_text == new_text:
        return ""
    path = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    a_token, b_token = _path_token("a/", path), _path_token("b/", path)
    out = [f"diff --git {a_token} {b_token}\n"]
    old_blob, new_blob = _blob_id(old_text), _blob_id(new_text)
    if old_text is None:
        out.append(f"new file mode {mode}\n")
        out.append(f"index {old_blob}..{new_blob}\n")
    elif new_text is None:
        out.append(f"deleted file mode {mode}\n")
        out.append(f"index {old_blob}..{new_blob}\n")
    else:
        out.append(f"index {old_blob}..{new_blob} {mode}\n")
    old_lines = _split_lines(old_text or "")
    new_lines = _split_lines(new_text or "")
    if not old_lines and not new_lines:
        # An empty file added or deleted: git writes the header only.
        return "".join(out)
    out.append(_file_header_line("---", "a/", None if old_text is None else path))
    out.append(_file_header_line("+++", "b/", None if new_text is None else path))
    out.extend(_hunks(old_lines, new_lines, context))
    return "".join(out)
