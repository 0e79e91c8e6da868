"""The semantic stage: empty and no-op patches, test tampering, equivalence with the gold fix.

Python text is normalised by :func:`normalize_source`: comments, docstrings and formatting
are removed by parsing with :mod:`ast`, dropping docstrings and rendering with
:func:`ast.unparse`. Code the running interpreter cannot parse (newer grammar) gets a
token-level canonical form (:mod:`tokenize`), and anything else a line-based one, so the
function never raises. (libcst is deliberately not used here: its native parser crashes
the process on ~2,000 nested brackets and takes time superlinear in the length of long
operator chains, so it cannot be trusted with arbitrary candidate text.)

A change is compared per file. With whole files (files scope) a file's state is its
normalised text after the patch (or "deleted"); a file whose normalised text does not
change is dropped. With hunks only, a file's state is the ordered lists of its removed and
added lines, each without comment, trailing spaces, blank lines and with inner whitespace
collapsed (indentation is kept: it is code in Python); a hunk whose two sides normalise
to the same code (when both parse alone) or the same lines is dropped. Two candidates are
equivalent when their states are equal; :func:`change_signature` hashes them.

Verdicts: ``fail`` + short circuit + score 0 for an empty patch, a no-op, test tampering,
or a tests-only patch (unless the gold patch is known and tests-only too: in blind mode,
or without a gold patch, tests-only fails); ``pass`` with score 1.0 when the candidate is
equivalent to the gold patch in oracle mode; ``pass`` with score None otherwise.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import logging
import re
import textwrap
import threading
import time
import tokenize
import warnings
from collections import OrderedDict
from typing import Any

import sweworld.pyast as pyast
from sweworld.reward.candidate import Hunk, is_test_file, patch_hunks
from sweworld.reward.stages.common_text import strip_comment  # also read from here
from sweworld.reward.stages.tampering import tampering_reasons
from sweworld.reward.stages.unused import unused_private_names
from sweworld.reward.types import CandidateView, RewardContext, StageResult
from sweworld.tasks.patches import split_patch

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

__all__ = [
    "SemanticStage",
    "change_signature",
    "gold_equivalent",
    "normalize_line",
    "normalize_source",
    "strip_comment",
    "tampering_reasons",
]


class _Undecidable(Exception):
    """Some file's change cannot be compared (binary, unreadable)."""


# --------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------


def _normalize_ast(text: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = pyast.parse(text)
    pyast.strip_docstrings(tree)
    return ast.unparse(tree)


_DEF_WORDS = frozenset({"def", "class"})


def _normalize_tokens(text: str) -> str:
    """Token-level canonical form: comments, blank lines and docstrings dropped, one
    logical line per line, tokens joined by single spaces, indentation by depth. Linear
    time; raises tokenize's errors for text that does not tokenize."""
    out: list[str] = []
    current: list[str] = []
    kinds: list[int] = []
    depth = 0
    expect_doc = True  # the next logical line may be a docstring
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = token.type
        if kind in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        if kind == tokenize.INDENT:
            depth += 1
            continue
        if kind == tokenize.DEDENT:
            depth -= 1
            continue
        if kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if current:
                is_doc = expect_doc and all(k == tokenize.STRING for k in kinds)
                if not is_doc:
                    out.append("  " * depth + " ".join(current))
                words = [w for w in current[:2] if w != "async"]
                expect_doc = bool(words) and words[0] in _DEF_WORDS and current[-1] == ":"
            current, kinds = [], []
            continue
        current.append(token.string)
        kinds.append(kind)
    return "\n".join(out)


_WS_RE = re.compile(r"\s+")


def normalize_line(line: str, *, comments: bool = True) -> str:
    """One line of code for comparison: comment removed (``comments=True``), trailing
    whitespace stripped, inner runs of whitespace collapsed, indentation kept (tabs
    expanded). An empty result means "no code"."""
    body = line.rstrip("\r\n")
    if comments:
        body = strip_comment(body)
    body = body.expandtabs(8).rstrip()
    stripped = body.lstrip()
    if not stripped:
        return ""
    return " " * (len(body) - len(stripped)) + _WS_RE.sub(" ", stripped)


def _normalize_lines(text: str, *, comments: bool = True) -> list[str]:
    return [n for n in (normalize_line(line, comments=comments) for line in text.split("\n")) if n]


_CACHE: OrderedDict[str, str] = OrderedDict()
_CACHE_SIZE = 128
_CACHE_MAX_TEXT = 256_000
_CACHE_LOCK = threading.Lock()


def normalize_source(text: str) -> str:
    """Canonical form of Python source: no comments, no docstrings, no formatting.

    Uses :mod:`ast` (docstrings removed, ``ast.unparse``); for code the running
    interpreter cannot parse (e.g. newer grammar), a token-level form (see
    :func:`_normalize_tokens`); for code that does not even tokenize, the lines without
    comments and blank lines. Never raises. Results for small texts are cached.
    """
    key = ""
    if len(text) <= _CACHE_MAX_TEXT:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is not None:
                _CACHE.move_to_end(key)
                return cached
    result = _normalize_uncached(text)
    if key:
        with _CACHE_LOCK:
            _CACHE[key] = result
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return result


def _normalize_uncached(text: str) -> str:
    try:
        return _normalize_ast(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        return "#tokens\n" + _normalize_tokens(text)
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    return "#lines\n" + "\n".join(_normalize_lines(text))


def _normalize_text(text: str, is_python: bool) -> str:
    if is_python:
        return normalize_source(text)
    return "\n".join(
        normalize_line(line, comments=False) for line in text.split("\n") if line.strip()
    )


# --------------------------------------------------------------------------------------
# States of a change
# --------------------------------------------------------------------------------------


def _whole_files(view: CandidateView) -> bool:
    """Every file's text is known on the sides it exists."""
    for changed in view.files:
        if changed.binary or changed.error:
            return False
        if changed.status != "added" and changed.before is None:
            return False
        if changed.status != "deleted" and changed.after is None:
            return False
    return True


def _file_states(view: CandidateView) -> dict[str, Any]:
    """path -> normalised text after the patch (None: deleted), changed files only."""
    states: dict[str, Any] = {}
    for changed in view.files:
        if changed.binary or changed.error:
            raise _Undecidable(changed.path)
        old = changed.old_path or changed.path
        after = None if changed.after is None else _normalize_text(changed.after, changed.is_python)
        if changed.status == "modified" and changed.before is not None:
            before = _normalize_text(changed.before, changed.is_python)
            if before == after:
                continue
        if changed.status == "renamed" and old != changed.path:
            states[old] = None
        states[changed.path] = after
    return states


def _hunk_noop(hunk: Hunk) -> bool:
    old, new = textwrap.dedent(hunk.old_text), textwrap.dedent(hunk.new_text)
    try:
        if _normalize_ast(old) == _normalize_ast(new):
            return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    return False


def _anchored_lines(hunk: Hunk, is_python: bool) -> tuple[list[str], list[str]]:
    """The hunk's removed and added code lines, normalised, each prefixed with where it is
    in the base file (``"LINE:code"``): a removed line its own line number, an added line
    the number of the base line it is inserted before. Both patches are diffs of the same
    base, so the same change has the same anchors whatever the context size or comments;
    without them, the gold's lines added in another function were "equivalent"."""
    minus: list[str] = []
    plus: list[str] = []
    line = hunk.old_start if hunk.old_len else hunk.old_start + 1
    for kind, text in hunk.lines:
        if kind == "+":
            normalized = normalize_line(text, comments=is_python)
            if normalized:
                plus.append(f"{line}:{normalized}")
            continue
        if kind == "-":
            normalized = normalize_line(text, comments=is_python)
            if normalized:
                minus.append(f"{line}:{normalized}")
        line += 1
    return minus, plus


def _hunk_states(view: CandidateView) -> dict[str, Any]:
    """path -> (status, removed lines, added lines) from the hunks, changed files only."""
    hunks_by_path = patch_hunks(view.patch)
    states: dict[str, Any] = {}
    for changed in view.files:
        if changed.binary or (changed.error and changed.error.startswith("unsafe")):
            raise _Undecidable(changed.path)
        if changed.status == "added" and changed.after is not None:
            states[changed.path] = ["added", _normalize_text(changed.after, changed.is_python)]
            continue
        if changed.status == "deleted":
            states[changed.path] = ["deleted"]
            continue
        removed: list[str] = []
        added: list[str] = []
        for hunk in hunks_by_path.get(changed.path, []):
            if changed.is_python and _hunk_noop(hunk):
                continue
            minus, plus = _anchored_lines(hunk, changed.is_python)
            # Compare whole sides (context included), so that moving lines within a hunk
            # is a change even though the removed and added lines are the same.
            old_side = [
                n
                for n in (
                    normalize_line(t, comments=changed.is_python)
                    for t in hunk.old_text.splitlines()
                )
                if n
            ]
            new_side = [
                n
                for n in (
                    normalize_line(t, comments=changed.is_python)
                    for t in hunk.new_text.splitlines()
                )
                if n
            ]
            if old_side != new_side:
                removed += minus
                added += plus
                if [m.split(":", 1)[1] for m in minus] == [p.split(":", 1)[1] for p in plus]:
                    # a move: the new order is the change
                    added.append("<order> " + " | ".join(new_side))
        if changed.status == "renamed" and changed.old_path and changed.old_path != changed.path:
            states[changed.old_path] = ["renamed-away"]
            states[changed.path] = ["renamed", removed, added]
        elif removed or added:
            states[changed.path] = ["modified", removed, added]
    return states


def _states(view: CandidateView) -> tuple[str, dict[str, Any]]:
    if _whole_files(view):
        return "files", _file_states(view)
    return "hunks", _hunk_states(view)


def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]


def change_signature(view: CandidateView) -> str:
    """A stable hash of a candidate's normalised change: equal for candidates whose changes
    differ only in comments, docstrings and formatting; the same for every candidate that
    changes nothing (empty or no-op). A patch that does not parse hashes its raw text."""
    if view.parse_error:
        return _digest("unparsable\0" + view.patch)
    try:
        mode, states = _states(view)
    except _Undecidable:
        return _digest("opaque\0" + view.patch)
    if not states:
        return _digest("nochange")
    return _digest(mode + "\0" + json.dumps(sorted(states.items()), ensure_ascii=False))


def gold_equivalent(candidate: CandidateView, gold: CandidateView | None) -> bool | None:
    """Whether ``candidate`` makes the same normalised change as ``gold``: per file, equal
    normalised texts after both patches (both in files scope), else equal normalised
    removed and added lines. None when there is no gold or it cannot be decided."""
    if gold is None or gold.parse_error or gold.empty or candidate.parse_error:
        return None
    try:
        if _whole_files(candidate) and _whole_files(gold):
            return _file_states(candidate) == _file_states(gold)
        return _hunk_states(candidate) == _hunk_states(gold)
    except _Undecidable:
        return None


# --------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------


def _gold_touches_code(ctx: RewardContext) -> bool | None:
    """Whether the gold patch changes a non-test file (None: unknown, e.g. blind mode)."""
    if ctx.mode != "oracle":
        return None
    if ctx.gold is not None and not ctx.gold.parse_error and not ctx.gold.empty:
        return any(not f.is_test for f in ctx.gold.files)
    task = ctx.task
    gold = task.get("patch") if isinstance(task, dict) else getattr(task, "patch", None)
    if not gold:
        return None
    try:
        parts = split_patch(gold)
    except Exception:
        return None
    hunks = patch_hunks(gold)
    return any(not is_test_file(p.path, hunks.get(p.path, [])) for p in parts) if parts else None


class SemanticStage:
    """Flags empty, no-op, tampering and tests-only candidates (fail, short circuit) and
    recognises a candidate equivalent to the gold patch (oracle mode: score 1.0)."""

    name = "semantic"

    def run(self, ctx: RewardContext) -> StageResult:
        """Judge ``ctx.candidate``; never raises."""
        start = time.perf_counter()
        try:
            result = self._run(ctx)
        except Exception as exc:
            logger.debug("semantic stage failed", exc_info=True)
            result = StageResult(self.name, "error", message=f"{type(exc).__name__}: {exc}")
        result.latency_s = time.perf_counter() - start
        return result

    def _run(self, ctx: RewardContext) -> StageResult:
        view = ctx.candidate
        if view.parse_error:
            return StageResult(
                self.name,
                "skip",
                message="the patch does not parse",
                evidence={"parse_error": view.parse_error},
            )
        try:
            _, states = _states(view)
            noop: bool | None = bool(view.files) and not states
        except _Undecidable:
            noop = False  # a binary or unreadable change is a change
        tests_only = bool(view.files) and all(f.is_test for f in view.files)
        tampering = tampering_reasons(view)
        equivalent = gold_equivalent(view, ctx.gold) if ctx.mode == "oracle" else None
        gold_code = _gold_touches_code(ctx)
        evidence: dict[str, Any] = {
            "scope": view.scope,
            "empty": view.empty,
            "noop": noop,
            "tests_only": tests_only,
            "test_tampering": bool(tampering),
            "tampering": tampering,
            "gold_equivalent": equivalent,
            "gold_touches_code": gold_code,
            "signature": change_signature(view),
        }

        def fail(message: str) -> StageResult:
            return StageResult(self.name, "fail", 0.0, True, message, evidence)

        if view.empty:
            return fail("empty patch")
        if noop:
            return fail("no-op: the change vanishes without comments, docstrings and formatting")
        if tampering:
            more = f" (+{len(tampering) - 1} more)" if len(tampering) > 1 else ""
            return fail(f"test tampering: {tampering[0]}{more}")
        if tests_only and gold_code is not False:
            return fail("only test files are changed")
        unused = unused_private_names(view, str(getattr(ctx.task, "test_patch", "") or ""))
        evidence["unused_private"] = unused
        if unused and not (ctx.gold is not None and unused_private_names(ctx.gold)):
            shown = ", ".join(unused[:3]) + (
                f" (+{len(unused) - 3} more)" if len(unused) > 3 else ""
            )
            return fail(f"adds only private definitions nothing refers to: {shown}")
        if equivalent and ctx.mode == "oracle":
            return StageResult(
                self.name, "pass", 1.0, False, "equivalent to the gold patch", evidence
            )
        return StageResult(self.name, "pass", None, False, "no semantic red flag", evidence)
