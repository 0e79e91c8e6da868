"""The real reward: apply a candidate patch, apply the task's tests, run them, grade.

This is the ground truth the learned verifier is measured against. It runs in an ordinary
session (so the same sandbox, routing and grading serve both paths) with a real executor
(``local`` by default, ``docker`` where an engine exists), and produces a report shaped like
the SWE-bench harness's ``report.json``.

Patch application follows the harness: ``git apply --verbose``, then ``git apply --verbose
--reject``, then ``patch --batch --fuzz=5 -p1``. The test files of ``test_patch`` are first
reset to the base, as the harness does, so a candidate cannot weaken them.

A run that could not execute is never graded as test failures: an environment that could
not be built is ``env_failed``; a test command whose program could not be started, an
interpreter that does not start in the sandbox, an executor error, or a test command that
never reached the executor is ``exec_failed``. Either way ``resolved`` is False and
``info["reason"]`` says what happened (the report's ``sweworld_status`` carries the status).
"""

from __future__ import annotations

import logging
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.grading import make_report, parse_log
from sweworld.execution.testspec import test_spec

log = logging.getLogger(__name__)
APPLY_COMMANDS = (
    "git apply --verbose {path}",
    "git apply --verbose --reject {path}",
    "patch --batch --fuzz=5 -p1 -i {path}",
)


#: The statuses of a real run whose tests ran and were graded.
GRADED_STATUSES = ("resolved", "unresolved")
GRADED = "graded"  # internal: becomes resolved / unresolved


@dataclass
class RealRewardResult:
    """Outcome of one real verification.

    ``status``: ``resolved`` / ``unresolved`` (the tests ran and were graded: the names SWR's
    verdict uses), or why there is no grade: ``patch_failed``, ``test_patch_failed``,
    ``env_failed``, ``exec_failed``, ``timeout`` or ``error``. ``reward`` is 1.0 only when
    resolved.
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


def apply_patch(session: Any, patch: str, name: str) -> tuple[bool, str]:
    """Apply ``patch`` in ``session``'s /testbed as the harness does (each of its apply
    commands in turn, the tree reset between tries); ``(applied, output of the tries)``.
    ``name`` is the file the patch is written to under /tmp."""
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


def reset_files(task: Any) -> list[str]:
    """The files restored from the base before the tests run: those the test patch touches
    (as the SWE-bench harness does) and those the task row lists in ``reset_files`` (tasks
    whose tests exist at the base, such as the task factory's: a candidate that edits them
    cannot make them pass)."""
    listed = task.extra.get("reset_files") if isinstance(task.extra, dict) else None
    extra = [str(f) for f in listed if isinstance(f, str) and f] if isinstance(listed, list) else []
    return sorted({*task.test_files(), *extra})


def real_reward(
    task: Any,
    patch: str | None,
    *,
    manager: Any = None,
    executor: Any = None,
    timeout: float = 1800.0,
    history: str = "none",
    rebuild_env: bool = False,
) -> RealRewardResult:
    """Verify ``patch`` (a unified diff, or None / "" for the unchanged base) on ``task``.

    ``manager``: a :class:`~sweworld.sandbox.manager.SessionManager` to reuse (one is made
    and closed otherwise). ``executor``: the executor object that runs the tests for real
    (None: a :class:`~sweworld.execution.local.LocalExecutor` with ``timeout``, made here;
    ``sweworld.world.executor_from_spec("docker", timeout=...)`` builds another from a
    spec; a spec string is refused with ``TypeError``). ``rebuild_env`` rebuilds a cached
    environment (the default local executor only).
    """
    if isinstance(executor, str):
        raise TypeError(
            f"real_reward takes an executor object, not the spec {executor!r}: build it with "
            "sweworld.world.executor_from_spec(spec, timeout=...)"
        )
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
            status=None if status == GRADED else status,
        )
        entry = report[task.instance_id]
        info["latency_s"] = time.perf_counter() - started
        resolved = bool(entry["resolved"])
        if status == GRADED:
            status = "resolved" if resolved else "unresolved"
        return RealRewardResult(
            instance_id=task.instance_id,
            resolved=resolved,
            status=status,
            report=report,
            statuses=statuses,
            log=log,
            info=info,
        )

    config = SessionConfig(limits=SandboxLimits(timeout=timeout))
    own_executor = executor is None
    if executor is None:
        from sweworld.execution.local import LocalExecutor

        executor = LocalExecutor(timeout=timeout, rebuild_env=rebuild_env)
    try:
        with manager.open(task, executor=executor, history=history, config=config) as session:
            if patch:
                ok, out = apply_patch(session, patch, "sweworld_candidate.patch")
                info["apply_log"] = out[-4000:]
                if not ok:
                    return finish("patch_failed", applied=False)
            files = " ".join(shlex.quote(f) for f in reset_files(task))
            if files:  # reset the tests to the base, as the harness does
                session.run(
                    f"cd /testbed && git ls-files -z -- {files} | "
                    "xargs -0 -r git checkout -q HEAD --"
                )
            if task.test_patch:
                ok, out = apply_patch(session, task.test_patch, "sweworld_tests.patch")
                if not ok:
                    info["test_patch_log"] = out[-4000:]
                    return finish("test_patch_failed")
            run = session.run("cd /testbed && " + spec.command, merge_stderr=True)
            output = run.stdout
            calls = run.info.get("execution_calls", [])
            failure = _not_executed(run, calls)
            if failure is not None:
                status, reason = failure
                info["reason"] = reason
                log.warning("%s: %s: %s", task.instance_id, status, reason)
                return finish(status, log=output)
            call_status = {(c.get("info") or {}).get("status") for c in calls}
            if run.timed_out or "timeout" in call_status:
                return finish("timeout", log=output)
            statuses = parse_log(output, task.repo)
            if not statuses and run.exit_code in (126, 127):
                info["reason"] = (
                    f"the test command exited {run.exit_code} (not found / not executable) "
                    f"and printed no test result: {output[-500:].strip()}"
                )
                log.warning("%s: exec_failed: %s", task.instance_id, info["reason"])
                return finish("exec_failed", log=output)
            return finish(GRADED, statuses, output)
    except Exception as exc:  # the verifier reports; it does not crash its caller
        log.exception("%s: the real reward failed", getattr(task, "instance_id", "?"))
        info["error"] = f"{type(exc).__name__}: {exc}"
        info["reason"] = info["error"]
        return finish("error")
    finally:
        if own:
            manager.close_all()
        if own_executor and callable(getattr(executor, "close", None)):
            executor.close()


def _not_executed(run: Any, calls: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(status, reason)`` when the test command did not really run, else None."""
    if run.info.get("error") == "sandbox":
        return "exec_failed", f"the sandbox could not run the test command: {run.stderr.strip()}"
    if not calls:
        return "exec_failed", (
            "the test command reached no executor (nothing was run for real): "
            f"exit {run.exit_code}, {(run.stdout + run.stderr)[-500:].strip()}"
        )
    for call in calls:
        info = call.get("info") or {}
        status = info.get("status")
        if status == "env_failed":
            return "env_failed", str(info.get("reason") or "the environment could not be built")
        not_run = info.get("executed") is False and status != "timeout"
        if status in ("exec_failed", "error") or not_run or (status is None and "error" in info):
            reason = info.get("reason") or info.get("error") or f"`{call.get('command')}` not run"
            return "exec_failed", str(reason)
    return None
