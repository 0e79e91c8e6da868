"""Running a library's tests for real, with the LocalExecutor, on edited states.

:class:`SuiteRunner` keeps one session per worker thread on the library's base commit
(the LocalExecutor's venv is built once and cached; each session has its own warm
sandbox). :meth:`SuiteRunner.run` writes the given file contents into the session, runs
``python -m pytest -rA -p no:cacheprovider <files>``, reads per-test statuses with the shared
grader's parser, and writes the original contents back, so a mutant costs one test run and
no new checkout.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.log_parsers import parse_log

__all__ = ["TEST_COMMAND", "RunOutcome", "SuiteRunner", "passed", "test_command"]

#: ``-o addopts=`` drops the library's own pytest options, which name plugins its tests do
#: not need (parse's ``--cov``: pytest-cov is not in the environment) or colour the log
#: (python-slugify's ``--color=yes``: escape codes the log parser cannot read);
#: ``--color=no`` holds against ``PYTEST_ADDOPTS`` too
TEST_COMMAND = "python -m pytest -rA -p no:cacheprovider --color=no -o addopts="
_PASSING = ("PASSED", "XFAIL")


def test_command(files: Sequence[str] = ()) -> str:
    """The test command for ``files`` (the whole suite when empty)."""
    return " ".join([TEST_COMMAND, *(shlex.quote(f) for f in files)])


test_command.__test__ = False  # type: ignore[attr-defined]


def passed(statuses: Mapping[str, str]) -> set[str]:
    """The ids of tests that passed (PASSED or XFAIL)."""
    return {t for t, s in statuses.items() if str(s) in _PASSING}


@dataclass
class RunOutcome:
    """One real test run: ``status`` is ``ok``, ``timeout``, ``env_failed``, ``exec_failed``
    or ``no_tests`` (the run printed no test result)."""

    status: str
    statuses: dict[str, str] = field(default_factory=dict)
    log: str = ""
    exit_code: int = 0
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class SuiteRunner:
    """Real test runs of ``task``'s repository (at its base commit) with ``executor``.

    Args:
        task: a task of the library (its ``repo``, ``base_commit``, environment).
        manager: the :class:`~sweworld.sandbox.manager.SessionManager` sessions come from.
        executor: the real executor (a LocalExecutor).
        timeout: seconds per test run.
    """

    def __init__(self, task: Any, manager: Any, executor: Any, *, timeout: float = 300.0):
        self.task = task
        self.manager = manager
        self.executor = executor
        self.timeout = timeout
        self._local = threading.local()
        self._sessions: list[Any] = []
        self._lock = threading.Lock()

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None or session.closed:
            from sweworld.sandbox.bwrap import SandboxLimits
            from sweworld.sandbox.session import SessionConfig

            config = SessionConfig(limits=SandboxLimits(timeout=self.timeout))
            session = self.manager.open(self.task, executor=self.executor, config=config)
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def run(
        self,
        files: Sequence[str] = (),
        edits: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> RunOutcome:
        """Run the tests of ``files`` (all when empty) with ``edits`` (repository path ->
        new text) written first and undone afterwards; ``timeout`` (seconds) overrides the
        runner's for this run (a mutant that loops forever is stopped early)."""
        session = self._session()
        originals: dict[str, str] = {}
        try:
            for path, text in (edits or {}).items():
                originals[path] = session.read_file(f"/testbed/{path}")
                session.write_file(f"/testbed/{path}", text)
            out = session.run(
                "cd /testbed && " + test_command(files),
                timeout=min(timeout or self.timeout, self.timeout),
                merge_stderr=True,
            )
        finally:
            for path, text in originals.items():
                session.write_file(f"/testbed/{path}", text)
        return outcome_of(out, self.task.repo)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            if not session.closed:
                session.destroy()


def outcome_of(out: Any, repo: str) -> RunOutcome:
    """A :class:`RunOutcome` from a session's ``run`` result."""
    log = out.stdout + out.stderr
    calls = out.info.get("execution_calls", [])
    for call in calls:
        info = call.get("info") or {}
        if info.get("status") in ("env_failed", "exec_failed", "error"):
            reason = str(info.get("reason") or info.get("status"))
            return RunOutcome(info["status"], log=log, exit_code=out.exit_code, reason=reason)
    if not calls:
        reason = "the test command reached no executor: " + log[-300:].strip()
        return RunOutcome("exec_failed", log=log, exit_code=out.exit_code, reason=reason)
    if out.timed_out or any((c.get("info") or {}).get("status") == "timeout" for c in calls):
        return RunOutcome("timeout", log=log, exit_code=out.exit_code, reason="timed out")
    statuses = {str(k): str(getattr(v, "value", v)) for k, v in parse_log(log, repo).items()}
    if not statuses:
        tail = log.strip().splitlines()[-3:]
        reason = f"no test result in the output (exit {out.exit_code}): {' | '.join(tail)}"
        return RunOutcome("no_tests", log=log, exit_code=out.exit_code, reason=reason)
    return RunOutcome("ok", statuses, log, out.exit_code)
