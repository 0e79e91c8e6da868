from __future__ import annotations

import os
from pathlib import Path

import pytest

from sweworld.sandbox import paths as paths_mod
from sweworld.sandbox.paths import (
    MAX_SYMLINK_HOPS,
    PathOutsideWorkspace,
    SandboxPaths,
    SymlinkLoop,
)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    testbed = tmp_path / "merged"
    tmp = tmp_path / "session_tmp"
    outside = tmp_path / "outside"
    for d in (testbed, tmp, outside):
        d.mkdir()
    (testbed / "pkg").mkdir()
    (testbed / "pkg" / "x.py").write_text("x = 1\n")
    (outside / "secret.txt").write_text("secret\n")
    return testbed, tmp, outside


@pytest.fixture
def sp(dirs) -> SandboxPaths:
    testbed, tmp, _ = dirs
    return SandboxPaths({"/testbed": testbed, "/tmp": tmp})


def test_relative_paths_join_the_workdir_and_cwd(sp, dirs):
    testbed, tmp, _ = dirs
    assert sp.to_host("pkg/x.py") == testbed / "pkg" / "x.py"
    assert sp.to_host("x.py", cwd="/testbed/pkg") == testbed / "pkg" / "x.py"
    assert sp.to_host(".") == testbed
    assert sp.to_host("/testbed") == testbed
    assert sp.to_host("/tmp/a/b") == tmp / "a" / "b"
    assert sp.to_host("../tmp/out.txt") == tmp / "out.txt"


def test_dot_and_dotdot_are_normalised_lexically(sp, dirs):
    testbed, _, _ = dirs
    assert sp.to_host("/testbed/./pkg/../pkg/x.py") == testbed / "pkg" / "x.py"
    assert sp.to_host("pkg//x.py") == testbed / "pkg" / "x.py"
    assert sp.normalize("a/../../b", "/testbed/sub") == "/testbed/b"
    # ".." at the sandbox root stays at the root
    assert sp.normalize("/../../testbed/x") == "/testbed/x"


@pytest.mark.parametrize(
    "path",
    ["../../etc/passwd", "/etc/passwd", "/root", "/", "..", "/testbedx", "/tmpfoo/x"],
)
def test_paths_outside_the_mounts_are_refused(sp, path):
    with pytest.raises(PathOutsideWorkspace) as info:
        sp.to_host(path)
    assert isinstance(info.value, ValueError)
    assert f"'{path}'" in str(info.value)
    assert "/testbed" in str(info.value)
    assert info.value.path == path
    assert not sp.is_inside(path)


def test_outside_message_is_clear(sp):
    with pytest.raises(PathOutsideWorkspace) as info:
        sp.to_host("/etc/passwd")
    assert str(info.value) == (
        "The path '/etc/passwd' is outside the workspace: only paths under /testbed, /tmp "
        "can be accessed."
    )


def test_absolute_symlink_target_is_read_in_the_sandbox(sp, dirs):
    testbed, _, _ = dirs
    os.symlink("/testbed/pkg/x.py", testbed / "link.py")
    assert sp.to_host("/testbed/link.py") == testbed / "pkg" / "x.py"
    assert sp.resolve("link.py") == "/testbed/pkg/x.py"


def test_relative_symlink_target_is_relative_to_the_link(sp, dirs):
    testbed, _, _ = dirs
    (testbed / "a" / "b").mkdir(parents=True)
    os.symlink("../../pkg/x.py", testbed / "a" / "b" / "rel.py")
    assert sp.to_host("/testbed/a/b/rel.py") == testbed / "pkg" / "x.py"


def test_symlinked_directory_in_the_middle(sp, dirs):
    testbed, _, _ = dirs
    os.symlink("/testbed/pkg", testbed / "alias")
    os.symlink("pkg", testbed / "alias2")
    assert sp.to_host("alias/x.py") == testbed / "pkg" / "x.py"
    assert sp.to_host("alias2/x.py") == testbed / "pkg" / "x.py"
    # ".." in the agent's path is normalised lexically, before any link is followed
    os.symlink("/testbed/pkg/deep", testbed / "deep")
    (testbed / "pkg" / "deep").mkdir()
    assert sp.resolve("deep/../x.py") == "/testbed/x.py"
    # ".." inside a link target climbs from the link's real directory
    os.symlink("deep/../x.py", testbed / "pkg" / "via_deep.py")
    assert sp.resolve("pkg/via_deep.py") == "/testbed/pkg/x.py"


def test_symlink_to_the_tmp_mount(sp, dirs):
    _, tmp, _ = dirs
    os.symlink("/tmp/scratch", dirs[0] / "scratch")
    assert sp.to_host("scratch/f.txt") == tmp / "scratch" / "f.txt"


@pytest.mark.parametrize("target", ["/", "/etc", "/etc/passwd", "/root/.ssh", "../..", "../../.."])
def test_symlinks_leaving_the_workspace_are_refused(sp, dirs, target):
    testbed, _, _ = dirs
    os.symlink(target, testbed / "evil")
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("/testbed/evil")
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("/testbed/evil/passwd")
    assert not sp.is_inside("evil")


def test_symlink_chain_leaving_the_workspace(sp, dirs):
    testbed, _, _ = dirs
    (testbed / "d1").mkdir()
    os.symlink("../d2", testbed / "d1" / "up")  # /testbed/d2
    os.symlink("/testbed/d3", testbed / "d2")
    os.symlink("..", testbed / "d3")  # -> /
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("/testbed/d1/up/etc/passwd")
    # a chain that stays inside is fine
    os.symlink("/testbed/pkg", testbed / "p1")
    os.symlink("p1", testbed / "p2")
    os.symlink("./p2/x.py", testbed / "p3")
    assert sp.to_host("p3") == testbed / "pkg" / "x.py"


def test_link_target_climbing_out_of_a_missing_directory_is_still_resolved(sp, dirs):
    testbed, _, _ = dirs
    os.symlink("/etc/passwd", testbed / "evil")
    os.symlink("missing/../evil", testbed / "sneaky")
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("sneaky")


def test_host_absolute_link_target_is_not_followed_on_the_host(sp, dirs):
    testbed, tmp, outside = dirs
    secret = outside / "secret.txt"
    os.symlink(str(secret), testbed / "hostlink")
    try:
        host = sp.to_host("hostlink")
    except PathOutsideWorkspace:
        return
    assert host != secret
    assert str(host).startswith((str(testbed), str(tmp)))


def test_symlink_loops_are_refused(sp, dirs):
    testbed, _, _ = dirs
    os.symlink("b", testbed / "a")
    os.symlink("a", testbed / "b")
    with pytest.raises(SymlinkLoop) as info:
        sp.to_host("a")
    assert isinstance(info.value, PathOutsideWorkspace)
    assert "too many levels of symbolic links" in str(info.value)
    os.symlink("self", testbed / "self")
    with pytest.raises(SymlinkLoop):
        sp.to_host("self/x")


def test_at_most_40_hops(sp, dirs):
    testbed, _, _ = dirs
    assert MAX_SYMLINK_HOPS == 40
    # l0 -> l1 -> ... -> l40 -> pkg/x.py : 41 links
    os.symlink("pkg/x.py", testbed / "l40")
    for i in range(39, -1, -1):
        os.symlink(f"l{i + 1}", testbed / f"l{i}")
    assert sp.to_host("l1") == testbed / "pkg" / "x.py"  # 40 hops
    with pytest.raises(SymlinkLoop):
        sp.to_host("l0")  # 41 hops


def test_dangling_final_component_is_allowed(sp, dirs):
    testbed, _, _ = dirs
    assert sp.to_host("/testbed/new_dir/new.py") == testbed / "new_dir" / "new.py"
    os.symlink("/testbed/pkg/created.py", testbed / "dangling.py")
    assert sp.to_host("dangling.py") == testbed / "pkg" / "created.py"
    os.symlink("/etc/created.py", testbed / "dangling_out.py")
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("dangling_out.py")


def test_file_used_as_directory_stays_inside(sp, dirs):
    testbed, _, _ = dirs
    assert sp.to_host("pkg/x.py/y") == testbed / "pkg" / "x.py" / "y"


def test_nested_mounts_use_the_longest_root(tmp_path):
    outer = tmp_path / "outer"
    inner = tmp_path / "inner"
    outer.mkdir()
    inner.mkdir()
    sp = SandboxPaths({"/testbed": outer, "/testbed/vendor": inner})
    assert sp.to_host("/testbed/vendor/a.py") == inner / "a.py"
    assert sp.to_host("/testbed/other.py") == outer / "other.py"


def test_deep_mount_roots(tmp_path):
    host = tmp_path / "h"
    host.mkdir()
    sp = SandboxPaths({"/srv/repo": host}, workdir="/srv/repo")
    assert sp.to_host("a.py") == host / "a.py"
    with pytest.raises(PathOutsideWorkspace):
        sp.to_host("/srv")
    os.symlink("/srv/repo/a.py", host / "l")
    assert sp.to_host("l") == host / "a.py"


def test_constructor_validation(tmp_path):
    with pytest.raises(ValueError):
        SandboxPaths({})
    with pytest.raises(ValueError):
        SandboxPaths({"testbed": tmp_path})
    with pytest.raises(ValueError):
        SandboxPaths({"/": tmp_path})


def test_nothing_outside_the_mounts_is_inspected(sp, dirs, monkeypatch):
    testbed, tmp, _ = dirs
    os.symlink("/etc/passwd", testbed / "evil")
    os.symlink("/", testbed / "root")
    os.symlink("../../../../../../etc", testbed / "up")
    seen: list[str] = []
    real_lstat, real_readlink = os.lstat, os.readlink

    def lstat(p, *a, **k):
        seen.append(str(p))
        return real_lstat(p, *a, **k)

    def readlink(p, *a, **k):
        seen.append(str(p))
        return real_readlink(p, *a, **k)

    monkeypatch.setattr(paths_mod.os, "lstat", lstat)
    monkeypatch.setattr(paths_mod.os, "readlink", readlink)
    for p in ["evil", "root/etc/shadow", "up/passwd", "/etc/passwd", "../../x", "pkg/x.py"]:
        sp.is_inside(p)
    assert seen
    for p in seen:
        assert p.startswith((str(testbed) + "/", str(tmp) + "/")), p


def test_read_file_never_follows_a_link_swapped_in_after_resolution(tmp_path, monkeypatch):
    """Processes of a running command can swap a folder for a link between resolving a path
    and reading it; the read then fails instead of returning a host file."""
    import os

    from sweworld.sandbox.paths import SandboxPaths

    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    secret = tmp_path / "host"
    secret.mkdir()
    (secret / "mod.py").write_text("HOST SECRET\n")
    paths = SandboxPaths({"/testbed": root})
    assert paths.read_file("/testbed/pkg/mod.py", limit=100) == b"x = 1\n"

    real_resolve = paths.resolve

    def resolve_then_swap(path, cwd=None):
        canonical = real_resolve(path, cwd)
        os.rename(root / "pkg", root / "pkg.orig")
        os.symlink(secret, root / "pkg")
        return canonical

    monkeypatch.setattr(paths, "resolve", resolve_then_swap)
    assert paths.read_file("/testbed/pkg/mod.py", limit=100) is None


def test_read_file_refuses_fifos_links_and_oversize_files(tmp_path):
    import os

    from sweworld.sandbox.paths import SandboxPaths

    root = tmp_path / "ws"
    root.mkdir()
    os.mkfifo(root / "pipe")
    (root / "big").write_bytes(b"x" * 101)
    (root / "ok").write_bytes(b"x" * 100)
    (tmp_path / "outside").write_text("host")
    os.symlink(tmp_path / "outside", root / "escape")
    paths = SandboxPaths({"/testbed": root})
    assert paths.read_file("/testbed/pipe", limit=100) is None  # returns at once
    assert paths.read_file("/testbed/big", limit=100) is None
    assert paths.read_file("/testbed/ok", limit=100) == b"x" * 100
    assert paths.read_file("/testbed/escape", limit=100) is None
    assert paths.read_file("/testbed", limit=100) is None
    assert paths.read_file("/etc/passwd", limit=100_000) is None
