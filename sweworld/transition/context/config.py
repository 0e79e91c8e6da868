"""The SWT context's values: :class:`ContextConfig` (budgets and mode), :class:`HistoryItem`
and :class:`SWTContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from sweworld.models.budget import TokenCounter, approx_tokens
from sweworld.transition.types import WORKDIR

CONTEXT_VERSION = "swt-ctx-v1"

# The budgeted text fields of SWTContext, in the order the prompt shows them.
CONTEXT_FIELDS: tuple[str, ...] = (
    "problem",
    "gold_patch",
    "test_patch",
    "tests",
    "diff",
    "history",
    "executed_code",
    "related_code",
    "facts",
    "command",
    "env",
    "stdin",
)
ORACLE_FIELDS: frozenset[str] = frozenset({"gold_patch", "test_patch", "tests"})


# ------------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextConfig:
    """How much of each kind of information the SWT context holds, and in which mode.

    The budgets follow SWE-World's SWT caps (about 10k tokens of problem statement, 15k of
    code, 15k of agent patch and 10k of gold patch for 32B/72B models) scaled down by about
    five for a small model, with the blind-mode fields summing to just under ``total_tokens``.
    """

    problem_tokens: int = 1500
    """Problem statement (issue text): head and tail kept."""
    diff_tokens: int = 2000
    """The agent's changes against the base commit, shared between the changed files."""
    executed_tokens: int = 3000
    """Code the command executes (scripts, ``-c`` code, stdin scripts, targeted tests)."""
    related_tokens: int = 1500
    """Imported workspace modules, conftest files and changed files: outlines, then bodies."""
    history_tokens: int = 800
    """The last ``history_steps`` execution steps of the session (command, code, output)."""
    gold_patch_tokens: int = 1500
    """Oracle mode only: the gold patch (the reference fix)."""
    test_patch_tokens: int = 1500
    """Oracle mode only: the test patch (the tests that check the fix)."""
    tests_tokens: int = 400
    """Oracle mode only: the FAIL_TO_PASS and PASS_TO_PASS test ids."""
    command_tokens: int = 300
    """The command line (cut by characters when it alone exceeds this)."""
    env_tokens: int = 150
    """Environment variables the agent set (``NAME=value`` lines)."""
    stdin_tokens: int = 300
    """What the command reads on stdin, when stdin is not itself the executed script."""
    facts_tokens: int = 400
    """The computed facts (``sweworld.transition.facts``), rendered briefly."""
    total_tokens: int = 10000
    """Cap on all fields together; when exceeded, each field gets a share proportional to
    its budget (fields that need less keep what they need)."""
    mode: Literal["oracle", "blind"] = "oracle"
    """``oracle``: gold patch, test patch and test lists are in the context (training on tasks
    with a reference fix); ``blind``: none of them, nor anything from ``task.extra``."""
    history_steps: int = 3
    """How many of the most recent execution steps the history field shows."""
    max_files: int = 20
    """At most this many executed files (a targeted test directory is expanded up to it)."""
    max_related_files: int = 12
    """At most this many related files (imported modules, conftest files, changed files)."""
    max_file_bytes: int = 1_000_000
    """Files larger than this are skipped with a one-line note (so are binary files)."""
    line_numbers: bool = True
    """Prefix code lines with their line numbers (tracebacks cite them)."""
    count_tokens: TokenCounter | None = None
    """Token counter for the budgets (e.g. the LM's ``count_tokens``); None: chars / 4."""

    def __post_init__(self) -> None:
        if self.mode not in ("oracle", "blind"):
            raise ValueError(f"mode must be 'oracle' or 'blind', got {self.mode!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if (
                f.name.endswith("_tokens")
                and f.name != "count_tokens"
                and (not isinstance(value, int) or value < 0)
            ):
                raise ValueError(f"{f.name} must be a non-negative integer, got {value!r}")
        for name in ("history_steps", "max_files", "max_related_files", "max_file_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative")

    @property
    def counter(self) -> TokenCounter:
        """The token counter in use."""
        return self.count_tokens if self.count_tokens is not None else approx_tokens

    def budget(self, name: str) -> int:
        """The budget of one context field (see :data:`CONTEXT_FIELDS`)."""
        key = {"executed_code": "executed", "related_code": "related"}.get(name, name)
        return int(getattr(self, f"{key}_tokens"))


@dataclass(frozen=True)
class HistoryItem:
    """One earlier execution step of the session: the command, its exit code, its output."""

    command: str
    exit_code: int
    output: str


@dataclass(frozen=True)
class SWTContext:
    """Everything SWT reads for one command, as strings (empty: nothing to show).

    ``truncated`` maps a field to the number of lines left out of it by the budgets
    (files not shown count with all their lines; for ``command``, a single line, the number
    of characters cut); ``mode`` is ``oracle`` or ``blind``; ``version`` the builder's
    :data:`CONTEXT_VERSION`.
    """

    command: str
    cwd: str = WORKDIR
    env: str = ""
    stdin: str = ""
    problem: str = ""
    diff: str = ""
    executed_code: str = ""
    related_code: str = ""
    facts: str = ""
    history: str = ""
    gold_patch: str = ""
    test_patch: str = ""
    tests: str = ""
    mode: str = "oracle"
    truncated: dict[str, int] = field(default_factory=dict)
    version: str = CONTEXT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``truncated`` copied)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["truncated"] = dict(self.truncated)
        return out

    def token_counts(self, counter: TokenCounter = approx_tokens) -> dict[str, int]:
        """Tokens per budgeted field, by ``counter``."""
        return {name: counter(getattr(self, name)) for name in CONTEXT_FIELDS}
