"""The task environment description: task row, SWE-bench harness table, repository, default."""

from __future__ import annotations

import gzip
import json
import platform
from pathlib import Path

import pytest

from sweworld.tasks import Task
from sweworld.tasks.environment import HOST_PYTHON, TaskEnvironment, task_environment
from sweworld.tasks.repo_metadata import read_metadata
from sweworld.tasks.swebench_specs import harness_spec
from tests.conftest import shared_data_dir


def test_swebench_rows_get_the_harness_environment():
    env = task_environment(
        Task(instance_id="django__django-11099", repo="django/django", version="3.0")
    )
    assert env == TaskEnvironment(
        python="3.6",
        test_runner="django",
        runner_version=None,
        install=("python -m pip install -e .",),
        source="swebench-spec",
        test_command="./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    )
    assert env.python_known and not env.python_is_host
    assert not env.accepts_python(HOST_PYTHON) and env.accepts_python("3.6")
    sympy = task_environment({"repo": "sympy/sympy", "version": "1.1"})
    assert (sympy.python, sympy.test_runner) == ("3.9", "sympy")
    old_astropy = task_environment({"repo": "astropy/astropy", "version": "1.3"})
    assert (old_astropy.python, old_astropy.runner_version) == ("3.6", "3.3.1")
    assert task_environment({"repo": "astropy/astropy", "version": "5.3"}).python == "3.10"
    assert task_environment({"repo": "sphinx-doc/sphinx", "version": "7.2"}).test_runner == "pytest"


def test_an_unknown_version_keeps_the_runner_but_not_the_python():
    env = task_environment({"repo": "django/django", "version": "9.9"})
    assert env.python is None and not env.python_known
    assert env.test_runner == "django" and env.source == "swebench-spec"
    assert harness_spec("django/django", "9.9").matched is False
    # A repository whose every version uses one Python keeps it for an unknown version.
    sympy = task_environment({"repo": "sympy/sympy", "version": None})
    assert (sympy.python, sympy.python_known, sympy.runner_version) == ("3.9", True, None)
    assert harness_spec("nobody/nothing", "1.0") is None


def test_the_task_row_wins():
    row = {
        "repo": "django/django",
        "version": "3.0",
        "extra": {"environment": {"python": "3.8.10", "pytest_version": "7.1.2"}},
    }
    env = task_environment(row)
    assert (env.python, env.source, env.runner_version) == ("3.8", "task", "7.1.2")
    assert env.test_runner == "django"  # still the harness's command
    own = task_environment({"repo": "x/y", "test_cmd": "./tests/runtests.py --parallel 1"})
    assert own.test_runner == "django" and own.python is None and own.source == "task"
    install = task_environment({"repo": "x/y", "python": "3.12", "install": "pip install .\n"})
    assert install.install == ("pip install .",) and install.python == "3.12"
    assert install.python_full is None  # "3.12" says nothing of the micro version
    full = task_environment({"repo": "x/y", "python_version": "3.8.10"})
    assert (full.python, full.python_full) == ("3.8", "3.8.10")
    host = task_environment({"repo": "x/y", "environment": {"python": "host"}})
    assert host.python_is_host and host.python_full == platform.python_version()


def test_default_is_the_host_but_not_known():
    env = task_environment({"repo": "someone/project"})
    assert (env.python, env.source, env.test_runner) == (HOST_PYTHON, "default", "pytest")
    assert not env.python_known and not env.python_is_host
    assert env.accepts_python("2.7")  # nothing says otherwise


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_repository_metadata(tmp_path):
    repo = _write(
        tmp_path,
        {
            "setup.py": (
                "from setuptools import setup\n"
                "with open('requirements.txt') as f:\n"
                "    requirements = f.read().splitlines()\n"
                "scripts = {'console_scripts': ['toolx = pkg.cli:main']}\n"
                "setup(name='pkg', python_requires='>=3.8', install_requires=requirements,\n"
                "      entry_points=scripts)\n"
            ),
            "requirements.txt": "numpy\n",
            "pytest.ini": "[pytest]\n",
        },
    )
    meta = read_metadata(repo)
    assert meta.python_requires == ">=3.8"
    assert meta.requirements == () and meta.requirements_static is False
    assert meta.console_scripts == ("toolx",) and meta.scripts_static
    assert meta.test_runner == "pytest"
    env = task_environment({"repo": "someone/pkg"}, repo)
    assert (env.python, env.source, env.python_requires) == (None, "repository", ">=3.8")
    assert env.accepts_python("3.11") and not env.accepts_python("3.6")


def test_repository_metadata_static_sources(tmp_path):
    _write(
        tmp_path / "cfg",
        {
            "setup.cfg": (
                "[options]\npython_requires = >=3.7\ninstall_requires =\n    attrs>=20\n"
                "    click\n[options.entry_points]\nconsole_scripts =\n    mycli = m:main\n"
                "[tool:pytest]\naddopts = -q\n"
            ),
            "setup.py": "import setuptools\nsetuptools.setup()\n",
        },
    )
    meta = read_metadata(tmp_path / "cfg")
    assert meta.requirements == ("attrs>=20", "click") and meta.requirements_static
    assert meta.console_scripts == ("mycli",) and meta.test_runner == "pytest"
    _write(
        tmp_path / "pp",
        {
            "pyproject.toml": (
                '[project]\nname = "p"\nrequires-python = ">=3.9"\ndependencies = ["rich"]\n'
                '[project.scripts]\npp-run = "p.cli:main"\n'
            )
        },
    )
    meta = read_metadata(tmp_path / "pp")
    assert (meta.python_requires, meta.requirements, meta.console_scripts) == (
        ">=3.9",
        ("rich",),
        ("pp-run",),
    )
    _write(
        tmp_path / "dyn", {"pyproject.toml": '[project]\nname = "d"\ndynamic = ["dependencies"]\n'}
    )
    assert read_metadata(tmp_path / "dyn").requirements_static is False
    _write(tmp_path / "kw", {"setup.py": "from setuptools import setup\nsetup(**kwargs)\n"})
    assert read_metadata(tmp_path / "kw").requirements_static is False


def test_toy_repository(toy_tasks):
    repo = Path(__file__).resolve().parents[2] / "data" / "toy" / "repo"
    env = task_environment(toy_tasks[0], repo)
    # The project's own toy runs with the interpreter running sweworld, whatever it is.
    assert (env.source, env.python, env.test_runner) == ("local", HOST_PYTHON, "pytest")
    assert env.python_is_host and env.python_full == platform.python_version()
    assert env.python_requires == ">=3.10"  # its pyproject, kept beside
    other = task_environment({"repo": "someone/stockroom"}, repo)
    assert other.source == "repository" and other.python is None


@pytest.mark.shared_data
def test_every_lite_row_has_a_known_python():
    path = shared_data_dir() / "swebench_lite.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    with gzip.open(path, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    envs = {row["instance_id"]: task_environment(Task.from_row(row)) for row in rows}
    assert all(env.python_known for env in envs.values())
    assert envs["django__django-11099"].python == "3.6"
