"""SimulatedExecutor: execution predicted by SWT, exact where exact is cheap, consistent.

For each intercepted command:

1. facts: what can be computed without running (a missing file, a syntax error in the
   executed file, an import that certainly fails, the tests pytest would collect); when they
   settle the whole answer (a missing script, a program that does not compile) it is
   returned as is (``info["source"] = "exact"``);
   a command with no executable target gets a hint to change it, as SWE-World answers;
2. cache: the same command on the same workspace state (content hash of every changed file
   and of the files the command runs) returns the same prediction;
3. the model: context -> chat messages -> generation -> JSON parsed and repaired -> checked
   against the facts and the session's ledger (test statuses already predicted for this same
   state); a failed check resamples with the next seed and temperature of a fixed schedule,
   up to ``max_attempts``, then falls back to a conservative answer and says so in ``info``;
4. memory: per session, the last steps (for the next contexts) and the ledger; sessions
   snapshot, restore and fork it together with their files (hooks called by the session).

Every step has a deadline (``step_timeout`` seconds for everything: facts, context, model
calls, resamples, validation). The step runs in a worker thread; when the deadline passes
the caller gets the conservative answer at once (``info["timed_out"] = True``), and the
worker stops at its next stage boundary (an in-process model is given the remaining time)
without touching the cache, the ledger or the history. Failures (the model unavailable, an
answer that keeps failing validation, a timeout, an internal error) are said in ``info``
(``source``, ``error``, ``attempts``) and logged on this module's logger (quiet unless the
application configures logging). All text returned is valid UTF-8.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import threading
import time
from dataclasses import replace
from typing import Any

from sweworld.models import LazyLM
from sweworld.models.text import valid_text
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.transition.step_state import (
    PredictionCache,
    SessionMemory,
    StepDeadline,
    StepTimeout,
    keep_until_exit,
)
from sweworld.transition.types import Prediction, WorkspaceView

__all__ = [
    "DEFAULT_SCHEDULE",
    "DEFAULT_STEP_TIMEOUT",
    "PredictionCache",
    "SessionMemory",
    "SimulatedExecutor",
    "StepTimeout",
]

log = logging.getLogger(__name__)

#: Most workers of timed-out steps still waiting for the model: past it the model is not
#: asked again until one returns (a model that never answers leaked one thread per step).
MAX_STALLED_WORKERS = 16

#: Default deadline of one simulated step, in seconds (three attempts of the embedded model
#: on a CPU fit; a server-backed model answers far sooner).
DEFAULT_STEP_TIMEOUT = 300.0

# (temperature, seed offset) for attempt 1, 2, ...: greedy first, then seeded samples.
DEFAULT_SCHEDULE: tuple[tuple[float, int], ...] = ((0.0, 0), (0.7, 1), (0.7, 2))

# Budgets for the embedded default on a CPU: a 135M model decodes ~10 tokens/s and reads
# ~400 prompt tokens/s on two cores, so its prompt and answer are kept short.
EMBEDDED_BUDGETS = {
    "problem_tokens": 300,
    "diff_tokens": 400,
    "executed_tokens": 700,
    "related_tokens": 250,
    "history_tokens": 150,
    "gold_patch_tokens": 300,
    "test_patch_tokens": 300,
    "tests_tokens": 100,
    "facts_tokens": 150,
    "total_tokens": 1800,
    "history_steps": 2,
}
EMBEDDED_MAX_TOKENS = 256


def _is_embedded(lm: Any) -> bool:
    """Whether ``lm`` is the embedded model by its spec (a :class:`~sweworld.models.LazyLM`'s
    ``spec``; an LM made elsewhere is not known to be, the world says so itself)."""
    spec = getattr(lm, "spec", None) if isinstance(lm, LazyLM) else None
    return isinstance(spec, str) and spec.startswith("embedded")


def request_time_left(request: Any, limit: float | None) -> float | None:
    """Seconds a request may take: ``limit`` or what is left of the request's own
    ``deadline`` (the command's time limit, set by the session), whichever is smaller."""
    time_left = getattr(request, "time_left", None)  # duck-typed requests have none
    return limit if time_left is None else time_left(limit)


def _takes_max_time(lm: Any) -> bool:
    try:
        return "max_time" in inspect.signature(lm.generate).parameters
    except (TypeError, ValueError):
        return False


class SimulatedExecutor:
    """Predicts execution with a language model (the embedded default unless told otherwise).

    Args:
        lm: an :class:`~sweworld.models.base.LM` object; a :class:`~sweworld.models.LazyLM`
            (``sweworld.world.lm_from_spec(spec, lazy=True)``) is loaded on first use, and
            its ``spec`` says whether it is the embedded model (short budgets). None: the
            embedded model, loaded on first use. A spec string is refused (``TypeError``):
            build it with ``sweworld.world.lm_from_spec``.
        mode: ``"blind"`` (no gold patch, test patch or test lists in the context) or
            ``"oracle"``.
        context: a :class:`~sweworld.transition.context.ContextConfig` (budgets).
        max_tokens: generation budget per attempt (default 256 for the embedded model, whose
            context budgets are also cut to ~1,800 tokens to fit a CPU; 512 otherwise).
        schedule: (temperature, seed offset) per attempt; its length bounds the attempts.
        seed: base seed; the same seed, state and command give the same answer.
        with_reasoning: ask the model for a ``reasoning`` field before the JSON answer.
        prefill: start the model's answer with ``{"stdout": "`` (in-process models only).
        step_timeout: seconds one step may take in all (facts, model calls, resamples,
            validation); then the conservative answer is returned with
            ``info["timed_out"] = True``. None: no deadline.
    """

    name = "simulated"

    def __init__(
        self,
        lm: Any = None,
        *,
        mode: str = "oracle",
        context: Any = None,
        max_tokens: int | None = None,
        schedule: tuple[tuple[float, int], ...] = DEFAULT_SCHEDULE,
        seed: int = 0,
        with_reasoning: bool = False,
        cache: PredictionCache | None = None,
        prefill: bool = True,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ):
        if mode not in ("blind", "oracle"):
            raise ValueError(f"mode must be 'blind' or 'oracle', not {mode!r}")
        if step_timeout is not None and not step_timeout > 0:
            raise ValueError(f"step_timeout must be a positive number of seconds or None, "
                             f"not {step_timeout!r}")  # fmt: skip
        self.step_timeout = step_timeout
        if isinstance(lm, str):
            raise TypeError(
                f"SimulatedExecutor takes an LM object, not the spec {lm!r}: build it with "
                "sweworld.world.lm_from_spec(spec, lazy=True)"
            )
        self._lm: Any = LazyLM("embedded") if lm is None else lm
        self.mode = mode
        self._context_config = context
        embedded = _is_embedded(self._lm)
        self.max_tokens = max_tokens or (EMBEDDED_MAX_TOKENS if embedded else 512)
        self._small_context = embedded and context is None
        self.schedule = tuple(schedule) or DEFAULT_SCHEDULE
        self.seed = seed
        self.with_reasoning = with_reasoning
        self.prefill = prefill
        self.cache = cache or PredictionCache()
        self._memory: dict[str, SessionMemory] = {}
        self._lock = threading.Lock()
        self._stalled = 0  # workers of timed-out steps still running (under _lock)

    # ------------------------------------------------------------------ model

    @property
    def lm(self) -> Any:
        """The model; a :class:`~sweworld.models.LazyLM` is loaded now and its model
        returned (what the backend checks below read: ``max_time``, transformers)."""
        lm = self._lm
        return lm.load() if isinstance(lm, LazyLM) else lm

    @property
    def model_name(self) -> str:
        return str(getattr(self._lm, "name", "embedded"))

    def context_config(self) -> Any:
        """The context budgets; counted with the model's tokenizer when the loaded model has
        one (``lm.exact_tokens``), else with the config's counter (characters / 4)."""
        from sweworld.transition.context import ContextConfig

        if self._context_config is not None:
            cfg = self._context_config
        elif self._small_context:
            cfg = ContextConfig(mode=self.mode, **EMBEDDED_BUDGETS)
        else:
            cfg = ContextConfig(mode=self.mode)
        if getattr(cfg, "mode", self.mode) != self.mode:
            cfg = replace(cfg, mode=self.mode)
        if getattr(cfg, "count_tokens", None) is None:
            lm = self.lm
            if getattr(lm, "exact_tokens", False):
                cfg = replace(cfg, count_tokens=lm.count_tokens)
        return cfg

    # ------------------------------------------------------------------ memory hooks

    def _mem(self, session_id: str) -> SessionMemory:
        with self._lock:
            return self._memory.setdefault(session_id, SessionMemory())

    def snapshot_session(self, session_id: str) -> SessionMemory:
        return copy.deepcopy(self._mem(session_id))

    def restore_session(self, session_id: str, memory: SessionMemory) -> None:
        with self._lock:
            self._memory[session_id] = copy.deepcopy(memory)

    def fork_session(self, source_id: str, new_id: str) -> None:
        with self._lock:
            self._memory[new_id] = copy.deepcopy(self._memory.get(source_id, SessionMemory()))

    def close_session(self, session_id: str) -> None:
        with self._lock:
            self._memory.pop(session_id, None)

    # ------------------------------------------------------------------ execution

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        started = time.perf_counter()
        timings: dict[str, float] = {}
        # the step's own deadline (a client's per-request timeout) when it is shorter
        step = StepDeadline(request_time_left(request, self.step_timeout))
        if step.deadline is None:
            self._run_step(request, started, timings, step)
        else:
            worker = threading.Thread(
                target=self._run_step,
                args=(request, started, timings, step),
                name="sweworld-simulated-step",
                daemon=True,
            )
            worker.start()
            remaining = step.remaining()
            if not step.done.wait(max(remaining or 0.0, 0.0)) and step.give_up():
                with self._lock:
                    if not step.done.is_set():
                        self._stalled += 1
                        step.stalled = True
                        keep_until_exit(worker)
                return self._timed_out(request, step, started, timings)
            step.done.wait()
        if step.result is not None:
            return step.result
        if isinstance(step.error, StepTimeout):
            return self._timed_out(request, step, started, timings)
        exc = step.error
        log.error(
            "simulator failed on %r: %s: %s", request.command, type(exc).__name__, exc,
            exc_info=exc,
        )  # fmt: skip
        return ExecutionResult(
            stderr=valid_text(
                f"sweworld: the simulator failed on `{request.command}`: "
                f"{type(exc).__name__}: {exc}\n"
            ),
            exit_code=1,
            info=self._info("error", started, timings, error=repr(exc), attempts=step.attempts),
        )

    def _run_step(
        self,
        request: ExecutionRequest,
        started: float,
        timings: dict[str, float],
        step: StepDeadline,
    ) -> None:
        try:
            step.result = self._execute(request, started, timings, step)
        except BaseException as exc:  # never raise into the session
            step.error = exc
        finally:
            with self._lock:
                step.done.set()
                if step.stalled:
                    self._stalled -= 1

    def _timed_out(
        self,
        request: ExecutionRequest,
        step: StepDeadline,
        started: float,
        timings: dict[str, float],
    ) -> ExecutionResult:
        from sweworld.transition.validate import FALLBACK_EXIT_CODE, conservative_prediction

        log.warning(
            "simulated step %r timed out after %.1f s (during %s); conservative answer",
            request.command, step.timeout, step.stage,
        )  # fmt: skip
        pred = conservative_prediction(request, step.facts)
        if pred.exit_code == FALLBACK_EXIT_CODE:  # no exact answer: say why nothing is shown
            pred = replace(
                pred,
                stderr=pred.stderr + f"sweworld: the simulation did not finish within "
                f"{step.timeout:.3g} s (the step's deadline) and was stopped.\n",
            )
        info = self._info(
            "fallback", started, dict(timings), fallback=True, timed_out=True,
            timeout_s=step.timeout, stage=step.stage, attempts=list(step.attempts),
            cache_hit=False, error=f"the step took longer than {step.timeout:.3g} s",
        )  # fmt: skip
        return self._finish(request, self._mem(request.session_id), pred, info)

    def _info(
        self, source: str, started: float, timings: dict[str, float], **extra: Any
    ) -> dict[str, Any]:
        return {
            "executor": self.name,
            "executed": False,
            "simulated": True,
            "source": source,
            "model": self.model_name,
            "mode": self.mode,
            "latency_s": time.perf_counter() - started,
            "timings_s": dict(timings),
            **extra,
        }

    def _execute(
        self,
        request: ExecutionRequest,
        started: float,
        timings: dict[str, float],
        step: StepDeadline | None = None,
    ) -> ExecutionResult | None:
        from sweworld.transition.facts import compute_facts, no_target_hint

        step = step or StepDeadline(None)
        step.check("facts")
        view = WorkspaceView.from_request(request)
        t0 = time.perf_counter()
        facts = compute_facts(request, view)
        step.facts = facts
        hint = getattr(facts, "hint", None) or no_target_hint(request, view)
        timings["facts"] = time.perf_counter() - t0
        step.check("facts")
        memory = self._mem(request.session_id)
        if hint is not None:
            pred = Prediction(stderr=hint if hint.endswith("\n") else hint + "\n", exit_code=2)
            return self._commit(step, request, memory, pred, self._info("hint", started, timings))
        exact = getattr(facts, "exact", None)
        if exact is not None:
            info = self._info("exact", started, timings)
            return self._commit(step, request, memory, exact, info)
        t0 = time.perf_counter()
        state = view.state_hash(
            tuple(p for p in getattr(facts, "executed_files", ()) if p.startswith("/tmp/"))
        )
        key = self._key(request, state)
        timings["hash"] = time.perf_counter() - t0
        cached = self.cache.get(key)
        if cached is not None:
            pred, info = cached
            info = {**info, "cache_hit": True, "latency_s": time.perf_counter() - started}
            return self._commit(step, request, memory, pred, info)
        pred, info = self._predict(request, view, facts, memory, state, started, timings, step)
        if not step.commit():
            return None
        if not info.get("fallback"):  # a failure is not remembered: the next call retries
            self.cache.put(key, pred, {k: v for k, v in info.items() if k != "latency_s"})
            self._record_ledger(memory, state, pred)
        return self._finish(request, memory, pred, info)

    def _commit(
        self,
        step: StepDeadline,
        request: ExecutionRequest,
        memory: SessionMemory,
        pred: Prediction,
        info: dict[str, Any],
    ) -> ExecutionResult | None:
        if not step.commit():
            return None
        return self._finish(request, memory, pred, info)

    def _key(self, request: ExecutionRequest, state: str) -> str:
        from sweworld.transition.prompt import PROMPT_VERSION

        task = request.task
        blob = json.dumps(
            {
                "argv": list(request.argv),
                "cwd": request.cwd,
                "env": sorted(request.env.items()),
                "stdin": hashlib.sha256(request.stdin).hexdigest(),
                "state": state,
                "base": request.base_commit,
                "task": getattr(task, "instance_id", None),
                "mode": self.mode,
                "model": self.model_name,
                "seed": self.seed,
                "prompt": PROMPT_VERSION,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def _predict(
        self,
        request: ExecutionRequest,
        view: WorkspaceView,
        facts: Any,
        memory: SessionMemory,
        state: str,
        started: float,
        timings: dict[str, float],
        step: StepDeadline,
    ) -> tuple[Prediction, dict[str, Any]]:
        from sweworld.models.base import GenerationRequest, LMError
        from sweworld.transition.context import build_context
        from sweworld.transition.prompt import build_messages, swt_json_schema
        from sweworld.transition.validate import (
            check_prediction,
            conservative_prediction,
            parse_prediction,
        )

        step.check("context")
        t0 = time.perf_counter()
        config = self.context_config()
        context = build_context(
            request,
            view,
            task=request.task,
            history=tuple(memory.history),
            facts=facts,
            config=config,
        )
        messages = build_messages(context, with_reasoning=self.with_reasoning)
        prefix = self._prefill_prefix()
        if prefix:
            messages = [*messages, {"role": "assistant", "content": prefix}]
        # structured output (servers that have it): the JSON is well formed by construction
        schema = None if prefix else swt_json_schema(with_reasoning=self.with_reasoning)
        timings["context"] = time.perf_counter() - t0
        attempts = step.attempts
        timings["generation"] = timings["validation"] = 0.0
        error = None
        stalled = self._stalled
        if stalled >= MAX_STALLED_WORKERS:
            error = (
                f"the model has not returned for {stalled} earlier timed-out steps; "
                "not asked again until one returns"
            )
            attempts.append({"error": error})
            log.warning("model %s: %s (%r)", self.model_name, error, request.command)
        for temperature, offset in self.schedule if error is None else ():
            step.check("generation")
            t0 = time.perf_counter()
            try:
                gen = self._generate(
                    GenerationRequest(
                        messages=messages,
                        max_tokens=self.max_tokens,
                        temperature=temperature,
                        seed=self.seed + offset,
                        json_schema=schema,
                    ),
                    step.remaining(),
                )
            except LMError as exc:
                timings["generation"] += time.perf_counter() - t0
                step.check("generation")  # the model stopped at the step's deadline: timed out
                error = f"{type(exc).__name__}: {exc}"
                attempts.append({"error": error})
                log.warning("model %s failed on %r: %s", self.model_name, request.command, error)
                break  # the model is unavailable or the prompt too long: no point resampling
            timings["generation"] += time.perf_counter() - t0
            step.check("validation")
            t0 = time.perf_counter()
            pred, repairs = parse_prediction(prefix + gen.text)
            issues = [] if pred is None else list(check_prediction(pred, facts, request, view))
            if pred is not None and not issues:
                issues += self._ledger_conflicts(memory, state, pred)
            timings["validation"] += time.perf_counter() - t0
            attempts.append(
                {
                    "temperature": temperature,
                    "seed": self.seed + offset,
                    "completion_tokens": gen.completion_tokens,
                    "repairs": list(repairs),
                    "issues": [getattr(i, "code", str(i)) for i in issues]
                    if pred
                    else ["unparsable"],
                }
            )
            if pred is not None and not issues:
                return pred, self._info(
                    "model",
                    started,
                    timings,
                    attempts=attempts,
                    cache_hit=False,
                    fallback=False,
                    truncated=dict(getattr(context, "truncated", {})),
                )
        pred = conservative_prediction(request, facts)
        if error is None:
            error = f"no valid prediction in {len(attempts)} attempt(s)"
            log.warning(
                "model %s: %s for %r (issues: %s); conservative answer", self.model_name, error,
                request.command, [a.get("issues") for a in attempts],
            )  # fmt: skip
        return pred, self._info(
            "fallback", started, timings, attempts=attempts, cache_hit=False, fallback=True,
            error=error,
        )  # fmt: skip

    def _generate(self, request: Any, remaining: float | None) -> Any:
        """One generation; an in-process model that takes a time budget gets what is left of
        the step's deadline (so that it stops, rather than run on after the step ended)."""
        lm = self.lm
        if remaining is not None and _takes_max_time(lm):
            return lm.generate([request], max_time=max(remaining, 0.01))[0][0]
        return lm.generate([request])[0][0]

    def _prefill_prefix(self) -> str:
        """The start of the answer written for the model (``{"stdout": "``), so that even a
        small model answers in the format; only with backends that continue an assistant
        turn (in-process transformers)."""
        if not self.prefill or self.with_reasoning:
            return ""
        from sweworld.models.transformers_lm import TransformersLM

        lm = getattr(self.lm, "wrapped", self.lm)  # a pool's BatchingLM wraps the model
        return '{"stdout": "' if isinstance(lm, TransformersLM) else ""

    # ------------------------------------------------------------------ ledger and history

    @staticmethod
    def _statuses(pred: Prediction) -> dict[str, str]:
        from sweworld.execution.grading import parse_pytest_log

        return parse_pytest_log(pred.stdout + "\n" + pred.stderr)

    def _ledger_conflicts(self, memory: SessionMemory, state: str, pred: Prediction) -> list:
        from sweworld.transition.validate import Issue

        out = []
        for test, status in self._statuses(pred).items():
            known = memory.ledger.get((state, test))
            if known is not None and known != status:
                out.append(
                    Issue("ledger_conflict", f"{test} was {known} on this same state, now {status}")
                )
        return out

    def _record_ledger(self, memory: SessionMemory, state: str, pred: Prediction) -> None:
        with self._lock:
            for test, status in self._statuses(pred).items():
                memory.ledger[(state, test)] = status

    def _finish(
        self,
        request: ExecutionRequest,
        memory: SessionMemory,
        pred: Prediction,
        info: dict[str, Any],
    ) -> ExecutionResult:
        from sweworld.transition.context import HistoryItem

        with self._lock:
            memory.history.append(
                HistoryItem(
                    command=valid_text(request.command),
                    exit_code=pred.exit_code,
                    output=valid_text((pred.stdout + pred.stderr)[-4000:]),
                )
            )
            del memory.history[:-20]
        return ExecutionResult(
            stdout=valid_text(pred.stdout),
            stderr=valid_text(pred.stderr),
            exit_code=pred.exit_code,
            info=info,
        )

    def close(self) -> None:
        lm = self._lm
        if lm is not None and hasattr(lm, "close"):
            lm.close()
