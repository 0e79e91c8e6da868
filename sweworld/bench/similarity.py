"""How close a predicted execution result is to the real one.

One piece of code for every SWT benchmark (:mod:`sweworld.bench.swt_live` on live toy runs,
:mod:`sweworld.bench.swt_run` on recorded held-out examples):

- exit-code agreement (equal codes);
- per-test status agreement: the fraction of tests, over the tests either side names, whose
  status the prediction gives as the real run did (read from both outputs by the shared
  grader's parser for the repository); undefined (None) when neither side names a test;
- exception-type agreement: the type of the last exception line (``ValueError``,
  ``pkg.Error``, ``SystemExit`` ...) of both outputs, None counting as a type;
- line-level similarity: ``difflib.SequenceMatcher`` ratio over the lines of stdout +
  stderr (1.0 for two empty outputs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "compare_results",
    "mean",
    "mean_interval",
    "output_statuses",
    "percentile",
    "rate",
    "status_agreement",
    "wilson_interval",
]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, one of the values (the nearest rank: numpy's
    ``method="nearest"``); NaN for no value."""
    if not len(values):
        return float("nan")
    return float(np.percentile(values, q, method="nearest"))


def rate(values: Iterable[Any]) -> float | None:
    """Mean of the values that are not None (booleans count 1/0); None when none is left."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def wilson_interval(k: float, n: int, z: float = 1.96) -> list[float] | None:
    """Wilson's 95% interval of the proportion ``k / n``, rounded to 4 places; None for
    ``n == 0``."""
    if n <= 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denom
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def mean_interval(values: Iterable[float], z: float = 1.96) -> list[float] | None:
    """A normal-approximation 95% interval of the mean of ``values`` (None values left
    out), clipped to [0, 1] (for similarities); None for fewer than two values."""
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if len(kept) < 2:
        return None
    m = sum(kept) / len(kept)
    sd = math.sqrt(sum((v - m) ** 2 for v in kept) / (len(kept) - 1))
    half = z * sd / math.sqrt(len(kept))
    return [round(max(0.0, m - half), 4), round(min(1.0, m + half), 4)]


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean, None for no value (never NaN in a report)."""
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(kept) / len(kept) if kept else None


def output_statuses(command: str, output: str, repo: str | None) -> dict[str, str]:
    """``{test id: status}`` in a command's output by the shared grader's parser for
    ``repo`` (empty when the command is not a test run or names no test)."""
    from sweworld.data.record import test_statuses as record_statuses

    return record_statuses(command, output, repo)


def status_agreement(real: Mapping[str, str], predicted: Mapping[str, str]) -> float | None:
    """Fraction of the tests named by either side whose statuses are equal (a test one side
    does not name has no status there); None when neither names a test."""
    names = set(real) | set(predicted)
    if not names:
        return None
    return sum(real.get(t) == predicted.get(t) for t in names) / len(names)


def compare_results(
    real: Any,
    predicted: Any,
    *,
    command: str = "",
    repo: str | None = None,
    real_statuses: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Agreement of ``predicted`` with ``real`` (both with ``stdout``, ``stderr``,
    ``exit_code``): ``exit_code``, ``exception`` (bools), ``tests`` (per-test agreement or
    None), ``line_similarity`` (0..1).

    With ``command`` the per-test statuses are read by the repository's parser (as the data
    records store them; ``real_statuses`` are used as given when passed); without it, by
    the pytest parser (the comparison of live runs, :func:`sweworld.transition.hybrid.compare`).
    """
    from sweworld.transition.hybrid import compare

    agree = compare(real, predicted)
    if command:
        real_tests = (
            dict(real_statuses)
            if real_statuses is not None
            else output_statuses(command, real.stdout + "\n" + real.stderr, repo)
        )
        predicted_tests = output_statuses(command, predicted.stdout + "\n" + predicted.stderr, repo)
        agree["tests"] = status_agreement(real_tests, predicted_tests)
    return agree
