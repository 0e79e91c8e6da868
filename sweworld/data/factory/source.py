"""The library a factory run injects bugs into: from the package index or a local folder.

:func:`from_package` downloads a source distribution (``pip download --no-deps
--no-binary :all:``), :func:`from_repo` takes a local git repository (bare mirrors too) or
a plain folder. Either way the sources become one commit of a bare repository
``<out>/repos/<owner>__<name>.git`` that sessions find with ``SWEWORLD_REPO_CACHE=<out>/repos``
(see :mod:`sweworld.sandbox.repos`). A folder or sdist is committed with a fixed identity and
date, so the same sources give the same commit on every machine; a git repository keeps its
own ``HEAD`` commit. Package-index sources are named ``pypi/<name>``.

:func:`library_files` and :func:`test_files` tell the library's own modules from its tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sweworld.sandbox.repos import RepoError, git

__all__ = [
    "FactorySourceError",
    "LibrarySource",
    "from_package",
    "from_repo",
    "library_files",
    "test_files",
]

_NOT_LIBRARY_DIRS = frozenset(
    {
        "test",
        "tests",
        "testing",
        "docs",
        "doc",
        "examples",
        "example",
        "benchmarks",
        "bench",
        "scripts",
        "tools",
        "build",
        "dist",
        ".git",
        ".tox",
        ".venv",
        "venv",
        "__pycache__",
        "ci",
        ".github",
    }
)
_NOT_LIBRARY_FILES = frozenset({"setup.py", "conftest.py", "noxfile.py", "fabfile.py"})


class FactorySourceError(RuntimeError):
    """The library's sources could not be taken (download, unpack, no tests, git)."""


@dataclass(frozen=True)
class LibrarySource:
    """A library ready for the factory.

    Attributes:
        repo: the task rows' ``repo`` (``pypi/<name>`` or ``owner/name``).
        bare: the bare repository under ``<out>/repos``.
        commit: the base commit (every task's ``base_commit``).
        checkout: a plain working tree of that commit (read by the mutator).
        version: the package version when known.
    """

    repo: str
    bare: Path
    commit: str
    checkout: Path
    version: str | None = None

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[-1]


def is_test_path(rel: str) -> bool:
    """Whether a repository-relative path is a test module or lives in a test folder."""
    parts = rel.split("/")
    name = parts[-1]
    if any(p in ("test", "tests", "testing") for p in parts[:-1]):
        return True
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _walk_py(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                out.append(str(Path(dirpath, name).relative_to(root)).replace(os.sep, "/"))
    return out


def test_files(root: Path) -> list[str]:
    """The test modules of a checkout (``test_*.py``, ``*_test.py``, anything in tests/)."""
    return [
        p
        for p in _walk_py(root)
        if is_test_path(p) and p.rsplit("/", 1)[-1] != "conftest.py" and "/docs/" not in f"/{p}"
    ]


test_files.__test__ = False  # type: ignore[attr-defined]


def library_files(root: Path) -> list[str]:
    """The library's own modules: Python files outside tests, docs, examples, build
    scripts and tooling folders."""
    out = []
    for rel in _walk_py(root):
        parts = rel.split("/")
        if any(p in _NOT_LIBRARY_DIRS for p in parts[:-1]) or parts[-1] in _NOT_LIBRARY_FILES:
            continue
        if is_test_path(rel) or parts[-1].startswith(("_version", "version")):
            continue
        out.append(rel)
    return out


def _commit_folder(src: Path, bare: Path) -> str:
    """Commit ``src``'s files (fixed identity and date) and push them to ``bare``."""
    work = Path(tempfile.mkdtemp(prefix="factory-commit-"))
    try:
        shutil.copytree(
            src,
            work / "tree",
            ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "*.egg-info"),
            symlinks=True,
        )
        tree = work / "tree"
        git(["init", "-q", "-b", "main"], tree)
        git(["add", "-A", "-f"], tree)
        git(["commit", "-q", "--no-verify", "-m", "sources"], tree)
        commit = git(["rev-parse", "HEAD"], tree).stdout.decode().strip()
        _push(tree, bare)
        return commit
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _push(tree: Path, bare: Path) -> None:
    if bare.exists():
        shutil.rmtree(bare)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(["clone", "-q", "--bare", str(tree), str(bare)])


def _checkout(bare: Path, commit: str, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(["clone", "-q", "--no-checkout", str(bare), str(dest)])
    git(["checkout", "-q", commit], dest)
    return dest


def _require_tests(root: Path, label: str) -> None:
    if not test_files(root):
        raise FactorySourceError(f"{label}: no test modules (test_*.py, *_test.py, tests/)")
    if not library_files(root):
        raise FactorySourceError(f"{label}: no library module outside the tests")


def _unpack(archive: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    if archive.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if not str(target).startswith(str(root) + os.sep):
                    raise FactorySourceError(f"{archive.name}: unsafe path {member.name!r}")
                if member.issym() or member.islnk() or member.isdev():
                    raise FactorySourceError(f"{archive.name}: link or device {member.name!r}")
            tar.extractall(dest)
    elif archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not str((dest / name).resolve()).startswith(str(root) + os.sep):
                    raise FactorySourceError(f"{archive.name}: unsafe path {name!r}")
            zf.extractall(dest)
    else:
        raise FactorySourceError(f"{archive.name}: not a source distribution archive")
    entries = [p for p in dest.iterdir() if p.is_dir()]
    return entries[0] if len(entries) == 1 else dest


_SPEC_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9._+!-]+))?$")


def from_package(spec: str, out: Path, *, timeout: float = 600) -> LibrarySource:
    """Download ``NAME`` or ``NAME==VERSION``'s sdist and make it ``pypi/<name>``."""
    match = _SPEC_RE.match(spec.strip())
    if not match:
        raise FactorySourceError(f"{spec!r}: expected NAME or NAME==VERSION")
    name = match.group(1).lower().replace("_", "-")
    download = Path(tempfile.mkdtemp(prefix="factory-sdist-"))
    try:
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"),
                *("--disable-pip-version-check", "-q", "-d", str(download), spec.strip()),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        archives = sorted(download.iterdir())
        if proc.returncode != 0 or not archives:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise FactorySourceError(f"pip download {spec} failed: {' '.join(tail)}")
        archive = archives[0]
        version = _version_of(archive.name, name)
        tree = _unpack(archive, download / "unpacked")
        _require_tests(tree, spec)
        repo = f"pypi/{name}"
        bare = out / "repos" / f"pypi__{name}.git"
        commit = _commit_folder(tree, bare)
    except subprocess.TimeoutExpired as exc:
        raise FactorySourceError(f"pip download {spec} timed out after {timeout:g} s") from exc
    except RepoError as exc:
        raise FactorySourceError(str(exc)) from exc
    finally:
        shutil.rmtree(download, ignore_errors=True)
    checkout = _checkout(bare, commit, out / "source" / f"pypi__{name}")
    return LibrarySource(repo=repo, bare=bare, commit=commit, checkout=checkout, version=version)


def _version_of(archive_name: str, name: str) -> str | None:
    stem = re.sub(r"\.(tar\.gz|tgz|tar\.bz2|zip|tar)$", "", archive_name)
    norm = stem.lower().replace("_", "-")
    prefix = name + "-"
    return stem[len(prefix) :] if norm.startswith(prefix) else None


def repo_name_of(path: Path) -> str:
    """``owner/name`` for a local folder: ``owner+name`` (the mirror layout) or
    ``owner__name`` folder names, else ``local/<folder>``."""
    for candidate in (path, path.parent):
        stem = candidate.name.removesuffix(".git")
        for sep in ("+", "__"):
            if sep in stem:
                owner, _, name = stem.partition(sep)
                if owner and name:
                    return f"{owner}/{name}"
    return f"local/{path.name.removesuffix('.git')}"


def from_repo(path: str | Path, out: Path, *, name: str | None = None) -> LibrarySource:
    """Take a local git repository (bare or not; its ``HEAD``) or a plain folder."""
    src = Path(path).resolve()
    if not src.is_dir():
        raise FactorySourceError(f"{path}: not a folder")
    repo = name or repo_name_of(src)
    owner, _, short = repo.partition("/")
    bare = out / "repos" / f"{owner}__{short}.git"
    try:
        is_git = git(["rev-parse", "--git-dir"], src, check=False).returncode == 0 and (
            (src / ".git").exists() or (src / "HEAD").is_file()
        )
        if is_git:
            commit = git(["rev-parse", "HEAD^{commit}"], src).stdout.decode().strip()
            tmp = Path(tempfile.mkdtemp(prefix="factory-clone-"))
            try:
                git(["clone", "-q", "--no-checkout", str(src), str(tmp / "tree")])
                git(["checkout", "-q", commit], tmp / "tree")
                _push(tmp / "tree", bare)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            commit = _commit_folder(src, bare)
        checkout = _checkout(bare, commit, out / "source" / f"{owner}__{short}")
    except RepoError as exc:
        raise FactorySourceError(str(exc)) from exc
    _require_tests(checkout, str(path))
    return LibrarySource(repo=repo, bare=bare, commit=commit, checkout=checkout)
