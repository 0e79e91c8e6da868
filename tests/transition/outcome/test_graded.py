"""The task's graded tests on a state: the grader's state and one shared decision."""

from __future__ import annotations

from pathlib import Path

from sweworld.transition.outcome.graded import graded_ids, graded_state, graded_tests
from sweworld.transition.outcome.model import OutcomeModel
from sweworld.transition.outcome.state import FileState

TEST_V0 = "def test_a():\n    assert True\n"
TEST_PATCH = (
    "diff --git a/tests/test_m.py b/tests/test_m.py\n"
    "--- a/tests/test_m.py\n+++ b/tests/test_m.py\n"
    "@@ -1,2 +1,5 @@\n def test_a():\n     assert True\n+\n+def test_b():\n+    assert False\n"
)


def _state(root: Path, now: dict[str, str]) -> FileState:
    return FileState(
        lambda rel: now.get(rel, (root / rel).read_text() if (root / rel).is_file() else None),
        lambda rel: (root / rel).read_text() if (root / rel).is_file() else None,
        list(now),
    )


def test_the_grader_state_resets_test_files_and_applies_the_test_patch(tmp_path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_m.py").write_text(TEST_V0)
    (tmp_path / "m.py").write_text("X = 1\n")
    # the candidate edited the test file and the code
    state = _state(tmp_path, {"tests/test_m.py": "def test_a():\n    pass\n", "m.py": "X = 2\n"})
    graded = graded_state(state, TEST_PATCH)
    assert "def test_b" in graded.text("tests/test_m.py")
    assert "assert True" in graded.text("tests/test_m.py")  # the candidate's edit is reset
    assert graded.text("m.py") == "X = 2\n"  # the code stays the candidate's
    assert set(graded.changed) == {"m.py", "tests/test_m.py"}
    assert graded_state(state, "") is state


def test_graded_ids_put_fail_to_pass_first_without_duplicates() -> None:
    task = {"FAIL_TO_PASS": ["t::b"], "PASS_TO_PASS": ["t::a", "t::b"]}
    assert graded_ids(task) == (["t::b"], ["t::a"])
    assert graded_ids(None) == ([], [])


def test_one_decision_for_one_state(tmp_path) -> None:
    """Asked twice about the same state, the model gives the same statuses; a task without
    FAIL_TO_PASS ids has nothing to decide."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_m.py").write_text(TEST_V0)
    model = OutcomeModel.load(
        Path(__file__).resolve().parents[3] / "sweworld/adapters/outcome-default/model.json"
    )
    task = {
        "FAIL_TO_PASS": ["tests/test_m.py::test_b"],
        "PASS_TO_PASS": ["tests/test_m.py::test_a"],
        "test_patch": TEST_PATCH,
        "patch": "",
    }
    state = graded_state(_state(tmp_path, {}), TEST_PATCH)
    first = graded_tests(model, task, state)
    again = graded_tests(model, task, graded_state(_state(tmp_path, {}), TEST_PATCH))
    assert first is not None and again is not None
    assert first.statuses == again.statuses and first.fails == again.fails
    assert set(first.statuses) == {"tests/test_m.py::test_a", "tests/test_m.py::test_b"}
    assert first.fails == any(s in ("FAILED", "ERROR") for s in first.statuses.values())
    assert 0.0 <= first.p_fails <= 1.0
    assert graded_tests(model, {"FAIL_TO_PASS": []}, state) is None
