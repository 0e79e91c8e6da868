"""Parsing model outputs, checking predictions, and the fallback.

The checks are exercised both ways: on broken predictions (each check must fire) and on
real outputs (each check must stay silent): real runs of the toy repository made here with
``subprocess`` (full facts, workspace view), and the real outputs recorded in the shared
mini-swe-agent trajectories (the repositories are not available, so only the checks that
do not need them can speak; the measured false-alarm rates are printed).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.facts import Facts, compute_facts, parse_command
from sweworld.transition.types import Prediction, WorkspaceView
from sweworld.transition.validate import (
    FALLBACK_EXIT_CODE,
    FALLBACK_MARKER,
    MAX_OUTPUT_CHARS,
    check_prediction,
    conservative_prediction,
    parse_prediction,
    parse_pytest_summary,
)

WORKDIR = "/testbed"

# --------------------------------------------------------------------------- helpers


def make_workspace(tmp_path: Path, files: dict[str, str], base: Path | None = None) -> Path:
    root = tmp_path / "repo"
    if base is not None:
        shutil.copytree(base, root)
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


REAL_ENV = {"PYTEST_ADDOPTS": "-p no:cacheprovider"}


def real_run(root: Path, tmp_path: Path, argv, cwd: str = WORKDIR) -> Prediction:
    """Run ``argv`` for real on a copy of the workspace (paths mapped back to /testbed)."""
    copy = tmp_path / "real" / "testbed"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(root, copy)
    argv = list(argv)
    if argv[0] == "pytest":
        command, executable = [sys.executable, "-m", "pytest", *argv[1:]], None
    else:
        command, executable = argv, sys.executable
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "LANG": "C.UTF-8",
        **REAL_ENV,
    }
    proc = subprocess.run(
        command,
        executable=executable,
        cwd=str(copy) + cwd[len(WORKDIR) :],
        capture_output=True,
        env=env,
        timeout=120,
    )

    def fix(data: bytes) -> str:
        return data.decode("utf-8", "replace").replace(str(copy), WORKDIR)

    return Prediction(stdout=fix(proc.stdout), stderr=fix(proc.stderr), exit_code=proc.returncode)


def request_for(argv, cwd: str = WORKDIR) -> ExecutionRequest:
    return ExecutionRequest(argv=tuple(argv), cwd=cwd, env=dict(REAL_ENV))


def codes(issues) -> set[str]:
    return {issue.code for issue in issues}


# --------------------------------------------------------------------------- parse_prediction

PARSE_CASES = [
    # (model text, (stdout, stderr, exit_code) or None, repairs that must be reported)
    ('{"stdout": "hi\\n", "stderr": "", "exit_code": 0}', ("hi\n", "", 0), []),
    (
        'Sure! Here is the output:\n```json\n{"stdout": "a", "stderr": "", "exit_code": "1"}\n'
        "```\nHope this helps",
        ("a", "", 1),
        ["exit_code given as a string"],
    ),
    (
        '{"stdout": "line1\\nline2',
        ("line1\nline2", "", 0),
        ["unterminated string closed", "unterminated object closed"],
    ),
    (
        '{"stdout": "x", "stderr": "Traceback (most recent call last):\\n  File \\"a.py\\"',
        ("x", 'Traceback (most recent call last):\n  File "a.py"', 1),
        ["exit_code missing: inferred 1"],
    ),
    (
        "{'stdout': 'x', 'stderr': None, 'exit_code': 0,}",
        ("x", "", 0),
        ["single quotes converted", "Python literals converted", "trailing commas removed"],
    ),
    (
        '{"stdout": "x", "stderr": "", "exit_code": 0} and then {more text',
        ("x", "", 0),
        ["text after the object ignored"],
    ),
    (
        '```json\n{\n  "reasoning": "it fails",\n  "stdout": "F\\n",\n  "stderr": "",\n'
        '  "exit_code": 1\n}',
        ("F\n", "", 1),
        [],
    ),
    ("no json here at all", None, []),
    ("", None, []),
    ('{"unrelated": 1}', None, []),
    ('{"stdout": "C:\\path\\d", "exit_code": 2}', ("C:\\path\\d", "", 2), ["invalid escapes kept"]),
    (
        '{"stdout": "multi\nline", "stderr": "", "exit_code": 0}',
        ("multi\nline", "", 0),
        ["raw control characters in strings kept"],
    ),
    ('{"result": {"stdout": "nested", "stderr": "", "exit_code": 3}}', ("nested", "", 3), []),
    ('{stdout: "bare keys", exit_code: 0}', ("bare keys", "", 0), ["unquoted keys quoted"]),
    (
        '{"stdout": ["a", "b"], "stderr": "", "returncode": 1}',
        ("a\nb\n", "", 1),
        ["'returncode' read as exit_code", "stdout given as a list of lines"],
    ),
    (
        'I think {this} is it: {"stdout": "ok", "stderr": "", "exit_code": 0}',
        ("ok", "", 0),
        [],
    ),
    (
        '{"stdout": """triple\nquoted""", "exit_code": True}',
        ("triple\nquoted", "", 1),
        ["triple-quoted strings converted", "exit_code given as a boolean"],
    ),
    ('{"stdout": "\\ud83d\\ude00", "exit_code": 0}', ("\U0001f600", "", 0), []),
    ('{"stdout": "", "stderr": "", "exit_code": 1.0}', ("", "", 1), ["exit_code given as a float"]),
    ('{"stdout": "", "exit_code": "exit 2"}', None, []),
    (
        '```\n{"stdout": "x", "stderr": "", "exit_code": 0, // a comment\n}\n```',
        ("x", "", 0),
        ["comments removed"],
    ),
    (
        '{"stdout": "1 passed", "stderr": "", "exit_code": 0, "stdout_extra": [1, 2',
        ("1 passed", "", 0),
        ["unterminated array closed", "unterminated object closed"],
    ),
    (
        '<think>reasoning {not json}</think>\n```json\n{"stdout": "", "stderr": "E", '
        '"exit_code": 2}\n```',
        ("", "E", 2),
        [],
    ),
    ('{"stdout": "a" "stderr": "b", "exit_code": 4}', ("a", "b", 4), ["missing commas added"]),
    (
        '{"stdout": "x", "stderr": "", "exit_code": 0}\n{"stdout": "y", "exit_code": 1}',
        ("x", "", 0),
        ["text after the object ignored"],
    ),
    (
        '{"output": "merged", "exit_code": 0}',
        ("merged", "", 0),
        ["'output' read as stdout"],
    ),
]


@pytest.mark.parametrize(("text", "expected", "repairs"), PARSE_CASES)
def test_parse_prediction(text, expected, repairs):
    pred, made = parse_prediction(text)
    if expected is None:
        if text == '{"stdout": "", "exit_code": "exit 2"}':
            # Readable fields with an unreadable exit code: kept, the code inferred.
            assert pred is not None and pred.exit_code == 0
            assert "exit_code unreadable: inferred 0" in made
            return
        assert pred is None
        assert made
        return
    assert pred is not None, made
    assert (pred.stdout, pred.stderr, pred.exit_code) == expected
    for repair in repairs:
        assert repair in made, made


def test_parse_prediction_keeps_reasoning():
    pred, _ = parse_prediction('{"reasoning": "why", "stdout": "", "stderr": "", "exit_code": 0}')
    assert pred.reasoning == "why"


def test_parse_prediction_truncated_long_output():
    body = "x" * 5000
    pred, made = parse_prediction('```json\n{"stdout": "' + body)
    assert pred.stdout == body and "unterminated string closed" in made


# --------------------------------------------------------------------------- pytest summaries


@pytest.mark.parametrize(
    ("line", "counts", "no_tests"),
    [("============ 1 failed, 3 passed in 1.83 seconds ============", {"failed": 1, "passed": 3},
      False),
     ("2 passed, 651 deselected, 13 warnings in 0.76s", {"passed": 2, "deselected": 651,
                                                         "warnings": 13}, False),
     ("=== 1 passed, 1 skipped, 1 xfailed, 1 error in 0.5s (0:00:01) ===",
      {"passed": 1, "skipped": 1, "xfailed": 1, "error": 1}, False),
     ("============================ no tests ran in 0.01s =============================", {}, True),
     ("=========================== 2 errors in 0.26 seconds ============================",
      {"error": 2}, False)],
)  # fmt: skip
def test_parse_pytest_summary(line, counts, no_tests):
    summary = parse_pytest_summary("collected 4 items\n\n" + line + "\n")
    assert summary.counts == counts
    assert summary.no_tests is no_tests
    assert summary.collected == 4


# --------------------------------------------------------------------------- checks that fire


@pytest.fixture
def toy(tmp_path):
    root = make_workspace(tmp_path, {}, base=toy_data_dir() / "repo")
    return root, view_of(root, tmp_path)


def _facts(root, tmp_path, argv, **kw):
    request = request_for(argv)
    return request, compute_facts(request, view_of(root, tmp_path), **kw)


def test_generic_checks_fire(tmp_path):
    facts = Facts(command=parse_command(["python", "x.py"]))
    assert "exit_code_range" in codes(check_prediction(Prediction(exit_code=300), facts))
    assert "exit_code_range" in codes(check_prediction(Prediction(exit_code=-1), facts))
    big = Prediction(stdout="x" * (MAX_OUTPUT_CHARS + 1))
    assert "output_too_long" in codes(check_prediction(big, facts))
    assert check_prediction(Prediction(stdout="x" * 10), facts, max_chars=5)


def test_traceback_with_exit_0(tmp_path):
    code = "x = 1\nraise ValueError('boom')\n"
    request = ExecutionRequest(argv=("python", "-c", code))
    facts = Facts(command=parse_command(request.argv))
    tb = (
        'Traceback (most recent call last):\n  File "<string>", line 2, in <module>\n'
        "ValueError: boom\n"
    )
    assert "traceback_with_exit_0" in codes(
        check_prediction(Prediction(stderr=tb, exit_code=0), facts, request)
    )
    assert not check_prediction(Prediction(stderr=tb, exit_code=1), facts, request)
    # A program that prints tracebacks itself may exit 0 after one.
    code = "import traceback\ntry:\n    1 / 0\nexcept Exception:\n    traceback.print_exc()\n"
    request = ExecutionRequest(argv=("python", "-c", code))
    facts = Facts(command=parse_command(request.argv))
    assert not check_prediction(Prediction(stderr=tb, exit_code=0), facts, request)
    # Without the source, nothing is claimed.
    facts = Facts(command=parse_command(["python", "x.py"]))
    assert not check_prediction(Prediction(stderr=tb, exit_code=0), facts)


def test_error_line_with_exit_0(tmp_path, toy):
    root, view = toy
    request, facts = _facts(root, tmp_path, ["pytest", "nope.py"])
    pred = Prediction(stderr="ERROR: file or directory not found: nope.py\n", exit_code=0)
    assert "error_with_exit_0" in codes(check_prediction(pred, facts, request, view))


def test_contradicts_exact(tmp_path):
    root = make_workspace(tmp_path, {"a.py": ""})
    request, facts = _facts(root, tmp_path, ["python", "nope.py"], python_version="3.9.7")
    view = view_of(root, tmp_path)
    exact = facts.exact
    assert exact is not None and exact.exit_code == 2
    assert not check_prediction(exact, facts, request, view)
    assert "contradicts_exact" in codes(
        check_prediction(Prediction(stdout="done\n"), facts, request, view)
    )
    wrong_text = Prediction(stderr="python: can't open file 'nope.py'\n", exit_code=2)
    assert "contradicts_exact" in codes(check_prediction(wrong_text, facts, request, view))


def test_pytest_summary_and_exit_code(tmp_path, toy):
    root, view = toy
    request, facts = _facts(root, tmp_path, ["pytest", "tests/test_money.py", "-x"])
    failed = Prediction(stdout="=== 1 failed, 3 passed in 0.1s ===\n", exit_code=0)
    assert "pytest_failures_with_exit_0" in codes(check_prediction(failed, facts, request, view))
    passed = Prediction(stdout="=== 4 passed in 0.1s ===\n", exit_code=1)
    assert "pytest_passed_with_nonzero_exit" in codes(
        check_prediction(passed, facts, request, view)
    )
    none = Prediction(stdout="=== no tests ran in 0.1s ===\n", exit_code=0)
    assert "pytest_no_tests_with_exit_0" in codes(check_prediction(none, facts, request, view))
    odd = Prediction(stdout="=== 4 passed in 0.1s ===\n", exit_code=17)
    assert "pytest_exit_code" in codes(check_prediction(odd, facts, request, view))


def test_pytest_counts_and_ids(tmp_path, toy):
    root, view = toy
    request, facts = _facts(
        root, tmp_path, ["pytest", "-rA", "tests/test_money.py", "-k", "format"]
    )
    assert len(facts.collected_tests) == 5 and facts.collection_exact
    good = real_run(root, tmp_path, request.argv)
    assert not check_prediction(good, facts, request, view)
    wrong_count = Prediction(
        stdout=good.stdout.replace("4 passed", "7 passed").replace("5 passed", "7 passed"),
        exit_code=good.exit_code,
    )
    assert "pytest_count_mismatch" in codes(check_prediction(wrong_count, facts, request, view))
    wrong_collected = Prediction(
        stdout=re.sub(r"collected \d+ items", "collected 99 items", good.stdout),
        exit_code=good.exit_code,
    )
    assert "pytest_collected_mismatch" in codes(
        check_prediction(wrong_collected, facts, request, view)
    )
    invented = Prediction(
        stdout=good.stdout + "PASSED tests/test_money.py::test_format[7-$0.07]\n"
        "FAILED tests/test_money.py::test_does_not_exist - AssertionError\n",
        exit_code=good.exit_code,
    )
    issues = check_prediction(invented, facts, request, view)
    assert "unknown_test_id" in codes(issues)
    assert "test_does_not_exist" in next(i.message for i in issues if i.code == "unknown_test_id")
    deselected = Prediction(
        stdout=good.stdout.replace(" deselected", " deselected").replace(
            f"{facts.deselected} deselected", "3 deselected"
        ),
        exit_code=good.exit_code,
    )
    assert "pytest_deselected_mismatch" in codes(check_prediction(deselected, facts, request, view))


def test_traceback_files_and_lines(tmp_path, toy):
    root, view = toy
    request, facts = _facts(root, tmp_path, ["python", "-c", "import stockroom"])
    lines = len((root / "stockroom" / "money.py").read_text().splitlines())
    bad = Prediction(
        stderr='Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        '  File "/testbed/stockroom/nothere.py", line 3, in <module>\n'
        f'  File "/testbed/stockroom/money.py", line {lines + 40}, in f\n'
        "ValueError: x\n",
        exit_code=1,
    )
    issues = check_prediction(bad, facts, request, view)
    (issue,) = [i for i in issues if i.code == "traceback_file"]
    assert "nothere.py does not exist" in issue.message
    assert f"has {lines} lines" in issue.message
    good = Prediction(
        stderr='Traceback (most recent call last):\n  File "/testbed/stockroom/money.py", line 3,'
        " in <module>\nValueError: x\n",
        exit_code=1,
    )
    assert not check_prediction(good, facts, request, view)


def test_module_exists(tmp_path, toy):
    root, view = toy
    request, facts = _facts(root, tmp_path, ["python", "-c", "import os\nos.getcwd()"])
    assert facts.exact is None
    pred = Prediction(
        stderr="ModuleNotFoundError: No module named 'stockroom.money'\n", exit_code=1
    )
    assert "module_exists" in codes(check_prediction(pred, facts, request, view))
    pred = Prediction(stderr="ModuleNotFoundError: No module named 'stockroom.nope'\n", exit_code=1)
    assert not check_prediction(pred, facts, request, view)


def test_ignored_syntax_error_and_missing_import(tmp_path):
    root = make_workspace(
        tmp_path,
        {
            "bad.py": "def f(:\n",
            "imp.py": "import nomod_xyz\n",
            "tests/test_s.py": "x(\n",
            "pkg/__init__.py": "",
            "pkg/broken.py": "x = (\n",
            "uses_broken.py": "import os\nos.getcwd()\nimport pkg.broken\n",
        },
    )
    view = view_of(root, tmp_path)
    other = "3.8.10" if sys.version_info[:2] != (3, 8) else "3.9.1"
    # Another Python: the syntax error is a fact, but not a certain one.
    request, facts = _facts(root, tmp_path, ["python", "bad.py"], python_version=other)
    assert facts.exact is None and not facts.syntax_errors[0].certain
    assert not check_prediction(Prediction(), facts, request, view)
    # A module the script certainly imports is broken: the script cannot succeed.
    request, facts = _facts(root, tmp_path, ["python", "uses_broken.py"])
    assert facts.exact is None and facts.syntax_errors[0].path == "/testbed/pkg/broken.py"
    assert "syntax_error_ignored" in codes(check_prediction(Prediction(), facts, request, view))
    failed = Prediction(stderr="SyntaxError: '(' was never closed\n", exit_code=1)
    assert not check_prediction(failed, facts, request, view)
    request, facts = _facts(root, tmp_path, ["python", "imp.py"], python_version=other)
    assert "missing_import_ignored" in codes(check_prediction(Prediction(), facts, request, view))
    pred = Prediction(stderr="ModuleNotFoundError: No module named 'nomod_xyz'\n", exit_code=1)
    assert not check_prediction(pred, facts, request, view)
    request, facts = _facts(root, tmp_path, ["pytest", "tests"])
    pred = Prediction(stdout="=== no tests ran in 0.1s ===\n", exit_code=5)
    assert "collection_error_ignored" in codes(check_prediction(pred, facts, request, view))
    pred = Prediction(stdout="=== 1 error in 0.1s ===\n", exit_code=2)
    assert not check_prediction(pred, facts, request, view)


# --------------------------------------------------------------------------- silent on real runs

SCRIPTS = {
    "repro.py": (
        "from stockroom.textutil import slugify\n\nprint(repr(slugify('Hello,  World!')))\n"
    ),
    "raises.py": "from stockroom.money import Money\n\nprint('start')\nMoney(1.5)\n",
    "caught.py": (
        "import traceback\nfrom stockroom.money import Money\n\ntry:\n    Money(1.5)\n"
        "except TypeError:\n    traceback.print_exc()\nprint('done')\n"
    ),
    "to_stderr.py": "import sys\n\nprint('Error: shown on stderr', file=sys.stderr)\n",
    "exits.py": "import sys\n\nprint('a')\nsys.exit(3)\n",
    "missing.py": "import os\nimport nomod_xyz\n",
    "syntax.py": "def f(:\n    pass\n",
    "relimport.py": "from stockroom import nothere\n",
    "thread.py": (
        "import threading\n\ndef boom():\n    raise RuntimeError('in thread')\n\n"
        "t = threading.Thread(target=boom)\nt.start()\nt.join()\n"
    ),
    "tests/test_extra.py": (
        "import pytest\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_n(n):\n"
        "    assert n < 3\n\nclass TestThing:\n    def test_ok(self):\n        pass\n\n"
        "    def test_err(self, missing_fixture):\n        pass\n"
    ),
}

COMMANDS = [
    ["pytest"],
    ["pytest", "-rA"],
    ["python", "-m", "pytest", "tests/test_money.py", "-v"],
    ["pytest", "-x", "-q"],
    ["pytest", "-k", "format or slugify", "-rA"],
    ["pytest", "tests/test_money.py::test_format", "tests/test_extra.py::TestThing"],
    ["pytest", "--co", "-q"],
    ["pytest", "nope.py"],
    ["pytest", "tests/test_textutil.py", "-k", "nothing_matches"],
    ["pytest", "tests/test_extra.py", "-rA", "--tb=short"],
    *(["python", name] for name in sorted(SCRIPTS) if not name.startswith("tests/")),
    ["python", "-c", "from stockroom.money import Money; print(Money(150))"],
    ["python", "-c", "import stockroom.nope"],
    ["python", "--version"],
]


def _variants(tmp_path: Path) -> dict[str, Path]:
    base = toy_data_dir() / "repo"
    tasks = [json.loads(line) for line in (toy_data_dir() / "tasks.jsonl").read_text().splitlines()]
    out = {}
    root = make_workspace(tmp_path / "base", SCRIPTS, base=base)
    out["base"] = root
    root = make_workspace(tmp_path / "tests", SCRIPTS, base=base)
    for task in tasks:
        _apply(root, task["test_patch"])
    out["test_patches"] = root
    root = make_workspace(tmp_path / "gold", SCRIPTS, base=base)
    for task in tasks:
        _apply(root, task["patch"])
        _apply(root, task["test_patch"])
    out["gold"] = root
    root = make_workspace(tmp_path / "broken", SCRIPTS, base=base)
    money = root / "stockroom" / "money.py"
    money.write_text(money.read_text().replace("def ", "def (", 1))
    out["broken"] = root
    return out


def _apply(root: Path, patch: str) -> None:
    subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=patch.encode(),
        cwd=root,
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
def test_checks_are_silent_on_real_toy_runs(tmp_path):
    """Every check, with full facts and the workspace, on real runs of the toy repository:
    no real output may be flagged."""
    flagged = []
    total = 0
    fired_on_mutants = Counter()
    for name, root in _variants(tmp_path).items():
        view = view_of(root, tmp_path)
        for argv in COMMANDS:
            request = request_for(argv)
            facts = compute_facts(request, view)
            real = real_run(root, tmp_path, argv)
            total += 1
            issues = check_prediction(real, facts, request, view)
            if issues:
                flagged.append((name, argv, [i.message for i in issues], real))
            # The same output with the exit code flipped must usually be caught.
            mutant = Prediction(
                stdout=real.stdout, stderr=real.stderr, exit_code=0 if real.exit_code else 1
            )
            fired_on_mutants[bool(check_prediction(mutant, facts, request, view))] += 1
    print(f"\nreal toy runs: {total}, flagged: {len(flagged)}; exit-code mutants caught: "
          f"{fired_on_mutants[True]}/{total}")  # fmt: skip
    assert not flagged, flagged
    # 60 of 88 here (0.68); 0.77 before the exact answers that never paid on real steps
    # (python --version, interpreted programs, pytest's "no tests ran" / "not found") went
    assert fired_on_mutants[True] >= 0.65 * total


# --------------------------------------------------------------------------- real trajectories

_HEREDOC = re.compile(
    r"cat\s+(?:>\s*(\S+)\s+)?<<\s*-?\s*['\"]?(\w+)['\"]?\s*(?:>\s*(\S+))?\s*\n(.*?)\n\2\s*$",
    re.S | re.M,
)
_READERS = re.compile(r"^(cd /testbed && )?(python3?|pytest|cat|head|tail|grep|ls|nl|sed -n)\b")


def _heredoc_writes(command: str) -> dict[str, str]:
    out = {}
    for match in _HEREDOC.finditer(command):
        path = match.group(1) or match.group(3)
        if path:
            out[posixpath_norm(path)] = match.group(4) + "\n"
    return out


def posixpath_norm(path: str) -> str:
    return os.path.normpath(path if path.startswith("/") else f"{WORKDIR}/{path}")


def _single_argv(command: str) -> list[str] | None:
    """The argv of a command that is one plain execution (no pipe, no chain)."""
    text = re.sub(r"^cd /testbed\s*&&\s*", "", command.strip())
    text = re.sub(r"\s*2>&1\s*$", "", text)
    if re.search(r"[|;&<>`\n]|\$\(", text):
        return None
    try:
        return shlex.split(text)
    except ValueError:
        return None


def _imported_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _trajectory_cases(trajectories):
    """(instance, argv, real output, return code, files the agent wrote and did not change
    since) for every single-command execution step with a complete recorded output."""
    for trajectory in trajectories:
        messages = trajectory["messages"]
        files: dict[str, str] = {}
        stale: set[str] = set()
        for index, message in enumerate(messages[:-1]):
            if message["role"] != "assistant" or not isinstance(message["content"], str):
                continue
            blocks = re.findall(r"```bash\n(.*?)\n```", message["content"], re.S)
            if len(blocks) != 1:
                continue
            command = blocks[0]
            written = _heredoc_writes(command)
            for path in files:
                if (
                    path not in written
                    and os.path.basename(path) in command
                    and not (_READERS.match(command.strip()))
                ):
                    stale.add(path)  # changed by sed, python, ...: the text is not known
            files.update(written)
            stale -= set(written)
            reply = messages[index + 1]["content"]
            if not isinstance(reply, str):
                continue
            match = re.match(
                r"<returncode>(-?\d+)</returncode>\n<output>\n(.*)</output>\s*$", reply, re.S
            )
            if not match:
                continue  # truncated outputs (<output_head> ... <elided_chars>) are skipped
            argv = _single_argv(command)
            if not argv:
                continue
            known = {p: t for p, t in files.items() if p not in stale}
            yield trajectory["instance_id"], argv, match.group(2), int(match.group(1)), known


@pytest.mark.slow
@pytest.mark.shared_data
def test_false_alarm_rate_on_real_trajectory_outputs(mini_swe_agent_trajectories, tmp_path):
    """Real, consistent outputs of real runs must not be flagged.

    The repositories are not in the shared data, so a check that needs them (files in
    tracebacks, modules, collection from the repository's own test files) cannot be run
    and is skipped; what is known is used: the command, the source of scripts and test
    files the agent wrote with a heredoc (and did not change after), and, for pytest on
    such files, their collection. The outputs are stdout and stderr merged: they are
    checked once as stdout and once as stderr (a worst case: ``print`` output taken for
    stderr).
    """
    totals: Counter = Counter()
    flagged: dict[str, list] = {"stdout": [], "stderr": []}
    per_code: Counter = Counter()
    for number, (instance, argv, output, code, files) in enumerate(
        _trajectory_cases(mini_swe_agent_trajectories)
    ):
        info = parse_command(argv)
        if info.kind in ("other", "pip"):
            continue
        workspace = tmp_path / f"w{number}"
        for path, text in files.items():
            if path.startswith(WORKDIR + "/"):
                target = workspace / path[len(WORKDIR) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        workspace.mkdir(exist_ok=True)
        view = WorkspaceView(workspace, tmp=tmp_path, cwd=WORKDIR)
        request = ExecutionRequest(argv=tuple(argv))
        facts = Facts(command=info)
        if info.kind == "python_script" and info.script:
            script = posixpath_norm(info.script)
            if script in files:
                facts = Facts(command=info, executed_files=(script,))
                totals["scripts with known source"] += 1
        targets = info.pytest.targets if info.pytest else ()
        paths = [posixpath_norm(t.split("::")[0]) for t in targets]
        if (
            info.kind == "pytest"
            and targets
            and all(p in files for p in paths)
            and not instance.startswith("pytest-dev__pytest")  # its conftest hooks are unknown
        ):
            names = set().union(*(_imported_names(files[p]) for p in paths))
            full = compute_facts(request, view, installed=names)  # the repo's modules exist
            facts = Facts(
                command=info,
                collected_tests=full.collected_tests,
                collected_total=full.collected_total,
                deselected=full.deselected,
                collection_exact=full.collection_exact,
                rootdir=full.rootdir,
                uncertain_files=full.uncertain_files,
                uncertain_tests=full.uncertain_tests,
                executed_files=full.executed_files,
            )
            totals["pytest runs with collection"] += 1
        totals[info.kind] += 1
        totals["all"] += 1
        for where in ("stdout", "stderr"):
            pred = Prediction(
                stdout=output if where == "stdout" else "",
                stderr=output if where == "stderr" else "",
                exit_code=code,
            )
            issues = check_prediction(
                pred, facts, request, view, skip=("traceback_file", "module_exists")
            )
            if issues:
                flagged[where].append((instance, argv, [i.code for i in issues]))
                per_code.update(f"{where}:{i.code}" for i in issues)
    rate_out = len(flagged["stdout"]) / totals["all"]
    rate_err = len(flagged["stderr"]) / totals["all"]
    print(
        f"\nreal outputs checked: {dict(totals)}\n"
        f"false alarms, output as stdout: {len(flagged['stdout'])} ({rate_out:.2%}); "
        f"as stderr: {len(flagged['stderr'])} ({rate_err:.2%}); by check: {dict(per_code)}"
    )
    assert totals["pytest"] >= 300 and totals["all"] >= 2000
    assert rate_out <= 0.002, flagged["stdout"][:10]
    assert rate_err <= 0.02, flagged["stderr"][:10]


# --------------------------------------------------------------------------- fallback


def test_conservative_prediction_for_pytest(tmp_path, toy):
    root, _ = toy
    request, facts = _facts(root, tmp_path, ["pytest", "tests/test_money.py", "-k", "format"])
    pred = conservative_prediction(request, facts)
    assert pred.exit_code == FALLBACK_EXIT_CODE
    assert pred.reasoning.startswith(FALLBACK_MARKER)
    assert pred.stdout == ""
    assert "could not be simulated" in pred.stderr
    assert "pytest would collect 5 tests" in pred.stderr
    assert "tests/test_money.py::test_format[0-$0.00]" in pred.stderr
    # No outcome is claimed, so a grader finds no passing test in it.
    assert "PASSED" not in pred.stderr and "passed" not in pred.stderr


def test_conservative_prediction_uses_what_is_exact(tmp_path, toy):
    root, _ = toy
    request, facts = _facts(root, tmp_path, ["python", "nope.py"])
    pred = conservative_prediction(request, facts)
    assert (pred.stderr, pred.exit_code) == (facts.exact.stderr, 2)
    assert pred.reasoning.startswith(FALLBACK_MARKER)
    request, facts = _facts(root, tmp_path, ["python"])
    pred = conservative_prediction(request, facts)
    assert "interactive" in pred.stderr and pred.exit_code == 2
    request, facts = _facts(root, tmp_path, ["python", "-c", "import os\nprint(os.getcwd())"])
    pred = conservative_prediction(request, facts)
    assert pred.exit_code == FALLBACK_EXIT_CODE and pred.stdout == ""
    assert conservative_prediction(request, None).exit_code == FALLBACK_EXIT_CODE
