"""The real reward: apply a candidate patch, apply the task's tests, run them, grade.

This is the ground truth the learned verifier is measured against. It runs in an ordinary
session (so the same sandbox, routing and grading serve both paths) with a real executor
(``local`` by default, ``docker`` where an engine exists), and produces a report shaped like
the SWE-bench harness's ``report.json``.

Patch application follows the harness: ``git apply --verbose``, then ``git apply --verbose
--reject``, then ``patch --batch --fuzz=5 -p1``. The test files of ``test_patch`` are first
reset to the base, as the harness does, so a candidate cannot weaken them.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.grading import make_report, parse_log
from sweworld.execution.testspec import test_spec

APPLY_COMMANDS = (
    "git apply --verbose {path}",
    "git apply --verbose --reject {path}",
    "patch --batch --fuzz=5 -p1 -i {path}",
)


@dataclass
class RealRewardResult:
    """Outcome of one real verification.

    ``status``: ``ok`` (tests ran and were graded), ``patch_failed``, ``test_patch_failed``,
    ``env_failed``, ``timeout`` or ``error``. ``reward`` is 1.0 only when resolved.
    """

    instance_id: str
    resolved: bool
    status: str
    report: dict[str, Any]
    statuses: dict[str, str] = field(default_factory=dict)
    log: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        return 1.0 if self.resolved else 0.0


def _apply(session: Any, patch: str, name: str) -> tuple[bool, str]:
    path = f"/tmp/{name}"
    session.write_file(path, patch if patch.endswith("\n") else patch + "\n")
    output = []
    for template in APPLY_COMMANDS:
        out = session.run("cd /testbed && " + template.format(path=shlex.quote(path)))
        output.append(out.stdout + out.stderr)
        if out.exit_code == 0:
            return True, "".join(output)
        session.run("cd /testbed && git checkout -q -- . && git clean -fdq")
    return False, "".join(output)


def real_reward(
    task: Any,
    patch: str | None,
    *,
    manager: Any = None,
    executor: Any = "local",
    timeout: float = 1800.0,
    history: str = "none",
) -> RealRewardResult:
    """Verify ``patch`` (a unified diff, or None / "" for the unchanged base) on ``task``.

    ``manager``: a :class:`~sweworld.sandbox.manager.SessionManager` to reuse (one is made
    and closed otherwise). ``executor``: what runs the tests for real.
    """
    from sweworld.sandbox.bwrap import SandboxLimits
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.session import SessionConfig

    own = manager is None
    manager = manager or SessionManager()
    started = time.perf_counter()
    spec = test_spec(task)
    info: dict[str, Any] = {"test_command": spec.command}

    def finish(
        status: str, statuses: dict[str, str] | None = None, log: str = "", applied: bool = True
    ) -> RealRewardResult:
        statuses = statuses or {}
        # The unchanged base is graded too: for the harness, patch=None means "not run".
        report = make_report(
            task,
            statuses,
            patch=patch or "",
            patch_applied=applied,
            status=None if status == "ok" else status,
        )
        entry = report[task.instance_id]
        info["latency_s"] = time.perf_counter() - started
        return RealRewardResult(
            instance_id=task.instance_id,
            resolved=bool(entry["resolved"]),
            status=status,
            report=report,
            statuses=statuses,
            log=log,
            info=info,
        )

    config = SessionConfig(limits=SandboxLimits(timeout=timeout))
    if executor in ("local", "docker"):
        from sweworld.sandbox.registry import make_executor

        executor = make_executor(executor, timeout=timeout)
    try:
        with manager.open(task, executor=executor, history=history, config=config) as session:
            if patch:
                ok, out = _apply(session, patch, "sweworld_candidate.patch")
                info["apply_log"] = out[-4000:]
                if not ok:
                    return finish("patch_failed", applied=False)
            if task.test_patch:
                files = " ".join(shlex.quote(f) for f in task.test_files())
                if files:  # reset the tests to the base, as the harness does
                    session.run(
                        f"cd /testbed && git ls-files -z -- {files} | "
                        "xargs -0 -r git checkout -q HEAD --"
                    )
                ok, out = _apply(session, task.test_patch, "sweworld_tests.patch")
                if not ok:
                    info["test_patch_log"] = out[-4000:]
                    return finish("test_patch_failed")
            run = session.run("cd /testbed && " + spec.command, merge_stderr=True)
            log = run.stdout
            calls = run.info.get("execution_calls", [])
            call_status = {c.get("info", {}).get("status") for c in calls}
            if "env_failed" in call_status:
                return finish("env_failed", log=log)
            if run.timed_out or "timeout" in call_status:
                return finish("timeout", log=log)
            statuses = parse_log(log, task.repo)
            return finish("ok", statuses, log)
    except Exception as exc:  # the verifier reports; it does not crash its caller
        info["error"] = f"{type(exc).__name__}: {exc}"
        return finish("error")
    finally:
        if own:
            manager.close_all()
