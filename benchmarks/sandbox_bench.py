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

    python benchmarks/sandbox_bench.py [--sessions 512] [--json results.json]

``--compare`` (alone: ``--compare-only``) also measures the code before a change side by side
with the code now: the baseline commit's ``sweworld`` (``--baseline``, default 822ff47, the
state before issue 9's sandbox changes) is exported with ``git archive`` and both run the same
worker (session create, file-op steps, memory per warm session) in alternating subprocesses,
each importing its own tree.
"""

from __future__ import annotations

import argparse
import json
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

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
DJANGO = "django==5.1.4"
BASELINE = "822ff47"
COMPARE_STEPS = [
    "ls django",
    "cat django/__init__.py",
    "grep -n 'def get_version' -r django/utils",
    "sed -n '1,20p' django/core/validators.py",
    "wc -l django/db/models/query.py",
    "find django/contrib/auth -name '*.py' | head -5",
]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def ms(x: float) -> str:
    return f"{x * 1000:8.2f} ms"


def fetch_django() -> Path:
    """Download and unpack Django's sdist once (PyPI is the only network used)."""
    CACHE.mkdir(exist_ok=True)
    tree = next((p for p in CACHE.glob("[Dd]jango-*") if p.is_dir()), None)
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
            DJANGO,
            "-d",
            str(CACHE),
        ],
        check=True,
    )
    archive = next(CACHE.glob("[Dd]jango-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    return next(p for p in CACHE.glob("[Dd]jango-*") if p.is_dir())


def mem_used_mb() -> float:
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 else 0


def quiet() -> None:
    """Let the disk settle between phases (a full copy leaves ~90 MB of dirty pages)."""
    os.sync()
    time.sleep(3)


def time_create(make, n: int) -> tuple[list[float], list]:
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


def compare_worker(source: Path, creates: int, steps: int, live: int) -> dict:
    """One side of the before/after comparison, run in a subprocess whose ``sys.path``
    starts with the tree under test. Uses only API both sides share."""
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


def export_tree(ref: str, dest: Path) -> Path:
    """``sweworld/`` of commit ``ref``, exported (no worktree, nothing in the repo changes)."""
    repo = HERE.parent
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", ref, "sweworld"], capture_output=True, check=True
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def compare(args: argparse.Namespace, source: Path) -> dict:
    """Before (``args.baseline``) and after (this tree), alternating, medians of rounds."""
    work = Path(tempfile.mkdtemp(prefix="swbase-"))
    trees = {"before": export_tree(args.baseline, work / "before"), "after": HERE.parent}
    rounds: dict[str, list[dict]] = {"before": [], "after": []}
    sizes = [str(args.compare_creates), str(args.compare_steps), str(args.compare_live)]
    for _ in range(args.rounds):
        for side, tree in trees.items():
            quiet()
            env = {**os.environ, "PYTHONPATH": str(tree)}
            code = (
                "import json, sys; sys.path.insert(0, sys.argv[1]); "
                "sys.path.insert(0, sys.argv[2]); from sandbox_bench import compare_worker; "
                "from pathlib import Path; print(json.dumps(compare_worker(Path(sys.argv[3]), "
                "int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))))"
            )
            out = subprocess.run(
                [sys.executable, "-c", code, str(tree), str(HERE), str(source), *sizes],
                capture_output=True,
                text=True,
                env=env,
                cwd="/",
            )
            if out.returncode != 0:
                raise SystemExit(f"{side} worker failed:\n{out.stderr[-3000:]}")
            row = json.loads(out.stdout.strip().splitlines()[-1])
            if Path(row["sweworld"]) != (Path(tree) / "sweworld").resolve():
                raise SystemExit(f"{side} imported {row['sweworld']}, not its own tree")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=512, help="most live sessions")
    parser.add_argument("--creates", type=int, default=200, help="overlay creates to time")
    parser.add_argument(
        "--baseline-creates",
        type=int,
        default=10,
        help="full copies to time (each is a whole checkout)",
    )
    parser.add_argument("--steps", type=int, default=40, help="repetitions per step command")
    parser.add_argument("--json", default=None, help="write the numbers here too")
    parser.add_argument("--compare", action="store_true", help="also run before vs after")
    parser.add_argument(
        "--compare-only", action="store_true", help="only the before/after comparison"
    )
    parser.add_argument("--baseline", default=BASELINE, help="commit measured as 'before'")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--compare-creates", type=int, default=100)
    parser.add_argument("--compare-steps", type=int, default=20)
    parser.add_argument("--compare-live", type=int, default=64)
    args = parser.parse_args(argv)
    if args.compare_only:
        source = fetch_django()
        print(
            f"machine: {os.cpu_count()} cores, kernel {platform.release()}, "
            f"python {platform.python_version()}; repository {source.name}"
        )
        result = compare(args, source)
        if args.json:
            Path(args.json).write_text(json.dumps({"compare": result}, indent=2))
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
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
