"""The outcome model's JSON export: same probabilities as scikit-learn, no pickle, clear errors."""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import time

import numpy as np
import pytest

from sweworld.transition.outcome.features import STEP_FEATURES, TEST_FEATURES
from sweworld.transition.outcome.model import (
    FORMAT_VERSION,
    Head,
    ModelFileError,
    OutcomeModel,
    exit_class,
    export_estimator,
    load_shared,
)
from sweworld.transition.outcome.packed import PACKED_DTYPES, pack_trees, unpack_trees


def _data(n_classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, len(STEP_FEATURES)))
    y = (X[:, 0] > 0).astype(int) + (X[:, 3] > 0.5) * (n_classes > 2)
    return X, np.asarray([["0", "1", "2"][v] for v in y])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_trees_export_matches_sklearn(n_classes: int) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y = _data(n_classes)
    est = HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(X, y)
    head = Head(export_estimator(est))
    assert head.classes == [str(c) for c in est.classes_]
    np.testing.assert_allclose(head.proba(X), est.predict_proba(X), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_linear_export_matches_sklearn(n_classes: int) -> None:
    from sklearn.linear_model import LogisticRegression

    X, y = _data(n_classes, seed=1)
    mean, std = X.mean(axis=0), X.std(axis=0)
    est = LogisticRegression(max_iter=500).fit((X - mean) / std, y)
    head = Head(export_estimator(est, (mean, std)))
    np.testing.assert_allclose(head.proba(X), est.predict_proba((X - mean) / std), atol=1e-9)


def _model() -> OutcomeModel:
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y = _data(3)
    est = HistGradientBoostingClassifier(max_iter=5, random_state=0).fit(X, y)
    return OutcomeModel({"exit": Head(export_estimator(est))}, {"trained_kinds": ["pytest"]})


def test_save_load_round_trip(tmp_path) -> None:
    model = _model()
    path = model.save(tmp_path / "m")
    assert path.name == "model.json"
    loaded = OutcomeModel.load(tmp_path / "m")
    X, _ = _data(3, seed=5)
    assert loaded.predict_exit(X) == model.predict_exit(X)
    assert loaded.kinds == ["pytest"]
    assert loaded.predict_tests([[0.0] * len(TEST_FEATURES)]) == ["PASSED"]  # no test head


def test_corrupt_file_names_the_file(tmp_path) -> None:
    bad = tmp_path / "model.json"
    bad.write_text('{"format": "sweworld-outcome-model", "vers')
    with pytest.raises(ModelFileError, match=re.escape(str(bad))):
        OutcomeModel.load(bad)


def test_pickle_is_refused(tmp_path) -> None:
    """A pickle (which could run code when unpickled) is never loaded."""
    bad = tmp_path / "model.json"
    bad.write_bytes(pickle.dumps({"format": "x"}))
    with pytest.raises(ModelFileError, match=r"model\.json"):
        OutcomeModel.load(bad)


def test_other_version_and_feature_set(tmp_path) -> None:
    data = _model().to_dict(packed=False)
    path = tmp_path / "model.json"
    for version in (FORMAT_VERSION + 1, 0, True, "1", None):
        path.write_text(json.dumps({**data, "version": version}))
        with pytest.raises(ModelFileError, match="version"):
            OutcomeModel.load(path)
    feats = {"step": [*STEP_FEATURES, "extra"], "test": list(TEST_FEATURES)}
    path.write_text(json.dumps({**data, "features": feats}))
    with pytest.raises(ModelFileError, match="another feature set"):
        OutcomeModel.load(path)
    broken = json.loads(json.dumps(data))
    broken["heads"]["exit"]["trees"][0][0]["left"] = [10**6]
    path.write_text(json.dumps(broken))
    with pytest.raises(ModelFileError, match="corrupt"):
        OutcomeModel.load(path)
    path.write_text(json.dumps({**data, "format": "something-else"}))
    with pytest.raises(ModelFileError, match="not an outcome model"):
        OutcomeModel.load(path)


def test_both_forms_load_to_the_same_model(tmp_path) -> None:
    """save writes version 2 (packed forests); a version-1 file (lists of trees) still
    loads; both give the same probabilities and convert into each other exactly."""
    model = _model()
    packed = json.loads(model.save(tmp_path / "m2").read_text())
    assert packed["version"] == FORMAT_VERSION == 2
    assert "forest" in packed["heads"]["exit"] and "trees" not in packed["heads"]["exit"]
    lists = model.to_dict(packed=False)
    assert lists["version"] == 1 and "trees" in lists["heads"]["exit"]
    (tmp_path / "m1.json").write_text(json.dumps(lists))
    X, _ = _data(3, seed=7)
    one, two = OutcomeModel.load(tmp_path / "m1.json"), OutcomeModel.load(tmp_path / "m2")
    np.testing.assert_array_equal(one.heads["exit"].proba(X), two.heads["exit"].proba(X))
    np.testing.assert_array_equal(model.heads["exit"].proba(X), two.heads["exit"].proba(X))
    assert unpack_trees(pack_trees(lists["heads"]["exit"])) == lists["heads"]["exit"]
    assert two.to_dict(packed=False)["heads"] == lists["heads"]
    assert one.heads["exit"].tree_sizes() == two.heads["exit"].tree_sizes()


def _packed_file(tmp_path, edit) -> str:
    """A saved model whose exit head's packed arrays went through ``edit(arrays)``."""
    data = _model().to_dict()
    forest = data["heads"]["exit"]["forest"]
    arrays = {k: np.frombuffer(base64.b64decode(v), dtype=PACKED_DTYPES[k]).copy()
              for k, v in forest.items()}  # fmt: skip
    edit(arrays)
    forest.clear()
    for key, value in arrays.items():
        forest[key] = (
            value if isinstance(value, str)
            else base64.b64encode(np.asarray(value, dtype=PACKED_DTYPES[key]).tobytes()).decode()
        )  # fmt: skip
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    return str(path)


def _set(key, index, value):
    def edit(arrays):
        arrays[key][index] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set("left", 0, 10**6), "outside"),
        (_set("right", -1, -3), "outside"),  # a leaf's child too: no index out of range
        (_set("feature", 0, 10**6), "reads a feature"),
        (_set("feature", -1, -1), "negative index"),
        (_set("leaf", 0, 7), "not 0 or 1"),
        (_set("value", 1, float("nan")), "non-finite"),
        (_set("tree_nodes", 0, 0), "empty tree"),
        (_set("tree_nodes", 0, 10**6), "not flat lists"),  # sizes and nodes disagree
        (lambda a: a.update(threshold=a["threshold"][:-1]), "not flat lists"),
        (lambda a: a.update(tree_nodes=a["tree_nodes"][:-1]), "do not fill iterations"),
        (lambda a: a.update(value="not base64!"), "not base64"),
        (lambda a: a.update(value="AAAA"), "whole number"),  # 3 bytes of float64
        (lambda a: a.pop("leaf"), "must hold exactly"),
    ],
)
def test_a_corrupt_packed_forest_is_refused_at_load(tmp_path, edit, message) -> None:
    path = _packed_file(tmp_path, edit)
    with pytest.raises(ModelFileError, match=rf"{re.escape(path)}.*{message}"):
        OutcomeModel.load(path)


def test_a_cycle_in_a_packed_forest_is_refused(tmp_path) -> None:
    def edit(arrays):
        inner = np.flatnonzero(arrays["leaf"][: arrays["tree_nodes"][0]] == 0)
        assert inner.size
        arrays["left"][inner[-1]] = 0  # a child of an inner node is its tree's root

    with pytest.raises(ModelFileError, match="cycle"):
        OutcomeModel.load(_packed_file(tmp_path, edit))


def test_a_file_mixing_the_forms_is_refused(tmp_path) -> None:
    """A version-2 file holds packed forests only; a version-1 file lists only."""
    packed, lists = _model().to_dict(), _model().to_dict(packed=False)
    path = tmp_path / "model.json"
    path.write_text(json.dumps({**packed, "heads": lists["heads"]}))
    with pytest.raises(ModelFileError, match="version 2 file's trees are a packed forest"):
        OutcomeModel.load(path)
    path.write_text(json.dumps({**lists, "heads": packed["heads"]}))
    with pytest.raises(ModelFileError, match="version 1 file's trees are lists of trees"):
        OutcomeModel.load(path)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelFileError, match="nope"):
        OutcomeModel.load(tmp_path / "nope.json")


def test_exit_class() -> None:
    assert [exit_class(c) for c in (0, 1, 2, 4, 5, 3, 137)] == [
        "0", "1", "2", "4", "5", "other", "other"
    ]  # fmt: skip


def test_a_head_reading_a_feature_it_does_not_have_is_refused(tmp_path) -> None:
    """A crafted tree whose split reads column 10**6 is refused at load, not at a step."""
    data = _model().to_dict(packed=False)
    data["heads"]["exit"]["trees"][0][0]["feature"][0] = 10**6
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match="reads a feature"):
        OutcomeModel.load(path)


def test_a_tree_with_a_cycle_is_refused_at_load(tmp_path) -> None:
    """Every tree is checked when the file loads (the error names it), not at a step."""
    data = _model().to_dict(packed=False)
    tree = data["heads"]["exit"]["trees"][0][0]
    inner = [i for i, is_leaf in enumerate(tree["leaf"]) if not is_leaf]
    assert inner
    tree["left"][inner[-1]] = 0  # an inner node's child is the root: a cycle
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match=rf"{re.escape(str(path))}.*cycle"):
        OutcomeModel.load(path)


def _linear(classes: list[str], coef: list[list[float]], intercept: list[float]) -> Head:
    return Head({"kind": "linear", "classes": classes, "coef": coef, "intercept": intercept})


def _decider(p_exit_fail_logit: float, test_logits: list[float]) -> OutcomeModel:
    """A model whose exit head and test head read feature 0 (the logit they are given)."""
    width_s, width_t = len(STEP_FEATURES), len(TEST_FEATURES)
    exit_head = _linear(["0", "1"], [[1.0] + [0.0] * (width_s - 1)], [0.0])
    test_head = _linear(["FAILED", "PASSED"], [[-1.0] + [0.0] * (width_t - 1)], [0.0])
    model = OutcomeModel({"exit": exit_head, "test": test_head})
    model._rows = (  # type: ignore[attr-defined]
        [p_exit_fail_logit] + [0.0] * (width_s - 1),
        [[v] + [0.0] * (width_t - 1) for v in test_logits],
    )
    return model


@pytest.mark.parametrize(
    ("exit_logit", "test_logits", "failing", "n_failed"),
    [
        (5.0, [3.0, -3.0, -4.0], True, 1),  # both say a failure: the test head names it
        (5.0, [-3.0, -2.0, -4.0], True, 1),  # exit says fail, no test does: the likeliest fails
        (-5.0, [3.0, -3.0, -3.0], False, 0),  # exit says pass, one test weakly fails: all pass
        (-5.0, [-3.0, -3.0], False, 0),
    ],
)
def test_decide_tests_is_one_consistent_answer(exit_logit, test_logits, failing, n_failed) -> None:
    """The run's exit code and its tests' statuses never contradict each other."""
    model = _decider(exit_logit, test_logits)
    step, tests = model._rows  # type: ignore[attr-defined]
    fails, statuses = model.decide_tests(step, tests)
    assert fails is failing
    assert sum(s == "FAILED" for s in statuses) == n_failed
    assert any(s == "FAILED" for s in statuses) is fails
    if n_failed and test_logits[0] > 0:
        assert statuses[0] == "FAILED"
    if exit_logit > 0 and max(test_logits) < 0:
        assert statuses[test_logits.index(max(test_logits))] == "FAILED"


def test_heads_per_mode_are_used_for_their_mode() -> None:
    width = len(STEP_FEATURES)
    always = {c: _linear(["0", "1"], [[0.0] * width], [b]) for c, b in (("0", -9.0), ("1", 9.0))}
    model = OutcomeModel({"exit@oracle": always["1"], "exit@blind": always["0"]})
    row = [[0.0] * width]
    assert model.predict_exit(row, "oracle") == ["1"]
    assert model.predict_exit(row, "blind") == ["0"]
    assert model.predict_exception(row, "blind") == ["none"]


def test_hostile_trees_are_refused_or_bounded() -> None:
    """A tree whose child points outside it, or whose children loop back, is refused with a
    clear error (no hang, no answer read off an inner node)."""

    def head(left: list[int], right: list[int]) -> Head:
        tree = {
            "feature": [0, 0, 0],
            "threshold": [0.5, 0.0, 0.0],
            "missing_left": [1, 0, 0],
            "left": left,
            "right": right,
            "leaf": [0, 1, 1],
            "value": [0.0, -1.0, 1.0],
        }
        return Head({"kind": "trees", "baseline": [0.0], "trees": [[tree]], "classes": ["0", "1"]})

    X = np.asarray([[0.0], [1.0], [np.nan]])
    p = head([1, 0, 0], [2, 0, 0]).proba(X)[:, 1]
    np.testing.assert_allclose(p, 1 / (1 + np.exp([1.0, -1.0, 1.0])))
    with pytest.raises(ValueError, match="outside"):
        head([7, 0, 0], [2, 0, 0]).proba(X)
    looping = {
        "feature": [0],
        "threshold": [0.5],
        "missing_left": [1],
        "left": [0],
        "right": [0],
        "leaf": [0],
        "value": [0.25],
    }
    body = {"kind": "trees", "baseline": [0.0], "trees": [[looping]], "classes": ["0", "1"]}
    with pytest.raises(ValueError, match="cycle"):  # no answer from an inner node's value
        Head(body).proba(X)


def _tree(**over: list) -> dict:
    tree = {
        "feature": [0, 0, 0],
        "threshold": [0.5, 0.0, 0.0],
        "missing_left": [1, 0, 0],
        "left": [1, 0, 0],
        "right": [2, 0, 0],
        "leaf": [0, 1, 1],
        "value": [0.0, -1.0, 1.0],
    }
    tree.update(over)
    return tree


def _trees(trees: list, baseline: list | None = None, classes: list | None = None) -> Head:
    return Head({"kind": "trees", "baseline": baseline or [0.0], "trees": trees,
                 "classes": classes or ["0", "1"]})  # fmt: skip


@pytest.mark.parametrize(
    ("head", "match"),
    [
        (_trees([[_tree(threshold=[float("nan"), 0.0, 0.0])]]), "NaN threshold"),
        (_trees([[_tree(value=[0.0, float("inf"), 1.0])]]), "non-finite leaf"),
        (_trees([[_tree(left=[1, 0], right=[2, 0, 0])]]), "differ in length"),
        (
            _trees(
                [
                    [
                        _tree(
                            feature=[],
                            threshold=[],
                            missing_left=[],
                            left=[],
                            right=[],
                            leaf=[],
                            value=[],
                        )
                    ]
                ]
            ),
            "empty tree",
        ),
        (_trees([[_tree(left=[1, 2, 0], leaf=[0, 0, 1], right=[1, 0, 0])]]), "cycle or share"),
        (_trees([[_tree(threshold=[[0.5], [0.0], [0.0]])]]), "not flat"),
        (_trees([[_tree(leaf={"a": 0, "b": 1, "c": 1})]]), "not flat"),
        (_trees([[_tree(), _tree()]]), "has 2 trees; the baseline has 1"),
        (_trees([[]]), "has 0 trees"),
        (_trees([[_tree()] * 3], baseline=[0.0] * 3, classes=["a", "b"]), "baseline of 3"),
        (_trees([[_tree()]], baseline=[0.0], classes=["a", "b", "c"]), "baseline of 1"),
        (_trees([[_tree(feature=[5, 0, 0])]]), "feature the input does not have"),
        (_trees([[_tree(feature=[-1, 0, 0])]]), "feature the input does not have"),
    ],
)
def test_hostile_tree_files_give_clear_errors(head: Head, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        head.proba(np.zeros((2, 1)))


def test_hostile_trees_that_are_bounded_and_correct() -> None:
    X = np.asarray([[0.0], [1.0], [np.nan]])
    expected = 1 / (1 + np.exp([1.0, -1.0, 1.0]))
    # a leaf's feature is never read in a walk (but counts as read: a file whose leaves name
    # a column the input lacks is refused at load); an infinite threshold is a real split
    odd_leaves = _trees([[_tree(feature=[0, 99, 0], left=[1, 2, 0], right=[2, 1, 0])]])
    np.testing.assert_allclose(odd_leaves.proba(X)[:, 1], expected)
    assert odd_leaves.max_feature() == 99
    # a leaf's children are never followed, yet no index in a tree may point outside it
    for left, right in (([1, -3, 0], [2, 0, 0]), ([1, 0, 77], [2, 0, 0]), ([1, 0, 0], [2, 9, 0])):
        with pytest.raises(ValueError, match="outside"):
            _trees([[_tree(left=left, right=right)]]).proba(X)
    with pytest.raises(ValueError, match="negative index"):
        _trees([[_tree(feature=[0, 0, -5])]]).proba(X)
    inf = _tree(threshold=[float("inf"), 0.0, 0.0])
    np.testing.assert_allclose(_trees([[inf]]).proba(X[:2])[:, 1], 1 / (1 + np.exp([1.0, 1.0])))
    assert _trees([]).proba(X).shape == (3, 2)  # no trees: the baseline
    with pytest.raises(ValueError, match="2-D"):
        _trees([[_tree()]]).proba(np.zeros(3))
    # a chain of 5000 splits is refused at once, not walked 5000 steps per row
    n = 5001
    chain = _tree(feature=[0] * n, threshold=[0.5] * n, missing_left=[0] * n,
                  left=[i + 1 if i < n - 1 else 0 for i in range(n)], right=[0] * n,
                  leaf=[0] * (n - 1) + [1], value=[0.0] * n)  # fmt: skip
    chain["right"] = [n - 1] * n  # both children of every split lead on (shared: refused)
    with pytest.raises(ValueError, match=r"cycle or share|deeper"):
        _trees([[chain]]).proba(X)
    depth = 70  # a proper deep tree: every split has its own leaf
    size = 2 * depth + 1
    left = [0] * size
    right = [0] * size
    leaf = [1] * size
    for i in range(depth):  # node i splits into leaf depth+1+i and node i+1
        left[i], right[i], leaf[i] = depth + 1 + i, i + 1, 0
    deep = _tree(feature=[0] * size, threshold=[-1.0] * size, missing_left=[0] * size,
                 left=left, right=right, leaf=leaf, value=[0.0] * size)  # fmt: skip
    with pytest.raises(ValueError, match="deeper than 64"):
        _trees([[deep]]).proba(X)


def test_load_shared_reads_a_file_once_and_again_when_rewritten(tmp_path) -> None:
    """The world's executor and the reward's test predictor share one copy of a model."""
    path = _model().save(tmp_path / "m")
    first = load_shared(path)
    assert load_shared(tmp_path / "m") is first  # the folder names the same file
    data = json.loads(path.read_text())
    data["meta"] = {"note": "retrained"}
    path.write_text(json.dumps(data))
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    again = load_shared(path)
    assert again is not first and again.meta == {"note": "retrained"}
    with pytest.raises(ModelFileError, match="nope"):
        load_shared(tmp_path / "nope.json")


def test_the_reward_and_the_world_read_a_rewritten_model_alike(tmp_path, monkeypatch) -> None:
    """The reward's test predictor asks load_shared too: after the file is rewritten both
    get the new model; a bad file's error is remembered (not re-read) until it changes."""
    from sweworld.reward.test_outcomes import TestPredictor
    from sweworld.transition.outcome import model as model_module

    path = _model().save(tmp_path / "m")
    assert TestPredictor(path).model is load_shared(path)
    data = json.loads(path.read_text())
    data["meta"] = {"note": "retrained"}
    path.write_text(json.dumps(data))
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert TestPredictor(path).model is load_shared(path)
    assert TestPredictor(path).model.meta == {"note": "retrained"}
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "sweworld-outcome-model", "vers')
    reads = []
    real_load = OutcomeModel.load
    monkeypatch.setattr(model_module.OutcomeModel, "load",
                        classmethod(lambda cls, p: reads.append(p) or real_load(p)))  # fmt: skip
    for _ in range(3):
        with pytest.raises(ModelFileError, match="corrupt JSON"):
            _ = TestPredictor(bad).model
    assert len(reads) == 1  # remembered
    bad.write_text(path.read_text())
    os.utime(bad, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    assert TestPredictor(bad).model.meta == {"note": "retrained"} and len(reads) == 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(heads=[1]), "heads and meta are objects"),
        (lambda d: d.update(meta="x"), "heads and meta are objects"),
        (lambda d: d.update(features=[1]), "another feature set"),
        (lambda d: d["heads"]["exit"].update(classes=[0, 1, 2]), "distinct strings"),
        (lambda d: d["heads"]["exit"].update(classes=["0", "0", "1"]), "distinct strings"),
        (lambda d: d["heads"]["exit"].update(baseline="abc"), "finite numbers"),
        (lambda d: d["heads"]["exit"].update(baseline=[1e400, 0, 0]), "finite numbers"),
        (lambda d: d["heads"]["exit"].update(baseline=[0.0]), "baseline of shape"),
        (lambda d: d["heads"]["exit"]["trees"][0][0].update(
            leaf=["0"] * len(d["heads"]["exit"]["trees"][0][0]["leaf"])), "not numbers"),
        (lambda d: d["heads"]["exit"]["trees"][0][0].update(
            missing_left=[0.5] * len(d["heads"]["exit"]["trees"][0][0]["leaf"])), "not whole"),
        (lambda d: d["heads"]["exit"]["trees"][0][0].update(
            leaf=[2] * len(d["heads"]["exit"]["trees"][0][0]["leaf"])), "not 0 or 1"),
        (lambda d: d["heads"].update(exit={"kind": "linear", "classes": ["0", "1"],
                                           "coef": [], "intercept": [0.0]}), "coef of shape"),
        (lambda d: d["heads"].update(exit={"kind": "linear", "classes": ["0", "1"],
                                           "coef": [[0.0] * len(STEP_FEATURES)],
                                           "intercept": "x"}), "finite numbers"),
        (lambda d: d["heads"]["exit"].update(
            trees=d["heads"]["exit"]["trees"] * 4000), "more than a head may hold"),
    ],
)  # fmt: skip
def test_a_malformed_head_is_refused_at_load_naming_the_file(tmp_path, edit, message) -> None:
    """Whatever shape a field takes, loading fails with ModelFileError naming the file (not
    another exception, not a model that fails later at a step)."""
    data = _model().to_dict(packed=False)
    edit(data)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match=rf"{re.escape(str(path))}.*{message}"):
        OutcomeModel.load(path)


def test_json_nested_too_deep_is_a_corrupt_file(tmp_path) -> None:
    path = tmp_path / "model.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ModelFileError, match="corrupt JSON"):
        OutcomeModel.load(path)
