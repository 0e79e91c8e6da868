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


# ---- hostile review: each case was checked against real pytest (9.0): none errors at setup

H = "import pytest\n"


@pytest.mark.parametrize(
    "files",
    [
        {
            "test_a.py": H + "@pytest.fixture\ndef base():\n    return 1\nalias = base\n"
            "def test_x(alias):\n    pass\n"
        },  # passes: an alias is a fixture too
        {
            "test_a.py": H + "@pytest.fixture\ndef f(a):\n    return a\n"
            "@pytest.mark.parametrize('a', [1])\ndef test_x(f):\n    pass\n"
        },  # passes
        {"test_a.py": "def test_x(x, /):\n    pass\n"},  # fails: pytest fills no posonly arg
        {"test_a.py": H + "@pytest.mark.skip\ndef test_x(missing):\n    pass\n"},
        {
            "test_a.py": H
            + "@pytest.mark.skipif(True, reason='r')\ndef test_x(missing):\n    pass\n"
        },
        {"test_a.py": H + "@pytest.mark.xfail\ndef test_x(missing):\n    pass\n"},
        {"test_a.py": H + "pytestmark = [pytest.mark.skip]\ndef test_x(missing):\n    pass\n"},
        {
            "test_a.py": H + "class Base:\n    pytestmark = pytest.mark.xfail\n"
            "class TestA(Base):\n    def test_x(self, missing):\n        pass\n"
        },
        {
            "test_a.py": H + "pytest.skip('no', allow_module_level=True)\n"
            "def test_x(missing):\n    pass\n"
        },
        {
            "test_a.py": H + "np = pytest.importorskip('nonexistent_zz')\n"
            "def test_x(missing):\n    pass\n"
        },
        {"test_a.py": "def test_x(missing):\n    pass\ndef test_x():\n    pass\n"},  # last wins
        {
            "test_a.py": H + "@pytest.fixture\ndef foo(missing):\n    return 1\nif True:\n"
            "    @pytest.fixture\n    def foo():\n        return 2\ndef test_x(foo):\n    pass\n"
        },
        {
            "test_a.py": H + "@pytest.fixture\ndef foo(missing):\n    return 1\n"
            "from helpers import foo\ndef test_x(foo):\n    pass\n"
        },
        {
            "test_a.py": "from helpers import modfix\n@modfix\ndef thing():\n    return 1\n"
            "def test_x(thing):\n    pass\n"
        },  # modfix = pytest.fixture(scope='module')
        {
            "test_a.py": H + "def make():\n    global thing\n"
            "    thing = pytest.fixture(lambda: 1, name='thing')\nmake()\n"
            "def test_x(thing):\n    pass\n"
        },
        {
            "test_a.py": H + "print(thing := pytest.fixture(lambda: 1, name='thing'))\n"
            "def test_x(thing):\n    pass\n"
        },
        {
            "test_a.py": H + "import contextlib\n"
            "with contextlib.nullcontext(pytest.fixture(lambda: 1, name='thing')) as thing:\n"
            "    pass\ndef test_x(thing):\n    pass\n"
        },
        {
            "test_a.py": H + "for thing in [pytest.fixture(lambda: 1, name='thing')]:\n    pass\n"
            "def test_x(thing):\n    pass\n"
        },
        {
            "conftest.py": H + "def pytest_collection_modifyitems(items):\n    for i in items:\n"
            "        i.add_marker(pytest.mark.skip)\n",
            "test_a.py": "def test_x(missing):\n    pass\n",
        },
        {
            "b/conftest.py": H + "def pytest_collection_modifyitems(items):\n"
            "    for i in items:\n        i.add_marker(pytest.mark.skip)\n",
            "b/test_b.py": "def test_x():\n    pass\n",
            "test_a.py": "def test_x(missing):\n    pass\n",
        },  # a sibling's hook skips it
        {
            "test_a.py": H + "class Base:\n    @pytest.fixture\n    def foo(self, missing):\n"
            "        return 1\nclass TestA:\n    class Base:\n        @pytest.fixture\n"
            "        def foo(self):\n            return 1\n    class TestB(Base):\n"
            "        def test_x(self, foo):\n            pass\n"
        },  # TestB's Base is TestA.Base
        {
            "test_a.py": "class TestA:\n    def __init__(self):\n        pass\n"
            "    def test_x(self, missing):\n        pass\n"
        },  # not collected
        {
            "test_a.py": H + "class A:\n    @pytest.fixture\n    def foo(self, missing):\n"
            "        return 1\nclass B(A):\n    pass\nclass C(A):\n    @pytest.fixture\n"
            "    def foo(self):\n        return 1\nclass TestD(B, C):\n"
            "    def test_x(self, foo):\n        pass\n"
        },  # C3: C.foo wins
        {
            "test_a.py": "class TestA(TestB):\n    def test_x(self, missing):\n        pass\n"
            "class TestB(TestA):\n    pass\n"
        },  # a collection error
        {
            "test_a.py": H + "@pytest.mark.parametrize('a', [1])\nclass TestA:\n"
            "    def test_x(self, a):\n        pass\n    def test_y(self, missing):\n"
            "        pass\n"
        },  # test_y: 'uses no argument a', the module is not collected
        {"test_a.py": "x = undefined_zz\ndef test_x(missing):\n    pass\n"},  # NameError
        {"test_a.py": H + "@pytest.fixture\ndef test_x(missing):\n    return 1\n"},
        {
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = ["-p", "helpers"]\n',
            "test_a.py": "def test_x(foo):\n    pass\n",
        },
        {
            "tests/pytest.ini": "[pytest]\naddopts = -p helpers\n",
            "tests/test_a.py": "def test_x(foo):\n    pass\n",
        },
        {"test_a.py": "async def test_x(missing):\n    pass\n"},
        {"test_a.py": "def test_x(missing):\n    yield 1\n"},
        {
            "test_a.py": H + "globals()['foo'] = pytest.fixture(lambda: 1, name='foo')\n"
            "def test_x(foo):\n    pass\n"
        },
    ],
)
def test_what_pytest_runs_is_never_claimed(files):
    ids = [
        f"{p}::{n}"
        for p in files
        if p.rsplit("/", 1)[-1].startswith("test_")
        for n in ("test_x", "test_y", "TestA::test_x", "TestA::test_y", "TestD::test_x",
                  "TestA::TestB::test_x")
    ]  # fmt: skip
    assert errors(files, ids) == {}


def test_true_claims_stay():
    files = {
        "test_a.py": H + "@pytest.fixture\nasync def foo(missing):\n    return 1\n"
        "def test_x(foo):\n    pass\n"
        "class TestA:\n    @pytest.fixture\n    def foo(self):\n        return 1\n"
        "    class TestB:\n        def test_x(self, foo):\n            pass\n"
        "        def test_y(self, nope):\n            pass\n"
        "    @staticmethod\n    def test_s(x):\n        pass\n"
        "@pytest.fixture(name='other')\ndef impl():\n    return 1\n"
        "def test_impl(impl):\n    pass\n"
        "@pytest.fixture\ndef kw(*, missing):\n    return 1\ndef test_kw(kw):\n    pass\n"
    }
    ids = ["test_a.py::" + n for n in ("test_x", "TestA::TestB::test_x", "TestA::TestB::test_y",
                                        "TestA::test_s", "test_impl", "test_kw")]  # fmt: skip
    assert errors(files, ids) == {
        "test_a.py::test_x": "fixture 'missing' not found",
        "test_a.py::TestA::TestB::test_y": "fixture 'nope' not found",
        "test_a.py::TestA::test_s": "fixture 'x' not found",
        "test_a.py::test_impl": "fixture 'impl' not found",
        "test_a.py::test_kw": "fixture 'missing' not found",
    }


def test_odd_ids_read_nothing_outside_and_hostile_sizes_stay_linear():
    seen: list[str] = []
    files = {"a.py": "def test_x(m):\n    pass\n"}

    def read(path):
        seen.append(path)
        return files.get(path)

    ids = ["::", "a.py::", "a.py::[x]", "../../etc/passwd::t", "/etc/passwd::t",
           "a.py::" + "x" * 100_000, "a.py::" + "::" * 10_000, "./a.py::test_x",
           "/".join(["d"] * 5000) + "/t.py::test_x", "a.py::test_x"]  # fmt: skip
    assert set(setup_errors(read, ids, NONE)) == {"a.py::test_x"}
    assert not [p for p in seen if p.startswith(("/", "..")) or "/.." in p or p.count("/") > 64]
    n = 20_000  # ~1 MB: thousands of tests in one class, a class hierarchy fanning out
    big = "class TestBig:\n" + "".join(f"    def test_{i}(self, m):\n        pass\n"
                                       for i in range(n))  # fmt: skip
    big += "class K0:\n    pass\n" + "".join(
        f"class K{i}(K{i - 1}, K{i - 1}, K{i - 1}):\n    pass\n" for i in range(1, 40)
    )
    big += "class TestZ(K39):\n    def test_z(self, m):\n        pass\n"
    ids = [f"test_b.py::TestBig::test_{i}" for i in range(n)] + ["test_b.py::TestZ::test_z"]
    start = time.perf_counter()
    found = errors({"test_b.py": big}, ids)
    assert len(found) == n and "test_b.py::TestZ::test_z" not in found
    assert time.perf_counter() - start < 10  # well under 1 s alone; the CI machine is shared
    deep = "x = " + "-" * 1_000_000 + "1\ndef test_x(m):\n    pass\n"
    assert errors({"test_c.py": deep}, ["test_c.py::test_x"]) == {}


def test_reflection_counts_only_where_it_runs_at_import():
    """``monkeypatch.setattr`` in a test runs at test time and binds no fixture: the module
    is still decided; the same reflection at module level, or in a function the module uses
    at import (called or as a decorator), leaves it undecided."""
    body = "def test_t(monkeypatch, absent):\n    monkeypatch.setattr('os.sep', '/')\n"
    assert errors({"test_r.py": body}, ["test_r.py::test_t"]) == {
        "test_r.py::test_t": "fixture 'absent' not found"
    }
    at_import = "import sys\nsetattr(sys.modules[__name__], 'absent', 1)\n" + body
    assert errors({"test_r.py": at_import}, ["test_r.py::test_t"]) == {}
    helper = "def _register(f):\n    globals()['absent'] = f\n    return f\n"
    for use in ("_register(print)\n", "@_register\ndef made():\n    pass\n"):
        source = helper + use + body
        assert errors({"test_r.py": source}, ["test_r.py::test_t"]) == {}
