"""Tasks made by the factory find their repository beside their task file, or through
``--repo-cache``; a task whose repository is nowhere is an error that says so."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sweworld.cli import main

from .conftest import requires_sandbox

pytestmark = requires_sandbox


def _git(*args: str, cwd: Path) -> str:
    who = {"NAME": "t", "EMAIL": "t@t"}
    env = {
        **os.environ,
        **{f"GIT_{r}_{k}": v for r in ("AUTHOR", "COMMITTER") for k, v in who.items()},
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _factory_layout(root: Path) -> tuple[Path, str]:
    """``root/out/tasks.jsonl`` and ``root/out/repos/local__minilib.git`` as make-tasks
    writes them; the task's id."""
    src = root / "src"
    src.mkdir(parents=True)
    (src / "minilib.py").write_text("def add(a, b):\n    return a + b\n")
    _git("init", "-q", "-b", "main", cwd=src)
    _git("add", ".", cwd=src)
    _git("commit", "-qm", "base", cwd=src)
    commit = _git("rev-parse", "HEAD", cwd=src)
    out = root / "out"
    (out / "repos").mkdir(parents=True)
    _git("clone", "-q", "--bare", str(src), str(out / "repos" / "local__minilib.git"), cwd=root)
    row = {
        "instance_id": "local__minilib-factory-1",
        "repo": "local/minilib",
        "base_commit": commit,
        "problem_statement": "add() is wrong",
        "patch": "",
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
    }
    (out / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    return out, row["instance_id"]


@pytest.fixture
def no_repo_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWEWORLD_REPO_CACHE", raising=False)
    yield
    os.environ.pop("SWEWORLD_REPO_CACHE", None)  # main() sets it for its process


def test_factory_tasks_find_their_repository_beside_the_task_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_repo_cache: None
) -> None:
    out, task_id = _factory_layout(tmp_path)
    actions = tmp_path / "a.jsonl"
    actions.write_text(json.dumps("cat minilib.py") + "\n")
    argv = ["run", "--file", str(out / "tasks.jsonl"), "--id", task_id, "--actions", str(actions)]
    assert main(argv) == 0
    assert "return a + b" in capsys.readouterr().out


def test_repo_cache_option_when_the_task_file_is_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_repo_cache: None
) -> None:
    out, task_id = _factory_layout(tmp_path)
    moved = tmp_path / "elsewhere" / "tasks.jsonl"
    moved.parent.mkdir()
    (out / "tasks.jsonl").rename(moved)
    actions = tmp_path / "a.jsonl"
    actions.write_text(json.dumps("cat minilib.py") + "\n")
    argv = ["run", "--file", str(moved), "--id", task_id, "--actions", str(actions)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no local copy of repository 'local/minilib'" in err
    os.environ.pop("SWEWORLD_REPO_CACHE", None)
    assert main([*argv, "--repo-cache", str(out / "repos")]) == 0
    assert "return a + b" in capsys.readouterr().out


def test_grade_says_why_the_tests_did_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_repo_cache: None
) -> None:
    out, task_id = _factory_layout(tmp_path)
    moved = tmp_path / "tasks.jsonl"
    (out / "tasks.jsonl").rename(moved)
    assert main(["grade", "--file", str(moved), "--id", task_id]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)[task_id]["resolved"] is False
    # the last line (a logging handler an earlier test left on a closed stream may write
    # before it in a full run)
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("sweworld: error: the tests did not run: ")
    assert "no local copy of repository 'local/minilib'" in last


def test_a_repo_cache_that_is_not_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["tasks", "list", "--repo-cache", str(tmp_path / "nope")]
    assert main(argv) == 2
    assert "--repo-cache" in capsys.readouterr().err
