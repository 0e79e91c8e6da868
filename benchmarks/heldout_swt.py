"""Replaced by ``sweworld bench swt``: this script says so and exits 2.

    sweworld bench swt --data D [D ...] --out R [--models embedded:base,embedded] [--fresh]

writes R/report.json, R/report.md and the plots, resumable (logic:
:mod:`sweworld.bench.swt_eval`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Say which command replaced this script; exit status 2."""
    args = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"benchmarks/heldout_swt.py was replaced by: sweworld bench swt {args}".rstrip())
    return 2


if __name__ == "__main__":
    sys.exit(main())
