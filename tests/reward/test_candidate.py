"""view_candidate: parsing, applying to a copy of the base, fragments, bad input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweworld.reward.candidate import (
    is_test_file,
    parse_hunks,
    patch_hunks,
    view_candidate,
    view_gold,
)
from sweworld.tasks.patches import split_patch
from tests.reward.stages import diff, make_repo, toy_base, write

MOD = """\
def add(a, b):
    return a + b


def sub(a, b):
    return a - b
"""

PYPROJECT = """\
[project]
name = "demo"
version = "0.1"

[tool.pytest.ini_options]
addopts = "-q"
testpaths = ["tests"]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": MOD,
            "tests/test_mod.py": "from pkg.mod import add\n\n\ndef test_add():\n"
            "    assert add(1, 2) == 3\n",
            "README.md": "# demo\n",
            "pyproject.toml": PYPROJECT,
        },
    )


def test_modified_file_files_scope(repo: Path) -> None:
    new = MOD.replace("return a - b", "return a - b  # fixed\n\n\ndef mul(a, b):\n    return a * b")
    write(repo, {"pkg/mod.py": new})
    patch = diff(repo)
    view = view_candidate(patch, base_dir=repo)
    assert view.scope == "files" and view.apply_error is None and view.parse_error is None
    (changed,) = view.files
    assert changed.path == "pkg/mod.py" and changed.status == "modified"
    assert changed.is_python and not changed.is_test and changed.error is None
    assert changed.before == MOD and changed.after == new
    assert changed.before_fragments and changed.after_fragments
    assert "def mul(a, b):\n" in changed.after_fragments[0]
    assert "def mul" not in changed.before_fragments[0]
    assert "    return a - b\n" in changed.before_fragments[0]
    # the base checkout is untouched
    assert (repo / "pkg/mod.py").read_text() == MOD


def test_hunks_scope_without_base(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("a + b", "b + a"), "pkg/new.py": "X = 1\n"})
    write(repo, {"README.md": None})
    view = view_candidate(diff(repo))
    assert view.scope == "hunks" and view.apply_error is None
    by_path = {f.path: f for f in view.files}
    assert set(by_path) == {"pkg/mod.py", "pkg/new.py", "README.md"}
    assert by_path["pkg/mod.py"].before is None and by_path["pkg/mod.py"].after is None
    assert by_path["pkg/mod.py"].before_fragments[0].count("a + b") == 1
    assert by_path["pkg/new.py"].status == "added" and by_path["pkg/new.py"].after == "X = 1\n"
    assert by_path["README.md"].status == "deleted" and by_path["README.md"].before == "# demo\n"


def test_rename_with_change(repo: Path) -> None:
    (repo / "pkg/mod.py").rename(repo / "pkg/ops.py")
    write(repo, {"pkg/ops.py": MOD + "\n\ndef neg(a):\n    return -a\n"})
    view = view_candidate(diff(repo), base_dir=repo)
    (changed,) = view.files
    assert changed.status == "renamed" and changed.old_path == "pkg/mod.py"
    assert changed.path == "pkg/ops.py"
    assert changed.before == MOD and changed.after is not None and "def neg" in changed.after


def test_added_and_deleted_with_base(repo: Path) -> None:
    write(repo, {"pkg/extra.py": "Y = 2\n", "README.md": None})
    view = view_candidate(diff(repo), base_dir=repo)
    assert view.scope == "files"
    by_path = {f.path: f for f in view.files}
    assert by_path["pkg/extra.py"].before is None and by_path["pkg/extra.py"].after == "Y = 2\n"
    assert by_path["README.md"].before == "# demo\n" and by_path["README.md"].after is None


def test_no_newline_at_end_and_crlf(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "x = 1\r\ny = 2\r\n", "b.txt": "one\ntwo"})
    write(repo, {"a.py": "x = 1\r\ny = 3\r\n", "b.txt": "one\nthree"})
    patch = diff(repo)
    assert "No newline at end of file" in patch
    for base in (repo, None):
        view = view_candidate(patch, base_dir=base)
        by_path = {f.path: f for f in view.files}
        assert by_path["b.txt"].after_fragments[-1].endswith("three")
        if base is not None:
            assert by_path["a.py"].after == "x = 1\r\ny = 3\r\n"
            assert by_path["b.txt"].after == "one\nthree"


def test_empty_and_whitespace() -> None:
    for patch in (None, "", "  \n\n"):
        view = view_candidate(patch)
        assert view.empty and view.files == [] and view.parse_error is None


@pytest.mark.parametrize(
    "patch",
    [
        "this is not a diff\nat all\n",
        "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n x\n-y\n",  # truncated hunk
        "@@ -1 +1 @@\n-a\n+b\n",  # hunk without header
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -one +two @@\n-a\n+b\n",
    ],
)
def test_garbage_gives_parse_error(patch: str, repo: Path) -> None:
    view = view_candidate(patch, base_dir=repo)
    assert view.parse_error and not view.empty
    assert view.scope == "hunks"


@pytest.mark.parametrize(
    "path", ["../evil.py", "pkg/../../evil.py", "/tmp/evil_swr.py", ".git/hooks/post-checkout"]
)
def test_paths_escaping_the_repo_are_refused(path: str, repo: Path) -> None:
    patch = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+print('pwned')\n"
    if path.startswith("/"):
        patch = f"--- /dev/null\n+++ {path}\n@@ -0,0 +1 @@\n+print('pwned')\n"
    view = view_candidate(patch, base_dir=repo)
    assert view.parse_error and "unsafe path" in view.parse_error
    assert view.files and view.files[0].error and view.files[0].after is None
    assert not (repo.parent / "evil.py").exists()
    assert not Path("/tmp/evil_swr.py").exists()
    assert not (repo / ".git/hooks/post-checkout").exists()


def test_patch_that_does_not_apply(repo: Path) -> None:
    patch = (
        "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
        "@@ -1,2 +1,2 @@\n def mul(a, b):\n-    return a * b\n+    return b * a\n"
    )
    view = view_candidate(patch, base_dir=repo)
    assert view.scope == "hunks"
    assert view.apply_error and "does not apply" in view.apply_error
    assert "git apply" in view.apply_error and "patch" in view.apply_error
    (changed,) = view.files
    assert changed.before is None and changed.after is None
    assert changed.before_fragments == ["def mul(a, b):\n    return a * b\n"]
    assert changed.after_fragments == ["def mul(a, b):\n    return b * a\n"]


def test_missing_file_and_existing_added_file(repo: Path) -> None:
    missing = "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"
    view = view_candidate(missing, base_dir=repo)
    assert view.apply_error and "nope.py" in view.apply_error
    exists = "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+hello\n"
    view = view_candidate(exists, base_dir=repo)
    assert view.apply_error and "already exists" in view.apply_error


def test_offset_and_fuzz_fallbacks(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("a - b", "a - b - 0")})
    patch = diff(repo)
    # offset: the base has two more lines at the top than the patch expects
    write(repo, {"pkg/mod.py": "import os\nimport sys\n" + MOD})
    view = view_candidate(patch, base_dir=repo)
    assert view.scope == "files", view.apply_error
    assert view.files[0].after == "import os\nimport sys\n" + MOD.replace("a - b", "a - b - 0")
    # fuzz: a context line differs; git apply refuses, patch --fuzz accepts
    write(repo, {"pkg/mod.py": MOD.replace("def sub(a, b):", "def sub(a, b):  # minus")})
    view = view_candidate(patch, base_dir=repo)
    assert view.scope == "files", view.apply_error
    assert view.files[0].after is not None and "a - b - 0" in view.files[0].after
    assert "# minus" in view.files[0].after


def test_binary_patches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"img.bin": b"\x00\x01\x02" * 10, "a.py": "x = 1\n"})
    for extra in ((), ("--binary",)):
        write(repo, {"img.bin": b"\x00\x09\x02" * 12, "a.py": "x = 2\n"})
        git_patch = diff(repo, *extra)
        assert ("GIT binary patch" in git_patch) == bool(extra)
        view = view_candidate(git_patch, base_dir=repo)
        by_path = {f.path: f for f in view.files}
        assert by_path["img.bin"].binary and by_path["img.bin"].error
        assert by_path["img.bin"].before is None and by_path["img.bin"].after is None
        assert by_path["a.py"].after == "x = 2\n" and view.scope == "files"


def test_non_utf8_and_huge_files(tmp_path: Path) -> None:
    latin = "x = 'caf\xe9'\ny = 1\n".encode("latin-1")
    repo = make_repo(tmp_path / "r", {"legacy.py": latin, "big.py": "z = 0\n" * 100})
    write(repo, {"legacy.py": latin.replace(b"y = 1", b"y = 2"), "big.py": "z = 1\n" * 100})
    patch = diff(repo)
    view = view_candidate(patch, base_dir=repo, max_file_bytes=300)
    by_path = {f.path: f for f in view.files}
    assert by_path["legacy.py"].error and "UTF-8" in by_path["legacy.py"].error
    assert by_path["legacy.py"].after is None and by_path["legacy.py"].before is None
    assert by_path["big.py"].error and "too large" in by_path["big.py"].error
    assert by_path["big.py"].after is None
    assert view.scope == "files"
    # the same patch with a generous limit: big.py is read
    view = view_candidate(patch, base_dir=repo)
    assert {f.path: f for f in view.files}["big.py"].after == "z = 1\n" * 100


def test_unreadable_base_dir(tmp_path: Path) -> None:
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    view = view_candidate(patch, base_dir=tmp_path / "does-not-exist")
    assert view.apply_error and view.scope == "hunks"


def test_is_test_rules(repo: Path) -> None:
    pytest_part = PYPROJECT.replace('addopts = "-q"', 'addopts = "-q -p no:cacheprovider"')
    write(repo, {"pyproject.toml": pytest_part})
    view = view_candidate(diff(repo), base_dir=repo)
    assert view.files[0].is_test
    assert view_candidate(diff_of(repo, pytest_part)).files[0].is_test  # hunks only
    write(repo, {"pyproject.toml": PYPROJECT.replace('version = "0.1"', 'version = "0.2"')})
    view = view_candidate(diff(repo), base_dir=repo)
    assert not view.files[0].is_test
    for path in ("conftest.py", "tox.ini", "pytest.ini", "tests/runtests.py", "noxfile.py"):
        assert is_test_file(path), path
    assert is_test_file("tests/test_mod.py") and not is_test_file("pkg/mod.py")
    assert not is_test_file("setup.cfg")


def diff_of(repo: Path, pyproject: str) -> str:
    write(repo, {"pyproject.toml": pyproject})
    return diff(repo)


def test_parse_hunks_and_patch_hunks(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("a + b", "a + b + 0").replace("a - b", "a - b - 0")})
    patch = diff(repo, "-U1")
    (part,) = split_patch(patch)
    hunks = parse_hunks(part.text)
    assert len(hunks) == 2
    assert hunks[0].removed == ["    return a + b\n"] and hunks[0].added == [
        "    return a + b + 0\n"
    ]
    assert hunks[1].old_start == 5 and hunks[1].new_start == 5
    assert patch_hunks(patch)["pkg/mod.py"] == hunks
    assert patch_hunks("garbage") == {} and patch_hunks(None) == {}


def test_toy_gold_patches(toy_tasks, tmp_path: Path) -> None:
    for task in toy_tasks:
        base = toy_base(task, tmp_path / task.instance_id)
        start = time.perf_counter()
        view = view_gold(task, base)
        elapsed = time.perf_counter() - start
        assert view is not None and view.scope == "files", view and view.apply_error
        assert elapsed < 1.0
        for changed in view.files:
            assert changed.before == (base / changed.path).read_text()
            assert changed.after is not None and changed.after != changed.before
            assert not changed.is_test and changed.is_python
        tests = view_candidate(task.test_patch, base_dir=base)
        assert tests.scope == "files" and all(f.is_test for f in tests.files)
    assert view_gold({"patch": ""}) is None


def test_session_manager_checkout_as_base(manager, toy_task) -> None:
    base = manager.checkout(toy_task, history="none").path
    view = view_gold(toy_task, base)
    assert view is not None and view.scope == "files" and view.apply_error is None


def test_lone_surrogates_and_unreadable_base_files(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch = "--- /dev/null\n+++ b/pkg/odd.py\n@@ -0,0 +1 @@\n+x = '\ud800'\n"
    for base in (None, repo):
        view = view_candidate(patch, base_dir=base)
        assert view.parse_error is None and view.patch == patch
        (changed,) = view.files
        assert changed.after is None and changed.error and "UTF-8" in changed.error

    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    unreadable = (
        "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-def add(a, b):\n+def add(a, c):\n"
    )
    view = view_candidate(unreadable, base_dir=repo)
    assert view.scope == "hunks" and view.apply_error and "PermissionError" in view.apply_error
    assert view.files[0].after is None and view.files[0].after_fragments == ["def add(a, c):\n"]
