"""Paths and lines inside unified diffs: git's C-style path quoting, the ``a/`` and ``b/``
sides of a header, and which repository paths are test code."""

from __future__ import annotations

import re

__all__ = [
    "DEV_NULL",
    "PatchError",
    "header_path",
    "is_test_path",
    "line_ending",
    "quote_path",
    "quoted_end",
    "split_git_header",
    "split_lines",
    "strip_eol",
    "strip_path_prefix",
    "unquote_path",
]

DEV_NULL = "/dev/null"
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class PatchError(ValueError):
    """A diff that cannot be parsed or transformed."""


# --------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping line endings (``str.splitlines`` also splits on
    form feeds, ``\\x1c`` and friends, which are ordinary characters inside source lines)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def strip_eol(line: str) -> str:
    """``line`` without its ``\\n`` or ``\\r\\n``."""
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


def line_ending(line: str) -> str:
    """The ``\\n`` / ``\\r\\n`` that ends ``line`` (``""`` for none)."""
    return line[len(strip_eol(line)) :]


# --------------------------------------------------------------------------------------
# Quoting
# --------------------------------------------------------------------------------------


def unquote_path(token: str) -> str:
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


def quote_path(path: str) -> str:
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


def quoted_end(text: str) -> int:
    """Index of the quote that closes the quoted path starting ``text``."""
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    raise PatchError(f"unterminated quoted path in {text!r}")


# --------------------------------------------------------------------------------------
# Header paths
# --------------------------------------------------------------------------------------


def split_git_header(rest: str) -> tuple[str, str]:
    """Split the ``a/X b/Y`` part of a ``diff --git`` line into its two raw tokens."""
    rest = strip_eol(rest)
    if rest.startswith('"'):
        end = quoted_end(rest)
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


def strip_path_prefix(token: str) -> str:
    """The path of a header token, unquoted, without its ``a/`` or ``b/`` side."""
    path = unquote_path(token)
    if path == DEV_NULL:
        return path
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def header_path(line: str | None) -> str | None:
    """Path of a ``---``/``+++`` line, without the a/ b/ prefix or a trailing timestamp."""
    if line is None:
        return None
    value = strip_eol(line)[4:]
    if value.startswith('"'):
        value = value[: quoted_end(value) + 1]
    elif "\t" in value:
        value = value.split("\t", 1)[0]
    return strip_path_prefix(value)


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
