"""The sandbox's isolation from its host process: no environment variable of the host is
readable inside, processes are limited (cgroup for root, RLIMIT_NPROC in the user namespace
for everyone else), and text with lone surrogates never raises out of a step."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from sweworld.sandbox.bwrap import limited_command
from sweworld.sandbox.launch import bwrap_path, launcher_env
from sweworld.sandbox.limits import PidsCgroup, SandboxLimits
from sweworld.sandbox.session import SessionConfig
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox

SECRET = "s3cr3t-value-that-must-not-leak"
# 700 processes asked for; fork() fails fast (perl does not retry as bash does).
FORK_700 = (
    "perl -e 'my $n = 0; for (1..700) { my $p = fork(); next unless defined $p; "
    'if (!$p) { sleep 3; exit 0 } $n++ } print "started=$n\\n"\''
)


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("SWEWORLD_TEST_SECRET", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return SECRET


def test_host_environment_is_invisible_through_every_route(manager, toy_task, secret):
    with manager.open(toy_task) as s:  # the sandbox starts after the variable is set
        routes = {
            "env": "env",
            "proc": "cat /proc/[0-9]*/environ | tr '\\0' '\\n'",
            "pid1": "tr '\\0' '\\n' < /proc/1/environ",
            "child": 'bash -c \'sleep 2 & tr "\\0" "\\n" < /proc/$!/environ; env\'',
            "export": "printenv",
        }
        for name, command in routes.items():
            out = s.run(command)
            assert out.exit_code == 0, (name, out.stderr)
            assert out.stdout.strip(), name  # the route did print an environment
            assert secret not in out.stdout and "SWEWORLD_TEST_SECRET" not in out.stdout, name
            assert "AWS_SECRET_ACCESS_KEY" not in out.stdout, name
        # pid 1 (bubblewrap's reaper) has only the launcher's fixed environment
        pid1 = set(s.run("tr '\\0' '\\n' < /proc/1/environ").stdout.split()) - {"PWD=/"}
        assert pid1 == {f"{k}={v}" for k, v in launcher_env().items()}


def test_launcher_environment_takes_nothing_from_the_host(secret):
    env = launcher_env()
    assert SECRET not in env.values() and set(env) == {"PATH", "LANG"}


def test_build_environment_passes_only_build_settings(monkeypatch, secret):
    from sweworld.sandbox.launch import build_env

    monkeypatch.setenv("PIP_INDEX_URL", "https://index.example/simple")
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    env = build_env({"EXTRA": "1"})
    assert env["PIP_INDEX_URL"] == "https://index.example/simple"
    assert env["https_proxy"] == "http://proxy.example:3128" and env["EXTRA"] == "1"
    assert SECRET not in env.values() and "SWEWORLD_TEST_SECRET" not in env


def test_processes_are_limited_in_a_root_session(manager, toy_task):
    config = SessionConfig(limits=SandboxLimits(max_processes=40, timeout=30))
    with manager.open(toy_task, config=config) as s:
        assert s.run("ulimit -u").stdout.strip() == "40"  # RLIMIT_NPROC, for non-root users
        out = s.run(FORK_700)
        started = int(out.stdout.split("started=")[1].split()[0])
        if os.geteuid() == 0:
            assert s._cgroup is not None or PidsCgroup.parent() is None
        if s._cgroup is not None or os.geteuid() != 0:
            assert 0 < started < 40, out  # 700 were asked for


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_rlimit_nproc_binds_a_non_root_sandbox():
    """The non-root path: the sandbox's own command, as sweworld starts it (limited_command),
    run by an unprivileged user: 700 processes are asked for, the limit holds,
    and the sandbox cannot raise it again."""
    script = FORK_700 + "; ulimit -u unlimited 2>/dev/null && echo raised || echo kept"
    argv = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        bwrap_path(),
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        *limited_command(30, script),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=launcher_env())
    assert out.returncode == 0, out.stderr
    started = int(out.stdout.split("started=")[1].split()[0])
    assert 0 < started < 30, out.stdout
    assert "kept" in out.stdout


def test_lone_surrogates_never_raise(manager, toy_task):
    with manager.open(toy_task) as s:
        r = s.step("echo \ud800 ok")
        assert r.exit_code == 0 and "\ufffd ok" in r.observation
        assert r.info["action_cleaned"] is True
        r.observation.encode("utf-8")  # valid UTF-8 out
        pair = s.step("echo \ud83d\ude00")  # a pair written as two code points is joined
        assert "\U0001f600" in pair.observation
        call = s.step(
            {
                "function": "file_editor",
                "parameters": {
                    "command": "create",
                    "path": "/testbed/s.txt",
                    "file_text": "a\udc80b\n",
                },
            }
        )
        call.observation.encode("utf-8")
        assert s.read_file("/testbed/s.txt") == "a\ufffdb\n"
        assert s.run("echo \udfff").stdout == "\ufffd\n"
        assert s.step("echo still fine").exit_code == 0
        # an execution command with bytes that are not UTF-8: its record is valid text
        out = s.run("python $'\\xff'")
        record = out.info["execution_calls"][0]
        record["command"].encode("utf-8")
        assert "\ufffd" in record["command"]


def test_lone_surrogates_in_a_cli_actions_file_do_not_abort_the_run(tmp_path, capsys):
    import json

    from sweworld.cli import main

    actions = tmp_path / "actions.jsonl"
    actions.write_text(
        '"echo \\ud800 first"\n'
        '{"function": "execute_bash", "parameters": {"cmd": "echo \\udfff second"}}\n'
        '"echo third"\n'
    )
    code = main(["run", "--id", "sweworld__stockroom-1", "--actions", str(actions)])
    out = capsys.readouterr().out
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    observations = [r["observation"] for r in rows if "observation" in r]
    assert len(observations) == 3 and "third" in observations[2]
    assert "\ufffd first" in observations[0] and "\ufffd second" in observations[1]
    out.encode("utf-8")


def test_control_folder_symlinks_never_reach_host_folders(session, tmp_path):
    """The sandbox can rename the control folder's `req` and `steps` and put symlinks to host
    folders in their place; the host used to clean `req` by path (deleting every folder of
    the symlink's host target) and to create each step's files under `steps` by path."""
    victim = tmp_path / "victim"
    (victim / "precious").mkdir(parents=True)
    (victim / "keep.txt").write_text("keep")
    out = session.run(
        f"python -c 1; c=/.sweworld/ctl; mv $c/req $c/r2 && ln -s {victim} $c/req && "
        f"mv $c/steps $c/s2 && ln -s {victim} $c/steps && echo swapped"
    )
    assert "swapped" in out.stdout and out.info["execution_calls"]
    for _ in range(3):  # a replaced control folder starts a fresh sandbox, which works
        out = session.run("echo hello")
        assert out.stdout == "hello\n", out.stderr
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt", "precious"]
    assert (victim / "keep.txt").read_text() == "keep"


@pytest.mark.parametrize(
    "start",
    [
        "setsid -f bash -c 'sleep 2; echo late > /testbed/late'",
        "(set -m; (sleep 2; echo late > /testbed/late) &)",
        "perl -MPOSIX -e 'fork and exit; POSIX::setsid(); sleep 2; open F, \">/testbed/late\"'",
    ],
)
def test_nothing_a_command_started_runs_after_it(session, start):
    """A process that leaves the command's process group (setsid, double fork) used to
    survive the step and keep running beside later steps (and race the host's own file
    operations on the workspace)."""
    assert session.run(start).exit_code == 0
    out = session.run("sleep 3; ls /testbed; echo ---; ps -e -o comm=")
    files, _, processes = out.stdout.partition("---\n")
    assert "late" not in files.split()
    assert set(processes.split()) == {"bwrap", "bash", "ps"}  # reaper, server, this command


def test_a_forged_request_id_never_reaches_a_host_folder(session, tmp_path):
    """The request id the sandbox writes to the exec FIFO was checked before the request was
    read but not before the host answered it: `../../../<host folder>` made the host
    create `stdout`, `stderr` and `exit` in any host folder."""
    victim = tmp_path / "victim"
    victim.mkdir()
    ups = "../" * 40
    out = session.run(
        f"c=/.sweworld/ctl; printf '%s\\n' '{ups}{victim}' .. . > $c/exec; sleep 0.5; echo sent"
    )
    assert out.stdout == "sent\n"
    assert list(victim.iterdir()) == []


def test_answer_call_ignores_ids_that_are_paths(tmp_path):
    from sweworld.sandbox.shims import answer_call

    (tmp_path / "req").mkdir()
    (tmp_path / "outside").mkdir()
    fd = os.open(tmp_path / "req", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for bad in ("../outside", "..", ".", "a/b", ""):
            answer_call(fd, bad, "out", "err", 0)
    finally:
        os.close(fd)
    assert list((tmp_path / "outside").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "req"]
