"""The toy repository ``sweworld/stockroom`` and its four SWE-bench style tasks.

``data/toy/repo`` holds the source tree of the small ``stockroom`` library at its first
commit, with four bugs in it; ``data/toy/tasks.jsonl`` holds one task per bug, with the
gold ``patch`` and the ``test_patch`` as ``git diff`` text.  :func:`build_toy_repo` turns
them into a git repository whose history is identical, down to the SHAs, on every
machine: the initial commit, then one commit per task applying its ``patch`` and
``test_patch``.  Task *k*'s ``base_commit`` is therefore the commit before its fix, and
the tags ``v0.1.0``/``v0.2.0`` and the branch ``release`` exist to be scrubbed by
sandboxes (they point at the "future" of every task).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

from sweworld.tasks.loaders import iter_json_lines

TOY_REPO_NAME = "sweworld/stockroom"
#: Folder name of the cached checkout (SWE-bench's ``owner__name`` spelling).
TOY_CACHE_NAME = "sweworld__stockroom"
#: SHA of ``main`` after :func:`build_toy_repo`; ``tests/tasks/test_toy.py`` checks it.
TOY_HEAD_COMMIT = "7c2cab039b0552e109469fd05cfcf96b41b31f57"

_AUTHOR = ("Stockroom Maintainers", "maintainers@stockroom.invalid")
_INITIAL_COMMIT = ("2024-01-02T12:00:00+00:00", "Initial commit of stockroom")
#: (date, message) of the fix commit of each task, in the order of tasks.jsonl.
_FIX_COMMITS = (
    ("2024-01-16T12:00:00+00:00", "Fix slugify leaving repeated and edge separators (#5)"),
    ("2024-02-06T12:00:00+00:00", "Fix remove_stock going negative on insufficient stock (#9)"),
    ("2024-02-27T12:00:00+00:00", "Fix formatting of negative Money amounts (#14)"),
    ("2024-03-19T12:00:00+00:00", "Fix CSV loading of quoted fields containing commas (#18)"),
)
_GIT_CONFIG = (
    "init.defaultBranch=main",
    "init.defaultObjectFormat=sha1",
    "core.autocrlf=false",
    "core.fileMode=true",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "gc.auto=0",
)
#: Never copied from data/toy/repo: caches and build output of local runs.
_SKIP_DIRS = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".tox", ".venv"}
    | {".eggs", "build", "dist"}
)
_SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")


def toy_data_dir() -> Path:
    """The ``data/toy`` folder (``$SWEWORLD_TOY_DATA`` overrides it)."""
    override = os.environ.get("SWEWORLD_TOY_DATA")
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "data" / "toy"


def toy_tasks_path() -> Path:
    """The ``tasks.jsonl`` file of the toy tasks."""
    return toy_data_dir() / "tasks.jsonl"


def load_toy_tasks() -> list[dict[str, Any]]:
    """The toy tasks as raw SWE-bench rows (dicts), in file order."""
    return [row for _, row in iter_json_lines(toy_tasks_path())]


def default_cache_dir() -> Path:
    """``$SWEWORLD_CACHE``, or ``~/.cache/sweworld``."""
    override = os.environ.get("SWEWORLD_CACHE")
    return Path(override).expanduser() if override else Path.home() / ".cache" / "sweworld"


def _git_env(home: str, date: str | None = None) -> dict[str, str]:
    """A fixed environment: no user or system config, fixed identity and dates."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.path.join(home, ".gitconfig"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_DEFAULT_HASH": "sha1",
        "LC_ALL": "C",
        "TZ": "UTC",
        "GIT_AUTHOR_NAME": _AUTHOR[0],
        "GIT_AUTHOR_EMAIL": _AUTHOR[1],
        "GIT_COMMITTER_NAME": _AUTHOR[0],
        "GIT_COMMITTER_EMAIL": _AUTHOR[1],
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    return env


def _git(repo: Path, home: str, *args: str, date: str | None = None, stdin: str = "") -> str:
    """Run one git command in ``repo`` and return its stdout; raise on failure."""
    config = [item for pair in _GIT_CONFIG for item in ("-c", pair)]
    proc = subprocess.run(
        ["git", *config, *args],
        cwd=repo,
        env=_git_env(home, date),
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def _copy_source(src: Path, dest: Path) -> None:
    """Copy the toy source tree: LF line endings, mode 644, no caches or build junk."""
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(_SKIP_SUFFIXES))
        out_dir = dest / Path(root).relative_to(src)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if name.endswith(_SKIP_SUFFIXES):
                continue
            data = (Path(root) / name).read_bytes().replace(b"\r\n", b"\n")
            target = out_dir / name
            target.write_bytes(data)
            target.chmod(0o644)


def _commit(repo: Path, home: str, date: str, message: str) -> str:
    _git(repo, home, "add", "-A")
    _git(repo, home, "commit", "-q", "--no-verify", "-m", message, date=date)
    return _git(repo, home, "rev-parse", "HEAD").strip()


def build_toy_repo(dest: Path) -> Path:
    """Create the toy git repository at ``dest`` (absent or empty) and return its path.

    History: the initial commit (the tree of ``data/toy/repo``), then one commit per
    task applying its ``patch`` and ``test_patch``.  Tags ``v0.1.0`` (initial commit) and
    ``v0.2.0`` and branch ``release`` (last commit); ``HEAD`` is ``main`` at the last commit.
    """
    dest = Path(dest)
    existed = dest.exists()
    if existed and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} exists and is not an empty directory")
    tasks = load_toy_tasks()
    if len(tasks) != len(_FIX_COMMITS):
        raise RuntimeError(f"expected {len(_FIX_COMMITS)} toy tasks, found {len(tasks)}")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="sweworld-git-home-") as home:
            _git(dest, home, "init", "-q")
            _git(dest, home, "symbolic-ref", "HEAD", "refs/heads/main")
            _copy_source(toy_data_dir() / "repo", dest)
            first = _commit(dest, home, *_INITIAL_COMMIT)
            for task, (date, message) in zip(tasks, _FIX_COMMITS, strict=True):
                for key in ("patch", "test_patch"):
                    _git(dest, home, "apply", "--whitespace=nowarn", "-", stdin=task[key])
                _commit(dest, home, date, message)
            _git(dest, home, "tag", "v0.1.0", first)
            _git(dest, home, "tag", "v0.2.0", "HEAD")
            _git(dest, home, "branch", "release", "HEAD")
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        if existed:
            dest.mkdir(parents=True, exist_ok=True)
        raise
    return dest


def _cached_head(repo: Path) -> str | None:
    """HEAD of a cached checkout, or None when it is missing, broken or dirty."""
    if not (repo / ".git").is_dir():
        return None
    with tempfile.TemporaryDirectory(prefix="sweworld-git-home-") as home:
        try:
            if _git(repo, home, "status", "--porcelain", "--untracked-files=all").strip():
                return None
            return _git(repo, home, "rev-parse", "--verify", "HEAD").strip()
        except RuntimeError:
            return None


def ensure_toy_repo(cache_dir: Path | None = None) -> Path:
    """Build the toy repository once into ``<cache>/sources/sweworld__stockroom``.

    Returns the cached path.  The checkout is rebuilt when its HEAD is not
    :data:`TOY_HEAD_COMMIT` (or it is dirty).  Safe across processes: builds happen
    under an ``fcntl`` lock, in a temporary folder that is renamed into place.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "sources" / TOY_CACHE_NAME
    if _cached_head(target) == TOY_HEAD_COMMIT:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{TOY_CACHE_NAME}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _cached_head(target) == TOY_HEAD_COMMIT:
                return target
            build = Path(tempfile.mkdtemp(prefix=f".{TOY_CACHE_NAME}.build-", dir=target.parent))
            try:
                build_toy_repo(build)
                if target.exists() or target.is_symlink():
                    trash = tempfile.mkdtemp(prefix=f".{TOY_CACHE_NAME}.old-", dir=target.parent)
                    os.rename(target, os.path.join(trash, "repo"))
                    shutil.rmtree(trash, ignore_errors=True)
                os.rename(build, target)
            except BaseException:
                shutil.rmtree(build, ignore_errors=True)
                raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    head = _cached_head(target)
    if head != TOY_HEAD_COMMIT:
        warnings.warn(
            f"toy repo built with HEAD {head}, expected {TOY_HEAD_COMMIT}: "
            "data/toy changed without updating TOY_HEAD_COMMIT",
            RuntimeWarning,
            stacklevel=2,
        )
    return target
