"""LocalExecutor: real execution in the session's workspace, sandboxed, with a cached venv."""

from __future__ import annotations

import json

import pytest

from sweworld.execution.envs import EnvBuilder, EnvRecipe
from sweworld.execution.local import LocalExecutor
from tests.conftest import requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def local():
    executor = LocalExecutor(timeout=60)
    yield executor
    executor.close()


@pytest.fixture
def real(manager, toy_task, local):
    with manager.open(toy_task, executor=local) as session:
        yield session


def test_environment_is_built_once_and_cached(local, manager, toy_task):
    base = manager.checkout(toy_task).path
    env = local.environment(toy_task, base)
    assert env.ok, env.log_tail()
    again = local.environment(toy_task, base)
    assert again.key == env.key and again.build_s == env.build_s  # loaded, not rebuilt
    assert (env.venv / "bin" / "python").exists()
    assert "Successfully installed" in env.log


def test_pytest_runs_for_real_and_sees_the_agents_edits(real):
    out = real.run("python -m pytest -rA -p no:cacheprovider tests/test_textutil.py")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert "9 passed" in out.stdout
    call = out.info["execution_calls"][0]
    assert call["executor"] == "local" and call["info"]["status"] == "ok"
    real.write_file(
        "/testbed/stockroom/textutil.py",
        real.read_file("/testbed/stockroom/textutil.py").replace(
            'return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())', 'return "edited"'
        ),
    )
    edited = real.run("python -c 'from stockroom.textutil import slugify; print(slugify(\"A\"))'")
    assert edited.stdout == "edited\n"
    failing = real.run("python -m pytest -q -p no:cacheprovider tests/test_textutil.py")
    assert failing.exit_code == 1
    assert "failed" in failing.stdout


def test_arguments_cwd_env_stdin_and_exit_codes(real):
    script = "import os, sys; print(os.getcwd(), os.environ.get('FOO'), sys.argv[1:])"
    out = real.run(f"cd stockroom && FOO=bar python -c \"{script}\" a 'b c'")
    assert out.stdout == "/testbed/stockroom bar ['a', 'b c']\n"
    piped = real.run("printf 'x\\ny\\n' | python -c 'import sys; print(sys.stdin.read().split())'")
    assert piped.stdout == "['x', 'y']\n"
    heredoc = real.run("python - <<'EOF'\nprint(6 * 7)\nEOF")
    assert heredoc.stdout == "42\n"
    assert real.run("python -c 'raise SystemExit(3)'").exit_code == 3
    tb = real.run("python -c 'import nope_not_here'")
    assert tb.exit_code == 1 and "ModuleNotFoundError: No module named 'nope_not_here'" in tb.stderr
    real.run("echo 'print(\"from tmp\")' > /tmp/reproduce.py")
    assert real.run("python /tmp/reproduce.py").stdout == "from tmp\n"


def test_no_network_and_nothing_outside_the_workspace(real):
    net = real.run("python -c \"import socket; socket.create_connection(('1.1.1.1', 80), 3)\"")
    assert net.exit_code != 0 and "Error" in net.stderr
    ro = real.run("python -c \"open('/usr/x', 'w')\"")
    assert ro.exit_code != 0 and "Read-only file system" in ro.stderr
    pip = real.run("pip install requests")
    assert pip.exit_code != 0  # the environment is read-only and offline at run time


def test_a_program_cannot_make_the_host_write_its_stdin_to_a_host_file(real, tmp_path):
    """The program runs for real with the control folder writable: a `stdin` symlink it left
    there to a host file made the host write the next command's stdin (agent text) into
    that host file."""
    target = tmp_path / "host-file"
    plant = f"import os; os.symlink({str(target)!r}, '/.sweworld/ctl/stdin'); print('planted')"
    assert real.run(f'python -c "{plant}"').stdout == "planted\n"
    out = real.run("echo payload | python -c 'import sys; print(sys.stdin.read().upper())'")
    assert out.stdout == "PAYLOAD\n\n", out.stderr
    assert not target.exists()


def test_timeout_and_output_flood(manager, toy_task):
    executor = LocalExecutor(timeout=2)
    try:
        with manager.open(toy_task, executor=executor) as s:
            out = s.run("python -c 'import time; time.sleep(30)'; echo rc=$?")
            assert "did not finish within 2 s" in out.stderr
            assert out.stdout.endswith("rc=124\n")
            assert out.info["execution_calls"][0]["info"]["status"] == "timeout"
            assert s.run("python -c 'print(1)'").stdout == "1\n"
    finally:
        executor.close()
    flood = LocalExecutor(timeout=30)
    flood.limits = flood.limits.__class__(timeout=30, max_output_bytes=10_000)
    try:
        with manager.open(toy_task, executor=flood) as s:
            out = s.run("python -c 'print(\"x\" * 100000)'")
            assert "printed more than 10000 bytes" in out.stderr
            assert out.info["execution_calls"][0]["info"]["status"] == "output_truncated"
    finally:
        flood.close()


def test_a_failed_build_is_reported_as_such(manager, toy_task, tmp_path):
    builder = EnvBuilder(tmp_path / "envs", default=EnvRecipe(install=("echo compiling; exit 3",)))
    executor = LocalExecutor(builder=builder)
    try:
        with manager.open(toy_task, executor=executor) as s:
            out = s.run("python -m pytest tests")
            assert out.exit_code == 1
            assert "could not be built" in out.stderr and "compiling" in out.stderr
            info = out.info["execution_calls"][0]["info"]
            assert info["status"] == "env_failed" and info["executed"] is False
    finally:
        executor.close()


def test_recipes_from_a_file(tmp_path, toy_task):
    recipes = tmp_path / "recipes.json"
    recipes.write_text(
        json.dumps(
            {
                "sweworld/stockroom": {"packages": ["pytest"], "install": ["pip install -e ."]},
                "sweworld/stockroom@0.1": {"install": ["pip install -e .[test]"]},
            }
        )
    )
    builder = EnvBuilder.from_file(recipes, root=tmp_path / "envs")
    assert builder.recipe_for(toy_task).install == ("pip install -e .[test]",)
    with pytest.raises(ValueError, match="unknown recipe keys"):
        EnvRecipe.from_mapping({"instal": []})


def test_more_concurrent_sessions_than_warm_sandboxes(manager, toy_task):
    # With more sessions running commands at once than `max_warm`, evicting a sandbox that
    # is running a command left its reader waiting for the whole timeout.
    import threading
    import time

    executor = LocalExecutor(timeout=60, max_warm=2)
    sessions = [manager.open(toy_task, executor=executor) for _ in range(6)]
    results: dict[int, object] = {}

    def work(i: int) -> None:
        code = f"import time; time.sleep(0.5); print({i})"
        results[i] = sessions[i].run(f"python -c '{code}'")

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        elapsed = time.monotonic() - started
        for i in range(6):
            assert results[i].exit_code == 0, results[i]
            assert results[i].stdout == f"{i}\n"
        assert elapsed < 45, f"took {elapsed:.0f} s: a command waited for its timeout"
    finally:
        for s in sessions:
            s.destroy()
        executor.close()


def test_what_the_build_makes_in_testbed_is_under_every_session(manager, toy_task, tmp_path):
    # A SWE-bench image keeps what the install writes in /testbed (egg-info, pytest's
    # setuptools_scm _version.py): without it pytest-dev/pytest did not even import.
    made = (
        "mkdir -p build stockroom/__pycache__",
        "echo made > build/marker.txt",  # ignored by .gitignore: a product
        "echo stale > stockroom/__pycache__/junk.pyc",  # bytecode: never laid in
        "echo edited >> README.md",  # a tracked file: the base's version stays
        "echo new > not_ignored.txt",  # not ignored: would reach the patch, not laid in
    )
    builder = EnvBuilder(tmp_path / "envs", default=EnvRecipe(packages=(), install=made))
    executor = LocalExecutor(builder=builder, timeout=60)
    plain = manager.checkout(toy_task)
    try:
        with manager.open(toy_task, executor=executor) as s:
            assert s.base.path != plain.path and s.base.head == plain.head
            assert s.read_file("/testbed/build/marker.txt") == "made\n"
            assert s.read_file("/testbed/README.md") == (plain.path / "README.md").read_text()
            listing = s.run("ls -a /testbed stockroom").stdout
            assert "not_ignored.txt" not in listing and "__pycache__" not in listing
            out = s.run("python -c \"print(open('build/marker.txt').read().strip())\"")
            assert out.stdout == "made\n", out
            assert s.get_patch() == ""  # products are ignored files: never in the patch
            s.write_file("/testbed/stockroom/new_module.py", "X = 1\n")
            assert "new_module.py" in s.get_patch() and "marker" not in s.get_patch()
            first = s.base.path
        with manager.open(toy_task, executor=executor) as again:
            assert again.base.path == first  # laid in once, shared
        assert not (plain.path / "build").exists()  # the shared base is never written
    finally:
        executor.close()


def test_a_session_opens_on_the_plain_base_when_the_build_fails(manager, toy_task, tmp_path):
    builder = EnvBuilder(tmp_path / "envs", default=EnvRecipe(packages=(), install=("exit 3",)))
    executor = LocalExecutor(builder=builder)
    try:
        with manager.open(toy_task, executor=executor) as s:
            assert s.base.path == manager.checkout(toy_task).path
    finally:
        executor.close()
