"""RL reward presets."""

from __future__ import annotations

import pytest

from sweworld.reward.presets import compute_reward, failed_flags, preset
from sweworld.reward.types import StageResult


def _stages(**flags: bool) -> dict[str, StageResult]:
    return {
        "syntax": StageResult("syntax", "fail" if flags.get("syntax") else "pass"),
        "typecheck": StageResult("typecheck", "fail" if flags.get("typecheck") else "pass"),
        "semantic": StageResult(
            "semantic",
            "pass",
            evidence={k: v for k, v in flags.items() if k not in ("syntax", "typecheck")},
        ),
    }


def test_binary_and_score_presets() -> None:
    assert compute_reward(0.7, reward_preset="binary") == 1.0
    assert compute_reward(0.3, reward_preset="binary") == 0.0
    assert compute_reward(0.5, reward_preset="binary") == 1.0  # threshold inclusive
    assert compute_reward(0.3, reward_preset=preset("binary", threshold=0.2)) == 1.0
    assert compute_reward(0.37, reward_preset="score") == pytest.approx(0.37)
    assert compute_reward(1.7, reward_preset="score") == 1.0  # clipped


def test_shaped_preset_outcomes_and_step_penalty() -> None:
    p = preset("shaped")
    assert compute_reward(0.9, reward_preset=p, steps=0) == pytest.approx(1.0)
    assert compute_reward(0.9, reward_preset=p, steps=40) == pytest.approx(1.0 - 0.005 * 40)
    assert compute_reward(0.9, reward_preset=p, steps=10_000) == pytest.approx(p.min_success)
    assert compute_reward(0.1, reward_preset=p, steps=3) == p.failure
    assert compute_reward(0.9, reward_preset=p, outcome="timeout") == p.timeout
    with pytest.raises(ValueError, match="outcome"):
        compute_reward(0.9, reward_preset=p, outcome="crashed")


def test_stage_penalty_preset_subtracts_each_failed_flag() -> None:
    p = preset("stage_penalty")
    clean = _stages()
    assert failed_flags(clean) == []
    assert compute_reward(0.9, clean, reward_preset=p) == 1.0
    bad = _stages(syntax=True, test_tampering=True)
    assert failed_flags(bad) == ["syntax", "test_tampering"]
    assert compute_reward(0.0, bad, reward_preset=p) == pytest.approx(-1.0)
    typed = _stages(typecheck=True)
    assert compute_reward(0.9, typed, reward_preset=p) == pytest.approx(0.9)


def test_unknown_preset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown reward preset"):
        preset("dense")
    with pytest.raises(ValueError, match="threshold"):
        preset("binary", threshold=1.5)
