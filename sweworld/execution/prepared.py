"""Session bases with the environment build's products laid in.

A SWE-bench image installs the repository in its ``/testbed``, and what the install writes
there stays: the package's metadata (``*.egg-info``), a version file setuptools_scm
generates (pytest's ``src/_pytest/_version.py``, without which pytest does not import),
extensions compiled in place. The local executor builds in a throwaway ``/testbed`` and
keeps those files, the ones git ignores, in a tar (:mod:`sweworld.execution.envbuild`).
:func:`prepared_base` makes, once per (build, base checkout), a copy of the base checkout
with them laid in: the base's files hard-linked (a base is never written after it is made),
the products written beside them. Sessions open on it, so the agent sees what the image
would show and a real run finds its version file.

The tar is written by a sandbox that ran the repository's own build code, so it is read as
hostile: only regular files are laid, each created new (``O_EXCL | O_NOFOLLOW``, so never
through a link into the base, never over a file the base has), in folders created here or
real folders of the base (never a symlink), never under ``.git``, no git control file
(``.gitignore``...), bounded in number, size and depth. A laid file git would not ignore
(it would reach the agent's patch) is taken out again.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from sweworld.execution.envs import PythonEnv
from sweworld.sandbox.repos import BaseCheckout, file_lock

log = logging.getLogger(__name__)

MAX_PRODUCT_BYTES = 1 << 30  # a build that leaves more is not laid in (and says so)
MAX_PRODUCT_FILES = 200_000  # members of the tar, whatever they are
MAX_PRODUCT_DEPTH = 64  # folders above a laid file
_CHUNK = 1 << 20
_GIT_FILES = frozenset({".gitignore", ".gitattributes", ".gitmodules", ".git"})


class ProductsError(RuntimeError):
    """The products of a build cannot be laid under a base (too large, unreadable)."""


def prepared_base(base: BaseCheckout, env: PythonEnv) -> BaseCheckout:
    """``base`` with the products of ``env``'s build laid in (``base`` itself when the build
    failed or made nothing). Made once, under a lock, in ``<env root>/bases/<build>/``; a
    build whose products cannot be laid is remembered (``<digest>.failed``, the reason), so
    that the next session does not try again, and gets ``base``.

    Raises:
        ProductsError: the products cannot be laid in (the first time; logged after).
    """
    if not env.ok or env.products is None:
        return base
    digest = hashlib.sha256(f"{base.path}\0{base.head}".encode()).hexdigest()[:16]
    dest = env.root / "bases" / env.venv.name / digest
    failed = dest.parent / f"{digest}.failed"
    with file_lock(dest.parent / f".{dest.name}.lock"):
        if failed.exists():
            return base
        if not dest.is_dir():
            scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
            try:
                tree = scratch / "tree"
                shutil.copytree(base.path, tree, symlinks=True, copy_function=_link_or_copy)
                try:
                    lay_products(env.products, tree)
                    _drop_unignored(tree, base.path)
                except ProductsError as exc:
                    failed.write_text(f"{exc}\n")
                    raise
                os.rename(tree, dest)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return BaseCheckout(path=dest, head=base.head, branch=base.branch)


def lay_products(products: Path, tree: Path) -> int:
    """Write the regular files of the tar ``products`` into ``tree`` (see the module
    docstring for what is refused). Returns how many files were laid.

    Raises:
        ProductsError: the tar is missing or unreadable, or over :data:`MAX_PRODUCT_FILES`
            members or :data:`MAX_PRODUCT_BYTES` of files.
    """
    laid = 0
    size = 0
    try:
        with tarfile.open(products, "r:") as archive:
            for count, member in enumerate(archive, 1):
                if count > MAX_PRODUCT_FILES:
                    raise ProductsError(
                        f"{products}: the build left over {MAX_PRODUCT_FILES} entries in "
                        "/testbed; they are not laid in"
                    )
                archive.members.clear()  # keep nothing of what was read: memory stays flat
                if not member.isreg():
                    continue  # links, devices, fifos: never; folders: made as needed
                size += member.size
                if size > MAX_PRODUCT_BYTES:
                    raise ProductsError(
                        f"{products}: the build left over {MAX_PRODUCT_BYTES >> 20} MiB in "
                        "/testbed; it is not laid in"
                    )
                parts = _parts(member.name)
                if parts is None:
                    log.warning("%s: %r not laid in (its name)", products, member.name[:200])
                    continue
                folder = _folder(tree, parts[:-1])
                if folder is None:
                    continue  # a folder of the base that is a link or a file: nothing there
                source = archive.extractfile(member)
                if source is not None and _write_new(folder, parts[-1], source, member.mode):
                    laid += 1
    except tarfile.TarError as exc:
        raise ProductsError(f"{products}: not a readable tar ({exc})") from exc
    except OSError as exc:
        raise ProductsError(f"{products}: could not be laid in ({exc})") from exc
    return laid


def _parts(name: str) -> list[str] | None:
    """The path components of a member's name, or None when it is absolute, climbs, is
    empty, too deep, or names a git control file."""
    if not name or name.startswith("/") or "\0" in name or len(name) > 4096:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or len(parts) > MAX_PRODUCT_DEPTH + 1:
        return None
    if any(p == ".." or p in _GIT_FILES or len(p.encode()) > 255 for p in parts):
        return None
    return parts


def _folder(tree: Path, parts: list[str]) -> Path | None:
    """``tree / parts``, each folder created when missing; None where a component is not a
    real folder (a symlink or a file of the base)."""
    folder = tree
    for part in parts:
        folder = folder / part
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            os.mkdir(folder, 0o755)
            continue
        if not stat.S_ISDIR(mode):
            return None
    return folder


def _write_new(folder: Path, name: str, source: IO[bytes], mode: int) -> bool:
    """Create ``folder / name`` (never an existing path, never through a link) with the
    bytes of ``source``; False when the path exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder / name, flags, 0o755 if mode & 0o111 else 0o644)
    except FileExistsError:
        return False  # the base's own file (or one laid before) wins
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            out.write(chunk)
    return True


def _drop_unignored(tree: Path, base: Path) -> None:
    """Remove the laid files git would not ignore: they would reach the agent's patch
    (``get_patch``'s ``git add -A``). The base's own git folder and ``.gitignore`` files
    decide, with no system or user configuration; the base has no untracked file."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/nonexistent",
    }
    try:
        out = subprocess.run(
            [
                "git",
                "-c",
                "core.quotePath=false",
                "ls-files",
                "-z",
                "--others",
                "--exclude-standard",
            ],
            cwd=tree,
            env=env,
            capture_output=True,
            timeout=600,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProductsError(f"{base}: could not check which products git ignores ({exc})") from exc
    for name in out.decode("utf-8", "surrogateescape").split("\0"):
        if name:
            log.warning("%s: %s is not ignored by git; not laid in", base, name[:200])
            (tree / name).unlink(missing_ok=True)


def _link_or_copy(src: str, dst: str) -> str:
    """A hard link where the file system allows one, else a copy."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


__all__ = [
    "MAX_PRODUCT_BYTES",
    "MAX_PRODUCT_DEPTH",
    "MAX_PRODUCT_FILES",
    "ProductsError",
    "lay_products",
    "prepared_base",
]
