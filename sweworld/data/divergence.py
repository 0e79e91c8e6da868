"""Where a replayed workspace stops being the one the agent had.

A replay runs the agent's file operations for real but answers execution commands from the
recording (:mod:`sweworld.data.replay`): a script that edits files (``python fix.py``, a
``python -c`` that rewrites a module) is not run, so from there on the replayed workspace
may differ from the agent's, and the records made on it would pair a wrong state with the
real output. Two checks find that:

* **evidence**: a later step that only reads workspace files (``cat``, ``sed -n``, ``nl``,
  ``head``, ``tail``, ``grep`` without recursion, ``git diff`` / ``git show``, pipelines of
  these) printed something other than what the agent saw (:func:`reads_workspace_only`);
* **cause**: the first step before that evidence that may have left the workspace behind:
  an execution step not reproduced for real (answered from the recording; a program that
  may write files, :func:`may_write_files`, is run for real and checked, and a static check
  misses some writers, so any other execution counts too); a step the sandbox failed to
  run; a step whose exit code in the replay was not the recorded one (an editor the
  machine lacks, a ``sed`` or ``patch`` that failed).

Records after the cause are marked diverged (:func:`mark_diverged`; ``meta.state =
"diverged"``); :func:`state_diverged` tells consumers (training, ``sweworld bench swt``),
which leave them out and count them. Pure functions of the commands and outputs.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.data.schema import parse_meta, to_json

__all__ = [
    "StepCheck",
    "comparable_reading",
    "divergence_cause",
    "mark_diverged",
    "may_write_files",
    "reads_workspace_only",
    "state_diverged",
]

#: Programs whose output is a function of the files they name (plus options).
_READERS = frozenset({"cat", "head", "tail", "nl", "sed", "grep", "git", "wc"})
#: Filters allowed after the first command of a pipeline (they read only their stdin).
_FILTERS = frozenset({"grep", "head", "tail", "sed", "nl", "wc", "sort", "uniq", "cut"})
_SHELL_SYNTAX = re.compile(r"[;&<>`\n]|\$\(|\$\{|\|\|")
#: Calls of a program that write, delete or move files, or run other programs.
_WRITES = re.compile(
    r"""open\([^\n]{0,120}?['"][rbt]{0,3}[wax+][rwxabt+]{0,3}['"]|"""
    r"""\.write_(?:text|bytes)\(|\bos\.(?:remove|unlink|rename|replace|rmdir|makedirs|"""
    r"""mkdir|system|popen|truncate|symlink|link|chmod|open)\b|"""
    r"""\bshutil\b|\bsubprocess\b|\.(?:unlink|rename|replace|touch|mkdir|rmdir)\(|"""
    r"""\bfileinput\b|\bsed\s+-i\b|\bextractall\(|\bnp\.save|\.to_csv\("""
)
_MAX_SCAN = 1_000_000


def _words(command: str) -> list[list[str]] | None:
    """The simple commands of a pipeline ``a | b | c`` (None: anything else)."""
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars="|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            stages.append([])
        elif set(token) <= {"|"}:
            return None
        else:
            stages[-1].append(token)
    return stages if all(stages) else None


#: sed scripts that only print line ranges (``10,20p``, ``5p``, ``$p``, ``1,5p;9p``).
_SED_PRINT = re.compile(
    r"^(?:[0-9]+|\$)(?:,(?:[0-9]+|\$))?p(?:;(?:[0-9]+|\$)(?:,(?:[0-9]+|\$))?p)*$"
)
_GLOB_OR_EXPANSION = re.compile(r"[*?\[~$]")


def _operand_ok(arg: str) -> bool:
    """A file operand that names a workspace file (no glob, no expansion, not /proc)."""
    if _GLOB_OR_EXPANSION.search(arg):
        return False
    return not arg.startswith("/") or arg.startswith("/testbed/")


def _reader(words: list[str], first: bool) -> bool:
    name, args = words[0], words[1:]
    if name not in (_READERS if first else _FILTERS):
        return False
    options = [a for a in args if a.startswith("-")]
    operands = [a for a in args if not a.startswith("-")]
    if name == "sed":  # only -n with line-range prints: no w, e, s///e, r
        script = operands[0] if operands else ""
        return (
            options == ["-n"]
            and bool(_SED_PRINT.match(script.replace(" ", "")))
            and all(_operand_ok(a) for a in operands[1:])
        )
    if name == "grep":
        if any(
            a in ("-r", "-R", "--recursive", "--dereference-recursive", "-f", "-d")
            or a.startswith(("--directories", "--devices", "--file", "--include", "-d"))
            or (not a.startswith("--") and ("r" in a or "R" in a or "f" in a))
            for a in options
        ):
            return False
        return all(_operand_ok(a) for a in operands[1:])
    if name == "git":
        if not args or args[0] not in ("diff", "show"):
            return False
        return not any(
            a.startswith(("--ext-diff", "--textconv", "--output", "--no-index")) for a in args
        )
    if name == "tail" and any(a.startswith(("-f", "-F", "--follow")) for a in options):
        return False
    return all(_operand_ok(a) for a in operands)


def reads_workspace_only(command: str) -> bool:
    """Whether ``command`` only prints workspace files: its output would be the same on
    the same files (no execution, no redirection, no recursion into build artefacts)."""
    stages = _words(command or "")
    if not stages:
        return False
    return all(_reader(words, i == 0) for i, words in enumerate(stages))


_GIT_INDEX = re.compile(r"^index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}", re.M)
_BROKEN_PIPE = re.compile(r"^[\w.-]+: (?:write error: )?Broken pipe\n?", re.M)


def comparable_reading(text: str) -> str:
    """A read's output with what differs between equal workspaces taken out: ``git diff``'s
    abbreviated blob ids, whose length follows the number of objects in the repository (a
    replay's shallow checkout abbreviates shorter than the agent's full clone), and the
    ``write error: Broken pipe`` a reader prints, or not, when ``head`` stops early (a race)."""
    return _BROKEN_PIPE.sub("", _GIT_INDEX.sub("index", text or ""))


def may_write_files(code: str) -> bool:
    """Whether Python source ``code`` (a ``-c`` argument or a script's text) calls an API
    that writes, deletes or moves files or runs other programs (a static over-estimate)."""
    return bool(_WRITES.search((code or "")[:_MAX_SCAN]))


@dataclass(frozen=True)
class StepCheck:
    """What the replay saw at one step of a trajectory.

    Attributes:
        step: the step's index.
        execution: the step ran execution commands (answered from the recording).
        writes: one of them may write files (:func:`may_write_files`).
        verified: they ran for real and reproduced the recording (their effects are the
            agent's).
        failed: the sandbox could not run the step.
        mismatch: the step exited otherwise in the replay than in the recording.
        evidence: the step only read workspace files and its output differed from the
            recording.
    """

    step: int
    execution: bool = False
    writes: bool = False
    verified: bool = False
    failed: bool = False
    mismatch: bool = False
    evidence: bool = False


def divergence_cause(checks: Sequence[StepCheck]) -> tuple[int, int] | None:
    """(the step after which the replayed state is in doubt, the step that showed it), or
    None when no read disagreed with the recording (see the module docstring)."""
    evidence = next((c.step for c in checks if c.evidence), None)
    if evidence is None:
        return None
    suspect = (
        c.step
        for c in checks
        if c.step < evidence and ((c.execution and not c.verified) or c.failed or c.mismatch)
    )
    return next(suspect, evidence), evidence


def mark_diverged(records: Sequence[Any], cause: int, evidence: int) -> int:
    """Mark the records (with ``step`` and a JSON ``meta``) made after step ``cause``;
    returns how many."""
    marked = 0
    for rec in records:
        if int(rec.step) <= cause:
            continue
        meta = parse_meta(rec.meta)
        meta.update(state="diverged", diverged_after=cause, divergence_seen=evidence)
        rec.meta = to_json(meta)
        marked += 1
    return marked


def state_diverged(record: Any) -> bool:
    """Whether a record's workspace state was found to differ from the agent's."""
    meta = record.get("meta") if isinstance(record, dict) else getattr(record, "meta", None)
    return parse_meta(meta).get("state") == "diverged"
