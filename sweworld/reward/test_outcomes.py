"""The task's tests on a candidate's state, as the outcome model (issue 19) predicts them.

One state, one truth: the statuses here come from
:meth:`~sweworld.transition.outcome.model.OutcomeModel.decide_tests`, the call the
:class:`~sweworld.transition.outcome.executor.OutcomeExecutor` makes for a simulated
``pytest`` run, on the same features (the base checkout with the candidate patch and the
task's test patch applied, the task's FAIL_TO_PASS / PASS_TO_PASS ids). The reward reads
them as evidence; it never sees a run that says otherwise.

Without a base checkout or without the test lists (blind mode) there is no prediction
(``None``): the verdict's outcome features are then missing values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sweworld.tasks.fields import task_field
from sweworld.transition.outcome.graded import reconcile_statuses

__all__ = ["TestPredictor", "predicted_test_features", "reconcile_statuses"]


def _load(spec: str | Path | None) -> Any:
    """The model of ``spec`` (None: the shipped one), the copy the world's executor shares
    (:func:`~sweworld.transition.outcome.model.load_shared`: read again when the file is
    rewritten, a bad file's error remembered until then)."""
    from sweworld.transition.outcome.executor import DEFAULT_MODEL
    from sweworld.transition.outcome.model import load_shared

    return load_shared(Path(str(spec or DEFAULT_MODEL)))


class TestPredictor:
    """Predicts the task's tests on candidate states with one outcome model (loaded once per
    process and shared). ``model``: a model file or folder, a loaded model, or None for the
    shipped one."""

    __test__ = False  # not a pytest class

    def __init__(self, model: Any = None):
        self._spec = model
        self._model = model if hasattr(model, "decide_tests") else None

    @property
    def model(self) -> Any:
        """The outcome model (loaded on first use)."""
        if self._model is None:
            self._model = _load(self._spec)
        return self._model

    def predict(
        self, task: Any, patch: str, base_dir: Path | None, mode: str
    ) -> tuple[dict[str, float], dict[str, str]] | None:
        """(features, statuses by test id) or None when nothing can be predicted."""
        return predicted_test_features(self.model, task, patch, base_dir, mode)


def predicted_test_features(
    model: Any, task: Any, patch: str, base_dir: Path | None, mode: str
) -> tuple[dict[str, float], dict[str, str]] | None:
    """The outcome model's view of the task's tests after ``patch`` (see the module
    docstring): features named like :data:`~sweworld.reward.verdict.VERDICT_FEATURES`'
    ``oc_*`` (plus ``oc_p_run_fails``, the decision's probability) and each test's
    predicted status. The decision is :func:`~sweworld.transition.outcome.graded.
    graded_tests` on the grader's state, the one a simulated run of those tests sees."""
    from sweworld.transition.outcome.graded import graded_state, graded_tests
    from sweworld.transition.outcome.state import FileState

    if base_dir is None or mode != "oracle":
        return None
    state = FileState.from_diff(Path(base_dir), patch or "")
    graded = graded_tests(
        model, task, graded_state(state, str(task_field(task, "test_patch") or "")), mode
    )
    if graded is None:
        return None
    n_f, statuses = len(graded.f2p), graded.statuses
    f_stat = [statuses[t] for t in graded.f2p]
    p_stat = [statuses[t] for t in graded.p2p]
    p_fail = graded.p_fail
    reach_index = graded.step_width + 6  # per-test features: step values, then the test's
    feats = {
        "oc_available": 1.0,
        "oc_f2p_n": float(np.log1p(n_f)),
        "oc_p2p_n": float(np.log1p(len(p_stat))),
        "oc_f2p_pass": sum(s == "PASSED" for s in f_stat) / n_f,
        "oc_p2p_pass": (sum(s == "PASSED" for s in p_stat) / len(p_stat)) if p_stat else 1.0,
        "oc_f2p_pfail_mean": float(p_fail[:n_f].mean()),
        "oc_f2p_pfail_max": float(p_fail[:n_f].max()),
        "oc_p2p_pfail_max": float(p_fail[n_f:].max()) if p_stat else 0.0,
        "oc_run_fails": float(graded.fails),
        "oc_reach_changed": float(np.mean([r[reach_index] for r in graded.rows[:n_f]])),
        "oc_p_run_fails": graded.p_fails,
    }
    return feats, statuses
