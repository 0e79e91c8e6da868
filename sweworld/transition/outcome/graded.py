"""The task's graded tests on a state, decided once: what the reward and the world share.

SWE-bench grades a candidate by running the task's FAIL_TO_PASS and PASS_TO_PASS tests on
the candidate's state with the task's test files reset to the base commit and the test patch
applied. :func:`graded_state` builds that state from any :class:`FileState` (a live session's
workspace or a stored diff), and :func:`graded_tests` asks the outcome model for the one
decision about those tests (:meth:`~sweworld.transition.outcome.model.OutcomeModel.
decide_tests_detail`) on a fixed command (``python -m pytest -rA`` on the tests' files), with
no ledger. The same state therefore gets the same answer wherever it is asked: the reward's
verdict (:mod:`sweworld.reward.test_outcomes`) and a simulated test run of those tests in a
session (:class:`~sweworld.transition.outcome.executor.OutcomeExecutor`, oracle mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweworld.tasks.fields import test_list
from sweworld.tasks.patches import patch_hunks
from sweworld.transition.outcome.features import per_test_features, step_features
from sweworld.transition.outcome.state import FileState, apply_patch_text

__all__ = ["MAX_GRADED", "GradedTests", "graded_ids", "graded_state", "graded_tests"]

#: Tests of each list read at most (features stay bounded on huge lists).
MAX_GRADED = 400


@dataclass
class GradedTests:
    """The outcome model's decision about a task's graded tests on one state."""

    f2p: list[str]
    p2p: list[str]
    statuses: dict[str, str]
    fails: bool
    p_fails: float
    p_fail: np.ndarray = field(repr=False)
    rows: list[list[float]] = field(repr=False)
    step_width: int = 0

    @property
    def ids(self) -> list[str]:
        return [*self.f2p, *self.p2p]


def _field(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def graded_ids(task: Any) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS without the FAIL_TO_PASS ids), each capped."""
    if task is None:
        return [], []
    f2p = test_list(task, "FAIL_TO_PASS")[:MAX_GRADED]
    seen = set(f2p)
    p2p = [t for t in test_list(task, "PASS_TO_PASS") if t not in seen][:MAX_GRADED]
    return f2p, p2p


def graded_state(state: FileState, test_patch: str) -> FileState:
    """``state`` as the grader runs it: every file the test patch touches reads as its base
    text with the test patch applied (whatever the candidate did to it), the rest as now."""
    hunks = patch_hunks(test_patch or "")
    if not hunks:
        return state
    patched: dict[str, str | None] = {
        path: apply_patch_text(state.base_text(path), list(file_hunks))
        for path, file_hunks in hunks.items()
    }

    def current(rel: str) -> str | None:
        return patched[rel] if rel in patched else state.text(rel)

    return FileState(current, state.base_text, [*state.changed, *patched])


def graded_tests(
    model: Any, task: Any, state: FileState, mode: str = "oracle"
) -> GradedTests | None:
    """The decision about ``task``'s graded tests on ``state`` (already the grader's state,
    see :func:`graded_state`), or None without FAIL_TO_PASS ids (nothing to decide)."""
    f2p, p2p = graded_ids(task)
    if not f2p:
        return None
    ids = [*f2p, *p2p]
    files = sorted({t.split("::", 1)[0] for t in ids if "::" in t})[:50]
    argv = ["python", "-m", "pytest", "-rA", *files]
    step = step_features(argv, "/testbed", state, task, oracle=mode == "oracle", test_ids=ids)
    cache: dict[str, Any] = {}
    rows = [per_test_features(step, t, state, None, cache) for t in ids]
    fails, statuses, p_run, p_fail = model.decide_tests_detail(step.values, rows, mode)
    return GradedTests(
        f2p, p2p, dict(zip(ids, statuses, strict=True)), bool(fails), float(p_run), p_fail,
        rows, len(step.values),
    )  # fmt: skip
