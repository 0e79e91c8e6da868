"""The task's graded tests on a state, decided once: what the reward and the world share.

SWE-bench grades a candidate by running the task's FAIL_TO_PASS and PASS_TO_PASS tests on
the candidate's state with the task's test files reset to the base commit and the test patch
applied. :func:`graded_state` builds that state from any :class:`FileState` (a live session's
workspace or a stored diff), and :func:`graded_tests` asks the outcome model for the one
decision about those tests (:meth:`~sweworld.transition.outcome.model.OutcomeModel.
decide_tests_detail`) on a fixed command (``python -m pytest -rA`` on the tests' files), with
no ledger. The same state therefore gets the same statuses wherever it is asked: as
evidence of the reward's verdict (:mod:`sweworld.reward.test_outcomes`) and in a simulated
run of those tests in a session (:class:`~sweworld.transition.outcome.executor.
OutcomeExecutor`, oracle mode). Where the executor has a judge (the World binds its
reward's verdict), :func:`workspace_patch` gives the judge the session's diff and
:func:`reconcile_statuses` makes the run show the judge's decision.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.tasks.fields import test_list
from sweworld.tasks.patches import patch_hunks
from sweworld.transition.outcome.features import per_test_rows, step_features
from sweworld.transition.outcome.state import FileState, apply_patch_text

__all__ = [
    "JUDGE_MIN_S",
    "MAX_GRADED",
    "MAX_JUDGED_BYTES",
    "MAX_JUDGED_FILE_BYTES",
    "MAX_JUDGED_FILE_LINES",
    "GradedTests",
    "RememberedJudge",
    "graded_ids",
    "graded_state",
    "graded_tests",
    "read_raw_text",
    "reconcile_statuses",
    "workspace_patch",
]

#: The judge is not asked when less of the step's time than this is left (seconds).
JUDGE_MIN_S = 2.0
#: Decisions a :class:`RememberedJudge` keeps (it forgets them all past this).
_MAX_REMEMBERED = 4096
#: Tests of each list read at most (features stay bounded on huge lists).
MAX_GRADED = 400
#: A state whose changed files hold more text than this, both sides together, is not
#: handed to a judge (no decision); nor is one with a changed file larger than
#: :data:`MAX_JUDGED_FILE_BYTES` (the diff's time stays bounded).
MAX_JUDGED_BYTES = 2_000_000
MAX_JUDGED_FILE_BYTES = 400_000
#: Nor one with a changed file of more lines than this (a diff's time grows with the product
#: of the two sides' lines on repetitive text: ~0.5 s at this bound, 2 s at twice it).
MAX_JUDGED_FILE_LINES = 10_000


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
    rows = per_test_rows(step, ids, state, stage="the graded tests' features")
    fails, statuses, p_run, p_fail = model.decide_tests_detail(step.values, rows, mode)
    return GradedTests(
        f2p, p2p, dict(zip(ids, statuses, strict=True)), bool(fails), float(p_run), p_fail,
        rows, len(step.values),
    )  # fmt: skip


def read_raw_text(root: Path, rel: str, budget: int) -> tuple[bool, str | None]:
    """(readable, text) of the regular file ``root/rel`` as bytes decoded (line endings kept):
    (True, None) when it does not exist; (False, None) when it cannot be a patch's text (a
    symlink, not a regular file, a folder outside ``root`` on the way, over ``budget`` bytes,
    binary, not UTF-8)."""
    path = root / rel
    try:
        parent = path.parent.resolve()
        if parent != root.resolve() and root.resolve() not in parent.parents:
            return False, None
        st = os.lstat(path)
    except FileNotFoundError:
        return True, None
    except OSError:
        return False, None
    if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
        return False, None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(budget + 1)
    except OSError:
        return False, None
    if len(data) > budget or b"\0" in data:
        return False, None
    try:
        return True, data.decode("utf-8")
    except UnicodeDecodeError:
        return False, None


def workspace_patch(
    workspace: Path, base: Path, paths: Iterable[str], exclude: Iterable[str] = ()
) -> str | None:
    """The ``git diff`` of the text files ``paths`` between the base checkout ``base`` and
    the session's ``workspace`` (line endings kept, paths quoted as git quotes them, empty
    new files as a header), without ``exclude``; None when a path cannot be told as text (a
    symlink, a binary or undecodable file, a control character in its name) or the files
    exceed :data:`MAX_JUDGED_FILE_BYTES`, :data:`MAX_JUDGED_FILE_LINES` or
    :data:`MAX_JUDGED_BYTES`: a judge is then not asked."""
    from sweworld.tasks.unified_diff import make_unified_diff

    skip = set(exclude)
    parts: list[str] = []
    left = MAX_JUDGED_BYTES
    for rel in sorted(set(paths)):
        rel = posixpath.normpath(rel)
        if rel in skip or _noise_path(rel):
            continue
        if rel.startswith(("../", "/")) or any(ord(c) < 32 or c == "\x7f" for c in rel):
            return None
        ok_old, old = read_raw_text(Path(base), rel, MAX_JUDGED_FILE_BYTES)
        ok_new, new = read_raw_text(Path(workspace), rel, MAX_JUDGED_FILE_BYTES)
        if not (ok_old and ok_new):
            return None
        if old == new:
            continue
        if max((old or "").count("\n"), (new or "").count("\n")) > MAX_JUDGED_FILE_LINES:
            return None
        left -= len(old or "") + len(new or "")
        if left < 0:
            return None
        # hunk headers as git writes them: the judge reads the same text as the reward of
        # the episode's own ``git diff`` (a header's function context is evidence there)
        parts.append(make_unified_diff(rel, old, new, funcname=True))
    return "".join(parts)


def _noise_path(rel: str) -> bool:
    """What ``git add -A`` would not show either: the version control folder, bytecode and
    caches a run leaves behind."""
    parts = rel.split("/")
    return (
        parts[0] == ".git"
        or "__pycache__" in parts
        or ".pytest_cache" in parts
        or rel.endswith((".pyc", ".pyo"))
        or any(p.endswith(".egg-info") for p in parts[:-1])
    )


def reconcile_statuses(statuses: Mapping[str, str], task: Any, resolved: bool) -> dict[str, str]:
    """The task's test statuses made to agree with a decision about the state (one state,
    one truth): a resolved state passes every FAIL_TO_PASS and PASS_TO_PASS test; an
    unresolved one keeps the predicted failures, or, where the prediction has none, fails
    the first FAIL_TO_PASS test (SWE-bench's rule: resolved iff all of them pass). Tests
    outside the two lists keep their status."""
    graded = [*test_list(task, "FAIL_TO_PASS"), *test_list(task, "PASS_TO_PASS")]
    out = dict(statuses)
    if resolved:
        out.update(dict.fromkeys((t for t in graded if t in out), "PASSED"))
        return out
    if not any(out.get(t) in ("FAILED", "ERROR") for t in graded):
        f2p = [t for t in test_list(task, "FAIL_TO_PASS") if t in out]
        if f2p:
            out[f2p[0]] = "FAILED"
    return out


class RememberedJudge:
    """A judge of whether a session's state resolves its task (``judge(task, patch) ->
    bool | None``, the World binds its reward's verdict), asked once per task and diff and
    remembered (thread-safe)."""

    def __init__(self, judge: Callable[[Any, str], bool | None]):
        self.judge = judge
        self._decided: dict[tuple[str, str], bool | None] = {}
        self._lock = threading.Lock()

    def decide(
        self, request: Any, task: Any, state: FileState, reset: set[str], note: dict[str, Any]
    ) -> bool | None:
        """The decision about the diff of ``request``'s workspace over its base (the
        ``reset`` files left out), or None (a state that cannot be told as a patch, too
        little of the step's time left, a judge that fails or gives no boolean): the outcome
        model's own decision then stands, ``note["judge"]`` says why."""
        from sweworld.tasks.fields import task_field
        from sweworld.transition.deadline import step_deadline

        try:
            if request.workspace is None or request.base is None:
                note["judge"] = "no workspace"
                return None
            left = None if request.deadline is None else request.deadline - time.monotonic()
            if left is not None and left < JUDGE_MIN_S:
                note["judge"] = f"not asked: {max(left, 0.0):.2f} s left of the step"
                return None
            patch = workspace_patch(request.workspace, request.base, state.changed, reset)
            if patch is None:
                note["judge"] = "state not a text patch (binary, link, huge)"
                return None
            task_id = str(task_field(task, "instance_id") or "")
            digest = hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()
            key = (task_id, digest) if task_id else None
            with self._lock:
                if key is not None and key in self._decided:
                    note["judge"] = "remembered"
                    return self._decided[key]
            # the judge (the reward) is bounded by JUDGE_MIN_S above, not stopped midway: a
            # decision cut short would be remembered for this diff
            with step_deadline(None):
                decision = self.judge(task, patch)
        except Exception as exc:  # the outcome model's decision stands
            note["judge"] = f"failed: {type(exc).__name__}: {exc}"[:300]
            return None
        if decision is not None and not isinstance(decision, (bool, np.bool_)):
            note["judge"] = f"no decision: the judge gave {type(decision).__name__}"
            return None
        decision = None if decision is None else bool(decision)
        with self._lock:
            if key is not None:
                if len(self._decided) >= _MAX_REMEMBERED:
                    self._decided.clear()
                self._decided[key] = decision
        note["judge"] = "decided" if decision is not None else "undecided"
        return decision
