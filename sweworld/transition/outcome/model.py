"""The outcome model: classifiers over step features, stored as plain JSON.

Three heads share one file:

* ``exit``: the exit-code class of a command (:data:`EXIT_CLASSES`);
* ``exception``: the exception type the command raised (``none`` when it raised none);
* ``test``: the status of one test the command runs (:data:`TEST_STATUSES`).

Each head is trained with scikit-learn (:class:`~sklearn.ensemble.HistGradientBoostingClassifier`
or :class:`~sklearn.linear_model.LogisticRegression`) and **exported to JSON**: the trees'
nodes (feature, threshold, children, leaf values) or the coefficients, evaluated here with
numpy. Loading a model never unpickles anything, so a downloaded model file cannot run
code. A file that is not valid JSON, of another format version, or made for another feature
set raises :class:`ModelFileError` naming the file. The heads themselves (export and
evaluation) are :mod:`~sweworld.transition.outcome.heads`.

Two forms of a trees head, both read: version 1 holds every tree as JSON lists (``trees``);
version 2, written by :meth:`OutcomeModel.save`, holds the whole forest as little-endian
arrays in base64 (``forest``, :mod:`~sweworld.transition.outcome.packed`), which loads
without parsing a float per node. Both are plain data, checked the same way at load.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.transition.outcome.features import STEP_FEATURES, TEST_FEATURES
from sweworld.transition.outcome.heads import Head, export_estimator
from sweworld.transition.outcome.packed import pack_trees, unpack_trees

__all__ = [
    "EXIT_CLASSES",
    "FORMAT",
    "FORMAT_VERSION",
    "READ_VERSIONS",
    "TEST_STATUSES",
    "Head",
    "ModelFileError",
    "OutcomeModel",
    "exit_class",
    "export_estimator",
    "load_shared",
]

FORMAT = "sweworld-outcome-model"
FORMAT_VERSION = 2
#: The versions :meth:`OutcomeModel.load` reads (1: trees as JSON lists; 2: packed arrays).
READ_VERSIONS = (1, 2)
#: Exit-code classes: the code itself for the common ones, ``other`` for the rest.
EXIT_CLASSES = ("0", "1", "2", "4", "5", "other")
TEST_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED")


class ModelFileError(ValueError):
    """A model file that cannot be used (corrupt, another version, another feature set)."""


def exit_class(code: int) -> str:
    """The :data:`EXIT_CLASSES` entry of an exit code."""
    text = str(int(code))
    return text if text in EXIT_CLASSES else "other"


class OutcomeModel:
    """The heads of a trained outcome model plus its metadata (data, figures)."""

    def __init__(self, heads: dict[str, Head], meta: dict[str, Any] | None = None):
        self.heads = heads
        self.meta = dict(meta or {})

    @property
    def kinds(self) -> list[str]:
        """Command kinds seen in training (others get the conservative answer)."""
        return list(self.meta.get("trained_kinds", []))

    def to_dict(self, packed: bool = True) -> dict[str, Any]:
        """The file's content: version 2 with packed forests, or version 1 (``packed=False``,
        every tree as JSON lists: readable, and what older sweworld releases load)."""
        convert = pack_trees if packed else unpack_trees
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION if packed else 1,
            "features": {"step": list(STEP_FEATURES), "test": list(TEST_FEATURES)},
            "heads": {name: convert(head.body) for name, head in self.heads.items()},
            "meta": self.meta,
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "model.json"
        path.write_text(json.dumps(self.to_dict(), separators=(",", ":")), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> OutcomeModel:
        """Read a model file (or a folder holding ``model.json``); never unpickles."""
        path = Path(path)
        if path.is_dir():
            path = path / "model.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ModelFileError(f"{path}: cannot read the outcome model: {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise ModelFileError(f"{path}: not an outcome model (corrupt JSON: {exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ModelFileError(f"{path}: not an outcome model (format is not {FORMAT!r})")
        if data.get("version") not in READ_VERSIONS or isinstance(data.get("version"), bool):
            raise ModelFileError(
                f"{path}: outcome model format version {data.get('version')!r}; "
                f"this sweworld reads versions {', '.join(map(str, READ_VERSIONS))}"
            )
        feats = data.get("features") or {}
        if (
            not isinstance(feats, dict)
            or feats.get("step") != list(STEP_FEATURES)
            or feats.get("test") != list(TEST_FEATURES)
        ):
            raise ModelFileError(
                f"{path}: the outcome model was trained on another feature set; retrain it "
                "with this sweworld (sweworld train outcome)"
            )
        heads_data, meta = data.get("heads") or {}, data.get("meta") or {}
        if not isinstance(heads_data, dict) or not isinstance(meta, dict):
            raise ModelFileError(f"{path}: corrupt outcome model: heads and meta are objects")
        heads: dict[str, Head] = {}
        widths = {"test": len(TEST_FEATURES)}
        try:
            for name, body in heads_data.items():
                version = data["version"]
                if (
                    isinstance(body, dict)
                    and body.get("kind") == "trees"
                    and ("forest" in body) != (version >= 2)
                ):
                    form = "a packed forest" if version >= 2 else "lists of trees"
                    raise ValueError(f"head {name!r}: a version {version} file's trees are {form}")
                width = widths.get(name.partition("@")[0], len(STEP_FEATURES))
                heads[name] = head = _checked_head(body, width)
                if head.max_feature() >= width:
                    raise ModelFileError(f"{path}: head {name!r} reads a feature it does not have")
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
            if isinstance(exc, ModelFileError):
                raise
            raise ModelFileError(f"{path}: corrupt outcome model head: {exc}") from exc
        if not {"exit", "exit@oracle", "exit@blind"} & heads.keys():
            raise ModelFileError(f"{path}: the outcome model has no 'exit' head")
        return cls(heads, meta)

    def head(self, name: str, mode: str | None = None) -> Head | None:
        """The head ``name`` for ``mode`` (a head trained on that mode's rows, ``name@mode``,
        when the file has one; else the shared head), None when the file has neither."""
        if mode is not None and f"{name}@{mode}" in self.heads:
            return self.heads[f"{name}@{mode}"]
        return self.heads.get(name)

    def predict_exit(self, rows: Sequence[Sequence[float]], mode: str | None = None) -> list[str]:
        head = self.head("exit", mode)
        assert head is not None  # load() refuses a file without one
        return head.predict(np.asarray(rows, dtype=float))

    def exit_fail_proba(
        self, rows: Sequence[Sequence[float]], mode: str | None = None
    ) -> np.ndarray:
        """P(the command exits 1) for each row (a test run that ran and saw a failure)."""
        head = self.head("exit", mode)
        assert head is not None
        proba = head.proba(np.asarray(rows, dtype=float))
        classes = head.classes
        return proba[:, classes.index("1")] if "1" in classes else np.zeros(len(rows))

    def predict_exception(
        self, rows: Sequence[Sequence[float]], mode: str | None = None
    ) -> list[str]:
        head = self.head("exception", mode)
        if head is None:
            return ["none"] * len(rows)
        return head.predict(np.asarray(rows, dtype=float))

    def predict_tests(self, rows: Sequence[Sequence[float]], mode: str | None = None) -> list[str]:
        if not rows:
            return []
        head = self.head("test", mode)
        if head is None:
            return ["PASSED"] * len(rows)
        return head.predict(np.asarray(rows, dtype=float))

    def decide_tests(
        self,
        step_row: Sequence[float],
        test_rows: Sequence[Sequence[float]],
        mode: str | None = None,
    ) -> tuple[bool, list[str]]:
        """One consistent decision for a test run: whether it fails, and every test's status.

        The exit head (how likely this run fails) and the test head (how likely each test
        fails) are two views of one question; their mean decides whether the run fails, and
        the statuses follow the decision: a passing run has no failing test; a failing run
        keeps the tests the test head marks failing, or, when it marks none, the test most
        likely to fail. So a rendered report never says "all passed" with exit 1, and the
        reward that reads the same statuses (issue 20) agrees with the simulated run.
        """
        failing, statuses, _, _ = self.decide_tests_detail(step_row, test_rows, mode)
        return failing, statuses

    def decide_tests_detail(
        self,
        step_row: Sequence[float],
        test_rows: Sequence[Sequence[float]],
        mode: str | None = None,
    ) -> tuple[bool, list[str], float, np.ndarray]:
        """:meth:`decide_tests` with its numbers: (fails, statuses, P(the run fails), each
        test's P(FAILED or ERROR))."""
        if not test_rows:
            return False, [], 0.0, np.zeros(0)
        X = np.asarray(test_rows, dtype=float)
        head = self.head("test", mode)
        if head is None:
            return False, ["PASSED"] * len(X), 0.0, np.zeros(len(X))
        proba = head.proba(X)
        classes = head.classes
        statuses = [classes[i] for i in proba.argmax(axis=1)]
        bad = [classes.index(c) for c in ("FAILED", "ERROR") if c in classes]
        p_fail = proba[:, bad].sum(axis=1) if bad else np.zeros(len(X))
        p_any = 1.0 - float(np.prod(1.0 - np.clip(p_fail, 0.0, 1.0)))
        p_exit = float(self.exit_fail_proba([step_row], mode)[0])
        p_run = (p_exit + p_any) / 2.0
        failing = p_run > 0.5
        statuses = self._follow(failing, statuses, p_fail)
        return failing, statuses, p_run, p_fail

    @staticmethod
    def _follow(failing: bool, statuses: list[str], p_fail: np.ndarray) -> list[str]:
        """Statuses made to follow the run's decision (see :meth:`decide_tests`)."""
        if not failing:
            return ["PASSED" if s in ("FAILED", "ERROR") else s for s in statuses]
        if not any(s in ("FAILED", "ERROR") for s in statuses):
            statuses[int(p_fail.argmax())] = "FAILED"
        return statuses


def _finite_numbers(value: Any, what: str) -> np.ndarray:
    """``value`` as a float array of finite numbers (no strings, booleans or nesting errors)."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf" or not np.isfinite(array).all():
        raise ValueError(f"{what} must be finite numbers")
    return array.astype(float)


def _checked_head(body: Any, width: int | None = None) -> Head:
    """A head checked whole at load: kind, classes (distinct strings), baseline or linear
    coefficients of the right shapes, every tree (:meth:`Head._forest`), and one probe
    evaluation on ``width`` zeros, so that a file that loads also predicts."""
    if not isinstance(body, dict) or body.get("kind") not in ("trees", "linear"):
        raise ValueError("unknown head kind")
    classes = body["classes"]
    if (
        not isinstance(classes, list)
        or not classes
        or not all(isinstance(c, str) for c in classes)
        or len(set(classes)) != len(classes)
    ):
        raise ValueError("classes must be distinct strings")
    k = len(classes)
    if body["kind"] == "trees":
        baseline = _finite_numbers(body["baseline"], "the baseline")
        if baseline.shape not in (((1,),) if k == 2 else ((k,),)):
            raise ValueError(f"a baseline of shape {baseline.shape} for {k} classes")
        head = Head(body)
        head._forest()  # every tree checked now: a corrupt file fails at load, named
    else:
        coef = _finite_numbers(body["coef"], "coef")
        rows = 1 if k == 2 else k
        if coef.ndim != 2 or coef.shape[0] != rows or (width and coef.shape[1] != width):
            raise ValueError(f"coef of shape {coef.shape} for {k} classes")
        if _finite_numbers(body["intercept"], "intercept").shape != (rows,):
            raise ValueError("intercept does not match coef")
        for key in ("mean", "std"):
            if body.get(key) is not None:
                values = _finite_numbers(body[key], key)
                if values.shape != (coef.shape[1],) or (key == "std" and (values == 0).any()):
                    raise ValueError(f"{key} does not match coef")
        head = Head(body)
    if width:
        probe = head.proba(np.zeros((1, width)))
        if probe.shape != (1, k) or not np.isfinite(probe).all():
            raise ValueError("the head does not evaluate")
    return head


_SHARED: dict[tuple[str, int, int], OutcomeModel | ModelFileError] = {}
_SHARED_LOCK = threading.Lock()


def load_shared(path: str | Path) -> OutcomeModel:
    """:meth:`OutcomeModel.load`, once per process for a file (the world's executor and the
    reward's test predictor read the same model: one load, one copy in memory); a file
    rewritten since is read again, and a file that cannot be used raises the same
    :class:`ModelFileError` without being read again until it changes. The model is
    shared: never modify it."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.json"
    try:
        st = os.stat(path)
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return OutcomeModel.load(path)  # the error, worded by load
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            try:
                found = OutcomeModel.load(path)
            except ModelFileError as exc:
                found = exc
            if len(_SHARED) >= 64:  # files rewritten over and over: keep memory bounded
                _SHARED.clear()
            _SHARED[key] = found
    if isinstance(found, ModelFileError):
        raise ModelFileError(str(found))  # a new one: a shared one would grow its traceback
    return found
