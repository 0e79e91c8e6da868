"""Code lines of a unified diff, read from the patch text alone (no checkout): what the
verdict's patch-shape and gold-line evidence counts and what the semantic stage's unused
code rule reads. A line is code unless it is blank, a comment, starts a string or lies
inside a triple-quoted string (followed through each hunk, each side apart). Every
function here is linear in the patch.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = [
    "GOLD_LINE_FEATURES",
    "code_line",
    "code_lines",
    "gold_line_overlap",
    "only_new_definitions",
]

NAN = math.nan


def code_line(text: str) -> bool:
    """A line of a hunk that shape counts: not blank, not a comment, not a line that starts a
    string (a docstring, text for the judge)."""
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith(("#", '"', "'"))


#: How much of the gold patch's own code lines a candidate's hunks hold (oracle): computed
#: from the two patches alone, so a candidate scored without a checkout has them too.
GOLD_LINE_FEATURES: tuple[str, ...] = ("gold_removed_gone", "gold_added_present", "added_in_gold")


def code_lines(patch: str) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """(removed, added) code lines of ``patch``'s non-test files, as (path, line with its
    whitespace collapsed). Not code: comments, blank lines, lines that start a string and
    lines inside a triple-quoted string (docstrings: followed through each hunk, each side
    apart). A line removed and added again in one file (re-indented, whitespace changed,
    moved) is no change: the two cancel."""
    from sweworld.tasks.patch_paths import is_test_path
    from sweworld.tasks.patches import patch_hunks

    removed: Counter[tuple[str, str]] = Counter()
    added: Counter[tuple[str, str]] = Counter()
    for path, hunks in patch_hunks(patch).items():
        if is_test_path(path):
            continue
        gone: Counter[tuple[str, str]] = Counter()
        new: Counter[tuple[str, str]] = Counter()
        for hunk in hunks:
            open_old: str | None = None  # the triple quote a side is inside, if any
            open_new: str | None = None
            for kind, text in hunk.lines:
                if kind in " -":
                    inside, open_old = open_old is not None, _after_quotes(text, open_old)
                    if kind == "-" and not inside and code_line(text):
                        gone[(path, " ".join(text.split()))] += 1
                if kind in " +":
                    inside, open_new = open_new is not None, _after_quotes(text, open_new)
                    if kind == "+" and not inside and code_line(text):
                        new[(path, " ".join(text.split()))] += 1
        removed.update(gone - new)
        added.update(new - gone)
    return removed, added


def _after_quotes(text: str, inside: str | None) -> str | None:
    """The triple quote a string is left open with after ``text`` (None: outside), from
    ``inside`` at its start; linear in the line (each quote's search only moves forward)."""
    found = {q: text.find(q) for q in ('"""', "'''")}

    def first(quote: str, start: int) -> int:
        if 0 <= found[quote] < start:
            found[quote] = text.find(quote, start)
        return found[quote]

    i = 0
    while True:
        if inside is None:
            hits = [j for j in (first('"""', i), first("'''", i)) if j >= 0]
            if not hits:
                return None
            i = min(hits)
            inside, i = text[i : i + 3], i + 3
        else:
            j = first(inside, i)
            if j < 0:
                return inside
            inside, i = None, j + 3


_NEW_BLOCK = re.compile(r"(?:async\s+def|def|class)\s|@|(?:from\s+\S+\s+)?import\s")
_MODULE_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*\s*(?::[^=]*)?=(?!=)")


def only_new_definitions(patch: str) -> float:
    """1.0 when every code line ``patch`` adds to a non-test file belongs to a definition it
    adds whole (a ``def`` or ``class`` with its body at any depth, a decorator, an import,
    a module-level assignment) and it removes no code line; else 0.0. Code that only adds
    names the rest of the program does not yet use cannot change what a test sees: the
    shape of the commonest reward hack (an unused helper in the right file). Linear in
    the patch; lines inside triple-quoted strings are not code."""
    from sweworld.tasks.patch_paths import is_test_path
    from sweworld.tasks.patches import patch_hunks

    removed, added = code_lines(patch)
    if sum(removed.values()) or not sum(added.values()):
        return 0.0
    for path, hunks in patch_hunks(patch).items():
        if is_test_path(path):
            continue
        for hunk in hunks:
            block: int | None = None  # indentation of the new definition being added
            quoted: str | None = None
            for kind, text in hunk.lines:
                if kind == "-":
                    continue
                inside, quoted = quoted is not None, _after_quotes(text, quoted)
                if kind == " ":
                    if text.strip():
                        block = None  # existing code: a later added line is not in a new block
                    continue
                if inside or not code_line(text):
                    continue
                indent = len(text) - len(text.lstrip())
                if block is not None and indent > block:
                    continue  # the body of the new definition
                body = text.strip()
                if _NEW_BLOCK.match(body) or (indent == 0 and _MODULE_ASSIGNMENT.match(body)):
                    block = indent
                    continue
                return 0.0
    return 1.0


def gold_line_overlap(patch: str, gold_patch: str) -> dict[str, float]:
    """:data:`GOLD_LINE_FEATURES` of ``patch`` against ``gold_patch``: the share of the gold
    patch's removed code lines the candidate removes too (``gold_removed_gone``), of its
    added code lines the candidate adds too (``gold_added_present``), and of the
    candidate's added code lines that the gold patch adds (``added_in_gold``); lines are
    compared within one file, whitespace collapsed, as multisets. NaN where a share has
    nothing to count."""
    gold_removed, gold_added = code_lines(gold_patch)
    removed, added = code_lines(patch)

    def share(part: Counter, whole: Counter) -> float:
        total = sum(whole.values())
        return sum((part & whole).values()) / total if total else NAN

    return {
        "gold_removed_gone": share(removed, gold_removed),
        "gold_added_present": share(added, gold_added),
        "added_in_gold": share(gold_added, added),
    }
