"""A report for the benchmarks that measure once and print: ``--json FILE`` and ``--out DIR``.

The single-run benchmarks (``sweworld bench sandbox``, ``quota``, ``collect``, ...) compute
one result (a dict, or a list of rows) and print it as tables. :func:`add_report_arguments`
gives each the same two options, and :func:`write_summary` writes the result where they
say: ``--json FILE`` the result alone, as JSON; ``--out DIR`` a
:class:`~sweworld.bench.output.BenchOutput` folder (``report.json`` with provenance and
settings, ``report.md``), whose tables :func:`summary_figures` derives from the result's
shape (a list of flat rows is a table, a flat dict a two-column table, nested ones by key).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.bench.output import BenchOutput, Figure, figure

__all__ = ["add_report_arguments", "settings_of", "summary_figures", "write_summary"]

#: Options that name where output goes, not what is measured (left out of the settings).
_NOT_SETTINGS = {"out", "json", "fresh", "command", "bench_command", "func", "verbose"}


def add_report_arguments(parser: argparse.ArgumentParser, *, out: bool = True) -> None:
    """Add ``--json FILE`` and (unless ``out`` is False) ``--out DIR`` to ``parser``."""
    parser.add_argument("--json", default=None, metavar="FILE", help="write the result as JSON")
    if out:
        parser.add_argument(
            "--out", default=None, metavar="DIR",
            help="also write report.json and report.md into DIR (sweworld bench render reads "
            "them from benchmarks/results/)",
        )  # fmt: skip


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The options of a run that decide what it measures (JSON-safe)."""
    out: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key in _NOT_SETTINGS or key.startswith("bench_") or callable(value):
            continue
        out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
    return out


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None)))


def _rows_table(title: str, rows: Sequence[Mapping[str, Any]]) -> Figure | None:
    columns: list[str] = []
    for row in rows:
        columns += [k for k, v in row.items() if _scalar(v) and k not in columns]
    if not columns:
        return None
    return figure(title, columns, [[row.get(c) for c in columns] for row in rows])


def summary_figures(result: Any, title: str = "result") -> list[Figure]:
    """Tables of ``result``: a list of flat dicts is one table (a column per key); a dict
    gives a two-column table of its scalar values, then the tables of its other values,
    titled by their key path. Values that are neither are left to ``summary``."""
    figures: list[Figure] = []
    if isinstance(result, Sequence) and not isinstance(result, str):
        rows = [r for r in result if isinstance(r, Mapping)]
        table = _rows_table(title, rows) if rows else None
        if table is not None:
            figures.append(table)
        return figures
    if not isinstance(result, Mapping):
        return figures
    scalars = [[k, v] for k, v in result.items() if _scalar(v)]
    if scalars:
        figures.append(figure(title, ["key", "value"], scalars))
    for key, value in result.items():
        if not _scalar(value):
            figures += summary_figures(value, f"{title} / {key}")
    return figures


def write_summary(
    args: argparse.Namespace,
    benchmark: str,
    result: Any,
    *,
    title: str = "",
    description: str = "",
    figures: Sequence[Figure] | None = None,
) -> Path | None:
    """Write ``result`` to ``args.json`` and a report to ``args.out`` (either may be None).
    Returns the report folder, or None when there is none."""
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
    if not getattr(args, "out", None):
        return None
    output = BenchOutput(
        args.out, benchmark, title=title or benchmark, description=description,
        settings=settings_of(args), fresh=True,
    )  # fmt: skip
    shown = list(figures) if figures is not None else summary_figures(result, title or benchmark)
    output.write(shown, summary=json.loads(json.dumps(result, default=str)))
    return output.dir
