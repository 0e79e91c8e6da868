"""Replaced by ``sweworld bench swr``: this script says so and exits 2.

    sweworld bench swr --data D [D ...] --out R [--models embedded:base,embedded] [--fresh]

writes R/report.json, R/report.md and the plots, resumable (logic:
:mod:`sweworld.bench.swr_eval`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Say which command replaced this script; exit status 2."""
    args = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"benchmarks/heldout_swr.py was replaced by: sweworld bench swr {args}".rstrip())
    return 2


if __name__ == "__main__":
    sys.exit(main())
