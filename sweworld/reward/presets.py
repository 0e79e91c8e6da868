"""RL reward presets: how a verdict (score, resolved, stage evidence) becomes a scalar reward.

Pure functions; the trainer picks a preset by name:

- ``binary``: 1.0 when resolved (score >= threshold), else 0.0. SWE-World's reward.
- ``score``: the calibrated probability of being resolved, in [0, 1].
- ``shaped``: success / failure / timeout outcomes with a per-step penalty:
  ``success - step_penalty * steps`` when resolved (never below ``min_success``), ``failure``
  when the agent submitted an unresolved patch, ``timeout`` when the episode ended without a
  submission (step or time limit).
- ``stage_penalty``: the binary reward minus a penalty for each exact stage that failed
  (syntax error, introduced type errors, test tampering, empty or no-op patch), so a policy
  learns to avoid them even when nothing is resolved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PRESETS = ("binary", "score", "shaped", "stage_penalty")
OUTCOMES = ("submitted", "timeout")


@dataclass(frozen=True)
class RewardPreset:
    """Parameters of a reward preset (each field has the default used by its name).

    Attributes:
        name: one of ``binary``, ``score``, ``shaped``, ``stage_penalty``.
        threshold: score at or above which a candidate counts as resolved.
        success: shaped reward of a resolved episode before the step penalty.
        failure: shaped reward of a submitted, unresolved patch.
        timeout: shaped reward of an episode that ended without a submission.
        step_penalty: subtracted per agent step from a shaped success.
        min_success: floor of a shaped success after step penalties (stays above failure).
        penalties: stage-penalty amounts by flag (``syntax``, ``typecheck``,
            ``test_tampering``, ``empty``, ``noop``, ``tests_only``).
    """

    name: str = "binary"
    threshold: float = 0.5
    success: float = 1.0
    failure: float = 0.0
    timeout: float = -0.1
    step_penalty: float = 0.005
    min_success: float = 0.5
    penalties: Mapping[str, float] = field(
        default_factory=lambda: {
            "syntax": 0.5,
            "typecheck": 0.1,
            "test_tampering": 0.5,
            "empty": 0.2,
            "noop": 0.2,
            "tests_only": 0.2,
        }
    )

    def __post_init__(self) -> None:
        if self.name not in PRESETS:
            raise ValueError(f"unknown reward preset {self.name!r}; choose one of {PRESETS}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")


def preset(name: str | RewardPreset = "binary", **overrides: Any) -> RewardPreset:
    """The preset called ``name`` with ``overrides`` applied (a preset object passes through)."""
    if isinstance(name, RewardPreset):
        if not overrides:
            return name
        data = {k: getattr(name, k) for k in name.__dataclass_fields__}
        data.update(overrides)
        return RewardPreset(**data)
    return RewardPreset(name=name, **overrides)


def failed_flags(stages: Mapping[str, Any]) -> list[str]:
    """Names of the exact-stage failures in ``stages`` (stage name -> StageResult or dict):
    ``syntax``, ``typecheck`` and the semantic flags that are set."""
    flags: list[str] = []
    for name in ("syntax", "typecheck"):
        result = stages.get(name)
        evidence = (_get(result, "evidence") or {}) if result is not None else {}
        failed = result is not None and _get(result, "verdict") == "fail"
        if failed and not evidence.get("suspected_only"):
            flags.append(name)
    semantic = stages.get("semantic")
    if semantic is not None:
        evidence = _get(semantic, "evidence") or {}
        for flag in ("empty", "noop", "tests_only", "test_tampering"):
            if evidence.get(flag):
                flags.append(flag)
    return flags


def compute_reward(
    score: float,
    stages: Mapping[str, Any] | None = None,
    *,
    reward_preset: str | RewardPreset = "binary",
    steps: int | None = None,
    outcome: str = "submitted",
    resolved: bool | None = None,
) -> float:
    """The scalar reward for a verdict.

    Args:
        score: calibrated probability that the candidate resolves the task.
        stages: per-stage results (used by ``stage_penalty``).
        reward_preset: a preset name or object.
        steps: agent steps of the episode (``shaped`` only; None counts as 0).
        outcome: ``submitted`` or ``timeout`` (the episode ended without a submission).
        resolved: the verdict when the caller knows it (``RewardModel``: False whenever an
            exact stage stopped the candidate or no stage gave evidence, whatever the
            threshold); None: ``score >= threshold``.
    """
    p = preset(reward_preset)
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    score = min(1.0, max(0.0, float(score)))
    if resolved is None:
        resolved = score >= p.threshold
    if p.name == "score":
        return score
    if p.name == "binary":
        return 1.0 if resolved else 0.0
    if p.name == "shaped":
        if outcome == "timeout":
            return p.timeout
        if not resolved:
            return p.failure
        return max(p.min_success, p.success - p.step_penalty * max(0, steps or 0))
    base = 1.0 if resolved else 0.0
    penalty = sum(p.penalties.get(flag, 0.0) for flag in failed_flags(stages or {}))
    return base - penalty


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)
