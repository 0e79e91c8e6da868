"""SWR on held-out repositories: base model vs trained adapter vs floors, oracle and blind.

For the test split of SWR datasets (candidate patches with real labels, on repositories
never trained on), a label-balanced seeded sample is scored by the reward model of each
spec (all stages; the tests stage's probability alone too). Printed per mode: accuracy,
precision, recall, F1, balanced accuracy, ROC AUC and ECE, overall and per repository, with
the floors beside (always resolved, the gold-files heuristic, random), and best-of-N
(N = 2, 4, 8) on tasks with several labelled candidates: selected vs random vs oracle.
Logic: :mod:`sweworld.bench.swr_eval`.

    python benchmarks/heldout_swr.py --data D [D ...] --models embedded:base,embedded \\
        [--modes oracle,blind] [--limit 40] [--bon-tasks 8] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from sweworld.bench.swr_eval import add_arguments, run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
