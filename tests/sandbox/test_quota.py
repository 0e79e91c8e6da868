"""The session's disk quota (kernel-enforced on the overlay backend, checked per step on copy)
and snapshots that cost what changed.

Reproductions from a hostile review: three 900 MB files written through a session put 2.6 GB
on the host disk (only a per-file cap existed), and 40 snapshots of a workspace holding a
20 MB file took 763 MB (each a full copy of the upper layer). Sizes are measured with the
kernel's own numbers (``statvfs`` of the session's tmpfs, ``du`` of the host folders), never
with a number sweworld reports about itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from sweworld.sandbox.backends import overlay_available
from sweworld.sandbox.bwrap import SandboxLimits
from sweworld.sandbox.manager import SessionManager
from sweworld.sandbox.quota import SnapshotLimitReached
from sweworld.sandbox.workspace import walk
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox
MIB = 1 << 20


def _need_overlay(path) -> None:
    if not overlay_available(str(path)):
        pytest.skip("this process may not mount overlays (root or CAP_SYS_ADMIN needed)")


def host_du(path) -> int:
    """Bytes of disk under ``path`` on the host (``du``: the kernel's block counts)."""
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.stdout else 0


def tmpfs_used(session) -> int:
    """Bytes of data on the session's own tmpfs, from the kernel (``statvfs``)."""
    st = os.statvfs(session.workspace.disk_root)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tree_digest(root) -> str:
    """A digest of every path, kind and content under ``root``: two equal digests are two
    identical trees (``.git`` included)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in walk(root):
        dirnames.sort()
        for name in sorted(filenames) + sorted(dirnames):
            full = os.path.join(dirpath, name)
            h.update(os.path.relpath(full, root).encode() + b"\0")
            if os.path.islink(full):
                h.update(b"L" + os.readlink(full).encode())
            elif os.path.isfile(full):
                with open(full, "rb") as fh:
                    h.update(b"F" + hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


@pytest.fixture
def small(tmp_path):
    """A manager whose sessions have a 64 MiB quota and at most 50 snapshots."""
    _need_overlay(tmp_path)
    limits = SandboxLimits(disk_mb=64, max_snapshots=50)
    mgr = SessionManager(runtime_root=tmp_path / "runtime", limits=limits, backend="overlay")
    yield mgr
    mgr.close_all()


def test_a_bash_write_past_the_quota_stops_there_and_the_session_stays_usable(small, toy_task):
    session = small.open(toy_task)
    host_before = host_du(session.state_dir)
    # 3 x 200 MB asked for, on a 64 MiB quota: the kernel stops the writes at the quota
    out = session.step(
        "for i in 1 2 3; do head -c 200000000 /dev/zero > /testbed/big$i; done; "
        "head -c 100000000 /dev/zero > /tmp/more; ls -l /testbed/big1"
    )
    assert "No space left on device" in out.observation
    assert "disk quota exceeded" in out.observation
    assert out.info["disk_quota_exceeded"] is True
    used = tmpfs_used(session)
    assert 60 * MIB <= used <= 64 * MIB
    assert os.path.getsize(session.root / "big1") <= 64 * MIB
    # nothing of it on the host's disk (the tmpfs is in the session's namespace only)
    assert host_du(session.state_dir) - host_before < 1 * MIB
    # the session stays usable: rm frees the space, and later steps write again
    out = session.step("rm -f /testbed/big* /tmp/more && echo fine > /testbed/after.txt")
    assert out.exit_code == 0 and "disk quota exceeded" not in out.observation
    assert tmpfs_used(session) < 1 * MIB
    assert session.read_file("/testbed/after.txt") == "fine\n"
    assert "+fine" in session.get_patch()


def test_file_editor_says_the_quota_is_exceeded_in_plain_words(small, toy_task):
    session = small.open(toy_task)
    session.step("head -c 100000000 /dev/zero > /tmp/fill")
    out = session.step(
        "<function=file_editor><parameter=command>create</parameter>"
        "<parameter=path>/testbed/new.py</parameter><parameter=file_text>"
        + "x = 1\n" * 2000
        + "</parameter></function>"
    )
    assert "Disk quota exceeded" in out.observation
    assert "Traceback" not in out.observation
    assert not (session.root / "new.py").exists()
    session.step("rm /tmp/fill")
    out = session.step(
        "<function=file_editor><parameter=command>create</parameter>"
        "<parameter=path>/testbed/new.py</parameter><parameter=file_text>x = 1\n"
        "</parameter></function>"
    )
    assert "File created" in out.observation
    assert session.read_file("/testbed/new.py").strip() == "x = 1"


def test_the_sandboxs_own_tmpfs_mounts_are_bounded(small, toy_task):
    """/root and /dev/shm are bubblewrap's tmpfs mounts (half the RAM each by default), and
    /dev was writable: a session could fill the host's memory past its disk quota."""
    session = small.open(toy_task)
    out = session.step("head -c 200000000 /dev/zero > /root/x; ls -l /root/x")
    assert "No space left on device" in out.observation
    size = int(session.run("stat -c %s /root/x").stdout)
    assert size <= SandboxLimits().scratch_mb * MIB
    # the router refuses a visible `> /dev/shm/x`; the kernel must hold what it cannot see
    session.write_file("/tmp/w.sh", "head -c 200000000 /dev/zero > /dev/shm/x\ntouch /dev/y\n")
    out = session.run("bash /tmp/w.sh; stat -c %s /dev/shm/x")
    assert "No space left on device" in out.stderr
    assert int(out.stdout) <= SandboxLimits().scratch_mb * MIB
    out = session.run("bash /tmp/w.sh")
    assert out.exit_code != 0 and "Read-only file system" in out.stderr
    assert session.run("echo ok > /dev/null && echo done").stdout == "done\n"
    # the control folder (bound writable at /.sweworld/ctl) is a bounded tmpfs of its own
    session.write_file("/tmp/c.sh", "head -c 200000000 /dev/zero > /.sweworld/ctl/junk\n")
    out = session.run("bash /tmp/c.sh; stat -c %s /.sweworld/ctl/junk")
    assert "No space left on device" in out.stderr and int(out.stdout) <= 64 * MIB
    assert session.run("echo still fine").stdout == "still fine\n"
    session.run("echo mark > /testbed/mark.txt && bash /tmp/c.sh")
    assert "+mark" in session.get_patch()  # get_patch's index lives in the control folder
    assert session.run("ls /.sweworld/ctl/junk").exit_code != 0  # the restart emptied it


def test_forty_snapshots_of_a_20mb_workspace_cost_what_changed(small, toy_task):
    session = small.open(toy_task)
    session.step("head -c 20000000 /dev/urandom > /testbed/data.bin")
    snaps, forks = [], []
    for i in range(40):
        session.step(f"echo {i} >> /testbed/log.txt")
        snaps.append(session.snapshot())
    for i in (5, 17, 39):
        session.restore(snaps[i])
        assert session.read_file("/testbed/log.txt").split() == [str(k) for k in range(i + 1)]
        forks.append(session.fork())
    sessions = [session, *forks]
    data = sum(tmpfs_used(s) for s in sessions)
    host = host_du(small.sessions_dir)
    # one 20 MB file, 40 one-line changes, 3 forks: well under 50 MB in all (was 763 MB)
    assert data + host < 50 * MIB, (data, host)
    assert data >= 20_000_000  # the file itself is there, once


def test_restore_gives_the_snapshots_content_exactly(small, toy_task):
    session = small.open(toy_task)
    session.step(
        "echo one > state.txt && mkdir -p new/empty && rm README.md && ln -s stockroom alias "
        "&& echo t > /tmp/t.txt && chmod 600 state.txt"
    )
    snap = session.snapshot()
    tree, tmp, patch = tree_digest(session.root), tree_digest(session.tmp_dir), session.get_patch()
    # later edits of every kind, in place included (they must not write through into the
    # saved layer): appends, truncation, dd over a file, deletions, new files
    session.step(
        "echo two >> state.txt && : > stockroom/textutil.py && "
        "printf XX | dd of=stockroom/__init__.py conv=notrunc 2>/dev/null && "
        "rm -r new alias /tmp/t.txt && echo back > README.md && echo more > /tmp/u.txt"
    )
    session.snapshot()  # a later snapshot freezes the edits: the first must not see them
    assert tree_digest(session.root) != tree
    session.restore(snap)
    assert tree_digest(session.root) == tree
    assert tree_digest(session.tmp_dir) == tmp
    assert session.get_patch() == patch
    assert session.workspace.changes().deleted == ("README.md",)
    assert session.step("cat state.txt /tmp/t.txt").observation.count("one") == 1


def test_forks_are_independent_of_their_source_and_of_each_other(small, toy_task):
    session = small.open(toy_task)
    session.step(
        "printf A > big.bin && head -c 4999999 /dev/urandom >> big.bin && echo base > f.txt "
        "&& echo base > g.txt"
    )
    before = tree_digest(session.root)
    a, b = session.fork(), session.fork()
    a.step("echo a >> big.bin && echo a > f.txt && echo a > /tmp/a")
    b.step("rm big.bin && echo b > f.txt")
    # the source's warm sandbox, started before the forks, must not write into the layer
    # the forks share: in-place writes of files only the source touches
    session.step("echo s > f.txt && echo s >> g.txt && printf Z | dd of=big.bin conv=notrunc")
    assert a.read_file("g.txt") == b.read_file("g.txt") == "base\n"
    assert session.read_file("g.txt") == "base\ns\n"
    with open(a.root / "big.bin", "rb") as fa, open(session.root / "big.bin", "rb") as fs:
        assert fa.read(1) == b"A" and fs.read(1) == b"Z"
    assert a.read_file("f.txt") == "a\n" and b.read_file("f.txt") == "b\n"
    assert session.read_file("f.txt") == "s\n"
    assert not os.path.exists(b.root / "big.bin")
    assert os.path.getsize(a.root / "big.bin") == 5_000_002
    assert os.path.getsize(session.root / "big.bin") == 5_000_000
    assert not os.path.exists(session.tmp_dir / "a") and not os.path.exists(b.tmp_dir / "a")
    # a fork outlives its source, and can still restore the source's snapshot taken before
    snap = session.snapshot()
    c = session.fork()
    session.step("echo later > f.txt")
    session.destroy()
    c.restore(snap)
    assert c.read_file("f.txt") == "s\n"
    c.step("echo c > f.txt")
    assert c.read_file("f.txt") == "c\n" and tree_digest(c.root) != before
    for s in (a, b, c):
        s.destroy()


def test_a_snapshot_of_a_fork_is_not_restorable_in_its_source(small, toy_task):
    session = small.open(toy_task)
    child = session.fork()
    child.step("echo child > c.txt")
    snap = child.snapshot()
    with pytest.raises(ValueError, match="not forked from"):
        session.restore(snap)
    assert session.step("echo still > s.txt && cat s.txt").exit_code == 0


def test_the_snapshot_limit_per_session(tmp_path, toy_task):
    _need_overlay(tmp_path)
    limits = SandboxLimits(disk_mb=16, max_snapshots=3)
    with SessionManager(runtime_root=tmp_path / "rt", limits=limits) as mgr:
        session = mgr.open(toy_task)
        snaps = [session.snapshot() for _ in range(3)]
        with pytest.raises(SnapshotLimitReached, match="max_snapshots=3"):
            session.snapshot()
        session.restore(snaps[0])  # restore and fork still work past the limit
        assert session.fork().step("echo ok").exit_code == 0


def test_a_snapshot_at_a_full_quota_works_and_counts(small, toy_task):
    session = small.open(toy_task)
    session.step("head -c 100000000 /dev/zero > fill.bin")
    size = os.path.getsize(session.root / "fill.bin")
    assert size > 60 * MIB
    snap = session.snapshot()
    session.step("rm fill.bin")
    # the snapshot holds the file: removing it hides it but frees nothing
    out = session.step("echo x > y.txt")
    assert "No space left on device" in out.observation
    session.restore(snap)
    assert os.path.getsize(session.root / "fill.bin") == size
    assert session.step("head -c 3 fill.bin | od -An -c").exit_code == 0


def test_copy_backend_checks_the_quota_after_each_step(tmp_path, toy_task):
    """Without root there is no kernel quota: usage is measured after each step, the step
    says the quota is exceeded, and file edits are refused until files are removed."""
    limits = SandboxLimits(disk_mb=8)
    with SessionManager(runtime_root=tmp_path / "rt", limits=limits, backend="copy") as mgr:
        session = mgr.open(toy_task)
        out = session.step("head -c 20000000 /dev/zero > /tmp/big")
        assert "disk quota exceeded" in out.observation and out.info["disk_quota_exceeded"]
        out = session.step(
            "<function=file_editor><parameter=command>create</parameter>"
            "<parameter=path>/testbed/n.txt</parameter><parameter=file_text>x"
            "</parameter></function>"
        )
        assert "disk quota exceeded" in out.observation
        assert not (session.root / "n.txt").exists()
        out = session.step("rm /tmp/big && echo ok")
        assert "disk quota exceeded" not in out.observation
        out = session.step(
            "<function=file_editor><parameter=command>create</parameter>"
            "<parameter=path>/testbed/n.txt</parameter><parameter=file_text>x"
            "</parameter></function>"
        )
        assert "File created" in out.observation


def test_cli_run_with_the_local_executor_stops_at_the_quota(tmp_path):
    """The acceptance line: `sweworld run --executor local` with actions that write 3 GB
    (bash and a real Python run) stops at the quota with a clear message, and the host disk
    gains at most the quota (here nothing: the session's disk is a tmpfs)."""
    _need_overlay(tmp_path)
    actions = [
        "for i in 1 2 3; do head -c 1000000000 /dev/zero > /testbed/big$i; done; du -sb /testbed",
        "python -c \"open('/tmp/py.bin', 'wb').write(b'0' * 300_000_000)\"",
        "rm -f /testbed/big* /tmp/py.bin && echo after > /testbed/ok.txt && cat ok.txt",
    ]
    path = tmp_path / "A.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    runtime = tmp_path / "runtime"
    env = {**os.environ, "SWEWORLD_RUNTIME_DIR": str(runtime)}
    argv = [sys.executable, "-m", "sweworld.cli", "run", "--id", "sweworld__stockroom-1"]
    argv += ["--actions", str(path), "--executor", "local", "--disk-mb", "64"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    first, second, third = (line["observation"] for line in lines[:3])
    assert "No space left on device" in first and "disk quota exceeded" in first
    assert "64 MiB" in first
    assert "No space left on device" in second  # the real Python run hit the same quota
    assert "after" in third and "disk quota exceeded" not in third
    assert "+after" in lines[-1]["patch"]
    assert host_du(runtime) < 1 * MIB  # and the session left nothing behind


def test_a_fork_of_a_fork_restores_its_ancestors_snapshots_after_they_are_gone(tmp_path):
    """A fork shares its source's frozen layers: they must stay reachable (and intact) when
    the source and the source's source are destroyed."""
    from sweworld.sandbox.overlay import OverlayWorkspace

    _need_overlay(tmp_path)
    base = tmp_path / "base"
    base.mkdir()
    (base / "f").write_text("0\n")
    (tmp_path / "s").mkdir()
    a = OverlayWorkspace(base, tmp_path / "s" / "a", quota_bytes=8 * MIB)
    (a.root / "f").write_text("a\n")
    saved_a = a.snapshot()
    (a.root / "f").write_text("a2\n")
    b = a.fork(tmp_path / "s" / "b")
    (b.root / "f").write_text("b\n")
    saved_b = b.snapshot()
    c = b.fork(tmp_path / "s" / "c")
    a.destroy()
    b.destroy()
    try:
        assert (c.root / "f").read_text() == "b\n"
        c.restore(saved_a)
        assert (c.root / "f").read_text() == "a\n"
        c.restore(saved_b)
        assert (c.root / "f").read_text() == "b\n"
        assert c.changes().written == ("f",)
    finally:
        c.destroy()
    assert (base / "f").read_text() == "0\n"


def test_the_managers_disk_budget_bounds_all_sessions_together(tmp_path, toy_task):
    """Each session's disk is a RAM tmpfs: 1 GiB x 64 episodes x several tokens could take
    more memory than the host has. With a budget, a session (or fork) whose quota would not
    fit is refused before anything is mounted; a fork keeps its destroyed source's disk
    alive, and counted."""
    from sweworld.sandbox.manager import DiskBudgetExceeded
    from sweworld.sandbox.overlay import CONTROL_BYTES

    _need_overlay(tmp_path)
    limits = SandboxLimits(disk_mb=8, scratch_mb=4)
    one = (8 << 20) + CONTROL_BYTES + (8 << 20)  # its quota, control and scratch tmpfs
    budget = 2 * one + (4 << 20)
    with SessionManager(
        runtime_root=tmp_path / "rt", limits=limits, backend="overlay", disk_budget_bytes=budget
    ) as mgr:
        first = mgr.open(toy_task)
        fork = first.fork()
        assert mgr.committed_bytes() == 2 * one
        with pytest.raises(DiskBudgetExceeded, match="budget"):
            mgr.open(toy_task)
        with pytest.raises(DiskBudgetExceeded):
            fork.fork()
        assert len(mgr.sessions) == 2
        assert sorted(os.listdir(mgr.sessions_dir)) == sorted(s.id for s in mgr.sessions)
        first.destroy()  # the fork still holds its disk (the layers it was forked from)
        assert mgr.committed_bytes() == one + (8 << 20)
        with pytest.raises(DiskBudgetExceeded):
            mgr.open(toy_task)
        fork.destroy()
        assert mgr.committed_bytes() == 0
        assert "fits" in mgr.open(toy_task).step("echo fits").observation
