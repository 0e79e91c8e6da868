"""Fixtures pytest cannot resolve: decided from the AST where every source is known, left
undecided where anything is dynamic, and carried through the outcome executor's run."""

from __future__ import annotations

import time

import pytest

from sweworld.transition.outcome import fixtures
from sweworld.transition.outcome.fixtures import SetupError, environment_plugins, setup_errors

NONE: frozenset[str] = frozenset()


def reader(files: dict[str, str]):
    return files.get


def errors(files: dict[str, str], ids: list[str], plugins=NONE, argv=()) -> dict:
    return {t: e.message for t, e in setup_errors(reader(files), ids, plugins, argv=argv).items()}


def test_recursive_override_without_an_outer_definition_errors():
    files = {
        "tests/conftest.py": (
            "import pytest\n\n@pytest.fixture\ndef httpbin(httpbin):\n    return httpbin\n"
        ),
        "tests/test_a.py": "class TestA:\n    def test_get(self, httpbin):\n        pass\n"
        "    def test_plain(self):\n        pass\n",
    }
    ids = ["tests/test_a.py::TestA::test_get", "tests/test_a.py::TestA::test_plain"]
    recursive = "recursive dependency involving fixture 'httpbin' detected"
    assert errors(files, ids) == {"tests/test_a.py::TestA::test_get": recursive}
    # a plugin of the environment provides the outer definition: nothing errors
    assert errors(files, ids, plugins=frozenset({"httpbin"})) == {}
    # so does a conftest further up
    files["conftest.py"] = "import pytest\n@pytest.fixture\ndef httpbin():\n    return 1\n"
    assert errors(files, ids) == {}


def test_missing_names_and_what_is_not_a_fixture():
    files = {
        "test_m.py": (
            "import pytest\n"
            "@pytest.fixture\ndef made(tmp_path):\n    return tmp_path\n"
            "@pytest.fixture\ndef broken(nowhere):\n    return 1\n"
            "def test_builtin(tmp_path, capsys, request, made):\n    pass\n"
            "def test_missing(mocker):\n    pass\n"
            "def test_dep(broken):\n    pass\n"
            "def test_default(x=1, *args, **kw):\n    pass\n"
            "@pytest.mark.parametrize('a, b', [(1, 2)])\ndef test_param(a, b):\n    pass\n"
            "@pytest.fixture(name='renamed')\ndef _impl():\n    return 1\n"
            "def test_renamed(renamed):\n    pass\n"
        )
    }
    ids = [f"test_m.py::{n}" for n in
           ("test_builtin", "test_missing", "test_dep", "test_default", "test_param[1-2]",
            "test_renamed")]  # fmt: skip
    assert errors(files, ids) == {
        "test_m.py::test_missing": "fixture 'mocker' not found",
        "test_m.py::test_dep": "fixture 'nowhere' not found",
    }
    found = setup_errors(reader(files), ["test_m.py::test_missing"], NONE)
    assert found["test_m.py::test_missing"] == SetupError(
        "mocker", False, 10, "def test_missing(mocker):"
    )


def test_conftest_visibility_follows_directories():
    files = {
        "a/conftest.py": "import pytest\n@pytest.fixture\ndef only_a():\n    return 1\n",
        "a/sub/test_x.py": "def test_x(only_a):\n    pass\n",
        "b/test_y.py": "def test_y(only_a):\n    pass\n",
    }
    assert errors(files, ["a/sub/test_x.py::test_x", "b/test_y.py::test_y"]) == {
        "b/test_y.py::test_y": "fixture 'only_a' not found"
    }


def test_class_fixtures_and_bases_in_the_module():
    files = {
        "test_c.py": (
            "import pytest\n"
            "class Base:\n"
            "    @pytest.fixture\n    def thing(self):\n        return 1\n"
            "class TestC(Base):\n"
            "    def test_ok(self, thing):\n        pass\n"
            "    def test_bad(self, other):\n        pass\n"
        )
    }
    ids = ["test_c.py::TestC::test_ok", "test_c.py::TestC::test_bad"]
    assert errors(files, ids) == {"test_c.py::TestC::test_bad": "fixture 'other' not found"}


@pytest.mark.parametrize(
    "source",
    [
        "from helpers import *\ndef test_t(mystery):\n    pass\n",
        "pytest_plugins = ['helpers']\ndef test_t(mystery):\n    pass\n",
        "from unittest import mock\n@mock.patch('os.getcwd')\ndef test_t(mystery):\n    pass\n",
        "import unittest\nclass TestT(unittest.TestCase):\n"
        "    def test_t(self, mystery):\n        pass\n",
        "import pytest\n@pytest.mark.parametrize('mystery', [1], indirect=True)\n"
        "def test_t(mystery):\n    pass\n",
        "import pytest\nNAMES = 'mystery'\n@pytest.mark.parametrize(NAMES, [1])\n"
        "def test_t(mystery):\n    pass\n",
        "def pytest_generate_tests(metafunc):\n    pass\ndef test_t(mystery):\n    pass\n",
        "import pytest\nmystery = pytest.fixture(lambda: 1)\ndef test_t(mystery):\n    pass\n",
    ],
    ids=[
        "star",
        "pytest_plugins",
        "mock.patch",
        "unittest",
        "indirect",
        "names-variable",
        "generate-tests",
        "fixture-by-assignment",
    ],
)
def test_anything_dynamic_is_left_undecided(source):
    ids = ["test_t.py::test_t", "test_t.py::TestT::test_t"]
    assert errors({"test_t.py": source}, ids) == {}


def test_conditional_imports_may_bind_a_fixture():
    source = "try:\n    from helpers import mystery\nexcept ImportError:\n    pass\n"
    source += "def test_t(mystery):\n    pass\ndef test_u(absent):\n    pass\n"
    assert errors({"test_t.py": source}, ["test_t.py::test_t", "test_t.py::test_u"]) == {
        "test_t.py::test_u": "fixture 'absent' not found"
    }


def test_unknown_environments_and_plugin_options_decide_nothing():
    files = {"test_p.py": "def test_p(mocker):\n    pass\n"}
    ids = ["test_p.py::test_p"]
    assert errors(files, ids, plugins=None) == {}
    assert errors(files, ids, argv=["pytest", "-p", "xdist", "test_p.py"]) == {}
    assert errors(files, ids, argv=["pytest", "-p", "no:cacheprovider"]) != {}
    files["setup.cfg"] = "[tool:pytest]\naddopts = -p pytest_mock\n"
    assert errors(files, ids) == {}
    assert environment_plugins({"repo": "psf/requests"}) == frozenset()
    assert environment_plugins({"repo": "django/django"}) is None
    assert environment_plugins(None) is None


def test_hostile_fixture_graphs_are_resolved_in_linear_time():
    # each fixture asks for the two before it (2**300 paths without memo), plus a cycle
    lines = ["import pytest", "@pytest.fixture\ndef f0():\n    return 0",
             "@pytest.fixture\ndef f1(f0):\n    return 1"]  # fmt: skip
    lines += [
        f"@pytest.fixture\ndef f{i}(f{i - 1}, f{i - 2}):\n    return {i}" for i in range(2, 60)
    ]
    lines += ["@pytest.fixture\ndef ring_a(ring_b):\n    return 1",
              "@pytest.fixture\ndef ring_b(ring_a):\n    return 1",
              "def test_deep(f59):\n    pass", "def test_ring(ring_a):\n    pass",
              "def test_gone(f59, missing):\n    pass"]  # fmt: skip
    files = {"test_h.py": "\n".join(lines) + "\n"}
    start = time.perf_counter()
    found = errors(files, ["test_h.py::test_deep", "test_h.py::test_ring", "test_h.py::test_gone"])
    assert found == {"test_h.py::test_gone": "fixture 'missing' not found"}
    assert time.perf_counter() - start < 5
    # files that do not parse or are absent decide nothing
    assert errors({"test_z.py": "def test_z(:\n"}, ["test_z.py::test_z"]) == {}
    assert errors({}, ["gone.py::test_z", "::", ""]) == {}


def test_the_executor_errors_them_until_the_session_installs_something(
    manager, toy_task, calc_model, monkeypatch
):
    from sweworld.execution.log_parsers import parse_pytest_log
    from sweworld.transition.outcome.executor import OutcomeExecutor

    monkeypatch.setitem(fixtures.HARNESS_PLUGINS, toy_task.repo.lower(), frozenset())  # type: ignore[index]
    ex = OutcomeExecutor(calc_model, mode="blind")
    with manager.open(toy_task, executor=ex) as s:
        s.run(
            "printf 'import pytest\\n@pytest.fixture\\ndef web(web):\\n    return web\\n"
            "def test_web(web):\\n    pass\\ndef test_mock(mocker):\\n    pass\\n'"
            " > tests/test_fx.py"
        )
        run = s.run("python -m pytest -rA tests/test_fx.py")
        assert run.exit_code == 1
        assert "recursive dependency involving fixture 'web' detected" in run.stdout
        assert "E       fixture 'mocker' not found" in run.stdout
        assert "ERROR at setup of test_mock" in run.stdout and "2 errors in" in run.stdout
        assert parse_pytest_log(run.stdout) == {
            "tests/test_fx.py::test_web": "ERROR",
            "tests/test_fx.py::test_mock": "ERROR",
        }
        assert run.info["execution_calls"][-1]["info"]["setup_errors"] == 2
        s.run("pip install pytest-mock")  # the environment may have changed: undecided
        again = s.run("python -m pytest -rA tests/test_fx.py")
        assert "setup_errors" not in again.info["execution_calls"][-1]["info"]
