"""A prediction for a test runner must look like that runner's output and use its exit
codes: garbage answers for ``python -m pytest tests -rA`` (no pytest output, exit codes
100, 255, 7) are rejected; real outputs are accepted (real runs here; the real trajectory
outputs in ``test_validate.py`` measure the false alarms)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.facts import compute_facts
from sweworld.transition.types import Prediction, WorkspaceView
from sweworld.transition.validate import check_prediction
from sweworld.transition.validate.runners import (
    PYTEST_EXIT_CODES,
    SIGNAL_EXIT_CODES,
    runner_of,
)
from tests.transition.test_validate import real_run

PYTEST = ["python", "-m", "pytest", "tests", "-rA"]
INSTALLED = frozenset({"django", "sympy", "pytest"})


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, WorkspaceView]:
    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    (tmp_path / "sandbox-tmp").mkdir()
    return root, WorkspaceView(root, tmp=tmp_path / "sandbox-tmp", cwd="/testbed")


def issues_for(view: WorkspaceView, argv, pred: Prediction, env=None) -> set[str]:
    request = ExecutionRequest(argv=tuple(argv), cwd="/testbed", env=dict(env or {}))
    facts = compute_facts(request, view, installed=INSTALLED)
    return {i.code for i in check_prediction(pred, facts, request, view)}


def garbage_answers(count: int, seed: int = 0) -> list[Prediction]:
    """Answers a small model writes when it does not know the format: prose, echoes of the
    prompt, bare counts, JSON fragments, with any exit code."""
    rng = random.Random(seed)
    words = ["passed", "failed", "tests", "ok", "error", "the", "output", "python", "3",
             "collected", "items", "stockroom", "return", "PASSED", "in", "0.1s"]  # fmt: skip
    texts = [
        "", "3 passed\n", "All tests passed!\n", "OK\n", "hello world\n", "tests/\n",
        "collected 5 items\n", "PASSED\n", '{"tests": "ok"}\n', "...\n", "1 failed\n",
        "tests passed successfully\n", "Running tests...\nDone.\n",
    ]  # fmt: skip
    out = []
    for _ in range(count):
        if rng.random() < 0.5:
            text = rng.choice(texts)
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) + "\n"
        code = rng.choice([0, 0, 0, 1, 1, 2, 4, 5, 7, 100, 127, 255, rng.randint(0, 255)])
        where = rng.random()
        out.append(
            Prediction(
                stdout=text if where < 0.7 else "",
                stderr=text if where >= 0.7 else "",
                exit_code=code,
            )
        )
    return out


def test_garbage_answers_for_a_pytest_run_are_rejected(toy):
    _, view = toy
    accepted = [pred for pred in garbage_answers(300) if not issues_for(view, PYTEST, pred)]
    # A garbage answer may only pass by being killed by a signal (which may print anything).
    assert all(pred.exit_code in SIGNAL_EXIT_CODES for pred in accepted), accepted[:5]


@pytest.mark.parametrize("code", [100, 255, 7, 6, 127])
def test_exit_codes_pytest_never_uses_are_rejected(toy, code):
    _, view = toy
    summary = "============================== 55 passed in 0.51s ==============================\n"
    pred = Prediction(stdout=summary, exit_code=code)
    assert "pytest_exit_code" in issues_for(view, PYTEST, pred)


def test_answers_without_pytest_output_are_rejected(toy):
    _, view = toy
    answers = (("3 passed\n", 0), ("", 0), ("All tests passed\n", 0), ("1 failed\n", 1),
               ("", 5), ("something\n", 3), ("fine\n", 4), ("an error\n", 2))  # fmt: skip
    for stdout, code in answers:
        found = issues_for(view, PYTEST, Prediction(stdout=stdout, exit_code=code))
        assert "not_runner_output" in found, (stdout, code)


def test_the_summary_must_agree_with_the_exit_code(toy):
    _, view = toy
    pred = Prediction(stdout="=== 55 passed, 1 skipped in 0.1s ===\n", exit_code=1)
    assert {"pytest_exit_1_without_failures", "pytest_passed_with_nonzero_exit"} & issues_for(
        view, PYTEST, pred
    )
    pred = Prediction(stdout="=== 2 skipped in 0.1s ===\n", exit_code=1)
    assert "pytest_exit_1_without_failures" in issues_for(view, PYTEST, pred)
    pred = Prediction(stdout="=== 3 failed, 52 passed in 0.1s ===\n", exit_code=5)
    assert "pytest_exit_5_with_tests" in issues_for(view, PYTEST, pred)


def test_real_pytest_outputs_are_accepted(toy, tmp_path):
    root, view = toy
    for argv in (PYTEST, ["pytest", "-q", "tests/test_money.py"], ["pytest", "-qq", "tests"],
                 ["pytest", "--co", "-q", "tests"], ["pytest", "nothere.py"],
                 ["pytest", "tests", "-k", "nomatch"], ["pytest", "--version"],
                 ["pytest", "-p", "no:terminal", "tests"]):  # fmt: skip
        real = real_run(root, tmp_path, argv)
        assert real.exit_code in PYTEST_EXIT_CODES
        assert not issues_for(view, argv, real), (argv, real)
    # A session killed by a signal may have printed anything.
    assert not issues_for(view, PYTEST, Prediction(stdout="collecting ...", exit_code=137))
    # `pytest` missing from the environment, `python -m pytest` likewise, pytest crashing.
    missing = Prediction(stderr="bash: line 1: pytest: command not found\n", exit_code=127)
    assert not issues_for(view, ["pytest", "tests"], missing)
    missing = Prediction(stderr="/usr/bin/python: No module named pytest\n", exit_code=1)
    assert not issues_for(view, PYTEST, missing)
    crash = Prediction(
        stderr='Traceback (most recent call last):\n  File "/usr/bin/pytest", line 5, in '
        "<module>\n    from pytest import main\nImportError: cannot import name 'main'\n",
        exit_code=1,
    )
    assert not issues_for(view, ["pytest", "tests"], crash)
    colored = (
        "\x1b[32m====== \x1b[32m\x1b[1m55 passed\x1b[0m\x1b[32m in 0.5s\x1b[0m"
        "\x1b[32m ======\x1b[0m\n"
    )
    assert not issues_for(view, PYTEST, Prediction(stdout=colored, exit_code=0))


# --------------------------------------------------------------------------- Django, SymPy


DJANGO_RUNTESTS = (
    "import sys\nfrom django.test.utils import get_runner\n"
    "def main():\n    failures = get_runner(None)().run_tests(sys.argv[1:])\n"
    "    sys.exit(bool(failures))\nmain()\n"
)
DJANGO_OK = (
    "Testing against Django installed in '/testbed/django' with up to 8 processes\n"
    "System check identified no issues (0 silenced).\n...\n"
    "----------------------------------------------------------------------\n"
    "Ran 3 tests in 0.012s\n\nOK\n"
)
DJANGO_FAILED = DJANGO_OK.replace("\nOK\n", "\nFAILED (failures=1)\n")
SYMPY_TEST = "#!/usr/bin/env python\nimport sys\nimport sympy\nsys.exit(not sympy.test())\n"
SYMPY_OK = (
    "============================= test process starts ==============================\n"
    "executable:         /usr/bin/python  (3.9.0-final-0) [CPython]\n\n"
    "sympy/core/tests/test_basic.py[3] ...                                         [OK]\n\n"
    "================== tests finished: 3 passed, in 0.12 seconds ===================\n"
)
SYMPY_FAILED = SYMPY_OK.replace("3 passed", "2 passed, 1 failed") + "DO *NOT* COMMIT!\n"


def test_django_and_sympy_runners(toy):
    root, view = toy
    (root / "tests" / "runtests.py").write_text(DJANGO_RUNTESTS)
    (root / "bin").mkdir()
    (root / "bin" / "test").write_text(SYMPY_TEST)
    django = ["python", "tests/runtests.py", "auth_tests"]
    sympy = ["python", "bin/test", "sympy/core"]
    request = ExecutionRequest(argv=tuple(django), cwd="/testbed")
    assert runner_of(compute_facts(request, view), request, view) == "django"
    request = ExecutionRequest(argv=tuple(sympy), cwd="/testbed")
    assert runner_of(compute_facts(request, view), request, view) == "sympy"
    cases = [
        (django, DJANGO_OK, 0, set()),
        (django, DJANGO_FAILED, 1, set()),
        (django, "OK\n", 0, {"not_runner_output"}),
        (django, "3 passed\n", 0, {"not_runner_output"}),
        (django, DJANGO_OK, 5, {"runner_exit_code"}),
        (django, DJANGO_FAILED, 255, {"runner_exit_code"}),
        (sympy, SYMPY_OK, 0, set()),
        (sympy, SYMPY_FAILED, 1, set()),
        (sympy, "all good\n", 0, {"not_runner_output"}),
        (sympy, SYMPY_OK, 3, {"runner_exit_code"}),
    ]
    for argv, stdout, code, expected in cases:
        found = issues_for(view, argv, Prediction(stdout=stdout, exit_code=code))
        assert expected <= found and (expected or not found), (argv, stdout[:20], code, found)
    # A runtests.py that is not Django's is an ordinary script.
    (root / "tests" / "runtests.py").write_text("import sys\nprint(sys.argv)\nsys.exit(3)\n")
    found = issues_for(view, django, Prediction(stdout="['x']\n", exit_code=3))
    assert not found & {"not_runner_output", "runner_exit_code", "python_exit_code"}


# --------------------------------------------------------------------------- Python


def test_python_exit_codes(toy):
    _, view = toy
    program = ["python", "-c", "import stockroom; print(stockroom.__name__)"]
    for code in (100, 7, 255, 3):
        found = issues_for(view, program, Prediction(stdout="stockroom\n", exit_code=code))
        assert "python_exit_code" in found, code
    for code in (0, 1, 2, 120, 130, 137, 139):
        found = issues_for(view, program, Prediction(stdout="stockroom\n", exit_code=code))
        assert "python_exit_code" not in found, code
    own = ["python", "-c", "import sys, stockroom; sys.exit(stockroom.CODE)"]
    found = issues_for(view, own, Prediction(exit_code=100))
    assert "python_exit_code" not in found  # the program chooses its exit code


def test_real_python_and_pytest_outputs_in_json_answers_parse_and_pass(toy, tmp_path):
    from sweworld.transition.validate import parse_prediction

    root, view = toy
    real = real_run(root, tmp_path, PYTEST)
    text = json.dumps({"stdout": real.stdout, "stderr": real.stderr, "exit_code": real.exit_code})
    pred, _ = parse_prediction(text)
    assert pred is not None and not issues_for(view, PYTEST, pred)


def test_a_configuration_that_silences_pytest_is_read(toy):
    root, view = toy
    empty = Prediction(stdout="", exit_code=0)
    assert "not_runner_output" in issues_for(view, PYTEST, empty)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    assert "[tool.pytest.ini_options]" in text and "addopts" not in text
    pyproject.write_text(text.replace("[tool.pytest.ini_options]\n",
                                      '[tool.pytest.ini_options]\naddopts = "-qq"\n'))  # fmt: skip
    assert "not_runner_output" not in issues_for(view, PYTEST, empty)
    # ... as does the environment (PYTEST_ADDOPTS) and a plugin option.
    pyproject.write_text(text)
    assert not issues_for(view, PYTEST, empty, env={"PYTEST_ADDOPTS": "-q -q"})
    assert not issues_for(view, [*PYTEST, "-p", "no:terminal"], empty)
