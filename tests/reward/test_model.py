"""The SWR pipeline on the toy tasks: exact stages, short circuits, features, calibration."""

from __future__ import annotations

import pytest

from sweworld.reward.model import (
    FEATURES,
    RewardModel,
    SWRConfig,
    fit_from_results,
    prior_score,
    stage_features,
)
from sweworld.reward.types import StageResult

EXACT = ("syntax", "typecheck", "semantic")


class CountingStage:
    """Stands in for the tests stage to show whether the pipeline reached it."""

    name = "tests"

    def __init__(self, score: float = 0.8):
        self.calls = 0
        self.score = score

    def run(self, ctx):
        self.calls += 1
        return StageResult("tests", "pass" if self.score >= 0.5 else "fail", score=self.score)


def _model(mode: str = "oracle", tests: CountingStage | None = None) -> RewardModel:
    model = RewardModel(SWRConfig(mode=mode, stages=EXACT, calibration=None, verdict=None))
    if tests is not None:
        model.stages()["tests"] = tests
    return model


def _edited_gold(model: RewardModel, task, extra: str) -> str:
    """The gold patch with ``extra`` appended to its first changed file."""
    from sweworld.reward.candidate import view_candidate
    from sweworld.tasks.patches import make_unified_diff

    base, _ = model.base_dir(task)
    changed = view_candidate(task.patch, base_dir=base).files[0]
    assert changed.before is not None and changed.after is not None
    return make_unified_diff(changed.path, changed.before, changed.after + extra)


def test_gold_patch_passes_every_exact_stage_and_is_equivalent_in_oracle(toy_task) -> None:
    tests = CountingStage(0.3)
    result = _model("oracle", tests).score(toy_task, toy_task.patch)
    assert [s.verdict for s in result.stages.values()] == ["pass", "pass", "pass", "fail"]
    assert result.stages["semantic"].evidence["gold_equivalent"] is True
    assert result.features["gold_equivalent"] == 1.0
    assert result.score == pytest.approx(0.95)  # gold-equivalent lifts the tests' 0.3
    assert result.resolved and result.reward == 1.0
    assert result.info["scope"] == "files" and tests.calls == 1


def test_blind_mode_does_not_read_the_gold_patch(toy_task) -> None:
    tests = CountingStage(0.3)
    result = _model("blind", tests).score(toy_task, toy_task.patch)
    assert result.stages["semantic"].evidence.get("gold_equivalent") is None
    assert result.score == pytest.approx(0.3)
    assert not result.resolved and result.reward == 0.0


def test_syntax_error_short_circuits_without_a_model_call(toy_task) -> None:
    tests = CountingStage(0.9)
    model = _model("oracle", tests)
    patch = _edited_gold(model, toy_task, "\ndef unfinished(:\n    pass\n")
    result = model.score(toy_task, patch)
    assert result.info["short_circuit"] == "syntax"
    assert list(result.stages) == ["syntax"]
    assert tests.calls == 0
    assert result.score == 0.0 and result.reward == 0.0
    entry = result.report[toy_task.instance_id]
    assert entry["resolved"] is False and entry["sweworld_status"] == "swr_syntax_failed"
    (error,) = result.stages["syntax"].evidence["errors"]
    assert error["file"] == "stockroom/textutil.py" and error["line"] > 1


def test_empty_and_test_only_patches_stop_at_the_semantic_stage(toy_task) -> None:
    tests = CountingStage(0.9)
    model = _model("oracle", tests)
    empty = model.score(toy_task, "")
    assert empty.info["short_circuit"] == "semantic"
    assert empty.stages["semantic"].evidence["empty"] is True
    only_tests = model.score(toy_task, toy_task.test_patch)
    assert only_tests.info["short_circuit"] == "semantic"
    assert only_tests.stages["semantic"].evidence["tests_only"] is True
    assert tests.calls == 0 and empty.score == only_tests.score == 0.0


def test_garbage_patch_gives_a_defined_score_not_an_exception(toy_task) -> None:
    result = _model("oracle").score(toy_task, "this is not a diff\x00\xff")
    assert 0.0 <= result.score <= 1.0
    assert result.resolved is False


def test_hunks_scope_when_the_repository_is_unavailable(toy_task) -> None:
    result = _model("oracle").score(toy_task, toy_task.patch, base_dir=None)
    assert result.info["scope"] == "hunks"
    assert result.stages["typecheck"].verdict == "skip"
    assert result.stages["semantic"].evidence["gold_equivalent"] is True


def test_features_and_prior() -> None:
    stages = {
        "typecheck": StageResult("typecheck", "fail"),
        "semantic": StageResult("semantic", "pass", evidence={"gold_equivalent": False}),
        "tests": StageResult("tests", "pass", score=0.8),
    }
    features = stage_features(stages)
    assert list(features) == list(FEATURES)
    assert features["typecheck_fail"] == 1.0 and features["gold_different"] == 1.0
    assert prior_score(features) == pytest.approx(0.4)
    assert stage_features({})["tests_missing"] == 1.0


def test_calibration_is_fitted_saved_and_used(tmp_path, toy_task) -> None:
    from sweworld.reward.calibration import load_calibration, save_calibration

    model = _model("blind")
    results, labels = [], []
    for score, label in [
        (0.9, True),
        (0.8, True),
        (0.7, False),
        (0.2, False),
        (0.85, True),
        (0.1, False),
        (0.6, True),
        (0.3, False),
    ]:
        model.stages()["tests"] = CountingStage(score)
        results.append(model.score(toy_task, toy_task.patch))
        labels.append(label)
    calibrator, metrics = fit_from_results(results, labels, method="isotonic")
    assert metrics["n"] == 8 and metrics["in_sample"]["roc_auc"] > 0.8
    path = save_calibration(calibrator, tmp_path / "cal.json", metrics=metrics)
    calibrated = RewardModel(
        SWRConfig(mode="blind", stages=EXACT, calibration=str(path), verdict=None)
    )
    assert calibrated.calibrator is not None
    calibrated.stages()["tests"] = CountingStage(0.95)
    high = calibrated.score(toy_task, toy_task.patch)
    calibrated.stages()["tests"] = CountingStage(0.05)
    low = calibrated.score(toy_task, toy_task.patch)
    assert high.info["calibrated"] and high.score > low.score
    assert load_calibration(path).feature_names == ["tests_p"]
    with pytest.raises(ValueError, match="both classes"):
        fit_from_results(results[:2], [True, True])


@pytest.mark.parametrize("broken", ["other features", "NaN"])
def test_a_calibrator_that_fails_falls_back_to_the_prior(toy_task, broken, caplog) -> None:
    """A calibration fitted on other features (a stale file) raised ValueError out of
    ``score`` into the trainer; one that predicts NaN gave no number."""
    from sweworld.reward.calibration import LogisticCalibrator

    if broken == "NaN":

        class NaNCalibrator:
            def predict(self, rows):
                return [float("nan")] * len(rows)

        calibrator = NaNCalibrator()
    else:
        calibrator = LogisticCalibrator(feature_names=["old_feature"]).fit(
            [[0.1], [0.2], [0.8], [0.9]], [False, False, True, True]
        )
    model = RewardModel(
        SWRConfig(mode="blind", stages=EXACT, calibration=None, verdict=None), calibrator=calibrator
    )
    model.stages()["tests"] = CountingStage(0.8)
    patch = toy_task.patch.replace("slug.strip(separator)", "slug.strip(separator or '-')")
    with caplog.at_level("WARNING", logger="sweworld.reward.model"):
        result = model.score(toy_task, patch)
    assert result.status == "resolved" and result.score == pytest.approx(0.8)
    assert result.info["calibrated"] is False and result.info["calibration_error"]
    assert any("calibration failed" in r.getMessage() for r in caplog.records)


def test_calibration_folds_keep_a_repository_together(toy_task) -> None:
    """Out-of-fold scores come from fits that never saw the candidate's repository."""
    model = _model("blind")
    results, labels = [], []
    for i in range(20):
        model.stages()["tests"] = CountingStage(0.1 + 0.04 * i)
        result = model.score(toy_task, toy_task.patch)
        # five repositories, four candidates each (two tasks per repository)
        result.instance_id = f"owner{i % 5}__repo{i % 5}-{i % 2}"
        results.append(result)
        labels.append(i % 2 == 0)
    _, metrics = fit_from_results(results, labels, method="isotonic")
    assert metrics["folds_grouped_by"] == "repository"
    for r in results:
        r.instance_id = f"org__lib-{results.index(r) % 6}"
    _, metrics = fit_from_results(results, labels, method="isotonic")
    assert metrics["folds_grouped_by"] == "task"


def test_config_rejects_unknown_stages_and_modes() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        SWRConfig(stages=("syntax", "lint"))
    with pytest.raises(ValueError, match="mode"):
        SWRConfig(mode="peek")
