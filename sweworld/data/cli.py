"""``sweworld data import|make-tasks|build-outcome|collect``: the sub-commands that make datasets.

Each sub-command lives with its code: :mod:`sweworld.data.importing` (import),
:mod:`sweworld.data.factory.cli` (make-tasks), :mod:`sweworld.data.collect` (collect),
:mod:`sweworld.data.build` (build-outcome: all of them for the outcome model); each
module has ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

#: sub-command -> (module, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "import": (
        "sweworld.data.importing",
        "import agent trajectories, predictions and reports into SWT / SWR datasets",
    ),
    "make-tasks": (
        "sweworld.data.factory.cli",
        "make real tasks from a Python library by injecting bugs (no Docker)",
    ),
    "build-outcome": (
        "sweworld.data.build",
        "regenerate the outcome model's data: replay import of every cached repository "
        "and the task factory on libraries, merged and split by repository",
    ),
    "factory-reproductions": (
        "sweworld.data.factory.reproductions",
        "add agent-style reproductions (the failing test copied into reproduce_issue.py, run "
        "by pytest and as a script) on every state of a factory part's tasks",
    ),
    "collect": (
        "sweworld.data.collect",
        "run a policy against a real executor and record every step as SWT data",
    ),
}


def add_data_parsers(sub: Any) -> None:
    """Add ``data`` and its sub-commands to the CLI's subparsers."""
    data = sub.add_parser("data", help="build SWT / SWR datasets from real runs")
    dsub = data.add_subparsers(dest="data_command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = dsub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(data_module=module)
        importlib.import_module(module).add_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``data`` sub-command (exit 2 naming the ``data`` extra when it is not
    installed: every sub-command writes HF datasets)."""
    from sweworld.extras import extras, require

    require(extras().get("data", ()), "data", what=f"sweworld data {args.data_command}")
    return int(importlib.import_module(args.data_module).run(args))
