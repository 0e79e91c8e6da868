"""Repository materialisation: a scrubbed checkout of a task's repository at its base commit.

Every session of a task shares one read-only *base checkout* (the lower layer of its
copy-on-write workspace). The base checkout is built once per (repository, base commit,
setup patch) and cached. It holds the history up to the base commit and nothing after it:
no later commits, no remotes, no tags or branches pointing ahead, no reflog, no unreachable
objects, so ``git log --all``, ``git reflog``, ``git fsck --lost-found`` or
``git cat-file -p <fix sha>`` inside a session cannot reveal the fix.

Sources, in the order they are tried:

1. an explicit ``repo_path`` (a git repository, bare mirror or plain directory);
2. the project's own toy repository (``sweworld/stockroom``);
3. mirror caches listed in ``$SWEWORLD_REPO_CACHE`` (``os.pathsep``-separated folders holding
   ``owner__name``, ``owner__name.git``, ``owner/name``, ``owner/name.git`` or ``name``);
4. with ``clone_url`` (or ``allow_clone=True`` for GitHub), a ``git clone --mirror`` into the
   first cache folder, for users who have a network.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sweworld.dirs import cache_dir

_SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
# Fixed identity and dates for the commits sweworld writes itself (plain directories, squashed
# setup states), so that the same input gives the same sha on every machine.
_FIXED_DATE = "2000-01-01T00:00:00+00:00"
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "sweworld",
    "GIT_AUTHOR_EMAIL": "sweworld@sweworld.invalid",
    "GIT_COMMITTER_NAME": "sweworld",
    "GIT_COMMITTER_EMAIL": "sweworld@sweworld.invalid",
    "GIT_AUTHOR_DATE": _FIXED_DATE,
    "GIT_COMMITTER_DATE": _FIXED_DATE,
    "LC_ALL": "C",
}
_COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc")


class RepoError(RuntimeError):
    """A repository could not be found or checked out; the message says what to do."""


@dataclass(frozen=True)
class BaseCheckout:
    """A cached, scrubbed checkout at a task's base commit (never written after creation).

    Attributes:
        path: host directory of the working tree (with its scrubbed ``.git``).
        head: sha of the commit the working tree is at (the base commit, or the squashed
            setup commit for tasks with a setup patch or plain-directory sources).
        branch: name of the branch HEAD points to.
    """

    path: Path
    head: str
    branch: str


def git(
    args: Sequence[str],
    cwd: Path | None = None,
    *,
    check: bool = True,
    input: bytes | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """Run git with a neutral configuration (no system or global config, no prompts)."""
    env = {**os.environ, **_GIT_ENV, "HOME": str(_empty_home())}
    # No background auto-gc/maintenance: it would race with the explicit gc of _scrub.
    argv = ["git", "-c", "gc.auto=0", "-c", "maintenance.auto=false", *args]
    proc = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RepoError(
            f"git {' '.join(args[:3])} failed in {cwd}: "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc


def _empty_home() -> Path:
    home = cache_dir() / "git-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def repo_cache_dirs() -> list[Path]:
    """The mirror folders named by ``$SWEWORLD_REPO_CACHE`` plus the default mirror cache."""
    dirs = [Path(p) for p in os.environ.get("SWEWORLD_REPO_CACHE", "").split(os.pathsep) if p]
    dirs.append(cache_dir() / "mirrors")
    return dirs


def _candidates(repo: str) -> Iterator[str]:
    owner, _, name = repo.partition("/")
    if name:
        yield from (
            f"{owner}__{name}",
            f"{owner}__{name}.git",
            f"{owner}/{name}",
            f"{owner}/{name}.git",
            name,
            f"{name}.git",
        )
    else:
        yield from (repo, f"{repo}.git")


def find_repo_source(
    repo: str,
    *,
    repo_path: str | Path | None = None,
    search_dirs: Sequence[Path] | None = None,
    clone_url: str | None = None,
    allow_clone: bool = False,
) -> Path:
    """Locate a local source for ``repo`` (``owner/name``); see the module docstring."""
    if repo_path is not None:
        path = Path(repo_path).expanduser()
        if not path.exists():
            raise RepoError(f"repo_path {path} does not exist")
        return path
    from sweworld.tasks.toy import TOY_REPO_NAME, ensure_toy_repo

    if repo == TOY_REPO_NAME:
        return ensure_toy_repo()
    dirs = list(search_dirs) if search_dirs is not None else repo_cache_dirs()
    for d in dirs:
        for cand in _candidates(repo):
            path = d / cand
            if path.is_dir() and (is_git_repo(path) or cand == repo.partition("/")[2]):
                return path
    if clone_url or allow_clone:
        return clone_mirror(repo, clone_url or f"https://github.com/{repo}.git", dirs[0])
    looked = ", ".join(str(d) for d in dirs)
    raise RepoError(
        f"no local copy of repository {repo!r}: looked in {looked}. Put a clone or mirror "
        f"there (e.g. `git clone --mirror https://github.com/{repo}.git "
        f"<dir>/{repo.replace('/', '__')}.git`), add its folder to $SWEWORLD_REPO_CACHE, or "
        "pass repo_path=..."
    )


def clone_mirror(repo: str, url: str, dest_dir: Path) -> Path:
    """``git clone --mirror url`` into ``dest_dir/owner__name.git`` (needs a network for URLs)."""
    dest = dest_dir / f"{repo.replace('/', '__')}.git"
    dest_dir.mkdir(parents=True, exist_ok=True)
    with _locked(dest.with_suffix(".lock")):
        if not dest.exists():
            tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=dest_dir))
            try:
                git(["clone", "--mirror", "--quiet", url, str(tmp / "m.git")], timeout=3600)
                os.rename(tmp / "m.git", dest)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return dest


def is_git_repo(path: Path) -> bool:
    """True for a working tree with ``.git`` or a bare repository."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def checkout_key(
    repo: str, base_commit: str | None, setup_patch: str = "", history: str = "full"
) -> str:
    """Name of the cache folder for one base checkout."""
    parts = [base_commit or "dir", history]
    if setup_patch:
        parts.append(hashlib.sha256(setup_patch.encode()).hexdigest()[:16])
    return f"{repo.replace('/', '__')}/{'-'.join(parts)}"


def materialize(
    source: Path,
    *,
    repo: str,
    base_commit: str | None,
    setup_patch: str = "",
    history: str = "full",
    branch: str = "main",
    root: Path | None = None,
) -> BaseCheckout:
    """Return the cached scrubbed checkout for these inputs, building it the first time.

    Args:
        source: a git repository (working tree or bare) or a plain directory.
        repo: ``owner/name``, used for the cache folder name.
        base_commit: the commit to check out (ignored for plain directories).
        setup_patch: a patch applied on top of the base (SWE-smith's bug). When given, the
            result is one squashed root commit, so the history cannot show the bug's diff.
        history: ``"full"`` keeps every commit up to the base; ``"depth:N"`` keeps the last N
            (a shallow repository: much smaller for big projects such as Django, whose full
            history is ~300 MB per base commit); ``"none"`` gives one root commit
            holding the base tree (smaller and faster for huge repositories).
        branch: the branch name HEAD is left on.
        root: cache root (default ``<cache>/checkouts``).
    """
    depth = _parse_history(history)
    if not source.is_dir():
        raise RepoError(
            f"{source} is not a directory: give a git repository, a bare mirror "
            "or an unpacked source tree"
        )
    git_source = is_git_repo(source)
    if git_source and not base_commit:
        raise RepoError(f"{source} is a git repository: a base_commit is needed")
    if git_source and not _SHA_RE.match(base_commit or ""):
        raise RepoError(f"base_commit {base_commit!r} is not a commit sha")
    root = root or cache_dir() / "checkouts"
    final = root / checkout_key(repo, base_commit if git_source else None, setup_patch, history)
    with _locked(final.parent / f".{final.name}.lock"):
        if not final.exists():
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
            try:
                work = tmp / "tree"
                if git_source and history != "none" and not setup_patch:
                    _fetch_history(source, base_commit or "", work, branch, depth)
                elif git_source:
                    _export_tree(source, base_commit or "", work)
                    _single_commit(work, branch, setup_patch)
                else:
                    shutil.copytree(source, work, symlinks=True, ignore=_COPY_IGNORE)
                    _single_commit(work, branch, setup_patch)
                _scrub(work, branch)
                os.rename(work, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    head = git(["rev-parse", "HEAD"], final).stdout.decode().strip()
    return BaseCheckout(path=final, head=head, branch=branch)


def _parse_history(history: str) -> int | None:
    """``full`` -> None (all of it), ``none`` -> 0, ``depth:N`` -> N."""
    if history == "full":
        return None
    if history == "none":
        return 0
    prefix, _, number = history.partition(":")
    if prefix == "depth" and number.isdigit() and int(number) > 0:
        return int(number)
    raise ValueError(f"history must be 'full', 'none' or 'depth:N', not {history!r}")


def _fetch_history(
    source: Path, sha: str, work: Path, branch: str, depth: int | None = None
) -> None:
    """Fetch only what is reachable from ``sha`` into a fresh repository and check it out."""
    git(["init", "--quiet", "--initial-branch", branch, str(work)])
    url = str(source.resolve())
    if depth:  # shallow fetches need a transport: the local path shortcut ignores --depth
        url = f"file://{url}"
    proc = git(
        [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            *([f"--depth={depth}"] if depth else []),
            url,
            f"{sha}:refs/sweworld/base",
        ],
        work,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise RepoError(f"commit {sha} could not be fetched from {source}: {err}")
    git(["checkout", "--quiet", "-B", branch, sha], work)


def _export_tree(source: Path, sha: str, work: Path) -> None:
    """Write the tree of ``sha`` (no history) into ``work``."""
    work.mkdir(parents=True)
    if not _SHA_RE.match(sha):
        raise RepoError(f"base_commit {sha!r} is not a commit sha")
    proc = git(["archive", "--format=tar", sha], source, check=False, timeout=3600)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise RepoError(f"commit {sha} not found in {source}: {err}")
    subprocess.run(["tar", "-x", "-C", str(work)], input=proc.stdout, check=True)


def _single_commit(work: Path, branch: str, setup_patch: str) -> None:
    """Make ``work`` a repository with one root commit, after applying ``setup_patch``."""
    if (work / ".git").exists():
        shutil.rmtree(work / ".git")
    git(["init", "--quiet", "--initial-branch", branch, str(work)])
    if setup_patch:
        proc = git(
            ["apply", "--whitespace=nowarn", "-"], work, check=False, input=setup_patch.encode()
        )
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise RepoError(f"the task's setup patch does not apply: {err}")
    git(["add", "--all", "--force", "."], work)
    git(["commit", "--quiet", "--no-verify", "--allow-empty", "-m", "Initial commit"], work)


def _scrub(work: Path, branch: str) -> None:
    """Remove everything that could point past HEAD, and prepare the repo for sessions."""
    gitdir = work / ".git"
    for ref in git(["for-each-ref", "--format=%(refname)"], work).stdout.decode().split():
        if ref != f"refs/heads/{branch}":
            git(["update-ref", "-d", ref], work)
    for name in ("FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "packed-refs.lock"):
        (gitdir / name).unlink(missing_ok=True)
    shutil.rmtree(gitdir / "logs", ignore_errors=True)
    for remote in git(["remote"], work).stdout.decode().split():
        git(["remote", "remove", remote], work)
    git(["reflog", "expire", "--expire=now", "--all"], work)
    git(["gc", "--quiet", "--prune=now"], work, timeout=3600)
    shutil.rmtree(gitdir / "logs", ignore_errors=True)
    for key, value in (
        ("user.name", "sweworld agent"),
        ("user.email", "agent@sweworld.invalid"),
        ("gc.auto", "0"),
        ("core.fileMode", "true"),
        ("advice.detachedHead", "false"),
    ):
        git(["config", key, value], work)
    # Settle the index's stat data so that `git status` in a session does not re-hash files.
    git(["update-index", "-q", "--refresh"], work, check=False)
