"""Test directives and commands: SWE-bench's get_test_directives and per-repo test_cmd."""

from __future__ import annotations

import gzip
import json

import pytest

from sweworld.execution.grading import PARSERS
from sweworld.execution.testspec import (
    NON_TEST_EXTS,
    SWEBENCH_TEST_COMMANDS,
    TestSpec,
    test_directives,
    test_spec,
)
from sweworld.tasks import Task
from sweworld.tasks.swebench_specs import SWEBENCH_SPECS, harness_spec
from tests.conftest import shared_data_dir

DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"


def harness_test_command(repo: str, version: str | None) -> str | None:
    spec = harness_spec(repo, version)
    return spec.test_command if spec is not None else None


def diff(*paths: str) -> str:
    return "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x\n+y\n" for p in paths
    )


def task(repo: str, *paths: str, version: str | None = None) -> Task:
    return Task(instance_id="o__r-1", repo=repo, test_patch=diff(*paths), version=version)


def test_directives_filter_non_test_files():
    t = task(
        "pallets/flask",
        "tests/test_config.py",
        "tests/static/config.toml",
        "tests/data.json",
        "tests/table.csv",
        "tests/fixtures/conftest.py",
        "README.md",
    )
    assert test_directives(t) == ["tests/test_config.py", "tests/fixtures/conftest.py"]
    assert ".toml" in NON_TEST_EXTS and "csv" in NON_TEST_EXTS


def test_django_directives_are_module_labels():
    t = task(
        "django/django",
        "tests/auth_tests/test_validators.py",
        "tests/auth_tests/models/__init__.py",
        "tests/ordering/models.py",
        "tests/asgi/project/static/file.txt",
        "django/test/utils.py",
    )
    # Every file becomes a label (harness 4.x), models.py and __init__.py included.
    assert test_directives(t) == [
        "auth_tests.test_validators",
        "auth_tests.models.__init__",
        "ordering.models",
        "django.test.utils",
    ]


def test_swebench_commands_by_version():
    assert harness_test_command("django/django", "3.0") == DJANGO
    assert harness_test_command("django/django", "1.9") == "./tests/runtests.py --verbosity 2"
    assert harness_test_command("sympy/sympy", "1.1") == SYMPY
    assert harness_test_command("mwaskom/seaborn", "0.12") == "pytest --no-header -rA"
    assert harness_test_command("sphinx-doc/sphinx", "7.2") == "tox --current-env -epy39 -v --"
    old_astropy = "pytest -rA -vv -o console_output_style=classic --tb=no"
    assert harness_test_command("astropy/astropy", "1.3") == old_astropy
    assert harness_test_command("astropy/astropy", "5.1") == "pytest -rA"
    assert harness_test_command("astropy/astropy", "5.3") == "pytest -rA"  # harness: "v5.3"
    for repo in ("psf/requests", "pytest-dev/pytest", "scikit-learn/scikit-learn"):
        assert harness_test_command(repo, None) == "pytest -rA"
    assert harness_test_command("sweworld/stockroom", "1.0") is None
    assert "sweworld/stockroom" not in SWEBENCH_SPECS


def test_unknown_version_gets_the_latest_command():
    # Django 1.9 is the only version with its own command; an unknown version is "latest".
    assert harness_test_command("django/django", "9.9") == DJANGO
    assert harness_test_command("astropy/astropy", "0.0") == "pytest -rA"
    assert test_spec(task("django/django", "tests/a/tests.py")).command == f"{DJANGO} a.tests"
    for repo, commands in SWEBENCH_TEST_COMMANDS.items():
        assert commands, repo
        assert harness_test_command(repo, "no-such-version")


def test_the_command_comes_from_the_task_environment():
    # A row that states its own test command (an R2E-Gym / SWE-Gym style row) is run with it,
    # the same description the facts and the executor read.
    row = {
        "instance_id": "o__r-3",
        "repo": "someone/project",
        "test_patch": diff("tests/test_a.py"),
        "test_cmd": "pytest -rA -x",
    }
    assert test_spec(Task.from_row(row)).command == "pytest -rA -x tests/test_a.py"
    assert test_spec(row).command == "pytest -rA -x tests/test_a.py"


def test_test_spec_for_a_swebench_task():
    spec = test_spec(task("django/django", "tests/auth_tests/test_validators.py", version="3.0"))
    assert spec == TestSpec(
        command=f"{DJANGO} auth_tests.test_validators",
        directives=["auth_tests.test_validators"],
        parser="django",
        test_files=["tests/auth_tests/test_validators.py"],
    )
    spec = test_spec(task("psf/requests", "test_requests.py", version="2.4"))
    assert (spec.command, spec.parser) == ("pytest -rA test_requests.py", "pytest_options")
    assert spec.parser in PARSERS


def test_other_repositories_run_pytest():
    t = task("someone/project", "tests/test_a.py", "tests/data/x.json", "tests/test b.py")
    spec = test_spec(t, python="/venv/bin/python")
    assert spec.command == (
        "/venv/bin/python -m pytest -rA -p no:cacheprovider tests/test_a.py 'tests/test b.py'"
    )
    assert spec.directives == ["tests/test_a.py", "tests/test b.py"]
    assert spec.test_files == ["tests/test_a.py", "tests/data/x.json", "tests/test b.py"]
    assert spec.parser == "pytest"
    empty = test_spec(Task(instance_id="o__r-2", repo="someone/project"))
    assert empty.command == "python -m pytest -rA -p no:cacheprovider"
    assert empty.directives == [] and empty.test_files == []


def test_toy_tasks(toy_tasks):
    assert toy_tasks
    for t in toy_tasks:
        spec = test_spec(t)
        files = t.test_files()
        assert files and all(f.startswith("tests/") for f in files)
        assert spec.command == "python -m pytest -rA -p no:cacheprovider " + " ".join(files)
        assert spec.directives == files == spec.test_files
        assert spec.parser == "pytest"


@pytest.fixture(scope="module")
def lite_rows() -> dict[str, Task]:
    path = shared_data_dir() / "swebench_lite.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    with gzip.open(path, "rt") as handle:
        tasks = [Task.from_row(json.loads(line)) for line in handle if line.strip()]
    assert len(tasks) == 290
    return {t.instance_id: t for t in tasks}


@pytest.mark.shared_data
def test_every_lite_row_gets_a_command(lite_rows):
    for t in lite_rows.values():
        spec = test_spec(t)
        assert t.repo.lower() in SWEBENCH_SPECS, t.instance_id
        assert spec.command.strip() and spec.directives, t.instance_id
        assert spec.command.endswith(" ".join(spec.directives))
        assert spec.parser in PARSERS
        if t.repo == "django/django":
            assert spec.command.startswith(DJANGO + " ")
            for label in spec.directives:
                assert "/" not in label and not label.endswith(".py"), (t.instance_id, label)
                assert not label.startswith("tests."), (t.instance_id, label)
        else:
            assert spec.directives == [
                f for f in spec.test_files if not f.endswith(NON_TEST_EXTS)
            ], t.instance_id


@pytest.mark.shared_data
def test_lite_commands_match_the_harness(lite_rows):
    # What the harness's eval script runs for these rows (test_cmd + directives).
    expected = {
        "django__django-11099": f"{DJANGO} auth_tests.test_validators",
        "django__django-12915": f"{DJANGO} asgi.tests staticfiles_tests.test_handlers",
        "django__django-13033": f"{DJANGO} ordering.models ordering.tests",
        "sympy__sympy-20590": f"{SYMPY} sympy/core/tests/test_basic.py",
        "sympy__sympy-14774": f"{SYMPY} sympy/printing/tests/test_latex.py",
        "pallets__flask-4992": "pytest -rA tests/test_config.py",
        "mwaskom__seaborn-3010": "pytest --no-header -rA tests/_stats/test_regression.py",
        "psf__requests-2317": "pytest -rA test_requests.py",
        "scikit-learn__scikit-learn-13142": (
            "pytest -rA sklearn/mixture/tests/test_bayesian_mixture.py"
            " sklearn/mixture/tests/test_gaussian_mixture.py"
        ),
    }
    for instance_id, command in expected.items():
        assert test_spec(lite_rows[instance_id]).command == command, instance_id
    assert test_spec(lite_rows["sympy__sympy-20590"]).parser == "sympy"
    assert test_spec(lite_rows["scikit-learn__scikit-learn-13142"]).parser == "pytest_v2"
