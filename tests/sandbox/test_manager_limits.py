"""Running out of file descriptors, failed cgroups and leftovers: sessions that cannot be
opened are refused with a clear error and leave nothing behind; `gc` removes what a dead
process left (state folders, control folders, empty cgroups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from sweworld.sandbox.launch import SandboxUnavailable
from sweworld.sandbox.limits import PidsCgroup
from sweworld.sandbox.manager import gc_stale_sessions
from tests.conftest import PROJECT, requires_sandbox

pytestmark = requires_sandbox

# Run in a child whose descriptor limit is lowered (the hard limit of 1024 of the issue).
EXHAUST = textwrap.dedent(
    """
    import json, os, resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    from sweworld import SessionManager, load_tasks
    from sweworld.dirs import control_dir
    from sweworld.sandbox.launch import SandboxUnavailable
    from sweworld.sandbox.limits import PidsCgroup

    def nfds():
        return len(os.listdir("/proc/self/fd"))

    task = load_tasks("data/toy/tasks.jsonl")[0]
    manager = SessionManager(runtime_root=Path(sys.argv[1]))
    manager.checkout(task)
    before = nfds()
    sessions, error, failed_steps = [], None, []
    for _ in range(600):
        try:
            session = manager.open(task)
        except SandboxUnavailable as exc:
            error = str(exc)
            break
        sessions.append(session)
        result = session.step("true")  # must never raise
        if result.exit_code != 0:
            failed_steps.append(result.observation)
    opened = len(sessions)
    at_limit = sessions[0].step("echo again")  # may be refused, must not raise
    for session in sessions[: opened // 2]:
        session.destroy()
    after_half = [sessions[-1].step("echo ok").observation, sessions[-2].step("ls").exit_code]
    for session in sessions[opened // 2 :]:
        session.destroy()
    pid = str(os.getpid())
    parent = PidsCgroup.parent()
    print(json.dumps({
        "opened": opened,
        "error": error,
        "failed_steps": failed_steps[:3],
        "at_limit": [at_limit.exit_code, at_limit.observation],
        "after_half": after_half,
        "fds_before": before,
        "fds_after": nfds(),
        "state_left": sorted(os.listdir(manager.sessions_dir)),
        "ctl_left": [n for n in os.listdir(control_dir()) if n.startswith(pid + "-")],
        "cgroups_left": [n for n in os.listdir(parent) if n.startswith(pid + "-")]
        if parent else [],
    }))
    """
)


@pytest.mark.slow
def test_out_of_descriptors_is_refused_cleanly_and_leaks_nothing(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", EXHAUST, str(tmp_path / "rt")],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert 60 <= data["opened"] < 600, data  # some open, then a refusal
    assert "out of file descriptors" in data["error"] and "ulimit -n" in data["error"]
    for observation in data["failed_steps"]:
        assert "file descriptors" in observation
    assert data["at_limit"][0] in (0, 126)
    if data["at_limit"][0] == 126:
        assert "file descriptors" in data["at_limit"][1]
    assert "ok" in data["after_half"][0] and data["after_half"][1] == 0
    assert data["state_left"] == [] and data["ctl_left"] == [] and data["cgroups_left"] == []
    assert data["fds_after"] <= data["fds_before"] + 2, data


def test_a_session_is_never_opened_without_its_process_limit(
    manager, toy_task, monkeypatch, tmp_path
):
    """A cgroup hierarchy that exists but refuses this session's cgroup: refused, clean."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(PidsCgroup, "parent", staticmethod(lambda: blocker))
    before_fds = len(os.listdir("/proc/self/fd"))
    before_state = sorted(os.listdir(manager.sessions_dir))
    with pytest.raises(SandboxUnavailable, match="pids cgroup"):
        manager.open(toy_task)
    assert sorted(os.listdir(manager.sessions_dir)) == before_state
    assert len(os.listdir("/proc/self/fd")) == before_fds


def test_gc_removes_state_control_folders_and_empty_cgroups(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{dead.pid}-1-abcdef"
    sessions, ctl = tmp_path / "sessions", tmp_path / "ctl"
    (sessions / name / "tmp").mkdir(parents=True)
    (ctl / name / "steps").mkdir(parents=True)
    (ctl / f"{name}.log").write_text("")
    live = f"{os.getpid()}-1-abcdef"
    (sessions / live).mkdir()
    parent = PidsCgroup.parent()
    if parent is not None:
        (parent / name).mkdir()
        (parent / f"{dead.pid}-2-abcdef-local").mkdir()
    removed = gc_stale_sessions(sessions, ctl)
    assert name in removed
    assert not (sessions / name).exists() and not (ctl / name).exists()
    assert not (ctl / f"{name}.log").exists()
    assert (sessions / live).exists()  # a live process's session stays
    if parent is not None:
        assert not (parent / name).exists() and not (parent / f"{dead.pid}-2-abcdef-local").exists()


def test_a_manager_that_is_gone_holds_no_descriptor(tmp_path):
    import gc

    from sweworld.sandbox.manager import SessionManager

    SessionManager(runtime_root=tmp_path / "warm")  # process-wide state (the mounter) first
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for i in range(20):
        SessionManager(runtime_root=tmp_path / str(i))
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before


def test_one_command_hands_the_executor_a_bounded_number_of_calls(manager, toy_task):
    """Executor time is not counted against the command's timeout, so a loop of execution
    calls held one step for calls x executor latency: with a 2 s timeout and a 50 ms
    executor, 240 calls and 14 s; with a simulated executor, hours."""
    import time

    from sweworld.sandbox.executor import ExecutionResult
    from sweworld.sandbox.limits import SandboxLimits
    from sweworld.sandbox.session import SessionConfig

    class Slow:
        name = "slow"
        calls = 0

        def execute(self, request):
            Slow.calls += 1
            time.sleep(0.05)
            return ExecutionResult(stdout="ok\n", exit_code=0)

    limits = SandboxLimits(timeout=30, max_execution_calls=5)
    config = SessionConfig(limits=limits)
    with manager.open(toy_task, executor=Slow(), config=config) as s:
        out = s.run("for i in $(seq 40); do python -c 1; done 2>&1 | sort | uniq -c")
    assert Slow.calls == 5 and len(out.info["execution_calls"]) == 5
    assert out.info["execution_calls_refused"] == 35
    assert "35 sweworld: not run: this command reached its limit" in out.stdout
    assert "5 ok" in out.stdout

    Slow.calls = 0
    limits = SandboxLimits(timeout=30, max_executor_seconds=0.2)
    with manager.open(toy_task, executor=Slow(), config=SessionConfig(limits=limits)) as s:
        out = s.run("for i in $(seq 40); do python -c 1; done")
    assert 4 <= Slow.calls <= 6 and out.info["execution_calls_refused"] == 40 - Slow.calls
