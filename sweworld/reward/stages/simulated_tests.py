"""Stage 4 of SWR, simulated tests: the SWR model writes the test report, the shared grader
grades it.

For one candidate: the candidate as the model may read it (:mod:`.model_view`: no comments,
docstrings, notes or preambles, so words addressed to the judge never reach it) -> the SWR
prompt (:mod:`sweworld.reward.swr.prompt`, oracle or blind, budgeted with the model's own
``count_tokens`` when it has one) ->
``samples`` reports from the language model -> each report read back
(:func:`~sweworld.reward.swr.parse_swr_output`), completed, rendered as the log the
repository's test command prints (:func:`~sweworld.execution.grading.render_log`) and graded
by the same functions as a real run (``parse_log`` + ``make_report``) into a
``report.json``-shaped verdict.

Reports are written two ways (``decoding``): **generated** (one request, ``n=samples``;
in-process models get the answer's start, ``{"tests": {``, as a prefill, and stop at the
report's end), or, in oracle mode with an in-process model, **constrained**: the listed
tests' ids and the JSON are forced and the model only chooses each status and ``resolved``
(:func:`~sweworld.reward.swr.constrained_reports`), which is well formed by construction and,
on a CPU, several times faster than generating the same report.

- **Oracle** grading uses the task's FAIL_TO_PASS / PASS_TO_PASS lists. A listed test the
  report omits (or the prompt could not show) defaults to its status *without* the fix:
  PASS_TO_PASS -> PASSED (it passed before), FAIL_TO_PASS -> FAILED (it failed before): a
  candidate is only credited with the fixes the model vouches for.
- **Blind** mode has no lists: the reported tests are graded as tests that must pass, and
  the verdict also needs the model's own ``resolved`` (inferred from the tests when the
  report lacks it: true when at least one test is reported and all pass). A report that
  names no test is no evidence (``{"tests": {}, "resolved": true}`` is not a pass).

The probability of resolution:

- ``p_samples``: the mean over samples of the graded ``resolved`` (an unreadable report
  counts as unresolved);
- ``p_logprob`` (``use_logprobs`` and a backend with ``choice_logprobs``): P(``true``) vs
  P(``false``) for the ``"resolved": `` slot written after the representative report (the
  first readable sample whose graded verdict is the majority's; with ``samples=1`` the
  greedy report), re-rendered canonically;
- ``score`` = the average of the two when both exist, else the one that does. Verdict
  ``pass`` when ``score >= 0.5``.

Never raises: an LM that is down or too slow, or a prompt that does not fit (budgets are
halved once, then it gives up) gives verdict ``error`` with the reason; every report
unreadable gives ``error`` too, and so does a prompt that shows no changed line of some
changed file (a padded patch must not hide its change from the model). An empty candidate
gets score 0 without a model call (as SWE-World's SWR).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sweworld.models import LazyLM
from sweworld.reward.stages.model_view import model_view_patch
from sweworld.reward.stages.swr_samples import (
    REPORT_STOPS,
    Sample,
    grade_sample,
    hidden_files,
    is_empty_patch,
    opaque_files,
    sample_report,
)
from sweworld.reward.swr import (
    EMBEDDED_SWR_CONFIG,
    SWR_FORMAT_VERSION,
    SWR_PREFILL,
    SWR_REASONING_PREFILL,
    SWRPrompt,
    SWRPromptConfig,
    build_swr_prompt,
    swr_resolved_prefix,
)
from sweworld.reward.swr.decoding import RESOLVED_CHOICES, constrained_reports
from sweworld.reward.types import RewardContext, StageResult, Verdict

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

__all__ = [
    "DECODINGS",
    "DEFAULT_LM_SPEC",
    "RESOLVED_CHOICES",
    "SimulatedTestsStage",
    "clear_shared_lms",
    "share_lm",
    "shown_candidate_patch",
]

DEFAULT_LM_SPEC = "embedded"
DECODINGS = ("auto", "generate", "constrained")
_LOG_CHARS = 8000

_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


def share_lm(key: str, build: Callable[[], Any]) -> Any:
    """The model shared in this process under ``key`` (a spec), made by ``build()`` the
    first time: in-process SWR models load in seconds, so every rewarder of the process
    shares one (``sweworld.world.swr_lm_from_spec`` builds them through here)."""
    with _SHARED_LOCK:
        lm = _SHARED.get(key)
        if lm is None:
            lm = _SHARED[key] = build()
        return lm


def clear_shared_lms() -> None:
    """Close and forget the shared in-process models."""
    with _SHARED_LOCK:
        models = list(_SHARED.values())
        _SHARED.clear()
    for lm in models:
        lm.close()


def _without_reset_files(patch: str, task: Any, mode: str, evidence: dict[str, Any]) -> str:
    """Oracle mode: ``patch`` without its changes to the files the task's test patch
    writes. The harness resets those files before it applies the test patch, so the
    candidate's version of them never runs; shown, they let a candidate write its own
    ``assert True`` version of a FAIL_TO_PASS test for the judge to read."""
    from sweworld.tasks.patches import PatchError, files_in_patch, split_patch

    test_patch = _get_field(task, "test_patch") if mode == "oracle" else ""
    if not test_patch:
        return patch
    try:
        reset = set(files_in_patch(str(test_patch), include_old_paths=True))
        parts = split_patch(patch)
    except (PatchError, ValueError, IndexError, KeyError):
        return patch
    kept = [p for p in parts if p.path not in reset and p.old_path not in reset]
    if len(kept) == len(parts):
        return patch
    evidence["files_reset"] = sorted({p.path for p in parts} - {p.path for p in kept})[:20]
    return "".join(p.text for p in kept)


def shown_candidate_patch(patch: str, task: Any, mode: str) -> str:
    """The candidate as the SWR model reads it in ``mode``: without changes to files the
    test patch resets (oracle), comments, docstrings and notes blanked (``model_view``).
    What :class:`SimulatedTestsStage` shows; the trainer builds its examples with it."""
    return model_view_patch(_without_reset_files(str(patch or ""), task, mode, {}))


def _get_field(task: Any, name: str) -> Any:
    if isinstance(task, Mapping):
        return task.get(name)
    return getattr(task, name, None)


class SimulatedTestsStage:
    """Stage ``tests``: the probability that the candidate resolves the task, from reports
    the SWR model writes (see the module docstring).

    Args:
        lm: an LM object (kept, shared with the caller, never closed here):
            ``sweworld.world.swr_lm_from_spec(spec)`` builds one from a spec (lazily; the
            in-process models shared per process, see :func:`share_lm`). A spec string or
            None is refused (``TypeError``).
        samples: reports per candidate; 1 is one greedy report, more are sampled at
            ``temperature`` with ``seed`` (one request, ``n=samples``).
        temperature: sampling temperature when ``samples > 1``.
        seed: seed of the sampled reports (same seed, same reports).
        use_logprobs: also read P(resolved) from the log-probabilities of ``true`` /
            ``false`` when the backend gives them.
        config: prompt budgets (:class:`~sweworld.reward.swr.SWRPromptConfig`); default
            :data:`~sweworld.reward.swr.EMBEDDED_SWR_CONFIG` for the embedded model, the
            large defaults otherwise.
        max_tokens: generation budget per report; default from the number of listed tests
            (oracle) or a fixed budget (blind), capped at 448 tokens for the embedded model
            and 2,048 otherwise.
        prefill: start the answer with ``{"tests": {`` for the model; None: only for
            in-process models (a 135M model then answers in the format), whose backends
            continue an assistant turn.
        max_time_s: time budget of one generation call for in-process models (unfinished
            reports are read as far as they got).
        timeout_s: deadline of the whole stage (prompt, model calls, retries, reading); past
            it the stage gives no verdict (``error``, evidence ``timed_out``) and the call
            returns, whatever the model does. None: no deadline.
        decoding: ``generate`` (free generation, ``n=samples``), ``constrained`` (oracle
            mode: each listed test's status chosen among the statuses with
            ``choice_logprobs``; the ids and JSON are forced, so every report is well formed)
            or ``auto`` (constrained for in-process models in oracle mode, where the cached
            prefix makes a choice cost one forward pass of a few tokens; generate
            otherwise). Blind mode and reasoning models always generate.
    """

    name = "tests"

    def __init__(
        self,
        lm: Any = None,
        *,
        samples: int = 3,
        temperature: float = 0.7,
        seed: int = 0,
        use_logprobs: bool = True,
        config: SWRPromptConfig | None = None,
        max_tokens: int | None = None,
        prefill: bool | None = None,
        max_time_s: float | None = None,
        decoding: str = "auto",
        timeout_s: float | None = 600.0,
    ):
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
        if samples < 1:
            raise ValueError(f"samples must be at least 1, got {samples}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if lm is None or isinstance(lm, str):
            raise TypeError(
                f"SimulatedTestsStage takes an LM object, not {lm!r}: build it with "
                f"sweworld.world.swr_lm_from_spec(spec) (default spec {DEFAULT_LM_SPEC!r})"
            )
        self._lm: Any = lm
        self.samples = int(samples)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.use_logprobs = bool(use_logprobs)
        self.config = config
        self.max_tokens = max_tokens
        self.prefill = prefill
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s}")
        self.max_time_s = max_time_s
        self.decoding = decoding
        self.timeout_s = timeout_s
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ model

    @property
    def lm(self) -> Any:
        """The language model; a :class:`~sweworld.models.LazyLM` is loaded now and its
        model returned (the backend checks read it: in-process, log-probabilities)."""
        lm = self._lm
        return lm.load() if isinstance(lm, LazyLM) else lm

    def _is_embedded(self, lm: Any) -> bool:
        spec = getattr(self._lm, "spec", None) if isinstance(self._lm, LazyLM) else None
        if isinstance(spec, str):
            return spec.startswith("embedded")
        info = getattr(lm, "_extra_info", None)
        if isinstance(info, Mapping) and info.get("embedded"):
            return True
        return str(getattr(lm, "name", "")).startswith("smollm2-135m")

    def _in_process(self, lm: Any) -> bool:
        from sweworld.models.transformers_lm import TransformersLM

        return isinstance(lm, TransformersLM)

    def prompt_config(self, lm: Any) -> SWRPromptConfig:
        """The budgets in use for ``lm``."""
        if self.config is not None:
            return self.config
        return EMBEDDED_SWR_CONFIG if self._is_embedded(lm) else SWRPromptConfig()

    # ------------------------------------------------------------------ running

    def run(self, ctx: RewardContext) -> StageResult:
        """Judge ``ctx.candidate``; never raises (see the module docstring)."""
        started = time.perf_counter()
        try:
            result = self._run_with_deadline(ctx)
        except Exception as exc:  # the stage's own failure: no evidence, not a verdict
            logger.debug("simulated_tests stage failed", exc_info=True)
            result = StageResult(
                self.name,
                "error",
                message=f"simulated tests failed: {type(exc).__name__}: {exc}",
                evidence={"mode": getattr(ctx, "mode", None), "error": repr(exc)},
            )
        result.latency_s = time.perf_counter() - started
        return result

    def _run_with_deadline(self, ctx: RewardContext) -> StageResult:
        """``_run`` within ``timeout_s``: a model that hangs cannot hold the caller (the
        worker is abandoned; its late result is dropped)."""
        if self.timeout_s is None:
            return self._run(ctx)
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = self._run(ctx)
            except BaseException as exc:  # handed to the caller below
                box["error"] = exc

        worker = threading.Thread(target=work, name="swr-tests-stage", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            logger.warning("simulated_tests stage timed out after %.1f s", self.timeout_s)
            return StageResult(
                self.name,
                "error",
                message=f"simulated tests did not finish within {self.timeout_s:g} s",
                evidence={"mode": getattr(ctx, "mode", None), "timed_out": True},
            )
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _run(self, ctx: RewardContext) -> StageResult:
        from sweworld.models.base import ContextTooLong, LMError

        mode = ctx.mode
        if mode not in ("oracle", "blind"):
            raise ValueError(f"mode must be 'oracle' or 'blind', got {mode!r}")
        task = ctx.task
        candidate = ctx.candidate
        patch = str(getattr(candidate, "patch", "") or "")
        evidence: dict[str, Any] = {"mode": mode, "prompt_version": SWR_FORMAT_VERSION}
        if getattr(candidate, "apply_error", None):
            evidence["apply_error"] = candidate.apply_error
        effective = _without_reset_files(patch, task, mode, evidence)
        if is_empty_patch(patch) or is_empty_patch(effective):
            evidence["empty_patch"] = True
            evidence["report"] = sample_report(task, mode, {}, patch, False)
            return StageResult(
                self.name,
                "fail",
                0.0,
                message="empty candidate: nothing to test"
                if is_empty_patch(patch)
                else "only files the test patch replaces are changed: nothing to test",
                evidence=evidence,
            )
        try:
            lm = self.lm
        except Exception as exc:
            evidence["error"] = f"{type(exc).__name__}: {exc}"
            return StageResult(
                self.name, "error", message=f"no SWR model: {evidence['error']}", evidence=evidence
            )
        evidence["model"] = getattr(lm, "name", type(lm).__name__)
        adapter = getattr(lm, "adapter", None)
        evidence["adapter"] = getattr(adapter, "name", None) if adapter is not None else None
        # the model reads the code only: comments, docstrings and notes addressed to it are
        # blanked (model_view.py); the exact stages read the real patch
        shown_patch = model_view_patch(effective)
        counter = getattr(lm, "count_tokens", None)
        evidence["token_counter"] = "model" if callable(counter) else "approx"
        config = self.prompt_config(lm)
        timings: dict[str, float] = {}
        shrunk = False
        while True:
            t0 = time.perf_counter()
            prompt = build_swr_prompt(
                task,
                shown_patch,
                mode=mode,
                config=config,
                base_dir=ctx.base_dir,
                count_tokens=counter if callable(counter) else None,
            )
            timings["prompt_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                generations, prefix = self._generate(lm, prompt, config)
            except ContextTooLong as exc:
                timings["generate_s"] = time.perf_counter() - t0
                if not shrunk:
                    config, shrunk = config.scaled(0.5), True
                    continue
                return self._lm_error(evidence, exc, prompt, timings, shrunk)
            except LMError as exc:
                timings["generate_s"] = time.perf_counter() - t0
                return self._lm_error(evidence, exc, prompt, timings, shrunk)
            timings["generate_s"] = time.perf_counter() - t0
            break
        evidence.update(self._prompt_evidence(prompt, shrunk))
        evidence["prompt_tokens"] = max((g.prompt_tokens for g in generations), default=0) or (
            prompt.prompt_tokens
        )
        hidden, seen = hidden_files(prompt, shown_patch)
        hidden = sorted({*hidden, *opaque_files(getattr(candidate, "files", ()))})
        evidence["patch_shown"] = round(seen, 4)
        if hidden:  # a verdict on changes the model did not see is no evidence
            evidence["files_not_shown"] = hidden[:20]
            return StageResult(
                self.name,
                "error",
                message=(
                    f"the model saw no change of {len(hidden)} changed file(s) "
                    f"({', '.join(hidden[:3])}): the patch does not fit the prompt"
                ),
                evidence=evidence,
            )
        evidence["prefill"] = prefix
        evidence["decoding"] = self.decoding_for(lm, prompt, config)
        samples = [
            grade_sample(task, mode, patch, prompt, index, prefix, gen)
            for index, gen in enumerate(generations)
        ]
        # a report naming no test is no evidence (blind mode has no lists to fill it from)
        readable = [s for s in samples if s.parsed.ok and (mode == "oracle" or s.statuses)]
        p_samples = sum(1.0 for s in samples if s.resolved) / len(samples) if samples else 0.0
        evidence["samples"] = [s.evidence() for s in samples]
        evidence["samples_parsed"] = len(readable)
        evidence["samples_resolved"] = sum(1 for s in samples if s.resolved)
        if not readable:
            evidence.update(p_samples=None, p_logprob=None, timings_s=timings)
            evidence["report"] = sample_report(task, mode, {}, patch, False)
            errors = sorted({str(s.parsed.error or "the report names no test") for s in samples})
            return StageResult(
                self.name,
                "error",
                message=f"no readable report in {len(samples)} sample(s): {'; '.join(errors)}",
                evidence=evidence,
            )
        majority = p_samples >= 0.5
        chosen = next((s for s in readable if s.resolved == majority), readable[0])
        evidence["representative"] = chosen.index
        evidence["report"] = chosen.report
        log = chosen.log
        evidence["log"] = log if len(log) <= _LOG_CHARS else log[:_LOG_CHARS] + "\n... [cut]\n"
        t0 = time.perf_counter()
        p_logprob = self._logprob(lm, prompt, chosen, config, evidence)
        timings["logprob_s"] = time.perf_counter() - t0
        score = p_samples if p_logprob is None else (p_samples + p_logprob) / 2.0
        score = min(1.0, max(0.0, score))
        evidence.update(p_samples=p_samples, p_logprob=p_logprob, timings_s=timings)
        verdict: Verdict = "pass" if score >= 0.5 else "fail"
        parts = [f"{evidence['samples_resolved']}/{len(samples)} reports resolved"]
        if p_logprob is not None:
            parts.append(f"P(resolved=true) {p_logprob:.2f}")
        message = f"simulated tests ({mode}): p={score:.2f} ({', '.join(parts)})"
        return StageResult(self.name, verdict, score, message=message, evidence=evidence)

    # ------------------------------------------------------------------ pieces

    def decoding_for(self, lm: Any, prompt: SWRPrompt, config: SWRPromptConfig) -> str:
        """``constrained`` or ``generate``: what ``decoding`` means for this prompt and LM."""
        from sweworld.models.base import supports_choice_logprobs

        possible = (
            prompt.mode == "oracle"
            and bool(prompt.expected_tests)
            and not config.with_reasoning
            and supports_choice_logprobs(lm)
        )
        if self.decoding == "constrained":
            return "constrained" if possible else "generate"
        if self.decoding == "auto":
            return "constrained" if possible and self._in_process(lm) else "generate"
        return "generate"

    def _generate(self, lm: Any, prompt: SWRPrompt, config: SWRPromptConfig) -> tuple[list, str]:
        from sweworld.models.base import GenerationRequest

        if self.decoding_for(lm, prompt, config) == "constrained":
            reports = constrained_reports(
                lm,
                prompt,
                samples=self.samples,
                temperature=self.temperature,
                seed=self.seed,
                max_time_s=self.max_time_s,
            )
            return reports, ""
        in_process = self._in_process(lm)
        use_prefill = in_process if self.prefill is None else self.prefill
        reasoning = config.with_reasoning
        prefix = (SWR_REASONING_PREFILL if reasoning else SWR_PREFILL) if use_prefill else ""
        messages = list(prompt.messages)
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
        greedy = self.samples == 1
        # structured output (servers that have it): every report well formed by construction
        schema = None
        if not prefix:
            from sweworld.reward.swr.prompt import swr_report_schema

            expected = prompt.expected_tests if prompt.mode == "oracle" else ()
            schema = swr_report_schema(expected, with_reasoning=reasoning)
        request = GenerationRequest(
            messages=messages,
            max_tokens=self._max_tokens(lm, prompt, config),
            temperature=0.0 if greedy else self.temperature,
            seed=None if greedy else self.seed,
            stop=REPORT_STOPS if in_process and not reasoning else (),
            n=self.samples,
            json_schema=schema,
        )
        if in_process and self.max_time_s is not None:
            return lm.generate([request], max_time=self.max_time_s)[0], prefix
        return lm.generate([request])[0], prefix

    def _max_tokens(self, lm: Any, prompt: SWRPrompt, config: SWRPromptConfig) -> int:
        if self.max_tokens:
            return int(self.max_tokens)
        embedded = self._is_embedded(lm)
        cap = 448 if embedded else 2048
        count = getattr(lm, "count_tokens", None) or (lambda text: (len(text) + 3) // 4)
        if prompt.expected_tests:
            need = count('{"tests": {}, "resolved": false}') + 8
            need += sum(count(f'"{test}": "PASSED", ') for test in prompt.expected_tests)
        else:
            need = 160 if embedded else 1024
        if config.with_reasoning:
            need += 256
        return max(32, min(cap, need))

    def _logprob(
        self,
        lm: Any,
        prompt: SWRPrompt,
        chosen: Sample,
        config: SWRPromptConfig,
        evidence: dict[str, Any],
    ) -> float | None:
        from sweworld.models.base import (
            LMError,
            choice_probabilities,
            lm_choice_logprobs,
            supports_choice_logprobs,
        )

        if not self.use_logprobs:
            return None
        known = chosen.info.get("logprobs")
        if isinstance(known, Mapping) and set(known) == set(RESOLVED_CHOICES):
            evidence["logprobs"] = {k: round(float(v), 6) for k, v in known.items()}
            return float(choice_probabilities(known)["true"])
        if not supports_choice_logprobs(lm):
            evidence["logprob_error"] = "the backend gives no log-probabilities"
            return None
        tests = chosen.parsed.tests
        reported = (
            {t: tests[t] for t in prompt.expected_tests if t in tests}
            if prompt.mode == "oracle"
            else dict(tests)
        )
        reasoning = chosen.parsed.reasoning if config.with_reasoning else None
        prefix = swr_resolved_prefix(reported, reasoning)
        try:
            logprobs = lm_choice_logprobs(lm, prompt.messages, RESOLVED_CHOICES, prefix=prefix)
        except LMError as exc:
            evidence["logprob_error"] = f"{type(exc).__name__}: {exc}"
            return None
        evidence["logprobs"] = {k: round(float(v), 6) for k, v in logprobs.items()}
        return float(choice_probabilities(logprobs)["true"])

    def _prompt_evidence(self, prompt: SWRPrompt, shrunk: bool) -> dict[str, Any]:
        return {
            "expected_tests": len(prompt.expected_tests),
            "tests_not_shown": prompt.tests_not_shown,
            "test_command": prompt.test_command,
            "test_files": list(prompt.test_files),
            "truncated": dict(prompt.truncated),
            "budgets_shrunk": shrunk,
        }

    def _lm_error(
        self,
        evidence: dict[str, Any],
        exc: Exception,
        prompt: SWRPrompt,
        timings: dict[str, float],
        shrunk: bool,
    ) -> StageResult:
        evidence.update(self._prompt_evidence(prompt, shrunk))
        evidence["prompt_tokens"] = prompt.prompt_tokens
        evidence["error"] = f"{type(exc).__name__}: {exc}"
        evidence["timings_s"] = timings
        return StageResult(
            self.name,
            "error",
            message=f"the SWR model failed: {evidence['error']}",
            evidence=evidence,
        )

    def close(self) -> None:
        """Nothing to release: the model is the caller's (shared and given models stay
        open)."""
