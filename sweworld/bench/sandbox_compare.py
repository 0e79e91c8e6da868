"""Before/after runs of the sandbox benchmarks (``sweworld bench sandbox --compare``,
``sweworld bench quota``), and the small measures they share.

A comparison runs the same worker on two ``sweworld`` trees: a baseline commit's, exported
with ``git archive`` (:func:`export_tree`), and this one, each in a subprocess whose
``sys.path`` starts with its own tree (:func:`run_worker`). So that the baseline's tree can
run it, this module imports nothing of ``sweworld`` at its top: the subprocess loads it by
path, and each worker imports ``sweworld`` inside (resolved to the tree under test) and
uses only API both sides share.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = [
    "COMPARE_STEPS",
    "PROJECT",
    "compare_worker",
    "du_bytes",
    "export_tree",
    "mem_used_mb",
    "pct",
    "quiet",
    "quota_worker",
    "rss_mb",
    "run_worker",
    "time_create",
    "tmpfs_bytes",
    "tree_rss_mb",
]

#: The repository root: ``sweworld/`` of this tree lives under it.
PROJECT = Path(__file__).resolve().parents[2]

#: The sandbox benchmark's file-operation steps, repeated on both sides.
COMPARE_STEPS = [
    "ls django",
    "cat django/__init__.py",
    "grep -n 'def get_version' -r django/utils",
    "sed -n '1,20p' django/core/validators.py",
    "wc -l django/db/models/query.py",
    "find django/contrib/auth -name '*.py' | head -5",
]


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank, numpy's ``method="nearest"``); NaN for none."""
    if not values:
        return float("nan")
    import numpy

    return float(numpy.percentile(values, q, method="nearest"))


def mem_used_mb() -> float:
    """The machine's used memory (total less available), in MB."""
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def rss_mb() -> float:
    """This process's resident set, in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def du_bytes(path: Path) -> int:
    """Disk used under ``path`` (``du``), in bytes; 0 when ``du`` fails."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 else 0


def quiet() -> None:
    """Let the disk settle between phases (a full copy leaves ~90 MB of dirty pages)."""
    os.sync()
    time.sleep(3)


def time_create(make: Any, n: int) -> tuple[list[float], list]:
    """Call ``make()`` ``n`` times: the seconds each took, and what they made."""
    times, made = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        made.append(make())
        times.append(time.perf_counter() - t0)
    return times, made


def tree_rss_mb(root_pid: int) -> float:
    """RSS of a process and all its descendants (the sandboxes it started), in MB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def tmpfs_bytes(session: Any) -> int:
    """Data on the session's own tmpfs (the kernel's count, ``statvfs``); 0 without one."""
    root = getattr(session.workspace, "disk_root", None)
    if root is None:
        return 0
    st = os.statvfs(root)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def compare_worker(source: str | Path, creates: int, steps: int, live: int) -> dict:
    """One side of the before/after comparison, run in a subprocess whose ``sys.path``
    starts with the tree under test. Uses only API both sides share."""
    source = Path(source)
    import sweworld
    from sweworld.sandbox.executor import NoExecutor
    from sweworld.sandbox.manager import SessionManager

    runtime = Path(tempfile.mkdtemp(prefix="swcmp-"))
    manager = SessionManager(
        backend="overlay",
        executor=NoExecutor(),
        runtime_root=runtime / "rt",
        checkout_root=runtime / "checkouts",
    )
    manager.checkout(repo="django/django", repo_path=source, history="none")

    def open_one():
        return manager.open(repo="django/django", repo_path=source, history="none")

    out: dict = {"sweworld": str(Path(sweworld.__file__).resolve().parent)}
    times, made = time_create(open_one, creates)
    out["create_p50"], out["create_p99"] = pct(times, 50), pct(times, 99)
    for s in made:
        s.destroy()
    sess = open_one()
    sess.step("true")  # the cold start is not a file-op step
    step_times = []
    for cmd in COMPARE_STEPS:
        sess.step(cmd)
        for _ in range(steps):
            t0 = time.perf_counter()
            sess.step(cmd)
            step_times.append(time.perf_counter() - t0)
    out["step_p50"], out["step_p95"] = pct(step_times, 50), pct(step_times, 95)
    t0 = time.perf_counter()
    cold = open_one()
    cold.step("true")
    out["first_step"] = time.perf_counter() - t0
    cold.destroy()
    sess.destroy()
    time.sleep(0.3)
    tree0, mem0 = tree_rss_mb(os.getpid()), mem_used_mb()
    sessions = [open_one() for _ in range(live)]
    for s in sessions:
        s.step("true")
    time.sleep(0.5)
    out["tree_rss_per_session_mb"] = (tree_rss_mb(os.getpid()) - tree0) / live
    out["machine_per_session_mb"] = (mem_used_mb() - mem0) / live
    for s in sessions:
        s.destroy()
    manager.close_all()
    shutil.rmtree(runtime, ignore_errors=True)
    return out


def quota_worker(source: str | Path, creates: int, snapshots: int) -> dict:
    """One side: only API both sides share (``SessionManager.open``, ``step``,
    ``snapshot``, ``restore``, ``fork``)."""
    source = Path(source)
    import sweworld
    from sweworld.sandbox.executor import NoExecutor
    from sweworld.sandbox.manager import SessionManager

    runtime = Path(tempfile.mkdtemp(prefix="swquota-", dir="/tmp"))
    manager = SessionManager(
        backend="overlay",
        executor=NoExecutor(),
        runtime_root=runtime / "rt",
        checkout_root=runtime / "checkouts",
    )
    manager.checkout(repo="bench/repo", repo_path=source, history="none")

    def open_one():
        return manager.open(repo="bench/repo", repo_path=source, history="none")

    out: dict = {"sweworld": str(Path(sweworld.__file__).resolve().parent)}
    open_one().destroy()  # warm caches
    times, made = [], []
    for _ in range(creates):
        t0 = time.perf_counter()
        made.append(open_one())
        times.append(time.perf_counter() - t0)
    out["create_p50"], out["create_p99"] = pct(times, 50), pct(times, 99)
    for s in made:
        s.destroy()
    # the workspace alone (mounts and mkdirs, no session bookkeeping), 5x as many
    from sweworld.sandbox.backends import make_workspace

    base = manager.checkout(repo="bench/repo", repo_path=source, history="none").path
    ws_times = []
    for i in range(creates * 5):
        state = runtime / "ws" / str(i)
        state.mkdir(parents=True)
        t0 = time.perf_counter()
        ws = make_workspace("overlay", base, state)
        ws_times.append(time.perf_counter() - t0)
        ws.destroy()
    out["ws_create_p50"], out["ws_create_p99"] = pct(ws_times, 50), pct(ws_times, 99)
    firsts = []
    for _ in range(10):
        t0 = time.perf_counter()
        cold = open_one()
        cold.step("true")
        firsts.append(time.perf_counter() - t0)
        cold.destroy()
    out["first_step"] = pct(firsts, 50)

    os.sync()
    time.sleep(1)
    disk0 = du_bytes(runtime / "rt")
    session = open_one()
    session.step("head -c 20000000 /dev/urandom > /testbed/data.bin")
    snaps, snap_times = [], []
    for i in range(snapshots):
        session.step(f"echo {i} >> /testbed/log.txt")
        t0 = time.perf_counter()
        snaps.append(session.snapshot())
        snap_times.append(time.perf_counter() - t0)
    forks = []
    for i in (5, 17, snapshots - 1):
        session.restore(snaps[i])
        forks.append(session.fork())
    os.sync()
    out["snapshot_p50"] = pct(snap_times, 50)
    out["snap40_disk_mb"] = (du_bytes(runtime / "rt") - disk0) / 2**20
    out["snap40_mem_mb"] = sum(map(tmpfs_bytes, [session, *forks])) / 2**20
    out["snap40_total_mb"] = out["snap40_disk_mb"] + out["snap40_mem_mb"]
    for s in [session, *forks]:
        s.destroy()
    manager.close_all()
    shutil.rmtree(runtime, ignore_errors=True)
    return out


def export_tree(ref: str, dest: Path) -> Path:
    """``sweworld/`` of commit ``ref``, exported (no worktree, nothing in the repo changes).
    A ``ref`` that git would read as an option (``--output=...``) is refused."""
    if not ref or ref.startswith("-"):
        raise ValueError(f"not a commit: {ref!r}")
    repo = PROJECT
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", ref, "sweworld"], capture_output=True, check=True
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_worker(tree: Path, worker: str, *args: Any) -> dict[str, Any]:
    """``worker(*args)`` of this module in a subprocess whose ``sys.path`` starts with
    ``tree`` (a folder holding ``sweworld/``); its result, checked to come from that tree."""
    code = (
        "import importlib.util, json, sys; sys.path.insert(0, sys.argv[1]); "
        "spec = importlib.util.spec_from_file_location('sweworld_bench_side', sys.argv[2]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "print(json.dumps(getattr(m, sys.argv[3])(*json.loads(sys.argv[4]))))"
    )
    argv = [sys.executable, "-c", code, str(tree), __file__, worker, json.dumps(args, default=str)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/")
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {worker} failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(row["sweworld"]) != (Path(tree) / "sweworld").resolve():
        raise SystemExit(f"{tree}: {worker} imported {row['sweworld']}, not its own tree")
    return row
