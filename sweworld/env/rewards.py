"""The final reward of an episode: SWR, the real test run, both, or none.

:class:`EpisodeRewarder` turns a task and a patch into a :class:`FinalReward`: the scalar,
whether the patch resolves the task (when known), and the evidence behind it (each SWR
stage's verdict and the simulated report; the real run's status and report). One rewarder
can be shared by many episodes (its reward model and language model are loaded once).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.reward.presets import compute_reward

log = logging.getLogger(__name__)

__all__ = ["EpisodeRewarder", "FinalReward", "reward_deadline", "score_in_time"]


@dataclass
class FinalReward:
    """The reward of one finished episode.

    Attributes:
        value: the scalar reward under the configured preset.
        resolved: whether the patch resolves the task (None when not scored).
        source: ``swr``, ``real`` or ``none``: which verdict ``value`` comes from.
        status: the verdict's status (SWR: resolved / unresolved / undetermined; real:
            ok, patch_failed, timeout, ...; ``not_scored``).
        evidence: per-stage verdicts and reports (``swr``, ``real``).
        error: why scoring failed, when it did.
    """

    value: float
    resolved: bool | None
    source: str
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    latency_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "resolved": self.resolved,
            "source": self.source,
            "status": self.status,
            "evidence": self.evidence,
            "error": self.error,
            "latency_s": self.latency_s,
        }


class EpisodeRewarder:
    """Scores an episode's patch (thread-safe; share one across episodes).

    Args:
        config: the episode config (``reward``, ``reward_preset``, ``mode``, ``swr_*``).
        reward_model: a :class:`~sweworld.reward.model.RewardModel` to use for SWR (one is
            made from the config on first use otherwise).
        swr_lm: the SWR model object of that reward model's ``tests`` stage (needed only
            when ``swr_stages`` has it; not closed here): the world passes
            ``sweworld.world.swr_lm_from_spec(config.swr_model)``.
        manager: a session manager for the real test run (one per call otherwise).
        real_executor: the executor object that runs the tests for ``real`` / ``both``
            (None: a local executor; ``sweworld.world.executor_from_spec("docker")`` builds
            another).
        real_timeout_s: deadline of the real test run.
        deadline_s: how long an episode waits for :meth:`score` before it ends the episode
            with reason ``error`` (default: :func:`reward_deadline` of the two above).
    """

    def __init__(
        self,
        config: EpisodeConfig | None = None,
        *,
        reward_model: Any = None,
        swr_lm: Any = None,
        manager: Any = None,
        real_executor: Any = None,
        real_timeout_s: float = 1800.0,
        deadline_s: float | None = None,
    ):
        self.config = config or EpisodeConfig()
        self.deadline_s = deadline_s or reward_deadline(self.config, real_timeout_s)
        self._reward_model = reward_model
        self.swr_lm = swr_lm
        self.manager = manager
        self.real_executor = real_executor
        self.real_timeout_s = real_timeout_s
        self._lock = threading.Lock()

    @property
    def reward_model(self) -> Any:
        with self._lock:
            if self._reward_model is None:
                from sweworld.reward.model import RewardModel, SWRConfig

                cfg = self.config
                options: dict[str, Any] = {
                    "mode": cfg.mode,
                    "model": cfg.swr_model,
                    "reward_preset": cfg.reward_preset,
                    "seed": cfg.seed,
                    "tests_timeout_s": cfg.step_timeout_s,
                }
                if cfg.swr_stages is not None:
                    options["stages"] = cfg.swr_stages
                self._reward_model = RewardModel(
                    SWRConfig(**options), lm=self.swr_lm, manager=self.manager
                )
            return self._reward_model

    def score(self, task: Any, patch: str, *, steps: int, submitted: bool) -> FinalReward:
        """The reward of ``patch``; raises only on a configuration error."""
        started = time.perf_counter()
        source = self.config.reward
        outcome = "submitted" if submitted else "timeout"
        if source == "none":
            return FinalReward(0.0, None, "none", "not_scored")
        evidence: dict[str, Any] = {}
        swr = real = None
        if source in ("swr", "both"):
            # the stages stop at the episode's wait for the reward (a mypy run is killed)
            model = self.reward_model
            options: dict[str, Any] = {"steps": steps, "outcome": outcome}
            if _takes_keyword(model.score, "deadline"):  # a caller's model may not
                options["deadline"] = time.monotonic() + self.deadline_s
            swr = model.score(task, patch, **options)
            evidence["swr"] = _swr_evidence(swr)
        if source in ("real", "both"):
            from sweworld.reward.real import real_reward

            real = real_reward(
                task,
                patch,
                manager=self.manager,
                executor=self.real_executor,
                timeout=self.real_timeout_s,
            )
            evidence["real"] = {
                "resolved": real.resolved,
                "status": real.status,
                "report": real.report,
                "reason": real.info.get("reason"),
            }
        latency = time.perf_counter() - started
        if real is not None:
            value = compute_reward(
                1.0 if real.resolved else 0.0,
                reward_preset=self.config.reward_preset,
                steps=steps,
                outcome=outcome,
                resolved=real.resolved,
            )
            error = real.info.get("reason") if real.status == "error" else None
            return FinalReward(value, real.resolved, "real", real.status, evidence, error, latency)
        assert swr is not None
        value = compute_reward(
            swr.score,
            swr.stages,
            reward_preset=self.config.reward_preset,
            steps=steps,
            outcome=outcome,
            resolved=swr.resolved,
        )
        return FinalReward(value, swr.resolved, "swr", swr.status, evidence, None, latency)

    def close(self) -> None:
        if self._reward_model is not None:
            self._reward_model.close()


#: Seconds added to a reward's own deadlines before an episode stops waiting for it.
REWARD_GRACE_S = 60.0


def score_in_time(
    rewarder: Any,
    config: EpisodeConfig,
    task: Any,
    patch: str,
    steps: int,
    submitted: bool,
    label: str = "episode",
) -> FinalReward:
    """``rewarder.score(...)`` on a worker thread, or an ``error`` reward when it raised or
    did not answer within its ``deadline_s`` (it is left to finish; its result dropped).
    ``label`` names the episode in the log."""
    from sweworld.env.stepping import step_pool

    deadline = getattr(rewarder, "deadline_s", None) or reward_deadline(config)
    future = step_pool().submit(
        lambda: rewarder.score(task, patch, steps=steps, submitted=submitted)
    )
    try:
        return future.result(deadline)
    except concurrent.futures.TimeoutError:
        log.error("episode %s: the reward did not answer within %.0f s", label, deadline)
        why = f"the reward did not answer within {deadline:.0f} s"
    except Exception as exc:
        log.exception("episode %s: the reward failed", label)
        why = f"{type(exc).__name__}: {exc}"
    return FinalReward(0.0, None, "none", "error", error=why)


def _takes_keyword(fn: Any, name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def reward_deadline(config: EpisodeConfig, real_timeout_s: float = 1800.0) -> float:
    """How long scoring one patch may take: the real test run, four SWR stages each bounded
    by the step deadline, and :data:`REWARD_GRACE_S` (a backstop: each part has its own)."""
    return real_timeout_s + 4 * config.step_timeout_s + REWARD_GRACE_S


def _swr_evidence(result: Any) -> dict[str, Any]:
    return {
        "status": result.status,
        "score": result.score,
        "resolved": result.resolved,
        "stages": {name: stage.to_dict() for name, stage in result.stages.items()},
        "report": result.report,
        "info": {k: v for k, v in result.info.items() if k != "features"},
    }
