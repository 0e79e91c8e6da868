"""Taking a library's sources: nothing of a downloaded package runs on the host, hostile
archives and names are refused, and links never lead the factory out of its copy."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from sweworld.data.factory import source

SETUP_PY = """\
import pathlib
pathlib.Path({marker!r}).write_text("setup.py ran on the host")
from setuptools import setup
setup(name="sweworld-evil-sdist", version="1.0", packages=["evil"])
"""


def _sdist(folder: Path, marker: Path, version: str = "1.0") -> Path:
    files = {
        "setup.py": SETUP_PY.format(marker=str(marker)),
        "evil/__init__.py": "def f(x):\n    return x + 1\n",
        "tests/test_evil.py": "from evil import f\n\n\ndef test_f():\n    assert f(1) == 2\n",
    }
    archive = folder / f"sweworld_evil_sdist-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"sweworld_evil_sdist-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def _index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archives: list[Path]) -> Path:
    """A simple index with only ``archives`` (their sha256 in the links), as pip's index."""
    page = tmp_path / "simple" / "sweworld-evil-sdist"
    page.mkdir(parents=True)
    links = "".join(
        f'<a href="../../files/{a.name}#sha256={hashlib.sha256(a.read_bytes()).hexdigest()}">'
        f"{a.name}</a>\n"
        for a in archives
    )
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", (tmp_path / "nothing").as_uri())
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing"))
    # pip would build with the host's setuptools (as it does with a setuptools sdist from
    # PyPI): ``pip download`` ran setup.py on the host here
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    return page


def test_a_package_from_the_index_never_runs_its_setup_py(tmp_path, monkeypatch) -> None:
    files = tmp_path / "files"
    files.mkdir()
    marker = tmp_path / "marker"
    for version in ("0.9", "1.0", "2.0rc1"):
        _sdist(files, marker, version)
    _index(tmp_path, monkeypatch, sorted(files.iterdir()))
    lib = source.from_package("sweworld_evil_sdist", tmp_path / "out", timeout=30)
    assert not marker.exists(), "the package's setup.py ran on the host"
    assert lib.repo == "pypi/sweworld-evil-sdist" and lib.version == "1.0"  # no pre-release
    assert (lib.checkout / "evil" / "__init__.py").is_file()
    pinned = source.from_package("sweworld-evil-sdist==0.9", tmp_path / "out2", timeout=30)
    assert pinned.version == "0.9" and not marker.exists()


def test_a_download_that_does_not_match_its_hash_is_refused(tmp_path, monkeypatch) -> None:
    files = tmp_path / "files"
    files.mkdir()
    archive = _sdist(files, tmp_path / "marker")
    _index(tmp_path, monkeypatch, [archive])
    archive.write_bytes(archive.read_bytes() + b"tampered")
    with pytest.raises(source.FactorySourceError, match="sha256"):
        source.from_package("sweworld-evil-sdist", tmp_path / "out", timeout=30)
    with pytest.raises(source.FactorySourceError, match="no source distribution"):
        source.from_package("sweworld-evil-sdist==3.0", tmp_path / "out", timeout=30)


def _folder(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("def f(x):\n    return x + 1\n")
    (root / "tests" / "test_f.py").write_text(
        "from pkg import f\n\n\ndef test_f():\n    assert f(1) == 2\n"
    )
    return root


def test_a_name_that_leaves_the_output_folder_is_refused(tmp_path: Path) -> None:
    src = _folder(tmp_path / "lib")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    out = tmp_path / "a" / "b" / "out"
    for name in ("x/../../../../../victim", "../x", "x/..", "/abs/x", "x"):
        with pytest.raises(source.FactorySourceError, match="OWNER/NAME"):
            source.from_repo(src, out, name=name)
    assert (victim / "keep.txt").read_text() == "precious"
    assert source.from_repo(src, out, name="me/lib").repo == "me/lib"


def test_linked_modules_are_never_read(tmp_path: Path) -> None:
    """A module that links out of the checkout (a host file) is neither a library module nor
    a test: the factory reads only the library's own files."""
    secret = tmp_path / "host_secret.py"
    secret.write_text("TOKEN = 'host secret'\n")
    src = _folder(tmp_path / "lib")
    os.symlink(secret, src / "pkg" / "leak.py")
    os.symlink(secret, src / "tests" / "test_leak.py")
    lib = source.from_repo(src, tmp_path / "out", name="me/lib")
    assert os.path.islink(lib.checkout / "pkg" / "leak.py")  # the copy keeps the link
    assert source.library_files(lib.checkout) == ["pkg/__init__.py"]
    assert source.test_files(lib.checkout) == ["tests/test_f.py"]
