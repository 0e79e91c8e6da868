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
set raises :class:`ModelFileError` naming the file.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.transition.outcome.features import STEP_FEATURES, TEST_FEATURES
from sweworld.transition.outcome.packed import (
    NODE_FIELDS,
    pack_trees,
    read_packed,
    unpack_trees,
)

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


# ------------------------------------------------------------------------------ export


def _export_trees(est: Any) -> dict[str, Any]:
    """A fitted HistGradientBoostingClassifier as plain lists (numerical splits only)."""
    trees: list[list[dict[str, list]]] = []
    for iteration in est._predictors:
        row = []
        for predictor in iteration:
            nodes = predictor.nodes
            if np.any(nodes["is_categorical"]):
                raise ValueError("categorical splits are not exported")
            row.append(
                {
                    "feature": nodes["feature_idx"].astype(int).tolist(),
                    "threshold": nodes["num_threshold"].astype(float).tolist(),
                    "missing_left": nodes["missing_go_to_left"].astype(int).tolist(),
                    "left": nodes["left"].astype(int).tolist(),
                    "right": nodes["right"].astype(int).tolist(),
                    "leaf": nodes["is_leaf"].astype(int).tolist(),
                    "value": nodes["value"].astype(float).tolist(),
                }
            )
        trees.append(row)
    return {
        "kind": "trees",
        "baseline": np.asarray(est._baseline_prediction, dtype=float).ravel().tolist(),
        "trees": trees,
    }


def _export_linear(est: Any, scale: tuple[np.ndarray, np.ndarray] | None) -> dict[str, Any]:
    mean, std = scale if scale is not None else (None, None)
    return {
        "kind": "linear",
        "coef": np.asarray(est.coef_, dtype=float).tolist(),
        "intercept": np.asarray(est.intercept_, dtype=float).tolist(),
        "mean": mean.tolist() if mean is not None else None,
        "std": std.tolist() if std is not None else None,
    }


def export_estimator(
    est: Any, scale: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, Any]:
    """A fitted scikit-learn classifier as a JSON-able dict (its ``classes_`` as strings).
    ``scale``: (mean, std) applied to the inputs before a linear model."""
    if hasattr(est, "_predictors"):
        body = _export_trees(est)
    elif hasattr(est, "coef_"):
        body = _export_linear(est, scale)
    else:
        raise ValueError(f"cannot export {type(est).__name__}")
    body["classes"] = [str(c) for c in est.classes_]
    return body


# ------------------------------------------------------------------------------ evaluation


def _softmax(raw: np.ndarray) -> np.ndarray:
    raw = raw - raw.max(axis=1, keepdims=True)
    e = np.exp(raw)
    return e / e.sum(axis=1, keepdims=True)


#: The deepest tree evaluated (scikit-learn's default grows at most 31 leaves: depth 30).
MAX_TREE_DEPTH = 64
#: The most trees and nodes one head may hold (the shipped heads: ~400 trees, ~30k nodes).
MAX_TREES = 10_000
MAX_NODES = 2_000_000


def _forest_depth(left: np.ndarray, right: np.ndarray, inner: np.ndarray, roots: np.ndarray) -> int:
    """The depth of the deepest tree (the number of splits on its longest path), every tree
    walked at once from its root (children already checked to stay inside their own tree);
    ValueError for a node reached twice (a cycle or shared subtree) or too deep a tree."""
    seen = np.zeros(len(inner), dtype=bool)
    seen[roots] = True
    level, depth = roots, 0
    while True:
        split = level[inner[level]]
        if not split.size:
            return depth
        depth += 1
        if depth > MAX_TREE_DEPTH:
            raise ValueError(f"a tree deeper than {MAX_TREE_DEPTH} splits")
        level = np.concatenate([left[split], right[split]])
        if seen[level].any() or len(np.unique(level)) != len(level):
            raise ValueError("a tree whose children form a cycle or share a node")
        seen[level] = True


@dataclass
class Head:
    """One exported classifier, evaluated with numpy."""

    body: dict[str, Any]

    @property
    def classes(self) -> list[str]:
        return list(self.body["classes"])

    def _forest(self) -> tuple[Any, ...]:
        """Every tree's nodes in flat arrays (children offset to the flat index), built once:
        (feature (0 at leaves), threshold, missing_left, left, right, leaf, value, roots,
        class of each tree, the depth of the deepest tree, the columns the splits read).
        Raises ValueError for trees that are not
        trees (lists of different lengths, children out of range, a node reached twice: a
        cycle), non-finite thresholds or values, too deep a tree, or iterations whose tree
        count is not the baseline's."""
        cached = self.__dict__.get("_flat")
        if cached is not None:
            return cached
        keys = NODE_FIELDS
        a, size = self._node_arrays()
        total = int(size.sum())
        if len(size) > MAX_TREES or total > MAX_NODES:
            raise ValueError(
                f"{len(size)} trees of {total} nodes: more than a head may hold "
                f"({MAX_TREES} trees, {MAX_NODES} nodes)"
            )
        if any(v.shape != (total,) for v in a.values()):
            raise ValueError("a tree whose node lists are not flat lists of numbers")
        sizes = size.tolist()
        width = max(len(self.body["baseline"]), 1)
        classes = np.arange(len(size)) % width
        size = np.asarray(sizes, dtype=np.int64)
        roots = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64) if sizes else size
        offset = np.repeat(roots, size)  # each node's tree's first node
        n_of = np.repeat(size, size)  # each node's tree's size
        inner = ~a["leaf"]
        if not np.isfinite(a["value"]).all():
            raise ValueError("a tree with a non-finite leaf value")
        if np.isnan(a["threshold"][inner]).any():  # inf splits are fine
            raise ValueError("a tree with a NaN threshold")
        for key in ("left", "right"):  # leaves too: a file holds no index out of range
            child = a[key]
            if child.size and ((child < 0).any() or (child >= n_of).any()):
                raise ValueError("a tree whose children point outside it")
        if (a["feature"] < 0).any():
            raise ValueError("a tree reads a feature the input does not have (a negative index)")
        self.__dict__["_max_feature"] = int(a["feature"].max()) if total else -1
        # a leaf's children are never followed, nor its feature read: zeroed for the walk
        for key in ("left", "right"):
            a[key] = np.where(inner, a[key], 0) + offset
        a["feature"] = np.where(inner, a["feature"], 0)
        deepest = _forest_depth(a["left"], a["right"], inner, roots) if sizes else 0
        feature, leaf = a["feature"], a["leaf"]
        widest = int(feature[~leaf].max()) + 1 if (~leaf).any() else 0  # columns read
        flat = (*(a[k] for k in keys), roots,
                np.asarray(classes, dtype=np.int64), deepest, widest)  # fmt: skip
        self.__dict__["_flat"] = flat
        return flat

    def _node_arrays(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(each node field over every tree, the number of nodes of each tree) from either
        form of the file, trees laid out iteration by iteration, one per class."""
        body = self.body
        width = len(body["baseline"])
        dtypes = {"feature": np.int64, "threshold": float, "missing_left": bool,
                  "left": np.int64, "right": np.int64, "leaf": bool, "value": float}  # fmt: skip
        if "forest" in body:
            packed = read_packed(body["forest"])
            size = packed.pop("tree_nodes").astype(np.int64)
            if width == 0 or len(size) % width:
                raise ValueError(
                    f"{len(size)} trees do not fill iterations of {width} (the baseline)"
                )
            if (size <= 0).any():
                raise ValueError("an empty tree")
            for key in ("missing_left", "leaf"):
                if (packed[key] > 1).any():
                    raise ValueError(f"a node flag {key!r} that is not 0 or 1")
            return {k: packed[k].astype(dtypes[k]) for k in NODE_FIELDS}, size
        lists: dict[str, list[Any]] = {k: [] for k in NODE_FIELDS}
        sizes = []
        for number, iteration in enumerate(body["trees"]):
            if len(iteration) != width:
                raise ValueError(
                    f"iteration {number} has {len(iteration)} trees; the baseline has {width}"
                )
            for tree in iteration:
                n = len(tree["feature"])
                if n == 0:
                    raise ValueError(f"iteration {number} has an empty tree")
                if not all(isinstance(tree[k], list) for k in NODE_FIELDS):
                    raise ValueError("a tree whose node lists are not flat lists of numbers")
                if any(len(tree[k]) != n for k in NODE_FIELDS):
                    raise ValueError("a tree whose node lists differ in length")
                for key in NODE_FIELDS:
                    lists[key].extend(tree[key])
                sizes.append(n)
        arrays = {}
        for key in NODE_FIELDS:  # numbers only; flags 0 or 1, indices whole (as packed)
            raw = np.asarray(lists[key])
            if raw.size and raw.dtype.kind not in "biuf":
                raise ValueError(f"tree field {key!r} holds values that are not numbers")
            if dtypes[key] is not float and raw.size and (raw != np.round(raw)).any():
                raise ValueError(f"tree field {key!r} holds values that are not whole")
            if dtypes[key] is bool and raw.size and not np.isin(raw, (0, 1)).all():
                raise ValueError(f"a node flag {key!r} that is not 0 or 1")
            arrays[key] = raw.astype(dtypes[key])
        return arrays, np.asarray(sizes, dtype=np.int64)

    def _trees_raw(self, X: np.ndarray, k: int) -> np.ndarray:
        """The summed leaf values of every tree, per class: all trees walked at once."""
        feature, threshold, missing_left, _, _, _, value, roots, cls, deepest, widest = (
            self._forest()
        )
        raw = np.zeros((len(X), k))
        if not len(roots):
            return raw
        if widest > X.shape[1]:
            raise ValueError("a tree reads a feature the input does not have")
        node = np.broadcast_to(roots, (len(X), len(roots))).copy()
        rows = np.arange(len(X))[:, None]
        children, width = self._walk()
        nan = np.isnan(X).any()
        for _ in range(deepest):  # every path ends at a leaf within the depth (checked)
            x = X[rows, feature[node]]
            go_left = x <= threshold[node]
            if nan:
                go_left |= np.isnan(x) & missing_left[node]
            node = children[2 * node + ~go_left]
        leaves = value[node]
        if width:  # trees laid out iteration by iteration, one per class
            raw[:, :width] = leaves.reshape(len(X), -1, width).sum(axis=1)
        else:
            for j in range(k):
                raw[:, j] = leaves[:, cls == j].sum(axis=1)
        return raw

    def _walk(self) -> tuple[np.ndarray, int]:
        """(each node's two children side by side, a leaf's being itself: every path walks
        the same number of steps and rests at its leaf; the number of trees per iteration
        when tree ``i`` is of class ``i % width``, else 0), built once."""
        cached = self.__dict__.get("_children")
        if cached is not None:
            return cached
        _, _, _, left, right, leaf, _, _, cls, _, _ = self._forest()
        here = np.arange(len(leaf))
        children = np.stack([np.where(leaf, here, left), np.where(leaf, here, right)], axis=1)
        width = int(cls.max()) + 1 if len(cls) else 0
        tiled = width and len(cls) % width == 0
        if tiled and not np.array_equal(cls, np.tile(np.arange(width), len(cls) // width)):
            tiled = False
        self.__dict__["_children"] = (children.ravel(), width if tiled else 0)
        return self.__dict__["_children"]

    def proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities, shape (n, len(classes))."""
        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"the input must be a 2-D array of rows, not shape {X.shape}")
        body = self.body
        k = len(body["classes"])
        if body["kind"] == "trees":
            baseline = np.asarray(body["baseline"], dtype=float)
            if baseline.ndim != 1 or len(baseline) not in ((1,) if k == 2 else (k,)):
                raise ValueError(
                    f"a baseline of {baseline.size} values for {k} classes (the model file "
                    "is corrupt)"
                )
            if not np.isfinite(baseline).all():
                raise ValueError("a non-finite baseline (the model file is corrupt)")
            raw = np.tile(baseline, (len(X), 1)) + self._trees_raw(X, len(baseline))
        else:
            if body.get("mean") is not None:
                X = (X - np.asarray(body["mean"])) / np.asarray(body["std"])
            raw = X @ np.asarray(body["coef"], dtype=float).T + np.asarray(body["intercept"])
        if raw.shape[1] == 1 and k == 2:
            p = 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.stack([1.0 - p, p], axis=1)
        return _softmax(raw)

    def tree_sizes(self) -> list[int]:
        """The number of nodes of each tree (iteration by iteration; [] for a linear head)."""
        if self.body["kind"] != "trees":
            return []
        _, _, _, left, _, _, _, roots, _, _, _ = self._forest()
        return np.diff(np.append(roots, len(left))).tolist()

    def max_feature(self) -> int:
        """The largest feature index the head reads (-1 for none)."""
        if self.body["kind"] == "trees":
            self._forest()
            return int(self.__dict__["_max_feature"])
        return (
            np.asarray(self.body["coef"], dtype=float).reshape(len(self.body["coef"]), -1).shape[1]
            - 1
        )

    def predict(self, X: np.ndarray) -> list[str]:
        classes = self.classes
        return [classes[i] for i in self.proba(X).argmax(axis=1)]


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
