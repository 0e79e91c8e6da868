"""The engine of ``sweworld data collect`` (:mod:`sweworld.data.collect`): the per-task
collector (a policy against a recording real executor, the trajectory, the real SWR label),
the guard that stops a task when its executor fails, and the run's statistics. Imports
nothing of :mod:`sweworld.data.collect` (the imports point one way)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sweworld.data.policies import Policy
from sweworld.data.record import RecordingExecutor
from sweworld.data.schema import (
    SWRRecord,
    SWTRecord,
    Trajectory,
    TrajectoryStep,
    record_id,
    to_json,
)
from sweworld.data.store import RecordStore, cut_torn_tail
from sweworld.reward.real import GRADED_STATUSES
from sweworld.sandbox.executor import session_base

__all__ = [
    "FAILED_STATUSES",
    "LABEL_STATUSES",
    "TRAJECTORIES",
    "CollectStats",
    "Collector",
    "ExecutorFailed",
    "Guard",
    "PolicyFailed",
]


TRAJECTORIES = "trajectories.jsonl"
#: Real-reward outcomes that are a real label (the tests ran, or the harness's own verdict
#: for a patch that does not apply); the others (``env_failed``, ``exec_failed``,
#: ``timeout``, ``error``) are no label: the SWR record is skipped with the reason.
LABEL_STATUSES = (*GRADED_STATUSES, "patch_failed", "test_patch_failed")
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


class Guard:
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

    def prepare_base(self, task: Any, base: Any) -> Any:
        """The base the real side's sessions open on (:func:`~sweworld.sandbox.executor.
        session_base`)."""
        return session_base(self.truth, task, base)

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


class Collector:
    """The shared state of one :func:`collect` call; :meth:`run_task` does one task."""

    def __init__(self, store: RecordStore, out: Path, **options: Any):
        self.store = store
        self.out = out
        self.__dict__.update(options)
        self.stats = CollectStats()
        self._lock = threading.Lock()
        self._traj_path = out / TRAJECTORIES
        cut_torn_tail(self._traj_path)  # else the next line is glued to it and lost
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
