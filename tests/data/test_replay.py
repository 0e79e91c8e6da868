"""Replaying a trajectory in a session: state, history, attribution, deadlines; fallback."""

from __future__ import annotations

import json

import pytest

from sweworld.data.divergence import state_diverged
from sweworld.data.importers import mini_swe_agent as msa
from sweworld.data.replay import (
    ReplayExecutor,
    execution_commands,
    fallback_records,
    replay_trajectory,
    same_output,
)
from sweworld.data.schema import Trajectory, TrajectoryStep, record_id
from sweworld.sandbox.executor import ExecutionRequest
from tests.conftest import requires_sandbox
from tests.data import toy_source


@pytest.fixture(scope="module")
def toy_trajectory(tmp_path_factory) -> Trajectory:
    src = toy_source(tmp_path_factory.mktemp("msa"))
    (traj,) = [i for i in msa.read(src) if isinstance(i, Trajectory)]
    return traj


def test_execution_commands_follow_the_router():
    assert execution_commands("ls -la && grep -n x f.py") == 0
    assert execution_commands("cd /testbed && python repro.py") == 1
    assert execution_commands("cat > a.py <<'EOF'\nprint(1)\nEOF\npython a.py") == 1
    assert execution_commands("python a.py && pytest -q") == 2


def test_same_output_modulo_trailing_space_and_cut():
    assert same_output("a  \nb\n\n", "a\nb")
    assert not same_output("a\nc", "a\nb")
    cut = "HEAD\n[... 10 characters elided ...]\nTAIL"
    assert same_output("HEAD\n[... 99 characters elided ...]\nTAIL\n", cut, truncated=True)
    assert not same_output("HEAD\n[... 99 characters elided ...]\nOTHER", cut, truncated=True)


def test_replay_executor_answers_the_first_call_from_the_recording():
    rx = ReplayExecutor()
    rx.prepare(TrajectoryStep(command="python a.py", output="out\n", exit_code=4))
    first = rx.execute(ExecutionRequest(argv=("python", "a.py")))
    second = rx.execute(ExecutionRequest(argv=("python", "b.py")))
    assert (first.stdout, first.stderr, first.exit_code) == ("out\n", "", 4)
    assert (second.stdout, second.exit_code) == ("", 0) and rx.calls == 2


@requires_sandbox
@pytest.mark.slow
def test_replay_rebuilds_the_state_at_each_step(toy_trajectory, manager):
    result = replay_trajectory(toy_trajectory, manager, step_timeout=1, model="default")
    by_step = {r.step: r for r in result.records}
    # execution steps with one command each: 2, 4, 5, 8, 9 (6 has two, 7 is real)
    assert sorted(by_step) == [2, 4, 5, 8, 9]
    assert all(r.state_source == "replay" and r.streams == "merged" for r in result.records)
    # the diff of each record holds exactly the edits made before it
    assert "slugify_renamed" in by_step[2].diff and "repro.py" not in by_step[2].diff
    assert "slugify_renamed" in by_step[4].diff and "+print('repro ran')" in by_step[4].diff
    ctx = json.loads(by_step[4].context_oracle)
    assert "slugify_renamed" in ctx["diff"] and ctx["mode"] == "oracle"
    assert "repro ran" in ctx["executed_code"]
    assert by_step[4].cwd == "/testbed" and by_step[4].stdout == "repro ran\n"
    # history: the earlier execution calls, answered from the recording
    history = json.loads(by_step[4].history)
    assert [h["command"] for h in history] == ["python -c 'print(1)'"]
    assert history[0]["output"] == "1\n"
    # the cut pytest output: reproduced (head and tail), marked truncated, statuses parsed
    cut = by_step[5]
    assert cut.output_truncated and cut.consistent and cut.exit_code == 1
    assert cut.ran_tests and cut.command_kind == "pytest"
    # the real part of step 8 printed 'before': the observation differs from the recording
    assert by_step[8].consistent is False and by_step[8].stdout == "3\n"
    assert by_step[2].consistent and by_step[9].consistent and by_step[9].exit_code == 3
    reasons = dict(result.skipped)
    assert reasons["sweworld__stockroom-1#6"] == "several execution commands in one step"
    # 7 hung (killed at the deadline) and 8 printed more; the others reproduce, 6 too (its
    # first call answered with the whole output): attribution, not the observation, drops 6
    assert result.steps == 10 and result.steps_consistent == 8 and result.steps_failed == 0
    # record ids do not depend on the session (a second run writes no duplicate)
    for rec in result.records:
        assert rec.id == record_id("mini-swe-agent", rec.instance_id, rec.step, 0, rec.command)


def test_fallback_records_are_marked_and_hold_what_the_trajectory_showed(toy_trajectory):
    result = fallback_records(toy_trajectory, model="default")
    assert result.state_source == "trajectory"
    assert sorted(r.step for r in result.records) == [2, 4, 5, 8, 9]
    rec = next(r for r in result.records if r.step == 4)
    assert rec.state_source == "trajectory" and rec.diff == ""
    assert json.loads(rec.meta)["verified"] is False
    ctx = json.loads(rec.context_oracle)
    assert ctx["diff"] == "" and ctx["executed_code"] == ""
    assert "slugify" in ctx["problem"] and "repro.py" in ctx["command"]
    assert "print(1)" in ctx["history"] and ctx["gold_patch"]
    blind = json.loads(rec.context_blind)
    assert blind["gold_patch"] == "" and blind["mode"] == "blind"
    assert (
        dict(result.skipped)["sweworld__stockroom-1#6"] == "several execution commands in one step"
    )


@requires_sandbox
def test_a_missing_repository_raises_for_the_caller_to_fall_back(toy_trajectory, manager):
    from sweworld.sandbox.repos import RepoError

    missing = Trajectory(
        source="mini-swe-agent",
        instance_id="nobody__nothing-1",
        repo="nobody/nothing",
        task={**toy_trajectory.task, "repo": "nobody/nothing", "instance_id": "nobody__nothing-1"},
        steps=toy_trajectory.steps,
    )
    with pytest.raises(RepoError):
        replay_trajectory(missing, manager)


@requires_sandbox
def test_a_step_the_sandbox_cannot_run_is_counted_not_fatal(toy_trajectory, manager, monkeypatch):
    from sweworld.sandbox.session import Session

    real_step = Session.step

    def flaky(self, action):
        if action == "echo hello":
            raise RuntimeError("sandbox broke")
        return real_step(self, action)

    monkeypatch.setattr(Session, "step", flaky)
    short = Trajectory(**{**toy_trajectory.__dict__, "steps": toy_trajectory.steps[:3]})
    result = replay_trajectory(short, manager, model="default")
    assert result.steps_failed == 1
    assert dict(result.skipped)["sweworld__stockroom-1#0"] == "sandbox error: RuntimeError"
    assert [r.step for r in result.records] == [2] and "slugify_renamed" in result.records[0].diff


@requires_sandbox
def test_a_harness_run_is_replayed_from_base_plus_candidate_plus_test_patch(manager, toy_task):
    """A SWE-bench harness test run (swebench importer): the state is the base with the
    candidate and the test patch applied; an exact tool call in ``meta`` wins over the
    action string."""
    traj = Trajectory(
        source="swebench",
        instance_id=toy_task.instance_id,
        repo=toy_task.repo,
        task=toy_task.to_row(),
        steps=[
            TrajectoryStep(command="", action="not a tool call"),
            TrajectoryStep(command="python -m pytest -rA", output="1 passed\n", exit_code=0),
        ],
        meta={
            "state": "base+candidate_patch+test_patch",
            "candidate_patch": toy_task.patch,
            "test_patch": toy_task.test_patch,
            "tool_calls": {"0": {"function": "execute_bash", "parameters": {"cmd": "true"}}},
        },
    )
    result = replay_trajectory(traj, manager, step_timeout=30, model="default")
    (rec,) = result.records
    gold_files = toy_task.patch_files() + toy_task.test_files()
    assert all(f in rec.diff for f in gold_files) and rec.stdout == "1 passed\n"
    assert result.steps == 2 and result.steps_failed == 0

    broken = Trajectory(**{**traj.__dict__, "meta": {**traj.meta, "candidate_patch": "junk"}})
    result = replay_trajectory(broken, manager, step_timeout=30, model="default")
    assert result.records == [] and result.skipped == [
        (toy_task.instance_id, "the candidate_patch does not apply")
    ]
    odd = Trajectory(**{**traj.__dict__, "meta": {"state": "somewhere else"}})
    result = replay_trajectory(odd, manager, step_timeout=30, model="default")
    assert result.skipped == [(toy_task.instance_id, "unknown starting state 'somewhere else'")]


def _edit_script_trajectory(toy_trajectory: Trajectory) -> Trajectory:
    """An agent that writes an edit script, runs it, reads the file, then runs Python."""
    script = (
        "cat > fix.py <<'EOF'\nimport pathlib, sys\np = pathlib.Path('stockroom/money.py')\n"
        "p.write_text(p.read_text() + sys.stdin.read())\nprint('fixed')\nEOF"
    )
    steps = [
        TrajectoryStep(command=script, output="", exit_code=0),
        TrajectoryStep(command="python fix.py < note.txt", output="fixed\n", exit_code=0),
        TrajectoryStep(command="tail -n 1 stockroom/money.py", output="# fixed\n", exit_code=0),
        TrajectoryStep(command="python -c 'print(2)'", output="2\n", exit_code=0),
    ]
    note = TrajectoryStep(command="printf '# fixed\\n' > note.txt", output="", exit_code=0)
    return Trajectory(
        source=toy_trajectory.source,
        instance_id=toy_trajectory.instance_id,
        repo=toy_trajectory.repo,
        task=toy_trajectory.task,
        steps=[note, *steps],
        meta={"trajectory_id": "edit-script"},
    )


@requires_sandbox
@pytest.mark.slow
def test_an_edit_script_runs_for_real_and_its_edit_reaches_the_state(toy_trajectory, manager):
    """Run for real (the host's Python, a bare environment, its stdin file given), its output
    checked against the recording: the next records' state holds its edit."""
    from sweworld.data.replay import writer_executor

    trajectory = _edit_script_trajectory(toy_trajectory)
    real = writer_executor(timeout=30)
    try:
        result = replay_trajectory(trajectory, manager, step_timeout=30, modes=(), writers=real)
    finally:
        real.close()
    by_step = {r.step: r for r in result.records}
    assert (result.writers_run, result.writers_verified, result.records_diverged) == (1, 1, 0)
    assert "b/stockroom/money.py" in by_step[4].diff and "+# fixed" in by_step[4].diff
    assert "b/stockroom/money.py" not in by_step[2].diff  # the state before the script ran
    assert not any(state_diverged(r) for r in result.records)
    assert "__pycache__" not in by_step[4].diff  # no bytecode written by the real run
    assert result.steps_consistent == result.steps == 5


@requires_sandbox
@pytest.mark.slow
def test_without_the_real_run_the_read_shows_the_divergence(toy_trajectory, manager):
    """Answered from the recording only, the script's edit is missing: the later read
    differs from what the agent saw, and the records after the script are marked."""
    trajectory = _edit_script_trajectory(toy_trajectory)
    result = replay_trajectory(trajectory, manager, step_timeout=30, modes=())
    by_step = {r.step: r for r in result.records}
    assert (result.writers_run, result.records_diverged) == (0, 1)
    assert state_diverged(by_step[4]) and not state_diverged(by_step[2])
    assert json.loads(by_step[4].meta)["diverged_after"] == 2


@requires_sandbox
def test_a_fifo_or_a_link_named_like_a_script_does_not_hang_the_replay(toy_trajectory, manager):
    """The script is read without following a link or opening a FIFO for reading (which
    would block the replay forever): such a script counts as one that may write."""
    import threading

    steps = [
        TrajectoryStep(command="mkfifo fix.py && ln -s /etc/passwd link.py", output="",
                       exit_code=0),
        TrajectoryStep(command="python fix.py", output="", exit_code=0),
        TrajectoryStep(command="python link.py", output="", exit_code=0),
        TrajectoryStep(command="python -W ignore -X utf8 fix.py", output="", exit_code=0),
    ]  # fmt: skip
    trajectory = Trajectory(
        source=toy_trajectory.source, instance_id=toy_trajectory.instance_id,
        repo=toy_trajectory.repo, task=toy_trajectory.task, steps=steps,
        meta={"trajectory_id": "fifo"},
    )  # fmt: skip
    found: list = []
    worker = threading.Thread(
        target=lambda: found.append(replay_trajectory(trajectory, manager, modes=())),
        daemon=True,
    )
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the replay hung on the FIFO"
    assert sorted(r.step for r in found[0].records) == [1, 2, 3]


def test_which_calls_count_as_writers(tmp_path):
    """A script that calls a writing API counts (read from the workspace or /tmp, past
    option values); a test runner does not, whatever its source holds; what cannot be read
    as a regular file counts (the real run, checked, decides)."""
    import os

    ws, tmp = tmp_path / "ws", tmp_path / "tmp"
    (ws / "bin").mkdir(parents=True)
    tmp.mkdir()
    (ws / "bin" / "test").write_text("import subprocess\n")
    (ws / "fix.py").write_text("open('a.py', 'w').write('x')\n")
    (ws / "show.py").write_text("print(open('a.py').read())\n")
    (tmp / "edit.py").write_text("import shutil\n")
    os.mkfifo(ws / "pipe.py")

    def writes(*argv: str, cwd: str = "/testbed") -> bool:
        rx = ReplayExecutor()
        rx.prepare(TrajectoryStep(command=" ".join(argv), output="", exit_code=0))
        rx.execute(ExecutionRequest(argv=argv, cwd=cwd, workspace=ws, tmp=tmp))
        return rx.writes

    assert writes("python", "fix.py") and writes("python", "-W", "ignore", "fix.py")
    assert writes("python3", "../testbed/fix.py", cwd="/testbed/bin")
    assert writes("python", "/tmp/edit.py") and writes("python", "pipe.py")
    assert not writes("python", "show.py") and not writes("python", "bin/test", "sympy/core")
    assert not writes("python", "-m", "pytest", "tests") and not writes("pytest", "fix.py")
    assert writes("python", "-c", "import os; os.remove('a.py')")
