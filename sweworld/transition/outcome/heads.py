"""One exported classifier of the outcome model, evaluated with numpy (:class:`Head`).

A head is what :func:`export_estimator` makes of a fitted scikit-learn classifier: gradient-
boosted trees (every node's feature, threshold, children and leaf value, as JSON lists or
the packed arrays of :mod:`~sweworld.transition.outcome.packed`) or a logistic regression's
coefficients. Every tree is checked and laid out flat once, then all trees are walked at
once for a batch of rows. :mod:`~sweworld.transition.outcome.model` holds the heads of a
model file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sweworld.transition.outcome.packed import NODE_FIELDS, read_packed

__all__ = ["MAX_NODES", "MAX_TREES", "MAX_TREE_DEPTH", "Head", "export_estimator"]


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
        width = max(len(self.body["baseline"]), 1)
        classes = np.arange(len(size)) % width
        roots = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64) if len(size) else size
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
        deepest = _forest_depth(a["left"], a["right"], inner, roots) if len(size) else 0
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
