"""Sandbox benchmark: sessions on a real 6,000+-file repository, against a full-copy baseline.

Measures, side by side in one run:
  * session create latency (p50, p99): overlay workspace vs. a full copy of the checkout
    (the ``copy`` backend, what a per-session clone costs) and a hardlink copy (reference);
  * disk per untouched session;
  * memory for 1, 64 and 512 live sessions (this process's RSS and the machine's used memory,
    which includes kernel memory for mount namespaces and overlay superblocks);
  * real file-operation step latency (p50, p95) through ``Session.step`` and where it goes
    (bare ``bash -c``, bare ``bwrap``, the full launch chain).

The repository is Django's source distribution from PyPI (``pip download``), used as a plain
directory. Run as root (overlay needs it):

    sweworld bench sandbox [--sessions 512] [--json results.json]

``--compare`` (alone: ``--compare-only``) also measures the code before a change side by side
with the code now: the baseline commit's ``sweworld`` (``--baseline``, default 822ff47, the
state before issue 9's sandbox changes) is exported with ``git archive`` and both run the same
worker (session create, file-op steps, memory per warm session) in alternating subprocesses,
each importing its own tree.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from sweworld.bench.sandbox_compare import (
    COMPARE_STEPS,
    PROJECT,
    du_bytes,
    export_tree,
    mem_used_mb,
    pct,
    quiet,
    rss_mb,
    run_worker,
    time_create,
)
from sweworld.bench.summary import add_report_arguments, write_summary
from sweworld.dirs import cache_dir

__all__ = ["add_arguments", "compare", "fetch_django", "fetch_sdist", "run"]

#: Downloaded source distributions (pip download), kept between runs.
CACHE = cache_dir() / "bench"
DJANGO = "django==5.1.4"
BASELINE = "822ff47"


def ms(x: float) -> str:
    """Seconds as a right-aligned millisecond figure."""
    return f"{x * 1000:8.2f} ms"


def fetch_sdist(requirement: str, stem: str) -> Path:
    """Download and unpack ``requirement``'s sdist once into :data:`CACHE` (PyPI is the only
    network used); ``stem`` globs its unpacked folder (``[Dd]jango-*``)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = next((p for p in CACHE.glob(stem) if p.is_dir()), None)
    if tree:
        return tree
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            requirement,
            "-d",
            str(CACHE),
        ],
        check=True,
    )
    archive = next(CACHE.glob(f"{stem}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    return next(p for p in CACHE.glob(stem) if p.is_dir())


def fetch_django() -> Path:
    """Django's source tree (:func:`fetch_sdist`)."""
    return fetch_sdist(DJANGO, "[Dd]jango-*")


def compare(args: argparse.Namespace, source: Path) -> dict:
    """Before (``args.baseline``) and after (this tree), alternating, medians of rounds."""
    work = Path(tempfile.mkdtemp(prefix="swbase-"))
    trees = {"before": export_tree(args.baseline, work / "before"), "after": PROJECT}
    rounds: dict[str, list[dict]] = {"before": [], "after": []}
    sizes = [args.compare_creates, args.compare_steps, args.compare_live]
    for _ in range(args.rounds):
        for side, tree in trees.items():
            quiet()
            row = run_worker(tree, "compare_worker", str(source), *sizes)
            rounds[side].append(row)
    shutil.rmtree(work, ignore_errors=True)
    keys = [k for k in rounds["after"][0] if k != "sweworld"]
    result = {
        side: {k: statistics.median(r[k] for r in rows) for k in keys}
        for side, rows in rounds.items()
    }
    result["rounds"] = rounds
    labels = {
        "create_p50": ("session create p50", "ms"),
        "create_p99": ("session create p99", "ms"),
        "step_p50": ("file-op step p50", "ms"),
        "step_p95": ("file-op step p95", "ms"),
        "first_step": ("open + first step (cold sandbox)", "ms"),
        "tree_rss_per_session_mb": ("memory per warm session, process tree RSS", "MB"),
        "machine_per_session_mb": ("memory per warm session, machine used", "MB"),
    }
    print(
        f"\nbefore ({args.baseline}) vs after (this tree), median of {args.rounds} alternating "
        f"rounds; {args.compare_creates} creates, {args.compare_steps} x "
        f"{len(COMPARE_STEPS)} steps, {args.compare_live} warm sessions"
    )
    print(f"  {'':44} {'before':>10} {'after':>10}")
    for key, (label, unit) in labels.items():
        scale = 1000 if unit == "ms" else 1
        b, a = result["before"][key] * scale, result["after"][key] * scale
        print(f"  {label:<44} {b:8.2f} {unit} {a:8.2f} {unit}")
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench sandbox``."""
    parser.add_argument("--sessions", type=int, default=512, help="most live sessions")
    parser.add_argument("--creates", type=int, default=200, help="overlay creates to time")
    parser.add_argument(
        "--baseline-creates",
        type=int,
        default=10,
        help="full copies to time (each is a whole checkout)",
    )
    parser.add_argument("--steps", type=int, default=40, help="repetitions per step command")
    parser.add_argument("--compare", action="store_true", help="also run before vs after")
    parser.add_argument(
        "--compare-only", action="store_true", help="only the before/after comparison"
    )
    parser.add_argument("--baseline", default=BASELINE, help="commit measured as 'before'")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument(
        "--compare-creates", type=int, default=100, help="session creates timed per side"
    )
    parser.add_argument(
        "--compare-steps", type=int, default=20, help="repetitions per step command per side"
    )
    parser.add_argument("--compare-live", type=int, default=64, help="warm sessions per side")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench sandbox``."""
    if args.compare_only:
        source = fetch_django()
        print(
            f"machine: {os.cpu_count()} cores, kernel {platform.release()}, "
            f"python {platform.python_version()}; repository {source.name}"
        )
        result = compare(args, source)
        write_summary(args, "sandbox", {"compare": result}, title="Sandbox, before vs after")
        return 0

    from sweworld.sandbox.manager import SessionManager

    results: dict = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        }
    }
    source = fetch_django()
    runtime = Path(tempfile.mkdtemp(prefix="swbench-"))
    overlay = SessionManager(
        backend="overlay", runtime_root=runtime / "ov", checkout_root=runtime / "checkouts"
    )
    copying = SessionManager(
        backend="copy", runtime_root=runtime / "cp", checkout_root=runtime / "checkouts"
    )
    base = overlay.checkout(repo="django/django", repo_path=source, history="none")
    n_files = sum(len(files) for _, _, files in os.walk(base.path))
    base_bytes = du_bytes(base.path)
    results["repo"] = {"name": source.name, "files": n_files, "bytes": base_bytes}
    print(f"repository: {source.name}, {n_files} files, {base_bytes / 1e6:.1f} MB checkout")
    print(
        f"machine: {os.cpu_count()} cores, kernel {platform.release()}, "
        f"python {platform.python_version()}\n"
    )

    quiet()
    # -------------------------------------------------------------- step latency
    commands = [
        "ls django",
        "cat django/__init__.py",
        "grep -n 'def get_version' -r django/utils",
        "sed -n '1,20p' django/core/validators.py",
        "wc -l django/db/models/query.py",
        "find django/contrib/auth -name '*.py' | head -5",
        "git status --short",
    ]
    editor = (
        "<function=file_editor><parameter=command>view</parameter><parameter=path>"
        "/testbed/django/core/validators.py</parameter><parameter=view_range>[1, 40]"
        "</parameter></function>"
    )
    results["steps"] = {}
    print("file-op step latency           overlay p50   overlay p95   full-copy p50")
    ov = overlay.open(repo="django/django", repo_path=source, history="none")
    cp = copying.open(repo="django/django", repo_path=source, history="none")
    all_ov, all_cp = [], []
    for cmd in [*commands, editor]:
        per = {}
        for name, sess in (("overlay", ov), ("copy", cp)):
            sess.step(cmd)  # warm
            times = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                sess.step(cmd)
                times.append(time.perf_counter() - t0)
            per[name] = times
        all_ov += per["overlay"]
        all_cp += per["copy"]
        label = "file_editor view" if cmd is editor else cmd
        results["steps"][label] = {
            "overlay_p50": pct(per["overlay"], 50),
            "overlay_p95": pct(per["overlay"], 95),
            "copy_p50": pct(per["copy"], 50),
        }
        print(
            f"  {label[:28]:<28} {ms(pct(per['overlay'], 50))} {ms(pct(per['overlay'], 95))}"
            f" {ms(pct(per['copy'], 50))}"
        )
    results["steps"]["all"] = {
        "overlay_p50": pct(all_ov, 50),
        "overlay_p95": pct(all_ov, 95),
        "copy_p50": pct(all_cp, 50),
    }
    print(
        f"  {'all file-op steps':<28} {ms(pct(all_ov, 50))} {ms(pct(all_ov, 95))}"
        f" {ms(pct(all_cp, 50))}"
    )

    # where the time of one shell step goes
    def timed(argv: list[str], n: int = args.steps, **kw) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, **kw)
            times.append(time.perf_counter() - t0)
        return pct(times, 50)

    runner = ov._runner
    bw_args = runner._bwrap_args()
    bare_bash = timed(["bash", "-c", "cat django/__init__.py"], cwd=base.path)
    bare_bwrap = timed(
        [
            "bwrap",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "true",
        ]
    )
    full_bwrap = timed(
        [
            "nsenter",
            f"--mount=/proc/self/fd/{ov.workspace.mount_ns_fd}",
            "bwrap",
            *bw_args,
            "bash",
            "-c",
            "cat /testbed/django/__init__.py",
        ],
        pass_fds=(ov.workspace.mount_ns_fd,),
    )
    run_only = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        ov.run("cat django/__init__.py")
        run_only.append(time.perf_counter() - t0)
    breakdown = {
        "bare_bash": bare_bash,
        "bare_bwrap": bare_bwrap,
        "nsenter_plus_full_bwrap": full_bwrap,
        "session_run": pct(run_only, 50),
    }
    results["breakdown"] = breakdown
    print("\nwhere a `cat` step goes (p50)")
    print(f"  bash -c on the host (no sandbox)              {ms(bare_bash)}")
    print(f"  minimal bwrap (one bind, no namespaces)       {ms(bare_bwrap)}")
    print(f"  a cold sandbox: nsenter + sweworld's bwrap    {ms(full_bwrap)}")
    print(f"  Session.run on a warm sandbox (what a step is) {ms(pct(run_only, 50))}")
    ov.destroy()
    cp.destroy()
    quiet()
    # -------------------------------------------------------------- create + disk
    ov_times, ov_sessions = time_create(
        lambda: overlay.open(repo="django/django", repo_path=source, history="none"), args.creates
    )
    ov_disk = statistics.mean(
        s.workspace.disk_usage() + du_bytes(s.state_dir / "tmp") for s in ov_sessions[:20]
    )
    for s in ov_sessions:
        s.destroy()
    cp_times, cp_sessions = time_create(
        lambda: copying.open(repo="django/django", repo_path=source, history="none"),
        args.baseline_creates,
    )
    cp_disk = statistics.mean(du_bytes(s.state_dir) for s in cp_sessions)
    for s in cp_sessions:
        s.destroy()
    hl_times = []
    for i in range(args.baseline_creates):
        dest = runtime / f"hl{i}"
        t0 = time.perf_counter()
        subprocess.run(["cp", "-al", str(base.path), str(dest)], check=True)
        hl_times.append(time.perf_counter() - t0)
        shutil.rmtree(dest)
    results["create"] = {
        "overlay": {"p50": pct(ov_times, 50), "p99": pct(ov_times, 99), "n": len(ov_times)},
        "full_copy": {"p50": pct(cp_times, 50), "p99": pct(cp_times, 99), "n": len(cp_times)},
        "hardlink_copy": {"p50": pct(hl_times, 50), "p99": pct(hl_times, 99)},
    }
    results["disk_per_untouched_session"] = {"overlay": ov_disk, "full_copy": cp_disk}
    print("session create                 p50          p99")
    print(
        f"  overlay (sweworld)      {ms(pct(ov_times, 50))} {ms(pct(ov_times, 99))}"
        f"   (n={len(ov_times)})"
    )
    print(
        f"  full copy (baseline)    {ms(pct(cp_times, 50))} {ms(pct(cp_times, 99))}"
        f"   (n={len(cp_times)})"
    )
    print(f"  hardlink copy (ref.)    {ms(pct(hl_times, 50))} {ms(pct(hl_times, 99))}")
    print("disk per untouched session")
    print(f"  overlay (sweworld)      {ov_disk / 1024:10.1f} KB")
    print(f"  full copy (baseline)    {cp_disk / 1024:10.1f} KB\n")

    quiet()
    # -------------------------------------------------------------- memory
    print("memory with N live sessions           process RSS   machine used (delta)")
    results["memory"] = {}
    mem0 = mem_used_mb()
    live: list = []
    for target in (1, 64, args.sessions):
        while len(live) < target:
            live.append(overlay.open(repo="django/django", repo_path=source, history="none"))
        time.sleep(0.5)
        cold = {"rss_mb": rss_mb(), "machine_delta_mb": mem_used_mb() - mem0}
        for s in live:  # one step each: every session now holds a warm sandbox
            s.step("true")
        time.sleep(0.5)
        warm = {"rss_mb": rss_mb(), "machine_delta_mb": mem_used_mb() - mem0}
        results["memory"][str(target)] = {"opened": cold, "stepped": warm}
        for label, row in (("opened", cold), ("stepped", warm)):
            print(
                f"  {target:4d} sessions, {label:<8}       {row['rss_mb']:8.1f} MB   "
                f"{row['machine_delta_mb']:8.1f} MB"
            )
    # a step must stay fast with all of them alive
    busy = live[-1]
    many_live = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        busy.step("cat django/__init__.py")
        many_live.append(time.perf_counter() - t0)
    results["step_with_all_sessions_live"] = {"p50": pct(many_live, 50)}
    print(f"  step p50 with {len(live)} live sessions: {ms(pct(many_live, 50))}")
    for s in live:
        s.destroy()
    time.sleep(0.5)
    cp_live = [
        copying.open(repo="django/django", repo_path=source, history="none") for _ in range(8)
    ]
    cp_mem = {"sessions": 8, "disk_mb": sum(du_bytes(s.state_dir) for s in cp_live) / 1e6}
    for s in cp_live:
        s.destroy()
    results["memory"]["full_copy_8_sessions_disk_mb"] = cp_mem["disk_mb"]
    print(
        f"  full copy baseline: 8 sessions hold {cp_mem['disk_mb']:.0f} MB of disk "
        f"({cp_mem['disk_mb'] / 8:.0f} MB each; 512 would need "
        f"{cp_mem['disk_mb'] / 8 * 512 / 1e3:.0f} GB)\n"
    )

    quiet()
    overlay.close_all()
    copying.close_all()
    shutil.rmtree(runtime, ignore_errors=True)
    if args.compare:
        results["compare"] = compare(args, source)
    write_summary(args, "sandbox", results, title="Sandbox sessions on Django")
    return 0
