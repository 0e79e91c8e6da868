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
    """A repository could not be found or checked out; the message says what to do.

    The message may name host folders (useful on the command line). ``public`` is the
    same fact without them, for a service to show a remote client (None: nothing more
    specific than "the repository could not be checked out" may be said).
    """

    def __init__(self, message: str, public: str | None = None):
        super().__init__(message)
        self.public = public


#: A repository name: ``owner/name`` (or a bare ``name``) in GitHub's alphabet, bounded.
#: Never a path: no ``..``, no leading ``/`` or ``.``, no other separator.
REPO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}(/[A-Za-z0-9_.-]{1,100})?")


def check_repo_name(repo: object) -> str:
    """``repo`` when it is a repository name (:data:`REPO_NAME_RE`, no ``..``), else
    :class:`RepoError`. What a task row says is data: it must never pick a host folder."""
    if not isinstance(repo, str) or not _plain_name(repo):
        shown = repr(repo)[:80] if isinstance(repo, str) else type(repo).__name__
        rule = (
            "is not a repository name (owner/name: letters, digits, '.', '_' and '-', at "
            "most 100 characters each, no '..')"
        )
        # the public text does not echo the name: it may be a host path the client tried
        raise RepoError(f"repository {shown} {rule}", public=f"the task's repository {rule}")
    return repo


def _plain_name(repo: str) -> bool:
    """Whether ``repo`` matches :data:`REPO_NAME_RE` whole, with no ``..`` and no ``.``
    component (never a path out of a folder)."""
    return bool(REPO_NAME_RE.fullmatch(repo)) and ".." not in repo and not repo.endswith("/.")


def _inside(folder: Path, path: Path) -> bool:
    """Whether ``path`` stays inside ``folder`` once ``..`` are resolved (lexically: a
    symlink the operator put into a cache folder is theirs to follow)."""
    base = os.path.normpath(os.path.abspath(folder))
    return os.path.normpath(os.path.abspath(path)).startswith(base + os.sep)


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
            f"{proc.stderr.decode(errors='replace').strip()}",
            public=f"git {args[0] if args else ''} failed",
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
    """Locate a local source for ``repo`` (``owner/name``); see the module docstring.

    Without ``repo_path`` (the caller's own choice of folder), ``repo`` must be a
    repository name (:func:`check_repo_name`) and the source is looked for only inside the
    cache folders: no name resolves outside them."""
    if repo_path is not None:
        path = Path(repo_path).expanduser()
        if not path.exists():
            raise RepoError(f"repo_path {path} does not exist", public="repo_path does not exist")
        return path
    check_repo_name(repo)
    from sweworld.tasks.toy import TOY_REPO_NAME, ensure_toy_repo

    if repo == TOY_REPO_NAME:
        return ensure_toy_repo()
    dirs = list(search_dirs) if search_dirs is not None else repo_cache_dirs()
    for d in dirs:
        for cand in _candidates(repo):
            path = d / cand
            if not _inside(d, path):  # cannot happen for a checked name; kept as a guard
                continue
            if path.is_dir() and (is_git_repo(path) or cand == repo.partition("/")[2]):
                return path
    if clone_url or allow_clone:
        return clone_mirror(repo, clone_url or f"https://github.com/{repo}.git", dirs[0])
    looked = ", ".join(str(d) for d in dirs)
    raise RepoError(
        f"no local copy of repository {repo!r}: looked in {looked}. Put a clone or mirror "
        f"there (e.g. `git clone --mirror https://github.com/{repo}.git "
        f"<dir>/{repo.replace('/', '__')}.git`), add its folder to $SWEWORLD_REPO_CACHE, or "
        "pass repo_path=...",
        public=f"this server has no copy of repository {repo!r}",
    )


def clone_mirror(repo: str, url: str, dest_dir: Path) -> Path:
    """``git clone --mirror url`` into ``dest_dir/owner__name.git`` (needs a network for URLs)."""
    dest = dest_dir / f"{repo.replace('/', '__')}.git"
    dest_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_suffix(".lock")):
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
def file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created, parents too) for the block."""
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
    """Name of the cache folder for one base checkout: two plain folder names, whatever the
    inputs (a repository or commit that is not a plain name is replaced by its hash, so the
    folder is always inside the checkout root)."""
    slug = repo.replace("/", "__")
    if not _plain_name(repo):
        slug = "repo-" + _digest(repo)
    commit = base_commit or "dir"
    if not re.fullmatch(r"[0-9A-Za-z]{1,64}", commit):
        commit = "c-" + _digest(commit)
    parts = [commit, history if re.fullmatch(r"[0-9a-z:]{1,32}", history) else _digest(history)]
    if setup_patch:
        parts.append(_digest(setup_patch))
    return f"{slug}/{'-'.join(parts)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


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
            "or an unpacked source tree",
            public=f"the source of repository {repo!r} is not usable",
        )
    git_source = is_git_repo(source)
    if git_source and not base_commit:
        raise RepoError(
            f"{source} is a git repository: a base_commit is needed",
            public=f"repository {repo!r} needs a base_commit",
        )
    if git_source and not _SHA_RE.fullmatch(base_commit or ""):
        text = f"base_commit {str(base_commit)[:80]!r} is not a commit sha"
        raise RepoError(text, public=text)
    root = root or cache_dir() / "checkouts"
    final = root / checkout_key(repo, base_commit if git_source else None, setup_patch, history)
    with file_lock(final.parent / f".{final.name}.lock"):
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
        raise RepoError(
            f"commit {sha} could not be fetched from {source}: {err}",
            public=f"commit {sha} is not in the server's copy of the repository",
        )
    git(["checkout", "--quiet", "-B", branch, sha], work)


def _export_tree(source: Path, sha: str, work: Path) -> None:
    """Write the tree of ``sha`` (no history) into ``work``."""
    work.mkdir(parents=True)
    if not _SHA_RE.fullmatch(sha):
        raise RepoError(f"base_commit {sha!r} is not a commit sha", public="not a commit sha")
    proc = git(["archive", "--format=tar", sha], source, check=False, timeout=3600)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise RepoError(
            f"commit {sha} not found in {source}: {err}",
            public=f"commit {sha} is not in the server's copy of the repository",
        )
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
            raise RepoError(
                f"the task's setup patch does not apply: {err}",
                public="the task's setup patch does not apply",
            )
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
