"""The SWR pipeline: exact stages, evidence, one learned and calibrated verdict.

::

    patch -> view (whole files when the base checkout is available, hunks otherwise)
          -> syntax     (ast + tree-sitter; a failure stops here: score 0, no model call)
          -> typecheck  (optional: mypy before/after; errors the patch introduces)
          -> semantic   (normalised AST; empty / no-op / tests-only / test tampering stop here;
                         equivalence with the gold patch in oracle mode)
          -> tests      (optional: the SWR language model writes a per-test report)
          -> evidence   (stage outputs, patch shape, the outcome model's predicted status of
                         every FAIL_TO_PASS / PASS_TO_PASS test on the candidate's state)
          -> verdict    (a learned, calibrated P(resolved): :mod:`sweworld.reward.verdict`)
          -> RL reward (a preset)

By default (:data:`DEFAULT_STAGES`, ``verdict="default"``) no language model is loaded and
a candidate is scored in well under a second. Hard exact failures (a changed file that does
not parse, test tampering, an empty, no-op or tests-only patch) are decisive: score 0,
unresolved. A change that cannot be analysed (the diff does not parse, a Python file
changed as binary data) is ``undetermined`` with the reason, never a score made up from
missing features. Everything else is evidence weighed by the verdict, which decides; the
report is the outcome model's statuses made to agree with that decision unless the LM tests
stage ran. A world built with this reward hands :meth:`RewardModel.judge` to its outcome
executor, so a simulated ``pytest`` of the task's tests on a state shows the same decision.

Nothing raises into a trainer: a stage that breaks returns verdict ``error`` (no evidence),
and :meth:`RewardModel.score` always returns a :class:`RewardResult` with a defined score.
A stage's failure is also reported in ``info["stage_errors"]`` and logged (logger
``sweworld.reward.model``, silent unless the application configures logging). A verdict
model file that is corrupt, of another version or feature set, or without the configured
mode raises :class:`~sweworld.reward.verdict.VerdictFileError` when the model is made.

**Without a verdict** (``verdict=None``: the legacy combination,
:mod:`sweworld.reward.combination`) only the tests stage and, in oracle mode, gold
equivalence can confirm a candidate; when neither gave evidence the verdict is
``undetermined`` (``resolved`` False, score 0, ``info["undetermined"]`` says why).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.execution.grading import make_report
from sweworld.reward.combination import (
    FEATURES,
    default_calibration_path,
    fit_from_results,
    missing_evidence,
    prior_score,
    stage_features,
)
from sweworld.reward.model_types import (
    DEFAULT_STAGES,
    RESOLVED,
    STAGE_NAMES,
    UNDETERMINED,
    UNRESOLVED,
    RewardResult,
    SWRConfig,
    short_circuit_stage,
)
from sweworld.reward.presets import RewardPreset, compute_reward, preset
from sweworld.reward.types import CandidateView, RewardContext, StageResult
from sweworld.reward.verdict import load_verdict, unanalysable

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

__all__ = [
    "DEFAULT_STAGES",
    "FEATURES",
    "STAGE_NAMES",
    "RewardModel",
    "RewardResult",
    "SWRConfig",
    "default_calibration_path",
    "fit_from_results",
    "load_verdict",
    "missing_evidence",
    "prior_score",
    "short_circuit_stage",
    "stage_features",
    "task_id",
    "unanalysable",
]


class RewardModel:
    """Score candidate patches with the SWR stages.

    ``lm``: the LM object of the tests stage (shared across calls), needed when the
    stages include ``tests``: ``sweworld.world.swr_lm_from_spec(config.model)`` builds
    it (lazily); ``close_lm``: close it with this model (else the caller does). ``manager``: a
    :class:`~sweworld.sandbox.manager.SessionManager` whose cached base checkouts to use
    (so stages see whole files); without one, checkouts are built from the repository's
    local source (no sandbox needed).
    ``calibrator``: a fitted calibrator (overrides ``config.calibration``).
    """

    def __init__(
        self,
        config: SWRConfig | None = None,
        *,
        lm: Any = None,
        close_lm: bool = False,
        manager: Any = None,
        repo_path: str | Path | None = None,
        calibrator: Any = None,
        **overrides: Any,
    ):
        if config is None:
            config = SWRConfig(**overrides)
        elif overrides:
            raise TypeError("pass either a config or keyword overrides, not both")
        if isinstance(lm, str) or (lm is None and "tests" in config.stages):
            raise TypeError(
                f"the tests stage needs an LM object (lm=), not {lm!r}: build it with "
                f"sweworld.world.swr_lm_from_spec({config.model!r})"
            )
        self.config = config
        self._lm = lm
        self._close_lm = close_lm
        self._manager = manager
        self.repo_path = repo_path
        self._checkouts: dict[tuple[Any, ...], tuple[Path | None, str | None]] = {}
        self.calibrator = calibrator
        self.calibration_path: str | None = None
        #: the learned verdict (None: the legacy combination); a bad file raises here,
        #: naming it (:class:`~sweworld.reward.verdict.VerdictFileError`)
        self.verdict = load_verdict(config.verdict) if config.verdict else None
        if self.verdict is not None and config.mode not in self.verdict.modes:
            from sweworld.reward.verdict import VerdictFileError

            raise VerdictFileError(
                f"{self.verdict.path}: the verdict model has no head for mode {config.mode!r}"
            )
        self._tests_predictor: Any = None
        self._outcome_warned = False
        if calibrator is None and config.calibration and self.verdict is None:
            from sweworld.reward.calibration import load_calibration

            path = config.calibration
            if path == "auto":
                auto = default_calibration_path(config.model, config.mode)
                path = str(auto) if auto.is_file() else None
            if path:
                self.calibrator = load_calibration(path)
                self.calibration_path = str(path)
        self._stages: dict[str, Any] | None = None
        self.preset: RewardPreset = preset(config.reward_preset, threshold=config.threshold)

    # -- stages ---------------------------------------------------------------------------

    def stages(self) -> dict[str, Any]:
        """The configured stage objects by name (made on first use)."""
        if self._stages is None:
            from sweworld.reward.stages import SemanticStage, SyntaxStage, TypecheckStage

            made: dict[str, Any] = {}
            for name in self.config.stages:
                if name == "syntax":
                    made[name] = SyntaxStage()
                elif name == "typecheck":
                    made[name] = TypecheckStage(timeout_s=self.config.typecheck_timeout_s)
                elif name == "semantic":
                    made[name] = SemanticStage()
                elif name == "tests":
                    from sweworld.reward.stages.simulated_tests import SimulatedTestsStage

                    made[name] = SimulatedTestsStage(
                        self._lm,
                        samples=self.config.samples,
                        temperature=self.config.temperature,
                        seed=self.config.seed,
                        use_logprobs=self.config.use_logprobs,
                        timeout_s=self.config.tests_timeout_s,
                        # an in-process model stops generating at the stage's deadline
                        # rather than run on (holding the model) after the stage gave up
                        max_time_s=self.config.tests_timeout_s,
                    )
            self._stages = made
        return self._stages

    # -- base checkout ------------------------------------------------------------------------

    def base_dir(self, task: Any) -> tuple[Path | None, str | None]:
        """The task's base checkout (and None), or (None, why it is not available).

        Uses the session manager's cached checkout when one was given, else builds (once)
        a history-less scrubbed checkout from the repository's local source."""
        key = (task.repo, task.base_commit, getattr(task, "setup_patch", "") or "")
        if key in self._checkouts:
            return self._checkouts[key]
        try:
            if self._manager is not None:
                path = Path(self._manager.checkout(task, history="none").path)
            else:
                from sweworld.sandbox.repos import find_repo_source, materialize

                source = find_repo_source(task.repo, repo_path=self.repo_path)
                path = materialize(
                    source,
                    repo=task.repo,
                    base_commit=task.base_commit,
                    setup_patch=key[2],
                    history="none",
                ).path
            found: tuple[Path | None, str | None] = (Path(path), None)
        except Exception as exc:  # no source for the repository: hunks only
            found = (None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        self._checkouts[key] = found
        return found

    # -- scoring --------------------------------------------------------------------------

    def view(self, task: Any, patch: str | None, base_dir: Path | None) -> CandidateView:
        from sweworld.reward.candidate import view_candidate

        return view_candidate(patch or "", base_dir=base_dir)

    def score(
        self,
        task: Any,
        patch: str | None,
        *,
        base_dir: str | Path | bool | None = True,
        steps: int | None = None,
        outcome: str = "submitted",
        shared_tests: dict[str, StageResult] | None = None,
        deadline: float | None = None,
    ) -> RewardResult:
        """Score one candidate patch for ``task``.

        ``base_dir``: the base checkout to read whole files from; True finds it through the
        session manager (falling back to hunks when the repository is unavailable); False or
        None uses hunks only. ``steps`` / ``outcome``: for the ``shaped`` preset.
        ``shared_tests``: tests-stage results by change signature, read and filled here, so
        that candidates making the same normalised change share one model run.
        ``info["signature"]`` is the candidate's change signature (equivalence classes).
        ``deadline`` (a ``time.monotonic()`` value): stages that run a process stop there,
        and a stage not started by then is not run (an ``error`` result says so).
        """
        started = time.perf_counter()
        info: dict[str, Any] = {"mode": self.config.mode}
        if base_dir is True:
            resolved_dir, why = self.base_dir(task)
            if why:
                info["base_unavailable"] = why
        elif base_dir:
            resolved_dir = Path(base_dir)
        else:
            resolved_dir = None
        stages: dict[str, StageResult] = {}
        evidence: dict[str, float] = {}
        statuses: dict[str, str] | None = None
        try:
            candidate = self.view(task, patch, resolved_dir)
            gold = None
            if self.config.mode == "oracle" and getattr(task, "patch", ""):
                gold = self.view(task, task.patch, resolved_dir)
            ctx = RewardContext(
                task=task,
                candidate=candidate,
                mode=self.config.mode,  # type: ignore[arg-type]
                gold=gold,
                base_dir=resolved_dir,
                results=stages,
                deadline=deadline,
            )
            info["scope"] = candidate.scope
            if candidate.apply_error:
                info["apply_error"] = candidate.apply_error
            for name, stage in self.stages().items():
                if deadline is not None and time.monotonic() >= deadline:
                    stages[name] = StageResult(
                        stage=name, verdict="error", message="not run: the deadline passed"
                    )
                    info["deadline_passed"] = True
                    break
                if name == "tests" and shared_tests is not None:
                    signature = _signature(candidate, stages)
                    if signature not in shared_tests:
                        shared_tests[signature] = _run_stage(stage, ctx)
                    stages[name] = shared_tests[signature]
                else:
                    stages[name] = _run_stage(stage, ctx)
                if stages[name].short_circuit:
                    break
            info["signature"] = _signature(candidate, stages)
            why = unanalysable(candidate)
            if why:
                info["unanalysable"] = why
            evidence, statuses = self._evidence(
                task, patch, candidate, gold, stages, resolved_dir, info
            )
        except Exception as exc:  # never into the trainer
            info["error"] = f"{type(exc).__name__}: {exc}"
            logger.warning("SWR pipeline failed on %s: %s", task_id(task), exc, exc_info=True)
        result = self._finish(task, patch, stages, info, started, steps=steps, outcome=outcome,
                              evidence=evidence, statuses=statuses)  # fmt: skip
        return result

    def tests_predictor(self) -> Any:
        """The outcome model's view of the task's tests (made on first use)."""
        if self._tests_predictor is None:
            from sweworld.reward.test_outcomes import TestPredictor

            spec = None if self.config.outcome == "default" else self.config.outcome
            self._tests_predictor = TestPredictor(spec)
        return self._tests_predictor

    def _evidence(
        self,
        task: Any,
        patch: str | None,
        candidate: CandidateView,
        gold: CandidateView | None,
        stages: Mapping[str, StageResult],
        base: Path | None,
        info: dict[str, Any],
    ) -> tuple[dict[str, float], dict[str, str] | None]:
        """The verdict's inputs, and the outcome model's statuses of the task's tests."""
        from sweworld.reward.verdict import verdict_features

        tests: dict[str, float] | None = None
        statuses: dict[str, str] | None = None
        if self.config.outcome and short_circuit_stage(stages) is None:
            started = time.perf_counter()
            try:
                predicted = self.tests_predictor().predict(
                    task, patch or "", base, self.config.mode
                )
            except Exception as exc:  # the evidence is then missing, never invented
                info["outcome_error"] = f"{type(exc).__name__}: {exc}"[:300]
                if not self._outcome_warned:  # once per reward model, not per candidate
                    self._outcome_warned = True
                    logger.warning("outcome model failed on %s: %s", task_id(task), exc)
                predicted = None
            info["latency_outcome_s"] = round(time.perf_counter() - started, 4)
            if predicted is not None:
                tests, statuses = predicted
                info["outcome_decision"] = {
                    "fails": bool(tests.get("oc_run_fails")),
                    "p_fails": round(float(tests.get("oc_p_run_fails", 0.0)), 4),
                }
                failed = sorted(t for t, s in statuses.items() if s in ("FAILED", "ERROR"))
                info["predicted_tests"] = {
                    "tests": len(statuses),
                    "failing": failed[:20],
                    "n_failing": len(failed),
                }
        return verdict_features(stages, candidate, gold, tests), statuses

    def _finish(
        self,
        task: Any,
        patch: str | None,
        stages: dict[str, StageResult],
        info: dict[str, Any],
        started: float,
        *,
        steps: int | None,
        outcome: str,
        evidence: dict[str, float] | None = None,
        statuses: dict[str, str] | None = None,
    ) -> RewardResult:
        features = stage_features(stages)
        stopped_by = short_circuit_stage(stages)
        info["short_circuit"] = stopped_by
        errors = {n: r.message for n, r in stages.items() if r.verdict == "error"}
        if errors:
            info["stage_errors"] = errors
        if self.verdict is not None:
            missing = None if stopped_by is not None else _verdict_missing(stages, info)
        else:
            missing = None if stopped_by is not None else missing_evidence(stages)
        if "error" in info:
            missing = f"the pipeline failed: {info['error']}"
        if missing is not None:
            info["undetermined"] = missing
        if stopped_by is not None or missing is not None:
            score = 0.0
            info["calibrated"] = False
        elif self.verdict is not None:
            score = float(self.verdict.predict([evidence or {}], self.config.mode)[0])
            info["calibrated"] = True
            info["verdict"] = self.verdict.path
        else:
            score, info["calibrated"] = self._calibrated(features, info, task)
        score = min(1.0, max(0.0, score))
        # an exact stage's refusal or no evidence is never success, whatever the threshold
        # (a threshold of 0 once made an empty patch "resolved" with reward 1)
        resolved = stopped_by is None and missing is None and score >= self.preset.threshold
        if stopped_by is None and missing is None:
            # the verdict decides, the outcome model's statuses of the task's tests being
            # among its evidence; the report below and a simulated run of those tests in a
            # world built with this reward as its judge (:meth:`judge`) agree with it
            info["decided_by"] = "verdict" if self.verdict is not None else "combination"
        tests = stages.get("tests")
        report = (tests.evidence.get("report") if tests is not None else None) or {}
        if not report and statuses:  # one state, one truth: the outcome model's statuses,
            # made to agree with the decision (a report never fails a test of a resolved
            # candidate, nor passes every test of an unresolved one)
            from sweworld.reward.test_outcomes import reconcile_statuses

            agreed = reconcile_statuses(statuses, task, resolved)
            if agreed != statuses:
                info["statuses_reconciled"] = sorted(
                    t for t in agreed if agreed[t] != statuses.get(t)
                )[:20]
            report = make_report(task, agreed, patch=patch or "")
        if stopped_by is not None:  # unresolved, and says which exact stage stopped it
            report = make_report(task, {}, patch=patch or "", status=f"swr_{stopped_by}_failed")
        info["latency_s"] = round(time.perf_counter() - started, 4)
        info["latency_by_stage"] = {n: round(r.latency_s, 4) for n, r in stages.items()}
        reward = compute_reward(
            score, stages, reward_preset=self.preset, steps=steps, outcome=outcome,
            resolved=resolved,
        )  # fmt: skip
        return RewardResult(
            instance_id=str(getattr(task, "instance_id", "")),
            status=UNDETERMINED if missing is not None else RESOLVED if resolved else UNRESOLVED,
            score=score,
            resolved=resolved,
            reward=reward,
            stages=stages,
            report=report,
            features=features,
            info=info,
            evidence=dict(evidence or {}),
        )

    def _calibrated(
        self, features: Mapping[str, float], info: dict[str, Any], task: Any
    ) -> tuple[float, bool]:
        """The calibrated score and True; the prior and False without a calibrator, or when
        it fails or gives no number (a calibration fitted on other features, say): said in
        ``info["calibration_error"]`` and logged, never raised into the trainer."""
        if self.calibrator is not None:
            try:
                score = float(self.calibrator.predict([dict(features)])[0])
                if score != score:  # NaN
                    raise ValueError("the calibrator predicted NaN")
                return score, True
            except Exception as exc:
                info["calibration_error"] = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "SWR calibration failed on %s (the uncalibrated score is used): %s",
                    task_id(task), exc,
                )  # fmt: skip
        return prior_score(features), False

    def score_many(self, task: Any, patches: Sequence[str | None]) -> list[RewardResult]:
        """Score several candidates of one task; candidates with the same normalised change
        share one run of the tests stage (the model sees equivalent code either way)."""
        base, why = self.base_dir(task)
        shared: dict[str, StageResult] = {}
        out: list[RewardResult] = []
        for patch in patches:
            result = self.score(task, patch, base_dir=base or False, shared_tests=shared)
            if why:
                result.info["base_unavailable"] = why
            out.append(result)
        return out

    def judge(self, task: Any, patch: str) -> bool | None:
        """Whether ``patch`` resolves ``task`` as this reward decides it: what a world's
        simulated run of the task's graded tests follows (one state, one truth; the
        :class:`~sweworld.transition.outcome.executor.OutcomeExecutor`'s ``judge``). None
        when the reward cannot decide (``undetermined``: no evidence is not a decision).
        ``task``: a :class:`~sweworld.tasks.schema.Task` or its row (a mapping)."""
        if isinstance(task, Mapping):
            from sweworld.tasks.schema import Task

            task = Task.from_row(dict(task))
        result = self.score(task, patch)
        if result.status == "undetermined":
            return None
        return bool(result.resolved)

    def close(self) -> None:
        """Release the stages (and the tests stage's model with ``close_lm``)."""
        for stage in (self._stages or {}).values():
            close = getattr(stage, "close", None)
            if callable(close):
                close()
        lm, self._lm = (self._lm, None) if self._close_lm else (None, self._lm)
        closer = getattr(lm, "close", None)
        if callable(closer):
            closer()

    def __enter__(self) -> RewardModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _verdict_missing(stages: Mapping[str, StageResult], info: Mapping[str, Any]) -> str | None:
    """Why the verdict cannot decide (its evidence would be made up), or None: the change
    cannot be analysed, the deadline passed before the stages ran, or an exact stage that
    can refute the candidate failed in itself."""
    if info.get("unanalysable"):
        return str(info["unanalysable"])
    if info.get("deadline_passed"):
        return "the deadline passed before the exact stages ran"
    for name in ("syntax", "semantic"):
        result = stages.get(name)
        if result is not None and result.verdict == "error":
            return f"the {name} stage failed: {result.message}"
    return None


def _signature(candidate: CandidateView, stages: Mapping[str, StageResult]) -> str:
    """The candidate's change signature: the semantic stage's when it ran, else computed."""
    semantic = stages.get("semantic")
    if semantic is not None and semantic.evidence.get("signature"):
        return str(semantic.evidence["signature"])
    from sweworld.reward.stages.semantic import change_signature

    return change_signature(candidate)


def _run_stage(stage: Any, ctx: RewardContext) -> StageResult:
    started = time.perf_counter()
    name = getattr(stage, "name", type(stage).__name__)
    try:
        result = stage.run(ctx)
    except Exception as exc:  # a stage must not raise; if it does, it gives no evidence
        logger.warning("SWR stage %s raised on %s", name, task_id(ctx.task), exc_info=True)
        result = StageResult(stage=name, verdict="error", message=f"{type(exc).__name__}: {exc}")
    else:
        if result.verdict == "error":
            logger.warning("SWR stage %s failed on %s: %s", name, task_id(ctx.task), result.message)
    if not result.latency_s:
        result.latency_s = time.perf_counter() - started
    return result


def task_id(task: Any) -> str:
    """The task's instance id for messages (any task-like object)."""
    if isinstance(task, Mapping):
        return str(task.get("instance_id", ""))
    return str(getattr(task, "instance_id", ""))
