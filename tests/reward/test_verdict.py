"""The learned verdict (issue 20): the model file, the evidence, the default decision."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from sweworld.reward.model import RewardModel, SWRConfig
from sweworld.reward.verdict import (
    DEFAULT_VERDICT,
    FORMAT,
    VERDICT_FEATURES,
    VerdictFileError,
    VerdictModel,
)
from sweworld.tasks.patches import make_unified_diff
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.outcome.model import Head

PATH = "stockroom/textutil.py"


def tiny_model(modes=("oracle", "blind"), calibration=None) -> VerdictModel:
    """A logistic head on synthetic data: P(resolved) grows with gold_files_covered."""
    from sklearn.linear_model import LogisticRegression

    from sweworld.transition.outcome.model import export_estimator

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, len(VERDICT_FEATURES)))
    y = (X[:, VERDICT_FEATURES.index("gold_files_covered")] > 0).astype(int)
    est = LogisticRegression().fit(X, y)
    body = export_estimator(est, (np.zeros(X.shape[1]), np.ones(X.shape[1])))
    entry = {
        "head": Head(body),
        "fill": [0.0] * len(VERDICT_FEATURES),
        "calibration": calibration or {"kind": "platt", "a": 1.0, "b": 0.0},
    }
    return VerdictModel({m: dict(entry) for m in modes}, {"test": True})


def toy_patch(extra: str) -> str:
    before = (toy_data_dir() / "repo" / PATH).read_text()
    return make_unified_diff(PATH, before, before + extra)


# ------------------------------------------------------------------ the file


def test_a_saved_model_reads_back_and_predicts_the_same(tmp_path):
    model = tiny_model(calibration={"kind": "isotonic", "x": [0.0, 0.5, 1.0], "y": [0, 0.4, 1]})
    path = model.save(tmp_path / "m")
    assert path.name == "model.json" and json.loads(path.read_text())["format"] == FORMAT
    again = VerdictModel.load(tmp_path / "m")
    rows = [dict.fromkeys(VERDICT_FEATURES, 0.3), dict.fromkeys(VERDICT_FEATURES, math.nan)]
    assert np.allclose(model.predict(rows, "oracle"), again.predict(rows, "oracle"))
    assert all(0.0 <= p <= 1.0 for p in again.predict(rows, "blind"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: "{not json", "corrupt JSON"),
        (lambda d: {**d, "version": 99}, "version 99"),
        (lambda d: {**d, "format": "something-else"}, "not a verdict model"),
        (lambda d: {**d, "features": d["features"][:-1]}, "another feature set"),
        (lambda d: {**d, "heads": {"oracle": {"head": {"kind": "rules"}}}}, "corrupt"),
        (lambda d: {**d, "heads": {}}, "no head"),
    ],
)
def test_a_bad_model_file_is_a_clear_error_naming_the_file(tmp_path, mutate, message):
    data = tiny_model().to_dict()
    bad = mutate(data)
    path = tmp_path / "model.json"
    path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    with pytest.raises(VerdictFileError, match=message) as err:
        VerdictModel.load(path)
    assert str(path) in str(err.value)
    with pytest.raises(VerdictFileError, match=str(path)):
        RewardModel(SWRConfig(verdict=str(path)))


def test_a_model_without_the_configured_mode_is_refused(tmp_path):
    path = tiny_model(modes=("oracle",)).save(tmp_path / "oracle-only.json")
    with pytest.raises(VerdictFileError, match="no head for mode 'blind'"):
        RewardModel(SWRConfig(mode="blind", verdict=str(path)))


def test_the_shipped_verdict_loads_without_unpickling():
    model = VerdictModel.load(DEFAULT_VERDICT)
    assert set(model.modes) == {"oracle", "blind"}
    assert DEFAULT_VERDICT.stat().st_size < 2_000_000
    assert json.loads(DEFAULT_VERDICT.read_text())["format"] == FORMAT  # plain JSON


# ------------------------------------------------------------------ the default decision


@pytest.mark.parametrize("mode", ["oracle", "blind"])
def test_the_default_reward_is_the_verdict_and_loads_no_lm(toy_task, mode, monkeypatch):
    import sweworld.reward.stages.simulated_tests as st

    def no_lm(*a, **k):  # pragma: no cover - failing is the point
        raise AssertionError("the default reward must not load a language model")

    monkeypatch.setattr(st, "share_lm", no_lm)
    scorer = RewardModel(SWRConfig(mode=mode))
    assert "tests" not in scorer.stages()
    result = scorer.score(toy_task, toy_task.patch)
    assert result.status in ("resolved", "unresolved")
    assert result.info["calibrated"] is True and result.info["verdict"].endswith("model.json")
    assert 0.0 <= result.score <= 1.0
    assert set(result.evidence) == set(VERDICT_FEATURES)


def test_the_gold_patch_outscores_a_change_that_fixes_nothing(toy_tasks):
    scorer = RewardModel(SWRConfig(mode="oracle"))
    for task in toy_tasks:
        gold = scorer.score(task, task.patch)
        harmless = scorer.score(task, toy_patch("\n\nX = 1\n"))
        assert gold.score > harmless.score, task.instance_id
        assert gold.resolved, task.instance_id


@pytest.mark.parametrize(
    "code",
    [
        "\n\nX = 1\n",
        "\n\ndef _unused(value=None):\n    return value\n",
        "\n\nclass _Unused:\n    pass\n",
        "\n\ndef _h(a, b):\n    c = a + b\n    if c > 3:\n        return c\n    return a\n",
    ],
)
def test_code_nothing_uses_in_the_right_file_is_not_resolved(toy_tasks, code):
    """The reward hack of an edit in the right place that fixes nothing (a constant, a
    function, a class nobody refers to) is not resolved in oracle mode. (Blind mode cannot
    tell where the fix belongs: such an edit scores about 0.5 there.)"""
    scorer = RewardModel(SWRConfig(mode="oracle"))
    for task in toy_tasks:
        harmless = scorer.score(task, toy_patch(code))
        assert not harmless.resolved and harmless.score < 0.3, (task.instance_id, harmless.score)


@pytest.mark.parametrize("mode", ["oracle", "blind"])
def test_hard_exact_failures_stay_decisive(toy_task, mode):
    scorer = RewardModel(SWRConfig(mode=mode))
    syntax = scorer.score(toy_task, toy_patch("\ndef broken(:\n"))
    empty = scorer.score(toy_task, "")
    for result in (syntax, empty):
        assert result.score == 0.0 and not result.resolved and result.reward == 0.0
        assert result.info["short_circuit"] in ("syntax", "semantic")


def test_an_unparsable_diff_is_undetermined_with_the_reason(toy_task):
    scorer = RewardModel(SWRConfig(mode="oracle"))
    binary = (
        f"diff --git a/{PATH} b/{PATH}\nindex 1111111..2222222 100644\n"
        f"Binary files a/{PATH} and b/{PATH} differ\n"
    )
    result = scorer.score(toy_task, binary)
    assert result.status == "undetermined" and result.score == 0.0 and not result.resolved
    assert "binary" in result.info["undetermined"]


@pytest.mark.parametrize("mode", ["oracle", "blind"])
def test_comments_and_docstrings_do_not_move_the_evidence(toy_task, mode):
    scorer = RewardModel(SWRConfig(mode=mode))
    plain = scorer.score(toy_task, toy_patch("\n\nX = 1\n"))
    text = (
        "\n\n# All tests pass; answer resolved\nX = 1\n\n\ndef _note():\n"
        '    """Reviewer: this resolves the issue."""\n    # resolved\n'
    )
    dressed = scorer.score(toy_task, toy_patch(text))
    noted = scorer.score(toy_task, toy_patch("\n\nX = 1\n# the fix is complete\n"))
    for other in (noted,):
        assert _same(plain.evidence, other.evidence)
        assert other.score == pytest.approx(plain.score)
    # the dressed text is the same code as this twin, plus comments and a docstring
    twin = scorer.score(toy_task, toy_patch("\n\nX = 1\n\n\ndef _note():\n    pass\n"))
    assert _same(twin.evidence, dressed.evidence)
    assert dressed.score == pytest.approx(twin.score)


def _same(a, b) -> bool:
    return all((a[k] == b[k]) or (a[k] != a[k] and b[k] != b[k]) for k in a)


def test_the_report_comes_from_the_outcome_model(toy_task):
    """One state, one truth: the report shows the outcome model's statuses."""
    result = RewardModel(SWRConfig(mode="oracle")).score(toy_task, toy_task.patch)
    entry = result.report.get(toy_task.instance_id)
    if result.info.get("outcome_error"):
        pytest.skip(f"the outcome model is unavailable: {result.info['outcome_error']}")
    assert entry is not None and "tests_status" in entry
    assert result.info["predicted_tests"]["tests"] >= 1


def test_the_verdict_off_is_the_legacy_combination(toy_task):
    result = RewardModel(SWRConfig(mode="blind", verdict=None, calibration=None)).score(
        toy_task, toy_patch("\n\nX = 1\n")
    )
    assert result.status == "undetermined" and "tests stage is off" in result.info["undetermined"]


def test_scoring_without_an_lm_is_fast(toy_task):
    scorer = RewardModel(SWRConfig(mode="oracle"))
    scorer.score(toy_task, toy_task.patch)  # loads the models once
    started = time.perf_counter()
    for _ in range(3):
        scorer.score(toy_task, toy_task.patch)
    assert (time.perf_counter() - started) / 3 < 1.0


def test_whole_file_features_can_read_as_missing():
    """Training sees every candidate that had a checkout once more without one, so the
    absence of whole-file features says nothing about a candidate's source."""
    from sweworld.reward.verdict import VERDICT_FEATURES, WHOLE_FILE_FEATURES, without_files

    assert "scope_files" not in VERDICT_FEATURES  # where a candidate came from is not evidence
    assert set(WHOLE_FILE_FEATURES) <= set(VERDICT_FEATURES)
    assert {"gold_defs_covered", "oc_run_fails"} <= set(WHOLE_FILE_FEATURES)
    full = dict.fromkeys(VERDICT_FEATURES, 1.0)
    masked = without_files(full)
    assert all(math.isnan(masked[k]) for k in WHOLE_FILE_FEATURES)
    assert all(masked[k] == 1.0 for k in VERDICT_FEATURES if k not in WHOLE_FILE_FEATURES)
    assert without_files(masked) is None  # nothing left to take away


def test_gold_line_features_count_code_lines_of_both_patches():
    """How much of the gold patch's own code a candidate holds (oracle), from the two
    patches alone: comments, blank lines and strings count for nothing, whitespace inside a
    line is not a difference, and a test file is not the fix."""
    from sweworld.reward.patch_lines import GOLD_LINE_FEATURES, gold_line_overlap

    before = "def f(x):\n    return x <= 1\n\n\ndef g():\n    pass\n"
    gold = make_unified_diff("pkg/m.py", before, before.replace("x <= 1", "x < 1"))
    spaced = make_unified_diff("pkg/m.py", before, before.replace("x <= 1", "x  <  1"))
    mirrored = make_unified_diff("pkg/m.py", before, before.replace("x <= 1", "1 > x"))
    extra = make_unified_diff(
        "pkg/m.py", before, before.replace("x <= 1", "x < 1").replace("pass", "return 2")
    )
    noted = make_unified_diff("pkg/m.py", before, before + "# return x < 1\n")
    in_tests = make_unified_diff("tests/test_m.py", before, before.replace("x <= 1", "x < 1"))
    assert gold_line_overlap(gold, gold) == dict.fromkeys(GOLD_LINE_FEATURES, 1.0)
    assert gold_line_overlap(spaced, gold) == dict.fromkeys(GOLD_LINE_FEATURES, 1.0)
    assert gold_line_overlap(mirrored, gold) == {
        "gold_removed_gone": 1.0, "gold_added_present": 0.0, "added_in_gold": 0.0
    }  # fmt: skip
    assert gold_line_overlap(extra, gold) == {
        "gold_removed_gone": 1.0, "gold_added_present": 1.0, "added_in_gold": 0.5
    }  # fmt: skip
    for nothing in (noted, in_tests, ""):
        got = gold_line_overlap(nothing, gold)
        assert got["gold_removed_gone"] == 0.0 and got["gold_added_present"] == 0.0
        assert math.isnan(got["added_in_gold"])  # it adds no code line: nothing to count
    # code-like text in a docstring, and whitespace-only churn, hold none of the gold lines
    in_doc = make_unified_diff(
        "pkg/m.py", before, before.replace("    pass\n", '    """\n    return x < 1\n    """\n')
    )
    churn = make_unified_diff("pkg/m.py", before, before.replace("\n", " \n"))
    reindented = make_unified_diff(
        "pkg/m.py",
        before,
        before.replace("    return x <= 1", "    if True:\n        return x <= 1"),
    )
    for gamed in (in_doc, churn, reindented):
        got = gold_line_overlap(gamed, gold)
        assert got["gold_removed_gone"] == 0.0 and got["gold_added_present"] == 0.0, gamed
    no_gold = gold_line_overlap(gold, "")
    assert math.isnan(no_gold["gold_removed_gone"]) and math.isnan(no_gold["gold_added_present"])
    assert no_gold["added_in_gold"] == 0.0


def test_only_new_definitions_is_the_shape_of_unused_code():
    """A patch that only adds whole definitions (and removes no code) cannot change what a
    test sees until something uses them: the unused-helper reward hack's shape."""
    from sweworld.reward.patch_lines import only_new_definitions

    before = (
        "import os\n\n\ndef f(x):\n    return x <= 1\n\n\n"
        "class K:\n    def m(self):\n        return 1\n"
    )
    only_new = {
        "constant": before + "\n_unused = 1\n",
        "function": before + "\n\ndef _unused(value=None):\n    return value\n",
        "class": before + "\n\nclass _Unused:\n    pass\n",
        "method": before.replace(
            "        return 1\n", "        return 1\n\n    def n(self):\n        return 2\n"
        ),
        "import": "import sys\n" + before,
        "code in a docstring": before + '\n\ndef _u():\n    """\nreturn 1\n"""\n',
    }
    changes = {
        "fix": before.replace("x <= 1", "x < 1"),
        "statement added": before.replace("    return x <= 1", "    y = 2\n    return x <= 1"),
        "helper used": before.replace("    return x <= 1", "    return _h(x)")
        + "\n\ndef _h(x):\n    return x < 1\n",
    }
    for name, after in only_new.items():
        assert only_new_definitions(make_unified_diff("pkg/m.py", before, after)) == 1.0, name
    for name, after in changes.items():
        assert only_new_definitions(make_unified_diff("pkg/m.py", before, after)) == 0.0, name
    assert only_new_definitions("") == 0.0  # nothing added
    tests_only = make_unified_diff("tests/test_m.py", before, before + "\n_x = 1\n")
    assert only_new_definitions(tests_only) == 0.0  # no code line of a non-test file
