"""OutcomeExecutor in a real sandbox session on the toy task."""

from __future__ import annotations

import ast
import json
import platform
import re

import pytest

import sweworld.pyast as pyast
from sweworld.execution.log_parsers import parse_pytest_log
from sweworld.sandbox.registry import make_executor
from sweworld.transition.outcome.executor import OutcomeExecutor
from sweworld.transition.outcome.model import OutcomeModel


def last_info(outcome) -> dict:
    return outcome.info["execution_calls"][-1]["info"]


def test_registered_by_short_name(calc_model) -> None:
    ex = make_executor(f"outcome:{calc_model}")
    assert isinstance(ex, OutcomeExecutor) and ex.mode == "oracle"
    with pytest.raises(ValueError, match="mode"):
        OutcomeExecutor(calc_model, mode="psychic")


def test_answers_every_step_from_the_model(manager, toy_task, calc_model) -> None:
    ex = OutcomeExecutor(calc_model, mode="oracle")
    with manager.open(toy_task, executor=ex) as s:
        run = s.run("python -m pytest -rA tests/test_textutil.py")
        info = last_info(run)
        assert info["route"] == "outcome-model" and info["simulated"] is True
        assert info["tests"] > 0 and "latency_s" in info
        statuses = parse_pytest_log(run.stdout)
        assert len(statuses) == info["tests"]
        assert all(t.startswith("tests/test_textutil.py::") for t in statuses)
        failing = any(v in ("FAILED", "ERROR") for v in statuses.values())
        assert run.exit_code == int(failing)
        # the toy task runs on the host: its header names the host's Python release
        assert f"platform linux -- Python {platform.python_version()}, pytest-" in run.stdout
        # a state that breaks the module the tests import
        s.run("echo 'def broken(:' >> stockroom/textutil.py")
        broken = s.run("python -m pytest -rA tests/test_textutil.py")
        assert last_info(broken)["route"] == "outcome-model"
        assert broken.exit_code != 0 or "FAILED" not in broken.stdout
        # a program that imports the module stops at its SyntaxError (exact)
        s.write_file("/testbed/use_it.py", "import stockroom.textutil\nprint('ok')\n")
        for command in ("python use_it.py", "python -c 'import stockroom.textutil'"):
            stopped = s.run(command)
            info = last_info(stopped)
            assert info["route"] == "exact" and info["exception"] == "SyntaxError", command
            assert stopped.exit_code == 1 and stopped.stdout == ""
            assert stopped.stderr.startswith("Traceback (most recent call last):\n")
            assert 'stockroom/textutil.py", line' in stopped.stderr
            assert stopped.stderr.rstrip().endswith("SyntaxError: invalid syntax")
        missing = s.run("python nothere.py")
        assert missing.exit_code == 2 and "can't open file '/testbed/nothere.py'" in missing.stderr
        version = s.run("python --version")
        assert last_info(version)["route"] == "conservative"
        assert "not trained" in last_info(version)["reason"] and version.exit_code == 0


def test_script_and_ledger_text(manager, toy_task, calc_model) -> None:
    ex = OutcomeExecutor(calc_model)
    with manager.open(toy_task, executor=ex) as s:
        cmd = "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'"
        first = s.run(cmd)
        info = last_info(first)
        assert info["kind"] == "python_c" and info["route"] == "outcome-model"
        if first.exit_code:
            assert first.stderr.startswith("Traceback (most recent call last):")
            assert 'File "<string>", line 1, in <module>' in first.stderr
        assert info["text_source"] in ("ledger", "none")
        # exact: a program that does not compile, a script the model never saw is missing
        bad = s.run("python -c 'def f(:'")
        assert bad.exit_code == 1 and "SyntaxError" in bad.stderr
        assert last_info(bad)["route"] == "exact"
        s.run("printf 'print(1)\\n' > r.py")
        untrained = s.run("python r.py")
        assert last_info(untrained)["route"] == "conservative" and untrained.exit_code == 0


def test_pytest_help_and_listings_run_no_tests(manager, toy_task, calc_model) -> None:
    ex = OutcomeExecutor(calc_model, mode="oracle")
    with manager.open(toy_task, executor=ex) as s:
        for cmd in ("python -m pytest --help", "pytest --version", "pytest -h tests"):
            run = s.run(cmd)
            info = last_info(run)
            assert run.exit_code == 0 and info["route"] == "informational"
            assert info["tests"] == 0 and run.stdout == ""
        # the marker and fixture listings run no test: exit 0 (pytest's own exit code even
        # where a test module does not import); a missing target is still exit 4
        for cmd in ("pytest --markers", "pytest --fixtures tests/test_textutil.py",
                    "pytest --fixtures-per-test tests"):  # fmt: skip
            run = s.run(cmd)
            assert run.exit_code == 0 and last_info(run)["route"] == "informational", cmd
        assert s.run("pytest --fixtures nothere.py").exit_code == 4
        # --setup-plan collects and fails on a module that does not import, and a real
        # run: the model decides
        for cmd in ("pytest --setup-plan tests/test_textutil.py", "pytest tests/test_textutil.py"):
            assert last_info(s.run(cmd))["route"] == "outcome-model"
        # every answered step is in the session's ledger, as in the model's training rows
        assert ex._ledger(s.id).steps == 9
        # the trees the steps parsed are shared between steps: none of them was modified
        for path in ("tests/test_textutil.py", "stockroom/textutil.py"):
            text = s.run(f"cat {path}").stdout
            tree = pyast.parse_shared(text)
            assert ast.dump(tree, include_attributes=True) == ast.dump(
                ast.parse(text), include_attributes=True
            )
            for node in ast.walk(tree):  # no attribute added (a parent link, a mark)
                assert set(vars(node)) <= {*node._fields, *node._attributes}


def test_bad_model_file_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"format": "sweworld-outcome-model", "version": 99}))
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        OutcomeExecutor(bad)


def test_other_runners_report_in_their_own_format(manager, toy_task, calc_model) -> None:
    """unittest and SymPy's runner: the tests the command selects, in the runner's format,
    the exit code following the statuses; a runner script that is not there is exact."""
    ex = OutcomeExecutor(calc_model, mode="oracle")
    with manager.open(toy_task, executor=ex) as s:
        run = s.run("python -m unittest -v tests.test_textutil")
        info = last_info(run)
        assert info["kind"] == "unittest" and info["tests"] > 0
        assert f"Ran {info['tests']} tests in" in run.stderr
        assert run.stderr.splitlines()[0].endswith(("... ok", "... FAIL", "... ERROR"))
        assert run.exit_code == int("FAIL" in run.stderr.splitlines()[-1])
        missing = s.run("python bin/test tests/test_textutil.py")
        assert last_info(missing)["route"] == "exact" and missing.exit_code == 2
        s.run("mkdir -p bin && printf 'print(1)\\n' > bin/test")
        sym = s.run("python bin/test tests/test_textutil.py")
        assert last_info(sym)["kind"] == "sympy_test"
        assert "tests finished:" in sym.stdout and "tests/test_textutil.py[" in sym.stdout
        assert sym.exit_code == int("DO *NOT* COMMIT!" in sym.stdout)


def _constant_model(exit_code: str) -> OutcomeModel:
    """A model whose exit head always answers ``exit_code`` (a linear head with a bias)."""
    from sweworld.transition.outcome.features import STEP_FEATURES
    from sweworld.transition.outcome.model import Head

    bias = 9.0 if exit_code == "1" else -9.0
    head = Head({"kind": "linear", "classes": ["0", "1"], "intercept": [bias],
                 "coef": [[0.0] * len(STEP_FEATURES)]})  # fmt: skip
    return OutcomeModel({"exit": head}, {"trained_kinds": ["python_c", "pytest"]})


def test_outcome_lm_writes_text_the_model_decided_on(manager, toy_task, tmp_path) -> None:
    """``outcome-lm``: the LM writes a script's printed text; the outcome model still decides
    the exit code and the traceback (the LM's own exit code and stderr are dropped)."""
    from sweworld.models.replay import ReplayLM
    from sweworld.transition.outcome.executor import outcome_with_lm

    answer = json.dumps({"stdout": "hello---world-\n", "stderr": "", "exit_code": 0})
    passing = _constant_model("0").save(tmp_path / "pass.json")
    failing = _constant_model("1").save(tmp_path / "fail.json")
    made = make_executor("outcome-lm", lm=ReplayLM([answer]), model=str(passing))
    assert isinstance(made, OutcomeExecutor) and made.text is not None
    cmd = "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'"
    for model, code in ((passing, 0), (failing, 1)):
        ex = outcome_with_lm(ReplayLM([answer], cycle=True), "blind", model, step_timeout=30)
        with manager.open(toy_task, executor=ex) as s:
            run = s.run(cmd)
            info = last_info(run)
            assert info["route"] == "outcome-model" and run.exit_code == code
            assert info["text_source"] == "lm" and run.stdout == "hello---world-\n"
            assert run.stderr.startswith("Traceback") == bool(code)
            # a command kind the outcome model was not trained on: the LM route answers
            pip = s.run("pip list")
            assert last_info(pip)["route"] == "lm" and "not trained" in last_info(pip)["reason"]


def test_selection_options_select_the_tests_run(manager, toy_task, calc_model) -> None:
    """-k, --deselect: the run covers the selected tests and says how many were deselected,
    as pytest does."""
    ex = OutcomeExecutor(calc_model)
    with manager.open(toy_task, executor=ex) as s:
        every = parse_pytest_log(s.run("python -m pytest -rA tests/test_textutil.py").stdout)
        chosen = s.run("python -m pytest -rA tests/test_textutil.py -k slugify")
        picked = parse_pytest_log(chosen.stdout)
        assert picked and set(picked) < set(every)
        assert all("slugify" in t for t in picked)
        gone = len(every) - len(picked)
        assert f"{gone} deselected" in chosen.stdout.splitlines()[-1]
        one = sorted(every)[0]
        rest = s.run(f"python -m pytest -rA tests/test_textutil.py --deselect {one}")
        assert set(parse_pytest_log(rest.stdout)) == set(every) - {one}


def test_a_judge_decides_the_graded_tests(manager, toy_task) -> None:
    """One state, one truth: with a judge (the World passes its reward's), a run of the
    task's graded tests shows what the judge decided about the state's diff, asked once per
    state; a judge that breaks, or a step without the time to ask it, leaves the outcome
    model's own decision, said in ``info``."""
    from sweworld.tasks import test_list
    from sweworld.tasks.patches import patch_hunks

    graded = [*test_list(toy_task, "FAIL_TO_PASS"), *test_list(toy_task, "PASS_TO_PASS")]
    files = sorted({t.split("::", 1)[0] for t in graded})
    code_file = next(p for p in patch_hunks(toy_task.patch) if "test" not in p)
    asked: list[str] = []

    def run_with(decision):
        def judge(task, patch):
            asked.append(patch)
            if isinstance(decision, Exception):
                raise decision
            return decision

        with manager.open(toy_task, executor=OutcomeExecutor(mode="oracle", judge=judge)) as s:
            s.write_file("/tmp/tests.diff", toy_task.test_patch)
            assert s.run("git apply /tmp/tests.diff").exit_code == 0  # the grader's tests
            s.run(f"echo 'EXTRA = 1' >> {code_file}")
            first = s.run("python -m pytest -rA " + " ".join(files))
            again = s.run("python -m pytest -rA " + " ".join(files))
            s.run(f"echo 'LATE = 1' >> {code_file}")
            late = s.run("python -m pytest -rA " + " ".join(files), timeout=1)
            assert last_info(late)["graded"]["judge"].startswith("not asked"), last_info(late)
        return first, again

    for decision in (True, False):
        asked.clear()
        first, again = run_with(decision)
        shown = {t: v for t, v in parse_pytest_log(first.stdout).items() if t in graded}
        assert set(shown) == set(graded)
        assert all(v == "PASSED" for v in shown.values()) == decision, shown
        assert first.exit_code == (0 if decision else 1)
        assert last_info(first)["graded"]["judge"] == "decided"
        assert last_info(again)["graded"]["judge"] == "remembered" and len(asked) == 1
        assert f"+++ b/{code_file}" in asked[0] and "+EXTRA = 1" in asked[0]
        assert not any(f"b/{p}" in asked[0] for p in patch_hunks(toy_task.test_patch))
    first, _ = run_with(RuntimeError("judge down"))
    assert last_info(first)["graded"]["judge"].startswith("failed: RuntimeError: judge down")
    assert parse_pytest_log(first.stdout)  # the outcome model's decision stands


def test_pdb_quits_at_the_first_failure(manager, toy_task) -> None:
    """``--pdb`` with capture on: pytest stops at the first failing test, the debugger reads
    the end of stdin and quits, exit 2 (as the real runs recorded do); with ``-s`` the
    recorded runs went on past the prompt, so the run is the plain one."""
    from sweworld.tasks import test_list
    from sweworld.tasks.patches import patch_hunks

    graded = [*test_list(toy_task, "FAIL_TO_PASS"), *test_list(toy_task, "PASS_TO_PASS")]
    files = " ".join(sorted({t.split("::", 1)[0] for t in graded}))
    ex = OutcomeExecutor(mode="oracle", judge=lambda task, patch: False)
    with manager.open(toy_task, executor=ex) as s:
        s.write_file("/tmp/tests.diff", toy_task.test_patch)
        assert s.run("git apply /tmp/tests.diff").exit_code == 0
        code_file = next(p for p in patch_hunks(toy_task.patch) if "test" not in p)
        s.run(f"echo 'EXTRA = 1' >> {code_file}")
        plain = s.run(f"python -m pytest -rA {files}")
        every = parse_pytest_log(plain.stdout)
        assert plain.exit_code == 1 and "FAILED" in every.values()
        stopped = s.run(f"python -m pytest --pdb -rA {files}")
        assert stopped.exit_code == 2 and last_info(stopped)["pdb"] == "quit at the first failure"
        seen = parse_pytest_log(stopped.stdout)
        first_failure = next(t for t, v in every.items() if v == "FAILED")
        assert list(seen)[-1] == first_failure and list(seen.values()).count("FAILED") == 1
        assert set(seen) <= set(every) and all(every[t] == v for t, v in seen.items())
        lines = stopped.stdout.splitlines()
        assert "(Pdb) " in lines and "FAILURES" not in stopped.stdout
        assert "!! _pytest.outcomes.Exit: Quitting debugger !!" in lines[-2]
        assert any(x.startswith("> /testbed/") and x.endswith("()") for x in lines)
        uncaptured = s.run(f"python -m pytest -s --pdb -rA {files}")
        assert uncaptured.exit_code == 1 and "pdb" not in last_info(uncaptured)
        assert parse_pytest_log(uncaptured.stdout) == every


def test_a_missing_test_target_is_pytests_usage_error(manager, toy_task, calc_model) -> None:
    """pytest stops at a file target that does not exist, whatever else it was given:
    exit 4, its header with no test collected, the error on stderr (exact)."""
    ex = OutcomeExecutor(calc_model)
    with manager.open(toy_task, executor=ex) as s:
        for cmd in ("python -m pytest nothere.py", "pytest -q tests/test_textutil.py nothere.py"):
            run = s.run(cmd)
            info = last_info(run)
            assert run.exit_code == 4 and info["route"] == "exact", cmd
            assert run.stderr == "ERROR: file or directory not found: nothere.py\n\n"
            assert run.stdout.splitlines()[-1].strip("= ") == "no tests ran in 0.12s"
        assert "collected 0 items" in s.run("python -m pytest nothere.py").stdout
        verbose = s.run("python3 -m pytest -v nothere.py").stdout.splitlines()
        assert verbose[1].endswith("/bin/python3") and "collecting ... collected 0 items" in verbose
        assert s.run("pytest -q nothere.py").stdout == "\nno tests ran in 0.12s\n"
        assert s.run("python -m pytest tests/test_textutil.py").exit_code in (0, 1)


def test_a_failing_run_shows_the_exception_the_issue_reports(manager, toy_task) -> None:
    """The exception head's generic answer gives way to the exception the problem
    statement names (``info`` says where it came from); without one it stands."""
    from sweworld.tasks import test_list

    graded = [*test_list(toy_task, "FAIL_TO_PASS"), *test_list(toy_task, "PASS_TO_PASS")]
    files = " ".join(sorted({t.split("::", 1)[0] for t in graded}))
    reported = toy_task.model_copy(
        update={"problem_statement": "Looking up a missing item raises KeyError: 'x'."}
    )
    for task, expected in ((reported, "KeyError"), (toy_task, None)):
        ex = OutcomeExecutor(mode="oracle", judge=lambda task, patch: False)
        with manager.open(task, executor=ex) as s:
            s.write_file("/tmp/tests.diff", task.test_patch)
            assert s.run("git apply /tmp/tests.diff").exit_code == 0
            run = s.run(f"python -m pytest -rA {files}")
            info = last_info(run)
            assert run.exit_code == 1, run.stdout[-500:]
            if expected is None:
                assert "exception_source" not in info
                continue
            assert info["exception"] == expected
            assert info["exception_source"] == "problem statement"
            assert f"E       {expected}" in run.stdout
            assert f" - {expected}" in run.stdout.split("short test summary info")[1]
