"""SWT on held-out examples: each model's prediction from the stored context vs what ran.

For the test split of SWT datasets (repositories never trained on), a seeded sample
stratified by command kind and repository is put to each model, in ``oracle`` and ``blind``
mode, through the inference path: the record's stored context for the mode
(:meth:`SWTRecord.context`, built at recording time exactly as the simulator builds it) ->
:func:`sweworld.transition.prompt.build_messages` -> the LM of ``make_lm(spec)`` with the
simulator's generation settings for that spec (max tokens, schedule of temperatures and
seeds, prefill; read from a :class:`~sweworld.transition.simulated.SimulatedExecutor`) ->
:func:`~sweworld.transition.validate.parse_prediction` and
:func:`~sweworld.transition.validate.check_prediction` -> on failure the next attempt, then
:func:`~sweworld.transition.validate.conservative_prediction` (a *fallback*).

Differences from a live simulated step, said in every report: the facts are stored only as
the context's text, so validation runs without them (the checks that need facts or the
workspace stay silent), the exact shortcut (an answer computed without the model) is not
taken, and there is no cache, ledger or step deadline. The figures measure the model.

Figures (:func:`summarize`): exit-code agreement, per-test status agreement (records that
ran tests and whose real output names tests), exception-type agreement, line similarity,
fallback rate (unparsable / invalid / model error), latency p50 / p95; overall, by command
kind and by repository; floors (:data:`FLOORS`) scored on the same records.

Command line: ``sweworld bench swt --data D --out R`` (:func:`add_arguments`, :func:`run`);
tables and plots: :mod:`sweworld.bench.swt_figures`.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.bench.output import at_least
from sweworld.bench.sampling import stratified_sample
from sweworld.bench.similarity import compare_results, mean, percentile, rate
from sweworld.data.schema import SWTRecord
from sweworld.transition.types import Prediction

__all__ = [
    "DEFAULT_STATE_SOURCES",
    "FLOORS",
    "TITLE",
    "GenerationSettings",
    "ModelPrediction",
    "add_arguments",
    "generation_settings",
    "load_test_records",
    "predict",
    "run",
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

#: The prefill in-process models get (``SimulatedExecutor`` prefills this for
#: ``TransformersLM`` backends; its method is private, so the rule is repeated here).
PREFILL = '{"stdout": "'


def load_test_records(
    folders: Iterable[str], split: str = "test"
) -> tuple[list[SWTRecord], dict[str, Any]]:
    """SWT records of ``split`` from every folder (:func:`~sweworld.bench.records.load_records`)."""
    from sweworld.bench.records import load_records

    return load_records(folders, "swt", split)


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

    sim = SimulatedExecutor(spec, mode=mode)
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
    """One row: the record's kind, repository and truth beside ``prediction``'s agreement."""
    agree = compare_results(
        record,
        prediction,
        command=record.command,
        repo=record.repo or None,
        real_statuses=record.statuses(),
    )
    tested = record.ran_tests and bool(record.statuses())
    return {
        "id": record.id,
        "repo": record.repo,
        "kind": record.command_kind,
        "real_exit": record.exit_code,
        "predicted_exit": prediction.exit_code,
        "exit_code": agree["exit_code"],
        "tests": agree["tests"] if tested else None,
        "exception": agree["exception"],
        "line_similarity": agree["line_similarity"],
    }


def _figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    latencies = [r["latency_s"] for r in rows if r.get("latency_s") is not None]
    out: dict[str, Any] = {
        "n": len(rows),
        "exit_code_agreement": rate(r["exit_code"] for r in rows),
        "test_status_agreement": rate(r["tests"] for r in rows),
        "n_with_tests": sum(r["tests"] is not None for r in rows),
        "exception_agreement": rate(r["exception"] for r in rows),
        "line_similarity": mean(r["line_similarity"] for r in rows),
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


def floor_summaries(records: Sequence[SWTRecord]) -> dict[str, Any]:
    """:func:`summarize` of every floor of :data:`FLOORS` on ``records``."""
    return {
        name: summarize([score_record(r, pred) for r in records]) for name, pred in FLOORS.items()
    }


def evaluate_model(
    lm: Any,
    records: Sequence[SWTRecord],
    mode: str,
    settings: GenerationSettings,
    *,
    on_row: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows of one model in one mode over ``records`` (``on_row(i, row)`` after each)."""
    rows = []
    for i, record in enumerate(records):
        answer = predict(lm, record, mode, settings)
        row = score_record(record, answer.prediction)
        row.update(
            source=answer.source,
            fallback_reason=answer.fallback_reason,
            latency_s=answer.latency_s,
            attempts=len(answer.attempts),
        )
        rows.append(row)
        if on_row is not None:
            on_row(i, row)
    return rows


# ------------------------------------------------------------------------------ command line

TITLE = "SWT against recorded real transitions (sweworld bench swt)"


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench swt`` (and ``benchmarks/heldout_swt.py``)."""
    parser.add_argument("--data", nargs="+", required=True, help="dataset folders")
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")
    parser.add_argument(
        "--models",
        default="embedded:base,embedded",
        help="comma-separated LM specs (embedded:base, embedded, openai:URL#name, "
        "replay:FILE, ...)",
    )
    parser.add_argument("--modes", default="oracle,blind")
    parser.add_argument(
        "--limit", type=at_least(0), default=60, help="records in the sample (0: all)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument(
        "--state-sources",
        default=",".join(DEFAULT_STATE_SOURCES),
        help="state sources evaluated (trajectory-only records have no workspace context)",
    )
    parser.add_argument("--split", default="test", help="split to evaluate (test: held out)")
    parser.add_argument("--partial-every", type=at_least(1), default=4, help="rows between reports")


def unusable_reason(record: SWTRecord, modes: Sequence[str]) -> str | None:
    """Why ``record`` cannot be evaluated (an empty command, an unreadable context), or
    None."""
    if not str(record.command or "").strip():
        return "missing field: command"
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


def _model_rows(
    out: Any, lm: Any, spec: str, mode: str, sample: Sequence[SWTRecord], report: Callable
) -> None:
    """Answer every record of ``sample`` not yet done for ``(spec, mode)``; rows as they come."""
    settings = generation_settings(spec, lm, mode)
    done = out.done()  # one copy, not one per record
    todo = [r for r in sample if unit_key(spec, mode, r.id) not in done]
    if not todo:
        return
    for i, record in enumerate(out.progress(todo, len(todo), f"swt {spec} {mode}"), 1):
        try:
            answer = predict(lm, record, mode, settings)
        except Exception as exc:  # an engine that dies: counted; the finished rows stay
            out.skip(f"{spec} {mode}: model failed ({type(exc).__name__})")
            continue
        row = score_record(record, answer.prediction)
        row.update(spec=spec, mode=mode, source=answer.source,
                   fallback_reason=answer.fallback_reason, latency_s=answer.latency_s,
                   attempts=len(answer.attempts))  # fmt: skip
        out.add_row(unit_key(spec, mode, record.id), row)
        report(final=False, every=i)


def run(args: Any) -> int:
    """``sweworld bench swt``: every model of ``--models`` in every mode on the sample,
    rows resumable in ``--out``, report and plots written as rows come; 0 on success,
    2 for bad arguments or data."""
    from sweworld.bench.output import BenchOutput, ResumeMismatch
    from sweworld.bench.records import DataError, load_records
    from sweworld.bench.swt_figures import DESCRIPTION, write_report
    from sweworld.models import make_lm

    modes = [m for m in args.modes.split(",") if m]
    specs = [s for s in args.models.split(",") if s]
    if any(m not in ("oracle", "blind") for m in modes) or not modes or not specs:
        print(f"--modes takes oracle and/or blind (got {args.modes!r}); --models one spec or more")
        return 2
    try:
        records, counts = load_records(args.data, "swt", args.split)
    except DataError as exc:
        print(f"sweworld bench swt: {exc}")
        return 2
    if not records:
        print(f"sweworld bench swt: no SWT records in the {args.split} split of {args.data}")
        return 2
    usable, unusable = [], Counter()
    for record in records:
        reason = unusable_reason(record, modes)
        if reason:
            unusable[reason] += 1
        else:
            usable.append(record)
    state_sources = [s for s in args.state_sources.split(",") if s]
    selected, left_out = select_records(usable, state_sources=state_sources, modes=modes)
    sample = sample_records(selected, args.limit or None, args.seed)
    settings = {"models": specs, "modes": modes, "limit": args.limit, "seed": args.seed,
                "state_sources": state_sources, "split": args.split}  # fmt: skip
    try:
        out = BenchOutput(args.out, "swt", title=TITLE, description=DESCRIPTION,
                          settings=settings, data=args.data, model=", ".join(specs),
                          fresh=args.fresh)  # fmt: skip
    except ResumeMismatch as exc:
        print(f"sweworld bench swt: {exc}")
        return 2
    for reason, n in {**counts.get("bad_rows", {}), **unusable}.items():
        out.skip(reason, n)
    for reason, n in left_out.items():
        out.skip(f"left out: {reason}", n)
    out.set("data", {**counts, "split": args.split, "records": len(records),
                     "eligible": len(selected)})  # fmt: skip
    out.set("sample", {"n": len(sample), "seed": args.seed,
                       "by_kind": dict(Counter(r.command_kind for r in sample)),
                       "by_repo": dict(Counter(r.repo for r in sample))})  # fmt: skip
    print(f"{len(records)} {args.split} records; {len(selected)} eligible; sample of "
          f"{len(sample)} (seed {args.seed}); {len(out.done())} rows done before")  # fmt: skip
    if not sample:
        print("sweworld bench swt: no record left to evaluate (see skipped in report.json)")
        out.write([], {}, final=True)
        return 2
    sample_ids = {r.id for r in sample}

    def report(final: bool = True, every: int = 0) -> None:
        if not final and every % max(args.partial_every, 1):
            return
        rows = [r for r in out.done().values() if r.get("id") in sample_ids]
        write_report(out, rows, sample, specs, modes, final=final)

    report(final=False)
    for spec in specs:
        done = out.done()
        if all(unit_key(spec, m, r.id) in done for m in modes for r in sample):
            continue
        try:
            lm = make_lm(spec)
        except Exception as exc:  # one model that does not load does not stop the others
            out.skip(f"{spec}: could not load ({type(exc).__name__})", len(sample) * len(modes))
            print(f"{spec}: could not load: {type(exc).__name__}: {exc}")
            continue
        try:
            for mode in modes:
                _model_rows(out, lm, spec, mode, sample, report)
                report(final=False)
        finally:
            close = getattr(lm, "close", None)
            if callable(close):
                close()
    report(final=True)
    print(f"report: {out.dir / 'report.md'}")
    return 0
