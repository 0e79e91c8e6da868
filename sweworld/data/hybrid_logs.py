"""Hybrid executor logs -> SWT records with the prediction beside the truth.

:class:`~sweworld.transition.hybrid.HybridExecutor` with ``shadow=True`` logs, per
execution command, the real and the simulated answer side by side (JSONL: ``command``,
``cwd``, ``session_id``, ``task`` (the instance id), ``route``, ``real`` and ``simulated``
``{stdout, stderr, exit_code, info}``, ``agree``). This module turns those lines into
:class:`~sweworld.data.schema.SWTRecord` rows: the real answer is the target and the
simulated one goes to the ``prediction`` column, so a hybrid run's log becomes fidelity
data (exit-code and test-status agreement per command kind) instead of a dead end.

What the log does not hold, and what that means for the records:

* the **workspace state** (the agent's diff and the files the command read): the contexts
  are built over an empty workspace, with ``state_source="trajectory"`` and
  ``meta.verified = false``, like an import without the repository. The prediction in the
  log was made with the full state, so these records are for fidelity figures and, with
  that caveat, weak training examples;
* the **task row**: joined by instance id from a task file (a line whose task is unknown is
  skipped with the reason);
* the request's ``argv``, ``env`` and ``stdin``, and the agent's step index: the command is
  split with ``shlex``; env and stdin are empty; ``step`` is the line's index in its session;
* a line without a ``real`` side (``shadow=False`` and a simulated command) has no truth and
  is skipped with the reason, as is one whose real side did not run the command (the
  environment did not build, the executor failed: ``info.executed`` false); one without a
  ``simulated`` side keeps an empty prediction.

For training data with the state, use collect mode with a predictor (``sweworld data
collect --predict MODEL``): it records truth and prediction of every command in full.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.data.record import HISTORY_OUTPUT_CHARS, HISTORY_STEPS, context_config, test_statuses
from sweworld.data.schema import SWTRecord, command_kind, record_id, to_json
from sweworld.data.store import RecordStore

__all__ = ["HybridLogSkip", "HybridLogStats", "convert_hybrid_log", "read_hybrid_log"]

WORKDIR = "/testbed"


@dataclass(frozen=True)
class HybridLogSkip:
    """A log line left out, and why."""

    unit: str
    reason: str


@dataclass
class HybridLogStats:
    lines: int = 0
    records: int = 0
    with_prediction: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def _side(row: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    side = row.get(name)
    if not isinstance(side, Mapping):
        return None
    if not isinstance(side.get("exit_code"), int) or isinstance(side.get("exit_code"), bool):
        return None
    if not isinstance(side.get("stdout", ""), str) or not isinstance(side.get("stderr", ""), str):
        return None
    return side


def _not_run(side: Mapping[str, Any]) -> str:
    """Why a real answer is not the command's outcome (an environment that did not build, an
    executor error, a command the executor never started), or ``""``: such an answer is an
    error message, not a truth to learn."""
    info = side.get("info") if isinstance(side.get("info"), Mapping) else {}
    status = info.get("status")
    if status in ("env_failed", "error") or info.get("executed") is False:
        return f"{status or 'not executed'}: {info.get('reason') or info.get('error') or ''}"
    return ""


def _argv(command: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return ("bash", "-c", command)


class _Request:
    """What the context builder reads of an execution request, rebuilt from a log line."""

    def __init__(self, command: str, cwd: str, task: Any):
        self.command = command
        self.argv = _argv(command)
        self.cwd = cwd
        self.env: dict[str, str] = {}
        self.stdin = b""
        self.task = task


def read_hybrid_log(
    path: str | Path,
    tasks: Mapping[str, Any],
    *,
    modes: tuple[str, ...] = ("oracle", "blind"),
    model: str = "embedded",
) -> Iterator[SWTRecord | HybridLogSkip]:
    """The records of a hybrid log, and a :class:`HybridLogSkip` for each line left out.

    ``tasks`` maps instance ids to :class:`~sweworld.tasks.Task` objects. Reads the file
    once, line by line; history is kept per session (the last few real answers).
    """
    from sweworld.transition.context import HistoryItem, build_context
    from sweworld.transition.types import WorkspaceView

    configs = {m: context_config(m, model) for m in modes}
    history: dict[str, list[Any]] = {}
    steps: dict[str, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="sweworld-hybrid-") as empty,
        open(path, encoding="utf-8", errors="replace") as handle,
    ):
        view = WorkspaceView(Path(empty), cwd=WORKDIR)
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            unit = f"{path} line {number}"
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:
                yield HybridLogSkip(unit, f"invalid JSON: {exc}")
                continue
            if not isinstance(row, Mapping) or not isinstance(row.get("command"), str):
                yield HybridLogSkip(unit, "not a hybrid log line (no command)")
                continue
            session = str(row.get("session_id") or "")
            step = steps.get(session, 0)
            steps[session] = step + 1
            real = _side(row, "real")
            if real is None:
                reason = (
                    "no real result (the command was simulated only)"
                    if row.get("real") is None
                    else "malformed real result (needs stdout, stderr and an integer exit_code)"
                )
                yield HybridLogSkip(unit, reason)
                continue
            failed = _not_run(real)
            if failed:
                yield HybridLogSkip(unit, f"the real side did not run the command: {failed}")
                continue
            task = tasks.get(str(row.get("task")))
            if task is None:
                yield HybridLogSkip(unit, f"unknown task {row.get('task')!r}")
                continue
            command = row["command"]
            cwd = str(row.get("cwd") or WORKDIR)
            past = tuple(history.get(session, ()))
            request = _Request(command, cwd, task)
            contexts = {
                m: build_context(request, view, task=task, history=past, config=cfg)
                for m, cfg in configs.items()
            }
            stdout, stderr = str(real.get("stdout", "")), str(real.get("stderr", ""))
            statuses = test_statuses(command, stdout + "\n" + stderr, task.repo or None)
            simulated = _side(row, "simulated")
            prediction = ""
            if simulated is not None:
                info = simulated.get("info") if isinstance(simulated.get("info"), Mapping) else {}
                prediction = to_json(
                    {
                        "stdout": simulated.get("stdout", ""),
                        "stderr": simulated.get("stderr", ""),
                        "exit_code": simulated["exit_code"],
                        "source": info.get("source"),
                    }
                )
            yield SWTRecord(
                id=record_id("hybrid-log", task.instance_id, session, step, command),
                source="hybrid-log",
                instance_id=task.instance_id,
                repo=task.repo,
                base_commit=task.base_commit,
                task=to_json(task.to_row()),
                command=command,
                stdout=stdout,
                stderr=stderr,
                exit_code=int(real["exit_code"]),
                step=step,
                state_source="trajectory",
                cwd=cwd,
                history=to_json([h.__dict__ for h in past]),
                context_oracle=to_json(contexts["oracle"].to_dict())
                if "oracle" in contexts
                else "",
                context_blind=to_json(contexts["blind"].to_dict()) if "blind" in contexts else "",
                ran_tests=bool(statuses) or command_kind(command) in ("pytest", "unittest"),
                test_statuses=to_json(statuses),
                command_kind=command_kind(command),
                prediction=prediction,
                meta=to_json(
                    {
                        "verified": False,
                        "route": row.get("route"),
                        "agree": row.get("agree"),
                        "session_id": session,
                        "log": str(path),
                    }
                ),
            )
            items = history.setdefault(session, [])
            items.append(
                HistoryItem(
                    command=command,
                    exit_code=int(real["exit_code"]),
                    output=(stdout + stderr)[-HISTORY_OUTPUT_CHARS:],
                )
            )
            del items[:-HISTORY_STEPS]


def convert_hybrid_log(
    path: str | Path, tasks: Mapping[str, Any], out: str | Path
) -> HybridLogStats:
    """Write the records of a hybrid log into the record store under ``out`` (skipped lines
    with their reasons); run :func:`~sweworld.data.store.finalize` after to get datasets.
    Done once per log file: converting the same log again writes nothing new."""
    stats = HybridLogStats()
    unit = f"hybrid-log:{Path(path).resolve()}"
    with RecordStore(out) as store:
        if store.is_done(unit):
            return stats
        for item in read_hybrid_log(path, tasks):
            stats.lines += 1
            if isinstance(item, HybridLogSkip):
                store.skip(item.unit, item.reason)
                key = item.reason.split(":", 1)[0]
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            if store.add(item):
                stats.records += 1
                stats.with_prediction += int(bool(item.prediction))
        store.done(unit, swt=stats.records, lines=stats.lines)
    return stats
