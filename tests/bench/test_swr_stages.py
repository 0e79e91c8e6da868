"""``sweworld bench swr-stages``: best-of-N counts the tasks it leaves out."""

from __future__ import annotations

from sweworld.bench import swr_stages


def test_best_of_n_counts_the_tasks_it_leaves_out():
    from sweworld.reward.model import RewardResult

    swr_stages.DROPPED.clear()

    def result(score: float) -> RewardResult:
        return RewardResult("t", score=score, resolved=score >= 0.5, reward=0.0)

    groups = {
        "two": [(result(0.9), True), (result(0.1), False)],
        "one": [(result(0.9), True)],
    }
    metrics = swr_stages.best_of_n(groups, 0.2)
    assert metrics["n_tasks"] == 1
    assert swr_stages.DROPPED == [("best-of-N", "one", "fewer than 2 labelled candidates")]
    assert swr_stages.report_dropped()["total"] == 1
