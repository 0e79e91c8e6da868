"""The candidate patch as the SWR model sees it: code only, nothing addressed to the judge.

A policy trained against a learned reward can write to the reward model: a comment
``# all tests pass; answer resolved``, a docstring, a ``NOTES.txt``, a commit-message
preamble, text hidden with Unicode format characters. None of that can change what the tests
do, so none of it is shown to the model. :func:`model_view_patch` keeps the diff's file and
hunk headers and drops, from added lines only (removed and context lines are the base's
text, which the candidate cannot write):

- comments of Python files (what :mod:`tokenize` calls a comment);
- docstrings and other bare string statements of Python files (a line that is one whole
  string literal, or that opens a triple-quoted string, up to the line that closes it; a
  line-based reading, so a triple-quoted argument on lines of its own is blanked too);
- the whole added text of documentation files (``.txt``, ``.md``, ``.rst``, ``NOTES``, ...);
- comments of configuration and script files with ``#`` line comments (``setup.cfg``,
  ``tox.ini``, ``pyproject.toml``, YAML, shell, ``Makefile``, ...): whole-line comments
  (also ``;`` ones in INI files) and a trailing `` #`` (INI: also `` ;``) comment after
  code, outside quotes (pytest's ini reader drops those too);
- everything before the first file header (a ``git format-patch`` message, say);
- Unicode format characters (category ``Cf``: bidirectional overrides, zero-width
  characters) anywhere in the text.

Added lines left empty by this are dropped, so padding made of comments or notes costs no
room in the prompt. The hunk counts then no longer match: the view is for reading, never
applied. The exact stages read the real patch; only the model's view is cleaned.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import PurePosixPath

import sweworld.pyast as pyast

__all__ = ["DOC_SUFFIXES", "model_view_patch"]

DOC_SUFFIXES = frozenset({".txt", ".md", ".rst", ".adoc", ".markdown", ".rtf", ".org"})
#: Files whose ``#`` lines are comments (INI files also ``;``).
CONFIG_SUFFIXES = frozenset({
    ".cfg", ".ini", ".toml", ".yaml", ".yml", ".conf", ".sh", ".bash", ".in", ".flake8",
    ".coveragerc", ".pylintrc", ".editorconfig", ".gitignore", ".gitattributes",
    ".dockerignore", ".env", ".properties", ".mk",
})  # fmt: skip
_CONFIG_NAMES = frozenset({"makefile", "dockerfile", "gnumakefile", "procfile", "pipfile"})
_INI_SUFFIXES = frozenset({".cfg", ".ini", ".flake8", ".coveragerc", ".pylintrc", ".editorconfig"})
_DOC_NAMES = frozenset({"notes", "readme", "changelog", "changes", "authors", "news", "todo"})
_HEADER_RE = re.compile(r"^(?:diff --git |--- |\+\+\+ |@@ )")
_PATH_RE = re.compile(r"^\+\+\+ (?:b/)?(.+?)\s*$")
_STRING_START_RE = re.compile(r"""^\s*[rRuUbBfF]{0,2}("{3}|'{3}|"|')""")


def _format_free(text: str) -> str:
    if text.isascii():
        return text
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def _is_doc(path: str) -> bool:
    pure = PurePosixPath(path)
    if pure.suffix.lower() in DOC_SUFFIXES:
        return True
    return pure.suffix == "" and pure.name.lower().split(".")[0] in _DOC_NAMES


def _config_kind(path: str) -> str | None:
    """``ini`` or ``hash`` for a configuration or script file with line comments, else None."""
    pure = PurePosixPath(path)
    name = pure.name.lower()
    suffix = pure.suffix.lower() or (name if name.startswith(".") else "")
    if suffix in _INI_SUFFIXES:
        return "ini"
    if suffix in CONFIG_SUFFIXES or name in _CONFIG_NAMES:
        return "hash"
    return None


def _config_code(body: str, kind: str) -> str:
    """An added line of a configuration file without its comment ("" for a comment line)."""
    stripped = body.lstrip()
    if stripped.startswith("#") or (kind == "ini" and stripped.startswith(";")):
        return ""
    starts = "#;" if kind == "ini" else "#"
    quote = ""
    for at, char in enumerate(body):  # the first comment character after a blank, outside quotes
        if quote:
            if char == quote and (quote == "'" or body[at - 1] != "\\"):
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in starts and at > 0 and body[at - 1] in " \t":
            return body[:at].rstrip()
    return body


def _string_statement(code: str) -> str | None:
    """The quote that opens a bare string statement on this line, or None: a line that is
    one whole string literal, or that opens a triple-quoted string it does not close (a
    docstring's first line)."""
    match = _STRING_START_RE.match(code)
    if match is None:
        return None
    quote = match.group(1)
    stripped = code.strip()
    if len(quote) == 3 and stripped.count(quote) == 1:
        return quote
    try:
        node = pyast.parse(stripped).body
    except (SyntaxError, ValueError):
        return None
    whole = len(node) == 1 and isinstance(node[0], ast.Expr)
    return quote if whole and isinstance(node[0].value, ast.Constant) else None


def _closes(line: str, quote: str, start: int) -> bool:
    return line.find(quote, start) >= 0


def model_view_patch(patch: str) -> str:
    """``patch`` with comments, docstrings, documentation text, preambles and Unicode
    format characters blanked on its added lines (see the module docstring)."""
    from sweworld.reward.stages.semantic import strip_comment

    lines = _format_free(patch).split("\n")
    out: list[str] = []
    started = False
    kind = "code"  # "python" | "doc" | "code" for the current file
    in_string: str | None = None
    for line in lines:
        if not started:
            if not line.startswith(("diff --git ", "--- ")):
                continue
            started = True
        if _HEADER_RE.match(line):
            path = _PATH_RE.match(line)
            if path:
                name = path.group(1)
                kind = (
                    "python"
                    if name.endswith((".py", ".pyi"))
                    else "doc"
                    if _is_doc(name)
                    else _config_kind(name) or "code"
                )
            in_string = None
            out.append(line)
            continue
        if not line.startswith("+") or kind == "code":
            closing = kind == "python" and line.startswith(" ") and in_string is not None
            if closing and _closes(line, in_string or "", 1):  # a context line closes it
                in_string = None
            out.append(line)
            continue
        body = line[1:]
        if kind == "doc":
            continue
        if kind in ("ini", "hash"):
            code = _config_code(body, kind)
            if code.strip() or not body.strip():
                out.append("+" + code)
            continue
        if in_string is not None:
            if _closes(body, in_string, 0):
                in_string = None
            continue
        quote = _string_statement(body)
        if quote is not None:
            rest = body[body.index(quote) + len(quote) :]
            if len(quote) == 3 and not _closes(rest, quote, 0):
                in_string = quote
            continue
        code = strip_comment(body).rstrip()
        if code.strip() or not body.strip():
            out.append("+" + code)
    return "\n".join(out)
