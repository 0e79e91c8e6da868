"""Finding modules the way the command's interpreter would: cached workspace reads
(:class:`Workspace`), the standard library's names and the module finder (:class:`Importer`).
"""

from __future__ import annotations

import ast
import fnmatch
import os
import posixpath
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import sweworld.pyast as pyast
from sweworld.transition.facts.records import SyntaxErrorInfo
from sweworld.transition.types import WORKDIR, WorkspaceView

# --------------------------------------------------------------------------- import search


_UNSURE_MODULE_NAMES = frozenset({"version", "_version", "__version__", "_build_info", "conf"})
_BUILD_SUFFIXES = (".c", ".cpp", ".cc", ".pyx", ".pxd", ".f", ".f90", ".pyi", ".so", ".pyd")

#: Standard-library modules whose import is silent and never fails, from Python 3.6 on.
QUIET_STDLIB = frozenset(
    """
    __future__ abc argparse array ast asyncio base64 binascii bisect builtins bz2 calendar
    cmath codecs collections concurrent configparser contextlib copy copyreg csv dataclasses
    datetime decimal difflib dis doctest email enum errno fnmatch fractions functools gc getopt
    gettext glob gzip hashlib heapq hmac html http importlib inspect io ipaddress itertools
    json keyword linecache locale logging math mimetypes numbers operator os pathlib pickle
    pkgutil platform pprint queue random re reprlib secrets select shlex shutil signal site
    socket stat statistics string struct subprocess sys sysconfig tempfile textwrap threading
    time timeit token tokenize traceback types typing unicodedata unittest urllib uuid warnings
    weakref xml zipfile zlib
    """.split()  # noqa: SIM905
)


#: Standard-library modules of Python 3.6-3.12 that newer versions removed: an environment
#: with an older Python has them, so they are never reported missing.
_REMOVED_STDLIB = frozenset(
    """
    _dummy_thread aifc asynchat asyncore audioop binhex cgi cgitb chunk crypt distutils
    dummy_threading formatter imghdr imp lib2to3 macpath mailcap msilib nis nntplib
    ossaudiodev parser pipes smtpd sndhdr spwd sunau symbol telnetlib uu xdrlib
    """.split()  # noqa: SIM905
)


def _stdlib_names() -> frozenset[str]:
    names = getattr(sys, "stdlib_module_names", None)
    base = frozenset(names) if names else QUIET_STDLIB  # pragma: no branch
    return base | frozenset(sys.builtin_module_names) | _REMOVED_STDLIB


STDLIB_NAMES = _stdlib_names()


class Workspace:
    """Cached reads of the workspace for one computation."""

    def __init__(self, view: WorkspaceView):
        self.view = view
        self._text: dict[str, str | None] = {}
        self._tree: dict[str, ast.Module | None] = {}
        self._list: dict[str, list[str]] = {}
        self._entries: dict[str, dict[str, str] | None] = {}
        self._gitignore: list[str] | None = None
        self.compiled: dict[str, SyntaxErrorInfo | None] = {}
        self.import_checked: dict[str, SyntaxErrorInfo | None] = {}

    def text(self, path: str) -> str | None:
        if path not in self._text:
            self._text[path] = self.view.read_text(path)
        return self._text[path]

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._tree:
            text = self.text(path)
            tree = None
            if text is not None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tree = pyast.parse_shared(text, filename=path)
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    tree = None
            self._tree[path] = tree
        return self._tree[path]

    def listdir(self, path: str) -> list[str]:
        if path not in self._list:
            entries = self.entries(path)
            self._list[path] = sorted(entries) if entries is not None else []
        return self._list[path]

    def entries(self, directory: str) -> dict[str, str] | None:
        """name -> ``file`` / ``dir`` / ``link`` / ``other`` for a directory's entries
        (None when it is not a directory); symbolic links are resolved by the view."""
        directory = posixpath.normpath(directory)
        if directory not in self._entries:
            out: dict[str, str] | None = None
            host = self.view.host(directory)
            if host is not None and host.is_dir():
                out = {}
                try:
                    with os.scandir(host) as scan:
                        for entry in scan:
                            if entry.is_symlink():
                                out[entry.name] = "link"
                            elif entry.is_dir(follow_symlinks=False):
                                out[entry.name] = "dir"
                            elif entry.is_file(follow_symlinks=False):
                                out[entry.name] = "file"
                            else:
                                out[entry.name] = "other"
                except OSError:
                    out = None
            self._entries[directory] = out
        return self._entries[directory]

    def _kind(self, path: str) -> str | None:
        path = posixpath.normpath(posixpath.join(self.view.cwd, path))
        parent, name = posixpath.split(path)
        if not name:
            return "dir" if self.view.is_dir(path) else None
        entries = self.entries(parent)
        if entries is None:
            # The parent is not a (visible) directory: a mount root, or outside.
            if self.view.is_dir(path):
                return "dir"
            return "file" if self.view.is_file(path) else None
        kind = entries.get(name)
        if kind == "link":
            if self.view.is_dir(path):
                return "dir"
            return "file" if self.view.is_file(path) else None
        return kind

    def is_file(self, path: str) -> bool:
        return self._kind(path) == "file"

    def is_dir(self, path: str) -> bool:
        return self._kind(path) == "dir"

    def exists(self, path: str) -> bool:
        return self._kind(path) is not None

    def gitignored(self, rel: str) -> bool:
        if self._gitignore is None:
            text = self.text(f"{WORKDIR}/.gitignore") or ""
            self._gitignore = [
                line.strip().lstrip("/").rstrip("/")
                for line in text.splitlines()
                if line.strip() and not line.startswith(("#", "!"))
            ]
        name = posixpath.basename(rel)
        return any(
            fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern)
            for pattern in self._gitignore
        )


@dataclass(frozen=True)
class Found:
    """Where a module was found: ``kind`` is stdlib / installed / workspace / unsure."""

    kind: str
    path: str | None = None  # workspace: the module file (or package __init__.py)
    package_dir: str | None = None  # workspace packages (regular or namespace)


def _module_in_dir(ws: Workspace, directory: str, name: str) -> Found | None:
    base = posixpath.join(directory, name)
    if ws.is_dir(base):
        init = base + "/__init__.py"
        if ws.is_file(init):
            return Found("workspace", init, base)
        # A namespace package, unless it only looks like one (a build-only directory).
        return Found("workspace", None, base)
    if ws.is_file(base + ".py"):
        return Found("workspace", base + ".py")
    entries = ws.listdir(directory)
    prefix = name + "."
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith((".so", ".pyd", ".pyc")):
            return Found("unsure", base)
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith(_BUILD_SUFFIXES):
            return Found("unsure", base)
    return None


class Importer:
    """Finds modules the way the command's interpreter would, as far as the workspace shows."""

    def __init__(
        self,
        ws: Workspace,
        search_dirs: Sequence[str],
        installed: frozenset[str],
        *,
        complete: bool = True,
    ):
        """``complete``: whether ``installed`` is everything installed; when it is not, a
        top-level module found nowhere is ``unsure`` rather than missing."""
        self.ws = ws
        self.search_dirs = [d for d in dict.fromkeys(search_dirs) if d]
        self.installed = installed
        self.complete = complete
        self._top: dict[tuple[tuple[str, ...], str], Found | None] = {}
        self._sub: dict[tuple[str | None, str], Found | None] = {}

    def find_top(self, name: str) -> Found | None:
        key = (tuple(self.search_dirs), name)
        if key not in self._top:
            self._top[key] = self._find_top(name)
        return self._top[key]

    def _find_top(self, name: str) -> Found | None:
        # A directory without __init__.py is only a namespace package when no regular
        # module or package of that name exists anywhere on sys.path (site-packages too).
        namespace = None
        for directory in self.search_dirs:
            found = _module_in_dir(self.ws, directory, name)
            if found is None:
                continue
            if found.kind == "workspace" and found.path is None:
                namespace = namespace or found
                continue
            return found
        if name in STDLIB_NAMES:
            return Found("stdlib")
        if name in self.installed:
            return Found("installed")
        if namespace is not None:
            return namespace
        rel_candidates = [name, name + ".py"]
        if any(self.ws.gitignored(c) for c in rel_candidates):
            return Found("unsure")
        if name.startswith("_") and name.lstrip("_") and self.find_top(name.lstrip("_")):
            return Found("unsure")  # e.g. a compiled accelerator of a workspace module
        if not self.complete:
            return Found("unsure")  # installed in the environment, for all we know
        return None

    def find_sub(self, parent: Found, name: str) -> Found | None:
        key = (parent.package_dir, name)
        if key not in self._sub:
            self._sub[key] = self._find_sub(parent, name)
        return self._sub[key]

    def _find_sub(self, parent: Found, name: str) -> Found | None:
        if parent.package_dir is None:
            return None
        found = _module_in_dir(self.ws, parent.package_dir, name)
        if found is not None:
            return found
        rel = posixpath.relpath(posixpath.join(parent.package_dir, name), WORKDIR)
        if (
            name in _UNSURE_MODULE_NAMES
            or self.ws.gitignored(rel)
            or self.ws.gitignored(rel + ".py")
        ):
            return Found("unsure")
        if parent.path is not None:
            init = self.ws.text(parent.path) or ""
            if "__path__" in init or "sys.modules" in init or "extend_path" in init:
                return Found("unsure")
        return None

    def exists(self, dotted: str) -> bool | None:
        """True / False when known whether ``dotted`` can be imported, None when unsure."""
        parts = dotted.split(".")
        found = self.find_top(parts[0])
        if found is None:
            return False
        for part in parts[1:]:
            if found.kind != "workspace":
                return None
            sub = self.find_sub(found, part)
            if sub is None:
                return False
            found = sub
        return None if found.kind == "unsure" else True
