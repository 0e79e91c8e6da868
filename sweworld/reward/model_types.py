"""What the SWR pipeline (:class:`sweworld.reward.model.RewardModel`) is configured with and
what it returns: :class:`SWRConfig`, :class:`RewardResult` and the stage names. Re-exported
by :mod:`sweworld.reward.model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweworld.reward.types import StageResult

__all__ = [
    "DEFAULT_STAGES",
    "RESOLVED",
    "STAGE_NAMES",
    "UNDETERMINED",
    "UNRESOLVED",
    "RewardResult",
    "SWRConfig",
    "short_circuit_stage",
]

STAGE_NAMES = ("syntax", "typecheck", "semantic", "tests")
#: The stages a default configuration runs: the exact stages the shipped verdict was trained
#: on (no type check: ~1 s per candidate; no LM: the verdict decides in milliseconds).
DEFAULT_STAGES = ("syntax", "semantic")

#: ``RewardResult.status`` values.
RESOLVED, UNRESOLVED, UNDETERMINED = "resolved", "unresolved", "undetermined"


@dataclass
class SWRConfig:
    """How the reward model runs (every field can be set from the CLI).

    Attributes:
        mode: ``oracle`` (stages may read the gold patch, test patch and test lists) or
            ``blind`` (they may not).
        stages: which stages run, in pipeline order (a subset of syntax, typecheck,
            semantic, tests; default :data:`DEFAULT_STAGES`: the LM's tests stage is optional).
        model: the SWR language model for the tests stage (``embedded``, a model path, an
            ``http(s)://`` OpenAI-compatible endpoint, ...: see ``make_lm``).
        samples: reports sampled per candidate (1: one greedy report).
        temperature: sampling temperature when ``samples > 1``.
        use_logprobs: also read P(resolved) from the token log-probabilities.
        typecheck_timeout_s: bound on one mypy run (before and after together).
        tests_timeout_s: deadline of the tests stage for one candidate (a model that hangs
            gives no verdict, never a stalled trainer); None for none.
        calibration: path of a fitted calibration (``sweworld calibrate``); ``auto`` uses the
            one stored for this model and mode when it exists; None the fixed prior. Only
            read without a verdict (the verdict carries its own calibration).
        verdict: the learned verdict that decides (:mod:`sweworld.reward.verdict`):
            ``default`` (the shipped ``adapters/verdict-default``), a model file or folder,
            or None / ``none``: the legacy combination (the tests stage's report, gold
            equivalence; no evidence is undetermined).
        outcome: the outcome model whose predicted test statuses are evidence
            (``default``: the shipped one; a file; None / ``none``: not used).
        reward_preset: RL reward preset name (binary, score, shaped, stage_penalty).
        threshold: score at or above which a candidate counts as resolved.
        seed: seed of the sampled reports.
    """

    mode: str = "oracle"
    stages: tuple[str, ...] = DEFAULT_STAGES
    model: str = "embedded"
    samples: int = 1
    temperature: float = 0.7
    use_logprobs: bool = True
    typecheck_timeout_s: float = 30.0
    tests_timeout_s: float | None = 600.0
    calibration: str | None = "auto"
    reward_preset: str = "binary"
    threshold: float = 0.5
    seed: int = 0
    verdict: str | None = "default"
    outcome: str | None = "default"

    def __post_init__(self) -> None:
        if self.mode not in ("oracle", "blind"):
            raise ValueError(f"mode must be 'oracle' or 'blind', got {self.mode!r}")
        self.stages = tuple(self.stages)
        unknown = [s for s in self.stages if s not in STAGE_NAMES]
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {', '.join(STAGE_NAMES)}")
        self.stages = tuple(s for s in STAGE_NAMES if s in self.stages)
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if self.verdict in ("", "none"):
            self.verdict = None
        if self.outcome in ("", "none"):
            self.outcome = None


@dataclass
class RewardResult:
    """The verdict on one candidate.

    Attributes:
        instance_id: the task.
        score: calibrated probability that the candidate resolves the task (0 when
            undetermined: no stage could confirm it).
        resolved: ``score >= threshold`` and the verdict is determined.
        reward: the RL reward under the configured preset.
        stages: each stage's result, in pipeline order (stages not run are absent).
        report: a ``report.json``-shaped dict (``{instance_id: {...}}``) from the simulated
            test report; when an exact stage stopped the pipeline, an unresolved entry whose
            ``sweworld_status`` is ``swr_<stage>_failed``; empty when the tests stage did
            not run.
        features: the legacy combination's inputs (:data:`FEATURES`).
        info: mode, scope (files or hunks), which stage stopped the pipeline, whether the
            score is calibrated, latency, why the base checkout was not used, the stages
            that failed (``stage_errors``) and why the verdict is undetermined.
        status: ``resolved``, ``unresolved`` or ``undetermined`` (no stage that can confirm
            resolution gave evidence; ``resolved`` is then False).
        evidence: the verdict's inputs (:data:`~sweworld.reward.verdict.VERDICT_FEATURES`;
            NaN where unknown).
    """

    instance_id: str
    score: float
    resolved: bool
    reward: float
    stages: dict[str, StageResult] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    status: str = UNDETERMINED
    evidence: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (NaN evidence as null)."""
        return {
            "instance_id": self.instance_id,
            "status": self.status,
            "score": self.score,
            "resolved": self.resolved,
            "reward": self.reward,
            "stages": {name: result.to_dict() for name, result in self.stages.items()},
            "report": self.report,
            "features": self.features,
            "evidence": {k: (None if v != v else v) for k, v in self.evidence.items()},
            "info": self.info,
        }


def short_circuit_stage(stages: Mapping[str, StageResult]) -> str | None:
    """The stage that stopped the pipeline, or None."""
    for name, result in stages.items():
        if result.short_circuit:
            return name
    return None
