"""The packed form of an outcome model's trees (model file version 2).

A trees head holds its whole forest as a few little-endian arrays, each base64 text inside
the JSON file (:data:`PACKED_DTYPES`): the number of nodes of each tree (iteration by
iteration, one tree per class), then each node field of every tree, tree after tree. Reading
it is a base64 decode and a ``numpy.frombuffer`` per field, no float parsed one by one, and
it stays plain data: nothing in it can run. :class:`~sweworld.transition.outcome.model.Head`
checks the arrays (lengths, children, flags) exactly as it checks the list form.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

__all__ = ["NODE_FIELDS", "PACKED_DTYPES", "pack_trees", "read_packed", "unpack_trees"]

#: The arrays of a version-2 trees head (``body["forest"]``), each base64 of little-endian
#: values: the number of nodes of each tree (iteration by iteration, one tree per class),
#: then each node field of every tree, tree after tree.
PACKED_DTYPES: dict[str, str] = {
    "tree_nodes": "<i4",
    "feature": "<i4",
    "threshold": "<f8",
    "missing_left": "u1",
    "left": "<i4",
    "right": "<i4",
    "leaf": "u1",
    "value": "<f8",
}
NODE_FIELDS = ("feature", "threshold", "missing_left", "left", "right", "leaf", "value")


def pack_trees(body: dict[str, Any]) -> dict[str, Any]:
    """A trees head in the packed form (version 2); other heads, and packed ones, as given."""
    if body.get("kind") != "trees" or "forest" in body:
        return body
    trees = [tree for iteration in body["trees"] for tree in iteration]
    arrays = {"tree_nodes": [len(tree["feature"]) for tree in trees]}
    for key in NODE_FIELDS:
        arrays[key] = [v for tree in trees for v in tree[key]]
    forest = {
        key: base64.b64encode(np.asarray(arrays[key], dtype=dtype).tobytes()).decode("ascii")
        for key, dtype in PACKED_DTYPES.items()
    }
    return {**{k: v for k, v in body.items() if k != "trees"}, "forest": forest}


def read_packed(forest: Any) -> dict[str, np.ndarray]:
    """The arrays of a packed forest; ValueError for anything that is not one."""
    if not isinstance(forest, dict) or set(forest) != set(PACKED_DTYPES):
        raise ValueError(f"a packed forest must hold exactly {sorted(PACKED_DTYPES)}")
    out = {}
    for key, dtype in PACKED_DTYPES.items():
        text = forest[key]
        if not isinstance(text, str):
            raise ValueError(f"packed field {key!r} is not a base64 string")
        try:
            raw = base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"packed field {key!r} is not base64: {exc}") from exc
        size = np.dtype(dtype).itemsize
        if len(raw) % size:
            raise ValueError(f"packed field {key!r} is not a whole number of {dtype} values")
        out[key] = np.frombuffer(raw, dtype=dtype)
    return out


def unpack_trees(body: dict[str, Any]) -> dict[str, Any]:
    """A trees head in the list form (version 1); other heads, and list ones, as given."""
    if body.get("kind") != "trees" or "forest" not in body:
        return body
    a = read_packed(body["forest"])
    width = len(body["baseline"])
    sizes = a["tree_nodes"].astype(np.int64)
    ends = np.cumsum(sizes)
    if (
        (sizes <= 0).any()
        or len(sizes) % max(width, 1)
        or (ends[-1] if len(ends) else 0) != len(a["leaf"])
        or any(len(a[key]) != len(a["leaf"]) for key in NODE_FIELDS)
    ):
        raise ValueError("the packed forest's trees do not match its nodes or the baseline")
    trees = []
    for number, end in enumerate(ends):
        start = int(end - sizes[number])
        trees.append({key: a[key][start:end].tolist() for key in NODE_FIELDS})
    iterations = [trees[i : i + width] for i in range(0, len(trees), width)] if width else []
    return {**{k: v for k, v in body.items() if k != "forest"}, "trees": iterations}
