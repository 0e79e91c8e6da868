"""Exact facts are exact for the task's environment, not for the host running sweworld.

Regression tests for issue 9 section 2: a Python 3.6 task must not get the host's
``python --version`` nor its syntax-error text; a setup.py whose dependencies are computed
must not make a declared dependency "certainly missing". What never paid on real steps
(``python --version``, interpreted programs, pytest's own outputs) is not answered at all.
"""

from __future__ import annotations

import gzip
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks import Task
from sweworld.transition.facts import compute_facts
from sweworld.transition.types import WorkspaceView
from tests.conftest import PROJECT, requires_sandbox, shared_data_dir

HOST_FULL = platform.python_version()
HOST_MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"
DJANGO_30 = {"instance_id": "django__django-11099", "repo": "django/django", "version": "3.0"}


def workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return root


def facts(tmp_path: Path, root: Path, argv: list[str], task=None, **kw):
    request = ExecutionRequest(argv=tuple(argv), task=task, workspace=root, base=root)
    view = WorkspaceView(root, tmp=tmp_path / "tmp", base=root)
    return compute_facts(request, view, **kw)


def test_a_python_36_task_never_gets_the_hosts_version(tmp_path):
    root = workspace(tmp_path, {"bad.py": "def f(:\n    pass\n", "ok.py": "print(1)\n"})
    task = Task.from_row(DJANGO_30)
    for flag in ("--version", "-V", "-VV"):
        got = facts(tmp_path, root, ["python", flag], task)
        assert got.exact is None, flag
        assert got.python_version == "3.6"  # the fact that holds, for the model
    bad = facts(tmp_path, root, ["python", "bad.py"], task)
    assert bad.exact is None
    assert bad.syntax_errors and bad.syntax_errors[0].line == 1
    assert bad.syntax_errors[0].certain is False  # the line holds, the text is 3.11's
    assert facts(tmp_path, root, ["python", "ok.py"], task).exact is None
    # A missing script: 3.6 prints the path as given, and that is what is answered.
    missing = facts(tmp_path, root, ["python", "nothere.py"], task)
    assert missing.exact is not None
    assert missing.exact.stderr == (
        "python: can't open file 'nothere.py': [Errno 2] No such file or directory\n"
    )


def test_the_version_is_a_fact_never_an_answer(tmp_path):
    root = workspace(tmp_path, {})
    unknown = facts(tmp_path, root, ["python", "--version"], {"repo": "someone/project"})
    assert unknown.exact is None and unknown.python_version is None
    minor_only = facts(tmp_path, root, ["python", "--version"], {"repo": "x/y", "python": "3.9"})
    assert minor_only.exact is None and minor_only.python_version == "3.9"
    host = facts(tmp_path, root, ["python", "-V"], {"repo": "x/y", "python": "host"})
    assert host.exact is None and host.python_version == HOST_FULL
    # The host's own syntax errors are exact in the host's environment.
    root = workspace(tmp_path, {"bad.py": "def f(:\n    pass\n"})
    own = facts(tmp_path, root, ["python", "bad.py"], {"repo": "x/y", "python": "host"})
    assert own.exact is not None and "SyntaxError" in own.exact.stderr


@pytest.mark.shared_data
def test_the_real_django_row_gets_no_host_answer(tmp_path):
    path = shared_data_dir() / "swebench_lite.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    with gzip.open(path, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    row = next(r for r in rows if r["instance_id"] == "django__django-11099")
    got = facts(tmp_path, workspace(tmp_path, {}), ["python", "--version"], Task.from_row(row))
    assert got.exact is None and got.python_version == "3.6"


SETUP_WITH_VARIABLE = """\
from setuptools import setup

def read_requirements():
    with open("deps/base.list") as handle:
        return handle.read().split()

requirements = read_requirements()
setup(name="pkg", install_requires=requirements)
"""
SETUP_LITERAL = 'from setuptools import setup\nsetup(name="pkg", install_requires=["attrs"])\n'
HOST_ROW = {"repo": "someone/pkg", "python": "host"}


def test_computed_dependencies_make_a_missing_import_uncertain(tmp_path):
    code = "import frobnicate\n"
    root = workspace(tmp_path, {"setup.py": SETUP_WITH_VARIABLE, "deps/base.list": "frobnicate\n"})
    got = facts(tmp_path, root, ["python", "-c", code], HOST_ROW)
    assert got.exact is None
    assert not [m for m in got.missing_imports if m.certain]
    got = facts(tmp_path, root, ["python", "-m", "frobnicate"], HOST_ROW)
    assert got.exact is None and not got.missing_imports
    # Statically declared: a module declared nowhere is certainly missing.
    literal = tmp_path / "literal"
    literal.mkdir()
    root = workspace(literal, {"setup.py": SETUP_LITERAL})
    got = facts(literal, root, ["python", "-c", code], HOST_ROW)
    assert got.exact is None  # the traceback is the model's to write
    (missing,) = got.missing_imports
    assert missing.certain and missing.error == "ModuleNotFoundError: No module named 'frobnicate'"
    assert not facts(literal, root, ["python", "-c", "import attrs\n"], HOST_ROW).missing_imports


def test_dependencies_bound_to_a_name_are_declared(tmp_path):
    # psf/requests' setup.py: requires = [...]; setup(install_requires=requires). The facts
    # answered "ModuleNotFoundError: No module named 'urllib3'" where the real run worked.
    setup = (
        "from setuptools import setup\nrequires = ['urllib3>=1.21.1,<3', 'idna>=2.5']\n"
        "setup(name='requests', install_requires=requires)\n"
    )
    root = workspace(tmp_path, {"setup.py": setup})
    for module in ("urllib3", "idna"):
        got = facts(tmp_path, root, ["python", "-c", f"import {module}\n"], HOST_ROW)
        assert got.exact is None and not got.missing_imports, module
    got = facts(tmp_path, root, ["python", "-c", "import frobnicate\n"], HOST_ROW)
    assert [m.module for m in got.missing_imports if m.certain] == ["frobnicate"]


def test_a_swebench_environment_installs_more_than_it_declares(tmp_path):
    root = workspace(tmp_path, {"setup.py": SETUP_LITERAL})
    row = {**DJANGO_30, "python": "host"}  # even with the host's Python
    got = facts(tmp_path, root, ["python", "-c", "import numpy\n"], row)
    assert got.exact is None and not [m for m in got.missing_imports if m.certain]


def test_pytest_is_missing_where_the_tasks_image_has_none(tmp_path):
    """SymPy's harness image has no pytest (its runner is bin/test): the facts say so, as
    the outcome world answers; another repository's image has it."""
    root = workspace(tmp_path, {"sympy/core/tests/test_a.py": "def test_a():\n    pass\n"})
    argv = ["python", "-m", "pytest", "sympy/core/tests/test_a.py"]
    sympy = {"repo": "sympy/sympy", "version": "1.12", "instance_id": "sympy__sympy-1"}
    got = facts(tmp_path, root, argv, sympy)
    assert [(m.module, m.error, m.certain) for m in got.missing_imports] == [
        ("pytest", "No module named pytest", True)
    ]
    requests = {"repo": "psf/requests", "version": "2.0", "instance_id": "psf__requests-1"}
    assert not facts(tmp_path, root, argv, requests).missing_imports


def test_pytests_outputs_are_facts_never_answers(tmp_path):
    root = workspace(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    argv = ["pytest", "tests/test_missing.py"]
    for row in ({"repo": "x/y", "python": "host", "pytest_version": "8.3.4"}, HOST_ROW):
        for extra in ([], ["-q"]):
            got = facts(tmp_path, root, [*argv, *extra], row)
            assert got.exact is None and got.missing_files[0].exit_code == 4


@requires_sandbox
def test_cli_simulate_on_a_python_36_row_asks_the_model(tmp_path):
    """Acceptance: ``sweworld simulate`` on a SWE-bench row whose environment is Python 3.6
    does not answer ``python --version`` "exactly" with the host's version."""
    source = workspace(tmp_path, {"django/__init__.py": "VERSION = (3, 0)\n"})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**DJANGO_30, "base_commit": "", "problem_statement": "x"}) + "\n")
    answers = tmp_path / "answers.jsonl"
    said = {"stdout": "Python 3.6.15\n", "stderr": "", "exit_code": 0}
    answers.write_text(json.dumps({"text": json.dumps(said)}) + "\n")
    argv = [
        *("simulate", "--file", str(tasks), "--id", DJANGO_30["instance_id"]),
        *("--repo-path", str(source), "--executor", "simulated"),
        *("--model", f"replay:{answers}", "--command", "python --version"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "sweworld", *argv],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["info"]["calls"][0]["info"]["source"] == "model"
    assert result["stdout"] == "Python 3.6.15\n" != f"Python {HOST_FULL}\n"
