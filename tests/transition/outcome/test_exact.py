"""The executor's exact answers (no model) on hand-built states."""

from __future__ import annotations

from sweworld.transition.outcome.exact import broken_import_answer
from sweworld.transition.outcome.features import step_features
from sweworld.transition.outcome.state import FileState

BASE = {
    "src/_pytest/__init__.py": "",
    "src/_pytest/config/__init__.py": (
        "from _pytest.compat import importlib_metadata\n"
        'essential_plugins = (\n    "mark",\n    "main",\n)\n'
        'default_plugins = essential_plugins + (\n    "python",\n    "skipping",\n)\n'
    ),
    "src/_pytest/compat.py": "importlib_metadata = None\n",
    "src/_pytest/skipping.py": "def evaluate():\n    return 1\n",
    "src/_pytest/pytester.py": "class Pytester:\n    pass\n",
    "src/pytest/__init__.py": "from _pytest import __init__\n",
    "repro.py": "import pytest\n\ndef test_x():\n    pass\n",
}
BROKEN_IF = "def evaluate():\n    if True:\n    return 1\n"


def _answer(now: dict[str, str], changed: list[str], argv: list[str]):
    state = FileState(now.get, BASE.get, changed)
    info: dict = {}
    step = step_features(argv, "/testbed", state, None, test_ids=["repro.py::test_x"])
    return broken_import_answer(step, state, "pytest", info), info


def test_pytest_cannot_start_when_its_own_changed_module_does_not_compile() -> None:
    """On pytest's repository the checkout is the runner: a start-up module of _pytest that
    does not compile stops every pytest command, whether or not the tests import it."""
    now = {**BASE, "src/_pytest/skipping.py": BROKEN_IF}
    for argv in (["pytest", "repro.py"], ["python", "-m", "pytest", "-rA", "repro.py"]):
        result, info = _answer(now, ["src/_pytest/skipping.py"], argv)
        assert result is not None and result.exit_code == 1 and result.stdout == ""
        assert result.stderr.startswith("Traceback (most recent call last):\n")
        assert 'File "/testbed/src/_pytest/skipping.py", line 3' in result.stderr
        last = result.stderr.rstrip().splitlines()[-1]
        assert last.startswith("IndentationError: expected an indented block")
        assert info["route"] == "exact" and info["exception"] == "IndentationError"


def test_modules_pytest_loads_on_request_or_that_compile_leave_the_run_to_the_model() -> None:
    broken_pytester = {**BASE, "src/_pytest/pytester.py": "class Pytester(:\n"}
    result, info = _answer(broken_pytester, ["src/_pytest/pytester.py"], ["pytest", "repro.py"])
    assert result is None and not info
    fine = {**BASE, "src/_pytest/skipping.py": "def evaluate():\n    return 2\n"}
    result, info = _answer(fine, ["src/_pytest/skipping.py"], ["pytest", "repro.py"])
    assert result is None and not info
    # a new module nothing imports at start-up, a module with a byte-order mark
    new = {**BASE, "src/_pytest/my_helper.py": "def f(:\n"}
    result, _ = _answer(new, ["src/_pytest/my_helper.py"], ["pytest", "repro.py"])
    assert result is None
    bom = {**BASE, "src/_pytest/skipping.py": "\ufeffdef evaluate():\n    return 1\n"}
    result, _ = _answer(bom, ["src/_pytest/skipping.py"], ["pytest", "repro.py"])
    assert result is None
    # a plugin the command blocks is not started (blocking the cache blocks stepwise)
    result, _ = _answer(
        {**BASE, "src/_pytest/skipping.py": BROKEN_IF},
        ["src/_pytest/skipping.py"],
        ["pytest", "-p", "no:skipping", "repro.py"],
    )
    assert result is None
    # a module the configuration package imports is started too
    compat = {**BASE, "src/_pytest/compat.py": "importlib_metadata = (\n"}
    result, info = _answer(compat, ["src/_pytest/compat.py"], ["pytest", "repro.py"])
    assert result is not None and result.exit_code == 1 and "compat.py" in info["reason"]
    # a file named like pytest's package elsewhere in another project is not the runner
    other = {**BASE, "lib/_pytest/skipping.py": BROKEN_IF}
    result, _ = _answer(other, ["lib/_pytest/skipping.py"], ["pytest", "repro.py"])
    assert result is None


def test_pytest_where_the_tasks_environment_has_none() -> None:
    """SymPy's harness image has no pytest: the recorded runs end with "No module named
    pytest" (exit 1) or "command not found" (exit 127); after the session installs
    packages, or in another repository's environment, the run is the model's."""
    from sweworld.sandbox.executor import ExecutionRequest
    from sweworld.transition.outcome.exact import runner_absent_answer

    sympy = {"repo": "sympy/sympy", "version": "1.12", "instance_id": "sympy__sympy-1"}

    def ask(argv, task=sympy, installed=False):
        info: dict = {}
        request = ExecutionRequest(argv=tuple(argv), cwd="/testbed", task=task)
        return runner_absent_answer(request, "pytest", installed, info), info

    module, info = ask(["python", "-m", "pytest", "sympy/core/tests/test_basic.py"])
    assert module is not None and module.exit_code == 1 and module.stdout == ""
    assert module.stderr == "/opt/miniconda3/envs/testbed/bin/python: No module named pytest\n"
    assert info["route"] == "exact" and info["tests"] == 0
    three, _ = ask(["python3", "-m", "pytest", "-x", "t.py"])
    assert three is not None and three.stderr.endswith("/python3: No module named pytest\n")
    script, _ = ask(["pytest", "sympy/core/tests/test_basic.py"])
    assert script is not None and script.exit_code == 127
    assert script.stderr == "bash: line 1: pytest: command not found\n"
    assert ask(["pytest", "t.py"], installed=True)[0] is None
    requests = {"repo": "psf/requests", "version": "2.0", "instance_id": "psf__requests-1"}
    assert ask(["python", "-m", "pytest", "t.py"], task=requests)[0] is None
    assert ask(["python", "-m", "pytest", "t.py"], task=None)[0] is None
    # no image has Python 2 (a recorded run: "bash: line 1: python2: command not found")
    for argv0 in ("python2", "python2.7"):
        absent, info = ask([argv0, "--version"], task=requests)
        assert absent is not None and absent.exit_code == 127 and info["route"] == "exact"
        assert absent.stderr == f"bash: line 1: {argv0}: command not found\n"
    assert ask(["python2", "x.py"], installed=True)[0] is None
    assert ask(["/opt/py2/bin/python2", "x.py"], task=requests)[0] is None


def test_listings_exit_as_real_pytest(tmp_path) -> None:
    """pytest's marker and fixture listings run no test: their exit code is real pytest's,
    a module that does not import included (only a missing target is an error, exit 4)."""
    import subprocess
    import sys

    from sweworld.sandbox.executor import ExecutionRequest
    from sweworld.transition.outcome.executor import OutcomeExecutor

    (tmp_path / "test_a.py").write_text("def test_x():\n    assert 0\n")
    (tmp_path / "test_b.py").write_text(
        "import surely_not_installed_mod\n\n\ndef test_y():\n    pass\n"
    )
    executor = OutcomeExecutor()
    for argv in (
        ["pytest", "--markers"],
        ["pytest", "--markers", "nothere.py"],
        ["pytest", "--fixtures", "test_b.py"],
        ["pytest", "--fixtures-per-test", "test_a.py"],
        ["pytest", "--fixtures", "nothere.py"],
    ):
        real = subprocess.run(
            [sys.executable, "-m", *argv, "-p", "no:cacheprovider"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        request = ExecutionRequest(
            argv=tuple(argv), cwd="/testbed", workspace=tmp_path, base=tmp_path
        )
        assert executor.execute(request).exit_code == real.returncode, argv
