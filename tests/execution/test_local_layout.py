"""Real execution on any host layout, with no host secret, the task's Python, and honest
failures: a venv and HOME under /tmp (which a session's own /tmp hides), an interpreter
relocated under /tmp, an environment that does not start (a clear exec_failed, never exit
127), rebuilds, and retries of transient build failures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from sweworld.execution.envbuild import may_be_transient
from sweworld.execution.envs import EnvBuilder, EnvRecipe
from sweworld.execution.interpreters import PYTHON_MOUNT, find_interpreter, host_interpreter
from sweworld.execution.local import LocalExecutor
from sweworld.reward.real import real_reward
from tests.conftest import PROJECT, requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]

SECRET = "s3cr3t-local-executor"
CLI = (sys.executable, "-m", "sweworld.cli")
DEMO = "data/toy/demo_actions.jsonl"
# A bare environment: a venv and a record of the build's environment, nothing installed.
BARE = EnvRecipe(packages=(), install=('env > "$VIRTUAL_ENV/build-env.txt"',))


@pytest.fixture(scope="module")
def tmp_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    assert str(home).startswith("/tmp/")  # the layout that broke: everything under /tmp
    return home


@pytest.fixture(scope="module")
def bare(tmp_home):
    executor = LocalExecutor(builder=EnvBuilder(tmp_home / ".cache" / "envs", default=BARE))
    yield executor
    executor.close()


def with_python(task, version: str):
    return task.model_copy(update={"extra": {**task.extra, "python": version}})


def test_acceptance_home_under_tmp_runs_for_real(tmp_home):
    """`HOME=$(mktemp -d) sweworld run ... --executor local` runs python and pytest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SWEWORLD_"))}
    env["HOME"] = str(tmp_home)
    env["SWEWORLD_TEST_SECRET"] = SECRET
    out = subprocess.run(
        [*CLI, "run", "--id", "sweworld__stockroom-1", "--actions", DEMO, "--executor", "local"],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    steps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    observations = "\n".join(s.get("observation", "") for s in steps)
    assert "not found" not in observations and "<returncode>127" not in observations
    assert "9 passed" in observations  # the test run after the fix, for real
    (status,) = (tmp_home / ".cache" / "sweworld" / "envs").glob("*/status.json")
    built = status.stat().st_mtime_ns

    actions = tmp_home / "one.jsonl"
    actions.write_text("\"python -c 'print(6 * 7)'\"\n")
    one = [*CLI, "run", "--id", "sweworld__stockroom-1", "--actions", str(actions)]
    again = subprocess.run([*one, "--executor", "local"], **run_kw(env))
    assert "42" in again.stdout and status.stat().st_mtime_ns == built  # cached
    rebuilt = subprocess.run([*one, "--executor", "local", "--rebuild-env"], **run_kw(env))
    assert "42" in rebuilt.stdout and status.stat().st_mtime_ns > built  # --rebuild-env


def run_kw(env: dict) -> dict:
    return {"capture_output": True, "text": True, "cwd": PROJECT, "env": env, "timeout": 600}


def test_no_host_variable_reaches_a_run_or_a_build(bare, manager, toy_task, monkeypatch):
    monkeypatch.setenv("SWEWORLD_TEST_SECRET", SECRET)
    monkeypatch.setenv("PIP_SWEWORLD_PROBE", "passed-to-builds")
    env = bare.environment(toy_task, manager.checkout(toy_task).path, rebuild=True)
    assert env.ok, env.log_tail()
    assert str(env.venv).startswith("/tmp/")
    built = (env.venv / "build-env.txt").read_text()
    assert "PIP_SWEWORLD_PROBE=passed-to-builds" in built and SECRET not in built
    with manager.open(toy_task, executor=bare) as s:
        for command in (
            "python -c 'import os; print(dict(os.environ))'",
            'python -c \'import subprocess; print(subprocess.run(["env"], '
            "capture_output=True, text=True).stdout)'",
            "python -c 'print(open(\"/proc/1/environ\").read())'",
            "env",
        ):
            out = s.run(command)
            assert out.exit_code == 0, (command, out.stderr)
            assert "PATH" in out.stdout and SECRET not in out.stdout, command
            assert "SWEWORLD_TEST_SECRET" not in out.stdout, command


def test_a_missing_program_is_exec_failed_not_a_result(bare, manager, toy_task, caplog):
    with manager.open(toy_task, executor=bare) as s:
        with caplog.at_level("WARNING", logger="sweworld.execution.local"):
            out = s.run("pytest -q tests")  # the bare environment has no pytest
        info = out.info["execution_calls"][0]["info"]
        assert out.exit_code == 127
        assert info["status"] == "exec_failed" and info["executed"] is False
        assert any("could not be started" in r.getMessage() for r in caplog.records)
        assert s.run("python -c 'print(40 + 2)'").stdout == "42\n"  # still usable


def test_an_environment_that_does_not_start_fails_clearly(manager, toy_task, tmp_path):
    executor = LocalExecutor(builder=EnvBuilder(tmp_path / "envs", default=BARE))
    try:
        env = executor.environment(toy_task, manager.checkout(toy_task).path)
        assert env.ok, env.log_tail()
        python = env.venv / "bin" / "python"
        python.unlink()
        python.symlink_to("/nonexistent/python3")  # a layout the sandbox cannot show
        with manager.open(toy_task, executor=executor) as s:
            out = s.run("python -m pytest tests")
            assert out.exit_code != 127
            assert "does not start in the execution sandbox" in out.stderr
            assert out.info["execution_calls"][0]["info"]["status"] == "exec_failed"
        graded = real_reward(toy_task, toy_task.patch, manager=manager, executor=executor)
        assert graded.status == "exec_failed" and graded.resolved is False
        entry = graded.report[toy_task.instance_id]
        assert entry["sweworld_status"] == "exec_failed" and "tests_status" not in entry
        assert "does not start" in graded.info["reason"]
        # --rebuild-env repairs it
        rebuilt = LocalExecutor(
            builder=EnvBuilder(tmp_path / "envs", default=BARE), rebuild_env=True
        )
        with manager.open(toy_task, executor=rebuilt) as s:
            assert s.run("python -c 'print(1)'").stdout == "1\n"
        rebuilt.close()
    finally:
        executor.close()


def test_an_interpreter_under_tmp_is_shown_at_a_fixed_path(manager, toy_task, tmp_path):
    host = host_interpreter()
    copy = tmp_path / "py"
    subprocess.run(["cp", "-al", host.prefix, str(copy)], check=True)  # hard links: fast
    python = copy / os.path.relpath(host.path, host.prefix)
    recipe = dataclasses.replace(BARE, python=str(python))
    executor = LocalExecutor(builder=EnvBuilder(tmp_path / "envs", default=recipe))
    try:
        env = executor.environment(toy_task, manager.checkout(toy_task).path)
        assert env.ok, env.log_tail()
        assert env.python.prefix == str(copy) and env.python.prefix_inside == PYTHON_MOUNT
        with manager.open(toy_task, executor=executor) as s:
            out = s.run("python -c 'import sys; print(sys.base_prefix)'")
            assert out.exit_code == 0, out.stderr
            assert out.stdout.strip() == PYTHON_MOUNT
    finally:
        executor.close()


def test_the_tasks_python_is_used_when_the_machine_has_it(manager, toy_task, tmp_path):
    executor = LocalExecutor(builder=EnvBuilder(tmp_path / "envs", default=BARE))
    try:
        for version in ("3.6", "3.99"):
            task = with_python(toy_task, version)
            have = find_interpreter(version)
            with manager.open(task, executor=executor) as s:
                out = s.run("python --version")
                info = out.info["execution_calls"][0]["info"]
                assert info["python_requested"] == version
                if have is not None:
                    assert out.stdout.startswith(f"Python {version}.") or out.stderr.startswith(
                        f"Python {version}."
                    )
                    assert info["python_used"] == version and info["python_exact"] is True
                else:
                    assert info["python_used"] == host_interpreter().version
                    assert info["python_exact"] is False
    finally:
        executor.close()


def flaky_recipe(succeed_on: int) -> EnvRecipe:
    """Fails like a network error until its ``succeed_on``-th run (0: always fails for
    good, with no network error). The count lives in the pip cache, the one folder every
    build may write that outlives it."""
    count = '"$PIP_CACHE_DIR/attempts"'
    if succeed_on == 0:
        fail = '{ echo "error: this package cannot be built"; exit 1; }'
        return EnvRecipe(packages=(), install=(f"echo x >> {count}", fail))
    check = (
        f'[ "$(wc -l < {count})" -ge {succeed_on} ] || '
        '{ echo "NewConnectionError: Temporary failure in name resolution"; exit 1; }'
    )
    return EnvRecipe(packages=(), install=(f"echo x >> {count}", check))


def test_transient_build_failures_are_retried_a_bounded_number_of_times(
    manager, toy_task, tmp_path, monkeypatch
):
    monkeypatch.setenv("SWEWORLD_CACHE", str(tmp_path / "cache"))
    counter = tmp_path / "cache" / "pip" / "attempts"
    base = manager.checkout(toy_task).path

    env = EnvBuilder(tmp_path / "a", default=flaky_recipe(2), retry_delay=0.01).ensure(
        toy_task, base
    )
    assert env.ok and env.attempts == 2, env.log_tail()

    counter.unlink()
    env = EnvBuilder(tmp_path / "b", default=flaky_recipe(9), retry_delay=0.01).ensure(
        toy_task, base
    )
    assert not env.ok and env.transient and env.attempts == 3  # bounded: 3 tries
    assert counter.read_text().count("x") == 3
    # a cached transient failure is tried again by the next builder (once), then succeeds
    counter.write_text("x\n" * 8)
    env = EnvBuilder(tmp_path / "b", default=flaky_recipe(9), retry_delay=0.01).ensure(
        toy_task, base
    )
    assert env.ok, env.log_tail()

    counter.unlink()
    env = EnvBuilder(tmp_path / "c", default=flaky_recipe(0), retry_delay=0.01).ensure(
        toy_task, base
    )
    assert not env.ok and not env.transient and env.attempts == 1  # not retried
    again = EnvBuilder(tmp_path / "c", default=flaky_recipe(0)).ensure(toy_task, base)
    assert not again.ok and counter.read_text().count("x") == 1  # cached, not rebuilt
    EnvBuilder(tmp_path / "c", default=flaky_recipe(0), rebuild=True).ensure(toy_task, base)
    assert counter.read_text().count("x") == 2  # rebuild=True builds again

    assert may_be_transient("pip: ReadTimeoutError: Read timed out.")
    assert not may_be_transient("ERROR: No matching distribution found for nothing-such")


def test_a_rebuild_does_not_pull_the_environment_from_under_a_live_session(
    manager, toy_task, tmp_path
):
    executor = LocalExecutor(builder=EnvBuilder(tmp_path / "envs", default=BARE))
    try:
        with manager.open(toy_task, executor=executor) as s:
            assert s.run("python -c 'print(1)'").stdout == "1\n"  # its sandbox is warm
            base = manager.checkout(toy_task).path
            for _ in range(2):  # another process rebuilds, twice
                rebuilt = EnvBuilder(tmp_path / "envs", default=BARE, rebuild=True).ensure(
                    toy_task, base
                )
                assert rebuilt.ok
            assert len(list(rebuilt.venv.parent.iterdir())) == 2  # this build and the last
        with manager.open(toy_task, executor=executor) as s:
            assert s.run("python -c 'print(2)'").stdout == "2\n"
        fresh = LocalExecutor(builder=EnvBuilder(tmp_path / "envs", default=BARE))
        with manager.open(toy_task, executor=fresh) as s:
            out = s.run("python -c 'import sys; print(sys.prefix)'")
            assert out.stdout == "/opt/sweworld/venv\n"
        fresh.close()
    finally:
        executor.close()
