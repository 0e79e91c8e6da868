"""SWT on held-out examples: each model's prediction from the stored context vs what ran.

For the test split of SWT datasets (repositories never trained on), a seeded sample
stratified by command kind and repository is put to each model, in ``oracle`` and ``blind``
mode, through the inference path: the record's stored context for the mode
(:meth:`SWTRecord.context`, built at recording time exactly as the simulator builds it) ->
:func:`sweworld.transition.prompt.build_messages` -> the LM of
``sweworld.world.lm_from_spec(spec)`` with the simulator's generation settings for that
spec (max tokens, schedule of temperatures and seeds, prefill; read from a
:class:`~sweworld.transition.simulated.SimulatedExecutor`) ->
:func:`~sweworld.transition.validate.parse_prediction` and
:func:`~sweworld.transition.validate.check_prediction` -> on failure the next attempt, then
:func:`~sweworld.transition.validate.conservative_prediction` (a *fallback*).

Differences from a live simulated step, said in every report: the facts are stored only as
the context's text, so validation runs without them (the checks that need facts or the
workspace stay silent), the exact shortcut (an answer computed without the model) is not
taken, and there is no cache, ledger or step deadline. The figures measure the model.

Figures (:func:`~sweworld.bench.swt_scoring.summarize`): exit-code agreement, per-test
status agreement (records that ran tests and whose real output names tests), exception-type
agreement, line similarity, fallback rate (unparsable / invalid / model error), latency
p50 / p95; overall, by command kind and by repository; floors
(:data:`~sweworld.bench.swt_scoring.FLOORS`) scored on the same records.

Command line: ``sweworld bench swt --data D --out R`` (:func:`add_arguments`, :func:`run`);
scoring: :mod:`sweworld.bench.swt_scoring`; tables and plots: :mod:`sweworld.bench.swt_figures`.

``--models`` mixes two kinds of spec:

- an SWT language-model spec (``embedded``, ``embedded:base``, ``openai:URL#name``,
  ``replay:FILE``): answers a seeded stratified sample of ``--limit`` records that have a
  stored context for every mode (the LM route costs seconds a record on a CPU);
- ``outcome`` / ``outcome:PATH``: the outcome world (:mod:`sweworld.bench.swt_outcome`) on
  every record whose state can be rebuilt (``--outcome-limit`` to sample; base checkouts
  from ``--repos`` into ``--cache``).

The report scores each population with its own floors: every record the outcome route
answered (floors: always exit 0 / 1, and each test's status at base), and, when both kinds
run, the LM sample again with the outcome route and the floors on the same records.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweworld.argtypes import at_least
from sweworld.bench.swt_outcome import (
    base_statuses,
    is_outcome_spec,
    model_identity,
    outcome_model_path,
)
from sweworld.bench.swt_scoring import (
    DEFAULT_STATE_SOURCES,
    TITLE,
    generation_settings,
    predict,
    sample_records,
    score_record,
    select_records,
    unit_key,
    unusable_reason,
)
from sweworld.data.schema import SWTRecord

__all__ = ["add_arguments", "run"]


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench swt``."""
    parser.add_argument("--data", nargs="+", required=True, help="dataset folders")
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")
    parser.add_argument(
        "--models",
        default="outcome,embedded",
        help="comma-separated specs: outcome (the default world) or outcome:PATH, and SWT "
        "LM specs (embedded:base, embedded, openai:URL#name, replay:FILE, ...)",
    )
    parser.add_argument("--modes", default="oracle,blind")
    parser.add_argument(
        "--limit", type=at_least(0), default=60, help="records in the LM sample (0: all)"
    )
    parser.add_argument(
        "--outcome-limit",
        type=at_least(0),
        default=0,
        help="records the outcome route answers (0: every one with a rebuilt state)",
    )
    parser.add_argument(
        "--outcome-judge",
        choices=("verdict", "none"),
        default="verdict",
        help="outcome route, oracle mode: the judge of the task's graded tests, as in the "
        "default world (verdict: the shipped SWR verdict decides whether the state resolves "
        "the task, and a run of its graded tests shows that decision) or none (the outcome "
        "model alone)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the samples")
    parser.add_argument(
        "--state-sources",
        default=",".join(DEFAULT_STATE_SOURCES),
        help="state sources evaluated (trajectory-only records have no workspace state)",
    )
    parser.add_argument("--split", default="test", help="split to evaluate (test: held out)")
    parser.add_argument(
        "--repos",
        action="append",
        default=[],
        help="outcome route: a git repository / bare mirror holding base commits, or a folder "
        "of *.git mirrors (repeatable; also repos/*.git beside --data and $SWEWORLD_REPO_CACHE)",
    )
    parser.add_argument(
        "--cache", default="", help="outcome route: where base checkouts are extracted"
    )
    parser.add_argument("--partial-every", type=at_least(1), default=4, help="rows between reports")


def _model_rows(
    out: Any, lm: Any, spec: str, mode: str, sample: Sequence[SWTRecord], report: Callable,
    known: dict[str, dict[str, str]],
) -> None:  # fmt: skip
    """Answer every record of ``sample`` not yet done for ``(spec, mode)``; rows as they
    come (with the per-test label counts where the outcome route stored the record's
    collected test ids)."""
    from sweworld.bench.swt_outcome import label_counts

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
        ids_row = done.get(f"ids\x1f{record.id}")
        if ids_row is not None:
            row.update(label_counts(record, answer.prediction, ids_row.get("ids"), known))
        row.update(spec=spec, mode=mode, source=answer.source,
                   fallback_reason=answer.fallback_reason, latency_s=answer.latency_s,
                   attempts=len(answer.attempts))  # fmt: skip
        out.add_row(unit_key(spec, mode, record.id), row)
        report(final=False, every=i)


def _outcome_rows(
    out: Any, args: Any, spec: str, modes: Sequence[str], records: Sequence[SWTRecord],
    report: Callable, known: dict[str, dict[str, str]], keep_ids: set[str],
) -> None:  # fmt: skip
    """The outcome route of ``spec`` on ``records`` in every mode; rows as they come (and
    the collected test ids of the records in ``keep_ids``, for the LM rows' labels)."""
    from sweworld.bench.swt_outcome import OutcomeRoute, label_counts, repos_for
    from sweworld.dirs import cache_dir
    from sweworld.train.outcome_data import BaseCheckouts

    sha = model_identity(spec)["sha256"]
    judge = args.outcome_judge
    done = {
        k: row
        for k, row in out.done().items()
        if row.get("model_sha256") == sha and row.get("judge", "none") == judge
    }
    keys = {(m, r.id): unit_key(spec, m, r.id) for m in modes for r in records}
    if all(k in done for k in keys.values()):
        return
    cache = Path(args.cache) if args.cache else cache_dir() / "outcome-bases"
    checkouts = BaseCheckouts(repos_for(args.data, args.repos), cache)
    route = OutcomeRoute(spec, modes, checkouts, judge=judge)
    count = [0]

    def emit(
        record: SWTRecord, mode: str, result: Any, latency: float, rebuild: float,
        ids: list[str] | None,
    ) -> None:  # fmt: skip
        info = result.info or {}
        if record.id in keep_ids and f"ids\x1f{record.id}" not in done:
            out.add_row(f"ids\x1f{record.id}", {"ids": ids})
            done[f"ids\x1f{record.id}"] = {"ids": ids}
        route_name = str(info.get("route") or "")
        fallback = route_name in ("conservative", "timeout")  # nothing decided: not the model's
        row = score_record(record, result)
        row.update(label_counts(record, result, ids, known))
        row.update(
            spec=spec, mode=mode, route=route_name,
            source="fallback" if fallback else "model",
            fallback_reason=(info.get("reason") or info.get("stage")) if fallback else None,
            latency_s=latency, rebuild_s=rebuild, attempts=1, model_sha256=sha, judge=judge,
            judged=(info.get("graded") or {}).get("judge"),
        )  # fmt: skip
        out.add_row(keys[(mode, record.id)], row)
        count[0] += 1
        report(final=False, every=count[0])

    try:
        route.run(records, lambda r: any(keys[(m, r.id)] not in done for m in modes), emit,
                  out.skip)  # fmt: skip
    finally:
        route.close()


def _load(args: Any, modes: list[str]) -> tuple[list[SWTRecord], dict[str, Any], Counter] | int:
    from sweworld.bench.records import DataError, load_records

    try:
        records, counts = load_records(args.data, "swt", args.split)
    except DataError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(
            f"sweworld: error: no SWT records in the {args.split} split of {args.data}",
            file=sys.stderr,
        )
        return 2
    usable, unusable = [], Counter()
    for record in records:
        reason = unusable_reason(record, modes)
        if reason:
            unusable[reason] += 1
        else:
            usable.append(record)
    return usable, counts, unusable


def run(args: Any) -> int:
    """``sweworld bench swt``: every spec of ``--models`` in every mode on its records,
    rows resumable in ``--out``, report and plots written as rows come; 0 on success,
    2 for bad arguments or data."""
    from sweworld.bench.output import BenchOutput, ResumeMismatch
    from sweworld.bench.swt_figures import DESCRIPTION, write_report
    from sweworld.world import lm_from_spec

    modes = [m for m in args.modes.split(",") if m]
    specs = [s for s in args.models.split(",") if s]
    if any(m not in ("oracle", "blind") for m in modes) or not modes or not specs:
        print(f"--modes takes oracle and/or blind (got {args.modes!r}); --models one spec or more")
        return 2
    outcome_specs = [s for s in specs if is_outcome_spec(s)]
    lm_specs = [s for s in specs if not is_outcome_spec(s)]
    try:
        for spec in outcome_specs:
            outcome_model_path(spec)
    except ValueError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    loaded = _load(args, modes)
    if isinstance(loaded, int):
        return loaded
    usable, counts, unusable = loaded
    state_sources = [s for s in args.state_sources.split(",") if s]
    with_state = [r for r in usable if r.state_source in set(state_sources)]
    outcome_set = (
        sample_records(with_state, args.outcome_limit or None, args.seed) if outcome_specs else []
    )
    selected, left_out = select_records(usable, state_sources=state_sources, modes=modes)
    sample = sample_records(selected, args.limit or None, args.seed) if lm_specs else []
    # the LM specs decide rows by the settings; the outcome route's rows carry their model
    # file's hash and are redone when it changes (outcome specs join without --fresh)
    settings = {"models": lm_specs, "modes": modes, "limit": args.limit, "seed": args.seed,
                "state_sources": state_sources, "split": args.split}  # fmt: skip
    try:
        out = BenchOutput(args.out, "swt", title=TITLE, description=DESCRIPTION,
                          settings=settings, data=args.data, model=", ".join(specs),
                          fresh=args.fresh)  # fmt: skip
    except ResumeMismatch as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    # which model file each outcome spec loads: its rows of another file are redone
    out.set("outcome_models", {s: model_identity(s) for s in outcome_specs})
    out.set("outcome_limit", args.outcome_limit)
    for reason, n in {**counts.get("bad_rows", {}), **unusable}.items():
        out.skip(reason, n)
    if lm_specs:
        for reason, n in left_out.items():
            out.skip(f"left out: {reason}", n)
    out.set("data", {**counts, "split": args.split, "records": len(usable) + sum(unusable.values()),
                     "eligible": len(selected), "with_state": len(with_state)})  # fmt: skip
    out.set("sample", {"n": len(sample), "seed": args.seed,
                       "by_kind": dict(Counter(r.command_kind for r in sample)),
                       "by_repo": dict(Counter(r.repo for r in sample)),
                       "outcome_records": len(outcome_set),
                       "outcome_by_repo": dict(Counter(r.repo for r in outcome_set))})  # fmt: skip
    print(f"{len(usable)} usable {args.split} records; outcome route: {len(outcome_set)}; "
          f"LM sample: {len(sample)} of {len(selected)} with contexts (seed {args.seed}); "
          f"{len(out.done())} rows done before")  # fmt: skip
    if not sample and not outcome_set:
        print(
            "sweworld: error: no record left to evaluate (see skipped in report.json)",
            file=sys.stderr,
        )
        out.write([], {}, final=True)
        return 2

    def report(final: bool = True, every: int = 0) -> None:
        if not final and every % max(args.partial_every, 1):
            return
        write_report(out, list(out.done().values()), outcome_set, sample, specs, modes,
                     final=final, known=base_statuses(usable))  # fmt: skip

    report(final=False)
    known = base_statuses(usable)
    for spec in outcome_specs:
        try:
            _outcome_rows(out, args, spec, modes, outcome_set, report, known,
                          {r.id for r in sample})  # fmt: skip
        except Exception as exc:  # a model file that does not load: said, the others run
            out.skip(f"{spec}: could not run ({type(exc).__name__}: {exc})"[:300])
            print(f"{spec}: could not run: {type(exc).__name__}: {exc}")
        report(final=False)
    for spec in lm_specs:
        done = out.done()
        if all(unit_key(spec, m, r.id) in done for m in modes for r in sample):
            continue
        try:
            lm = lm_from_spec(spec)
        except Exception as exc:  # one model that does not load does not stop the others
            out.skip(f"{spec}: could not load ({type(exc).__name__})", len(sample) * len(modes))
            print(f"{spec}: could not load: {type(exc).__name__}: {exc}")
            continue
        try:
            for mode in modes:
                _model_rows(out, lm, spec, mode, sample, report, known)
                report(final=False)
        finally:
            close = getattr(lm, "close", None)
            if callable(close):
                close()
    report(final=True)
    print(f"report: {out.dir / 'report.md'}")
    return 0
