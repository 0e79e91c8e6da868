"""Features of a command on a state: exact, and bounded on big inputs."""

from __future__ import annotations

from pathlib import Path

from sweworld.transition.outcome.features import (
    MAX_REACHED,
    STEP_FEATURES,
    TEST_FEATURES,
    Ledger,
    command_kind_of,
    per_test_features,
    reachability,
    step_features,
)
from sweworld.transition.outcome.programs import changed_names
from sweworld.transition.outcome.state import FileState

from .conftest import BROKEN, BUG, IDS


def _values(step) -> dict[str, float]:
    return dict(zip(STEP_FEATURES, step.values, strict=True))


def test_command_kinds() -> None:
    cases = {
        ("python", "-m", "pytest", "-x", "t.py"): "pytest",
        ("pytest", "-k", "foo"): "pytest",
        ("python", "x.py"): "python_script",
        ("python3", "-c", "print(1)"): "python_c",
        ("python", "-m", "pkg.tool"): "python_module",
        ("python", "tests/runtests.py", "admin"): "django_runtests",
        ("pip", "install", "x"): "other",
        ("python", "--version"): "other",
    }
    for argv, kind in cases.items():
        assert command_kind_of(argv) == kind, argv


def test_state_features_of_a_bug_and_its_fix(calc_data) -> None:
    repo: Path = calc_data["repo"]
    # the "gold" change here is BUG itself (any change on the clean base does)
    task = {"patch": BUG, "FAIL_TO_PASS": [IDS[0]], "PASS_TO_PASS": IDS[1:]}
    argv = ["python", "-m", "pytest", "-x", f"{IDS[0]}"]
    base = _values(step_features(argv, "/testbed", FileState.from_diff(repo, ""), task))
    assert base["kind_pytest"] == 1 and base["n_node_ids"] == 1 and base["exitfirst"] == 1
    assert base["n_changed_files"] == 0 and base["reaches_changed"] == 0
    assert base["n_selected_f2p"] == 1 and base["n_selected_p2p"] == 0
    assert base["state_is_gold"] == 0 and base["state_is_base_on_gold"] == 1
    buggy = FileState.from_diff(repo, BUG)
    step = step_features(argv, "/testbed", buggy, task)
    v = _values(step)
    assert v["n_changed_py"] == 1 and v["n_changed_defs"] == 1
    assert step.changed_defs == {"pkg/calc.py": {"add"}}
    assert v["reaches_changed"] == 1 and v["reach_depth"] == 1  # test -> pkg.calc
    assert v["gold_file_overlap"] == 1 and v["gold_def_overlap"] == 1
    assert v["state_is_gold"] == 1 and v["state_is_base_on_gold"] == 0
    blind = _values(step_features(argv, "/testbed", buggy, task, oracle=False))
    assert blind["oracle"] == 0 and blind["n_selected_f2p"] == 0 and blind["gold_file_overlap"] == 0
    assert blind["reaches_changed"] == 1  # the state's features do not need the oracle
    ledger = Ledger()
    ledger.record("python -m pytest -x tests/test_calc.py::test_add", 1, {IDS[0]: "FAILED"})
    per_test = dict(zip(TEST_FEATURES, per_test_features(step, IDS[0], buggy, ledger), strict=True))
    assert per_test["t_in_f2p"] == 1 and per_test["t_base_status"] == 1
    assert per_test["t_prev_status"] == 1 and per_test["t_reaches_changed"] == 1
    broken = _values(step_features(argv, "/testbed", FileState.from_diff(repo, BROKEN), task))
    assert broken["changed_unparsable"] == 1 and broken["reached_unparsable"] == 1


def test_changed_names_and_noise() -> None:
    before = "def f():\n    return 1\n\nclass K:\n    def m(self):\n        pass\n"
    after = "def f():\n    return 1  # same AST\n\nclass K:\n    def m(self):\n        return 2\n"
    assert changed_names(before, after) == {"K", "K.m"}
    state = FileState(lambda r: None, lambda r: None, [".pytest_cache/v/x", "a/__pycache__/b.pyc",
                                                       "pkg/a.py"])  # fmt: skip
    assert state.changed == ["pkg/a.py"]


def test_reachability_is_bounded(tmp_path) -> None:
    """A chain of 3 x MAX_REACHED modules: the walk stops at MAX_REACHED."""
    n = 3 * MAX_REACHED
    files = {f"m{i}.py": f"import m{i + 1}\n" for i in range(n)}
    state = FileState(files.get, files.get, [])
    reach, unparsable = reachability(state, ["m0.py"])
    assert len(reach) == MAX_REACHED and not unparsable


def test_huge_diff_stays_linear(calc_data) -> None:
    """A diff adding 2,000 files: features count them without following all of them."""
    parts = [
        f"diff --git a/gen/f{i}.py b/gen/f{i}.py\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/gen/f{i}.py\n@@ -0,0 +1 @@\n+x = {i}\n"
        for i in range(2000)
    ]
    state = FileState.from_diff(calc_data["repo"], "".join(parts))
    v = _values(step_features(["python", "-m", "pytest", "tests"], "/testbed", state))
    assert v["n_changed_files"] == 2000 and v["n_changed_defs"] <= 200


def test_test_runner_kinds_and_their_pytest_equivalents() -> None:
    from sweworld.transition.outcome.features import pytest_equivalent

    cases = {
        ("bin/test", "sympy/core"): ("sympy_test", ["sympy/core"]),
        ("python", "bin/test", "sympy/a/tests/test_b.py"): (
            "sympy_test", ["sympy/a/tests/test_b.py"]
        ),
        ("python", "-m", "unittest", "tests.test_x.Case.test_y"): (
            "unittest", ["tests/test_x.py::Case::test_y"]
        ),
        ("python", "tests/runtests.py", "--settings=test_sqlite", "auth_tests.test_views"): (
            "django_runtests", ["tests/auth_tests/test_views.py"]
        ),
        ("python", "sympy/testing/runtests.py"): ("python_script", None),
    }  # fmt: skip
    for argv, (kind, targets) in cases.items():
        assert command_kind_of(list(argv)) == kind
        equivalent = pytest_equivalent(kind, list(argv))
        assert (equivalent[3:] if equivalent else None) == targets
    assert pytest_equivalent("django_runtests", ["python", "tests/runtests.py", "-k", "x"]) is None
