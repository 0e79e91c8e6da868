"""Base checkouts: the future is scrubbed, sources are found, errors are clear."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sweworld.sandbox.repos import (
    RepoError,
    check_repo_name,
    checkout_key,
    find_repo_source,
    git,
    materialize,
)
from sweworld.tasks.toy import TOY_HEAD_COMMIT, TOY_REPO_NAME, ensure_toy_repo


def _git(path: Path, *args: str) -> str:
    return git(list(args), path, check=False).stdout.decode()


@pytest.fixture(scope="module")
def toy_source():
    return ensure_toy_repo()


def test_checkout_at_a_middle_commit_hides_the_future(tmp_path, toy_source, toy_tasks):
    task = toy_tasks[1]  # base = the fix of task 1; the fixes of tasks 2-4 come after it
    base = materialize(toy_source, repo=TOY_REPO_NAME, base_commit=task.base_commit, root=tmp_path)
    assert base.head == task.base_commit
    log = _git(base.path, "log", "--all", "--format=%H").split()
    assert log == [task.base_commit, toy_tasks[0].base_commit]
    assert _git(base.path, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert _git(base.path, "remote").strip() == ""
    assert _git(base.path, "reflog").strip() == ""
    assert not (base.path / ".git" / "logs").exists()
    assert "commit" not in _git(base.path, "fsck", "--lost-found", "--no-progress")
    future = [toy_tasks[2].base_commit, toy_tasks[3].base_commit, TOY_HEAD_COMMIT]
    for sha in future:
        proc = git(["cat-file", "-p", sha], base.path, check=False)
        assert proc.returncode != 0, sha
    assert _git(base.path, "status", "--porcelain").strip() == ""
    # Every object in the store is reachable from HEAD: nothing of the future is packed in.
    objects = _git(base.path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    reachable = _git(base.path, "rev-list", "--objects", "--all")
    assert set(objects.split()) == {line.split()[0] for line in reachable.splitlines()}


def test_checkout_is_cached(tmp_path, toy_source, toy_task):
    a = materialize(toy_source, repo=TOY_REPO_NAME, base_commit=toy_task.base_commit, root=tmp_path)
    b = materialize(toy_source, repo=TOY_REPO_NAME, base_commit=toy_task.base_commit, root=tmp_path)
    assert a == b


def test_history_none_gives_one_root_commit(tmp_path, toy_source, toy_tasks):
    task = toy_tasks[3]
    base = materialize(
        toy_source, repo=TOY_REPO_NAME, base_commit=task.base_commit, history="none", root=tmp_path
    )
    assert len(_git(base.path, "log", "--all", "--oneline").splitlines()) == 1
    expected = _git(toy_source, "ls-tree", "-r", "--name-only", task.base_commit).split()
    assert _git(base.path, "ls-files").split() == expected


def test_setup_patch_is_squashed_so_history_cannot_show_it(tmp_path, toy_source, toy_tasks):
    # A SWE-smith-style task: the bug is a patch applied on top of the base.
    from sweworld.tasks.patches import reverse_patch

    bug = reverse_patch(toy_tasks[0].patch)  # undoing task 1's fix re-creates its bug
    fixed = toy_tasks[1].base_commit  # the commit that has task 1's fix
    base = materialize(
        toy_source, repo=TOY_REPO_NAME, base_commit=fixed, setup_patch=bug, root=tmp_path
    )
    assert len(_git(base.path, "log", "--all", "--oneline").splitlines()) == 1
    # The fixed line appears nowhere in the history (a squashed root commit holds only the bug).
    assert "slug.strip(separator)" not in _git(base.path, "log", "--all", "-p")
    assert 're.sub(r"[^a-z0-9]", separator' in (base.path / "stockroom/textutil.py").read_text()
    with pytest.raises(RepoError, match="setup patch does not apply"):
        materialize(
            toy_source,
            repo=TOY_REPO_NAME,
            base_commit=fixed,
            setup_patch="diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-a\n+b\n",
            root=tmp_path / "bad",
        )


def test_plain_directory_source(tmp_path):
    src = tmp_path / "pkg-1.0"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("VERSION = '1.0'\n")
    (src / "pkg" / "__pycache__").mkdir()
    (src / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    base = materialize(src, repo="acme/pkg", base_commit=None, root=tmp_path / "co")
    assert _git(base.path, "ls-files").split() == ["pkg/__init__.py"]
    assert len(base.head) == 40


def test_unknown_commit_and_bad_sha(tmp_path, toy_source):
    with pytest.raises(RepoError, match="could not be fetched"):
        materialize(toy_source, repo=TOY_REPO_NAME, base_commit="0" * 40, root=tmp_path)
    with pytest.raises(RepoError, match="not a commit sha"):
        materialize(toy_source, repo=TOY_REPO_NAME, base_commit="HEAD~1; rm -rf /", root=tmp_path)


def test_find_repo_source_looks_in_the_mirror_cache(tmp_path, monkeypatch, toy_source):
    mirror = tmp_path / "mirrors" / "acme__widgets.git"
    subprocess.run(
        ["git", "clone", "--quiet", "--mirror", str(toy_source), str(mirror)], check=True
    )
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(tmp_path / "mirrors"))
    assert find_repo_source("acme/widgets") == mirror
    assert find_repo_source(TOY_REPO_NAME) == toy_source
    with pytest.raises(RepoError, match="SWEWORLD_REPO_CACHE"):
        find_repo_source("nobody/nothing")
    with pytest.raises(RepoError, match="does not exist"):
        find_repo_source("x/y", repo_path=tmp_path / "missing")


def test_clone_mirror_from_a_url(tmp_path, toy_source):
    # The same code path a user with a network takes with https://github.com/...
    path = find_repo_source(
        "acme/cloned", search_dirs=[tmp_path / "cache"], clone_url=f"file://{toy_source}"
    )
    assert path == tmp_path / "cache" / "acme__cloned.git"
    assert _git(path, "rev-parse", "main").strip() == TOY_HEAD_COMMIT


def test_shallow_history_keeps_the_last_commits_only(tmp_path, toy_source, toy_tasks):
    task = toy_tasks[3]  # three commits before it
    base = materialize(
        toy_source,
        repo=TOY_REPO_NAME,
        base_commit=task.base_commit,
        history="depth:2",
        root=tmp_path,
    )
    log = _git(base.path, "log", "--all", "--format=%H").split()
    assert log == [task.base_commit, toy_tasks[2].base_commit]
    assert (base.path / ".git" / "shallow").exists()
    assert git(["cat-file", "-p", TOY_HEAD_COMMIT], base.path, check=False).returncode != 0
    with pytest.raises(ValueError, match="depth:N"):
        materialize(
            toy_source,
            repo=TOY_REPO_NAME,
            base_commit=task.base_commit,
            history="depth:x",
            root=tmp_path,
        )


TRAVERSALS = (
    "x/../../../../../../../../etc",
    "../etc",
    "..",
    ".",
    "/etc",
    "owner/..",
    "owner/.",
    "owner/../name",
    "a/b/c",
    "a\\..\\b",
    "owner/name\n",
    "",
    "x" * 101,
    "o/" + "n" * 101,
)


def test_repository_names_never_resolve_outside_the_cache(tmp_path, monkeypatch):
    """A task row's ``repo`` with ``..`` picked any host folder as the workspace (issue 18):
    it is a name now, and a name resolves only inside the cache folders."""
    cache = tmp_path / "cache" / "inner"
    cache.mkdir(parents=True)
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("secret")
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(cache))
    relative = "x/" + "../" * 12 + str(host).lstrip("/")
    for repo in (*TRAVERSALS, relative, str(host), "x/../../host", "../host"):
        with pytest.raises(RepoError, match="not a repository name") as refused:
            find_repo_source(repo, search_dirs=[cache])
        assert str(host) not in (refused.value.public or "")
    for repo in (
        "acme/widgets",
        "owner/.github",
        "swesmith/acme__pkg.1a2b3c4d",
        "name",
        "A-b/c_d.e",
    ):
        assert check_repo_name(repo) == repo
    # the messages of a name that is fine but absent: the host folders only in the text
    # for the command line, never in the public one
    with pytest.raises(RepoError) as missing:
        find_repo_source("nobody/nothing", search_dirs=[cache])
    assert str(cache) in str(missing.value) and str(cache) not in missing.value.public


def test_checkout_folders_stay_inside_the_root(tmp_path):
    root = tmp_path / "root"
    for repo in (*TRAVERSALS, "acme/widgets"):
        for commit in (None, "0" * 40, "../../x", "a/b"):
            for history in ("full", "depth:3", "../x"):
                key = checkout_key(repo, commit, "patch", history)
                folder = (root / key).resolve()
                assert folder.parent.parent == root.resolve(), (repo, commit, history, key)
    assert checkout_key("acme/widgets", "a" * 40) == f"acme__widgets/{'a' * 40}-full"
    # a plain folder under a name that is not one stays in the root too
    src = tmp_path / "plain"
    src.mkdir()
    (src / "f.py").write_text("x = 1\n")
    base = materialize(src, repo="../../escape", base_commit=None, root=root)
    assert base.path.resolve().parent.parent == root.resolve()
    assert not (tmp_path / "escape").exists()
