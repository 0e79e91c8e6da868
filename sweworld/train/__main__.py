"""``python -m sweworld.train swt|swr [options]``: the same as ``sweworld train``."""

from __future__ import annotations

import argparse
import sys

from sweworld.train.config import add_arguments


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one training; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m sweworld.train", description="fine-tune the SWT / SWR adapters (LoRA)"
    )
    sub = parser.add_subparsers(dest="train_target", required=True)
    for target, help_text in (
        ("swt", "train the transition model (predicts a command's output)"),
        ("swr", "train the reward model (P(resolved) of a candidate patch)"),
    ):
        add_arguments(sub.add_parser(target, help=help_text, description=help_text), target)
    args = parser.parse_args(argv)
    from sweworld.train.main import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
