"""Hybrid mode: some commands run for real, the rest are simulated; both logged side by side.

A policy decides per command. With ``shadow=True`` the chosen side answers the agent and the
other side runs too, so every logged line pairs a real and a simulated result of the same
command on the same state: the calibration data for SWT. The log is JSONL, one object per
command: ``{"command", "cwd", "session_id", "task", "route", "real": {...},
"simulated": {...}, "agree": {...}}``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult, Executor, session_base

log = logging.getLogger(__name__)


class Policy(Protocol):
    """Says whether one command runs for real."""

    def use_real(self, request: ExecutionRequest, index: int) -> bool: ...


class EveryK:
    """Every k-th execution command of each session runs for real (the 1st, k+1-th, ...)."""

    def __init__(self, k: int):
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = k

    def use_real(self, request: ExecutionRequest, index: int) -> bool:
        return index % self.k == 0


class Matching:
    """Commands matching a regular expression run for real (e.g. ``r"pytest"``)."""

    def __init__(self, pattern: str):
        self.pattern = re.compile(pattern)

    def use_real(self, request: ExecutionRequest, index: int) -> bool:
        return bool(self.pattern.search(request.command))


class Always:
    def __init__(self, real: bool = True):
        self.real = real

    def use_real(self, request: ExecutionRequest, index: int) -> bool:
        return self.real


def _summary(result: ExecutionResult) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "info": {
            k: v
            for k, v in result.info.items()
            if isinstance(v, (str, int, float, bool, type(None)))
        },
    }


def compare(real: ExecutionResult, simulated: ExecutionResult) -> dict[str, Any]:
    """Agreement of a simulated result with the real one (exit code, test statuses, the
    exception type of the last traceback, line-level similarity of the output)."""
    from difflib import SequenceMatcher

    from sweworld.execution.grading import parse_pytest_log

    def exception(text: str) -> str | None:
        found = re.findall(
            r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b", text, flags=re.M
        )
        return found[-1] if found else None

    real_out = real.stdout + real.stderr
    sim_out = simulated.stdout + simulated.stderr
    real_tests = parse_pytest_log(real_out)
    sim_tests = parse_pytest_log(sim_out)
    shared = set(real_tests) | set(sim_tests)
    tests_agree = (
        sum(real_tests.get(t) == sim_tests.get(t) for t in shared) / len(shared) if shared else None
    )
    return {
        "exit_code": real.exit_code == simulated.exit_code,
        "exception": exception(real_out) == exception(sim_out),
        "tests": tests_agree,
        "line_similarity": SequenceMatcher(
            None, real_out.splitlines(), sim_out.splitlines()
        ).ratio(),
    }


class HybridExecutor:
    """Routes each command to ``real`` or ``simulated`` by ``policy``; logs both when asked.

    Args:
        simulated: the SWT executor (a :class:`SimulatedExecutor` or any executor).
        real: a real executor (``LocalExecutor`` or ``DockerExecutor``).
        policy: a :class:`Policy` (default: every 5th command runs for real).
        shadow: also run the other side and log the pair (costs a real run per command).
        log: JSONL file for the side-by-side records (None: keep them in :attr:`records`).
    """

    name = "hybrid"

    def __init__(
        self,
        simulated: Executor,
        real: Executor,
        *,
        policy: Policy | None = None,
        shadow: bool = False,
        log: str | Path | None = None,
        on_record: Callable[[dict], None] | None = None,
    ):
        self.simulated = simulated
        self.real = real
        self.policy = policy or EveryK(5)
        self.shadow = shadow
        self.log = Path(log) if log else None
        self.on_record = on_record
        self.records: list[dict[str, Any]] = []
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        with self._lock:
            index = self._counts.get(request.session_id, 0)
            self._counts[request.session_id] = index + 1
        use_real = self.policy.use_real(request, index)
        chosen, other = (self.real, self.simulated) if use_real else (self.simulated, self.real)
        started = time.perf_counter()
        result = chosen.execute(request)
        pair = {("real" if use_real else "simulated"): result}
        shadow_error = None
        if self.shadow:  # the shadow run is for the log: its failure must not fail the step
            try:
                pair["simulated" if use_real else "real"] = other.execute(request)
            except Exception as exc:
                shadow_error = f"{type(exc).__name__}: {exc}"
                log.warning("hybrid: the shadow run of %r failed: %s", request.command, exc)
        record: dict[str, Any] = {
            "command": request.command,
            "cwd": request.cwd,
            "session_id": request.session_id,
            "task": getattr(request.task, "instance_id", None),
            "route": "real" if use_real else "simulated",
            **{side: _summary(res) for side, res in pair.items()},
        }
        if "real" in pair and "simulated" in pair:
            record["agree"] = compare(pair["real"], pair["simulated"])
        if shadow_error is not None:
            record["shadow_error"] = shadow_error
        self._write(record)
        info = {
            **result.info,
            "hybrid_route": record["route"],
            "hybrid_latency_s": time.perf_counter() - started,
        }
        if shadow_error is not None:
            info["hybrid_shadow_error"] = shadow_error
        return ExecutionResult(result.stdout, result.stderr, result.exit_code, info)

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            if self.log is not None:
                try:
                    self.log.parent.mkdir(parents=True, exist_ok=True)
                    with open(self.log, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(record) + "\n")
                except OSError as exc:  # the comparison log is not worth failing a step for
                    log.warning("hybrid: cannot write %s: %s", self.log, exc)
        if self.on_record is not None:
            self.on_record(record)

    # session hooks: pass them to both sides
    def _each(self, name: str, *args: Any) -> None:
        for side in (self.simulated, self.real):
            hook = getattr(side, name, None)
            if hook is not None:
                hook(*args)

    def prepare_base(self, task: Any, base: Any) -> Any:
        """The base the real side's sessions open on (:func:`~sweworld.sandbox.executor.
        session_base`)."""
        return session_base(self.real, task, base)

    def close_session(self, session_id: str) -> None:
        self._each("close_session", session_id)

    def fork_session(self, source_id: str, new_id: str) -> None:
        self._each("fork_session", source_id, new_id)

    def snapshot_session(self, session_id: str) -> Any:
        hook = getattr(self.simulated, "snapshot_session", None)
        return hook(session_id) if hook is not None else None

    def restore_session(self, session_id: str, state: Any) -> None:
        hook = getattr(self.simulated, "restore_session", None)
        if hook is not None and state is not None:
            hook(session_id, state)


def hybrid(
    k: int = 5,
    *,
    shadow: bool = False,
    log: str | Path | None = None,
    lm: Any = None,
    mode: str = "oracle",
    step_timeout: float | None = None,
    seed: int = 0,
) -> HybridExecutor:
    """The registry's ``hybrid``: SWT for most commands, every k-th one run locally
    (``lm``: the SWT model object, as :class:`SimulatedExecutor` takes it; built from a
    spec by ``sweworld.world.executor_from_spec("hybrid", lm=SPEC)``; ``step_timeout``:
    the simulated steps' deadline; None: the simulator's default; ``seed``: the
    simulator's)."""
    from sweworld.execution.local import LocalExecutor
    from sweworld.transition.simulated import SimulatedExecutor

    options: dict[str, Any] = {"mode": mode, "seed": seed}
    if step_timeout is not None:
        options["step_timeout"] = step_timeout
    return HybridExecutor(
        SimulatedExecutor(lm, **options), LocalExecutor(), policy=EveryK(k), shadow=shadow, log=log
    )
