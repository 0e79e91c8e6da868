"""Collect mode: a policy runs against a real executor; every step becomes training data.

For each task a session is opened whose executor is a
:class:`~sweworld.data.record.RecordingExecutor` around the real executor (``local`` or
``docker``, by the registry's names): every execution call is answered for real and
recorded as an :class:`~sweworld.data.schema.SWTRecord` (``source="collect"``,
``state_source="live"``), with the simulator's prediction beside the truth when
``predict`` names an SWT model (the ``collect --executor hybrid`` of the data pipeline:
truth and prediction of the same command on the same state, in one record). The policy
(:mod:`sweworld.data.policies`) acts until it stops, submits or reaches ``max_steps``;
the whole run is one :class:`~sweworld.data.schema.Trajectory` line in
``<out>/trajectories.jsonl`` (every action and observation), and its final patch
(``session.get_patch()``) one :class:`~sweworld.data.schema.SWRRecord` labelled by the
**real** reward (:func:`sweworld.reward.real.real_reward`: the task's tests run for real
and graded by the shared grader; ``label_source="real-run"``).

A task is one unit of work: its records are written together when it ends, then it is
marked done, so a run killed at any point loses at most the tasks in progress and the same
command again resumes. A policy that raises, an executor that fails (an exception, an
environment that does not build, a command it could not run) or a session that cannot
open skips the task with the reason (``summary.json``); the other tasks go on.

    sweworld data collect --tasks toy --policy scripted:actions.txt --out D
    sweworld data collect --tasks T.jsonl --ids A B --policy openai:URL#MODEL \\
        --predict replay:answers.jsonl --mode oracle --max-steps 40 --workers 2 --out D
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sweworld.data.policies import Policy, make_policy_factory
from sweworld.data.record import RecordingExecutor
from sweworld.data.schema import (
    DEFAULT_HELDOUT_REPOS,
    SWRRecord,
    SWTRecord,
    Trajectory,
    TrajectoryStep,
    record_id,
    to_json,
)
from sweworld.data.store import RecordStore, finalize

__all__ = [
    "CollectStats",
    "ExecutorFailed",
    "PolicyFailed",
    "add_arguments",
    "collect",
    "load_collect_tasks",
    "run",
]

TRAJECTORIES = "trajectories.jsonl"
#: Real-reward outcomes that are a real label (the tests ran, or the harness's own verdict
#: for a patch that does not apply); the others (``env_failed``, ``exec_failed``,
#: ``timeout``, ``error``) are no label: the SWR record is skipped with the reason.
LABEL_STATUSES = ("ok", "patch_failed", "test_patch_failed")
#: Executor statuses that mean a command was not really run.
FAILED_STATUSES = ("env_failed", "exec_failed", "error")


class ExecutorFailed(RuntimeError):
    """The real executor could not answer a command for real: the task is skipped."""


class PolicyFailed(RuntimeError):
    """The policy raised: the task is skipped."""


@dataclass
class CollectStats:
    """What one :func:`collect` call did (``wall_s`` covers every task, labels included)."""

    tasks: int = 0
    done: int = 0
    resumed: int = 0
    skipped: int = 0
    steps: int = 0
    swt: int = 0
    swr: int = 0
    resolved: int = 0
    wall_s: float = 0.0
    skip_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps_per_s"] = self.steps / self.wall_s if self.wall_s else 0.0
        out["swt_per_s"] = self.swt / self.wall_s if self.wall_s else 0.0
        return out


class _Guard:
    """Passes calls to the real executor and remembers, per session, the first call it
    could not answer for real (an exception, or a status saying nothing ran)."""

    def __init__(self, truth: Any):
        self.truth = truth
        self.name = getattr(truth, "name", type(truth).__name__)
        self.failures: dict[str, str] = {}
        self._lock = threading.Lock()

    def _fail(self, session_id: str, reason: str) -> None:
        with self._lock:
            self.failures.setdefault(session_id, reason)

    def execute(self, request: Any) -> Any:
        try:
            result = self.truth.execute(request)
        except Exception as exc:
            self._fail(request.session_id, f"`{request.command}`: {type(exc).__name__}: {exc}")
            raise
        info = result.info if isinstance(result.info, Mapping) else {}
        status = info.get("status")
        # a program the command names that cannot start (exit 126/127 from a real run) is
        # the command's own outcome; an executor that never reached a run is a failure
        never_ran = status == "exec_failed" and "sandbox_wall_s" not in info
        if status in FAILED_STATUSES and (status != "exec_failed" or never_ran):
            reason = info.get("reason") or info.get("error") or status
            self._fail(request.session_id, f"`{request.command}`: {status}: {reason}")
        return result

    def failure(self, session_id: str) -> str | None:
        with self._lock:
            return self.failures.get(session_id)

    def close_session(self, session_id: str) -> None:
        with self._lock:
            self.failures.pop(session_id, None)
        hook = getattr(self.truth, "close_session", None)
        if hook is not None:
            hook(session_id)


def _action_text(action: Any) -> str:
    if isinstance(action, str):
        return action
    try:
        return json.dumps(action, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(action)


class _Collector:
    """The shared state of one :func:`collect` call; :meth:`run_task` does one task."""

    def __init__(self, store: RecordStore, out: Path, **options: Any):
        self.store = store
        self.out = out
        self.__dict__.update(options)
        self.stats = CollectStats()
        self._lock = threading.Lock()
        self._traj_path = out / TRAJECTORIES
        _cut_torn_tail(self._traj_path)  # else the next line is glued to it and lost
        self._traj_units = {
            str((row.get("meta") or {}).get("unit"))
            for row in _read_rows(self._traj_path)
            if isinstance(row.get("meta"), dict)
        }

    def skip(self, unit: str, reason: str) -> None:
        self.store.skip(unit, reason)
        key = reason.split(":", 1)[0]
        with self._lock:
            self.stats.skipped += 1
            self.stats.skip_reasons[key] = self.stats.skip_reasons.get(key, 0) + 1
        self.say(f"{unit}: skipped: {reason}")

    def say(self, text: str) -> None:
        if self.echo is not None:
            with self._lock:
                print(text, file=self.echo, flush=True)

    def run_task(self, task: Any) -> None:
        policy: Policy = self.policy_factory()
        name = str(getattr(policy, "name", type(policy).__name__))
        unit = f"collect:{name}:{task.instance_id}"
        if self.store.is_done(unit):
            with self._lock:
                self.stats.resumed += 1
            return
        try:
            outcome = self._episode(task, policy, name, unit)
        except ExecutorFailed as exc:
            self.skip(unit, f"executor failed: {exc}")
            return
        except PolicyFailed as exc:
            self.skip(unit, f"policy failed: {exc}")
            return
        except Exception as exc:  # a session that cannot open or give its patch
            self.skip(unit, f"session failed: {type(exc).__name__}: {exc}")
            return
        records, trajectory, swr, label_skip = outcome
        written = sum(self.store.add(r) for r in records)
        if swr is not None:
            self.store.add(swr)
        elif label_skip:
            self.store.skip(unit, label_skip)
        self._write_trajectory(unit, trajectory)
        self.store.done(
            unit, swt=len(records), swr=int(swr is not None), steps=len(trajectory.steps)
        )
        with self._lock:
            self.stats.done += 1
            self.stats.steps += len(trajectory.steps)
            self.stats.swt += written
            self.stats.swr += int(swr is not None)
            self.stats.resolved += int(bool(swr is not None and swr.resolved))
        verdict = "no label" if swr is None else f"resolved={swr.resolved}"
        self.say(
            f"{task.instance_id}: {len(trajectory.steps)} steps ({trajectory.meta['end']}), "
            f"{len(records)} SWT, {verdict}"
        )

    def _episode(
        self, task: Any, policy: Policy, name: str, unit: str
    ) -> tuple[list[SWTRecord], Trajectory, SWRRecord | None, str]:
        from sweworld.sandbox.actions import ActionParseError, parse_action

        records: list[SWTRecord] = []

        def sink(record: SWTRecord) -> None:  # ids stable across runs, not per session
            rid = record_id(
                "collect", name, task.instance_id, record.step, record.call, record.command
            )
            records.append(replace(record, id=rid))

        recorder = RecordingExecutor(
            self.guard,
            sink,
            source="collect",
            state_source="live",
            predictor=self.predictor,
            meta={"policy": name, "unit": unit},
        )
        first = str(getattr(task, "problem_statement", "") or "")
        session = self.manager.open(task, executor=recorder, config=self.session_config)
        steps: list[TrajectoryStep] = []
        end = "max steps"
        try:
            _call_policy(policy.reset, task, first)
            observation = first
            fmt = getattr(policy, "action_format", "auto")
            for index in range(self.max_steps):
                action = _call_policy(policy.act, observation)
                if action is None:
                    end = "policy stopped" + (
                        f": {policy.stop_reason}" if getattr(policy, "stop_reason", "") else ""
                    )
                    break
                raw = _action_text(action)
                try:
                    parsed = parse_action(action, fmt)
                except ActionParseError as exc:  # not run: the format error is the answer
                    observation = exc.message
                    steps.append(TrajectoryStep(command="", output=observation, action=raw))
                    continue
                recorder.begin_step(index, session.id)
                result = session.step(parsed.to_dict())
                failure = self.guard.failure(session.id)
                if failure is not None:
                    raise ExecutorFailed(failure)
                observation = result.observation
                steps.append(
                    TrajectoryStep(
                        command=parsed.command if parsed.kind == "bash" else "",
                        output=observation,
                        exit_code=result.exit_code,
                        action=raw,
                    )
                )
                if result.done:
                    end = "submitted"
                    break
            patch = session.get_patch()
        finally:
            session.destroy()
            hook = getattr(self.predictor, "close_session", None)
            if hook is not None:
                hook(session.id)
        swr, report, label_skip = (
            self._label(task, patch, name, unit) if self.label else (None, None, "")
        )
        trajectory = Trajectory(
            source="collect",
            instance_id=task.instance_id,
            repo=task.repo,
            task=task.to_row(),
            steps=steps,
            submission=patch,
            report=report,
            meta={
                "policy": name,
                "unit": unit,
                "end": end,
                "executor": self.executor_name,
                "predict": self.predict or "",
            },
        )
        return records, trajectory, swr, label_skip

    def _label(
        self, task: Any, patch: str, name: str, unit: str
    ) -> tuple[SWRRecord | None, dict[str, Any] | None, str]:
        from sweworld.reward.real import real_reward

        result = real_reward(
            task,
            patch,
            manager=self.manager,
            executor=self.label_executor,
            timeout=self.label_timeout,
        )
        entry = result.report.get(task.instance_id, {})
        report = {
            "resolved": result.resolved,
            "status": result.status,
            "tests_status": entry.get("tests_status", {}),
        }
        if result.status not in LABEL_STATUSES:
            reason = result.info.get("reason") or result.info.get("error") or result.status
            return None, report, f"no real label: {result.status}: {reason}"
        swr = SWRRecord(
            id=record_id("collect-swr", name, task.instance_id, patch),
            source="collect",
            instance_id=task.instance_id,
            repo=task.repo,
            base_commit=task.base_commit,
            task=to_json(task.to_row()),
            patch=patch,
            resolved=bool(result.resolved),
            tests_status=to_json(entry.get("tests_status", {})),
            label_source="real-run",
            candidate_kind="agent" if patch.strip() else "empty",
            meta=to_json(
                {"policy": name, "unit": unit, "status": result.status, "statuses": result.statuses}
            ),
        )
        return swr, report, ""

    def _write_trajectory(self, unit: str, trajectory: Trajectory) -> None:
        line = json.dumps(asdict(trajectory), ensure_ascii=False) + "\n"
        with self._lock:
            if unit in self._traj_units:  # killed after the line, before "done": kept once
                return
            self._traj_units.add(unit)
            with open(self._traj_path, "a", encoding="utf-8") as handle:
                handle.write(line)


def _call_policy(method: Callable[..., Any], *args: Any) -> Any:
    try:
        return method(*args)
    except Exception as exc:
        raise PolicyFailed(f"{type(exc).__name__}: {exc}") from exc


def _cut_torn_tail(path: Path) -> None:
    """Drop a torn last line (a run killed mid-write); reads only the file's tail."""
    if not path.is_file():
        return
    with open(path, "r+b") as handle:
        end = pos = handle.seek(0, os.SEEK_END)
        while pos > 0:
            start = max(0, pos - 65536)
            handle.seek(start)
            chunk = handle.read(pos - start)
            if pos == end and chunk.endswith(b"\n"):
                return
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return
            pos = start
        handle.truncate(0)


def _read_rows(path: Path) -> Iterable[dict[str, Any]]:
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a torn last line
            if isinstance(row, dict):
                yield row


def collect(
    tasks: Iterable[Any],
    policy_factory: Callable[[], Policy] | str,
    *,
    out: str | Path,
    executor: Any = "local",
    predict: str | None = None,
    mode: str = "blind",
    max_steps: int = 30,
    step_timeout: float | None = None,
    workers: int = 1,
    label: bool = True,
    label_timeout: float = 1800.0,
    manager: Any = None,
    heldout: Iterable[str] = DEFAULT_HELDOUT_REPOS,
    finalize_out: bool = True,
    echo: Any = None,
) -> CollectStats:
    """Run a policy on each task against a real executor and record everything under ``out``.

    Args:
        tasks: :class:`~sweworld.tasks.Task` objects.
        policy_factory: a callable giving a fresh policy per task, or a policy spec
            (``scripted:FILE``, ``trajectory:FILE[#ID]``, ``openai:URL#MODEL``).
        out: the dataset folder (records, ``trajectories.jsonl``, ``summary.json``).
        executor: the real executor: a registry name (``local``, ``docker``) or an instance.
        predict: an SWT model spec (``embedded``, ``replay:FILE``, ``openai:URL#MODEL``...):
            its prediction is recorded beside the truth of every call; None: none.
        mode: the predictor's mode (``blind`` or ``oracle``).
        max_steps: most policy actions per task.
        step_timeout: seconds a command may run (the real executor's and the sandbox's
            limit, and the predictor's step deadline); None: their defaults.
        workers: tasks run at once (threads; one session each).
        label: label each final patch with the real reward (an SWR record).
        label_timeout: seconds the real reward's test run may take.
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to use (else one is
            made and closed).
        finalize_out: build the split datasets and ``summary.json`` at the end.
        echo: a text stream for one line per task (None: quiet).
    """
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.registry import make_executor
    from sweworld.sandbox.session import SessionConfig

    if max_steps < 1 or workers < 1:
        raise ValueError("max_steps and workers must be at least 1")
    if step_timeout is not None and not step_timeout > 0:
        raise ValueError(f"step_timeout must be positive, not {step_timeout}")
    if isinstance(policy_factory, str):
        policy_factory = make_policy_factory(policy_factory)
    out = Path(out)
    started = time.perf_counter()
    timeout_kw = {"timeout": step_timeout} if step_timeout is not None else {}
    truth = make_executor(executor, **timeout_kw) if isinstance(executor, str) else executor
    predictor = None
    if predict:
        from sweworld.models import check_lm_spec
        from sweworld.transition.simulated import SimulatedExecutor

        check_lm_spec(predict)
        sim_kw = {"step_timeout": step_timeout} if step_timeout is not None else {}
        predictor = SimulatedExecutor(predict, mode=mode, **sim_kw)
    session_config = None
    if step_timeout is not None:
        from sweworld.sandbox.limits import SandboxLimits

        session_config = SessionConfig(limits=SandboxLimits(timeout=step_timeout))
    own = manager is None
    manager = manager or SessionManager()
    store = RecordStore(out)
    collector = _Collector(
        store,
        out,
        policy_factory=policy_factory,
        guard=_Guard(truth),
        predictor=predictor,
        predict=predict,
        manager=manager,
        session_config=session_config,
        max_steps=int(max_steps),
        label=label,
        label_executor=executor if isinstance(executor, str) else truth,
        label_timeout=label_timeout,
        executor_name=executor if isinstance(executor, str) else getattr(truth, "name", "?"),
        echo=echo,
    )
    for error in getattr(policy_factory, "load_errors", ()):
        collector.skip("collect:policy-input", error)
    task_list = list(tasks)
    collector.stats.tasks = len(task_list)
    try:
        if workers == 1:
            for task in task_list:
                collector.run_task(task)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(collector.run_task, task_list))
    finally:
        store.close()
        if own:
            manager.close_all()
    stats = collector.stats
    stats.wall_s = time.perf_counter() - started
    if finalize_out:
        finalize(out, heldout=heldout, extra_summary={"collect": stats.to_dict()})
    return stats


# ------------------------------------------------------------------------------------------
# Tasks and the command line
# ------------------------------------------------------------------------------------------


def load_collect_tasks(
    source: str, ids: Iterable[str] | None = None, *, store: RecordStore | None = None
) -> list[Any]:
    """The tasks of ``source`` (``toy`` or a task file), those of ``ids`` only when given.

    In a JSON Lines file a line that is not a valid task, or repeats an instance id, is
    skipped with the reason (in ``store`` when given); other formats load whole
    (:func:`~sweworld.tasks.load_tasks`). An id not found is skipped the same way.
    """
    from sweworld.tasks import Task, load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    path = Path(toy_tasks_path() if source == "toy" else source)

    def skip(unit: str, reason: str) -> None:
        if store is not None:
            store.skip(unit, reason)
        print(f"sweworld: skipped {unit}: {reason}", file=sys.stderr)

    tasks: list[Any] = []
    if path.name.endswith((".jsonl", ".jsonl.gz")) and path.is_file():
        from sweworld.tasks.loaders import TaskLoadError, iter_json_lines

        rows: list[tuple[str, Any]] = []
        try:
            rows = list(iter_json_lines(path))
        except TaskLoadError:  # a bad line stops the reader: read line by line instead
            rows = []
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append((f"{path} line {number}", json.loads(line)))
                except (ValueError, RecursionError) as exc:
                    skip(f"task:{path} line {number}", f"bad task row: invalid JSON ({exc})")
        for where, row in rows:
            try:
                tasks.append(Task.from_row(row, where=where))
            except (ValueError, TypeError, KeyError) as exc:
                skip(f"task:{where}", f"bad task row: {exc}")
    else:
        tasks = list(load_tasks(str(path)))
    unique: dict[str, Any] = {}
    for task in tasks:
        if task.instance_id in unique:
            skip(f"task:{task.instance_id}", "bad task row: duplicate instance id")
            continue
        unique[task.instance_id] = task
    if ids is None:
        return list(unique.values())
    chosen = []
    for instance in ids:
        if instance in unique:
            chosen.append(unique[instance])
        else:
            skip(f"task:{instance}", f"unknown instance: not in {path}")
    return chosen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld data collect``."""
    parser.add_argument("--tasks", required=True, help="task file, or 'toy' (the toy tasks)")
    parser.add_argument("--ids", nargs="+", default=None, help="only these instance ids")
    parser.add_argument(
        "--policy",
        required=True,
        help="scripted:FILE (JSON list, JSON Lines or one command per line), "
        "trajectory:FILE[#INSTANCE] (trajectories.jsonl lines) or openai:URL#MODEL",
    )
    parser.add_argument(
        "--executor", default="local", help="the real executor: local (default) or docker"
    )
    parser.add_argument(
        "--predict",
        nargs="?",
        const="embedded",
        default=None,
        metavar="MODEL",
        help="record the simulator's prediction beside the truth (SWT model spec; "
        "default when given without one: embedded)",
    )
    parser.add_argument(
        "--mode", default="blind", choices=["blind", "oracle"], help="the predictor's mode"
    )
    parser.add_argument("--max-steps", type=int, default=30, help="most actions per task")
    parser.add_argument(
        "--step-timeout", type=float, default=None, help="seconds a command may run"
    )
    parser.add_argument("--workers", type=int, default=1, help="tasks run at once")
    parser.add_argument(
        "--agent-max-tokens",
        type=int,
        default=400_000,
        help="openai policy: most prompt + completion tokens per task",
    )
    parser.add_argument(
        "--no-label", action="store_true", help="do not label final patches with the real reward"
    )
    parser.add_argument("--out", required=True, help="output dataset folder")


def run(args: argparse.Namespace) -> int:
    """``sweworld data collect``: collect, finalize, print the counts."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.policy.startswith(("openai:", "vllm:")):
        factory = make_policy_factory(
            args.policy, max_calls=args.max_steps, max_total_tokens=args.agent_max_tokens
        )
    else:
        factory = make_policy_factory(args.policy)
    with RecordStore(out) as store:
        tasks = load_collect_tasks(args.tasks, args.ids, store=store)
    if not tasks:
        print("sweworld: error: no task to collect", file=sys.stderr)
        return 2
    stats = collect(
        tasks,
        factory,
        out=out,
        executor=args.executor,
        predict=args.predict,
        mode=args.mode,
        max_steps=args.max_steps,
        step_timeout=args.step_timeout,
        workers=args.workers,
        label=not args.no_label,
        echo=sys.stderr,
    )
    summary = json.loads((out / "summary.json").read_text())
    print(
        json.dumps(
            {
                "collect": stats.to_dict(),
                "swt": summary.get("swt"),
                "swr": summary.get("swr"),
                "skipped": summary.get("skipped"),
            },
            indent=2,
        )
    )
    return 0
