"""The scoring of ``sweworld bench swt``: records, the model's predictions, floors,
per-record scores and summaries. Read by the runner (:mod:`sweworld.bench.swt_run`) and
the figures (:mod:`sweworld.bench.swt_figures`); imports neither (the imports point one
way).
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.bench.sampling import stratified_sample
from sweworld.bench.similarity import compare_results, mean, percentile, rate
from sweworld.data.schema import SWTRecord
from sweworld.transition.types import Prediction

__all__ = [
    "BASE_FLOOR",
    "DEFAULT_STATE_SOURCES",
    "FLOORS",
    "PREFILL",
    "TITLE",
    "GenerationSettings",
    "ModelPrediction",
    "base_floor_row",
    "floor_summaries",
    "generation_settings",
    "predict",
    "sample_records",
    "score_record",
    "select_records",
    "summarize",
    "unit_key",
    "unusable_reason",
]

#: States whose context holds the workspace (a trajectory-only state does not).
DEFAULT_STATE_SOURCES = ("replay", "live")

#: Predictions that need no model, scored beside each model on the same records.
FLOORS: dict[str, Prediction] = {
    "always exit 0, empty output": Prediction(stdout="", stderr="", exit_code=0),
    "always exit 1, empty output": Prediction(stdout="", stderr="", exit_code=1),
}

#: The floor that gives every test its status at base (test statuses only).
BASE_FLOOR = "status at base (test statuses only)"

#: The prefill in-process models get (``SimulatedExecutor`` prefills this for
#: ``TransformersLM`` backends; its method is private, so the rule is repeated here).
PREFILL = '{"stdout": "'


def select_records(
    records: Sequence[SWTRecord],
    *,
    state_sources: Sequence[str] = DEFAULT_STATE_SOURCES,
    modes: Sequence[str] = ("oracle", "blind"),
) -> tuple[list[SWTRecord], dict[str, int]]:
    """The records to evaluate and, by reason, those left out: a state source not asked
    for (``state_source=trajectory`` by default: no workspace in its context) or no stored
    context for one of ``modes``."""
    kept: list[SWTRecord] = []
    left: Counter[str] = Counter()
    wanted = set(state_sources)
    for record in records:
        if record.state_source not in wanted:
            left[f"state_source={record.state_source}"] += 1
            continue
        missing = [
            m
            for m in modes
            if not (record.context_oracle if m == "oracle" else record.context_blind)
        ]
        if missing:
            left[f"no {'/'.join(missing)} context"] += 1
            continue
        kept.append(record)
    return kept, dict(left)


def sample_records(
    records: Sequence[SWTRecord], limit: int | None, seed: int = 0
) -> list[SWTRecord]:
    """A seeded sample of at most ``limit`` records, stratified by command kind, then
    repository (see :mod:`sweworld.bench.sampling`); independent of the input order."""
    return stratified_sample(
        records, lambda r: (r.command_kind, r.repo), limit, seed=seed, ident=lambda r: r.id
    )


@dataclass(frozen=True)
class GenerationSettings:
    """How the simulator asks a model: per attempt ``(temperature, seed offset)``."""

    max_tokens: int
    schedule: tuple[tuple[float, int], ...]
    seed: int
    with_reasoning: bool
    prefill: str


def generation_settings(spec: str, lm: Any, mode: str) -> GenerationSettings:
    """The settings a :class:`SimulatedExecutor` made from ``spec`` would use with ``lm``
    (read from the executor, not repeated here; it does not load a model)."""
    from sweworld.transition.simulated import SimulatedExecutor
    from sweworld.world import lm_from_spec

    sim = SimulatedExecutor(lm_from_spec(spec, lazy=True), mode=mode)  # never loaded here
    prefill = ""
    if sim.prefill and not sim.with_reasoning:
        from sweworld.models.transformers_lm import TransformersLM

        prefill = PREFILL if isinstance(lm, TransformersLM) else ""
    return GenerationSettings(
        max_tokens=sim.max_tokens,
        schedule=tuple(sim.schedule),
        seed=sim.seed,
        with_reasoning=sim.with_reasoning,
        prefill=prefill,
    )


@dataclass
class ModelPrediction:
    """A model's answer on one record: the prediction, where it came from (``model`` or
    ``fallback``), why it fell back (``unparsable``, ``invalid``, ``model_error``), the
    attempts and the wall time of all of them."""

    prediction: Prediction
    source: str
    latency_s: float
    fallback_reason: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)


def _request(record: SWTRecord) -> Any:
    from sweworld.sandbox.executor import ExecutionRequest

    try:
        argv = tuple(shlex.split(record.command))
    except ValueError:
        argv = (record.command,)
    try:
        env = {str(k): str(v) for k, v in json.loads(record.env or "{}").items()}
    except (ValueError, AttributeError):
        env = {}
    return ExecutionRequest(
        argv=argv or (record.command,),
        cwd=record.cwd,
        stdin=record.stdin.encode("utf-8", "replace"),
        env=env,
        base_commit=record.base_commit,
    )


def predict(lm: Any, record: SWTRecord, mode: str, settings: GenerationSettings) -> ModelPrediction:
    """Ask ``lm`` for ``record`` in ``mode`` as the simulator does (module docstring)."""
    from sweworld.models.base import GenerationRequest, LMError
    from sweworld.transition.prompt import build_messages
    from sweworld.transition.validate import (
        check_prediction,
        conservative_prediction,
        parse_prediction,
    )

    context = record.context(mode)
    if context is None:
        raise ValueError(f"record {record.id} has no {mode} context")
    request = _request(record)
    messages = build_messages(context, with_reasoning=settings.with_reasoning)
    if settings.prefill:
        messages = [*messages, {"role": "assistant", "content": settings.prefill}]
    attempts: list[dict[str, Any]] = []
    started = time.perf_counter()
    reason = None
    for temperature, offset in settings.schedule:
        try:
            generation = lm.generate(
                [
                    GenerationRequest(
                        messages=messages,
                        max_tokens=settings.max_tokens,
                        temperature=temperature,
                        seed=settings.seed + offset,
                    )
                ]
            )[0][0]
        except LMError as exc:
            attempts.append({"error": f"{type(exc).__name__}: {exc}"})
            reason = "model_error"
            break
        pred, repairs = parse_prediction(settings.prefill + generation.text)
        issues = [] if pred is None else [i.code for i in check_prediction(pred, None, request)]
        attempts.append(
            {"temperature": temperature, "repairs": list(repairs),
             "issues": issues if pred is not None else ["unparsable"]}
        )  # fmt: skip
        if pred is not None and not issues:
            return ModelPrediction(pred, "model", time.perf_counter() - started, None, attempts)
        reason = "unparsable" if pred is None else "invalid"
    return ModelPrediction(
        conservative_prediction(request, None),
        "fallback",
        time.perf_counter() - started,
        reason or "unparsable",
        attempts,
    )


def score_record(record: SWTRecord, prediction: Prediction) -> dict[str, Any]:
    """One row: the record's kind, repository and truth beside ``prediction``'s agreement.

    Beside :func:`~sweworld.bench.similarity.compare_results`' figures: the exception type
    as the outcome model's labels read it (:func:`sweworld.train.outcome_data.exception_of`:
    a traceback's last ``Name:`` line, pytest's first ``E   Name``; ``none`` when none) on
    both sides, and the pooled test-status counts (``tests_named``: tests either side
    names, ``tests_agree``: those with equal statuses)."""
    from sweworld.bench.similarity import output_statuses
    from sweworld.train.outcome_data import exception_of

    real_tests = record.statuses()
    agree = compare_results(
        record, prediction, command=record.command, repo=record.repo or None,
        real_statuses=real_tests,
    )  # fmt: skip
    tested = record.ran_tests and bool(real_tests)
    named = agreeing = 0
    if tested:
        predicted_tests = output_statuses(
            record.command, prediction.stdout + "\n" + prediction.stderr, record.repo or None
        )
        names = set(real_tests) | set(predicted_tests)
        named = len(names)
        agreeing = sum(real_tests.get(n) == predicted_tests.get(n) for n in names)
    kind = record.command_kind
    real_exc = exception_of(record.stdout, record.stderr, kind)
    predicted_exc = exception_of(prediction.stdout, prediction.stderr, kind)
    return {
        "id": record.id,
        "repo": record.repo,
        "kind": kind,
        "real_exit": record.exit_code,
        "predicted_exit": prediction.exit_code,
        "exit_code": agree["exit_code"],
        "tests": agree["tests"] if tested else None,
        "tests_named": named if tested else None,
        "tests_agree": agreeing if tested else None,
        "exception": agree["exception"],
        "real_exception": real_exc,
        "predicted_exception": predicted_exc,
        "exception_raised": predicted_exc == real_exc if real_exc != "none" else None,
        "line_similarity": agree["line_similarity"],
    }


def base_floor_row(
    record: SWTRecord,
    known: dict[str, dict[str, str]],
    labeled: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """The floor "status at base" on one record: every test the real output names gets its
    status at base (:func:`sweworld.bench.swt_outcome.status_at_base`), and over the
    record's real labels ``labeled[record.id] = (labels, agreeing)`` when given (counted
    where the labels were made); it scores test statuses only (the rest is None)."""
    from sweworld.bench.swt_outcome import status_at_base

    real_tests = record.statuses()
    tested = record.ran_tests and bool(real_tests)
    agreeing = sum(status_at_base(record, t, known) == s for t, s in real_tests.items())
    n_labels, labels_agree = (labeled or {}).get(record.id, (None, None))
    return {
        "id": record.id, "repo": record.repo, "kind": record.command_kind,
        "exit_code": None, "exception": None, "exception_raised": None,
        "line_similarity": None,
        "tests": agreeing / len(real_tests) if tested else None,
        "tests_named": len(real_tests) if tested else None,
        "tests_agree": agreeing if tested else None,
        "labeled_n": n_labels, "labeled_agree": labels_agree,
    }  # fmt: skip


def _figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    from sweworld.bench.similarity import mean_interval, wilson_interval

    latencies = [r["latency_s"] for r in rows if r.get("latency_s") is not None]
    exits = [r["exit_code"] for r in rows if r.get("exit_code") is not None]
    raised = [r["exception_raised"] for r in rows if r.get("exception_raised") is not None]
    labels = sum(r.get("labeled_n") or 0 for r in rows)
    labels_agree = sum(r.get("labeled_agree") or 0 for r in rows)
    named = sum(r.get("tests_named") or 0 for r in rows)
    agreeing = sum(r.get("tests_agree") or 0 for r in rows)
    out: dict[str, Any] = {
        "n": len(rows),
        "exit_code_agreement": rate(r["exit_code"] for r in rows),
        "exit_code_ci95": wilson_interval(sum(exits), len(exits)),
        "test_status_agreement": rate(r["tests"] for r in rows),
        "n_with_tests": sum(r["tests"] is not None for r in rows),
        "test_statuses_pooled": agreeing / named if named else None,
        "test_statuses_ci95": wilson_interval(agreeing, named),
        "n_test_statuses": named,
        "test_labels_agreement": labels_agree / labels if labels else None,
        "test_labels_ci95": wilson_interval(labels_agree, labels),
        "n_test_labels": labels,
        "exception_agreement": rate(r["exception"] for r in rows),
        "exception_raised_agreement": rate(raised),
        "exception_raised_ci95": wilson_interval(sum(raised), len(raised)),
        "n_raised": len(raised),
        "line_similarity": mean(r["line_similarity"] for r in rows),
        "line_similarity_ci95": mean_interval(r["line_similarity"] for r in rows),
    }
    if any("source" in r for r in rows):
        model_rows = [r for r in rows if r.get("source") == "model"]
        out["fallback_rate"] = rate(r.get("source") == "fallback" for r in rows)
        out["fallback_reasons"] = dict(
            Counter(r["fallback_reason"] for r in rows if r.get("fallback_reason"))
        )
        out["exit_code_agreement_model_only"] = rate(r["exit_code"] for r in model_rows)
        out["latency_p50_s"] = percentile(latencies, 50) if latencies else None
        out["latency_p95_s"] = percentile(latencies, 95) if latencies else None
        out["latency_p99_s"] = percentile(latencies, 99) if latencies else None
    return out


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Figures of rows (from :func:`score_record`, with ``source``, ``fallback_reason`` and
    ``latency_s`` for a model): ``overall``, ``by_kind``, ``by_repo``."""

    def grouped(field_name: str) -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(row[field_name], []).append(row)
        return {name: _figures(groups[name]) for name in sorted(groups)}

    return {"overall": _figures(rows), "by_kind": grouped("kind"), "by_repo": grouped("repo")}


def floor_summaries(
    records: Sequence[SWTRecord],
    known: dict[str, dict[str, str]] | None = None,
    labeled: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """:func:`summarize` of every floor of :data:`FLOORS` on ``records``; with ``known``
    (:func:`sweworld.bench.swt_outcome.base_statuses`) also the floor "status at base"
    (over the real labels too, with ``labeled``: see :func:`base_floor_row`)."""
    out = {
        name: summarize([score_record(r, pred) for r in records]) for name, pred in FLOORS.items()
    }
    if known is not None:
        out[BASE_FLOOR] = summarize([base_floor_row(r, known, labeled) for r in records])
    return out


# ------------------------------------------------------------------------------ command line

TITLE = "SWT against recorded real transitions (sweworld bench swt)"


def unusable_reason(record: SWTRecord, modes: Sequence[str]) -> str | None:
    """Why ``record`` cannot be evaluated (an empty command, an unreadable context, a
    replayed state found to differ from the agent's: :mod:`sweworld.data.divergence`), or
    None."""
    from sweworld.data.divergence import state_diverged

    if not str(record.command or "").strip():
        return "missing field: command"
    if state_diverged(record):
        return "replayed state diverged from the agent's"
    if record.exit_code is None:
        return "missing field: exit_code"
    try:
        statuses = record.statuses()
    except (ValueError, TypeError, RecursionError) as exc:
        return f"unreadable test_statuses ({type(exc).__name__})"
    if not isinstance(statuses, dict):
        return "unreadable test_statuses (not an object)"
    for mode in modes:
        try:
            record.context(mode)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # any JSON shape
            return f"unreadable {mode} context ({type(exc).__name__})"
    return None


def unit_key(spec: str, mode: str, record_id: str) -> str:
    """The key of one unit of work in ``rows.jsonl``."""
    return f"{spec}\x1f{mode}\x1f{record_id}"
