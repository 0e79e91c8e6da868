"""The library a factory run injects bugs into: from the package index or a local folder.

:func:`from_package` downloads a source distribution from the indexes pip is configured
with (only the archive is fetched: nothing of the package runs on the host, where ``pip
download`` would run its build backend), :func:`from_repo` takes a local git repository
(bare mirrors too) or a plain folder. Either way the sources become one commit of a bare repository
``<out>/repos/<owner>__<name>.git`` that sessions find with ``SWEWORLD_REPO_CACHE=<out>/repos``
(see :mod:`sweworld.sandbox.repos`). A folder or sdist is committed with a fixed identity and
date, so the same sources give the same commit on every machine; a git repository keeps its
own ``HEAD`` commit. Package-index sources are named ``pypi/<name>``.

:func:`library_files` and :func:`test_files` tell the library's own modules from its tests.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
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

log = logging.getLogger(__name__)

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
            # a link may lead out of the checkout (a host file read by the mutator)
            if name.endswith(".py") and not os.path.islink(os.path.join(dirpath, name)):
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
_ARCHIVES = (".tar.gz", ".tgz", ".tar.bz2", ".zip", ".tar")
_MAX_INDEX_PAGE = 32 * 1024 * 1024
_MAX_SDIST = 512 * 1024 * 1024


def normalize_name(name: str) -> str:
    """A project name as the package index spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class _Links(HTMLParser):
    """The ``<a href>`` links of a simple-index page: ``(href, yanked)``."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            values = dict(attrs)
            if values.get("href"):
                self.links.append((str(values["href"]), "data-yanked" in values))


def _pip_settings() -> dict[str, str]:
    """pip's effective ``index-url``, ``extra-index-url``, ``find-links`` and ``no-index``
    (``pip config list``: environment variables, then the ``download``, then the
    ``global`` section)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found: dict[tuple[str, str], str] = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"^([^.=]*)\.([a-z-]+)=(.*)$", line.strip())
        if match:
            value = match.group(3).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            found[(match.group(1), match.group(2))] = value
    settings = {}
    for key in ("index-url", "extra-index-url", "find-links", "no-index"):
        for section in (":env:", "download", "global"):
            if (section, key) in found:
                settings[key] = found[(section, key)]
                break
    return settings


def _read_url(url: str, limit: int, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data = response.read(limit + 1)
    if len(data) > limit:
        raise FactorySourceError(f"{url}: more than {limit} bytes")
    return data


def _index_pages(settings: dict[str, str], name: str) -> list[str]:
    """The pages (URLs) that may link ``name``'s files: each index's project page, each
    find-links page or folder."""
    pages = []
    if settings.get("no-index", "").lower() not in ("1", "true", "yes", "on"):
        indexes = [settings.get("index-url") or "https://pypi.org/simple"]
        indexes += settings.get("extra-index-url", "").split()
        pages += [f"{index.rstrip('/')}/{name}/" for index in indexes]
    for link in settings.get("find-links", "").split():
        pages.append(link if "://" in link else Path(link).resolve().as_uri())
    return pages


def _links_of(page: str, timeout: float) -> list[tuple[str, bool]]:
    """``(absolute URL, yanked)`` of the files a page or a local folder lists."""
    parsed = urllib.parse.urlparse(page)
    if parsed.scheme == "file":
        folder = Path(urllib.request.url2pathname(parsed.path))
        if folder.is_dir() and not (folder / "index.html").is_file():
            return [(p.resolve().as_uri(), False) for p in sorted(folder.iterdir()) if p.is_file()]
        page = (folder / "index.html").as_uri() if folder.is_dir() else page
    try:
        text = _read_url(page, _MAX_INDEX_PAGE, timeout).decode("utf-8", "replace")
    except (OSError, ValueError, http.client.HTTPException) as exc:  # not there, or down
        log.info("package index page %s: %s", page, exc)
        return []
    links = _Links()
    links.feed(text)
    return [(urllib.parse.urljoin(page, href), yanked) for href, yanked in links.links]


def _pick_sdist(
    links: list[tuple[str, bool]], name: str, version: str | None
) -> tuple[str, str] | None:
    """``(url, version)`` of the newest non-yanked final release's sdist among ``links``
    (``version``'s when given)."""
    from packaging.version import InvalidVersion, Version

    best: tuple[Version, str, str] | None = None
    for url, yanked in links:
        filename = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        ext = next((e for e in _ARCHIVES if filename.endswith(e)), None)
        if ext is None or (yanked and version is None):
            continue
        stem = filename[: -len(ext)]
        head, sep, text = stem.rpartition("-")
        if not sep or normalize_name(head) != name:
            continue
        try:
            parsed = Version(text)
        except InvalidVersion:
            continue
        if version is not None:
            try:
                if parsed != Version(version):
                    continue
            except InvalidVersion:
                if text != version:
                    continue
        elif parsed.is_prerelease:
            continue
        if best is None or parsed > best[0]:
            best = (parsed, url, text)
    return (best[1], best[2]) if best else None


def _download_sdist(spec: str, dest: Path, timeout: float) -> tuple[Path, str]:
    """Fetch ``spec``'s source distribution into ``dest`` from the indexes pip is
    configured with, checking its ``sha256`` when the index gives one. Only files are
    read: nothing of the package runs (``pip download`` would run its build backend to
    prepare metadata). Returns the archive and its version."""
    match = _SPEC_RE.match(spec.strip())
    if not match:
        raise FactorySourceError(f"{spec!r}: expected NAME or NAME==VERSION")
    name, version = normalize_name(match.group(1)), match.group(2)
    links: list[tuple[str, bool]] = []
    for page in _index_pages(_pip_settings(), name):
        links += _links_of(page, timeout)
    chosen = _pick_sdist(links, name, version)
    if chosen is None:
        raise FactorySourceError(f"sdist download {spec} failed: no source distribution found")
    url, found_version = chosen
    filename = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
    archive = dest / Path(filename).name
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(archive, "wb") as out:
            size = 0
            while chunk := response.read(1 << 20):
                size += len(chunk)
                if size > _MAX_SDIST:
                    raise FactorySourceError(f"{url}: more than {_MAX_SDIST} bytes")
                digest.update(chunk)
                out.write(chunk)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise FactorySourceError(f"sdist download {spec} failed: {url}: {exc}") from exc
    expected = urllib.parse.parse_qs(urllib.parse.urlparse(url).fragment).get("sha256")
    if expected and expected[0].lower() != digest.hexdigest():
        raise FactorySourceError(f"sdist download {spec}: {filename}: sha256 mismatch")
    return archive, found_version


def from_package(spec: str, out: Path, *, timeout: float = 600) -> LibrarySource:
    """Download ``NAME`` or ``NAME==VERSION``'s sdist and make it ``pypi/<name>``.

    The archive is fetched from pip's configured indexes without running anything of the
    package (see :func:`_download_sdist`); its tests and build run only in the sandbox."""
    match = _SPEC_RE.match(spec.strip())
    if not match:
        raise FactorySourceError(f"{spec!r}: expected NAME or NAME==VERSION")
    name = normalize_name(match.group(1))
    download = Path(tempfile.mkdtemp(prefix="factory-sdist-"))
    try:
        archive, version = _download_sdist(spec, download, timeout)
        tree = _unpack(archive, download / "unpacked")
        _require_tests(tree, spec)
        repo = f"pypi/{name}"
        bare = out / "repos" / f"pypi__{name}.git"
        commit = _commit_folder(tree, bare)
    except subprocess.TimeoutExpired as exc:
        raise FactorySourceError(f"sdist download {spec} timed out after {timeout:g} s") from exc
    except RepoError as exc:
        raise FactorySourceError(str(exc)) from exc
    finally:
        shutil.rmtree(download, ignore_errors=True)
    checkout = _checkout(bare, commit, out / "source" / f"pypi__{name}")
    return LibrarySource(repo=repo, bare=bare, commit=commit, checkout=checkout, version=version)


_REPO_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


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
    if not _REPO_NAME_RE.match(repo):  # it names folders under ``out`` that are replaced
        raise FactorySourceError(f"{repo!r}: expected OWNER/NAME (letters, digits, . _ -)")
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


def check_name_resolves(lib: LibrarySource) -> None:
    """Raise :class:`FactorySourceError` when sessions would find another repository than the
    library's own under its name (the toy repository, or a folder of that name in a cache
    named before ``<out>/repos``): its tasks' base commit is not there, and git would only
    say "not our ref"."""
    from sweworld.sandbox.repos import find_repo_source

    try:
        found = find_repo_source(lib.repo)
    except RepoError:
        return  # nothing else answers to the name (the check below is the session's own)
    if found.resolve() != lib.bare.resolve():
        raise FactorySourceError(
            f"the name {lib.repo!r} is already taken by the repository at {found}, which "
            f"sessions would check out instead of {lib.bare}; choose another --name"
        )
