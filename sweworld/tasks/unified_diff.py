"""Writing a ``git diff``-style patch from a file's text before and after."""

from __future__ import annotations

import difflib
import hashlib
import posixpath
from collections.abc import Iterator

from sweworld.tasks.patch_paths import DEV_NULL, quote_path, split_lines

__all__ = ["make_unified_diff"]

_NULL_BLOB = "0000000"


def _blob_id(text: str | None) -> str:
    if text is None:
        return _NULL_BLOB
    data = text.encode("utf-8", errors="surrogateescape")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _file_header_line(marker: str, prefix: str, path: str | None) -> str:
    if path is None:
        return f"{marker} {DEV_NULL}\n"
    token = quote_path(prefix + path)
    # git ends a ---/+++ line with a tab when the (unquoted) path contains a space.
    tail = "\t" if " " in path and not token.startswith('"') else ""
    return f"{marker} {token}{tail}\n"


def _hunk_range(start: int, length: int) -> str:
    if length == 1:
        return str(start)
    if length == 0:
        return f"{max(start - 1, 0)},0"
    return f"{start},{length}"


def _function_lines(old_lines: list[str]) -> list[str]:
    """For each line index i, git's default hunk-header context for a hunk starting at i:
    the last line before it that begins with a letter, ``_`` or ``$`` (no diff driver),
    trailing whitespace removed, at most 80 characters ("" when there is none)."""
    out, last = [], ""
    for line in old_lines:
        out.append(last)
        if line[:1].isalpha() or line[:1] in ("_", "$"):
            last = line.rstrip()[:80]
    out.append(last)
    return out


def _hunks(
    old_lines: list[str], new_lines: list[str], context: int, funcname: bool = False
) -> Iterator[str]:
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    functions = _function_lines(old_lines) if funcname else None
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        old_start, old_end = first[1], last[2]
        new_start, new_end = first[3], last[4]
        section = functions[old_start] if functions else ""
        yield (
            f"@@ -{_hunk_range(old_start + 1, old_end - old_start)} "
            f"+{_hunk_range(new_start + 1, new_end - new_start)} @@"
            + (f" {section}" if section else "")
            + "\n"
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
    funcname: bool = False,
) -> str:
    """A ``git diff``-style patch turning ``old_text`` into ``new_text`` at ``path``.

    ``old_text=None`` means the file is added, ``new_text=None`` that it is deleted. Line
    endings are kept byte for byte (CRLF files stay CRLF) and a missing final newline gets
    git's ``\\ No newline at end of file`` marker, so ``git apply`` reproduces
    ``new_text`` exactly. Returns ``""`` when nothing changes. With ``funcname`` each hunk
    header ends with git's default function context (the last line above the hunk that
    starts with a letter, ``_`` or ``$``), as ``git diff`` writes it without a diff driver.
    """
    if old_text is None and new_text is None:
        raise ValueError(f"make_unified_diff({path!r}): old_text and new_text are both None")
    if old_text == new_text:
        return ""
    path = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    a_token, b_token = quote_path("a/" + path), quote_path("b/" + path)
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
    old_lines = split_lines(old_text or "")
    new_lines = split_lines(new_text or "")
    if not old_lines and not new_lines:
        # An empty file added or deleted: git writes the header only.
        return "".join(out)
    out.append(_file_header_line("---", "a/", None if old_text is None else path))
    out.append(_file_header_line("+++", "b/", None if new_text is None else path))
    out.extend(_hunks(old_lines, new_lines, context, funcname))
    return "".join(out)
