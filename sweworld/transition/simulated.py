"""SimulatedExecutor: execution predicted by SWT, exact where exact is cheap, consistent.

For each intercepted command:

1. facts: what can be computed without running (a missing file, a syntax error in the
   executed file, a missing module, the tests pytest would collect, ``python --version``);
   when they settle the whole answer it is returned as is (``info["source"] = "exact"``);
   a command with no executable target gets a hint to change it, as SWE-World answers;
2. cache: the same command on the same workspace state (content hash of every changed file
   and of the files the command runs) returns the same prediction;
3. the model: context -> chat messages -> generation -> JSON parsed and repaired -> checked
   against the facts and the session's ledger (test statuses already predicted for this same
   state); a failed check resamples with the next seed and temperature of a fixed schedule,
   up to ``max_attempts``, then falls back to a conservative answer and says so in ``info``;
4. memory: per session, the last steps (for the next contexts) and the ledger; sessions
   snapshot, restore and fork it together with their files (hooks called by the session).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.transition.types import Prediction, WorkspaceView

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


def _is_embedded(spec: Any) -> bool:
    return spec is None or (isinstance(spec, str) and spec.startswith("embedded"))


@dataclass
class SessionMemory:
    """What the simulator remembers about one session."""

    history: list[Any] = field(default_factory=list)  # HistoryItem, newest last
    ledger: dict[tuple[str, str], str] = field(default_factory=dict)  # (state, test) -> status


class PredictionCache:
    """A bounded, thread-safe LRU of predictions by key."""

    def __init__(self, max_items: int = 10_000):
        self.max_items = max_items
        self._items: OrderedDict[str, tuple[Prediction, dict]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> tuple[Prediction, dict] | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, pred: Prediction, info: dict) -> None:
        with self._lock:
            self._items[key] = (pred, info)
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)


class SimulatedExecutor:
    """Predicts execution with a language model (the embedded default unless told otherwise).

    Args:
        lm: an :class:`~sweworld.models.base.LM` or a spec for ``make_lm``
            (``"embedded"``, ``"openai:URL#MODEL"``, ``"hf:PATH+ADAPTER"``, ``"replay:FILE"``);
            loaded on first use.
        mode: ``"blind"`` (no gold patch, test patch or test lists in the context) or
            ``"oracle"``.
        context: a :class:`~sweworld.transition.context.ContextConfig` (budgets).
        max_tokens: generation budget per attempt (default 256 for the embedded model, whose
            context budgets are also cut to ~1,800 tokens to fit a CPU; 512 otherwise).
        schedule: (temperature, seed offset) per attempt; its length bounds the attempts.
        seed: base seed; the same seed, state and command give the same answer.
        with_reasoning: ask the model for a ``reasoning`` field before the JSON answer.
        prefill: start the model's answer with ``{"stdout": "`` (in-process models only).
    """

    name = "simulated"

    def __init__(
        self,
        lm: Any = None,
        *,
        mode: str = "blind",
        context: Any = None,
        max_tokens: int | None = None,
        schedule: tuple[tuple[float, int], ...] = DEFAULT_SCHEDULE,
        seed: int = 0,
        with_reasoning: bool = False,
        cache: PredictionCache | None = None,
        prefill: bool = True,
    ):
        if mode not in ("blind", "oracle"):
            raise ValueError(f"mode must be 'blind' or 'oracle', not {mode!r}")
        self._lm_spec = lm
        self._lm: Any = None if lm is None or isinstance(lm, str) else lm
        self.mode = mode
        self._context_config = context
        embedded = _is_embedded(lm)
        self.max_tokens = max_tokens or (EMBEDDED_MAX_TOKENS if embedded else 512)
        self._small_context = embedded and context is None
        self.schedule = tuple(schedule) or DEFAULT_SCHEDULE
        self.seed = seed
        self.with_reasoning = with_reasoning
        self.prefill = prefill
        self.cache = cache or PredictionCache()
        self._memory: dict[str, SessionMemory] = {}
        self._lock = threading.Lock()
        self._lm_lock = threading.Lock()

    # ------------------------------------------------------------------ model

    @property
    def lm(self) -> Any:
        with self._lm_lock:
            if self._lm is None:
                from sweworld.models import make_lm

                self._lm = make_lm(self._lm_spec)
            return self._lm

    @property
    def model_name(self) -> str:
        lm = self._lm
        return getattr(lm, "name", str(self._lm_spec or "embedded"))

    def context_config(self) -> Any:
        from sweworld.transition.context import ContextConfig

        if self._context_config is not None:
            cfg = self._context_config
        elif self._small_context:
            cfg = ContextConfig(mode=self.mode, **EMBEDDED_BUDGETS)
        else:
            cfg = ContextConfig(mode=self.mode)
        if getattr(cfg, "mode", self.mode) != self.mode:
            from dataclasses import replace

            cfg = replace(cfg, mode=self.mode)
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
        try:
            return self._execute(request, started, timings)
        except Exception as exc:  # never raise into the session
            return ExecutionResult(
                stderr=f"sweworld: the simulator failed on `{request.command}`: "
                f"{type(exc).__name__}: {exc}\n",
                exit_code=1,
                info=self._info("error", started, timings, error=repr(exc)),
            )

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
        self, request: ExecutionRequest, started: float, timings: dict[str, float]
    ) -> ExecutionResult:
        from sweworld.transition.facts import compute_facts, no_target_hint

        view = WorkspaceView.from_request(request)
        t0 = time.perf_counter()
        facts = compute_facts(request, view)
        hint = getattr(facts, "hint", None) or no_target_hint(request, view)
        timings["facts"] = time.perf_counter() - t0
        memory = self._mem(request.session_id)
        if hint is not None:
            pred = Prediction(stderr=hint if hint.endswith("\n") else hint + "\n", exit_code=2)
            return self._finish(request, memory, pred, self._info("hint", started, timings))
        exact = getattr(facts, "exact", None)
        if exact is not None:
            return self._finish(request, memory, exact, self._info("exact", started, timings))
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
            return self._finish(request, memory, pred, info)
        pred, info = self._predict(request, view, facts, memory, state, started, timings)
        self.cache.put(key, pred, {k: v for k, v in info.items() if k != "latency_s"})
        self._record_ledger(memory, state, pred)
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
    ) -> tuple[Prediction, dict[str, Any]]:
        from sweworld.models.base import GenerationRequest, LMError
        from sweworld.transition.context import build_context
        from sweworld.transition.prompt import build_messages
        from sweworld.transition.validate import (
            check_prediction,
            conservative_prediction,
            parse_prediction,
        )

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
        timings["context"] = time.perf_counter() - t0
        attempts: list[dict[str, Any]] = []
        timings["generation"] = timings["validation"] = 0.0
        for temperature, offset in self.schedule:
            t0 = time.perf_counter()
            try:
                gen = self.lm.generate(
                    [
                        GenerationRequest(
                            messages=messages,
                            max_tokens=self.max_tokens,
                            temperature=temperature,
                            seed=self.seed + offset,
                        )
                    ]
                )[0][0]
            except LMError as exc:
                timings["generation"] += time.perf_counter() - t0
                attempts.append({"error": f"{type(exc).__name__}: {exc}"})
                break  # the model is unavailable or the prompt too long: no point resampling
            timings["generation"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            pred, repairs = parse_prediction(prefix + gen.text)
            issues = [] if pred is None else list(check_prediction(pred, facts, request, view))
            if pred is not None:
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
        return pred, self._info(
            "fallback", started, timings, attempts=attempts, cache_hit=False, fallback=True
        )

    def _prefill_prefix(self) -> str:
        """The start of the answer written for the model (``{"stdout": "``), so that even a
        small model answers in the format; only with backends that continue an assistant
        turn (in-process transformers)."""
        if not self.prefill or self.with_reasoning:
            return ""
        from sweworld.models.transformers_lm import TransformersLM

        return '{"stdout": "' if isinstance(self.lm, TransformersLM) else ""

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
                    command=request.command,
                    exit_code=pred.exit_code,
                    output=(pred.stdout + pred.stderr)[-4000:],
                )
            )
            del memory.history[:-20]
        return ExecutionResult(
            stdout=pred.stdout, stderr=pred.stderr, exit_code=pred.exit_code, info=info
        )

    def close(self) -> None:
        lm = self._lm
        if lm is not None and hasattr(lm, "close"):
            lm.close()
