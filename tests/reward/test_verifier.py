"""Best-of-N selection (pure part)."""

from __future__ import annotations

import pytest

from sweworld.reward.verifier import select_candidate


def test_highest_score_wins_without_votes() -> None:
    index, value, table = select_candidate([0.2, 0.9, 0.4], [[0], [1], [2]], vote_weight=0.0)
    assert index == 1
    assert value == pytest.approx(0.9)
    assert [c["members"] for c in table] == [[1], [2], [0]]


def test_votes_of_an_equivalence_class_can_outweigh_one_high_score() -> None:
    scores = [0.6, 0.6, 0.6, 0.7]
    classes = [[0, 1, 2], [3]]
    assert select_candidate(scores, classes, vote_weight=0.0)[0] == 3
    index, _, table = select_candidate(scores, classes, vote_weight=0.3)
    assert index == 0  # class of three: 0.7*0.6 + 0.3*3/4 = 0.645 > 0.7*0.7 + 0.3/4 = 0.565
    assert table[0]["votes"] == 3


def test_zero_scored_candidates_cast_no_vote_and_ties_go_to_the_first() -> None:
    index, _, table = select_candidate([0.0, 0.0, 0.5, 0.5], [[0, 1], [2], [3]], vote_weight=0.5)
    assert index == 2
    assert table[-1]["votes"] == 0
    assert select_candidate([], [])[0] == -1


def test_classes_must_partition_the_candidates() -> None:
    with pytest.raises(ValueError, match="partition"):
        select_candidate([0.1, 0.2], [[0]])
