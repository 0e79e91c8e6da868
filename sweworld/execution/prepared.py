"""Session bases with the environment build's products laid in.

A SWE-bench image installs the repository in its ``/testbed``, and what the install writes
there stays: the package's metadata (``*.egg-info``), a version file setuptools_scm
generates (pytest's ``src/_pytest/_version.py``, without which pytest does not import),
extensions compiled in place. The local executor builds in a throwaway ``/testbed`` and
keeps those files, the ones git ignores, in a tar (:mod:`sweworld.execution.envbuild`).
:func:`prepared_base` makes, once per (build, base checkout), a copy of the base checkout
with them laid in: the base's files hard-linked (a base is never written after it is made),
the products extracted beside them, never over a file of the base. Sessions open on it, so
the agent sees what the image would show and a real run finds its version file; the patch
(``git add -A``) skips ignored files, so the products never reach it.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from sweworld.execution.envs import PythonEnv
from sweworld.sandbox.repos import BaseCheckout, file_lock

log = logging.getLogger(__name__)

MAX_PRODUCT_BYTES = 1 << 30  # a build that leaves more is not laid in (and says so)
MAX_PRODUCT_FILES = 200_000


class ProductsError(RuntimeError):
    """The products of a build cannot be laid under a base (too large, unreadable)."""


def prepared_base(base: BaseCheckout, env: PythonEnv) -> BaseCheckout:
    """``base`` with the products of ``env``'s build laid in (``base`` itself when the build
    failed or made nothing). Made once, under a lock, in ``<env root>/bases/<build>/``."""
    if not env.ok or env.products is None:
        return base
    digest = hashlib.sha256(f"{base.path}\0{base.head}".encode()).hexdigest()[:16]
    dest = env.root / "bases" / env.venv.name / digest
    with file_lock(dest.parent / f".{dest.name}.lock"):
        if not dest.is_dir():
            scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
            try:
                tree = scratch / "tree"
                shutil.copytree(base.path, tree, symlinks=True, copy_function=_link_or_copy)
                lay_products(env.products, tree)
                os.rename(tree, dest)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return BaseCheckout(path=dest, head=base.head, branch=base.branch)


def lay_products(products: Path, tree: Path) -> int:
    """Extract the tar ``products`` into ``tree``, never over a path ``tree`` holds and
    never outside it (tarfile's ``data`` filter). Returns how many files were laid.

    Raises:
        ProductsError: the tar is unreadable, or over :data:`MAX_PRODUCT_BYTES` /
            :data:`MAX_PRODUCT_FILES`.
    """
    laid = 0
    try:
        with tarfile.open(products) as archive:
            members = []
            size = 0
            for member in archive:
                size += max(member.size, 0)
                if len(members) >= MAX_PRODUCT_FILES or size > MAX_PRODUCT_BYTES:
                    raise ProductsError(
                        f"{products}: the build made over {MAX_PRODUCT_FILES} files or "
                        f"{MAX_PRODUCT_BYTES >> 20} MiB in /testbed; they are not laid in"
                    )
                if not os.path.lexists(tree / member.name):
                    members.append(member)
            for member in members:
                try:
                    archive.extract(member, tree, filter="data")
                except (tarfile.FilterError, OSError) as exc:
                    log.warning("%s: %s not laid in: %s", products, member.name, exc)
                    continue
                laid += not member.isdir()
    except tarfile.TarError as exc:
        raise ProductsError(f"{products}: not a readable tar ({exc})") from exc
    return laid


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
    "MAX_PRODUCT_FILES",
    "ProductsError",
    "lay_products",
    "prepared_base",
]
