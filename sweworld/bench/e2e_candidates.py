"""The candidate pool of ``sweworld bench e2e``'s scripted agent: the task's gold patch,
one-token mutants of it and patches from a file, in a seeded order that both kinds of
feedback share."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MUTATIONS", "Candidate", "candidate_pool", "mutate_patch"]


@dataclass
class Candidate:
    """A patch the candidate agent may submit: ``origin`` is ``gold`` (the task's patch),
    ``mutant`` (the gold patch with one added line changed) or ``file`` (``--candidates``)."""

    label: str
    origin: str
    patch: str


#: Single-token mutations of an added line: (name, pattern, replacement), first match changed.
MUTATIONS: tuple[tuple[str, str, str], ...] = (
    ("== to !=", r"==", "!="),
    ("!= to ==", r"!=", "=="),
    ("<= to <", r"<=", "<"),
    (">= to >", r">=", ">"),
    ("< to <=", r"(?<![<>=!-])<(?![<=])", "<="),
    ("> to >=", r"(?<![<>=-])>(?![>=])", ">="),
    ("True to False", r"\bTrue\b", "False"),
    ("False to True", r"\bFalse\b", "True"),
    ("and to or", r"\band\b", "or"),
    ("or to and", r"\bor\b", "and"),
    ("not dropped", r"\bnot\s+", ""),
    ("is to is not", r"\bis\b(?!\s+not)", "is not"),
    ("a number + 1", r"(?<![\w.])(\d+)(?![\w.])", "+1"),
    ("+ to -", r" \+ ", " - "),
    ("- to +", r" - ", " + "),
    ("strip to lstrip", r"\.strip\(", ".lstrip("),
    ("return None", r"\breturn\s+(?!None\b)\S", "return None  # "),
)
_TRIPLE = re.compile(r"\"\"\"|'''")


def _code_lines(lines: Sequence[str]) -> set[int]:
    """Indices of the added lines that are code: not comments, doctests or docstrings (the
    docstring state follows the triple quotes of the new file's lines, hunk by hunk)."""
    code: set[int] = set()
    in_doc = False
    for index, line in enumerate(lines):
        if line.startswith(("@@", "diff ", "+++", "---")):
            in_doc = False
            continue
        if line.startswith("-"):
            continue
        quotes = len(_TRIPLE.findall(line))
        body = line[1:].strip()
        code_text = body and not body.startswith(("#", ">>>", '"', "'"))
        if line.startswith("+") and not in_doc and not quotes and code_text:
            code.add(index)
        in_doc ^= quotes % 2 == 1
    return code


def _apply_mutation(text: str, pattern: str, replacement: str) -> str | None:
    match = re.search(pattern, text)
    if match is None:
        return None
    if replacement == "+1":
        new = str(int(match.group(1)) + 1)
    elif replacement.endswith("# "):  # return None, the old value kept as a comment
        new = replacement + match.group(0)[-1]
    else:
        new = replacement
    return text[: match.start()] + new + text[match.end() :]


def mutate_patch(patch: str, count: int, rng: random.Random) -> list[Candidate]:
    """Up to ``count`` distinct wrong-looking variants of ``patch``: each changes one token of
    one added code line (an operator, a literal, a ``return``), so it still applies where
    the patch applies (no line is added or removed). Some may be equivalent to the patch;
    the real grade of every candidate says which (see the report's pool figures)."""
    lines = patch.splitlines(keepends=True)
    sites = [
        (index, name, pattern, replacement)
        for index in sorted(_code_lines(lines))
        for name, pattern, replacement in MUTATIONS
        if re.search(pattern, lines[index][1:])
    ]
    rng.shuffle(sites)
    out: list[Candidate] = []
    seen = {patch}
    for index, name, pattern, replacement in sites:
        if len(out) >= count:
            break
        new_line = _apply_mutation(lines[index][1:], pattern, replacement)
        if new_line is None:
            continue
        mutated = "".join([*lines[:index], "+" + new_line, *lines[index + 1 :]])
        if mutated in seen:
            continue
        seen.add(mutated)
        where = lines[index][1:].strip()[:60]
        out.append(Candidate(f"mutant {len(out) + 1} ({name}: `{where}`)", "mutant", mutated))
    return out


def candidate_pool(
    task: Any, *, mutants: int, extra: Sequence[str] = (), seed: int = 0
) -> list[Candidate]:
    """The gold patch, ``mutants`` mutations of it and the ``extra`` patches, in an order
    shuffled by ``seed`` and the task (the same order for both kinds of feedback)."""
    rng = random.Random(f"{seed}\x1f{task.instance_id}")
    pool = [Candidate("gold", "gold", task.patch)] if task.patch else []
    pool += mutate_patch(task.patch, mutants, rng) if task.patch else []
    known = {c.patch for c in pool}
    for i, patch in enumerate(extra, 1):
        if patch and patch not in known:
            known.add(patch)
            pool.append(Candidate(f"file {i}", "file", patch))
    rng.shuffle(pool)
    return pool
