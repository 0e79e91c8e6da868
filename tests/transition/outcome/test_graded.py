"""The task's graded tests on a state: the grader's state and one shared decision."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_workspace_patch_is_what_git_apply_turns_the_base_into_the_workspace(tmp_path) -> None:
    """Modified (CRLF, form feed, no final newline), new (one empty), deleted files: the
    patch applies with ``git apply`` and gives the workspace's bytes; excluded files and a
    run's leftovers (bytecode, caches) are not in it."""
    import shutil
    import subprocess

    from sweworld.transition.outcome.graded import workspace_patch

    base = _tree(
        tmp_path / "base",
        {
            "pkg/a.py": b"def f():\r\n    return 1\r\n",
            "pkg/b.py": b"X = 1\n\x0cY = 2\n",
            "pkg/gone.py": b"Z = 1\n",
            "tests/test_m.py": TEST_V0.encode(),
        },
    )
    now = {
        "pkg/a.py": b"def f():\r\n    return 2\r\n",
        "pkg/b.py": b"X = 1\n\x0cY = 3",
        "pkg/new.py": b"W = 1\n",
        "pkg/empty.py": b"",
        "tests/test_m.py": b"def test_a():\n    pass\n",
        "pkg/__pycache__/a.cpython-311.pyc": b"\0junk",
    }
    work = tmp_path / "work"
    shutil.copytree(base, work)
    _tree(work, now)
    (work / "pkg/gone.py").unlink()
    paths = [*now, "pkg/gone.py"]
    patch = workspace_patch(work, base, paths, exclude={"tests/test_m.py"})
    assert "tests/test_m.py" not in patch and "__pycache__" not in patch
    check = tmp_path / "check"
    shutil.copytree(base, check)
    subprocess.run(["git", "init", "-q"], cwd=check, check=True)
    (check / "p.diff").write_text(patch, newline="")
    subprocess.run(["git", "apply", "p.diff"], cwd=check, check=True)
    for rel in ("pkg/a.py", "pkg/b.py", "pkg/new.py", "pkg/empty.py"):
        assert (check / rel).read_bytes() == now[rel], rel
    assert not (check / "pkg/gone.py").exists()
    assert workspace_patch(work, base, []) == ""


def test_workspace_patch_hunk_headers_are_gits(tmp_path) -> None:
    """The judge reads the text the episode's reward reads (``git diff``): hunk headers
    carry git's default function context, which the verdict's evidence reads."""
    import subprocess

    from sweworld.transition.outcome.graded import workspace_patch

    old = (
        "import os\n\n\nclass Inventory:\n    def a(self):\n        return 1\n\n"
        "    def b(self):\n        x = 1\n        y = 2\n        z = 3\n        return x\n"
        + "".join(f"\n\ndef f{i}():\n    return {i}\n" for i in range(6))
    )
    new = old.replace("y = 2", "y = 5").replace("return 3", "return 30")
    new += "\n\ndef _unused_helper():\n    return None\n"
    base = _tree(tmp_path / "base", {"pkg/m.py": old.encode()})
    work = _tree(tmp_path / "work", {"pkg/m.py": new.encode()})
    git = ["git", "-C", str(base), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(base)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (base / "pkg/m.py").write_text(new)
    real = subprocess.run([*git, "diff"], capture_output=True, text=True, check=True).stdout
    (base / "pkg/m.py").write_text(old)
    ours = workspace_patch(work, base, ["pkg/m.py"])

    def headers(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("@@")]

    assert len(headers(real)) == 3 and headers(ours) == headers(real)
    assert headers(ours)[0].endswith("@@ class Inventory:")


@pytest.mark.parametrize(
    "case", ["symlink", "binary", "huge", "many lines", "not utf-8", "control char"]
)
def test_workspace_patch_refuses_what_is_not_a_text_patch(tmp_path, case) -> None:
    """A judge is not asked about a state that git would not show as text (a link, a binary
    or undecodable file), a file over the size bound, or a name a diff header cannot hold."""
    import os

    from sweworld.transition.outcome import graded

    base = _tree(tmp_path / "base", {"m.py": b"X = 1\n"})
    work = _tree(tmp_path / "work", {"m.py": b"X = 1\n"})
    rel = "m.py"
    if case == "symlink":
        (work / "m.py").unlink()
        os.symlink("/etc/hostname", work / "m.py")
    elif case == "binary":
        (work / "m.py").write_bytes(b"X = 1\0\n")
    elif case == "huge":
        (work / "m.py").write_bytes(b"X = 2\n" * (graded.MAX_JUDGED_FILE_BYTES // 6 + 1))
    elif case == "many lines":
        (work / "m.py").write_bytes(b"\n" * (graded.MAX_JUDGED_FILE_LINES + 1))
    elif case == "not utf-8":
        (work / "m.py").write_bytes(b"X = '\xff'\n")
    else:
        rel = "m\n.py"
        (work / rel).write_bytes(b"X = 1\n")
    assert graded.workspace_patch(work, base, [rel]) is None


def test_reconcile_statuses_follows_the_decision() -> None:
    from sweworld.transition.outcome.graded import reconcile_statuses

    task = {"FAIL_TO_PASS": ["t::b"], "PASS_TO_PASS": ["t::a"]}
    statuses = {"t::a": "FAILED", "t::b": "PASSED", "t::other": "FAILED"}
    assert reconcile_statuses(statuses, task, True) == {
        "t::a": "PASSED",
        "t::b": "PASSED",
        "t::other": "FAILED",  # not graded: kept
    }
    assert reconcile_statuses({"t::a": "PASSED", "t::b": "PASSED"}, task, False)["t::b"] == "FAILED"
    assert reconcile_statuses(statuses, task, False) == statuses  # a failure is already there
