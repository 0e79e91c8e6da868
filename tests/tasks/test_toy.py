"""The toy repository and its tasks, checked with real git and real pytest runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from sweworld.tasks import toy
from sweworld.tasks.schema import SWEBENCH_FIELDS

TASKS = toy.load_toy_tasks()
TASK_IDS = [task["instance_id"] for task in TASKS]
SWE_BENCH_FIELDS = set(SWEBENCH_FIELDS)
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture(scope="module")
def git_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("git-home")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy.build_toy_repo(tmp_path_factory.mktemp("toy") / "stockroom")


@pytest.fixture
def git(git_home: Path):
    """Run git with no user or system configuration; return stdout."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(HOME=str(git_home), GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")

    def run(repo: Path, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=repo, env=env, input=stdin, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"git {args}: {proc.stderr}"
        return proc.stdout

    return run


def _files_in_diff(diff: str) -> list[str]:
    return sorted(set(re.findall(r"^diff --git a/(\S+) b/", diff, flags=re.MULTILINE)))


def _run_pytest(repo: Path, *args: str) -> dict[str, str]:
    """Run the toy suite in ``repo``; map node id -> PASSED/FAILED/ERROR from ``-rA``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    # The toy suite needs no plugins; not loading them (hypothesis, ...) saves seconds.
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status == "PASSED":
            outcomes[rest.strip()] = status
        elif status in ("FAILED", "ERROR"):
            outcomes[rest.split(" - ", 1)[0].strip()] = status
    assert outcomes, proc.stdout + proc.stderr
    return outcomes


def test_tasks_have_the_swe_bench_schema() -> None:
    assert [task["instance_id"] for task in TASKS] == [
        f"sweworld__stockroom-{number}" for number in range(1, 5)
    ]
    created = []
    for task in TASKS:
        assert set(task) == SWE_BENCH_FIELDS
        assert all(isinstance(value, str) for value in task.values())
        assert task["repo"] == toy.TOY_REPO_NAME == "sweworld/stockroom"
        assert task["version"] == "0.1"
        assert SHA_RE.match(task["base_commit"])
        assert task["environment_setup_commit"] == TASKS[0]["base_commit"]
        assert len(task["problem_statement"]) > 200
        created.append(datetime.fromisoformat(task["created_at"].replace("Z", "+00:00")))
        fail_to_pass = json.loads(task["FAIL_TO_PASS"])
        pass_to_pass = json.loads(task["PASS_TO_PASS"])
        assert fail_to_pass and pass_to_pass
        assert all(isinstance(test_id, str) and "::" in test_id for test_id in fail_to_pass)
        assert not set(fail_to_pass) & set(pass_to_pass)
        for key in ("patch", "test_patch"):
            assert task[key].startswith("diff --git a/")
            assert re.search(r"^index [0-9a-f]+\.\.[0-9a-f]+", task[key], flags=re.MULTILINE)
            assert task[key].endswith("\n")
        assert not any(path.startswith("tests/") for path in _files_in_diff(task["patch"]))
        assert all(path.startswith("tests/") for path in _files_in_diff(task["test_patch"]))
    assert created == sorted(created)
    assert any(len(json.loads(task["FAIL_TO_PASS"])) >= 2 for task in TASKS)
    assert any(task["patch"].count("\n@@ ") >= 2 for task in TASKS)


def test_data_dir_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (toy.toy_data_dir() / "repo" / "stockroom" / "__init__.py").is_file()
    assert toy.toy_tasks_path() == toy.toy_data_dir() / "tasks.jsonl"
    monkeypatch.setenv("SWEWORLD_TOY_DATA", str(tmp_path))
    assert toy.toy_data_dir() == tmp_path.resolve()
    assert toy.toy_tasks_path() == tmp_path.resolve() / "tasks.jsonl"


def test_build_is_deterministic(built: Path, tmp_path: Path, git) -> None:
    again = toy.build_toy_repo(tmp_path / "again")
    history = git(built, "rev-list", "--reverse", "main").split()
    assert git(again, "rev-list", "--reverse", "main").split() == history
    assert len(history) == len(TASKS) + 1
    assert history[:-1] == [task["base_commit"] for task in TASKS]
    assert history[-1] == toy.TOY_HEAD_COMMIT


def test_refs_and_commits(built: Path, git) -> None:
    refs = dict(reversed(line.split()) for line in git(built, "show-ref", "--head").splitlines())
    head = refs["HEAD"]
    assert git(built, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert refs["refs/heads/main"] == refs["refs/heads/release"] == head
    assert refs["refs/tags/v0.2.0"] == head
    assert refs["refs/tags/v0.1.0"] == TASKS[0]["base_commit"]
    log = git(built, "log", "--reverse", "--format=%an <%ae>|%ad|%s", "--date=iso-strict", "main")
    entries = [line.split("|") for line in log.splitlines()]
    author = "Stockroom Maintainers <maintainers@stockroom.invalid>"
    assert {entry[0] for entry in entries} == {author}
    assert entries[0][2] == "Initial commit of stockroom"
    assert all(re.fullmatch(r"Fix .+ \(#\d+\)", entry[2]) for entry in entries[1:])
    dates = [entry[1] for entry in entries]
    assert dates == sorted(dates)
    for task, fix_date in zip(TASKS, dates[1:], strict=True):
        opened = datetime.fromisoformat(task["created_at"].replace("Z", "+00:00"))
        assert opened < datetime.fromisoformat(fix_date)


def test_tree_is_clean(built: Path, git) -> None:
    assert git(built, "status", "--porcelain", "--untracked-files=all") == ""
    for commit in ("v0.1.0", "main"):
        entries = git(built, "ls-tree", "-r", commit).splitlines()
        assert {entry.split()[0] for entry in entries} == {"100644"}
        paths = [entry.split("\t", 1)[1] for entry in entries]
        assert not [p for p in paths if re.search(r"__pycache__|\.pyc$|egg-info|pytest_cache", p)]
    source = toy.toy_data_dir() / "repo"
    initial = set(git(built, "ls-tree", "-r", "--name-only", "v0.1.0").splitlines())
    assert {"pyproject.toml", "README.md", "stockroom/__init__.py"} <= initial
    for path in initial:
        committed = git(built, "show", f"v0.1.0:{path}")
        assert committed == (source / path).read_text(encoding="utf-8").replace("\r\n", "\n")


def test_build_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(FileExistsError):
        toy.build_toy_repo(tmp_path)
    assert (tmp_path / "file.txt").read_text() == "x"


@pytest.mark.parametrize("index", range(len(TASKS)), ids=TASK_IDS)
def test_patches_apply_at_base_and_are_the_fix_commit(built: Path, git, index: int) -> None:
    task = TASKS[index]
    base = task["base_commit"]
    fix = git(built, "rev-list", "--reverse", "main").split()[index + 1]
    work = built.parent / f"check-{index}"
    git(built, "worktree", "add", "-q", "--detach", str(work), base)
    try:
        git(work, "apply", "--check", "-", stdin=task["patch"])
        git(work, "apply", "--check", "-", stdin=task["test_patch"])
        assert git(built, "diff", base, fix, "--", ".", ":(exclude)tests") == task["patch"]
        assert git(built, "diff", base, fix, "--", "tests") == task["test_patch"]
    finally:
        git(built, "worktree", "remove", "--force", str(work))


@pytest.mark.parametrize("index", range(len(TASKS)), ids=TASK_IDS)
def test_fail_to_pass_and_pass_to_pass(built: Path, git, index: int) -> None:
    task = TASKS[index]
    fail_to_pass = json.loads(task["FAIL_TO_PASS"])
    pass_to_pass = json.loads(task["PASS_TO_PASS"])
    test_files = _files_in_diff(task["test_patch"])
    work = built.parent / f"grade-{index}"
    git(built, "worktree", "add", "-q", "--detach", str(work), task["base_commit"])
    try:
        git(work, "apply", "-", stdin=task["test_patch"])
        before = _run_pytest(work, *test_files)
        git(work, "apply", "-", stdin=task["patch"])
        after = _run_pytest(work, *test_files)
    finally:
        git(built, "worktree", "remove", "--force", str(work))
    assert [test_id for test_id in fail_to_pass if before.get(test_id) == "PASSED"] == []
    assert all(before.get(test_id) in ("FAILED", "ERROR") for test_id in fail_to_pass)
    assert all(before.get(test_id) == "PASSED" for test_id in pass_to_pass)
    assert all(after.get(test_id) == "PASSED" for test_id in fail_to_pass + pass_to_pass)
    # SWE-bench convention: every test of the touched files is in one of the two lists.
    assert set(after) == set(fail_to_pass) | set(pass_to_pass)


@pytest.mark.parametrize("ref", ["v0.1.0", "main"])
def test_whole_suite_passes_at_first_and_last_commit(built: Path, git, ref: str) -> None:
    work = built.parent / f"suite-{ref}"
    git(built, "worktree", "add", "-q", "--detach", str(work), ref)
    try:
        outcomes = _run_pytest(work)
    finally:
        git(built, "worktree", "remove", "--force", str(work))
    assert set(outcomes.values()) == {"PASSED"}
    fail_to_pass = {test_id for task in TASKS for test_id in json.loads(task["FAIL_TO_PASS"])}
    if ref == "v0.1.0":
        assert not fail_to_pass & set(outcomes), "bug-exposing tests must come with test_patch"
    else:
        assert fail_to_pass <= set(outcomes)


def test_ensure_toy_repo_is_idempotent_and_repairs(tmp_path: Path, git) -> None:
    path = toy.ensure_toy_repo(tmp_path)
    assert path == tmp_path / "sources" / "sweworld__stockroom"
    assert git(path, "rev-parse", "HEAD").strip() == toy.TOY_HEAD_COMMIT
    marker = path / ".git" / "description"
    marker.write_text("kept unless rebuilt\n")
    assert toy.ensure_toy_repo(tmp_path) == path
    assert marker.read_text() == "kept unless rebuilt\n"

    git(path, "checkout", "-q", "--detach", TASKS[0]["base_commit"])
    assert toy.ensure_toy_repo(tmp_path) == path
    assert git(path, "rev-parse", "HEAD").strip() == toy.TOY_HEAD_COMMIT
    assert marker.read_text() != "kept unless rebuilt\n"

    (path / "stockroom" / "money.py").write_text("broken\n")
    assert toy.ensure_toy_repo(tmp_path) == path
    assert git(path, "status", "--porcelain") == ""
    assert sorted(p.name for p in path.parent.iterdir()) == [
        ".sweworld__stockroom.lock",
        "sweworld__stockroom",
    ]


def test_ensure_toy_repo_uses_sweworld_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEWORLD_CACHE", str(tmp_path))
    assert toy.ensure_toy_repo() == tmp_path / "sources" / "sweworld__stockroom"


def test_ensure_toy_repo_concurrently(tmp_path: Path, git) -> None:
    root = Path(toy.__file__).resolve().parents[2]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    code = (
        "import sys\n"
        "from sweworld.tasks.toy import ensure_toy_repo\n"
        "print(ensure_toy_repo(sys.argv[1]))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = {proc.communicate(timeout=120)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    path = tmp_path / "sources" / "sweworld__stockroom"
    assert outputs == {str(path)}
    assert git(path, "rev-parse", "HEAD").strip() == toy.TOY_HEAD_COMMIT
    assert [p.name for p in path.parent.iterdir() if ".build-" in p.name or ".old-" in p.name] == []


def test_ensure_toy_repo_warns_when_the_data_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git
) -> None:
    data = tmp_path / "data"
    shutil.copytree(toy.toy_data_dir(), data, ignore=shutil.ignore_patterns("__pycache__"))
    (data / "repo" / "README.md").write_text("# stockroom\n", encoding="utf-8")
    (data / "repo" / "stockroom" / "__pycache__").mkdir(exist_ok=True)
    (data / "repo" / "stockroom" / "__pycache__" / "money.cpython-311.pyc").write_bytes(b"x")
    monkeypatch.setenv("SWEWORLD_TOY_DATA", str(data))
    with pytest.warns(RuntimeWarning, match="TOY_HEAD_COMMIT"):
        path = toy.ensure_toy_repo(tmp_path / "cache")
    assert git(path, "rev-parse", "HEAD").strip() != toy.TOY_HEAD_COMMIT
    assert git(path, "show", "v0.1.0:README.md") == "# stockroom\n"
    assert "__pycache__" not in git(path, "ls-tree", "-r", "--name-only", "v0.1.0")
