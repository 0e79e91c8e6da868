"""What a training run says about its data: examples built and left out per split, and why
there is no training example when there is none (with the option that changes it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sweworld.train.config import TrainConfig
from sweworld.train.examples import Example

__all__ = ["data_report", "no_example_reason"]


def invocation(command: str, argv: list[str]) -> str:
    """``sweworld train COMMAND`` with the options of ``argv`` (a process's ``sys.argv``),
    whether it ran as ``sweworld train COMMAND ...`` or ``python -m sweworld.train.COMMAND
    ...``."""
    args = list(argv[1:])
    if args[:2] == ["train", command]:
        args = args[2:]
    elif args[:1] == [command]:
        args = args[1:]
    return " ".join(["sweworld", "train", command, *args])


def data_report(
    config: TrainConfig,
    records: list[Any],
    examples: list[Example],
    skipped: Counter,
    split: str,
) -> list[str]:
    """What became of one split's records: examples built (evaluated, for ``test``) and
    every one left out, by reason, with the option that changes it."""
    kind = config.target
    what = "train" if split == "train" else "test (evaluation)"
    lines = [
        f"{kind} {what}: {len(records)} records -> {len(examples)} examples "
        f"(modes {','.join(config.modes)})"
    ]
    if split == "test" and config.eval_limit:
        lines[0] += f"; at most {config.eval_limit} evaluated (--eval-max-examples)"
    for reason, n in sorted(skipped.items(), key=lambda item: -item[1]):
        option = _SKIP_OPTIONS.get(reason, "")
        lines.append(f"  left out: {n} {reason}" + (f" ({option})" if option else ""))
    return lines


#: The option that keeps examples of a left-out reason.
_SKIP_OPTIONS = {
    "longer than max_length": "raise --max-length",
    "inconsistent replay (include_inconsistent is off)": "--include-inconsistent",
    "trajectory state (include_trajectory_state is off)": "--include-trajectory-state",
}


def no_example_reason(
    config: TrainConfig,
    records: list[Any],
    skipped: Counter,
    test_counts: dict[str, Any],
    test_repos: list[str] = (),  # type: ignore[assignment]
) -> str:
    """Why there is no training example, and what to do about it."""
    kind = config.target
    where = ", ".join(config.data)
    if records:
        reasons = ", ".join(f"{n} {r}" for r, n in skipped.most_common())
        return (
            f"no {kind} training example in {where}: all {len(records)} train records were "
            f"left out ({reasons})"
        )
    in_test = sum(c.get("records", 0) for c in test_counts.values() if isinstance(c, dict))
    errors = [f"{f}: {c['error']}" for f, c in test_counts.items() if "error" in c]
    if in_test:
        held = sorted(test_repos or _heldout_of(config.data))
        return (
            f"no {kind} training example in {where}: all {in_test} {kind} records are in the "
            f"test split (held-out repositories: {', '.join(held) or 'see summary.json'}); "
            "remake the data with `sweworld data make-tasks ... --split train` (or "
            "--heldout none), or add --data folders of other repositories"
        )
    if errors:
        return f"no {kind} training example: " + "; ".join(errors)
    return f"no {kind} training example in {where}: it holds no {kind} record"


def _heldout_of(folders: list[str]) -> set[str]:
    """The held-out repositories the datasets' ``summary.json`` files name."""
    held: set[str] = set()
    for folder in folders:
        try:
            summary = json.loads((Path(folder) / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        held.update(summary.get("heldout_repos") or [])
    return held
