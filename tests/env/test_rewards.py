"""EpisodeRewarder: the real test run, the SWR stages, none; evidence and thread safety."""

from __future__ import annotations

import concurrent.futures

import pytest

from sweworld.env.config import EpisodeConfig
from sweworld.env.rewards import EpisodeRewarder, FinalReward

FAST_SWR = ("syntax", "typecheck", "semantic")


def rewarder(manager, **options) -> EpisodeRewarder:
    return EpisodeRewarder(EpisodeConfig(executor="none", **options), manager=manager)


def test_none_is_not_scored(toy_task):
    final = EpisodeRewarder(EpisodeConfig(reward="none")).score(
        toy_task, toy_task.patch, steps=3, submitted=True
    )
    assert final == FinalReward(0.0, None, "none", "not_scored")


def test_real_reward_grades_the_gold_patch_and_the_base(manager, toy_task):
    scorer = rewarder(manager, reward="real")
    gold = scorer.score(toy_task, toy_task.patch, steps=5, submitted=True)
    assert (gold.value, gold.resolved, gold.source, gold.status) == (1.0, True, "real", "resolved")
    report = gold.evidence["real"]["report"][toy_task.instance_id]
    assert report["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    base = scorer.score(toy_task, "", steps=5, submitted=True)
    assert base.value == 0.0 and base.resolved is False
    assert gold.to_dict()["evidence"] == gold.evidence
    assert set(gold.to_dict()) == {
        "value",
        "resolved",
        "source",
        "status",
        "evidence",
        "error",
        "latency_s",
    }


def test_a_patch_that_does_not_apply_is_unresolved(manager, toy_task):
    bad = toy_task.patch.replace("ascii_text.lower()", "something_else()", 1)
    final = rewarder(manager, reward="real").score(toy_task, bad, steps=1, submitted=True)
    assert final.resolved is False and final.value == 0.0
    assert final.status == "patch_failed" and final.error is None  # a verdict, not a failure


def test_swr_stages_give_per_stage_evidence(manager, toy_task):
    scorer = rewarder(manager, reward="swr", swr_stages=FAST_SWR)
    final = scorer.score(toy_task, toy_task.patch, steps=2, submitted=True)
    # the gold patch: the learned verdict over the stages' evidence says resolved
    assert final.source == "swr" and final.status == "resolved"
    stages = final.evidence["swr"]["stages"]
    assert list(stages) == list(FAST_SWR)
    assert all(stage["verdict"] == "pass" for stage in stages.values())
    empty = scorer.score(toy_task, "", steps=2, submitted=True)
    assert empty.resolved is False and empty.value == 0.0
    assert empty.evidence["swr"]["status"] == "unresolved"
    scorer.close()


def test_both_keeps_the_real_reward_and_the_swr_verdict(manager, toy_task):
    scorer = rewarder(manager, reward="both", swr_stages=FAST_SWR)
    final = scorer.score(toy_task, toy_task.patch, steps=2, submitted=True)
    assert final.source == "real" and final.value == 1.0
    assert set(final.evidence) == {"swr", "real"}
    assert final.evidence["swr"]["status"] == "resolved"  # the verdict agrees with the tests


def test_presets_shape_the_real_verdict(manager, toy_task):
    shaped = rewarder(manager, reward="real", reward_preset="shaped")
    final = shaped.score(toy_task, toy_task.patch, steps=10, submitted=True)
    assert 0.0 < final.value < 1.0  # a success, less a step penalty
    late = shaped.score(toy_task, toy_task.patch, steps=10, submitted=False)
    assert late.resolved is True and late.value != final.value  # the timeout outcome


def test_one_rewarder_scores_from_many_threads(manager, toy_task):
    scorer = rewarder(manager, reward="real")
    patches = [toy_task.patch, "", toy_task.patch, ""]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        finals = list(
            pool.map(lambda p: scorer.score(toy_task, p, steps=1, submitted=True), patches)
        )
    assert [f.resolved for f in finals] == [True, False, True, False]


@pytest.mark.parametrize("stage", ["nope"])
def test_an_unknown_swr_stage_is_a_configuration_error(manager, toy_task, stage):
    scorer = rewarder(manager, reward="swr", swr_stages=(stage,))
    with pytest.raises(ValueError, match=stage):
        scorer.score(toy_task, toy_task.patch, steps=1, submitted=True)
