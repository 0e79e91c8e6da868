"""Exact facts about commands, checked against what the real local Python and pytest print.

Each ground truth is a real run (``subprocess``) of the same command on a copy of the
test's workspace; the copy's host path is replaced by ``/testbed`` in the output, and
pytest's header lines that name the local installation (versions, plugins) and the
durations are normalised on both sides.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.facts import (
    Environment,
    compute_facts,
    keyword_matches,
    no_target_hint,
    parametrize_id,
    parse_command,
    parse_pytest_args,
)
from sweworld.transition.types import WorkspaceView

WORKDIR = "/testbed"

# --------------------------------------------------------------------------- helpers


def make_workspace(tmp_path: Path, files: dict[str, str], name: str = "repo") -> Path:
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def view_of(root: Path, tmp_path: Path, cwd: str = WORKDIR) -> WorkspaceView:
    tmp = tmp_path / "sandbox-tmp"
    tmp.mkdir(exist_ok=True)
    return WorkspaceView(root, tmp=tmp, cwd=cwd)


def facts_for(root: Path, tmp_path: Path, argv, cwd: str = WORKDIR, stdin: bytes = b"", **kw):
    """Facts for the host's own environment (what :func:`real_run` runs) unless ``env`` or
    ``python_version`` says otherwise; a request without a task otherwise knows nothing."""
    if "env" not in kw:
        kw["env"] = Environment()
    request = ExecutionRequest(argv=tuple(argv), cwd=cwd, stdin=stdin)
    return compute_facts(request, view_of(root, tmp_path, cwd), **kw)


def real_run(root: Path, tmp_path: Path, argv, cwd: str = WORKDIR, stdin: bytes = b""):
    """Run ``argv`` for real on a copy of the workspace; paths are mapped back to /testbed."""
    copy = tmp_path / "real" / "testbed"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(root, copy)
    host_cwd = str(copy) + cwd[len(WORKDIR) :]
    argv = list(argv)
    program = argv[0]
    if program in ("python", "python3"):
        command = [program, *argv[1:]]
        executable = sys.executable
    elif program == "pytest":
        command = ["pytest", *argv[1:]]
        executable = None
        command = [sys.executable, "-m", "pytest", *argv[1:]]
    else:  # pragma: no cover
        raise ValueError(program)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
        "LANG": "C.UTF-8",
    }
    proc = subprocess.run(
        command,
        executable=executable,
        cwd=host_cwd,
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
    )

    def fix(data: bytes) -> str:
        return data.decode("utf-8", "replace").replace(str(copy), WORKDIR)

    return fix(proc.stdout), fix(proc.stderr), proc.returncode


def real_collect(root: Path, tmp_path: Path, args, cwd: str = WORKDIR) -> list[str]:
    out, err, code = real_run(root, tmp_path, ["pytest", "--collect-only", "-q", *args], cwd)
    assert code in (0, 5), out + err
    ids = []
    for line in out.splitlines():
        if not line.strip():
            break
        ids.append(line)
    return ids


# --------------------------------------------------------------------------- parse_command


@pytest.mark.parametrize(
    ("argv", "kind", "expected"),
    [
        (["python", "x.py", "a", "-v"], "python_script", {"script": "x.py", "args": ("a", "-v")}),
        (["python3", "-u", "x.py"], "python_script", {"interpreter_flags": ("-u",)}),
        (["python", "-W", "ignore", "-c", "print(1)", "z"], "python_c",
         {"code": "print(1)", "args": ("z",), "interpreter_flags": ("-W", "ignore")}),
        (["python", "-uc", "print(2)"], "python_c", {"code": "print(2)"}),
        (["python", "-cprint(3)"], "python_c", {"code": "print(3)"}),
        (["python", "-m", "unittest", "tests.test_a"], "python_module",
         {"module": "unittest", "args": ("tests.test_a",)}),
        (["python", "-mpytest", "-x"], "pytest", {"module": "pytest"}),
        (["python3.11", "-m", "pip", "install", "-e", "."], "pip", {"pip_command": "install"}),
        (["pip", "list"], "pip", {"pip_command": "list"}),
        (["python", "-"], "python_stdin", {"script": "-"}),
        (["python"], "python_stdin", {"script": None}),
        (["python", "--version"], "version", {"version_flag": "--version"}),
        (["python", "-V"], "version", {"version_flag": "--version"}),
        (["python", "-VV"], "version", {"version_flag": "-VV"}),
        (["python", "-c", "print(1)", "-V"], "python_c", {"args": ("-V",)}),
        (["/usr/bin/python3", "-m", "pytest", "t.py"], "pytest", {}),
        (["py.test", "t.py"], "pytest", {}),
        (["python", "--", "-x.py"], "python_script", {"script": "-x.py"}),
        (["ls", "-la"], "other", {}),
        (["python", "-m"], "other", {}),
    ],
)  # fmt: skip
def test_parse_command(argv, kind, expected):
    info = parse_command(argv)
    assert info.kind == kind
    for key, value in expected.items():
        assert getattr(info, key) == value, key


def test_parse_command_errors_are_pythons_own():
    info = parse_command(["python", "-c"])
    assert info.error.startswith("Argument expected for the -c option\nusage: python [option]")
    assert parse_command(["python", "-Z"]).error.startswith("Unknown option: -Z")


def test_parse_pytest_args():
    opts = parse_pytest_args(
        ["-xvs", "-k", "a and not b", "-rA", "--tb=short", "tests/test_a.py::TestX::test_y[1]",
         "-p", "no:cacheprovider", "--deselect", "t.py::x", "-n", "4", "--cov", "pkg", "dir/",
         "-m", "slow", "-qq", "--", "-weird.py"]
    )  # fmt: skip
    assert opts.targets == ("tests/test_a.py::TestX::test_y[1]", "dir/", "-weird.py")
    assert opts.keyword == "a and not b"
    assert opts.markexpr == "slow"
    assert opts.exitfirst and opts.capture == "no" and opts.xdist
    assert opts.verbosity == -1
    assert opts.report_chars == "A"
    assert opts.tb == "short"
    assert opts.deselect == ("t.py::x",)
    assert opts.plugins == ("no:cacheprovider",)
    assert parse_pytest_args(["-kfoo", "--co"]).keyword == "foo"
    assert parse_pytest_args(["--co"]).collect_only


# --------------------------------------------------------------------------- python: exact

SYNTAX_ERRORS = [
    "def f(:\n    pass\n",
    'x = "abc\n',
    "if True:\nprint(1)\n",
    "print(1)\n  print(2)\n",
    "x = (1,\n",
    "a = 1 +* 2\n",
    "def f():\n\treturn 1\n        return 2\n",
    'print "hello"\n',
    "\tx = 1\n",
    "x = [1, 2\ny = 3\n",
    "import os\nfor x in range(3)\n    print(x)\n",
    "class A:\n    def f(self):\n        return 1\n     def g(self):\n        pass\n",
    "x = 1\ny = 2 +\n",
    "f(a for a in b, c)\n",
    "x = {'a': 1, 'b': 2\nprint(x)\n",
    "s = '''never closed\n",
    "def f():\n    yield = 3\n",
    "return 5\n",
    "x = 'é' +\n",
    "lambda x: (yield)\nnonlocal q\n",
]


@pytest.mark.parametrize("source", SYNTAX_ERRORS)
def test_syntax_error_in_script_matches_python(tmp_path, source):
    root = make_workspace(tmp_path, {"pkg/bad.py": source})
    facts = facts_for(root, tmp_path, ["python", "pkg/bad.py"])
    out, err, code = real_run(root, tmp_path, ["python", "pkg/bad.py"])
    assert facts.syntax_errors
    assert facts.exact is not None
    assert (facts.exact.stdout, facts.exact.stderr, facts.exact.exit_code) == (out, err, code)
    assert facts.executed_files == ("/testbed/pkg/bad.py",)


@pytest.mark.parametrize("source", SYNTAX_ERRORS[:8])
def test_syntax_error_in_c_code_and_stdin_matches_python(tmp_path, source):
    root = make_workspace(tmp_path, {"README": "x\n"})
    facts = facts_for(root, tmp_path, ["python", "-c", source])
    assert facts.exact is not None
    assert (facts.exact.stdout, facts.exact.stderr, facts.exact.exit_code) == real_run(
        root, tmp_path, ["python", "-c", source]
    )
    stdin = source.encode()
    facts = facts_for(root, tmp_path, ["python", "-"], stdin=stdin)
    real = real_run(root, tmp_path, ["python", "-"], stdin=stdin)
    assert (facts.exact.stdout, facts.exact.stderr, facts.exact.exit_code) == real


@pytest.mark.parametrize(
    ("script", "cwd"),
    [("nope.py", WORKDIR), ("sub/nope.py", WORKDIR), ("/testbed/nope.py", WORKDIR),
     ("../nope.py", "/testbed/sub"), ("/tmp/nope.py", WORKDIR)],
)  # fmt: skip
def test_missing_script_matches_python(tmp_path, script, cwd):
    root = make_workspace(tmp_path, {"sub/keep.py": ""})
    facts = facts_for(root, tmp_path, ["python", script], cwd=cwd)
    assert facts.missing_files and facts.missing_files[0].exit_code == 2
    if script.startswith("/tmp"):
        expected = (
            "", "python: can't open file '/tmp/nope.py': [Errno 2] No such file or directory\n", 2
        )  # fmt: skip
    else:
        expected = real_run(root, tmp_path, ["python", script], cwd=cwd)
    assert (facts.exact.stdout, facts.exact.stderr, facts.exact.exit_code) == expected


def test_missing_script_message_before_python_3_9(tmp_path):
    root = make_workspace(tmp_path, {"a.py": ""})
    facts = facts_for(root, tmp_path, ["python3", "nope.py"], python_version="3.6.13")
    assert facts.exact.stderr == (
        "python3: can't open file 'nope.py': [Errno 2] No such file or directory\n"
    )


PROGRAMS = {
    "direct": "import os\nimport nomod_xyz\n",
    "same_line": "import os; import nomod_xyz\n",
    "from_dotted": "from nomod_xyz.sub import a\n",
    "relative": "from . import x\n",
    "nested": "import pkg\n",
    "sub_missing": "import pkg2.nothere\n",
    "cannot_import": "from pkg2.mod import nothere\n",
    "after_defs": (
        '"""doc"""\nimport sys\nfrom typing import Optional\n\nX = 3\n\n'
        "def f(a: int = 1, *, b: Optional[str] = None) -> int:\n    return a\n\n"
        "class A(Exception):\n    '''x'''\n    y = [1, 2]\n    def g(self):\n        pass\n\n"
        "print('before', 3)\nimport nomod_xyz\n"
    ),
    "prints": "print('hi', 2, None, 2.50, sep='|')\nprint('x', end='')\nprint()\n",
    "exit_code": "import sys\nprint('a')\nsys.exit(3)\nprint('never')\n",
    "exit_msg": "import sys\nsys.exit('boom')\n",
    "exit_none": "raise_nothing = 1\nexit()\n",
    "main_guard": "def main():\n    pass\n\nif __name__ == '__main__':\n    print('main')\n",
    "empty": "",
    "comment_only": "# nothing\n",
    "workspace_import": "from pkg2 import mod\nprint(mod)\n",
    "imports_broken": "import pkg2\nimport pkg2.broken\n",
}
WORKSPACE = {
    "pkg/__init__.py": "import nomod_q\n",
    "pkg2/__init__.py": '"""A package."""\n',
    "pkg2/mod.py": "import os\n\nVALUE = 1\n\ndef helper(x=os.sep):\n    return x\n",
    "pkg2/broken.py": "def f(:\n    pass\n",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_interpreted_programs_are_facts_for_the_model(tmp_path, name):
    """The small interpreter's answers never paid on real steps (sweworld bench facts-payoff):
    the output is the model's; an import that certainly fails stays a fact, and it is the
    error the real run ends with."""
    root = make_workspace(tmp_path, {**WORKSPACE, "prog.py": PROGRAMS[name]})
    facts = facts_for(root, tmp_path, ["python", "prog.py"])
    assert facts.exact is None
    _, err, code = real_run(root, tmp_path, ["python", "prog.py"])
    last = err.rstrip("\n").splitlines()[-1] if err.strip() else ""
    certain = [m for m in facts.missing_imports if m.certain]
    if certain:
        assert code == 1 and last == certain[0].error
    elif facts.syntax_errors:
        assert code == 1 and last.startswith("SyntaxError")
    else:
        assert "Error" not in last, name


def test_missing_import_facts(tmp_path):
    root = make_workspace(tmp_path, {**WORKSPACE, "prog.py": PROGRAMS["nested"]})
    facts = facts_for(root, tmp_path, ["python", "prog.py"])
    (missing,) = facts.missing_imports
    assert missing.module == "nomod_q"
    assert missing.file == "/testbed/pkg/__init__.py"
    assert missing.certain
    assert missing.error == "ModuleNotFoundError: No module named 'nomod_q'"


def test_uncertain_missing_import_is_a_fact_not_an_answer(tmp_path):
    source = "import os\nvalue = os.getcwd()\nimport nomod_xyz\n"
    root = make_workspace(tmp_path, {"prog.py": source})
    facts = facts_for(root, tmp_path, ["python", "prog.py"])
    assert facts.exact is None
    (missing,) = facts.missing_imports
    assert missing.module == "nomod_xyz" and not missing.certain


def test_installed_and_declared_modules_are_not_missing(tmp_path):
    source = "import numpy\nimport requests\nimport yaml\n"
    root = make_workspace(tmp_path, {"prog.py": source, "setup.py": SETUP_PY})
    facts = facts_for(root, tmp_path, ["python", "prog.py"], installed=["requests"])
    assert facts.missing_imports == ()
    facts = facts_for(root, tmp_path, ["python", "prog.py"], installed=[])
    assert facts.missing_imports[0].module == "requests"


SETUP_PY = (
    "from setuptools import setup\n"
    "setup(name='x', install_requires=['numpy>=1.0', 'PyYAML'], extras_require={'t': ['pytest']})\n"
)


def test_compile_warnings_make_the_answer_inexact(tmp_path):
    root = make_workspace(tmp_path, {"w.py": "x = 1\nif x is 5:\n    pass\n"})
    facts = facts_for(root, tmp_path, ["python", "w.py"])
    assert facts.exact is None
    assert any("warnings" in n for n in facts.notes)


def test_other_python_minor_is_not_exact(tmp_path):
    root = make_workspace(tmp_path, {"bad.py": "def f(:\n"})
    other = "3.8.10" if sys.version_info[:2] != (3, 8) else "3.9.1"
    facts = facts_for(root, tmp_path, ["python", "bad.py"], python_version=other)
    assert facts.syntax_errors and facts.exact is None


def test_version_is_left_to_the_model(tmp_path):
    root = make_workspace(tmp_path, {"a.py": ""})
    for flag in ("--version", "-V", "-VV"):
        facts = facts_for(root, tmp_path, ["python", flag])
        assert facts.kind == "version" and facts.exact is None
    facts = facts_for(root, tmp_path, ["python", "-V"], python_version="3.9.20")
    assert facts.python_version == "3.9.20"  # the fact that holds, for the model


def test_directory_script(tmp_path):
    root = make_workspace(tmp_path, {"d/x.py": "", "m/__main__.py": "print(1)\n"})
    assert facts_for(root, tmp_path, ["python", "d"]).exact is None
    assert facts_for(root, tmp_path, ["python", "m"]).executed_files == ("/testbed/m/__main__.py",)


def test_module_facts(tmp_path):
    root = make_workspace(tmp_path, {"pkg2/__init__.py": "", "tool.py": "print(1)\n"})
    facts = facts_for(root, tmp_path, ["python", "-m", "tool"])
    assert facts.executed_files == ("/testbed/tool.py",)
    facts = facts_for(root, tmp_path, ["python", "-m", "nomod_xyz"])
    real = real_run(root, tmp_path, ["python", "-m", "nomod_xyz"])
    assert facts.exact is None and facts.missing_imports[0].module == "nomod_xyz"
    assert real[1].endswith(f": {facts.missing_imports[0].error}\n") and real[2] == 1
    facts = facts_for(root, tmp_path, ["/usr/bin/python3", "-m", "pkg2"])
    assert facts.exact is None and not facts.executed_files


def test_python_m_pytest_without_pytest(tmp_path):
    root = make_workspace(tmp_path, {"test_a.py": "def test_a():\n    pass\n"})
    facts = facts_for(root, tmp_path, ["/usr/bin/python3", "-m", "pytest"], installed=[])
    assert facts.exact is None and facts.missing_imports[0].module == "pytest"


def test_executed_files_for_scripts_with_file_arguments(tmp_path):
    root = make_workspace(
        tmp_path,
        {"tests/runtests.py": "import sys\n", "tests/queries/tests.py": "", "tests/x.py": ""},
    )
    facts = facts_for(
        root, tmp_path, ["python", "tests/runtests.py", "queries.tests.JoinTest", "tests/x.py"]
    )
    assert facts.executed_files == (
        "/testbed/tests/runtests.py",
        "/testbed/tests/x.py",
        "/testbed/tests/queries/tests.py",
    )


def test_usage_errors_and_hints(tmp_path):
    root = make_workspace(tmp_path, {"f.txt": "x"})
    view = view_of(root, tmp_path)

    def hint(argv, stdin=b""):
        return no_target_hint(ExecutionRequest(argv=tuple(argv), stdin=stdin), view)

    assert "interactive" in hint(["python"])
    assert "interactive" in hint(["python3", "-u"])
    assert hint(["python"], stdin=b"print(1)\n") is None
    assert "-m" in hint(["python", "-m"])
    assert "-c" in hint(["python", "-c"])
    assert "outside the workspace" in hint(["python", "/usr/lib/x.py"])
    assert "outside the workspace" in hint(["pytest", "/etc/test_x.py"])
    assert "which is a file" in hint(["python", "f.txt/x.py"])
    assert hint(["python", "nope.py"]) is None  # the agent can create it
    assert hint(["python", "/tmp/new.py"]) is None
    assert hint(["pytest", "tests/"]) is None
    assert hint(["ls"]) is None
    facts = facts_for(root, tmp_path, ["python"])
    assert facts.hint and facts.exact is None


# --------------------------------------------------------------------------- pytest

RICH_TESTS = """\
import re
import unittest
from decimal import Decimal

import pytest

CONST = 7


def helper():
    pass


class Thing:
    pass


@pytest.mark.parametrize("x", [])
def test_empty(x):
    pass


@pytest.mark.parametrize(
    "v",
    [1, -2, 1.5, 1e-5, True, None, "a b", "\\u00e9", "new\\nline", b"by\\x00", 3j, "", CONST,
     helper, Thing, int, len, Decimal("1"), (1, 2), [1], {"a": 1}, float("inf"),
     lambda: 1, re.compile("a+")],
)
def test_values(v):
    pass


@pytest.mark.parametrize("a", [1, 1, 2, 1])
def test_dups(a):
    pass


@pytest.mark.parametrize("a", ["x", "x", "x1"])
def test_dups2(a):
    pass


@pytest.mark.parametrize(
    "a,b",
    [pytest.param(1, 2, id="one"), pytest.param(3, 4, marks=pytest.mark.slow), (5, 6)],
    ids=["i0", "i1", None],
)
def test_param(a, b):
    pass


@pytest.mark.parametrize("x", [0, 1])
@pytest.mark.parametrize("y", [2, 3])
def test_stack(x, y):
    pass


@pytest.mark.parametrize(("p",), [(1,), (2,)])
def test_tuple_names(p):
    pass


@pytest.mark.parametrize("n", range(3))
def test_range(n):
    pass


@pytest.mark.parametrize("z", [1, 2])
class TestCls:
    def test_a(self, z):
        pass

    @pytest.mark.parametrize("w", ["u"])
    def test_b(self, z, w):
        pass


class TestOuter:
    class TestInner:
        def test_inner(self):
            pass

    def test_outer(self):
        pass


class TestInit:
    def __init__(self):
        pass

    def test_x(self):
        pass


class TestNo:
    __test__ = False

    def test_x(self):
        pass


class Base:
    def test_base(self):
        pass


class TestDerived(Base):
    def test_derived(self):
        pass


class MyCase(unittest.TestCase):
    def test_z(self):
        pass

    def test_a(self):
        pass

    def helper(self):
        pass


class MoreCases(MyCase):
    def test_m(self):
        pass


@pytest.fixture
def test_fixture_like():
    return 1


def testfoo():
    pass


async def test_async():
    pass


@pytest.mark.skip(reason="no")
def test_skipped():
    pass


class TestStatic:
    @staticmethod
    def test_static():
        pass

    @classmethod
    def test_cls(cls):
        pass


test_alias = testfoo
"""


CLEAN_TESTS = RICH_TESTS.replace(
    "class TestInit:\n    def __init__(self):\n        pass\n\n"
    "    def test_x(self):\n        pass\n",
    "",
)


@pytest.fixture(scope="module")
def clean_workspace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clean")
    root = make_workspace(
        tmp,
        {
            "tests/test_rich.py": CLEAN_TESTS,
            "tests/sub/test_more.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
            "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
            "empty/README": "",
        },
    )
    return root, tmp


@pytest.fixture(scope="module")
def rich_workspace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rich")
    root = make_workspace(
        tmp,
        {
            "tests/test_rich.py": RICH_TESTS,
            "tests/sub/test_more.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
            "tests/sub/helper_test.py": "def test_h():\n    pass\n",
            "tests/sub/notatest.py": "def test_never():\n    pass\n",
            "build/test_ignored.py": "def test_b():\n    pass\n",
            "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
        },
    )
    return root, tmp


def test_stacked_parametrize_marks_are_not_expanded_without_bound(tmp_path):
    """Four marks of 100 values are 100,000,000 items from a five-line file: the facts
    ran out of time and memory listing them (three marks took 8 s). Past the bound the
    function is one uncertain item, and the collection is not exact."""
    import time

    marks = "".join(f"@pytest.mark.parametrize('a{j}', range(100))\n" for j in range(4))
    args = ", ".join(f"a{j}" for j in range(4))
    root = make_workspace(
        tmp_path,
        {
            "tests/test_many.py": f"import pytest\n\n{marks}def test_q({args}):\n    pass\n\n"
            "def test_plain():\n    pass\n"
        },
    )
    started = time.perf_counter()
    facts = facts_for(root, tmp_path, ["pytest", "tests"])
    assert time.perf_counter() - started < 5.0
    assert not facts.collection_exact
    assert "tests/test_many.py::test_q" in facts.uncertain_tests
    assert "tests/test_many.py::test_plain" in facts.collected_tests


def test_collection_matches_pytest(rich_workspace, tmp_path):
    root, _ = rich_workspace
    facts = facts_for(root, tmp_path, ["pytest", "tests"])
    assert list(facts.collected_tests) == real_collect(root, tmp_path, ["tests"])
    assert facts.collection_exact
    assert facts.rootdir == WORKDIR and facts.configfile == "/testbed/pytest.ini"
    assert facts.executed_files[0] == "/testbed/tests/sub/helper_test.py"
    assert "/testbed/tests/sub/notatest.py" not in facts.executed_files
    # An explicit file is collected whatever its name.
    facts = facts_for(root, tmp_path, ["pytest", "tests/sub/notatest.py"])
    assert list(facts.collected_tests) == ["tests/sub/notatest.py::test_never"]
    # No argument: the invocation directory, with norecursedirs (build/) applied.
    facts = facts_for(root, tmp_path, ["pytest"])
    assert list(facts.collected_tests) == real_collect(root, tmp_path, [])


@pytest.mark.parametrize(
    "expression",
    ["dups", "not dups", "stack and 2", "TestCls", "test_a", "1.5 or inf", "(Cls or Derived) and "
     "not base", "slow", "parametrize", "skip", "sub", "rich", "test_rich.py", "x1", "alias",
     "MyCase and not test_z", "e9", "pytestmark", "TESTFOO"],
)  # fmt: skip
def test_keyword_selection_matches_pytest(rich_workspace, tmp_path, expression):
    root, _ = rich_workspace
    facts = facts_for(root, tmp_path, ["pytest", "tests", "-k", expression])
    real = real_collect(root, tmp_path, ["tests", "-k", expression])
    assert list(facts.collected_tests) == real
    assert facts.deselected == facts.collected_total - len(real)


@pytest.mark.parametrize(
    "targets",
    [["tests/test_rich.py::test_values"], ["tests/test_rich.py::TestCls"],
     ["tests/test_rich.py::test_stack[3-0]"], ["tests/test_rich.py::MyCase::test_z"],
     ["tests/test_rich.py::TestOuter::TestInner", "tests/sub"],
     ["tests/sub/test_more.py", "tests/sub/test_more.py::test_one"],
     ["tests/test_rich.py", "-m", "slow or skip"],
     ["tests", "--deselect", "tests/test_rich.py::test_dups", "--ignore", "tests/sub"]],
)  # fmt: skip
def test_node_id_targets_match_pytest(rich_workspace, tmp_path, targets):
    root, _ = rich_workspace
    facts = facts_for(root, tmp_path, ["pytest", *targets])
    assert list(facts.collected_tests) == real_collect(root, tmp_path, targets)


def test_parametrize_ids():
    assert parametrize_id("é", "v", 0) == "\\xe9"
    assert parametrize_id(b"\x00a", "v", 0) == "\\x00a"
    assert parametrize_id(1e-5, "v", 0) == "1e-05"
    assert parametrize_id(object(), "v", 3) is None


@pytest.mark.parametrize(
    ("expression", "names", "expected"),
    [("a", {"xab"}, True), ("not a", {"xab"}, False), ("a and (b or c)", {"a", "c"}, True),
     ("a or b and c", {"a"}, True), ("not a and not b", {"c"}, True)],
)  # fmt: skip
def test_keyword_expressions(expression, names, expected):
    assert keyword_matches(expression, lambda ident: any(ident in n for n in names)) is expected


@pytest.mark.parametrize(
    "args",
    [["tests/test_rich.py::test_nope"], ["tests/test_rich.py::test_values[nope]"],
     ["--co", "-q", "tests/sub"], ["--co", "-q", "tests", "-k", "dups"], ["nope.py"],
     ["-q", "nope.py"], ["-v", "nope.py::test_x"], ["tests/test_rich.py", "-k", "zzz"],
     ["--no-header", "tests", "-k", "zzz"], ["empty"]],
)  # fmt: skip
def test_cut_answers_are_facts_for_the_model(clean_workspace, tmp_path, args):
    """pytest's own outputs (a node id that matches nothing, ``--collect-only -q``, a file
    not found, no tests selected) are not answered exactly (never paid in the task's own
    environment: sweworld bench facts-payoff); what is known stays a fact."""
    root, _ = clean_workspace
    facts = facts_for(root, tmp_path, ["pytest", *args])
    assert facts.exact is None
    if "--co" in args:
        assert facts.collection_exact and facts.collected_tests
    elif any(a.startswith("nope.py") for a in args):
        assert facts.missing_files and facts.missing_files[0].exit_code == 4
    elif "-k" in args or args == ["empty"]:
        assert facts.collection_exact and facts.collected_tests == ()
    else:
        assert any(note.startswith("not found: ") for note in facts.notes)


def test_collection_warnings_make_answers_inexact(rich_workspace, tmp_path):
    root, _ = rich_workspace
    facts = facts_for(root, tmp_path, ["pytest", "tests", "-k", "zzz"])
    assert facts.collected_tests == () and facts.collection_exact
    assert facts.exact is None
    assert any("TestInit" in note for note in facts.notes)
    out, _, code = real_run(root, tmp_path, ["pytest", "tests", "-k", "zzz"])
    assert code == 5 and "warnings summary" in out
    root = make_workspace(
        tmp_path,
        {"test_m.py": "import pytest\n\n@pytest.mark.unknownmark\ndef test_a():\n    pass\n"},
    )
    facts = facts_for(root, tmp_path, ["pytest", "-k", "zzz"])
    assert facts.exact is None and any("unknownmark" in note for note in facts.notes)


def test_collection_errors(tmp_path):
    root = make_workspace(
        tmp_path,
        {
            "tests/test_bad.py": "def test_x(:\n    pass\n",
            "tests/test_imp.py": "import nomod_xyz\n\ndef test_y():\n    pass\n",
            "tests/test_ok.py": "def test_ok():\n    pass\n",
        },
    )
    facts = facts_for(root, tmp_path, ["pytest", "tests"])
    assert facts.collection_errors == ("tests/test_bad.py", "tests/test_imp.py")
    assert facts.collected_tests == ("tests/test_ok.py::test_ok",)
    assert facts.syntax_errors[0].line == 1
    assert facts.missing_imports[0].module == "nomod_xyz"
    assert facts.exact is None
    out, _, code = real_run(root, tmp_path, ["pytest", "tests"])
    assert code == 2 and "collected 1 item / 2 errors" in out


def test_conftest_hooks_and_fixture_params_make_collection_inexact(tmp_path):
    root = make_workspace(
        tmp_path,
        {
            "conftest.py": "def pytest_collection_modifyitems(items):\n    pass\n",
            "test_a.py": "def test_a():\n    pass\n",
        },
    )
    assert not facts_for(root, tmp_path, ["pytest"]).collection_exact
    root = make_workspace(
        tmp_path,
        {
            "conftest.py": (
                "import pytest\n\n@pytest.fixture(params=[1, 2])\ndef number(request):\n"
                "    return request.param\n"
            ),
            "test_a.py": "def test_a(number):\n    pass\n\ndef test_b():\n    pass\n",
        },
        name="repo2",
    )
    facts = facts_for(root, tmp_path, ["pytest"])
    assert not facts.collection_exact
    assert facts.uncertain_tests == ("test_a.py::test_a",)


@pytest.mark.parametrize(
    ("files", "target", "rootdir", "configfile"),
    [({"tox.ini": "[pytest]\n", "t/test_a.py": ""}, "t", "/testbed", "/testbed/tox.ini"),
     ({"tox.ini": "[tox]\n", "setup.py": "", "t/test_a.py": ""}, "t", "/testbed", None),
     ({"setup.cfg": "[tool:pytest]\n", "t/test_a.py": ""}, "t", "/testbed", "/testbed/setup.cfg"),
     ({"t/pytest.ini": "[pytest]\n", "t/test_a.py": ""}, "t", "/testbed/t",
      "/testbed/t/pytest.ini"),
     ({"t/test_a.py": ""}, "t/test_a.py", "/testbed", None),
     ({"pyproject.toml": "[project]\nname='x'\n", "t/test_a.py": ""}, "t", "/testbed",
      "/testbed/pyproject.toml")],
)  # fmt: skip
def test_rootdir_and_configfile_match_pytest(tmp_path, files, target, rootdir, configfile):
    root = make_workspace(tmp_path, {**files, "t/test_a.py": "def test_a():\n    pass\n"})
    facts = facts_for(root, tmp_path, ["pytest", target])
    assert (facts.rootdir, facts.configfile) == (rootdir, configfile)
    out, _, _ = real_run(root, tmp_path, ["pytest", target])
    assert f"rootdir: {rootdir}\n" in out
    if configfile:
        assert f"configfile: {os.path.relpath(configfile, rootdir)}\n" in out
    else:
        assert "configfile:" not in out


def test_cwd_relative_ids(tmp_path):
    root = make_workspace(
        tmp_path, {"pytest.ini": "[pytest]\n", "tests/test_a.py": "def test_a():\n    pass\n"}
    )
    facts = facts_for(root, tmp_path, ["pytest", "test_a.py"], cwd="/testbed/tests")
    assert facts.collected_tests == ("tests/test_a.py::test_a",)
    assert facts.cwd_relative(facts.collected_tests[0]) == "test_a.py::test_a"


@pytest.mark.slow
def test_collection_of_a_large_package_matches_pytest(tmp_path):
    """sympy's own test directories (plain functions, classes, parametrize, skips,
    a conftest that modifies items), when sympy is installed here."""
    sympy = pytest.importorskip("sympy")
    pytest.importorskip("hypothesis", reason="sympy's conftest.py requires hypothesis")
    root = tmp_path / "repo"
    shutil.copytree(
        Path(sympy.__file__).parent,
        root / "sympy",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (root / "setup.py").write_text("")
    for target in ("sympy/sets/tests", "sympy/utilities/tests"):
        facts = facts_for(root, tmp_path, ["pytest", target], installed=["mpmath"])
        assert list(facts.collected_tests) == real_collect(root, tmp_path, [target])
        assert not facts.collection_exact  # sympy's conftest.py defines collection hooks


# --------------------------------------------------------------------------- the toy repo


def _toy_tasks() -> list[dict]:
    path = toy_data_dir() / "tasks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _apply(root: Path, patch: str) -> None:
    subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=patch.encode(),
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_toy_repo_collection_matches_pytest(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    facts = facts_for(root, tmp_path, ["pytest"])
    assert facts.collection_exact
    assert list(facts.collected_tests) == real_collect(root, tmp_path, [])
    assert facts.configfile == "/testbed/pyproject.toml"


@pytest.mark.parametrize("index", range(4))
def test_toy_tasks_collection_matches_pytest(tmp_path, index):
    task = _toy_tasks()[index]
    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    _apply(root, task["test_patch"])
    facts = facts_for(root, tmp_path, ["pytest"])
    assert list(facts.collected_tests) == real_collect(root, tmp_path, [])
    tests = json.loads(task["FAIL_TO_PASS"]) + json.loads(task["PASS_TO_PASS"])
    assert set(tests) <= set(facts.collected_tests)
    # The tests of the task's own files, as SWE-bench runs them.
    files = sorted({t.split("::")[0] for t in tests})
    facts = facts_for(root, tmp_path, ["python", "-m", "pytest", "-rA", *files])
    assert list(facts.collected_tests) == real_collect(root, tmp_path, files)
