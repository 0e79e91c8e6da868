"""The syntax stage: a candidate that breaks the syntax of a Python file scores 0.

Whole files (``scope == "files"``, and added files in any scope) are compiled with CPython
(``compile``, so errors found after parsing, like ``return`` outside a function, count
too); the first ERROR/MISSING node of tree-sitter-python is reported beside CPython's
location. Only errors the patch *introduces* fail the candidate: a file that did not
compile before the patch is listed as ``preexisting``.

With hunks only, each hunk's two sides are dedented and parsed with tree-sitter (which
tolerates partial code). A hunk fails only when its old side parses without any error
node, its new side has one, and CPython cannot compile the new side on its own either
(a guard against gaps in the tree-sitter grammar). Everything else passes: the check is
deliberately conservative.
"""

from __future__ import annotations

import logging
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sweworld.pyast as pyast
from sweworld.reward.candidate import patch_hunks
from sweworld.reward.types import CandidateView, ChangedFile, RewardContext, StageResult

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

__all__ = ["SyntaxIssue", "SyntaxStage", "check_source", "tree_sitter_errors"]


@dataclass(frozen=True)
class SyntaxIssue:
    """Where and why a source text does not compile (lines and columns are 1-based)."""

    line: int
    column: int
    message: str
    text: str = ""
    ts_line: int | None = None
    ts_column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "text": self.text,
            "ts_line": self.ts_line,
            "ts_column": self.ts_column,
        }


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_python

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


def tree_sitter_errors(text: str, limit: int = 50) -> list[tuple[int, int, str]]:
    """ERROR and MISSING nodes of tree-sitter-python's parse of ``text`` as
    ``(line, column, kind)`` (1-based, column in characters), in source order.

    Returns an empty list when tree-sitter is not available.
    """
    try:
        parser = _parser()
    except Exception:
        return []
    data = text.encode("utf-8", errors="surrogatepass")
    tree = parser.parse(data)
    lines = data.split(b"\n")
    out: list[tuple[int, int, str]] = []
    stack = [tree.root_node]
    while stack and len(out) < limit:
        node = stack.pop()
        if node.is_error or node.is_missing:
            row, col = node.start_point
            prefix = lines[row][:col] if row < len(lines) else b""
            kind = f"missing {node.type}" if node.is_missing else "error"
            out.append((row + 1, len(prefix.decode("utf-8", errors="replace")) + 1, kind))
            continue
        if node.has_error:
            stack.extend(reversed(node.children))
    return sorted(out)


def _line(text: str, number: int) -> str:
    lines = text.split("\n")
    return lines[number - 1].rstrip("\r")[:200] if 0 < number <= len(lines) else ""


def check_source(
    text: str, filename: str = "<candidate>", feature_version: tuple[int, int] | None = None
) -> SyntaxIssue | None:
    """The first syntax error of ``text`` as CPython sees it, or None when it compiles.

    ``feature_version`` (older than the running interpreter) additionally checks the
    grammar of that Python version (:func:`ast.parse`'s best-effort ``feature_version``).
    Raises RecursionError / MemoryError for pathological input.
    """
    issue: SyntaxIssue | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, filename, "exec", dont_inherit=True)
            if feature_version is not None and feature_version < sys.version_info[:2]:
                pyast.parse(text, filename, feature_version=feature_version)
        except SyntaxError as exc:
            line = exc.lineno or 1
            issue = SyntaxIssue(
                line=line,
                column=exc.offset or 1,
                message=f"{type(exc).__name__}: {exc.msg}",
                text=_line(text, line),
            )
        except ValueError as exc:  # NUL bytes (Python < 3.12)
            line = text[: text.find("\0")].count("\n") + 1 if "\0" in text else 1
            issue = SyntaxIssue(line=line, column=1, message=f"ValueError: {exc}")
    if issue is None:
        return None
    located = tree_sitter_errors(text, limit=1)
    if located:
        ts_line, ts_column, _ = located[0]
        issue = SyntaxIssue(issue.line, issue.column, issue.message, issue.text, ts_line, ts_column)
    return issue


def _parse_version(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        major, _, minor = value.strip().partition(".")
        return int(major), int(minor.split(".")[0] or 0)
    major, minor = tuple(value)[:2]
    return int(major), int(minor)


class SyntaxStage:
    """Fails (score 0, short circuit) a candidate that introduces a Python syntax error.

    Args:
        python_version: the task's Python (``"3.8"`` or ``(3, 8)``); grammar newer than
            that is an error too. None: the running interpreter's grammar.
        fail_on_apply_error: a patch that does not parse, or does not apply to the base
            checkout (``git apply`` and ``patch --fuzz=5`` both refuse it, as the real
            harness would), fails here as well.
    """

    name = "syntax"

    def __init__(
        self, python_version: str | tuple[int, int] | None = None, fail_on_apply_error: bool = True
    ) -> None:
        self.feature_version = _parse_version(python_version)
        self.fail_on_apply_error = fail_on_apply_error

    def run(self, ctx: RewardContext) -> StageResult:
        """Check ``ctx.candidate``; never raises."""
        start = time.perf_counter()
        try:
            result = self._run(ctx.candidate)
        except Exception as exc:  # the stage's own failure, not the candidate's
            logger.debug("syntax stage failed", exc_info=True)
            result = StageResult(self.name, "error", message=f"{type(exc).__name__}: {exc}")
        result.latency_s = time.perf_counter() - start
        return result

    def _run(self, view: CandidateView) -> StageResult:
        evidence: dict[str, Any] = {"scope": view.scope}

        def stop(message: str) -> StageResult:  # a certain failure: score 0, no later stage
            return StageResult(self.name, "fail", 0.0, True, message, evidence)

        if view.parse_error:
            evidence["parse_error"] = view.parse_error
            if self.fail_on_apply_error:
                return stop(f"the patch does not parse: {view.parse_error}")
            return StageResult(self.name, "skip", message="the patch does not parse")
        if view.empty:
            return StageResult(self.name, "skip", message="empty candidate", evidence=evidence)
        if view.apply_error:
            evidence["apply_error"] = view.apply_error
            if self.fail_on_apply_error:
                return stop(f"the patch does not apply to the base: {view.apply_error}")
        python = [f for f in view.files if f.is_python]
        if not python:
            return StageResult(
                self.name, "skip", message="no Python file changed", evidence=evidence
            )

        errors: list[dict[str, Any]] = []
        preexisting: list[dict[str, Any]] = []
        unchecked: list[dict[str, str]] = []
        checked: list[str] = []
        hunks = None
        for changed in python:
            if changed.status == "deleted":
                continue
            if changed.error:
                unchecked.append({"file": changed.path, "reason": changed.error})
                continue
            try:
                if changed.after is not None:
                    self._check_file(changed, errors, preexisting)
                else:
                    if hunks is None:
                        hunks = patch_hunks(view.patch)
                    starts = [h.new_start for h in hunks.get(changed.path, [])]
                    _check_fragments(changed, starts, errors)
            except (RecursionError, MemoryError) as exc:
                unchecked.append({"file": changed.path, "reason": type(exc).__name__})
                continue
            checked.append(changed.path)
        evidence.update(checked=checked, errors=errors)
        if preexisting:
            evidence["preexisting"] = preexisting
        if unchecked:
            evidence["unchecked"] = unchecked
        if errors:
            first = errors[0]
            where = f"{first['file']}:{first['line']}:{first['column']}"
            more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
            if all(e.get("scope") == "hunk" for e in errors):
                # A hunk is a fragment: on the SWE-bench data every hunk-only "error" was a
                # false alarm on a resolved patch, so it is reported but does not stop the
                # pipeline or zero the score.
                evidence["suspected_only"] = True
                return StageResult(
                    self.name,
                    "fail",
                    None,
                    False,
                    f"suspected (hunks only) {where}: {first['message']}{more}",
                    evidence,
                )
            return stop(f"{where}: {first['message']}{more}")
        if not checked:
            return StageResult(
                self.name, "skip", message="no Python file could be checked", evidence=evidence
            )
        whole = all(f.after is not None for f in python if f.path in checked)
        scope = "whole files" if whole else "hunks"
        return StageResult(
            self.name,
            "pass",
            message=f"{len(checked)} Python file(s) parse ({scope})",
            evidence=evidence,
        )

    def _check_file(
        self, changed: ChangedFile, errors: list[dict[str, Any]], preexisting: list[dict[str, Any]]
    ) -> None:
        assert changed.after is not None
        issue = check_source(changed.after, changed.path, self.feature_version)
        if issue is None:
            return
        entry = {"file": changed.path, "scope": "file", **issue.to_dict()}
        if changed.before is not None and check_source(
            changed.before, changed.old_path or changed.path, self.feature_version
        ):
            preexisting.append(entry)
        else:
            errors.append(entry)


def _dedent(fragment: str) -> str:
    return textwrap.dedent(fragment.expandtabs(8))


def _parse_issue(text: str) -> SyntaxError | None:
    """CPython's parser error for ``text`` (grammar only: fragments may hold a ``return``
    without its ``def``), or None when it parses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pyast.parse(text)
        except SyntaxError as exc:
            return exc
        except (ValueError, RecursionError, MemoryError) as exc:
            return SyntaxError(str(exc))
    return None


def _check_fragments(changed: ChangedFile, starts: list[int], errors: list[dict[str, Any]]) -> None:
    """Hunk-by-hunk check of a file known only by fragments (see the module docstring).

    The reported place is CPython's when the old side parses with CPython too, else
    tree-sitter's first error node.
    """
    aligned = len(starts) == len(changed.after_fragments)
    pairs = zip(changed.before_fragments, changed.after_fragments, strict=False)
    for index, (before, after) in enumerate(pairs):
        if not after.strip():
            continue
        old, new = _dedent(before), _dedent(after)
        if tree_sitter_errors(old, limit=1):
            continue  # the old side is partial code already: nothing can be concluded
        found = tree_sitter_errors(new, limit=1)
        cpython = _parse_issue(new) if found else None
        if not found or cpython is None:
            continue
        line, column, kind = found[0]
        message = f"tree-sitter {kind} in the new side of hunk {index + 1} (its old side parses)"
        if _parse_issue(old) is None and cpython.lineno:
            line, column = cpython.lineno, cpython.offset or 1
            message = f"SyntaxError: {cpython.msg} (hunk {index + 1}; its old side parses)"
        original = _line(after.expandtabs(8), line)
        dedented = _line(new, line)
        column += len(original) - len(original.lstrip()) - (len(dedented) - len(dedented.lstrip()))
        errors.append(
            {
                "file": changed.path,
                "scope": "hunk",
                "hunk": index,
                "line": line + starts[index] - 1 if aligned else line,
                "column": column,
                "message": message,
                "text": original.strip(),
                "ts_line": found[0][0] + starts[index] - 1 if aligned else found[0][0],
                "ts_column": found[0][1],
            }
        )
