"""The ``sweworld`` command line.

    sweworld tasks list [--tasks TASKS]
    sweworld tasks show --tasks TASKS --id ID [--field NAME] [--json]
    sweworld shell --tasks TASKS --id ID [--executor NAME]
    sweworld run --tasks TASKS --id ID --actions ACTIONS.jsonl [--executor NAME]
    sweworld episode --id ID --actions ACTIONS.jsonl [--executor NAME] [--reward swr|real]
    sweworld grade --tasks TASKS --id ID [--patch FILE | --log FILE] [--executor local]
    sweworld simulate --tasks TASKS --id ID --command "python -m pytest tests -rA"
    sweworld reward --tasks TASKS --id ID --patch P [--mode blind|oracle]
    sweworld verify --tasks TASKS --candidates C [C ...] --out preds.json
    sweworld calibrate --tasks TASKS --candidates LABELLED [...]
    sweworld serve model --preset 4x3090|cpu [--model PATH] [--adapter NAME=PATH ...] [--dry-run]
    sweworld serve world --port P --token K
    sweworld gc
    sweworld doctor [--json]

``--tasks`` defaults to the project's toy tasks (``data/toy/tasks.jsonl``); ``--file`` is its
earlier name, still accepted. ``--mode`` is ``blind`` by default in every command (what a
deployed world sees: no gold patch, no test lists); ``oracle`` is for evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sweworld import __version__, shell, task_commands
from sweworld.cli_inputs import (  # re-exported: shell, task_commands and callers use them
    one_line,
    open_session,
    read_actions,
    read_input,
    task_from_args,
)
from sweworld.shell import read_action
from sweworld.tasks.fields import MODE_HELP, MODES

__all__ = ["build_parser", "main", "read_action", "read_actions", "read_input", "task_from_args"]


def _add_task_args(p: argparse.ArgumentParser, *, need_id: bool = True) -> None:
    p.add_argument(
        "--tasks",
        dest="file",
        default=None,
        metavar="FILE",
        help="task rows: .json, .jsonl(.gz), .parquet, a saved HF dataset folder or "
        "a hub name (default: the toy tasks)",
    )
    # the option's earlier name, still accepted (one documented name per concept)
    p.add_argument("--file", dest="file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--split", default=None, help="split, for HF datasets (default: test)")
    p.add_argument(
        "--repo-cache",
        default=None,
        metavar="DIR",
        help="folder of the tasks' repositories (clones or mirrors, e.g. make-tasks' "
        "<out>/repos); default: $SWEWORLD_REPO_CACHE, and a repos/ folder beside --tasks",
    )
    if need_id:
        p.add_argument("--id", required=True, help="instance_id of the task")


def _add_session_args(p: argparse.ArgumentParser, *, executor: str | None = "none") -> None:
    p.add_argument(
        "--executor",
        default=executor,
        help="what answers execution commands: none, outcome (the outcome model decides, the "
        "renderer writes), simulated (the SWT language model), local, hybrid, docker, "
        "scripted:RULES.json, or a dotted path to an Executor class (default: "
        + (executor or "outcome; simulated when --model is given")
        + ")",
    )
    p.add_argument(
        "--disk-mb",
        type=int,
        default=None,
        help="the session's disk quota in MiB: /testbed's changes, /tmp and snapshots "
        "together (default $SWEWORLD_DISK_MB or 1024); kernel-enforced on the overlay backend",
    )
    p.add_argument(
        "--rebuild-env",
        action="store_true",
        help="--executor local: rebuild the task's Python environment even if one is cached",
    )
    p.add_argument(
        "--repo-path",
        default=None,
        help="local clone, mirror or source folder of the task's repository "
        "(default: the toy repo, or $SWEWORLD_REPO_CACHE)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="SWT model for --executor simulated/hybrid: embedded (default: SmolLM2-135M "
        "with the shipped swt-default adapter), embedded:base (no adapter), embedded+ADAPTER "
        "(an adapter from `sweworld train swt`), openai:URL#MODEL, hf:PATH[+ADAPTER] or "
        "replay:FILE",
    )
    p.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        help="--executor simulated/hybrid: seconds one simulated step may take in all (model "
        "calls and resamples included) before the conservative answer (default 300)",
    )
    p.add_argument(
        "--mode",
        default="oracle",
        choices=list(MODES),
        help=MODE_HELP,
    )
    p.add_argument(
        "--history",
        default="full",
        help="git history in the sandbox: full (up to the base commit), depth:N (the last N "
        "commits) or none (one root commit) (default: full)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "overlay", "copy"],
        help="copy-on-write workspace backend (default: auto)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds a command may run (executor time not counted; default 90)",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "r2egym", "mini"],
        dest="observation_format",
        help="observation format: auto (R2E-Gym for function calls, "
        "mini-swe-agent for bash), r2egym or mini",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sweworld",
        description="Train and evaluate software-engineering agents without Docker.",
    )
    parser.add_argument("--version", action="version", version=f"sweworld {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what happens to stderr (-v: warnings, e.g. simulator failures; -vv: details)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="list and show task rows")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True)
    tlist = tsub.add_parser("list", help="one line per task")
    _add_task_args(tlist, need_id=False)
    tlist.add_argument("--repo", default=None, help="only tasks of this repository")
    tlist.add_argument("--limit", type=int, default=None, help="at most this many")
    tshow = tsub.add_parser("show", help="print one task's fields")
    _add_task_args(tshow)
    tshow.add_argument("--field", default=None, help="print only this field")
    tshow.add_argument("--json", action="store_true", help="print the row as JSON")

    shell = sub.add_parser("shell", help="open a session and type actions interactively")
    _add_task_args(shell)
    _add_session_args(shell)

    run = sub.add_parser("run", help="replay a file of actions and print the observations")
    _add_task_args(run)
    _add_session_args(run)
    run.add_argument(
        "--actions",
        required=True,
        help="JSONL file: one JSON string per line (an XML function call or a "
        "bash command), or one tool-call object per line; '-' for stdin",
    )

    simulate = sub.add_parser(
        "simulate",
        help="predict what a command prints on a task (the outcome world; SWT with --model)",
    )
    _add_task_args(simulate)
    _add_session_args(simulate, executor=None)
    simulate.add_argument(
        "--command", required=True, dest="shell_command", help="the shell command to predict"
    )
    simulate.add_argument(
        "--patch", default=None, help="apply this patch first (the session state to predict on)"
    )

    grade = sub.add_parser(
        "grade",
        help="grade a test log, or verify a patch by running the task's tests for real",
    )
    _add_task_args(grade)
    grade.add_argument(
        "--patch", default=None, help="candidate patch file ('-' for stdin); omit to grade the base"
    )
    grade.add_argument(
        "--log", default=None, help="grade this test log instead of running anything"
    )
    grade.add_argument(
        "--executor", default="local", help="what runs the tests: local (default) or docker"
    )
    grade.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds the test run may take (default 1800)"
    )
    grade.add_argument(
        "--show-log", action="store_true", help="also print the test log (to stderr)"
    )
    grade.add_argument(
        "--rebuild-env", action="store_true", help="rebuild the cached Python environment"
    )

    from sweworld.reward.cli import add_reward_parsers

    add_reward_parsers(sub, _add_task_args)

    from sweworld.env.cli import add_episode_parser

    add_episode_parser(sub, _add_task_args)

    from sweworld.data.cli import add_data_parsers
    from sweworld.train.cli import add_train_parsers

    add_data_parsers(sub)
    add_train_parsers(sub)

    from sweworld.serve.cli import add_serve_parsers

    add_serve_parsers(sub)

    from sweworld.bench.cli import add_bench_parsers

    add_bench_parsers(sub)

    from sweworld.execution.docker.cli import add_docker_parsers

    add_docker_parsers(sub)

    sub.add_parser("gc", help="remove session state left by processes that died")
    from sweworld.doctor import add_parser as add_doctor_parser

    add_doctor_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from sweworld.console import quiet_dependencies

    quiet_dependencies(args.verbose)
    if args.verbose:
        import logging

        logging.basicConfig(
            level=logging.WARNING if args.verbose == 1 else logging.DEBUG,
            format="sweworld: %(levelname)s %(name)s: %(message)s",
        )
    try:
        use_repo_cache(args)
        if args.command == "tasks":
            return task_commands.cmd_tasks(args)
        if args.command == "shell":
            return shell.cmd_shell(args)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "grade":
            return task_commands.cmd_grade(args)
        if args.command == "simulate":
            return _cmd_simulate(args)
        if args.command in ("reward", "verify", "calibrate"):
            from sweworld.reward import cli as reward_cli
            from sweworld.world import swr_lm_from_spec

            swr_lm = swr_lm_from_spec(args.model)  # the tests stage's model, loaded if used
            if args.command == "reward":
                return reward_cli.cmd_reward(args, task_from_args(args), swr_lm=swr_lm)
            if args.command == "verify":
                return reward_cli.cmd_verify(args, swr_lm=swr_lm)
            return reward_cli.cmd_calibrate(args, swr_lm=swr_lm)
        if args.command == "episode":
            from sweworld.env import cli as env_cli

            return env_cli.run(args)
        if args.command == "data":
            from sweworld.data import cli as data_cli

            return data_cli.run(args)
        if args.command == "train":
            from sweworld.train import cli as train_cli

            return train_cli.run(args)
        if args.command == "serve":
            from sweworld.serve import cli as serve_cli

            return serve_cli.run(args)
        if args.command == "bench":
            from sweworld.bench import cli as bench_cli

            return bench_cli.run(args)
        if args.command == "docker":
            from sweworld.execution.docker import cli as docker_cli

            return docker_cli.run(args)
        if args.command == "doctor":
            from sweworld.doctor import run as run_doctor

            return run_doctor(args)
        if args.command == "gc":
            from sweworld.sandbox.manager import gc_stale_sessions

            removed = gc_stale_sessions()
            print(f"removed {len(removed)} stale session(s)")
            return 0
    except KeyboardInterrupt:
        return 130
    except ImportError as exc:  # an optional dependency: name the extra that brings it
        from sweworld.extras import missing_extra_from

        missing = missing_extra_from(exc, _command_name(args))
        if missing is None and type(exc).__name__ != "MissingDependencyError":
            raise
        print(f"sweworld: error: {one_line(missing or exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a clear one-line error, not a traceback, for expected failures
        if _expected(exc):
            print(f"sweworld: error: {one_line(exc)}", file=sys.stderr)
            return 2
        raise
    return 2


def use_repo_cache(args: argparse.Namespace) -> None:
    """Let this process's sessions find the tasks' repositories: ``--repo-cache DIR``, and
    a ``repos/`` folder beside the task file (where ``sweworld data make-tasks`` puts it)."""
    from sweworld.data.importing import add_repo_cache

    if getattr(args, "command", None) == "data":  # data commands fill their own cache
        return
    task_file = getattr(args, "file", None)
    beside = Path(task_file).parent / "repos" if task_file else None
    if beside is not None and beside.is_dir():
        add_repo_cache(beside.resolve())
    if getattr(args, "repo_cache", None):
        cache = Path(args.repo_cache).expanduser()
        if not cache.is_dir():
            raise FileNotFoundError(f"--repo-cache {cache} is not a folder")
        add_repo_cache(cache.resolve())


def _command_name(args: argparse.Namespace) -> str:
    """``sweworld data make-tasks`` for the parsed arguments (the command and its
    sub-command)."""
    words = ["sweworld", args.command]
    for key in (
        "tasks_command",
        "data_command",
        "train_target",
        "serve_command",
        "bench_command",
        "docker_command",
    ):
        value = getattr(args, key, None)
        if isinstance(value, str):
            words.append(value)
            break
    return " ".join(words)


def _expected(exc: Exception) -> bool:
    from sweworld.models.base import LMError
    from sweworld.sandbox.bwrap import SandboxUnavailable
    from sweworld.sandbox.repos import RepoError
    from sweworld.sandbox.workspace import WorkspaceError

    return isinstance(
        exc,
        (OSError, KeyError, ValueError, LMError, RepoError, SandboxUnavailable, WorkspaceError),
    )


# ---------------------------------------------------------------------------- tasks


# ---------------------------------------------------------------------------- sessions


def _cmd_run(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.actions == "-" else args.actions
    text = read_input(args.actions, "actions file")
    actions = list(read_actions(text.split("\n"), source))
    manager, session = open_session(args)
    try:
        for action in actions:
            result = session.step(action)
            print(json.dumps(result.to_dict()), flush=True)
            if result.done:
                break
        print(json.dumps({"patch": session.get_patch()}), flush=True)
    finally:
        manager.close_all()
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    patch = read_input(args.patch, "patch file") if args.patch else None
    manager, session = open_session(args)
    try:
        if patch is not None:
            session.write_file("/tmp/sweworld_state.patch", patch)
            applied = session.run("git apply /tmp/sweworld_state.patch")
            if applied.exit_code != 0:
                raise ValueError(f"the patch does not apply: {applied.stderr.strip()}")
        outcome = session.run(args.shell_command)
        calls = outcome.info.get("execution_calls", [])
        info = {
            "simulated": any(c.get("info", {}).get("simulated") for c in calls),
            "executor": session.executor.name,
            "calls": calls,
            "wall_s": outcome.info.get("wall_s"),
        }
        result = {
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "exit_code": outcome.exit_code,
            "info": info,
        }
        print(json.dumps(result, indent=2, default=str))
    finally:
        manager.close_all()
    failure = _model_failure(calls)
    if failure:  # the model could not answer (unavailable, failed to load): not a prediction
        print(f"sweworld: error: the model could not answer: {failure}", file=sys.stderr)
        return 1
    return 0


def _model_failure(calls: list[dict[str, Any]]) -> str | None:
    """The error of the first execution call whose model failed (an internal error, or a
    model that could not be reached or loaded); None when every call got an answer."""
    for call in calls:
        info = call.get("info", {}) or {}
        if info.get("source") == "error":
            return one_line(Exception(info.get("error", "simulator error")))
        for attempt in info.get("attempts", ()) or ():
            if "error" in attempt:
                return one_line(Exception(attempt["error"]))
    return None


if __name__ == "__main__":
    sys.exit(main())
