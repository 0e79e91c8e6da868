"""Real transitions (SWT data) of what agents typically run on a factory task.

In one session of the task, through the lead's
:class:`~sweworld.data.record.RecordingExecutor` over the real executor, the commands an
agent runs while fixing a bug are executed for real, on three states: the buggy state
(the failing test node, its test file, a reproduction script in ``/tmp``, ``python -c``
with the library call of the failing test, an import of the mutated module, the whole
suite with ``-x -q``), the fixed state (the gold patch applied) and a wrong fix (another
edit). Every execution call becomes one SWT record (``state_source="live"``), with the
state's name in ``meta.phase``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from sweworld.data.factory.issue_text import ReproCall
from sweworld.data.schema import to_json

__all__ = ["agent_commands", "module_name", "record_transitions", "repro_script"]


def module_name(path: str) -> str:
    """The import name of a repository-relative module path (``pkg/sub/__init__.py`` ->
    ``pkg.sub``; a ``src/`` prefix is dropped)."""
    parts = path.removesuffix(".py").split("/")
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def repro_script(test_id: str, repro: ReproCall | None) -> str:
    """A reproduction script: the library call of the failing test when there is one,
    else a run of the failing test through pytest."""
    if repro is not None:
        return "\n".join([*repro.imports, "", f"result = {repro.code}", "print(repr(result))", ""])
    return "\n".join(
        ["import sys", "", "import pytest", "", f"sys.exit(pytest.main(['-q', {test_id!r}]))", ""]
    )


def agent_commands(
    test_id: str, test_file: str, module: str, repro: ReproCall | None, phase: str
) -> list[str]:
    """The commands run on a state (``buggy`` gets them all; ``fixed`` and ``wrong`` the
    checks an agent repeats after an edit)."""
    node = shlex.quote(test_id)
    python_c = None
    if repro is not None:
        code = "; ".join([*repro.imports, f"print(repr({repro.code}))"])
        python_c = f"python -c {shlex.quote(code)}"
    buggy = [
        f"python -m pytest {node}",
        f"python -m pytest -q {shlex.quote(test_file)}",
        "python /tmp/reproduce_issue.py",
        python_c,
        f"python -c {shlex.quote(f'import {module}; print({module}.__name__)')}"
        if module
        else None,
        "python -m pytest -x -q",
    ]
    later = [f"python -m pytest -q {node}", "python /tmp/reproduce_issue.py", python_c]
    if phase == "fixed":
        later.append("python -m pytest -x -q")
    return [c for c in (buggy if phase == "buggy" else later) if c]


def record_transitions(
    task: Any,
    *,
    manager: Any,
    executor: Any,
    sink: Any,
    repro: ReproCall | None,
    module: str,
    wrong_patch: str = "",
    timeout: float = 300.0,
) -> int:
    """Record the transitions of ``task``; returns the number of records written."""
    from sweworld.data.record import RecordingExecutor
    from sweworld.sandbox.bwrap import SandboxLimits
    from sweworld.sandbox.session import SessionConfig

    test_id = task.FAIL_TO_PASS[0]
    test_file = test_id.split("::", 1)[0]
    rec = RecordingExecutor(executor, sink, source="factory", state_source="live")
    config = SessionConfig(limits=SandboxLimits(timeout=timeout))
    session = manager.open(task, executor=rec, config=config)
    step = 0
    try:
        session.write_file("/tmp/reproduce_issue.py", repro_script(test_id, repro))
        phases: Sequence[tuple[str, str]] = [("buggy", ""), ("fixed", task.patch)]
        if wrong_patch:
            phases = [*phases, ("wrong", wrong_patch)]
        for phase, patch in phases:
            if patch:
                session.run("cd /testbed && git checkout -q -- . && git clean -fdq")
                session.write_file("/tmp/candidate.patch", patch)
                applied = session.run("cd /testbed && git apply /tmp/candidate.patch")
                if applied.exit_code != 0:
                    continue
            for command in agent_commands(test_id, test_file, module, repro, phase):
                meta = to_json({"phase": phase, "factory": True})
                rec.begin_step(step, meta=meta)
                session.run("cd /testbed && " + command, timeout=timeout)
                step += 1
    finally:
        session.destroy()
        rec.close_session(session.id)
    return len(rec.records)
