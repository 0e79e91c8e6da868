"""The SWT context builder: executed code, related code, budgets, modes, determinism."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.sandbox.workspace import WorkspaceChanges
from sweworld.tasks import Task
from sweworld.transition.context import (
    CONTEXT_FIELDS,
    ORACLE_FIELDS,
    ContextConfig,
    HistoryItem,
    SWTContext,
    approx_tokens,
    build_context,
    truncate_lines,
)
from sweworld.transition.context.related import changed_lines
from sweworld.transition.types import WorkspaceView

PROJECT = Path(__file__).resolve().parents[2]
TOY_REPO = PROJECT / "data" / "toy" / "repo"
MARKER_RE = re.compile(r"^\.\.\. \[(\d+) lines cut\] \.\.\.$")


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


def make_view(
    tmp_path: Path,
    base_files: dict[str, str | bytes] | None = None,
    edits: dict[str, str | bytes | None] | None = None,
    *,
    from_toy: bool = False,
    cwd: str = "/testbed",
) -> WorkspaceView:
    """A workspace in ``tmp_path``: a base checkout and a session copy with ``edits``
    (None deletes), wrapped in a WorkspaceView whose ``changes`` reports the edits."""
    base = tmp_path / "base"
    root = tmp_path / "ws"
    tmp = tmp_path / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    if from_toy:
        shutil.copytree(TOY_REPO, base)
    else:
        base.mkdir(parents=True)
    for rel, content in (base_files or {}).items():
        _write(base / rel, content)
    shutil.copytree(base, root)
    written, deleted = [], []
    for rel, content in (edits or {}).items():
        if content is None:
            (root / rel).unlink()
            deleted.append(rel)
        else:
            _write(root / rel, content)
            written.append(rel)
    changes = WorkspaceChanges(written=tuple(sorted(written)), deleted=tuple(sorted(deleted)))
    return WorkspaceView(root, tmp=tmp, base=base, cwd=cwd, changes=lambda: changes)


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def req(*argv: str, cwd: str = "/testbed", stdin: bytes = b"", **kw) -> ExecutionRequest:
    return ExecutionRequest(argv=tuple(argv), cwd=cwd, stdin=stdin, **kw)


@pytest.fixture(scope="module")
def toy_tasks_list():
    from sweworld.tasks import load_tasks

    return load_tasks(PROJECT / "data" / "toy" / "tasks.jsonl")


@pytest.fixture
def slug_task(toy_tasks_list) -> Task:
    return next(t for t in toy_tasks_list if "slugify" in t.patch)


SLUG_FIX = (
    'return re.sub(r"[^a-z0-9]+", separator, ascii_text.lower()).strip(separator)  # AGENT-EDIT'
)


@pytest.fixture
def toy_view(tmp_path) -> WorkspaceView:
    text = (TOY_REPO / "stockroom" / "textutil.py").read_text()
    old = 'return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
    assert old in text
    return make_view(
        tmp_path,
        edits={"stockroom/textutil.py": text.replace(old, SLUG_FIX)},
        from_toy=True,
    )


def assert_budgets(ctx: SWTContext, config: ContextConfig) -> None:
    count = config.counter
    total = 0
    for name in CONTEXT_FIELDS:
        tokens = count(getattr(ctx, name))
        assert tokens <= config.budget(name), (name, tokens, config.budget(name))
        total += tokens
    assert total <= config.total_tokens, total


def assert_whole_lines(original: str, cut: str) -> None:
    """Every line of ``cut`` is a marker or a whole line of ``original``."""
    source_lines = set(original.split("\n"))
    for line in cut.split("\n"):
        assert MARKER_RE.match(line) or line in source_lines, line


# ------------------------------------------------------------------------------------------
# Truncation
# ------------------------------------------------------------------------------------------


def test_truncate_keeps_head_and_tail_with_a_marker():
    text = "\n".join(f"line {i:03d} " + "x" * 20 for i in range(200))
    out, cut = truncate_lines(text, 300)
    assert approx_tokens(out) <= 300
    lines = out.split("\n")
    assert lines[0] == text.split("\n")[0]
    assert lines[-1] == text.split("\n")[-1]
    markers = [m for m in map(MARKER_RE.match, lines) if m]
    assert len(markers) == 1 and int(markers[0].group(1)) == cut > 0
    assert len(lines) - 1 + cut == 200
    assert_whole_lines(text, out)


def test_truncate_leaves_short_text_alone_and_is_deterministic():
    assert truncate_lines("a\nb\n", 100) == ("a\nb\n", 0)
    text = "\n".join(str(i) * (i % 17 + 1) for i in range(500))
    assert truncate_lines(text, 123) == truncate_lines(text, 123)


def test_truncate_with_a_custom_counter():
    def words(text: str) -> int:
        return len(text.split())

    text = "\n".join("alpha beta gamma delta" for _ in range(100))
    out, cut = truncate_lines(text, 50, words)
    assert words(out) <= 50 and cut > 0
    assert_whole_lines(text, out)


def test_truncate_to_nothing():
    assert truncate_lines("abc\n" * 50, 0) == ("", 50)


# ------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------


def test_config_defaults_and_validation():
    config = ContextConfig()
    assert config.mode == "oracle" and config.history_steps == 3
    assert config.total_tokens == 10000
    blind = sum(config.budget(n) for n in CONTEXT_FIELDS if n not in ORACLE_FIELDS)
    assert blind <= config.total_tokens
    assert config.counter("abcdefgh") == 2
    with pytest.raises(ValueError):
        ContextConfig(mode="gold")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ContextConfig(diff_tokens=-1)
    assert ContextConfig(count_tokens=len).counter("abc") == 3


# ------------------------------------------------------------------------------------------
# The toy repository
# ------------------------------------------------------------------------------------------


def test_toy_test_run_shows_test_diff_and_imported_signatures(toy_view, slug_task):
    ctx = build_context(
        req("python", "-m", "pytest", "tests/test_textutil.py"), toy_view, task=slug_task
    )
    assert ctx.command == "python -m pytest tests/test_textutil.py"
    assert ctx.cwd == "/testbed"
    assert ctx.mode == "oracle"
    # the whole test file, with its sandbox path and line numbers
    assert "==> /testbed/tests/test_textutil.py <== (whole file)" in ctx.executed_code
    assert "def test_wrap_splits_long_words():" in ctx.executed_code
    assert re.search(r"^ ?\d+ def test_slugify_simple_words\(\):$", ctx.executed_code, re.M)
    # the imported module: signatures of its functions, the agent's edit in it
    assert "==> /testbed/stockroom/textutil.py <==" in ctx.related_code
    for sig in (
        'def slugify(text: str, separator: str = "-") -> str:',
        'def truncate(text: str, width: int, placeholder: str = "...") -> str:',
        "def wrap(text: str, width: int) -> list[str]:",
        "def normalize_whitespace(text: str) -> str:",
    ):
        assert sig in ctx.related_code
    assert "AGENT-EDIT" in ctx.related_code
    # the diff section shows the edit
    assert "+++ b/stockroom/textutil.py" in ctx.diff
    assert "AGENT-EDIT" in ctx.diff
    assert '-    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())' in ctx.diff
    assert "slugify() leaves repeated dashes" in ctx.problem
    assert ctx.version and ctx.truncated == {}


def test_determinism(toy_view, slug_task):
    history = [HistoryItem("python -c 'print(1)'", 0, "1\n")]
    args = (req("python", "-m", "pytest", "tests"), toy_view)
    a = build_context(*args, task=slug_task, history=history)
    b = build_context(*args, task=slug_task, history=history)
    assert a == b
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
    oracle = ContextConfig(mode="oracle", total_tokens=3000)
    assert build_context(*args, task=slug_task, config=oracle) == build_context(
        *args, task=slug_task, config=oracle
    )


def test_blind_has_no_oracle_material(toy_view, slug_task):
    secret = "EXTRA-ORACLE-SECRET-1234"
    task = slug_task.model_copy(
        update={"extra": {"prompt": secret, "parsed_commit_content": secret}}
    )
    blind = build_context(
        req("pytest", "tests/test_textutil.py"),
        toy_view,
        task=task,
        config=ContextConfig(mode="blind"),
    )
    assert blind.gold_patch == blind.test_patch == blind.tests == ""
    text = json.dumps(blind.to_dict())
    assert "slug.strip(separator)" not in text  # a line only the gold patch has
    assert "test_slugify_collapses_separators" not in text  # only in test patch / F2P
    assert secret not in text

    oracle = build_context(
        req("pytest", "tests/test_textutil.py"),
        toy_view,
        task=task,
        config=ContextConfig(mode="oracle"),
    )
    assert oracle.mode == "oracle"
    assert "slug.strip(separator)" in oracle.gold_patch
    assert "test_slugify_collapses_separators" in oracle.test_patch
    assert "tests/test_textutil.py::test_slugify_collapses_separators" in oracle.tests
    assert "FAIL_TO_PASS" in oracle.tests and "PASS_TO_PASS" in oracle.tests
    assert secret not in json.dumps(oracle.to_dict())


def test_task_defaults_to_the_requests_task(toy_view, slug_task):
    ctx = build_context(req("pytest", "tests", task=slug_task), toy_view)
    assert "slugify() leaves repeated dashes" in ctx.problem


# ------------------------------------------------------------------------------------------
# Executed code, per kind of command
# ------------------------------------------------------------------------------------------

HELPER = '''"""Helpers."""


def greet(name: str) -> str:
    """Say hello to ``name``.

    More text that is not the first line.
    """
    message = "hello " + name
    return message.upper()


class Counter:
    """Counts things."""

    step = 1

    def bump(self, n: int = 1) -> int:
        """Add ``n``."""
        return n + self.step

    def reset(self):
        return 0
'''

TESTS = """import pytest

from pkg.helper import greet


@pytest.fixture
def name():
    return "bob"


def test_greet(name):
    assert greet(name) == "HELLO BOB"


class TestGroup:
    def setup_method(self):
        self.value = 1

    def test_one(self):
        assert self.value == 1  # BODY-ONE

    @pytest.mark.parametrize("x", [1, 2])
    def test_two(self, x):
        assert x > 0  # BODY-TWO


def test_other():
    assert True  # BODY-OTHER
"""


@pytest.fixture
def pkg_view(tmp_path) -> WorkspaceView:
    return make_view(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/helper.py": HELPER,
            "pkg/main.py": "from pkg.helper import greet\nprint(greet('x'))\n",
            "pkg/__main__.py": "import pkg.main\n",
            "tests/test_helper.py": TESTS,
            "tests/test_more.py": "def test_more():\n    assert 1  # MORE\n",
            "tests/conftest.py": (
                "import pytest\n\n\n@pytest.fixture\ndef shared():\n    return 1\n"
            ),
            "tests/data.txt": "not python\n",
            "scripts/run.py": (
                "import sys\nfrom pkg import helper\nprint(helper.greet(sys.argv[1]))\n"
            ),
        },
    )


def test_script(pkg_view):
    ctx = build_context(req("python", "scripts/run.py", "bob"), pkg_view)
    assert "==> /testbed/scripts/run.py <== (script)" in ctx.executed_code
    assert "print(helper.greet(sys.argv[1]))" in ctx.executed_code
    # imports resolved from the workspace: pkg/helper.py, with signatures and docstrings
    assert "==> /testbed/pkg/helper.py <==" in ctx.related_code
    assert "def greet(name: str) -> str:" in ctx.related_code
    assert '"""Say hello to ``name``.' in ctx.related_code


def test_script_relative_to_cwd_and_absolute(pkg_view):
    a = build_context(req("python3", "run.py", "bob", cwd="/testbed/scripts"), pkg_view)
    b = build_context(req("/usr/bin/python3", "-u", "/testbed/scripts/run.py"), pkg_view)
    for ctx in (a, b):
        assert "==> /testbed/scripts/run.py <== (script)" in ctx.executed_code
    assert a.cwd == "/testbed/scripts"


def test_missing_script_is_noted(pkg_view):
    ctx = build_context(req("python", "nope.py"), pkg_view)
    assert "==> /testbed/nope.py <== (script; no such file)" in ctx.executed_code


def test_dash_c(pkg_view):
    code = "from pkg.helper import Counter\nprint(Counter().bump(2))"
    ctx = build_context(req("python", "-c", code), pkg_view)
    assert "==> python -c <==" in ctx.executed_code
    assert "print(Counter().bump(2))" in ctx.executed_code
    assert "class Counter:" in ctx.related_code
    assert "def bump(self, n: int = 1) -> int:" in ctx.related_code


def test_dash_c_attached_to_flags(pkg_view):
    ctx = build_context(req("python", "-Bc", "import pkg.helper"), pkg_view)
    assert "import pkg.helper" in ctx.executed_code
    assert "def greet" in ctx.related_code


def test_stdin_heredoc_script(pkg_view):
    script = b"from pkg.helper import greet\nprint(greet('heredoc'))\n"
    for argv in (("python", "-"), ("python",), ("python3", "-u")):
        ctx = build_context(req(*argv, stdin=script), pkg_view)
        assert "==> <stdin> <== (script read from stdin)" in ctx.executed_code
        assert "print(greet('heredoc'))" in ctx.executed_code
        assert ctx.stdin == ""  # shown as the script, not twice
        assert "def greet(name: str) -> str:" in ctx.related_code


def test_stdin_data_for_a_script(pkg_view):
    ctx = build_context(req("python", "scripts/run.py", stdin=b"some input\n"), pkg_view)
    assert ctx.stdin == "some input\n"
    binary = build_context(req("python", "scripts/run.py", stdin=b"\0\1\2"), pkg_view)
    assert binary.stdin == "(3 bytes of binary data)"


def test_module(pkg_view):
    ctx = build_context(req("python", "-m", "pkg.main"), pkg_view)
    assert "==> /testbed/pkg/main.py <== (module pkg.main)" in ctx.executed_code
    pkg = build_context(req("python", "-m", "pkg"), pkg_view)
    assert "==> /testbed/pkg/__main__.py <==" in pkg.executed_code


def test_pytest_file(pkg_view):
    ctx = build_context(req("python", "-m", "pytest", "-x", "-q", "tests/test_helper.py"), pkg_view)
    assert "==> /testbed/tests/test_helper.py <== (whole file)" in ctx.executed_code
    for body in ("BODY-ONE", "BODY-TWO", "BODY-OTHER"):
        assert body in ctx.executed_code
    assert "test_more.py" not in ctx.executed_code
    # the conftest of the test's directory is related code
    assert "==> /testbed/tests/conftest.py <== (conftest)" in ctx.related_code
    assert "def greet(name: str) -> str:" in ctx.related_code


def test_pytest_node_id_class_method(pkg_view):
    ctx = build_context(
        req("pytest", "-k", "anything", "tests/test_helper.py::TestGroup::test_two[1]"), pkg_view
    )
    code = ctx.executed_code
    assert "selected: TestGroup.test_two" in code
    assert "BODY-TWO" in code  # the selected test's source
    assert "self.value = 1" in code  # its class's setup
    assert "class TestGroup:" in code
    assert "def test_one(self):" in code  # other tests as signatures only
    assert "BODY-ONE" not in code and "BODY-OTHER" not in code
    assert 'return "bob"' in code  # fixtures in full
    assert "from pkg.helper import greet" in code


def test_pytest_node_id_function_and_class(pkg_view):
    ctx = build_context(
        req("pytest", "tests/test_helper.py::test_other", "tests/test_helper.py::TestGroup"),
        pkg_view,
    )
    code = ctx.executed_code
    assert code.count("==> /testbed/tests/test_helper.py <==") == 1  # merged
    assert "BODY-OTHER" in code and "BODY-ONE" in code and "BODY-TWO" in code
    assert "assert greet(name)" not in code  # test_greet not selected


def test_pytest_unknown_node_shows_whole_file(pkg_view):
    ctx = build_context(req("pytest", "tests/test_helper.py::test_missing"), pkg_view)
    assert "not found in it: test_missing" in ctx.executed_code
    assert "BODY-ONE" in ctx.executed_code


def test_pytest_directory_and_no_arguments(pkg_view):
    for argv in (("pytest", "tests"), ("pytest", "tests/"), ("python", "-m", "pytest")):
        ctx = build_context(req(*argv), pkg_view)
        code = ctx.executed_code
        assert "==> /testbed/tests/test_helper.py <== (whole file)" in code, argv
        assert "==> /testbed/tests/test_more.py <== (whole file)" in code, argv
        assert "MORE" in code
        assert "conftest.py <==" not in code  # not a test file: related code
        assert "data.txt" not in code


def test_pytest_directory_respects_max_files(pkg_view):
    ctx = build_context(req("pytest", "tests"), pkg_view, config=ContextConfig(max_files=2))
    assert ctx.executed_code.count("==> ") == 1
    assert "more test files under /testbed/tests not shown" in ctx.executed_code


def test_unittest_label(tmp_path):
    view = make_view(
        tmp_path,
        {
            "tests/__init__.py": "",
            "tests/test_u.py": (
                "import unittest\n\n\nclass T(unittest.TestCase):\n"
                "    def setUp(self):\n        self.x = 1  # SETUP\n\n"
                "    def test_a(self):\n        self.assertEqual(self.x, 1)  # BODY-A\n\n"
                "    def test_b(self):\n        pass  # BODY-B\n"
            ),
        },
    )
    ctx = build_context(req("python", "-m", "unittest", "-v", "tests.test_u.T.test_a"), view)
    assert "selected: T.test_a" in ctx.executed_code
    assert "BODY-A" in ctx.executed_code and "SETUP" in ctx.executed_code
    assert "BODY-B" not in ctx.executed_code


def test_test_runner_script_labels(tmp_path):
    view = make_view(
        tmp_path,
        {
            "tests/runtests.py": "import sys\n\n\ndef main():\n    return 0  # RUNNER-BODY\n",
            "tests/app/__init__.py": "",
            "tests/app/tests.py": "class AppTests:\n    def test_x(self):\n        pass  # APP-X\n",
        },
    )
    ctx = build_context(req("python", "tests/runtests.py", "app.tests.AppTests.test_x"), view)
    assert "==> /testbed/tests/runtests.py <== (script; signatures)" in ctx.executed_code
    assert "RUNNER-BODY" not in ctx.executed_code
    assert "APP-X" in ctx.executed_code


def test_non_execution_command_has_no_code(pkg_view):
    ctx = build_context(req("pip", "install", "-e", "."), pkg_view)
    assert ctx.executed_code == "" and ctx.command == "pip install -e ."


# ------------------------------------------------------------------------------------------
# Files that are not shown
# ------------------------------------------------------------------------------------------


def test_huge_and_binary_files_are_skipped_with_a_note(tmp_path):
    view = make_view(
        tmp_path,
        {
            "big.py": "x = 1\n" * 400_000,
            "blob.py": b"\x00\x01\x02binary",
            "tests/test_bin.py": b"\xff\xfe\x00",
        },
    )
    big = build_context(req("python", "big.py"), view)
    assert re.search(r"==> /testbed/big.py <== \(script; skipped: [\d,]+ bytes", big.executed_code)
    assert "x = 1" not in big.executed_code
    blob = build_context(req("python", "blob.py"), view)
    assert "==> /testbed/blob.py <== (script; skipped: binary or not UTF-8)" in blob.executed_code
    test = build_context(req("pytest", "tests/test_bin.py"), view)
    assert "(test; skipped: binary or not UTF-8)" in test.executed_code
    for ctx in (big, blob, test):
        assert len(ctx.executed_code.splitlines()) == 1


def test_huge_related_module_is_skipped_with_a_note(tmp_path):
    view = make_view(
        tmp_path,
        {"main.py": "import hugemod\n", "hugemod.py": "y = 2\n" * 300},
    )
    config = ContextConfig(max_file_bytes=1000)
    ctx = build_context(req("python", "main.py"), view, config=config)
    assert "==> /testbed/hugemod.py <== (imported; skipped: 1,800 bytes" in ctx.related_code


# ------------------------------------------------------------------------------------------
# Related code
# ------------------------------------------------------------------------------------------


def test_related_code_outline_first_then_bodies(pkg_view):
    code = "from pkg.helper import greet\nprint(greet('x'))"
    roomy = build_context(req("python", "-c", code), pkg_view)
    assert "return message.upper()" in roomy.related_code  # room for bodies
    tight = build_context(
        req("python", "-c", code), pkg_view, config=ContextConfig(related_tokens=110)
    )
    rel = tight.related_code
    assert approx_tokens(rel) <= 110
    assert "def greet(name: str) -> str:" in rel
    assert "def bump(self, n: int = 1) -> int:" in rel
    assert "More text that is not the first line." not in rel


def test_related_code_prefers_what_the_code_names(pkg_view):
    code = "from pkg.helper import Counter\nCounter().reset()"
    ctx = build_context(
        req("python", "-c", code), pkg_view, config=ContextConfig(related_tokens=120)
    )
    rel = ctx.related_code
    assert "return 0" in rel  # reset's body: named by the code
    assert "return message.upper()" not in rel  # greet's body: not named, no room


def test_related_code_expands_changed_definitions_first(tmp_path):
    edited = HELPER.replace("return n + self.step", "return n + self.step * 2  # CHANGED")
    view = make_view(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/helper.py": HELPER},
        {"pkg/helper.py": edited},
    )
    ctx = build_context(
        req("python", "-c", "import pkg.helper"), view, config=ContextConfig(related_tokens=150)
    )
    assert "# CHANGED" in ctx.related_code
    assert "changed by the agent" in ctx.related_code


def test_related_code_of_a_file_with_a_syntax_error(tmp_path):
    broken = "def ok(a, b):\n    return a\n\n\ndef broken(:\n    pass\n\n\nclass K:\n    pass\n"
    view = make_view(tmp_path, {"mod.py": "x = 1\n", "main.py": "import mod\n"}, {"mod.py": broken})
    ctx = build_context(req("python", "main.py"), view)
    assert "==> /testbed/mod.py <==" in ctx.related_code
    assert "def ok(a, b):" in ctx.related_code


def test_changed_files_not_imported_are_related(pkg_view, tmp_path):
    view = make_view(
        tmp_path / "w2",
        {"a.py": "print(1)\n", "other.py": "def f():\n    return 1\n"},
        {"other.py": "def f():\n    return 2  # EDIT\n"},
    )
    ctx = build_context(req("python", "a.py"), view)
    assert "==> /testbed/other.py <== (changed by the agent)" in ctx.related_code
    assert "# EDIT" in ctx.related_code


def test_deleted_file_in_diff(tmp_path):
    view = make_view(tmp_path, {"gone.py": "x = 1\n", "a.py": "print(1)\n"}, {"gone.py": None})
    ctx = build_context(req("python", "a.py"), view)
    assert "deleted file mode" in ctx.diff or "+++ /dev/null" in ctx.diff


# ------------------------------------------------------------------------------------------
# History, env, facts
# ------------------------------------------------------------------------------------------


def test_history_keeps_the_last_steps(pkg_view):
    history = [HistoryItem(f"python step{i}.py", i, f"out {i}\n") for i in range(6)]
    ctx = build_context(req("python", "-c", "1"), pkg_view, history=history)
    for i in range(3):
        assert f"step{i}.py" not in ctx.history
    for i in range(3, 6):
        assert f"$ python step{i}.py\n(exit code {i})\nout {i}" in ctx.history
    assert ctx.history.index("step3") < ctx.history.index("step5")
    one = build_context(
        req("python", "-c", "1"),
        pkg_view,
        history=[{"command": "a", "exit_code": 1, "output": "x"}, {"command": "b"}],
        config=ContextConfig(history_steps=1),
    )
    assert "$ b" in one.history and "$ a" not in one.history
    none = build_context(
        req("python", "-c", "1"), pkg_view, history=history, config=ContextConfig(history_steps=0)
    )
    assert none.history == ""


def test_history_output_is_cut_head_and_tail(pkg_view):
    output = "\n".join(f"row {i}" for i in range(2000))
    ctx = build_context(
        req("python", "-c", "1"), pkg_view, history=[HistoryItem("python big.py", 1, output)]
    )
    assert "row 0" in ctx.history and "row 1999" in ctx.history
    assert re.search(r"^\.\.\. \[\d+ lines cut\] \.\.\.$", ctx.history, re.M)
    assert ctx.truncated["history"] > 0


def test_env(pkg_view):
    ctx = build_context(req("python", "-c", "1", env={"B": "2", "A": "1"}), pkg_view)
    assert ctx.env == "A=1\nB=2"


@dataclass(frozen=True)
class FakeFacts:
    executed_files: tuple[str, ...] = ()
    collected_tests: tuple[str, ...] = ()
    syntax_errors: tuple[str, ...] = ()
    missing_imports: tuple[str, ...] = ()
    exact: bool = False
    notes: dict = field(default_factory=dict)


def test_facts_rendered_and_executed_files_added(pkg_view):
    facts = FakeFacts(
        executed_files=("/testbed/pkg/main.py",),
        collected_tests=("tests/test_more.py::test_more",),
        missing_imports=("numpy",),
    )
    ctx = build_context(req("python", "-c", "1"), pkg_view, facts=facts)
    assert "collected_tests (1):\n  - tests/test_more.py::test_more" in ctx.facts
    assert "missing_imports (1):\n  - numpy" in ctx.facts
    assert "exact" not in ctx.facts  # False / empty values are left out
    assert "==> /testbed/pkg/main.py <== (executed)" in ctx.executed_code
    duck = SimpleNamespace(syntax_errors=["x.py:3: invalid syntax"], exact=True)
    ctx2 = build_context(req("python", "-c", "1"), pkg_view, facts=duck)
    assert "exact: True" in ctx2.facts and "x.py:3: invalid syntax" in ctx2.facts
    assert build_context(req("python", "-c", "1"), pkg_view).facts == ""


# ------------------------------------------------------------------------------------------
# Budgets
# ------------------------------------------------------------------------------------------


def _big_world(tmp_path):
    big_module = "\n\n".join(
        f'def func_{i}(a, b={i}):\n    """Doc {i}."""\n'
        + "".join(f"    x{j} = a + {j}\n" for j in range(12))
        for i in range(80)
    )
    big_test = "from lib import *\n\n" + "\n\n".join(
        f"def test_{i}():\n" + "".join(f"    assert func_{i}({j}) is None\n" for j in range(10))
        for i in range(80)
    )
    edits = {
        "lib.py": big_module.replace("x3 = a + 3", "x3 = a + 333"),
        "tests/test_big.py": big_test,
    }
    view = make_view(tmp_path, {"lib.py": big_module, "tests/test_big.py": "x = 1\n"}, edits)
    task = Task(
        instance_id="o__r-1",
        repo="o/r",
        problem_statement="\n".join(f"problem line {i}" for i in range(2000)),
        patch=_fake_patch("lib.py", 3000),
        test_patch=_fake_patch("tests/test_big.py", 3000),
        FAIL_TO_PASS=[f"tests/test_big.py::test_{i}" for i in range(300)],
        PASS_TO_PASS=[f"tests/test_big.py::test_p{i}" for i in range(300)],
    )
    history = [HistoryItem(f"cmd {i}", 1, "\n".join(f"o{j}" for j in range(900))) for i in range(5)]
    return view, task, history


def _fake_patch(path: str, n: int) -> str:
    body = "".join(f"+line {i}\n" for i in range(n))
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -0,0 +1,{n} @@\n{body}"


@pytest.mark.parametrize("mode", ["blind", "oracle"])
def test_budgets_per_field_and_total(tmp_path, mode):
    view, task, history = _big_world(tmp_path)
    request = req(
        "python", "-m", "pytest", "tests/test_big.py", env={"X": "y" * 5000}, stdin=b"s\n" * 5000
    )
    for config in (
        ContextConfig(mode=mode),
        ContextConfig(mode=mode, total_tokens=4000),
        ContextConfig(
            mode=mode, problem_tokens=50, diff_tokens=80, executed_tokens=120, related_tokens=90
        ),
    ):
        ctx = build_context(request, view, task=task, history=history, config=config)
        assert_budgets(ctx, config)
        assert ctx.truncated["problem"] > 0
        for name in ("problem", "diff", "executed_code", "history"):
            assert MARKER_RE.search(getattr(ctx, name)) or re.search(
                r"^\.\.\. \[\d+ lines cut\] \.\.\.$", getattr(ctx, name), re.M
            ), name
        assert "problem line 0" in ctx.problem and "problem line 1999" in ctx.problem
        if mode == "oracle":
            assert ctx.gold_patch and ctx.tests and ctx.test_patch
            assert "tests/test_big.py::test_0" in ctx.tests
        else:
            assert not (ctx.gold_patch or ctx.tests or ctx.test_patch)


def test_total_cap_shares_in_proportion(tmp_path):
    view, task, history = _big_world(tmp_path)
    config = ContextConfig(mode="oracle", total_tokens=5000)
    ctx = build_context(
        req("pytest", "tests/test_big.py"), view, task=task, history=history, config=config
    )
    counts = ctx.token_counts()
    assert sum(counts.values()) <= 5000
    # big fields shrink together: the executed code keeps more than the problem statement
    assert counts["executed_code"] > counts["problem"] > 0


def test_budgets_with_a_custom_counter(tmp_path):
    view, task, history = _big_world(tmp_path)

    def words(text: str) -> int:
        return len(text.split())

    config = ContextConfig(mode="oracle", count_tokens=words, total_tokens=3000)
    ctx = build_context(
        req("pytest", "tests/test_big.py"), view, task=task, history=history, config=config
    )
    assert_budgets(ctx, config)


def test_truncation_cuts_whole_lines(tmp_path):
    view, task, history = _big_world(tmp_path)
    ctx = build_context(req("pytest", "tests/test_big.py"), view, task=task, history=history)
    assert_whole_lines(task.problem_statement, ctx.problem)
    test_src = (Path(view.root) / "tests" / "test_big.py").read_text().split("\n")
    for line in ctx.executed_code.split("\n")[1:]:
        if MARKER_RE.match(line):
            continue
        number, _, text = line.strip(" ").partition(" ")
        assert (
            test_src[int(number) - 1] == text.rstrip() or test_src[int(number) - 1].strip() == ""
        ), line


def test_long_command_is_cut_by_characters(pkg_view):
    code = "print(" + "1+" * 5000 + "1)"
    ctx = build_context(req("python", "-c", code), pkg_view)
    assert approx_tokens(ctx.command) <= ContextConfig().command_tokens
    assert re.search(r" \.\.\. \[\d+ chars cut\] \.\.\. ", ctx.command)
    assert ctx.command.startswith("python -c 'print(1+1+")


def test_script_named_like_a_test_is_shown_whole(tmp_path):
    view = make_view(tmp_path, {"test_issue.py": "import sys\nprint(sys.argv)  # REPRO\n"})
    ctx = build_context(req("python", "test_issue.py", "arg"), view)
    assert "==> /testbed/test_issue.py <== (script)" in ctx.executed_code
    assert "# REPRO" in ctx.executed_code


def test_tmp_scripts_and_their_imports(tmp_path):
    view = make_view(tmp_path, {"pkg/__init__.py": "", "pkg/helper.py": HELPER})
    assert view.tmp is not None
    (Path(view.tmp) / "repro.py").write_text("from pkg.helper import greet\nprint(greet('a'))\n")
    ctx = build_context(req("python", "/tmp/repro.py"), view)
    assert "==> /tmp/repro.py <== (script)" in ctx.executed_code
    assert "def greet(name: str) -> str:" in ctx.related_code


def test_changed_lines_of_an_agent_diff():
    diff = (
        "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
        "@@ -3,3 +3,4 @@ def f():\n x\n-y\n+Y\n+Z\n z\n"
        "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n"
        "@@ -0,0 +1,2 @@\n+a\n+b\n"
    )
    # removed "y" marks the line where it was (4); "Y" and "Z" are new lines 4 and 5
    assert changed_lines(diff) == {"/testbed/pkg/mod.py": {4, 5}, "/testbed/new.py": {1, 2}}
    assert changed_lines("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n") == {}


def test_state_hash_sees_changes_to_files_too_large_to_hash(tmp_path, monkeypatch):
    """A changed file over the hashing limit still changes the state hash (size and mtime),
    and is never read whole."""
    import os

    import sweworld.transition.types as types

    monkeypatch.setattr(types, "MAX_HASHED_BYTES", 10)
    view = make_view(tmp_path, {"big.bin": "base"}, {"big.bin": "a" * 50})
    before = view.state_hash()
    path = view.root / "big.bin"
    path.write_text("b" * 60)
    os.utime(path, ns=(1, 1))
    assert view.state_hash() != before


def test_view_reads_never_follow_a_link_swapped_in_during_a_command(tmp_path, monkeypatch):
    """While the executor serves a call, other processes of the same command run: a folder
    swapped for a link to a host folder after resolution must not reach the model."""
    import os

    view = make_view(tmp_path, {"pkg/mod.py": "x = 1\n"}, {"pkg/mod.py": "x = 2\n"})
    host = tmp_path / "host"
    host.mkdir()
    (host / "mod.py").write_text("HOST SECRET\n")
    real_resolve = view.paths.resolve

    def resolve_then_swap(path, cwd=None):
        canonical = real_resolve(path, cwd)
        if not (view.root / "pkg").is_symlink():
            os.rename(view.root / "pkg", view.root / "pkg.orig")
            os.symlink(host, view.root / "pkg")
        return canonical

    monkeypatch.setattr(view.paths, "resolve", resolve_then_swap)
    assert view.read_text("/testbed/pkg/mod.py") is None
    assert "HOST SECRET" not in view.diff()
