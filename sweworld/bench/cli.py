"""``sweworld bench``: one command per benchmark, each writing ``OUT/report.json``,
``OUT/report.md`` and plots (:mod:`sweworld.bench.output`).

    sweworld bench swt --data D --out R          SWT vs recorded real transitions
    sweworld bench swr --data D --out R          SWR vs real labels
    sweworld bench tts --data D --out R          best-of-N selection by the verifier
    sweworld bench e2e --out R ...               an agent on simulated vs real feedback
    sweworld bench executors --out R ...         Docker vs Local vs Simulated, same steps
    sweworld bench throughput --out R            sessions and steps per second, memory
    sweworld bench sandbox | quota | serve | ...  one measurement each (see ``--help``)
    sweworld bench render                        BENCHMARKS.md from the committed reports

Each benchmark is a module with ``add_arguments(parser)`` and ``run(args) -> int``, named
in :data:`BENCHMARKS`; its module docstring's first paragraph is its help.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from sweworld.console import plain

#: benchmark name -> module with ``add_arguments(parser)`` and ``run(args)``.
BENCHMARKS: dict[str, str] = {
    "swt": "sweworld.bench.swt_run",
    "swr": "sweworld.bench.swr_eval",
    "tts": "sweworld.bench.tts",
    "e2e": "sweworld.bench.e2e",
    "executors": "sweworld.bench.executors",
    "throughput": "sweworld.bench.throughput",
    "tampering": "sweworld.bench.tampering",
    "sandbox": "sweworld.bench.sandbox",
    "quota": "sweworld.bench.quota",
    "local-overhead": "sweworld.bench.local_overhead",
    "swt-live": "sweworld.bench.swt_live",
    "swr-stages": "sweworld.bench.swr_stages",
    "adversarial": "sweworld.bench.adversarial",
    "facts-payoff": "sweworld.bench.facts_payoff",
    "embedded-speed": "sweworld.bench.embedded_speed",
    "outcome-speed": "sweworld.bench.outcome_speed",
    "outcome-train": "sweworld.bench.outcome_train",
    "vllm-cpu": "sweworld.bench.vllm_cpu",
    "serve": "sweworld.bench.serve_load",
    "ray-pool": "sweworld.bench.ray_pool",
    "import": "sweworld.bench.import_throughput",
    "collect": "sweworld.bench.collect_throughput",
    "factory": "sweworld.bench.factory_throughput",
    "train": "sweworld.bench.train_throughput",
    "data-outcome": "sweworld.bench.data_outcome",
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
    "sandbox": "sessions on a 6,000-file repository: create latency, disk, memory, file-op "
    "steps (root; --compare: before vs after a baseline commit)",
    "quota": "the per-session disk quota and snapshots, before vs after a baseline commit (root)",
    "local-overhead": "LocalExecutor against a bare `python -m pytest`, and environment builds",
    "swt-live": "SWT fidelity and latency on live toy runs, real execution as truth",
    "swr-stages": "SWR stages alone and combined on toy and SWE-bench Verified candidates",
    "adversarial": "worst time per adversarial input kind, and the pause it causes elsewhere",
    "facts-payoff": "how many real execution steps the exact facts answer, and how well",
    "embedded-speed": "the embedded SWT model's speed, option by option, on the same prompts",
    "outcome-speed": "per-step latency of the outcome executor beside the embedded LM route",
    "outcome-train": "time of sweworld train outcome: features by processes beside one, fit",
    "vllm-cpu": "a vLLM server on CPU against the in-process model, by concurrency",
    "serve": "the world service under load: steps/s, p50 / p99, memory, HTTP vs in-process",
    "ray-pool": "the Ray pool's overhead per step against the in-process pool",
    "import": "trajectory import throughput: replay vs fallback",
    "collect": "collection throughput: steps/s and SWT records/s of collect mode",
    "factory": "task-factory throughput: mutants screened and tasks made per minute",
    "train": "LoRA training throughput (tokens/s) of the embedded model, SWT and SWR",
    "data-outcome": "the outcome model's data build: records per repository, replay throughput",
    "render": "write BENCHMARKS.md from the committed report.json files",
}


#: Help of options a benchmark module declares without one (option -> help).
OPTION_HELP = {
    "--modes": "modes evaluated, comma-separated: oracle and/or blind (default: %(default)s)",
    "--mode": "what the simulated world may read: blind or oracle (default: %(default)s)",
    "--seed": "random seed of the samples (default: %(default)s)",
    "--stages": "SWR stages run, comma-separated (default: %(default)s)",
}


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip Sphinx markup from a parser's description and every option's help; give the
    options a module left without help their help from :data:`OPTION_HELP`."""
    parser.description = plain(parser.description)
    for action in parser._actions:
        if not action.help:
            action.help = next(
                (OPTION_HELP[o] for o in action.option_strings if o in OPTION_HELP), None
            )
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
