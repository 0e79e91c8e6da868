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

import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TestPredictor", "predicted_test_features"]

_MAX_TESTS = 400
_LOCK = threading.Lock()
_MODELS: dict[str, Any] = {}


def _load(spec: str | Path | None) -> Any:
    from sweworld.transition.outcome.executor import DEFAULT_MODEL
    from sweworld.transition.outcome.model import OutcomeModel

    key = str(spec or DEFAULT_MODEL)
    with _LOCK:
        if key not in _MODELS:
            try:
                _MODELS[key] = OutcomeModel.load(Path(key))
            except Exception as exc:  # remembered: a bad file is not re-read on every call
                _MODELS[key] = exc
        found = _MODELS[key]
    if isinstance(found, Exception):
        raise found
    return found


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


def _field(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, dict) else getattr(task, name, None)


def predicted_test_features(
    model: Any, task: Any, patch: str, base_dir: Path | None, mode: str
) -> tuple[dict[str, float], dict[str, str]] | None:
    """The outcome model's view of the task's tests after ``patch`` (see the module
    docstring): features named like :data:`~sweworld.reward.verdict.VERDICT_FEATURES`'
    ``oc_*`` and each test's predicted status."""
    from sweworld.tasks.fields import test_list
    from sweworld.transition.outcome.features import per_test_features, step_features
    from sweworld.transition.outcome.state import FileState

    if base_dir is None or mode != "oracle":
        return None
    f2p = test_list(task, "FAIL_TO_PASS")[:_MAX_TESTS]
    p2p = test_list(task, "PASS_TO_PASS")[:_MAX_TESTS]
    if not f2p:
        return None
    test_patch = str(_field(task, "test_patch") or "")
    diff = (patch or "").rstrip("\n") + "\n" + test_patch if test_patch else patch or ""
    state = FileState.from_diff(Path(base_dir), diff)
    ids = [*f2p, *[t for t in p2p if t not in set(f2p)]]
    files = sorted({t.split("::", 1)[0] for t in ids if "::" in t})[:50]
    argv = ["python", "-m", "pytest", "-rA", *files]
    step = step_features(argv, "/testbed", state, task, oracle=True, test_ids=ids)
    cache: dict[str, Any] = {}
    rows = [per_test_features(step, t, state, None, cache) for t in ids]
    failing, statuses = model.decide_tests(step.values, rows, mode)
    head = model.head("test", mode)
    p_fail = np.zeros(len(ids))
    if head is not None:
        proba = head.proba(np.asarray(rows, dtype=float))
        bad = [head.classes.index(c) for c in ("FAILED", "ERROR") if c in head.classes]
        if bad:
            p_fail = proba[:, bad].sum(axis=1)
    n_f = len(f2p)
    f_stat, p_stat = statuses[:n_f], statuses[n_f:]
    reach_index = len(step.values)  # per-test features: step values, then the test's own
    feats = {
        "oc_available": 1.0,
        "oc_f2p_n": float(np.log1p(n_f)),
        "oc_p2p_n": float(np.log1p(len(p_stat))),
        "oc_f2p_pass": sum(s == "PASSED" for s in f_stat) / n_f,
        "oc_p2p_pass": (sum(s == "PASSED" for s in p_stat) / len(p_stat)) if p_stat else 1.0,
        "oc_f2p_pfail_mean": float(p_fail[:n_f].mean()),
        "oc_f2p_pfail_max": float(p_fail[:n_f].max()),
        "oc_p2p_pfail_max": float(p_fail[n_f:].max()) if p_stat else 0.0,
        "oc_run_fails": float(bool(failing)),
        "oc_reach_changed": float(np.mean([r[reach_index + 6] for r in rows[:n_f]])),
    }
    return feats, dict(zip(ids, statuses, strict=True))
