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

__all__ = [
    "REPRO_FILE",
    "WRONG_REPRODUCTIONS",
    "agent_commands",
    "module_name",
    "record_transitions",
    "repro_script",
    "reproduction_commands",
    "screen_record",
]


#: the path of an agent-style reproduction in the repository (the name agents give it most
#: often; :mod:`sweworld.data.factory.reproductions` writes its text)
REPRO_FILE = "reproduce_issue.py"


def reproduction_commands() -> list[str]:
    """The runs of the reproduction on a state (through pytest, as a script)."""
    return [f"python -m pytest {REPRO_FILE}", f"python {REPRO_FILE}"]


#: wrong fixes of a task whose states get the reproduction run
WRONG_REPRODUCTIONS = 1


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
    """The commands run on a state (``buggy`` gets them all; ``fixed``, ``alt`` (a right fix
    written otherwise than the gold patch) and ``wrong`` the checks an agent repeats after
    an edit, the whole suite after a right one)."""
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
    if phase in ("fixed", "alt"):
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
    wrong_patches: Sequence[str] = (),
    modes: tuple[str, ...] = ("oracle", "blind"),
    reproduction: str | None = None,
    states: Sequence[tuple[str, str, int]] | None = None,
    agent: bool | Sequence[str] = True,
    alt_patches: Sequence[str] = (),
) -> int:
    """Record the transitions of ``task``; returns the number of records written.
    ``wrong_patches`` (and ``wrong_patch``) are wrong fixes, each a state of its own
    (``meta.phase`` ``wrong``, ``meta.wrong`` its index); ``modes`` the SWT contexts
    built per record (``()``: none); ``alt_patches`` right fixes written otherwise than the
    gold patch (``meta.phase`` ``alt``, ``meta.alt`` its index). ``reproduction``: the
    text of an agent-style reproduction
    (:func:`~sweworld.data.factory.reproductions.reproduction_source`), written into the
    repository after each state's other commands and run (``meta.reproduction``) on every
    state but the wrong fixes after the first :data:`WRONG_REPRODUCTIONS` (agents' own
    fixes are mostly right: many wrong states would teach that an edited state fails).
    ``states`` replaces those states as (phase, patch, index); ``agent`` says which
    phases also get the agent's other commands (True: all, False: none)."""
    from sweworld.data.record import RecordingExecutor
    from sweworld.sandbox.bwrap import SandboxLimits
    from sweworld.sandbox.session import SessionConfig

    test_id = task.FAIL_TO_PASS[0]
    test_file = test_id.split("::", 1)[0]
    rec = RecordingExecutor(executor, sink, source="factory", state_source="live", modes=modes)
    config = SessionConfig(limits=SandboxLimits(timeout=timeout))
    session = manager.open(task, executor=rec, config=config)
    step = 0
    try:
        session.write_file("/tmp/reproduce_issue.py", repro_script(test_id, repro))
        if states is None:
            wrongs = list(dict.fromkeys(p for p in (wrong_patch, *wrong_patches) if p))
            alts = list(dict.fromkeys(p for p in alt_patches if p))
            states = [("buggy", "", 0), ("fixed", task.patch, 0)]
            states += [("alt", patch, i) for i, patch in enumerate(alts)]
            states += [("wrong", patch, i) for i, patch in enumerate(wrongs)]
        for n_state, (phase, patch, index) in enumerate(states):
            if patch or n_state:
                session.run("cd /testbed && git checkout -q -- . && git clean -fdq")
            if patch:
                session.write_file("/tmp/candidate.patch", patch)
                applied = session.run("cd /testbed && git apply /tmp/candidate.patch")
                if applied.exit_code != 0:
                    continue
            fields: dict[str, Any] = {"phase": phase, "factory": True}
            if phase in ("wrong", "alt"):
                fields[phase] = index
            runs_agent = agent is True or (agent is not False and phase in agent)
            commands = agent_commands(test_id, test_file, module, repro, phase)
            for command in commands if runs_agent else ():
                rec.begin_step(step, meta=to_json(fields))
                session.run("cd /testbed && " + command, timeout=timeout)
                step += 1
            if reproduction is None or (phase == "wrong" and index >= WRONG_REPRODUCTIONS):
                continue
            session.write_file(f"/testbed/{REPRO_FILE}", reproduction)
            for command in reproduction_commands():
                rec.begin_step(step, meta=to_json({**fields, "reproduction": True}))
                session.run("cd /testbed && " + command, timeout=timeout)
                step += 1
    finally:
        session.destroy()
        rec.close_session(session.id)
    return len(rec.records)


#: run statuses whose output is a real answer of the command (a timeout or a broken
#: environment is not what the command does on that state)
_RECORDED_STATUSES = ("ok", "no_tests")


def screen_record(
    base_task: Any,
    *,
    key: str,
    files: Sequence[str],
    outcome: Any,
    diff: str = "",
    meta: dict[str, Any] | None = None,
) -> Any:
    """A screening run (the library's tests on the base plus one mutant) as an SWT record
    (``state_source="live"``, no context): the state is ``diff`` against the base (the
    mutant), the command the runner's test command, the truth the run's merged output,
    exit code and per-test statuses. None when the run gave no real answer (timeout,
    environment or executor failure). ``key`` makes the record's id (the mutant's key)."""
    from sweworld.data.factory.run_tests import test_command
    from sweworld.data.schema import SWTRecord, command_kind, record_id

    if outcome.status not in _RECORDED_STATUSES:
        return None
    command = test_command(files)
    return SWTRecord(
        id=record_id("factory", base_task.instance_id, "screen", key, command),
        source="factory",
        instance_id=base_task.instance_id,
        repo=base_task.repo,
        base_commit=base_task.base_commit,
        task=to_json(base_task.to_row()),
        command=command,
        stdout=outcome.log,
        stderr="",
        exit_code=int(outcome.exit_code),
        state_source="live",
        diff=diff,
        streams="merged",
        ran_tests=True,
        test_statuses=to_json(dict(outcome.statuses)),
        command_kind=command_kind(command),
        meta=to_json({"phase": "screen", "factory": True, "mutant": key, **(meta or {})}),
    )
