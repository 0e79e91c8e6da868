"""Rebuilding the state at every step of a recorded trajectory, and its SWT records.

**Replay** (the repository is available): a session is opened on the task's repository at
its base commit and every step of the trajectory runs in it for real, in order, so that file
operations (``sed -i``, ``cat > f <<EOF``, ``rm``, ...) change the workspace exactly as they
did for the agent. Execution calls (``python``, ``pytest``, ...) go to a
:class:`ReplayExecutor`, which answers from the recording (the step's recorded output, stdout
and stderr merged, and its return code), wrapped in a
:class:`~sweworld.data.record.RecordingExecutor` with ``state_source="replay"``: each call
becomes an :class:`~sweworld.data.schema.SWTRecord` whose context is exactly what SWT sees
at inference (same builder, budgets, workspace view, facts and history).

mini-swe-agent runs every command in a fresh shell at ``/testbed``: the session's cwd is
reset to ``/testbed`` before each step. Each step has a deadline (the sandbox's timeout); a
step that fails in the sandbox is counted and skipped, never the end of the import.

Attribution. The recording holds one output per *step*; a step may run several execution
commands. A step whose command holds exactly one execution command (by the router's own
classification) and that makes exactly one execution call gets the step's output and
return code: its record's ``consistent`` says whether the session's observation of the whole
step reproduced the recorded one (same return code, same output modulo trailing whitespace
and the recording's truncation), which catches output printed by the step's real commands
too. A step with several execution commands or calls (``python a.py && pytest``, a loop) is
still run, so the state stays right, but its calls' records are dropped with a reason: the
recorded text mixes their outputs and cannot be split without guessing, and a wrong target
is worse than a missing one. The first call is answered with the recording, later ones with
empty output and exit 0.

Divergence. Execution commands are not run, so a script that edits files leaves the replayed
workspace behind the agent's. When a later step that only reads workspace files (``cat``,
``sed -n``, ``git diff``, ...) prints something else than the recording, the records after
the likely cause (the last execution whose code may write files) are marked diverged
(:mod:`sweworld.data.divergence`): their state is not the one the output was made on.

**Fallback** (no repository): :func:`fallback_records` writes one record per execution step
(decided by the router's classification, not a new list) with ``state_source="trajectory"``:
the context holds what the trajectory itself showed (problem, history of the earlier
execution steps, the command, and in oracle mode the gold patch and tests), built with the
same :func:`~sweworld.transition.context.build_context` over an empty workspace (no diff,
no code). ``consistent`` there means only that the output is attributable (one execution
command); it was not checked against a workspace (``meta.verified = false``).
"""

from __future__ import annotations

import re
import shlex
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sweworld.data.divergence import (
    StepCheck,
    comparable_reading,
    divergence_cause,
    mark_diverged,
    may_write_files,
    reads_workspace_only,
)
from sweworld.data.record import (
    HISTORY_OUTPUT_CHARS,
    HISTORY_STEPS,
    RecordingExecutor,
    context_config,
    test_statuses,
)
from sweworld.data.schema import (
    SWTRecord,
    Trajectory,
    TrajectoryStep,
    command_kind,
    record_id,
    to_json,
)
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.sandbox.router import analyze, classify

__all__ = [
    "ReplayExecutor",
    "ReplayResult",
    "execution_commands",
    "fallback_records",
    "replay_trajectory",
    "same_output",
    "trajectory_key",
    "writer_executor",
]

WORKDIR = "/testbed"
#: the checkout history a replay uses by default (see :func:`replay_trajectory`)
REPLAY_HISTORY = "depth:1"
TIMEOUT_EXIT_CODE = 124
_ELIDED = re.compile(r"\n\[\.\.\. (?:\d+|\?) characters elided \.\.\.\]\n")


@dataclass
class ReplayResult:
    """What replaying (or falling back on) one trajectory produced."""

    records: list[SWTRecord] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (unit, reason)
    state_source: str = "replay"
    steps: int = 0
    steps_consistent: int = 0  # steps whose observation reproduced the recording
    steps_failed: int = 0  # steps the sandbox could not run
    records_diverged: int = 0  # records whose state was found to differ from the agent's
    writers_run: int = 0  # execution steps that may write files, run for real
    writers_verified: int = 0  # ... whose real run reproduced the recording


def trajectory_key(trajectory: Trajectory) -> tuple[str, ...]:
    """What identifies ``trajectory`` among the runs of its source: source and instance, and
    ``meta["trajectory_id"]`` when a source holds several runs of one instance (R2E-Gym
    rollouts, several models' harness runs, collect policies). The prefix of its records'
    ids and of its unit of work, so that two runs of one instance never share them."""
    extra = str(trajectory.meta.get("trajectory_id") or "")
    return (trajectory.source, trajectory.instance_id, *((extra,) if extra else ()))


def execution_commands(command: str, scripts: frozenset[str] = frozenset()) -> int:
    """How many simple commands of ``command`` the sandbox routes to the executor."""
    try:
        analysis = analyze(command)
    except Exception:  # an unparsable command: no execution is seen statically
        return 0
    return sum(1 for cmd in analysis.commands if classify(cmd, scripts) == "execution")


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def same_output(observed: str, recorded: str, truncated: bool = False) -> bool:
    """Whether ``observed`` reproduces ``recorded`` modulo trailing whitespace; when the
    recording was cut (head, elided marker, tail), the head and tail must match."""
    if not truncated:
        return _norm(observed) == _norm(recorded)
    rec = _ELIDED.split(recorded, maxsplit=1)
    obs = _ELIDED.split(observed, maxsplit=1)
    if len(rec) != 2 or len(obs) != 2:
        return False
    # the cut windows may be shifted by a character (a newline the shell adds at the end)
    rec_head, obs_head = _norm(rec[0]), _norm(obs[0])
    rec_tail, obs_tail = _norm(rec[1]).lstrip(), _norm(obs[1]).lstrip()
    heads = rec_head.startswith(obs_head) or obs_head.startswith(rec_head)
    tails = rec_tail.endswith(obs_tail) or obs_tail.endswith(rec_tail)
    return heads and tails and min(len(obs_tail), len(rec_tail)) > 0


class ReplayExecutor:
    """Answers a step's execution calls from the recording (see the module docstring).

    ``prepare(step)`` before each step; ``calls`` counts the calls of the current step.
    """

    name = "replay"

    def __init__(self, writers: Any = None) -> None:
        self._lock = threading.Lock()
        self._step: TrajectoryStep | None = None
        self.calls = 0
        self.writers = writers
        self.writes = False  # a call of the current step may write files
        self.verified: bool | None = None  # its real run reproduced the recording (None: not run)

    def prepare(self, step: TrajectoryStep | None) -> None:
        with self._lock:
            self._step = step
            self.calls = 0
            self.writes = False
            self.verified = None

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        writes = _may_write(request)
        with self._lock:
            self.calls += 1
            self.writes |= writes
            first = self.calls == 1
            step = self._step
        if writes and step is not None and self.writers is not None:
            # every writing call runs (its edit lands); only a step's one call can be
            # checked against the recording, which holds the whole step's output
            ok = _run_for_real(self.writers, request, step) and first
            self.verified = ok if self.verified is None else (self.verified and ok)
        elif not first and self.verified:
            self.verified = False  # a second call of the step: the output is no longer its
        if step is None or not first:
            return ExecutionResult("", "", 0, info={"executor": self.name, "answered": False})
        code = TIMEOUT_EXIT_CODE if step.exit_code is None else int(step.exit_code)
        if step.stderr is not None:
            return ExecutionResult(step.output, step.stderr, code, info={"executor": self.name})
        return ExecutionResult(step.output, "", code, info={"executor": self.name})


def writer_executor(timeout: float = 60.0) -> Any:
    """The real executor of the replay's writing steps: a
    :class:`~sweworld.execution.local.LocalExecutor` whose environment is a bare virtualenv
    of the host's Python (nothing installed: an edit script needs the standard library and
    the workspace, which is ``/testbed`` as for the agent)."""
    import sys

    from sweworld.execution.envs import EnvBuilder, EnvRecipe
    from sweworld.execution.local import LocalExecutor

    recipe = EnvRecipe(python=sys.executable, packages=(), install=())
    return LocalExecutor(builder=EnvBuilder(default=recipe), timeout=timeout, max_warm=4)


def _run_for_real(executor: Any, request: ExecutionRequest, step: TrajectoryStep) -> bool:
    """Run ``request`` for real (its file writes reach the workspace; no bytecode files
    are written); whether its exit code and output are the recording's."""
    from dataclasses import replace

    # no task: one bare environment serves every task (its recipe installs nothing)
    quiet = replace(request, task=None, env={**request.env, "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        result = executor.execute(quiet)
    except Exception:  # the real run failed to start: its effects are unknown
        return False
    if (result.info or {}).get("executed") is False or step.exit_code is None:
        return False
    if int(result.exit_code) != int(step.exit_code):
        return False
    merged = [result.stdout + result.stderr, result.stderr + result.stdout]
    return any(same_output(text, step.output, step.output_truncated) for text in merged)


#: Interpreter options that take a value (the script is the first argument after them).
_PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def _script_of(argv: tuple[str, ...]) -> str | None:
    """The script a ``python`` command runs (None: ``-c``, ``-m``, stdin, or not python)."""
    if not argv or not argv[0].rsplit("/", 1)[-1].startswith("python"):
        return None
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in _PYTHON_VALUE_OPTIONS:
            skip = True
        elif arg in ("-c", "-m", "-"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def _runs_tests(argv: tuple[str, ...]) -> bool:
    from sweworld.transition.outcome.commands import TEST_RUNNER_KINDS, command_kind_of

    return command_kind_of(list(argv)) in TEST_RUNNER_KINDS


def _may_write(request: ExecutionRequest) -> bool:
    """Whether an execution call may write files: its arguments, its stdin or the script it
    runs (read from the workspace or the session's /tmp; unreadable: assumed to) call a
    writing API. A test runner's files are tests, not a program that edits (tmp_path)."""
    code = "\n".join(request.argv) + "\n" + request.stdin.decode("utf-8", "replace")
    if may_write_files(code):
        return True
    script = _script_of(request.argv)
    if script is None or not script.endswith(".py") or _runs_tests(request.argv):
        return False  # a test runner (sympy's bin/test, Django's runtests.py) runs tests
    if request.workspace is None:
        return True
    from sweworld.sandbox.paths import SandboxPaths

    mounts = {WORKDIR: Path(request.workspace)}
    if request.tmp is not None:
        mounts["/tmp"] = Path(request.tmp)
    # resolved as the sandbox resolves it; a link out of the mounts, a FIFO or a file too
    # large to scan reads as None
    data = SandboxPaths(mounts, WORKDIR).read_file(script, request.cwd, limit=1_000_000)
    return True if data is None else may_write_files(data.decode("utf-8", "replace"))


def _observed(result: Any) -> tuple[int | None, str, bool] | None:
    from sweworld.data.importers.mini_swe_agent import parse_observation

    return parse_observation(result.observation)


def replay_trajectory(
    trajectory: Trajectory,
    manager: Any,
    *,
    step_timeout: float = 60.0,
    modes: tuple[str, ...] = ("oracle", "blind"),
    model: str = "embedded",
    history: str = REPLAY_HISTORY,
    writers: Any = None,
) -> ReplayResult:
    """Replay ``trajectory`` in a session of ``manager`` (see the module docstring).

    ``writers``: an executor that runs the execution calls that may write files for real
    (:func:`writer_executor`; None: they are answered from the recording only).

    ``history`` is the checkout's git history (:func:`~sweworld.sandbox.repos.materialize`):
    the last commit only by default, since a full history costs ~10x the checkout on a large
    repository (sympy: ~24 s against ~2 s per base commit) and a replayed step only needs the
    base's tree (``git diff`` and ``git status`` behave the same; ``git log`` shows one
    commit).

    Raises :class:`~sweworld.sandbox.repos.RepoError` (or ``TaskValidationError``) when the
    session cannot be opened: the caller falls back on :func:`fallback_records`.
    """
    from sweworld.sandbox.limits import SandboxLimits
    from sweworld.sandbox.session import SessionConfig
    from sweworld.tasks.schema import Task

    task = Task.from_row(trajectory.task)
    manager.checkout(task, history=history)  # no repository: raise before any cost
    replay = ReplayExecutor(writers)
    buffer: list[SWTRecord] = []
    recorder = RecordingExecutor(
        replay,
        buffer.append,
        source=trajectory.source,
        state_source="replay",
        model=model,
        modes=modes,
        meta={"trajectory_source": trajectory.source},
    )
    config = SessionConfig(limits=SandboxLimits(timeout=step_timeout), observation_format="mini")
    out = ReplayResult(state_source="replay")
    session = manager.open(task, executor=recorder, config=config, history=history)
    scripts: frozenset[str] | None = None
    tool_calls = trajectory.meta.get("tool_calls") or {}
    checks: list[StepCheck] = []
    try:
        if not _prepare_state(session, trajectory, out):
            return out
        for index, step in enumerate(trajectory.steps):
            # an importer's exact tool call (parameter values unstripped) wins over its
            # rendering as an action string
            action = tool_calls.get(str(index)) or step.action or step.command
            if not action:
                continue
            out.steps += 1
            unit = f"{trajectory.instance_id}#{index}"
            if scripts is None:
                scripts = _scripts(session)
            static = execution_commands(step.command, scripts) if step.command else 0
            session.cwd = WORKDIR
            replay.prepare(step)
            recorder.begin_step(
                index,
                streams="merged" if step.stderr is None else "separate",
                output_truncated=step.output_truncated,
            )
            start = len(buffer)
            try:
                result = session.step(action)
            except Exception as exc:  # the sandbox failed: count it, keep going
                out.steps_failed += 1
                out.skipped.append((unit, f"sandbox error: {type(exc).__name__}"))
                del buffer[start:]
                checks.append(StepCheck(index, failed=True))
                continue
            observed = _observed(result)
            consistent = (
                observed is not None
                and observed[0] == step.exit_code
                and same_output(observed[1], step.output, step.output_truncated or observed[2])
            )
            out.steps_consistent += int(consistent)
            ran = bool(replay.calls or static)
            out.writers_run += int(replay.verified is not None)
            out.writers_verified += int(bool(replay.verified))
            checks.append(
                StepCheck(
                    index,
                    execution=ran,
                    writes=replay.writes,
                    verified=bool(replay.verified),
                    mismatch=(not ran and observed is not None and observed[0] != step.exit_code),
                    evidence=(
                        not ran
                        and observed is not None
                        and observed[0] == step.exit_code
                        and reads_workspace_only(step.command or "")
                        and not same_output(
                            comparable_reading(observed[1]),
                            comparable_reading(step.output),
                            step.output_truncated or observed[2],
                        )
                    ),
                )
            )
            step_records = buffer[start:]
            del buffer[start:]
            if not step_records:
                continue
            if replay.calls > 1 or static > 1:
                out.skipped.append((unit, "several execution commands in one step"))
                continue
            if step.exit_code is None:
                out.skipped.append((unit, "no exit code recorded (the command timed out)"))
                continue
            for rec in step_records:
                rec.id = record_id(*trajectory_key(trajectory), index, rec.call, rec.command)
                rec.consistent = consistent
                rec.meta = to_json(
                    {"trajectory_source": trajectory.source, "step_command": step.command}
                )
                out.records.append(rec)
    finally:
        if writers is not None and hasattr(writers, "close_session"):
            writers.close_session(session.id)
        session.destroy()
    found = divergence_cause(checks)
    if found is not None:
        out.records_diverged = mark_diverged(out.records, *found)
    return out


#: states an importer may declare in ``Trajectory.meta["state"]`` (the default: the base)
PATCHED_STATE = "base+candidate_patch+test_patch"


def _prepare_state(session: Any, trajectory: Trajectory, out: ReplayResult) -> bool:
    """Bring the session to the state the trajectory started from: the base, or (a harness
    test run) the base with the candidate patch and the test patch applied. False (and a
    skip reason) when that state cannot be made."""
    from sweworld.reward.real import apply_patch

    state = trajectory.meta.get("state")
    if not state or state == "base":
        return True
    if state != PATCHED_STATE:
        out.skipped.append((trajectory.instance_id, f"unknown starting state {state!r}"))
        return False
    for key in ("candidate_patch", "test_patch"):
        patch = str(trajectory.meta.get(key) or "")
        if patch.strip() and not apply_patch(session, patch, f"sweworld_{key}.patch")[0]:
            out.skipped.append((trajectory.instance_id, f"the {key} does not apply"))
            return False
    return True


def _scripts(session: Any) -> frozenset[str]:
    from sweworld.sandbox.router import declared_scripts

    try:
        return declared_scripts(session.base.path)
    except (OSError, ValueError, SyntaxError):
        return frozenset()


def fallback_records(
    trajectory: Trajectory,
    *,
    modes: tuple[str, ...] = ("oracle", "blind"),
    model: str = "embedded",
) -> ReplayResult:
    """SWT records of the execution steps from what the trajectory showed (no workspace)."""
    from sweworld.tasks.schema import Task
    from sweworld.transition.context import HistoryItem, build_context
    from sweworld.transition.types import WorkspaceView

    try:
        task: Any = Task.from_row(trajectory.task)
    except Exception:  # an incomplete row still gives the problem and the tests
        task = SimpleNamespace(**trajectory.task)
    configs = {m: context_config(m, model) for m in modes}
    task_json = to_json(task.to_row()) if hasattr(task, "to_row") else to_json(trajectory.task)
    out = ReplayResult(state_source="trajectory")
    history: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="sweworld-fallback-") as empty:
        view = WorkspaceView(Path(empty), cwd=WORKDIR)
        for index, step in enumerate(trajectory.steps):
            command = step.command or step.action
            if not command:
                continue
            out.steps += 1
            n_exec = execution_commands(command)
            if n_exec == 0:
                continue
            unit = f"{trajectory.instance_id}#{index}"
            output = step.output if step.stderr is None else step.output + step.stderr
            if n_exec > 1:
                out.skipped.append((unit, "several execution commands in one step"))
            elif step.exit_code is None:
                out.skipped.append((unit, "no exit code recorded (the command timed out)"))
            else:
                request = SimpleNamespace(
                    command=command, argv=_argv(command), cwd=WORKDIR, env={}, stdin=b"", task=task
                )
                contexts = {
                    m: build_context(request, view, task=task, history=tuple(history), config=cfg)
                    for m, cfg in configs.items()
                }
                statuses = test_statuses(command, output, trajectory.repo or None)
                out.records.append(
                    SWTRecord(
                        id=record_id(*trajectory_key(trajectory), index, 0, command),
                        source=trajectory.source,
                        instance_id=trajectory.instance_id,
                        repo=trajectory.repo,
                        command=command,
                        stdout=step.output,
                        stderr=step.stderr or "",
                        exit_code=int(step.exit_code),
                        base_commit=trajectory.base_commit,
                        task=task_json,
                        step=index,
                        call=0,
                        state_source="trajectory",
                        history=to_json([h.__dict__ for h in history]),
                        context_oracle=to_json(contexts["oracle"].to_dict())
                        if "oracle" in contexts
                        else "",
                        context_blind=to_json(contexts["blind"].to_dict())
                        if "blind" in contexts
                        else "",
                        streams="merged" if step.stderr is None else "separate",
                        output_truncated=step.output_truncated,
                        ran_tests=bool(statuses) or command_kind(command) in ("pytest", "unittest"),
                        test_statuses=to_json(statuses),
                        command_kind=command_kind(command),
                        consistent=True,
                        meta=to_json({"trajectory_source": trajectory.source, "verified": False}),
                    )
                )
            history.append(
                HistoryItem(
                    command=command,
                    exit_code=TIMEOUT_EXIT_CODE if step.exit_code is None else int(step.exit_code),
                    output=output[-HISTORY_OUTPUT_CHARS:],
                )
            )
            del history[:-HISTORY_STEPS]
    return out


def _argv(command: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return ("bash", "-c", command)
