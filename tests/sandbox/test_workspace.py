"""Copy-on-write workspaces: isolation from the base and from each other, snapshot/restore,
fork."""

from __future__ import annotations

import os
import shutil

import pytest

from sweworld.sandbox.backends import overlay_available, resolve_backend
from sweworld.sandbox.overlay import OverlayWorkspace
from sweworld.sandbox.workspace import CopyWorkspace, WorkspaceError


@pytest.fixture
def base(tmp_path):
    lower = tmp_path / "base"
    (lower / "pkg").mkdir(parents=True)
    (lower / "pkg" / "mod.py").write_text("x = 1\n")
    (lower / "README").write_text("readme\n")
    return lower


def backends(tmp_path):
    out = [CopyWorkspace]
    if overlay_available(str(tmp_path)):
        out.append(OverlayWorkspace)
    return out


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_isolation_save_load_fork_destroy(tmp_path, base, kind):
    if kind == "overlay" and not overlay_available(str(tmp_path)):
        pytest.skip("this process may not mount overlays")
    cls = OverlayWorkspace if kind == "overlay" else CopyWorkspace
    a = cls(base, tmp_path / "a")
    b = cls(base, tmp_path / "b")
    (a.root / "pkg" / "mod.py").write_text("x = 2\n")
    (a.root / "README").unlink()
    (a.root / "new.txt").write_text("new\n")
    assert (base / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (base / "README").exists()
    assert (b.root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (b.root / "new.txt").exists()

    saved = a.snapshot()
    c = a.fork(tmp_path / "c")
    (a.root / "new.txt").write_text("changed\n")
    (c.root / "pkg" / "mod.py").write_text("x = 3\n")
    assert (a.root / "pkg" / "mod.py").read_text() == "x = 2\n"
    assert not (c.root / "README").exists()  # deletions carry into the fork
    a.restore(saved)
    assert (a.root / "new.txt").read_text() == "new\n"
    assert not (a.root / "README").exists()

    for ws in (a, b, c):
        ws.destroy()
    assert not any((tmp_path / name / "upper").exists() for name in "abc")
    assert not any((tmp_path / name / "d").exists() for name in "abc")
    assert sorted(os.listdir(base)) == ["README", "pkg"]


def test_overlay_untouched_session_is_tiny_and_leaves_no_host_mount(tmp_path, base):
    if not overlay_available(str(tmp_path)):
        pytest.skip("this process may not mount overlays")
    ws = OverlayWorkspace(base, tmp_path / "s")
    assert ws.disk_usage() < 64 * 1024
    with open("/proc/self/mountinfo") as fh:
        assert str(ws.bind_source) not in fh.read()  # the mount lives in its own namespace
    (ws.root / "pkg" / "mod.py").write_text("y = 1\n")
    assert os.listdir(ws.upper / "pkg") == ["mod.py"]  # only the touched file was copied up
    ws.destroy()


def test_backend_resolution(tmp_path):
    assert resolve_backend("copy", tmp_path) == "copy"
    assert resolve_backend("auto", tmp_path) in ("overlay", "copy")
    with pytest.raises(WorkspaceError, match="unknown workspace backend"):
        resolve_backend("hardlink", tmp_path)


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_changes_lists_written_and_deleted_paths(tmp_path, base, kind):
    if kind == "overlay" and not overlay_available(str(tmp_path)):
        pytest.skip("this process may not mount overlays")
    (base / "pkg" / "sub").mkdir()
    (base / "pkg" / "sub" / "a.py").write_text("a\n")
    (base / ".git").mkdir()
    (base / ".git" / "index").write_text("idx")
    cls = OverlayWorkspace if kind == "overlay" else CopyWorkspace
    ws = cls(base, tmp_path / "s")
    try:
        assert ws.changes().written == () and ws.changes().deleted == ()
        (ws.root / "pkg" / "mod.py").write_text("x = 2\n")
        (ws.root / "new.txt").write_text("new\n")
        (ws.root / "README").unlink()
        shutil.rmtree(ws.root / "pkg" / "sub")
        (ws.root / ".git" / "index").write_text("changed")
        (ws.root / "pkglink").symlink_to("pkg")
        changes = ws.changes()
        assert changes.written == ("new.txt", "pkg/mod.py", "pkglink")
        assert changes.deleted == ("README", "pkg/sub/a.py")
    finally:
        ws.destroy()


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_changes_lists_new_directories_empty_ones_included(tmp_path, base, kind):
    if kind == "overlay" and not overlay_available(str(tmp_path)):
        pytest.skip("this process may not mount overlays")
    cls = OverlayWorkspace if kind == "overlay" else CopyWorkspace
    ws = cls(base, tmp_path / "ws")
    try:
        (ws.root / "out" / "deep").mkdir(parents=True)  # new and empty
        (ws.root / "pkg" / "sub").mkdir()  # new, inside a base directory
        (ws.root / "pkg" / "mod.py").write_text("x = 2\n")  # pkg itself is the base's
        os.symlink("pkg", ws.root / "alias")  # a symlink is a written entry, not a dir
        (ws.root / ".git").mkdir()
        (ws.root / ".git" / "objects").mkdir()
        changes = ws.changes()
        assert changes.dirs == ("out", "out/deep", "pkg/sub")
        assert "alias" in changes.written
        shutil.rmtree(ws.root / "out")
        assert ws.changes().dirs == ("pkg/sub",)
    finally:
        ws.destroy()


@pytest.mark.parametrize("kind", ["overlay", "copy"])
@pytest.mark.parametrize("snapshot_between", [False, True])
def test_a_base_file_replaced_by_a_directory_is_a_dir_not_a_deletion(
    tmp_path, base, kind, snapshot_between
):
    """A base file the agent made a directory of is not gone: it is in ``dirs`` and its new
    files in ``written``, whether the change sits in one layer or across a snapshot's
    frozen layer (found by the Docker executor's sync, which removed the directory again
    on every step when the path was also listed as deleted)."""
    if kind == "overlay" and not overlay_available(str(tmp_path)):
        pytest.skip("this process may not mount overlays")
    cls = OverlayWorkspace if kind == "overlay" else CopyWorkspace
    ws = cls(base, tmp_path / "ws")
    try:
        (ws.root / "README").unlink()
        (ws.root / "README").mkdir()
        (ws.root / "README" / "x").write_text("hi\n")
        if snapshot_between:
            ws.snapshot()
        (ws.root / "README" / "y").write_text("more\n")
        changes = ws.changes()
        assert changes.dirs == ("README",)
        assert changes.written == ("README/x", "README/y")
        assert changes.deleted == ()
        shutil.rmtree(ws.root / "README")  # and gone again: now it is a deletion
        changes = ws.changes()
        assert (changes.dirs, changes.written, changes.deleted) == ((), (), ("README",))
    finally:
        ws.destroy()
