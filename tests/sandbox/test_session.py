"""Sessions end to end on the toy repository: real file operations, interception, limits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from sweworld.execution.scripted import ScriptedExecutor
from sweworld.sandbox.bwrap import SandboxLimits
from sweworld.sandbox.executor import ExecutionResult
from sweworld.sandbox.router import REFUSED_EXIT_CODE
from sweworld.sandbox.session import SessionClosed, SessionConfig
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox


def echo_executor() -> ScriptedExecutor:
    """Answers every execution command with a JSON description of what it received."""

    class Echo(ScriptedExecutor):
        def execute(self, request):
            self.calls.append(request)
            body = {
                "argv": list(request.argv),
                "cwd": request.cwd,
                "stdin": request.stdin.decode(),
                "env": request.env,
            }
            code = 3 if "fail" in request.argv else 0
            return ExecutionResult(stdout=json.dumps(body) + "\n", stderr="", exit_code=code)

    return Echo()


def run(session, command, **kw):
    return session.run(command, **kw)


# ------------------------------------------------------------------ real file operations


def test_real_file_operations_and_heredoc(session):
    out = run(session, "cat > notes.py <<'EOF'\nx = 1\nprint(x)\nEOF\nwc -l notes.py && ls")
    assert out.exit_code == 0
    assert "2 notes.py" in out.stdout
    assert "stockroom" in out.stdout
    assert (session.root / "notes.py").read_text() == "x = 1\nprint(x)\n"
    out = run(session, "sed -i 's/x = 1/x = 2/' notes.py && grep -n 'x = ' notes.py")
    assert out.stdout == "1:x = 2\n"
    assert run(session, "diff <(echo a) <(echo b); echo rc=$?").stdout.endswith("rc=1\n")


def test_cd_persists_between_steps_and_survives_failures(session):
    assert run(session, "cd stockroom").exit_code == 0
    assert session.cwd == "/testbed/stockroom"
    assert run(session, "pwd").stdout == "/testbed/stockroom\n"
    assert run(session, "cd /nonexistent").exit_code == 1
    assert session.cwd == "/testbed/stockroom"
    run(session, "cd .. && cd tests")
    assert run(session, "pwd").stdout == "/testbed/tests\n"
    run(session, "cd /testbed && rm -rf /testbed/tests")  # cwd deleted under the agent
    run(session, "cd /testbed/tests 2>/dev/null; true")
    assert run(session, "pwd").stdout == "/testbed\n"


def test_shell_semantics_are_bash_semantics(session):
    out = run(session, "false && echo no; false || echo yes; (exit 7); echo $?")
    assert out.stdout == "yes\n7\n"
    syntax = run(session, "ls (")
    assert syntax.exit_code == 2
    assert "syntax error" in syntax.stderr
    assert run(session, "exit 5").exit_code == 5


def test_git_works_and_history_ends_at_the_base(session, toy_tasks):
    out = run(session, "git log --all --oneline && git reflog && git tag && git branch -a")
    assert out.stdout.splitlines() == [
        f"{toy_tasks[0].base_commit[:7]} Initial commit of stockroom",
        "* main",
    ]
    for task in toy_tasks[1:]:
        assert run(session, f"git cat-file -p {task.base_commit}").exit_code == 128
    run(session, "echo change >> README.md")
    assert run(session, "git status --short").stdout == " M README.md\n"
    assert run(session, "git stash && git status --short && git stash pop").exit_code == 0
    assert run(session, "git diff --stat").stdout.strip().startswith("README.md")


# ------------------------------------------------------------------ isolation


def test_nothing_outside_the_workspace_is_visible_or_writable(session):
    out = run(session, "ls /; ls ..")
    listing = set(out.stdout.split())
    assert {"testbed", "tmp", "usr", "etc"} <= listing
    assert not listing & {"work", "home", "var", "opt", "mnt", "srv"}
    assert "root:x:0:0" in run(session, "cat /etc/passwd").stdout
    assert run(session, "cat /etc/shadow").exit_code != 0
    # eval hides the target from the static check; the read-only system still holds.
    out = run(session, "eval 'echo x > /usr/evil'")
    assert out.exit_code != 0
    assert "Read-only file system" in out.stderr
    assert not os.path.exists("/usr/evil")
    cmdline = run(session, "cat /proc/1/cmdline").stdout
    assert str(session.state_dir) not in cmdline  # no host paths leak through /proc
    assert str(session.base.path) not in cmdline


def test_refused_commands_run_nothing_and_leave_the_session_usable(session):
    out = run(session, "touch marker && sudo rm -rf /")
    assert out.exit_code == 126
    assert "sudo" in out.stderr and "Nothing was run" in out.stderr
    assert not (session.root / "marker").exists()
    assert run(session, "echo still here").stdout == "still here\n"
    dynamic = run(session, "x=docker; $x ps")  # not visible statically: the shim refuses it
    assert dynamic.exit_code == 126
    assert "refused" in dynamic.stderr
    assert run(session, "rm -rf /etc").exit_code == 126


def test_no_network(session):
    out = run(session, "exec 3<>/dev/tcp/1.1.1.1/80 && echo connected")
    assert out.exit_code != 0
    assert "connected" not in out.stdout


def test_host_processes_cannot_be_seen_or_killed(session):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        out = run(session, f"kill -9 {victim.pid}")
        assert out.exit_code != 0
        assert victim.poll() is None
        pids = run(session, "ls /proc | grep -E '^[0-9]+$' | wc -l").stdout
        assert int(pids) < 10
    finally:
        victim.kill()
        victim.wait()


def test_symlink_escapes(session):
    out = run(session, "ln -s /etc/shadow leak && cat leak")
    assert out.exit_code != 0
    run(session, "ln -s / rootlink")
    editor = session.step(
        "<function=file_editor><parameter=command>view</parameter>"
        "<parameter=path>/testbed/rootlink/etc/hostname</parameter></function>"
    )
    assert "ERROR" in editor.observation
    assert "outside" in editor.observation.lower()


# ------------------------------------------------------------------ limits


def test_hanging_command_times_out_and_session_stays_usable(manager, toy_task):
    config = SessionConfig(limits=SandboxLimits(timeout=1.0))
    with manager.open(toy_task, config=config) as s:
        out = s.run("echo before; sleep 30")
        assert out.timed_out and out.exit_code == -1
        assert "before" in out.stdout
        assert "did not finish within 1 s" in out.stderr
        obs = s.step("sleep 30").observation
        assert "timed out and has been killed" in obs
        r2e = s.step("<function=execute_bash><parameter=cmd>sleep 30</parameter></function>")
        assert "The command took too long to execute" in r2e.observation
        assert s.run("echo after").stdout == "after\n"


def test_output_flood_is_cut(manager, toy_task):
    config = SessionConfig(limits=SandboxLimits(max_output_bytes=100_000))
    with manager.open(toy_task, config=config) as s:
        out = s.run("yes")
        assert out.exit_code == -1
        assert len(out.stdout) == 100_000
        assert "passed 100000 bytes" in out.stderr
        assert s.run("echo fine").stdout == "fine\n"


def test_fork_bomb_is_contained(manager, toy_task):
    config = SessionConfig(limits=SandboxLimits(timeout=5.0, max_processes=64))
    with manager.open(toy_task, config=config) as s:
        out = s.run(":(){ :|:& };:; sleep 1; echo survived")
        assert out.exit_code in (0, -1)
        assert s.run("echo usable").stdout == "usable\n"
    # the host still forks fine
    assert subprocess.run(["true"]).returncode == 0


def test_non_utf8_and_binary_output(session):
    out = run(session, "printf 'ok \\xff\\xfe end\\n'; head -c 64 /usr/bin/bash | wc -c")
    assert out.stdout.startswith("ok \ufffd\ufffd end\n")
    assert out.stdout.endswith("64\n")
    json.dumps(out.stdout)  # always serialisable


def test_big_file_written_by_a_command_is_capped(manager, toy_task):
    config = SessionConfig(limits=SandboxLimits(file_mb=1))
    with manager.open(toy_task, config=config) as s:
        out = s.run("head -c 3000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin")
        assert out.stdout.splitlines()[-1] == str(1024 * 1024)


# ------------------------------------------------------------------ execution interception


def test_execution_commands_go_to_the_executor(manager, toy_task):
    executor = echo_executor()
    with manager.open(toy_task, executor=executor) as s:
        out = s.run("cd stockroom && FOO=bar python -m pytest -q ../tests | tr a-z A-Z")
        body = json.loads(out.stdout.lower())
        assert body["argv"] == ["python", "-m", "pytest", "-q", "../tests"]
        assert body["cwd"] == "/testbed/stockroom"
        assert body["env"] == {"foo": "bar"}
        assert out.info["execution_calls"][0]["command"] == "python -m pytest -q ../tests"
        heredoc = s.run("python - <<'EOF'\nprint('hi')\nEOF")
        assert json.loads(heredoc.stdout)["stdin"] == "print('hi')\n"
        piped = s.run("printf 'a\\nb\\n' | python reader.py")
        assert json.loads(piped.stdout)["stdin"] == "a\nb\n"
        # A script given as a file operand does not swallow a redirected stdin file: it is
        # sent what is left of it, and the loop reads on.
        s.run("printf 'x.py\\ny.py\\n' > list.txt")
        loop = s.run('while read f; do python "$f"; done < list.txt')
        calls = [json.loads(line) for line in loop.stdout.splitlines()]
        assert [c["argv"][1] for c in calls] == ["x.py", "y.py"]
        assert [c["stdin"] for c in calls] == ["y.py\n", ""]
        # `python -c '...' < file` (an edit script reading the module it rewrites) gets it
        s.run("printf 'line1\\nline2\\n' > data.txt")
        redirected = s.run("python -c 'import sys; sys.stdin.read()' < data.txt")
        assert json.loads(redirected.stdout)["stdin"] == "line1\nline2\n"
        absolute = s.run("/usr/bin/python3 -c 'print(1)' && echo ok")
        assert json.loads(absolute.stdout.splitlines()[0])["argv"][0] == "python3"
        chained = s.run("python run.py fail && echo no || echo recovered")
        assert chained.stdout.splitlines()[-1] == "recovered"
        assert s.run("pytest fail; echo $?").stdout.splitlines()[-1] == "3"
    assert len(executor.calls) >= 8
    assert all(call.workspace is not None for call in executor.calls)


def test_a_loop_over_a_large_file_does_not_fill_the_control_space(manager, toy_task):
    """Each call of a loop gets what is left of a 1.5 MB file (cut at 1 MiB); the copy is
    removed once answered, so 64 calls (the most one command may make; 64 MiB sent in all)
    fit the session's control space, and the loop runs to its end as bash runs it."""

    class Sizes(ScriptedExecutor):
        def execute(self, request):
            return ExecutionResult(stdout=f"{len(request.stdin)}\n", stderr="", exit_code=0)

    with manager.open(toy_task, executor=Sizes()) as s:
        s.run("yes 0123456789abcdefghijklmnopqrstu | head -c 1500000 > big.txt")
        out = s.run(
            "i=0; while [ $i -lt 64 ] && read -r line; do python -c 'pass'; i=$((i+1)); "
            "done < big.txt; echo done $i"
        )
        lines = out.stdout.splitlines()
        assert lines[-1] == "done 64" and not out.stderr, out.stderr[-500:]
        assert int(lines[0]) == 1024 * 1024 + 1 and len(lines) == 65


def test_no_executor_gives_a_clear_message(session):
    out = run(session, "python reproduce.py")
    assert out.exit_code == 126
    assert "no executor" in out.stderr
    assert "`python reproduce.py`" in out.stderr


def test_executor_failure_is_reported_not_raised(manager, toy_task):
    class Broken:
        name = "broken"

        def execute(self, request):
            raise RuntimeError("model server is down")

    with manager.open(toy_task, executor=Broken()) as s:
        out = s.run("python x.py")
        assert out.exit_code == 1
        assert "model server is down" in out.stderr
        assert s.run("echo ok").stdout == "ok\n"


# ------------------------------------------------------------------ step and observations


def test_step_formats(session):
    bash = session.step("ls")
    assert bash.observation.startswith("<returncode>0</returncode>\n<output>\n")
    xml = session.step("<function=execute_bash><parameter=cmd>ls</parameter></function>")
    assert xml.observation.startswith("Exit code: 0\nExecution output of [execute_bash]:\n")
    fenced = session.step("THOUGHT: look\n\n```bash\npwd\n```")
    assert "/testbed" in fenced.observation
    bad = session.step("")
    assert bad.exit_code == -1 and bad.info["error"] == "parse"
    two = session.step("```bash\nls\n```\n```bash\npwd\n```")
    assert "found 2 actions" in two.observation
    unknown = session.step("<function=launch_rockets><parameter=x>1</parameter></function>")
    assert "Unknown tool" in unknown.observation
    assert session.step("echo ok").observation.endswith("ok\n</output>")


def test_finish_and_mini_swe_agent_submission_return_the_patch(session):
    session.step("echo new > added.txt")
    sub = session.step(
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
    )
    assert sub.done
    assert "+new" in sub.info["patch"]
    fin = session.step("<function=finish><parameter=command>submit</parameter></function>")
    assert fin.done and fin.observation == "<<< Finished >>>"
    assert "added.txt" in fin.info["patch"]


def test_get_patch_does_not_touch_the_agents_index(session):
    session.step("echo x >> README.md && echo y > new.py")
    before = run(session, "git status --porcelain").stdout
    patch = session.get_patch()
    assert "diff --git a/README.md b/README.md" in patch
    assert "diff --git a/new.py b/new.py" in patch
    assert run(session, "git status --porcelain").stdout == before


@pytest.mark.parametrize(
    "setup",
    [
        "git config --global color.ui always",
        "git config diff.noprefix true",
        "printf '#!/bin/sh\\necho FORGED\\n' > /tmp/x.sh && chmod +x /tmp/x.sh && "
        "git config diff.external /tmp/x.sh",
        "echo '*.py filter=f' > .gitattributes && git config filter.f.clean 'echo FORGED; cat'",
        "echo '*.py diff=t' > .gitattributes && git config diff.t.textconv 'echo FORGED; cat'",
        "git update-index --assume-unchanged README.md stockroom/textutil.py",
        "echo '*.py -diff' > .gitattributes",
    ],
)
def test_get_patch_is_the_real_diff_whatever_the_agent_configured(session, setup):
    """git settings of the agent's (repository or global configuration, attributes, index
    bits) used to shape the patch: colour codes, no a/ b/ prefixes, an external diff
    program's invented text, clean-filtered content, changes left out, `Binary files
    differ` for a text file."""
    assert run(session, setup).exit_code == 0
    session.step("echo '# change' >> stockroom/textutil.py && echo x >> README.md")
    patch = session.get_patch()
    assert "FORGED" not in patch and "\x1b" not in patch and "Binary files" not in patch
    assert "diff --git a/stockroom/textutil.py b/stockroom/textutil.py" in patch
    assert "diff --git a/README.md b/README.md" in patch
    assert "+# change\n" in patch and "+x\n" in patch


def test_read_file_of_a_fifo_raises_instead_of_blocking(session):
    """`read_file` opened a FIFO the agent made and blocked forever, holding the session's
    lock (so `destroy` and `close_all` hung too)."""
    assert run(session, "mkfifo /testbed/out.txt && echo text > /testbed/in.txt").exit_code == 0
    with pytest.raises(OSError):
        session.read_file("out.txt")
    assert session.read_file("/testbed/in.txt") == "text\n"


def test_folders_nested_past_the_recursion_limit_break_nothing_on_the_host(manager, toy_task):
    """Python's recursive `os.walk` and `shutil.rmtree` raised `RecursionError` on an agent's
    folders nested 1,200 deep: `changes()` and `disk_usage()` failed, and `destroy()` raised,
    leaving the session's state folder behind (and stopping `close_all` at that session)."""
    session = manager.open(toy_task)
    deep = 'perl -e \'for (1..1200) { mkdir "a" or die; chdir "a" or die } open F, ">x.py"\''
    assert run(session, deep, timeout=120).exit_code == 0
    written = session.workspace.changes().written
    assert len(written) == 1 and written[0].count("a/") == 1200
    assert session.workspace.disk_usage() > 0
    snap = session.snapshot()
    child = session.fork()
    session.step("rm -rf /testbed/a")
    session.restore(snap)
    assert run(session, "ls a/a/a").exit_code == 0
    for s in (child, session):
        state = s.state_dir
        s.destroy()
        assert not state.exists()


# ------------------------------------------------------------------ snapshot, fork, destroy


def test_snapshot_restore_and_fork(session):
    session.step("echo one > state.txt && cd stockroom")
    session.step("echo tmpfile > /tmp/t.txt")
    snap = session.snapshot()
    session.step("echo two > /testbed/state.txt && rm /tmp/t.txt && cd /testbed")
    child = session.fork()
    try:
        session.restore(snap)
        assert session.read_file("/testbed/state.txt") == "one\n"
        assert session.read_file("/tmp/t.txt") == "tmpfile\n"
        assert session.cwd == "/testbed/stockroom"
        assert child.read_file("/testbed/state.txt") == "two\n"
        child.step("echo three > /testbed/state.txt")
        assert session.read_file("/testbed/state.txt") == "one\n"
        child.restore(snap)  # a parent's snapshot restores into a fork
        assert child.read_file("/testbed/state.txt") == "one\n"
    finally:
        child.destroy()


def test_editor_history_is_per_session(session):
    path = "/testbed/stockroom/textutil.py"
    session.step(
        f"<function=file_editor><parameter=command>str_replace</parameter>"
        f"<parameter=path>{path}</parameter><parameter=old_str>import re\n"
        "</parameter><parameter=new_str>import re  # edited\n</parameter></function>"
    )
    child = session.fork()
    try:
        undo = child.step(
            f"<function=file_editor><parameter=command>undo_edit</parameter>"
            f"<parameter=path>{path}</parameter></function>"
        )
        assert "undone successfully" in undo.observation
        assert "# edited" not in child.read_file(path)
        assert "# edited" in session.read_file(path)
    finally:
        child.destroy()


def test_destroy_leaves_nothing(manager, toy_task):
    s = manager.open(toy_task)
    s.step("echo data > file.txt")
    state, ctl = s.state_dir, s.ctl_dir
    assert ctl.exists()
    fds_before = set(os.listdir("/proc/self/fd"))
    s.destroy()
    assert not state.exists()
    assert not ctl.exists() and not ctl.with_name(ctl.name + ".log").exists()
    assert set(os.listdir("/proc/self/fd")) <= fds_before
    with open("/proc/self/mountinfo") as fh:
        assert str(state) not in fh.read()
    with pytest.raises(SessionClosed):
        s.step("ls")
    s.destroy()  # idempotent
    assert s not in manager.sessions


def test_writes_never_reach_the_shared_base(manager, toy_task):
    a = manager.open(toy_task)
    b = manager.open(toy_task)
    try:
        a.step("echo 'a was here' >> README.md && sed -i 's/MIT/GPL/' README.md")
        a.write_file("/testbed/stockroom/money.py", "broken = True\n")
        assert "a was here" not in b.read_file("README.md")
        assert b.read_file("/testbed/stockroom/money.py") != "broken = True\n"
        assert "a was here" not in (a.base.path / "README.md").read_text()
        assert b.run("git status --porcelain").stdout == ""
    finally:
        a.destroy()
        b.destroy()


def test_many_sessions_from_many_threads_do_not_cross_talk(manager, toy_task):
    executor = echo_executor()
    sessions = [manager.open(toy_task, executor=executor) for _ in range(8)]
    errors: list[str] = []

    def work(i, s):
        try:
            for step in range(5):
                s.step(f"echo {i}-{step} > /testbed/mine.txt && cd /testbed/stockroom")
                editor = s.step(
                    f"<function=file_editor><parameter=command>create</parameter>"
                    f"<parameter=path>/testbed/e{step}.py</parameter>"
                    f"<parameter=file_text>owner = {i}\n</parameter></function>"
                )
                if "File created" not in editor.observation:
                    errors.append(editor.observation)
                got = s.run("cat /testbed/mine.txt").stdout
                if got != f"{i}-{step}\n":
                    errors.append(f"session {i} read {got!r}")
                body = json.loads(s.run(f"python check.py {i}").stdout)
                if body["argv"][-1] != str(i) or body["cwd"] != "/testbed/stockroom":
                    errors.append(f"session {i} executor saw {body}")
        except Exception as exc:  # surfaced below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        for i, s in enumerate(sessions):
            assert s.read_file("/testbed/e4.py") == f"owner = {i}"  # R2E strips values
    finally:
        for s in sessions:
            s.destroy()


def test_gc_removes_state_of_dead_processes(manager, tmp_path):
    from sweworld.sandbox.manager import gc_stale_sessions

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{dead.pid}-1-abcdef"
    (stale / "upper").mkdir(parents=True)
    (tmp_path / f"{dead.pid}-1-abcdef.log").write_text("x")
    mine = tmp_path / f"{os.getpid()}-9-abcdef"
    mine.mkdir()
    assert gc_stale_sessions(tmp_path) == [stale.name]
    assert not stale.exists() and mine.exists()
    assert not (tmp_path / f"{dead.pid}-1-abcdef.log").exists()


def test_overlong_command_is_refused_before_anything_runs(session):
    """Linux caps one argument at 128 KiB: a longer command is refused with a message that
    says what to do instead, and the session stays usable."""
    limit = session.config.limits.max_command_bytes
    command = "echo " + "x" * limit + " > /testbed/big.txt"
    out = session.run(command)
    assert out.exit_code == REFUSED_EXIT_CODE
    assert f"at most {limit} bytes" in out.stderr and "file_editor create" in out.stderr
    assert out.info["refused"] == "command_too_long"
    assert not (session.root / "big.txt").exists()
    assert session.run("echo " + "y" * (limit - 100)).exit_code == 0


def test_routes_count_the_repositorys_console_scripts(manager, tmp_path):
    from sweworld.tasks import Task

    repo = tmp_path / "tool"
    (repo / "tool").mkdir(parents=True)
    (repo / "tool" / "__init__.py").write_text("def main():\n    print('hi')\n")
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "tool"\nversion = "0"\n[project.scripts]\nrun-tool = "tool:main"\n'
    )
    task = Task(instance_id="t__tool-1", repo="t/tool", base_commit="", problem_statement="x")
    sess = manager.open(task, repo_path=repo)
    try:
        out = sess.run("run-tool --help; ls")
        assert {r["command"]: r["route"] for r in out.info["routes"]} == {
            "run-tool --help": "execution",
            "ls": "real",
        }
    finally:
        sess.destroy()


def test_sandbox_survives_the_exit_of_the_thread_that_started_it(session):
    # bwrap --die-with-parent fires when the *thread* that forked it exits: a sandbox started
    # from a short-lived thread must not die with it, taking a command in flight along.
    release = threading.Event()
    started: list[int] = []

    def first_user() -> None:
        started.append(session.run("true").exit_code)  # starts the sandbox server
        release.wait(10)

    owner = threading.Thread(target=first_user)
    owner.start()
    while not started:
        owner.join(0.01)
    results = []
    worker = threading.Thread(target=lambda: results.append(session.run("sleep 1; echo ok")))
    worker.start()
    release.set()  # the thread that started the sandbox exits while `sleep 1` runs
    owner.join(10)
    worker.join(30)
    assert started == [0]
    assert results[0].exit_code == 0, results[0]
    assert results[0].stdout == "ok\n"


def test_the_sandbox_takes_executor_objects_not_specs(manager, toy_task, tmp_path):
    """A spec string is for the world to build (issue 21); None is the no-op executor."""
    from sweworld.sandbox.executor import NoExecutor
    from sweworld.sandbox.manager import SessionManager

    with pytest.raises(TypeError, match=r"sweworld\.world\.executor_from_spec"):
        manager.open(toy_task, executor="local")
    with pytest.raises(TypeError, match=r"sweworld\.world\.executor_from_spec"):
        SessionManager(runtime_root=tmp_path / "runtime", executor="none")
    with pytest.raises(TypeError, match="Executor protocol"):
        manager.open(toy_task, executor=object())
    assert isinstance(manager.default_executor, NoExecutor)
    with manager.open(toy_task) as session:
        assert isinstance(session.executor, NoExecutor)


def test_kill_spawned_kills_without_reaping() -> None:
    """The forced stop's kills leave each killed sandbox a zombie until its owner waits, so
    its pid (and group id) cannot be another process's when the owner signals it."""
    from sweworld.sandbox import bwrap

    proc = bwrap.spawn(["sleep", "60"], start_new_session=True)
    helper = subprocess.Popen(["sleep", "60"])  # a child that spawn() did not start
    try:
        assert bwrap.kill_spawned() >= 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.02)
        else:
            raise AssertionError("the spawned process was not killed")
        assert proc.returncode is None  # not reaped by the kill: the owner's to reap
        assert helper.poll() is None
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        helper.kill()
        helper.wait()
