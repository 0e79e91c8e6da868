"""The pytest plugins a checkout's own pytest configuration needs, and the environment
build that installs them where no harness recipe says what to install."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sweworld.execution.envs import EnvBuilder
from sweworld.execution.test_plugins import config_plugin_packages, read_addopts

PARSE_SETUP_CFG = """\
[tool:pytest]
addopts = --cov=parse --cov-report=term-missing --cov-append --cov-branch
    --doctest-modules --doctest-glob=README.rst
"""


@pytest.mark.parametrize(
    ("files", "addopts", "packages"),
    [
        ({"setup.cfg": PARSE_SETUP_CFG}, 6, ("pytest-cov",)),
        (
            {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = ["-n", "4", "--timeout=9"]\n'},
            3,
            ("pytest-timeout", "pytest-xdist"),
        ),
        (
            {"tox.ini": "[pytest]\naddopts = -nauto --benchmark-skip -ra\n"},
            3,
            ("pytest-benchmark", "pytest-xdist"),
        ),
        # required_plugins as written (a pinned requirement wins over the bare name)
        (
            {"pytest.ini": "[pytest]\naddopts = --cov=x\nrequired_plugins = pytest-cov>=4 mock\n"},
            1,
            ("mock", "pytest-cov>=4"),
        ),
        # pytest stops at a pytest.ini even without a [pytest] section: setup.cfg unread
        ({"pytest.ini": "[other]\nx = 1\n", "setup.cfg": PARSE_SETUP_CFG}, 0, ()),
        # options of pytest itself need nothing
        (
            {"setup.cfg": "[tool:pytest]\naddopts = -ra --strict-markers -p no:cacheprovider\n"},
            4,
            (),
        ),
        # unreadable configurations: nothing
        ({"setup.cfg": "[tool:pytest\naddopts = --cov"}, 0, ()),
        ({"pyproject.toml": "[tool.pytest.ini_options\n"}, 0, ()),
        ({"tox.ini": "[pytest]\naddopts = --cov 'unclosed\n"}, 2, ("pytest-cov",)),
        ({}, 0, ()),
        # another type where a table is expected, nesting deeper than the parser goes
        ({"pyproject.toml": 'tool = "x"\n'}, 0, ()),
        ({"pyproject.toml": "[tool]\npytest = 3\n"}, 0, ()),
        ({"pyproject.toml": "a = " + "[" * 5000 + "]" * 5000 + "\n"}, 0, ()),
        # only plain requirements of index packages: no URL, path or option
        (
            {
                "pytest.ini": "[pytest]\nrequired_plugins = pytest-x@https://evil.example/x.tgz"
                " a/../d -e pytest-cov>=4,<6 pytest-mock[extra]==3.1\n"
            },
            0,
            ("pytest-cov>=4,<6", "pytest-mock[extra]==3.1"),
        ),
    ],
)
def test_packages_named_by_the_configuration(tmp_path, files, addopts, packages) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert len(read_addopts(tmp_path)) == addopts
    assert config_plugin_packages(tmp_path) == packages


def test_a_huge_configuration_is_not_read(tmp_path) -> None:
    (tmp_path / "setup.cfg").write_text(PARSE_SETUP_CFG + "#" * (2 << 20))
    assert config_plugin_packages(tmp_path) == ()


def test_the_environment_installs_them_only_without_a_harness_recipe(tmp_path) -> None:
    """A factory library (no harness recipe) gets its configuration's plugins; a SWE-bench
    task keeps the harness image's recipe as it is (its test command was made to run
    there)."""
    (tmp_path / "setup.cfg").write_text(PARSE_SETUP_CFG)
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='parse')\n")
    builder = EnvBuilder(tmp_path / "envs")
    library = builder.plan(SimpleNamespace(repo="pypi/parse", version=None), tmp_path)
    assert library.recipe.packages[0].startswith("pytest") and "pytest-cov" in (
        library.recipe.packages
    )
    swebench = builder.plan(SimpleNamespace(repo="psf/requests", version="2.0"), tmp_path)
    assert "pytest-cov" not in swebench.recipe.packages
    assert builder.plan(SimpleNamespace(repo="pypi/parse", version=None)).recipe.packages == (
        "pytest",
    )  # no checkout to read: nothing added


def test_sympys_environment_has_no_pytest_as_the_harness_image(tmp_path) -> None:
    """SymPy's harness image runs bin/test and has no pytest; sweworld's environment for a
    SymPy task installs none either (so a real `python -m pytest` there fails as in the
    image), while another harness repository keeps pytest, and a row's own recipe may
    install it."""
    from sweworld.tasks.environment import task_environment

    builder = EnvBuilder(tmp_path / "envs")
    sympy = SimpleNamespace(repo="sympy/sympy", version="1.12")
    assert task_environment(sympy).pytest_installed is False
    assert builder.plan(sympy).recipe.packages == ()
    requests = SimpleNamespace(repo="psf/requests", version="2.0")
    assert task_environment(requests).pytest_installed is True
    assert builder.plan(requests).recipe.packages[0].startswith("pytest")
    own = {"repo": "sympy/sympy", "version": "1.12", "install": ["pip install pytest"]}
    assert task_environment(own).pytest_installed is True
