"""``sweworld bench``: one command per benchmark, each writing ``OUT/report.json``,
``OUT/report.md`` and plots (:mod:`sweworld.bench.output`).

    sweworld bench swt --data D --out R          SWT vs recorded real transitions
    sweworld bench swr --data D --out R          SWR vs real labels
    sweworld bench tts --data D --out R          best-of-N selection by the verifier
    sweworld bench e2e --out R ...               an agent on simulated vs real feedback
    sweworld bench executors --out R ...         Docker vs Local vs Simulated, same steps
    sweworld bench throughput --out R            sessions and steps per second, memory
    sweworld bench render                        BENCHMARKS.md from the committed reports

Each benchmark is a module with ``add_arguments(parser)`` and ``run(args) -> int``, named
in :data:`BENCHMARKS`; its module docstring's first paragraph is its help.
"""

from __future__ import annotations

import argparse
import importlib
import re
from typing import Any

#: benchmark name -> module with ``add_arguments(parser)`` and ``run(args)``.
BENCHMARKS: dict[str, str] = {
    "swt": "sweworld.bench.swt_eval",
    "swr": "sweworld.bench.swr_eval",
    "tts": "sweworld.bench.tts",
    "e2e": "sweworld.bench.e2e",
    "executors": "sweworld.bench.executors",
    "throughput": "sweworld.bench.throughput",
    "tampering": "sweworld.bench.tampering",
    "render": "sweworld.bench.render",
}

HELP = {
    "swt": "SWT against recorded real transitions (exit code, tests, exceptions, output)",
    "swr": "SWR against real labels (accuracy, F1, ROC AUC, ECE; floors beside)",
    "tts": "test-time scaling: the verifier's pick among N candidates vs random/majority/oracle",
    "e2e": "an agent solves tasks on simulated and on real feedback; patches graded for real",
    "executors": "the same steps on Docker, Local and Simulated executors, compared",
    "throughput": "sessions and simulated / real steps per second, memory per session",
    "tampering": "the tampering stage on real submissions: flagged, and flagged but resolved "
    "by the harness",
    "render": "write BENCHMARKS.md from the committed report.json files",
}


_ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|obj|exc):`~?([^`]+)`")


def plain(text: str | None) -> str | None:
    """Help text without Sphinx markup: ``:mod:`a.b``` -> ``a.b``, ````x```` -> ``x``."""
    if not text:
        return text
    return _ROLE.sub(lambda m: m.group(1), text).replace("``", "")


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip Sphinx markup from a parser's description and every option's help."""
    parser.description = plain(parser.description)
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = plain(action.help)


def add_bench_parsers(sub: Any) -> None:
    """Add ``bench`` and one sub-command per benchmark to the CLI's subparsers."""
    bench = sub.add_parser(
        "bench",
        help="benchmarks against real execution, with reports (report.json, report.md, plots)",
        description=plain(__doc__.split("\n\n")[0]),
    )
    bsub = bench.add_subparsers(dest="bench_command", required=True)
    for name, module in BENCHMARKS.items():
        p = bsub.add_parser(name, help=HELP[name], description=HELP[name])
        # Imported lazily per benchmark: a module whose optional parts are missing still
        # lists; it says what is missing when run.
        try:
            importlib.import_module(module).add_arguments(p)
            _plain_help(p)
        except Exception as exc:  # one broken benchmark never breaks the other commands
            p.set_defaults(bench_import_error=f"{module}: {type(exc).__name__}: {exc}")


def run(args: argparse.Namespace) -> int:
    """Run the chosen benchmark."""
    if getattr(args, "bench_import_error", None):
        print(f"sweworld bench {args.bench_command}: cannot load {args.bench_import_error}")
        return 2
    return int(importlib.import_module(BENCHMARKS[args.bench_command]).run(args))
