"""R2E-Gym's ``search`` tool, in process.

Same parameters and output strings as ``r2egym/agenthub/tools/search.py``:

* ``path`` (default ``.``, relative to the working directory) names a **file**: the lines
  matching ``search_term`` as ``grep -n`` prints them (``search_term`` is a POSIX basic
  regular expression, as grep reads it; translated to Python's ``re``);
* otherwise a **directory**: every non-hidden file (only ``.py`` files when
  ``python_only``) below it, hidden directories skipped, counted per file by substring
  match per line; more than 100 matching files ask the agent to narrow the search.

Directories are walked with ``os.scandir`` in sorted order (top-down, like ``os.walk``);
symbolic links are resolved inside the sandbox and skipped when they leave it; paths are
printed as sandbox paths (the searched directory by its canonical path, files relative to
the working directory and prefixed with ``./``, as R2E-Gym prints them).
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from sweworld.sandbox.paths import PathOutsideWorkspace
from sweworld.sandbox.tools.base import ToolContext, ToolResult, ToolSpec, parse_bool, printed

__all__ = ["MAX_MATCHED_FILES", "SPEC", "GrepPatternError", "bre_to_python", "search"]

SPEC = ToolSpec(name="search", required=("search_term",), optional=("path", "python_only"))
MAX_MATCHED_FILES = 100


class GrepPatternError(ValueError):
    """A pattern grep itself would refuse (its message is grep's)."""


_CLASSES = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v",
    "blank": " \\t",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "xdigit": "0-9A-Fa-f",
    "cntrl": "\\x00-\\x1f\\x7f",
    "print": "\\x20-\\x7e",
    "graph": "\\x21-\\x7e",
}
_UNMATCHED_BRACKET = "grep: Unmatched [, [^, [:, [., or [="


def _bracket(pattern: str, i: int) -> tuple[str, int]:
    """Translate the bracket expression starting at ``pattern[i] == "["``."""
    n = len(pattern)
    j = i + 1
    negate = j < n and pattern[j] == "^"
    if negate:
        j += 1
    items: list[str] = []
    first = True
    while True:
        if j >= n:
            raise GrepPatternError(_UNMATCHED_BRACKET)
        c = pattern[j]
        if c == "]" and not first:
            j += 1
            break
        first = False
        if c == "[" and j + 1 < n and pattern[j + 1] in ":.=":
            kind = pattern[j + 1]
            close = pattern.find(kind + "]", j + 2)
            if close == -1:
                raise GrepPatternError(_UNMATCHED_BRACKET)
            name = pattern[j + 2 : close]
            j = close + 2
            if kind == ":":
                if name not in _CLASSES:
                    raise GrepPatternError("grep: Invalid character class name")
                items.append(_CLASSES[name])
            else:
                items.append(re.escape(name))
            continue
        # a range "a-z" (a "-" right before the closing "]" is literal)
        if j + 2 < n and pattern[j + 1] == "-" and pattern[j + 2] != "]":
            lo, hi = c, pattern[j + 2]
            if ord(lo) > ord(hi):
                raise GrepPatternError("grep: Invalid range end")
            items.append(f"{re.escape(lo)}-{re.escape(hi)}")
            j += 3
            continue
        items.append(re.escape(c))
        j += 1
    return "[" + ("^" if negate else "") + "".join(items) + "]", j


def bre_to_python(pattern: str) -> str:
    """Translate a GNU grep basic regular expression into a Python ``re`` pattern.

    Handles ``.``, ``*``, anchors (only where BRE treats them as anchors), bracket
    expressions with POSIX classes, ``\\( \\)``, ``\\{m,n\\}``, back-references and GNU's
    ``\\| \\+ \\? \\< \\> \\b \\B \\w \\W \\s \\S``. ``+ ? | ( ) { }`` are literal.

    Raises:
        GrepPatternError: where grep reports an error (e.g. an unmatched ``[``).
    """
    out: list[str] = []
    n = len(pattern)
    i = 0
    depth = 0
    # position "at the start" of an expression: "^" anchors and "*" is literal there
    at_start = True
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise GrepPatternError("grep: Trailing backslash")
            d = pattern[i + 1]
            i += 2
            if d == "(":
                depth += 1
                out.append("(")
                at_start = True
                continue
            if d == ")":
                if depth == 0:
                    raise GrepPatternError("grep: Unmatched ) or \\)")
                depth -= 1
                out.append(")")
            elif d == "|":
                out.append("|")
                at_start = True
                continue
            elif d == "{":
                close = pattern.find("\\}", i)
                if close == -1:
                    raise GrepPatternError("grep: Unmatched \\{")
                body = pattern[i:close]
                if not re.fullmatch(r"\d*(,\d*)?", body) or body in ("", ","):
                    raise GrepPatternError("grep: Invalid content of \\{\\}")
                if at_start:
                    out.append(re.escape("{" + body + "}"))
                else:
                    out.append("{" + body + "}")
                i = close + 2
            elif d in "+?":
                out.append(re.escape(d) if at_start else d)
            elif d in "123456789":
                out.append("\\" + d)
            elif d == "<":
                out.append(r"\b(?=\w)")
            elif d == ">":
                out.append(r"\b(?<=\w)")
            elif d in "bBwWsS":
                out.append("\\" + d)
            elif d == "`":
                out.append(r"\A")
            elif d == "'":
                out.append(r"\Z")
            else:
                out.append(re.escape(d))
            at_start = False
            continue
        if c == "[":
            text, i = _bracket(pattern, i)
            out.append(text)
            at_start = False
            continue
        if c == "^":
            out.append("^" if at_start else re.escape(c))
            i += 1
            continue  # "*" right after a leading "^" is still literal
        if c == "$":
            rest = pattern[i + 1 :]
            is_anchor = rest == "" or rest.startswith("\\)") or rest.startswith("\\|")
            out.append("$" if is_anchor else re.escape(c))
            i += 1
            at_start = False
            continue
        if c == "*":
            out.append(re.escape(c) if at_start else "*")
            i += 1
            at_start = False
            continue
        if c == ".":
            out.append(".")
        else:
            out.append(re.escape(c))
        i += 1
        at_start = False
    if depth:
        raise GrepPatternError("grep: Unmatched ( or \\(")
    return "".join(out)


def _grep_file(term: str, host: Path) -> tuple[list[str], bool]:
    """``grep -n term file``: the numbered matching lines, and whether the file is binary."""
    regex = re.compile(bre_to_python(term))
    matched: list[str] = []
    binary = False
    with open(host, "rb") as handle:
        for no, raw in enumerate(handle, 1):
            if b"\x00" in raw:
                binary = True
            line = raw[:-1] if raw.endswith(b"\n") else raw
            text = line.decode("utf-8", errors="replace")
            if regex.search(text):
                matched.append(f"{no}:{text}")
    return matched, binary


def _count_in_file(term: str, host: Path) -> int:
    count = 0
    with open(host, encoding="utf-8", errors="ignore", newline=None) as handle:
        for line in handle:
            if term in line:
                count += 1
    return count


def _search_file(ctx: ToolContext, term: str, host: Path, shown: str) -> ToolResult:
    try:
        matched, binary = _grep_file(term, host)
    except GrepPatternError as exc:
        return ToolResult(printed(f"Error executing grep:\n{exc}\n"), exit_code=2)
    except OSError as exc:
        message = f"grep: {shown}: {exc.strerror or exc}"
        return ToolResult(printed(f"Error executing grep:\n{message}\n"), exit_code=2)
    if not matched:
        return ToolResult(printed(f'No matches found for "{term}" in {shown}'))
    # grep tells about a matching binary file on stderr only (GNU grep >= 3.5)
    body = "" if binary else "\n".join(matched).strip()
    return ToolResult(printed(f'Matches for "{term}" in {shown}:', body))


def _walk(ctx: ToolContext, host_dir: Path, sandbox_dir: str, python_only: bool):
    """Yield ``(sandbox_path, host_path)`` of the files to search, in ``os.walk`` order."""
    stack: list[tuple[Path, str]] = [(host_dir, sandbox_dir)]
    while stack:
        host, sandbox = stack.pop()
        try:
            with os.scandir(host) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[tuple[Path, str]] = []
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            sandbox_path = posixpath.join(sandbox, name)
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_link:
                try:
                    target = ctx.paths.to_host(sandbox_path)
                except PathOutsideWorkspace:
                    continue
                if not target.is_file():
                    continue  # os.walk does not descend into linked directories
                if python_only and not name.endswith(".py"):
                    continue
                yield sandbox_path, target
            elif is_dir:
                subdirs.append((Path(entry.path), sandbox_path))
            elif entry.is_file(follow_symlinks=False):  # never open a FIFO or a device
                if python_only and not name.endswith(".py"):
                    continue
                yield sandbox_path, Path(entry.path)
        stack.extend(reversed(subdirs))


def _search_dir(
    ctx: ToolContext, term: str, host: Path, directory: str, python_only: bool
) -> ToolResult:
    matches: list[tuple[str, int]] = []
    for sandbox_path, host_path in _walk(ctx, host, directory, python_only):
        try:
            count = _count_in_file(term, host_path)
        except OSError:
            continue
        if count:
            matches.append((sandbox_path, count))
    if not matches:
        return ToolResult(printed(f'No matches found for "{term}" in {directory}'))
    if len(matches) > MAX_MATCHED_FILES:
        return ToolResult(
            printed(
                f'More than {len(matches)} files matched for "{term}" in {directory}. '
                "Please narrow your search."
            )
        )
    total = sum(count for _, count in matches)
    lines = [f'Found {total} matches for "{term}" in {directory}:']
    for sandbox_path, count in matches:
        rel = posixpath.relpath(sandbox_path, ctx.cwd)
        if not rel.startswith("./"):
            rel = "./" + rel
        lines.append(f"{rel} ({count} matches)")
    lines.append(f'End of matches for "{term}" in {directory}')
    return ToolResult(printed(*lines), info={"files": len(matches), "matches": total})


def search(ctx: ToolContext, params: dict[str, str]) -> ToolResult:
    """Run one ``search`` call. Usage errors raise :class:`~.base.ToolError`."""
    params = SPEC.check(params)
    term = params["search_term"]
    path = params.get("path", ".")
    python_only = (
        parse_bool("python_only", params["python_only"])
        if "python_only" in params
        else ctx.config.python_only
    )
    try:
        canonical = ctx.paths.resolve(path, ctx.cwd)
        host = ctx.paths.to_host(canonical)
    except PathOutsideWorkspace as exc:
        return ToolResult(printed(f"ERROR: {exc}"), exit_code=1)
    if host.is_file():
        return _search_file(ctx, term, host, canonical)
    if not host.is_dir():
        return ToolResult(
            printed(f"Directory '{canonical}' not found or not a directory."), exit_code=1
        )
    return _search_dir(ctx, term, host, canonical, python_only)
