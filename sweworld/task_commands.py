"""``sweworld tasks`` and ``sweworld grade``: commands on task rows (no session kept open)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["cmd_grade", "cmd_tasks"]


def cmd_tasks(args: argparse.Namespace) -> int:
    """``sweworld tasks list|show``."""
    from sweworld.cli_inputs import load_rows_of, task_from_args

    if args.tasks_command == "list":
        rows = [t for t in load_rows_of(args) if args.repo in (None, t.repo)]
        if args.limit is not None:
            rows = rows[: args.limit]
        width = max((len(t.instance_id) for t in rows), default=11)
        print(f"{'instance_id':<{width}}  {'repo':<28} {'base':<10} F2P  P2P")
        for t in rows:
            print(
                f"{t.instance_id:<{width}}  {t.repo:<28} {t.base_commit[:10]:<10} "
                f"{len(t.FAIL_TO_PASS):>3}  {len(t.PASS_TO_PASS):>3}"
            )
        print(f"{len(rows)} task(s)")
        return 0
    task = task_from_args(args)
    row = task.to_row()
    if args.field:
        if args.field not in row:
            raise KeyError(
                f"task {task.instance_id} has no field {args.field!r}; fields: {', '.join(row)}"
            )
        value = row[args.field]
        print(value if isinstance(value, str) else json.dumps(value, indent=2))
        return 0
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    for key, value in row.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if "\n" in text:
            print(f"== {key}\n{text.rstrip()}\n")
        else:
            print(f"== {key}: {text}")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    """``sweworld grade``: a test log graded, or a patch verified by running the tests;
    exit 1 when the tests could not run (the reason on stderr)."""
    from sweworld.cli_inputs import one_line, read_input, task_from_args
    from sweworld.execution.grading import (
        END_TEST_OUTPUT,
        START_TEST_OUTPUT,
        make_report,
        parse_eval_log,
        parse_log,
    )

    task = task_from_args(args)
    if args.log is not None:
        log = read_input(args.log, "log file", errors="replace")
        if START_TEST_OUTPUT in log or END_TEST_OUTPUT in log:  # a harness eval log
            statuses, ran = parse_eval_log(log, task.repo)
            report = make_report(task, statuses, patch="", status=None if ran else "error")
        else:  # the test runner's own output
            report = make_report(task, parse_log(log, task.repo), patch="")
        print(json.dumps(report, indent=2))
        return 0
    from sweworld.reward.real import real_reward
    from sweworld.world import executor_from_spec

    patch = read_input(args.patch, "patch file") if args.patch is not None else ""
    extra: dict[str, Any] = {}
    if args.executor in ("local", "docker"):
        extra["timeout"] = args.timeout
        if args.rebuild_env and args.executor == "local":
            extra["rebuild_env"] = True
    executor = executor_from_spec(args.executor, **extra)
    try:
        result = real_reward(task, patch, executor=executor, timeout=args.timeout)
    finally:
        if callable(getattr(executor, "close", None)):
            executor.close()
    if args.show_log:
        print(result.log, file=sys.stderr)
    report = result.report
    report[task.instance_id].setdefault("sweworld_status", result.status)
    print(json.dumps(report, indent=2))
    if result.status in ("error", "env_failed", "exec_failed"):  # not graded: say why
        reason = result.info.get("reason") or result.info.get("error") or result.status
        why = one_line(Exception(reason))
        print(f"sweworld: error: the tests did not run: {why}", file=sys.stderr)
        return 1
    return 0
