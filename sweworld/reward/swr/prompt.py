"""The SWR prompt: one format for training and inference, versioned.

:func:`build_swr_prompt` turns a task and a candidate patch into chat messages: a system
message (the task and the answer format) and one user message whose sections always come
in the same order, each between ``<name>`` and ``</name>`` lines:

==================== ====== ======================================================
section              mode   content
==================== ====== ======================================================
``problem_statement`` both  the issue text
``gold_patch``       oracle the reference fix
``test_command``     both   the harness's test command (:mod:`~sweworld.execution.testspec`)
``test_files``       both   oracle: the test patch's files, new side; blind: test files of
                            the base checkout related to the changed modules (none
                            without a checkout)
``tests``            oracle FAIL_TO_PASS, then PASS_TO_PASS ids (cut with a count)
``candidate_patch``  both   the agent's diff against the base commit
==================== ====== ======================================================

The candidate comes last so that, in oracle mode, the candidates of one task share every
token before it (prefix caching in the in-process scorer and in vLLM).

The answer (:func:`swr_target`) is compact JSON: ``{"tests": {"<id>": "PASSED", ...},
"resolved": true}``, with ``"reasoning"`` first for models trained with it; it starts with
:data:`SWR_PREFILL`, which in-process models are given as the start of their answer.
Every field has a token budget (:class:`SWRPromptConfig`), and the fields together a total
cap shared in proportion to the budgets; text is cut deterministically (whole lines, a
``... [N lines cut] ...`` marker; test files around the lines that matter).

Change :data:`SWR_FORMAT_VERSION` whenever the text a model sees changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sweworld.models.budget import (
    LineTokens,
    TokenCounter,
    approx_tokens,
    truncate_chars,
    truncate_text,
    waterfill,
)
from sweworld.reward.swr.parsing import normalize_status
from sweworld.reward.swr.testfiles import (
    blind_test_files,
    changed_identifiers,
    fit_test_files,
    oracle_test_files,
)
from sweworld.tasks.fields import test_list

__all__ = [
    "EMBEDDED_SWR_CONFIG",
    "SWR_FORMAT_VERSION",
    "SWR_PREFILL",
    "SWR_REASONING_PREFILL",
    "SWRPrompt",
    "SWRPromptConfig",
    "build_swr_prompt",
    "swr_report_schema",
    "swr_resolved_prefix",
    "swr_status_prefix",
    "swr_system_prompt",
    "swr_target",
]

SWR_FORMAT_VERSION = "swr-v1"
#: The start of every answer (without reasoning): given to in-process models as a prefill.
SWR_PREFILL = '{"tests": {'
#: The start of an answer with reasoning.
SWR_REASONING_PREFILL = '{"reasoning": "'

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SWRPromptConfig:
    """Token budgets of the SWR prompt (the defaults suit models with a 32k window; see
    :data:`EMBEDDED_SWR_CONFIG` for the embedded 135M model)."""

    problem_tokens: int = 3000
    """The problem statement (issue text): head and tail kept."""
    patch_tokens: int = 4000
    """The candidate patch, shared between the files it changes."""
    gold_patch_tokens: int = 3000
    """Oracle mode only: the gold patch (the reference fix)."""
    command_tokens: int = 200
    """The test command (cut by characters when longer)."""
    test_files_tokens: int = 6000
    """The test files, shared between them; a file that does not fit is cut around its
    focus (lines the test patch adds, the listed tests' definitions)."""
    tests_tokens: int = 2000
    """Oracle mode only: the FAIL_TO_PASS then PASS_TO_PASS ids, whole ids only; the ids
    that do not fit are counted in a note (FAIL_TO_PASS ids go first)."""
    total_tokens: int = 16000
    """Cap on all sections together; when exceeded, each section gets a share proportional
    to its budget (sections that need less keep what they need)."""
    max_test_files: int = 8
    """At most this many test files (blind mode: the best-ranked related files)."""
    max_scan_files: int = 20000
    """Blind mode: at most this many test files of the checkout are looked at."""
    max_file_bytes: int = 1_000_000
    """Files larger than this are not read."""
    with_reasoning: bool = False
    """Ask for a ``reasoning`` field before the report (for models trained with it)."""
    count_tokens: TokenCounter | None = None
    """Token counter for the budgets (e.g. the LM's ``count_tokens``); None: chars / 4."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            numeric = f.name.endswith(("_tokens", "_files", "_bytes")) and f.name != "count_tokens"
            if numeric and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{f.name} must be a non-negative integer, got {value!r}")

    @property
    def counter(self) -> TokenCounter:
        """The token counter in use."""
        return self.count_tokens if self.count_tokens is not None else approx_tokens

    def scaled(self, factor: float) -> SWRPromptConfig:
        """Every token budget multiplied by ``factor`` (rounded down)."""
        changes: dict[str, Any] = {
            f.name: int(getattr(self, f.name) * factor)
            for f in fields(self)
            if f.name.endswith("_tokens") and f.name != "count_tokens"
        }
        return replace(self, **changes)


#: Budgets for the embedded SmolLM2-135M on a CPU: sections capped at 1,150 tokens make a
#: prompt of at most ~1,550 with the system message and the section notes, which leaves a
#: 2,048-token window room for a report of ~450 tokens (prefill runs at ~400 tokens/s on
#: two idle cores).
EMBEDDED_SWR_CONFIG = SWRPromptConfig(
    problem_tokens=250,
    patch_tokens=350,
    gold_patch_tokens=250,
    command_tokens=60,
    test_files_tokens=450,
    tests_tokens=250,
    total_tokens=1150,
    max_test_files=3,
)

_SYSTEM = (
    "You are the test runner of a Python repository. The user message shows a problem "
    "(an issue), a candidate patch meant to fix it, the command that runs the tests and the "
    "test files; when available, also the reference fix and the tests that decide. Predict "
    "what the test run reports with the candidate patch applied: the status of each test "
    "(PASSED, FAILED, ERROR or SKIPPED), then whether the candidate resolves the problem "
    "(true only if it fixes the problem and every listed test passes).\n"
    "Answer with one JSON object and nothing else: "
)
_FORMAT = '{"tests": {"<test id>": "PASSED", ...}, "resolved": true}'
_FORMAT_REASONING = '{"reasoning": "...", "tests": {"<test id>": "PASSED", ...}, "resolved": true}'
_REASONING_NOTE = (
    '\nIn "reasoning", first work out briefly what the candidate changes and how the tests '
    "exercise it; then give the report."
)
_NOTES = {
    "candidate_patch": "(git diff of the candidate fix against the base commit)",
    "gold_patch": "(the reference fix, for reference only: a different patch can be correct too)",
    "test_command": "(run from the repository root with the candidate patch applied)",
    "tests": "(report these tests)",
}
_EMPTY = {
    "candidate_patch": "(empty: the candidate changes nothing)",
    "gold_patch": "(empty)",
    "test_files": "(no test files available)",
    "tests": "(none listed)",
    "problem_statement": "(none)",
}
_ASK = {
    "oracle": "Report the status of every listed test when the test command runs on the "
    "repository with the candidate patch applied, and whether the candidate resolves the "
    "problem, as the JSON object.",
    "blind": "Report the status of the tests the test command runs on the repository with the "
    "candidate patch applied, and whether the candidate resolves the problem, as the JSON "
    "object.",
}


@dataclass
class SWRPrompt:
    """A built prompt and what it shows.

    Attributes:
        messages: ``[system, user]``.
        mode: ``oracle`` or ``blind``.
        expected_tests: the test ids listed in the prompt (FAIL_TO_PASS shown, then
            PASS_TO_PASS shown; empty in blind mode): what a report should cover.
        fail_to_pass / pass_to_pass: the shown ids of each list.
        tests_not_shown: listed ids left out by the budget (they are in the task).
        test_command: the test command shown.
        test_files: paths of the test files shown.
        truncated: section -> lines (or characters, for the command) cut by the budgets.
        prompt_tokens: tokens of the two messages' contents (by the config's counter;
            the chat template adds a few).
        version: :data:`SWR_FORMAT_VERSION`.
    """

    messages: Messages
    mode: str
    expected_tests: list[str] = field(default_factory=list)
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    tests_not_shown: int = 0
    test_command: str = ""
    test_files: list[str] = field(default_factory=list)
    truncated: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    version: str = SWR_FORMAT_VERSION


def swr_system_prompt(*, with_reasoning: bool = False) -> str:
    """The system message: what the model does and the answer format."""
    if with_reasoning:
        return _SYSTEM + _FORMAT_REASONING + _REASONING_NOTE
    return _SYSTEM + _FORMAT


def _get(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def _tests_section(
    f2p: list[str], p2p: list[str], budget: int, tok: LineTokens
) -> tuple[str, list[str], list[str], int]:
    """The listed ids in at most ``budget`` tokens (whole ids, FAIL_TO_PASS first), the ids
    shown of each list, and how many were left out."""
    heads = (
        "FAIL_TO_PASS (fail without the fix; must pass with it):",
        "PASS_TO_PASS (pass without the fix; must keep passing):",
    )
    lists = [f2p, p2p]
    shown: list[list[str]] = [[], []]
    note_cost = tok.line(f"... and {len(f2p) + len(p2p)} more PASS_TO_PASS tests not shown")
    used = sum(tok.line(h) for h, ids in zip(heads, lists, strict=True) if ids)
    room = budget - used - note_cost
    for which, ids in enumerate(lists):
        for test in ids:
            cost = tok.line(test)
            if cost > room:
                break
            shown[which].append(test)
            room -= cost
        if len(shown[which]) < len(ids):
            break
    lines: list[str] = []
    left_out = 0
    for head, ids, kept in zip(heads, lists, shown, strict=True):
        if not ids:
            continue
        lines.append(head)
        lines.extend(kept)
        if len(kept) < len(ids):
            missing = len(ids) - len(kept)
            left_out += missing
            name = head.split(" ", 1)[0]
            lines.append(f"... and {missing} more {name} tests not shown")
    text = "\n".join(lines)
    if budget <= 0 or tok(text) > budget:  # not even the headers fit
        text, _ = truncate_text(text, budget, tok)
    return text, shown[0], shown[1], left_out


def _patch_text(patch: str, budget: int, tok: LineTokens) -> tuple[str, int]:
    from sweworld.models.budget import fit_parts, patch_parts

    return fit_parts(patch_parts(patch), budget, tok)


def _test_command(task: Any, mode: str, blind_files: Sequence[str]) -> str:
    from sweworld.execution.testspec import test_spec

    if mode == "oracle":
        return test_spec(task).command
    # blind: the harness's command for the repository, run on the related test files
    headers = "".join(f"diff --git a/{p} b/{p}\n" for p in blind_files)
    return test_spec(
        {"repo": _get(task, "repo") or "", "version": _get(task, "version"), "test_patch": headers}
    ).command


def build_swr_prompt(
    task: Any,
    candidate_patch: str,
    *,
    mode: str = "oracle",
    config: SWRPromptConfig | None = None,
    base_dir: str | Path | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> SWRPrompt:
    """The SWR prompt for one candidate (see the module docstring).

    ``task``: a :class:`~sweworld.tasks.Task` (or a mapping with its fields);
    ``candidate_patch``: the agent's diff; ``mode``: ``oracle`` or ``blind`` (blind reads
    nothing of the gold patch, the test patch, the test lists or ``task.extra``);
    ``base_dir``: the task's base checkout (whole test files; blind-mode test discovery);
    ``count_tokens`` overrides the config's counter. Pure and deterministic.
    """
    if mode not in ("oracle", "blind"):
        raise ValueError(f"mode must be 'oracle' or 'blind', got {mode!r}")
    config = config or SWRPromptConfig()
    tok = LineTokens(count_tokens or config.counter)
    oracle = mode == "oracle"
    patch = str(candidate_patch or "")
    problem = str(_get(task, "problem_statement") or "").strip("\n")
    f2p = test_list(task, "FAIL_TO_PASS") if oracle else []
    p2p = test_list(task, "PASS_TO_PASS") if oracle else []
    if oracle:
        from sweworld.execution.testspec import NON_TEST_EXTS

        files = oracle_test_files(
            str(_get(task, "test_patch") or ""),
            base_dir,
            tests=f2p,
            skip_suffixes=NON_TEST_EXTS,
            max_file_bytes=config.max_file_bytes,
        )[: config.max_test_files]
    else:
        from sweworld.tasks.patches import PatchError, files_in_patch

        try:
            changed = files_in_patch(patch)
        except (PatchError, ValueError, IndexError, KeyError):
            changed = []
        files = blind_test_files(
            base_dir,
            changed,
            identifiers=changed_identifiers(patch),
            limit=config.max_test_files,
            max_scan=config.max_scan_files,
            max_file_bytes=config.max_file_bytes,
        )
    command = _test_command(task, mode, [f.path for f in files])
    state: dict[str, Any] = {"files": [], "tests": ([], [], 0)}

    def files_text(budget: int) -> tuple[str, int]:
        text, cut, shown = fit_test_files(files, budget, tok)
        state["files"] = shown
        return text, cut

    def tests_text(budget: int) -> tuple[str, int]:
        text, shown_f2p, shown_p2p, left_out = _tests_section(f2p, p2p, budget, tok)
        state["tests"] = (shown_f2p, shown_p2p, left_out)
        return text, left_out

    builders: dict[str, tuple[int, Callable[[int], tuple[str, int]]]] = {
        "problem_statement": (config.problem_tokens, lambda b: truncate_text(problem, b, tok)),
    }
    if oracle:
        gold = str(_get(task, "patch") or "")
        builders["gold_patch"] = (config.gold_patch_tokens, lambda b: _patch_text(gold, b, tok))
    builders["test_command"] = (
        config.command_tokens,
        lambda b: truncate_chars("$ " + command, b, tok),
    )
    builders["test_files"] = (config.test_files_tokens, files_text)
    if oracle:
        builders["tests"] = (config.tests_tokens, tests_text)
    # last: in oracle mode everything above depends on the task only, so the candidates of
    # one task share that prefix (prefix caches: the in-process scorer's, vLLM's)
    builders["candidate_patch"] = (config.patch_tokens, lambda b: _patch_text(patch, b, tok))

    names = list(builders)
    results = {n: builders[n][1](builders[n][0]) for n in names}
    demands = [tok(results[n][0]) for n in names]
    if sum(demands) > config.total_tokens:
        weights = [float(builders[n][0]) for n in names]
        alloc = waterfill(demands, weights, config.total_tokens)
        for _ in range(8):
            for n, a, d in zip(names, alloc, demands, strict=True):
                if a < d:
                    results[n] = builders[n][1](a)
            demands = [tok(results[n][0]) for n in names]
            over = sum(demands) - config.total_tokens
            if over <= 0:
                break
            alloc = waterfill(demands, weights, config.total_tokens - over)

    blocks: list[str] = []
    for name in names:
        body = results[name][0]
        note = _NOTES.get(name, "")
        if name == "test_files" and body:
            note = (
                "(the test files as the test command runs them: the task's test patch applied)"
                if oracle
                else "(existing tests of the changed modules)"
            )
        if not body.strip():
            body, note = _EMPTY.get(name, "(none)"), ""
        inner = f"{note}\n{body}" if note else body
        blocks.append(f"<{name}>\n{inner.rstrip(chr(10))}\n</{name}>")
    blocks.append(_ASK[mode])
    user = "\n\n".join(blocks)
    system = swr_system_prompt(with_reasoning=config.with_reasoning)
    shown_f2p, shown_p2p, left_out = state["tests"]
    return SWRPrompt(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        mode=mode,
        expected_tests=[*shown_f2p, *shown_p2p],
        fail_to_pass=list(shown_f2p),
        pass_to_pass=list(shown_p2p),
        tests_not_shown=left_out,
        test_command=command,
        test_files=list(state["files"]),
        truncated={n: results[n][1] for n in names if results[n][1] > 0},
        prompt_tokens=tok(system) + tok(user),
    )


def swr_target(tests: Mapping[str, Any], resolved: bool, reasoning: str | None = None) -> str:
    """The answer text: ``{"tests": {...}, "resolved": ...}`` (``reasoning`` first when
    given), statuses normalised (``"pass"`` -> ``PASSED``), ids in the given order, JSON with
    the default separators (so it starts with :data:`SWR_PREFILL`). Raises ``ValueError`` for
    a status it cannot read.

    For training rows, give the tests of :attr:`SWRPrompt.expected_tests` (those the prompt
    shows) in that order, with their real statuses (oracle; blind: the tests the command ran),
    and ``resolved`` from the real report, so the target matches what inference reads."""
    statuses: dict[str, str] = {}
    for test, status in tests.items():
        value = normalize_status(status)
        if value is None:
            raise ValueError(f"unknown status {status!r} for test {test!r}")
        statuses[str(test)] = value
    data: dict[str, Any] = {}
    if reasoning is not None:
        data["reasoning"] = str(reasoning)
    data["tests"] = statuses
    data["resolved"] = bool(resolved)
    return json.dumps(data, ensure_ascii=False)


#: The statuses a report may give (as the system prompt lists them).
REPORT_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED")


def swr_report_schema(
    expected_tests: Sequence[str] = (), *, with_reasoning: bool = False
) -> dict[str, Any]:
    """The report's JSON schema, for backends with structured output: ``{"tests": {id:
    status}, "resolved": bool}`` (``reasoning`` first when asked). With ``expected_tests``
    (oracle mode) exactly those ids, each once; without (blind), any ids. Every report is
    then well formed by construction."""
    status = {"type": "string", "enum": list(REPORT_STATUSES)}
    ids = list(dict.fromkeys(str(t) for t in expected_tests))
    if ids:
        tests: dict[str, Any] = {
            "type": "object",
            "properties": {test: status for test in ids},
            "required": ids,
            "additionalProperties": False,
        }
    else:
        tests = {"type": "object", "additionalProperties": status}
    properties: dict[str, Any] = {}
    if with_reasoning:
        properties["reasoning"] = {"type": "string"}
    properties["tests"] = tests
    properties["resolved"] = {"type": "boolean"}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def swr_resolved_prefix(tests: Mapping[str, Any], reasoning: str | None = None) -> str:
    """The answer up to the ``resolved`` value: ``{"tests": {...}, "resolved": `` (what
    log-probabilities of ``true`` / ``false`` are measured after)."""
    text = swr_target(tests, True, reasoning)
    return text[: -len("true}")]


def swr_status_prefix(tests: Mapping[str, Any], test: str, reasoning: str | None = None) -> str:
    """The answer up to the status of ``test``, written after ``tests``:
    ``{"tests": {..., "<test>": "`` (what a status is chosen after, in constrained
    decoding). ``test`` must not be in ``tests``."""
    if test in tests:
        raise ValueError(f"{test!r} already has a status")
    text = swr_target({**tests, test: "PASSED"}, True, reasoning)
    marker = json.dumps(test, ensure_ascii=False) + ': "'
    return text[: text.rindex(marker) + len(marker)]
