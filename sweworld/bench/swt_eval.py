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

Figures (:func:`summarize`): exit-code agreement, per-test status agreement (records that
ran tests and whose real output names tests), exception-type agreement, line similarity,
fallback rate (unparsable / invalid / model error), latency p50 / p95; overall, by command
kind and by repository; floors (:data:`FLOORS`) scored on the same records.

Command line: ``sweworld bench swt --data D --out R`` (:func:`add_arguments`, :func:`run`);
tables and plots: :mod:`sweworld.bench.swt_figures`.
"""

from __future__ import annotations

from typing import Any

from sweworld.bench.swt_scoring import (  # re-exported: the helpers' earlier home
    BASE_FLOOR,
    DEFAULT_STATE_SOURCES,
    FLOORS,
    PREFILL,
    TITLE,
    GenerationSettings,
    ModelPrediction,
    base_floor_row,
    evaluate_model,
    floor_summaries,
    generation_settings,
    load_test_records,
    predict,
    sample_records,
    score_record,
    select_records,
    summarize,
    unit_key,
    unusable_reason,
)

__all__ = [
    "BASE_FLOOR",
    "DEFAULT_STATE_SOURCES",
    "FLOORS",
    "PREFILL",
    "TITLE",
    "GenerationSettings",
    "ModelPrediction",
    "add_arguments",
    "base_floor_row",
    "evaluate_model",
    "floor_summaries",
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


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench swt`` (:func:`sweworld.bench.swt_run.add_arguments`)."""
    from sweworld.bench.swt_run import add_arguments as add

    add(parser)


def run(args: Any) -> int:
    """``sweworld bench swt`` (:func:`sweworld.bench.swt_run.run`)."""
    from sweworld.bench.swt_run import run as run_bench

    return run_bench(args)
