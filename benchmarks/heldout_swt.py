"""SWT on held-out repositories: base model vs trained adapter vs floors, oracle and blind.

For the test split of SWT datasets (``sweworld data import`` / ``make-tasks`` / ``collect``
output; repositories never trained on), a seeded sample stratified by command kind and
repository is answered by each model from the stored contexts through the simulator's
inference path. Printed per mode: exit-code, per-test status and exception-type agreement,
line similarity, fallback rate, latency p50 / p95 (overall, by command kind, by repository),
with the floors (always exit 0 / exit 1 with empty output) beside. Logic:
:mod:`sweworld.bench.swt_eval`.

    python benchmarks/heldout_swt.py --data D [D ...] --models embedded:base,embedded \\
        [--modes oracle,blind] [--limit 60] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from sweworld.bench.swt_eval import add_arguments, run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
