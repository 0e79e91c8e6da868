"""Mutants to tasks: the keep/reject rule, SWE-bench rows, and their real verification.

A mutant is **kept** when, run for real, it breaks at least one test that passed on the
base and at most ``max_broken_fraction`` of the tests that passed in the files it ran
(:func:`judge`). Kept mutants with the same failing set in the same function are the same
bug for a learner: only the first is kept (``duplicate``).

A task row (:func:`make_row`) is SWE-bench shaped: ``base_commit`` the library's commit,
``setup_patch`` the mutation (the buggy state is base + setup patch), ``patch`` the inverse
diff (the gold fix), ``test_patch`` empty, FAIL_TO_PASS / PASS_TO_PASS from the real runs,
``environment`` (Python, test command) for the LocalExecutor and the grader.
:func:`verify_row` runs it for real (:func:`sweworld.reward.real.real_reward`): the buggy
state must fail every FAIL_TO_PASS test and pass PASS_TO_PASS, and the gold patch must
resolve it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sweworld.data.factory.mutate import Mutation, apply_mutation
from sweworld.data.factory.run_tests import RunOutcome, passed, test_command
from sweworld.tasks.patches import reverse_patch
from sweworld.tasks.unified_diff import make_unified_diff

__all__ = [
    "Screened",
    "Verification",
    "apply_all",
    "judge",
    "make_row",
    "mutant_patch",
    "verify_row",
]


@dataclass
class Screened:
    """A mutant's real test run and the verdict: ``kept`` or the reason it was rejected
    (``no_test_broken``, ``too_many_broken``, ``duplicate``, ``run_<status>``)."""

    mutations: list[Mutation]
    files: list[str]
    verdict: str
    broken: list[str] = field(default_factory=list)
    run_passed: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def kept(self) -> bool:
        return self.verdict == "kept"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["log"] = self.log[-20000:]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Screened:
        return cls(
            mutations=[Mutation(**m) for m in data["mutations"]],
            files=list(data["files"]),
            verdict=str(data["verdict"]),
            broken=list(data.get("broken", [])),
            run_passed=list(data.get("run_passed", [])),
            log=str(data.get("log", "")),
        )

    @property
    def key(self) -> str:
        return "+".join(m.key for m in self.mutations)


def in_files(test_id: str, files: Sequence[str]) -> bool:
    """Whether a test id belongs to one of ``files`` (all files when empty)."""
    return not files or test_id.split("::", 1)[0] in files


def judge(
    baseline_passed: set[str],
    files: Sequence[str],
    outcome: RunOutcome,
    max_broken_fraction: float,
) -> tuple[str, list[str], list[str]]:
    """``(verdict, broken, run_passed)`` for a mutant's run: ``run_passed`` the base's
    passing tests in ``files``; ``broken`` those that did not pass under the mutant."""
    run_passed = sorted(t for t in baseline_passed if in_files(t, files))
    if not outcome.ok:
        return f"run_{outcome.status}", [], run_passed
    now = passed(outcome.statuses)
    broken = [t for t in run_passed if t not in now]
    if not broken:
        return "no_test_broken", broken, run_passed
    if len(broken) > max_broken_fraction * len(run_passed):
        return "too_many_broken", broken, run_passed
    return "kept", broken, run_passed


def apply_all(source: str, mutations: Sequence[Mutation]) -> str:
    """``source`` with several non-overlapping mutations of one file applied."""
    for m in sorted(mutations, key=lambda m: m.start, reverse=True):
        source = apply_mutation(source, m)
    return source


def mutant_texts(originals: Mapping[str, str], mutations: Sequence[Mutation]) -> dict[str, str]:
    """The mutated contents of every file the mutations touch."""
    by_path: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_path.setdefault(m.path, []).append(m)
    return {path: apply_all(originals[path], ms) for path, ms in by_path.items()}


def mutant_patch(originals: Mapping[str, str], mutations: Sequence[Mutation]) -> str:
    """The diff from the base to the mutant (the task's setup patch)."""
    texts = mutant_texts(originals, mutations)
    return "".join(make_unified_diff(p, originals[p], texts[p]) for p in sorted(texts))


def instance_id(repo: str, mutations: Sequence[Mutation]) -> str:
    digest = hashlib.sha256("+".join(m.key for m in mutations).encode()).hexdigest()[:10]
    return f"{repo.replace('/', '__')}-factory-{digest}"


def make_row(
    *,
    repo: str,
    base_commit: str,
    version: str | None,
    python: str,
    screened: Screened,
    originals: Mapping[str, str],
    problem_statement: str,
    seed: int,
) -> dict[str, Any]:
    """The SWE-bench shaped row of a kept mutant (or of several, for a multi-bug task)."""
    setup_patch = mutant_patch(originals, screened.mutations)
    broken = set(screened.broken)
    return {
        "instance_id": instance_id(repo, screened.mutations),
        "repo": repo,
        "base_commit": base_commit,
        "problem_statement": problem_statement,
        "hints_text": "",
        "patch": reverse_patch(setup_patch),
        "test_patch": "",
        "setup_patch": setup_patch,
        "FAIL_TO_PASS": json.dumps(sorted(broken)),
        "PASS_TO_PASS": json.dumps([t for t in screened.run_passed if t not in broken]),
        "version": version or "",
        "environment_setup_commit": base_commit,
        "environment": {"python": python, "test_cmd": test_command(screened.files)},
        # the tests exist at the base (no test patch): the real reward restores these files
        # before running them, so a candidate that edits the tests cannot pass them
        "reset_files": sorted(screened.files),
        "factory": {
            "operators": [m.operator for m in screened.mutations],
            "bugs": len(screened.mutations),
            "seed": seed,
        },
    }


@dataclass
class Verification:
    """The real runs of a task: the buggy state and the gold patch."""

    ok: bool
    reason: str
    buggy: Any = None
    gold: Any = None


def verify_row(task: Any, manager: Any, executor: Any, *, timeout: float = 600.0) -> Verification:
    """Run ``task`` for real: the buggy state (no patch) must fail every FAIL_TO_PASS test
    and keep PASS_TO_PASS; the gold patch must resolve it."""
    from sweworld.reward.real import GRADED_STATUSES, real_reward

    buggy = real_reward(task, "", manager=manager, executor=executor, timeout=timeout)
    if buggy.status not in GRADED_STATUSES:
        return Verification(False, f"buggy_{buggy.status}", buggy)
    status = buggy.report[task.instance_id].get("tests_status", {})
    f2p, p2p = status.get("FAIL_TO_PASS", {}), status.get("PASS_TO_PASS", {})
    if f2p.get("success"):
        return Verification(False, "buggy_passes_fail_to_pass", buggy)
    if p2p.get("failure"):
        return Verification(False, "buggy_breaks_pass_to_pass", buggy)
    gold = real_reward(task, task.patch, manager=manager, executor=executor, timeout=timeout)
    if gold.status not in GRADED_STATUSES:
        return Verification(False, f"gold_{gold.status}", buggy, gold)
    if not gold.resolved:
        return Verification(False, "gold_does_not_resolve", buggy, gold)
    return Verification(True, "ok", buggy, gold)
