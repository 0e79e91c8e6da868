"""How a session answers its sandbox's execution calls (:class:`ExecutionCalls`, a part of
:class:`sweworld.sandbox.session.Session`): one call of the shim read, sent to the session's
executor as an :class:`~sweworld.sandbox.executor.ExecutionRequest` and answered; and a
finished bash command's outcome (its output cut and timeout notes, its routes, the calls it
made, the disk quota).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweworld.sandbox.bwrap import RawRun
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult, Executor
from sweworld.sandbox.launch import BASE_ENV, SHELL_OWN_ENV
from sweworld.sandbox.quota import over_quota, quota_message
from sweworld.sandbox.repos import BaseCheckout
from sweworld.sandbox.router import declared_scripts, routes
from sweworld.sandbox.shims import ShimProtocolError, answer_call, read_call
from sweworld.sandbox.types import BashOutcome, clean_text
from sweworld.sandbox.workspace import Workspace

log = logging.getLogger("sweworld.sandbox.session")

__all__ = ["ExecutionCalls"]


class ExecutionCalls:
    """The execution-call half of a :class:`~sweworld.sandbox.session.Session` (which sets
    every attribute named here)."""

    id: str
    task: Any
    base: BaseCheckout
    config: Any
    executor: Executor
    workspace: Workspace
    _scripts: frozenset[str] | None
    _call_deadline: float | None

    def _routes(self, command: str) -> list[dict[str, str]]:
        """Each simple command's route for ``info``, the repository's console scripts
        (read once from the base checkout) counting as execution, as in the sandbox."""
        if self._scripts is None:
            try:
                self._scripts = declared_scripts(self.base.path)
            except (OSError, ValueError, SyntaxError) as exc:
                log.debug("session %s: console scripts not read: %s", self.id, exc)
                self._scripts = frozenset()
        return routes(command, self._scripts)

    def _outcome(self, raw: RawRun, command: str, limit: float) -> BashOutcome:
        stdout = raw.stdout.decode("utf-8", errors="replace")
        stderr = raw.stderr.decode("utf-8", errors="replace")
        limits = self.config.limits
        if raw.truncated:
            stderr += (
                f"\nsweworld: the output passed {limits.max_output_bytes} bytes; it was "
                "cut there and the command was stopped.\n"
            )
        if raw.timed_out:
            stderr += (
                f"\nsweworld: the command did not finish within {limit:g} s and was stopped.\n"
            )
        info: dict[str, Any] = {
            "routes": self._routes(command),
            "timeout": limit,
            "execution_calls": raw.calls,
            "wall_s": raw.wall_s,
            "executor_s": raw.executor_s,
        }
        if raw.truncated:
            info["output_truncated"] = True
        if raw.calls_refused:
            info["execution_calls_refused"] = raw.calls_refused
        if over_quota(self.workspace):
            stderr += quota_message(self.workspace)
            info["disk_quota_exceeded"] = True
        return BashOutcome(
            stdout=stdout,
            stderr=stderr,
            exit_code=raw.exit_code,
            timed_out=raw.timed_out,
            info=info,
        )

    def _serve_call(self, req_dir_fd: int, req_id: str) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            call = read_call(req_dir_fd, req_id)
        except ShimProtocolError as exc:
            answer_call(req_dir_fd, req_id, "", f"sweworld: bad execution request: {exc}\n", 126)
            return {"error": str(exc)}
        env = {k: v for k, v in call.env.items() if k not in SHELL_OWN_ENV and BASE_ENV.get(k) != v}
        request = ExecutionRequest(
            argv=call.argv,
            cwd=call.cwd,
            stdin=call.stdin,
            env=env,
            workspace=self.workspace.root,
            tmp=self.workspace.tmp_root,
            tmp_bind=self.workspace.tmp_bind,
            ctl_root=getattr(self.workspace, "ctl_root", None),
            ctl_bind=getattr(self.workspace, "ctl_bind", None),
            task=self.task,
            session_id=self.id,
            base=self.base.path,
            base_commit=self.base.head,
            changes=self.workspace.changes,
            mount_ns_fd=self.workspace.mount_ns_fd,
            workspace_bind=self.workspace.bind_source,
            deadline=self._call_deadline,
        )
        try:
            result = self.executor.execute(request)
        except Exception as exc:  # an executor bug must not take the session down
            log.exception("session %s: the executor failed on %r", self.id, request.command)
            result = ExecutionResult(
                stderr=f"sweworld: the {getattr(self.executor, 'name', 'executor')} executor "
                f"failed on `{request.command}`: {type(exc).__name__}: {exc}\n",
                exit_code=1,
                info={"error": repr(exc)},
            )
        status = result.info.get("status") if isinstance(result.info, dict) else None
        if status not in (None, "ok", "simulated"):
            log.info("session %s: `%s` -> %s", self.id, request.command, status)
        answer_call(
            req_dir_fd,
            req_id,
            clean_text(result.stdout),
            clean_text(result.stderr),
            result.exit_code,
        )
        return {
            "command": clean_text(request.command),
            "cwd": clean_text(call.cwd),
            "exit_code": result.exit_code,
            "executor": getattr(self.executor, "name", type(self.executor).__name__),
            "latency_s": time.perf_counter() - started,
            "info": result.info,
        }
