"""``sweworld train swt|swr|outcome|verdict``: see :mod:`sweworld.train`."""

from __future__ import annotations

import argparse
from typing import Any

from sweworld.console import plain


def add_train_parsers(sub: Any) -> None:
    """Add ``train`` with ``swt``, ``swr``, ``outcome`` and ``verdict`` to the CLI's subparsers."""
    from sweworld.train.config import add_arguments

    train = sub.add_parser(
        "train",
        help="train the world's models: SWT / SWR adapters (LoRA), the outcome model, the verdict",
    )
    tsub = train.add_subparsers(dest="train_target", required=True)
    for target, help_text in (
        ("swt", "train the transition model (predicts a command's output)"),
        ("swr", "train the reward model (P(resolved) of a candidate patch)"),
    ):
        p = tsub.add_parser(target, help=help_text, description=help_text)
        add_arguments(p, target)
    from sweworld.train import outcome

    p = tsub.add_parser(
        "outcome",
        help="train the outcome model (exit code, exception, per-test status; no LM)",
        description=plain(outcome.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    outcome.add_arguments(p)
    from sweworld.train import verdict

    p = tsub.add_parser(
        "verdict",
        help="train the SWR verdict (calibrated P(resolved) over the evidence; no LM)",
        description=plain(verdict.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verdict.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "train_target", None) == "outcome":
        from sweworld.train.outcome import run as run_outcome

        return int(run_outcome(args))
    if getattr(args, "train_target", None) == "verdict":
        from sweworld.train.verdict import run as run_verdict

        return int(run_verdict(args))
    from sweworld.train.main import run as run_training

    return int(run_training(args))
