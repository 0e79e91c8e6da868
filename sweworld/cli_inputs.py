"""What the command-line entry points share: reading input files and actions, the task the
arguments name, one-line errors, and the executor and session of the session commands
(``sweworld run | simulate | shell``).

Imports: the lower layers only (tasks, sandbox, and :mod:`sweworld.world` for executors),
lazily; never :mod:`sweworld.cli` nor the command modules, which import this one (the
imports point one way: ``cli`` and ``env/cli`` -> here).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_INPUT_BYTES",
    "default_tasks",
    "executor_from_args",
    "load_rows_of",
    "one_line",
    "open_session",
    "read_actions",
    "read_input",
    "task_from_args",
]


def default_tasks() -> str:
    """The toy tasks' file (what ``--file`` defaults to)."""
    from sweworld.tasks.toy import toy_tasks_path

    return str(toy_tasks_path())


def one_line(exc: BaseException) -> str:
    """An error as one line of text (a missing key or file said plainly)."""
    if isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


#: Largest input file read by the commands (patches, action files, logs).
MAX_INPUT_BYTES = 256 * 1024 * 1024


def read_input(
    path_text: str, what: str, *, errors: str = "strict", max_bytes: int = MAX_INPUT_BYTES
) -> str:
    """The text of the file ``path_text`` names (``-``: stdin), or a clear error: a missing
    path, a folder, an unreadable, undecodable or too large (over ``max_bytes``; endless
    ones such as /dev/zero included) file are each said in one line."""
    if path_text == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream standing in for stdin
            text = sys.stdin.read(max_bytes + 1)
            if len(text) > max_bytes:
                raise ValueError(f"{what} <stdin> is larger than {max_bytes} characters")
            return text
        data = stream.read(max_bytes + 1)
        path = Path("<stdin>")
    else:
        path = Path(path_text)
        if not path.exists():
            raise FileNotFoundError(f"{what} {path} does not exist")
        if path.is_dir():  # (a pipe such as /dev/stdin or <(...) is read as a file)
            raise ValueError(f"{what} {path} is a folder, not a file")
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {path} is larger than {max_bytes} bytes")
    try:  # newlines as text mode reads them (\r\n and \r become \n)
        return data.decode("utf-8", errors=errors).replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise ValueError(f"{what} {path} is not UTF-8 text ({where})") from None


def load_rows_of(args: argparse.Namespace) -> Any:
    """The task rows of ``--file`` (the toy tasks by default) and ``--split``."""
    from sweworld.tasks import load_tasks

    return load_tasks(args.file or default_tasks(), split=args.split)


def task_from_args(args: argparse.Namespace) -> Any:
    """The task ``--id`` names in ``--file`` (the toy tasks by default)."""
    from sweworld.tasks import get_task

    return get_task(args.file or default_tasks(), args.id)


def open_session(args: argparse.Namespace) -> tuple[Any, Any]:
    """A session manager and a session on the task the arguments name."""
    from sweworld.sandbox.bwrap import SandboxLimits
    from sweworld.sandbox.manager import SessionManager

    task = task_from_args(args)
    manager = SessionManager(
        backend=args.backend,
        executor=executor_from_args(args),
        limits=SandboxLimits(timeout=args.timeout)
        if args.disk_mb is None
        else SandboxLimits(timeout=args.timeout, disk_mb=args.disk_mb),
        observation_format=args.observation_format,
    )
    return manager, manager.open(task, repo_path=args.repo_path, history=args.history)


def executor_from_args(args: argparse.Namespace) -> Any:
    """The executor the session commands' ``--executor``, ``--model``, ``--mode`` and
    ``--step-timeout`` name (built by :mod:`sweworld.world`); a bad spec is said now."""
    from sweworld.world import LM_EXECUTORS, check_lm, executor_from_spec, require_lm

    if args.executor is None:  # a --model names the language-model route
        args.executor = "simulated" if args.model is not None else "outcome"

    if args.executor in LM_EXECUTORS:
        check_lm(args.model)  # a configuration error, said now rather than as an answer
        require_lm(args.model, f"--executor {args.executor}")
        options: dict[str, Any] = {"lm": args.model, "mode": args.mode}
        if args.step_timeout is not None:
            if not args.step_timeout > 0:
                raise ValueError(f"--step-timeout must be positive, not {args.step_timeout}")
            options["step_timeout"] = args.step_timeout
        return executor_from_spec(args.executor, **options)
    if args.executor.partition(":")[0] == "outcome":
        return executor_from_spec(args.executor, mode=args.mode)
    if args.executor == "local" and getattr(args, "rebuild_env", False):
        return executor_from_spec(args.executor, rebuild_env=True)
    return executor_from_spec(args.executor)


def read_actions(lines: Iterable[str], source: str = "actions") -> Iterator[Any]:
    """Actions from JSONL: each line a JSON string (XML call or bash) or a tool-call object."""
    from sweworld.tasks.loaders import read_json_lines

    hint = 'each line must be a JSON string such as "ls -la" or a tool-call object'
    values = read_json_lines(lines, source, error=ValueError)
    while True:
        try:
            where, value = next(values)
        except StopIteration:
            return
        except ValueError as exc:
            raise ValueError(f"{exc}; {hint}") from None
        if not isinstance(value, (str, dict)):
            raise ValueError(
                f"{where}: expected a JSON string or object, got {type(value).__name__}; {hint}"
            )
        yield value
