"""``sweworld data build-outcome``: one command regenerates the outcome model's training data.

Real SWT records **with workspace states** (the diff against the base at each step) from two
sources, run as separate processes (a process per core: the work is Python-bound):

* **replay import** of the shared agent trajectories of every repository the repo cache
  holds (``$SWEWORLD_REPO_CACHE`` / ``--repo-cache``; :mod:`sweworld.data.importing`), split
  into ``--shards`` by a stable hash of the trajectory;
* **the task factory** on pure-Python libraries from the package index
  (:mod:`sweworld.data.factory`), with several wrong fixes per task and every mutant's
  screening run recorded (``--screen-records``).

Each part writes into ``<out>/parts/<name>`` (resumable: a rerun skips finished
trajectories, mutants and tasks) with its log in ``<out>/logs/<name>.log``. At most
``--jobs`` parts run at once, each under ``--job-timeout`` seconds (a part stopped there
keeps what it wrote). Then the parts' records are merged (ids de-duplicated) into
``<out>/records`` and finalized: ``<out>/swt`` and ``<out>/swr`` as HF ``DatasetDict``s split
by repository (:func:`~sweworld.data.schema.split_of`), ``<out>/summary.json``, and
``<out>/build.json`` (each part's command, exit status and wall time); the factory's library
repositories are linked into ``<out>/repos`` (a repo cache for rebuilding the records'
states). The counts per repository / library and split are printed.

Contexts (the LM's prompts) are not built by default (``--contexts none``): the outcome model
learns from the state, the command and the truth, and building contexts costs ~10x the
replay on large repositories; ``--contexts both`` builds them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweworld.data.importing import add_repo_cache, heldout_repos
from sweworld.data.schema import split_of

__all__ = [
    "DEFAULT_LIBRARIES",
    "Job",
    "add_arguments",
    "cached_repos",
    "command_line",
    "link_repos",
    "merge_parts",
    "plan_jobs",
    "run",
    "run_jobs",
    "state_table",
]

#: pure-Python libraries whose sdists carry their tests, which run with plain pytest in
#: seconds and need nothing beyond pytest (each checked here with ``make-tasks``; left out:
#: humanize, funcy, jmespath and idna, whose tests need packages the environment lacks;
#: docopt and sortedcontainers, whose sdists have no tests; more-itertools, ~20 s a run;
#: webcolors, whose every mutant breaks too many tests; isodate, 2 tasks from 300 mutants)
DEFAULT_LIBRARIES: tuple[str, ...] = (
    "six",
    "cachetools",
    "sqlparse",
    "boltons",
    "parse",
    "semver",
    "xmltodict",
    "tabulate",
    "python-slugify",
    "glom",
    "toolz",
    "inflection",
    "pathspec",
)


@dataclass
class Job:
    """One part of the build: a ``sweworld data ...`` command writing into ``out``."""

    name: str
    argv: list[str]
    out: str
    log: str
    kind: str  # "import" or "factory"
    returncode: int | None = None
    wall_s: float = 0.0
    timed_out: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweworld data build-outcome`` options."""
    parser.add_argument("--out", required=True, help="output folder (resumed when it exists)")
    parser.add_argument(
        "--source",
        help="agent runs to replay (default: ../shared/data/mini-swe-agent-gemini3-verified"
        ".tar.gz beside the project, when it exists)",
    )
    parser.add_argument("--repo-cache", help="folder of repository mirrors (SWEWORLD_REPO_CACHE)")
    parser.add_argument(
        "--libraries",
        default=",".join(DEFAULT_LIBRARIES),
        help="comma-separated package-index names for the factory ('' for none)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="parts run at once (processes)")
    parser.add_argument("--shards", type=int, default=2, help="processes for the replay import")
    parser.add_argument(
        "--contexts", default="none", choices=("none", "both", "oracle", "blind"),
        help="SWT contexts per record (none: state, command and truth only)",
    )  # fmt: skip
    parser.add_argument("--max-tasks", type=int, default=40, help="factory tasks per library")
    parser.add_argument("--max-mutants", type=int, default=400, help="mutants per library")
    parser.add_argument("--wrong-fixes", type=int, default=3, help="wrong fixes per task")
    parser.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test run")
    parser.add_argument("--job-timeout", type=float, help="seconds per part (then stopped)")
    parser.add_argument(
        "--only", choices=("import", "factory", "merge"), help="run only this stage"
    )
    parser.add_argument("--heldout", help="comma-separated repositories of the test split")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")


def _default_source() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared/data/mini-swe-agent-gemini3-verified.tar.gz"
        if candidate.is_file():
            return candidate
    return None


def cached_repos(repos: Iterable[str]) -> list[str]:
    """The repositories of ``repos`` the repo cache holds (sorted)."""
    from sweworld.sandbox.repos import RepoError, find_repo_source

    found = []
    for repo in sorted(set(repos)):
        try:
            find_repo_source(repo)
        except RepoError:
            continue
        found.append(repo)
    return found


def _source_repos(source: Path) -> Counter[str]:
    """Trajectories per repository in an agent-run source."""
    from sweworld.data.importers import detect_format, get_importer
    from sweworld.data.schema import Trajectory

    counts: Counter[str] = Counter()
    for item in get_importer(detect_format(source)).read(source):
        if isinstance(item, Trajectory):
            counts[item.repo] += 1
    return counts


def plan_jobs(
    out: Path,
    *,
    source: Path | None,
    repos: Sequence[str],
    libraries: Sequence[str],
    shards: int = 2,
    contexts: str = "none",
    max_tasks: int = 40,
    max_mutants: int = 400,
    wrong_fixes: int = 3,
    test_timeout: float = 60.0,
) -> list[Job]:
    """The parts of a build: ``shards`` replay imports of ``repos`` from ``source`` (none
    when either is empty), then one factory run per library."""
    py = [sys.executable, "-m", "sweworld", "data"]
    jobs: list[Job] = []

    def job(name: str, kind: str, argv: list[str]) -> None:
        part = out / "parts" / name
        log = str(out / "logs" / f"{name}.log")
        jobs.append(Job(name, [*argv, "--out", str(part)], str(part), log, kind))

    if source is not None and repos:
        n = max(1, shards)
        for k in range(n):
            argv = [*py, "import", "--source", str(source), "--workers", "1"]
            argv += ["--repos", *repos, "--contexts", contexts]
            if n > 1:
                argv += ["--shard", f"{k}/{n}"]
            job(f"import-{k}", "import", argv)
    for lib in libraries:
        argv = [*py, "make-tasks", "--package", lib, "--workers", "1", "--no-progress"]
        argv += ["--max-tasks", str(max_tasks), "--max-mutants", str(max_mutants)]
        argv += ["--wrong-fixes", str(wrong_fixes), "--contexts", contexts, "--screen-records"]
        argv += ["--timeout", str(test_timeout)]
        job(f"factory-{lib}", "factory", argv)
    return jobs


def run_jobs(
    jobs: Sequence[Job], *, parallel: int = 2, timeout: float | None = None, echo: Any = print
) -> list[Job]:
    """Run ``jobs`` as subprocesses, at most ``parallel`` at once, in order; each one's
    output goes to its log; one past ``timeout`` seconds is stopped (SIGTERM, then SIGKILL),
    keeping what it wrote. Returns the jobs with exit status and wall time filled in."""
    pending = list(jobs)
    running: list[tuple[Job, subprocess.Popen[bytes], float, Any]] = []
    while pending or running:
        while pending and len(running) < max(1, parallel):
            job = pending.pop(0)
            Path(job.log).parent.mkdir(parents=True, exist_ok=True)
            Path(job.out).parent.mkdir(parents=True, exist_ok=True)
            log = open(job.log, "ab")  # noqa: SIM115 (closed when the job ends)
            log.write(f"\n$ {' '.join(job.argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT)
            running.append((job, proc, time.monotonic(), log))
            echo(f"started {job.name} (pid {proc.pid}), log {job.log}")
        time.sleep(0.5)
        still = []
        for job, proc, started, log in running:
            elapsed = time.monotonic() - started
            if proc.poll() is None and timeout is not None and elapsed > timeout:
                job.timed_out = True
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.poll() is None:
                still.append((job, proc, started, log))
                continue
            log.close()
            job.returncode = proc.returncode
            job.wall_s = round(elapsed, 1)
            note = " (stopped at the part's time limit)" if job.timed_out else ""
            echo(f"finished {job.name}: exit {job.returncode} in {job.wall_s} s{note}")
        running = still
    return list(jobs)


def merge_parts(out: Path, parts: Iterable[Path], heldout: Sequence[str]) -> dict[str, Any]:
    """Merge the parts' record files into ``<out>/records`` (rebuilt; ids de-duplicated)
    and finalize ``<out>`` (datasets split by repository, ``summary.json``)."""
    import shutil

    from sweworld.data.store import KINDS, RecordStore, finalize, iter_records

    target = out / "records"
    if target.exists():
        shutil.rmtree(target)
    with RecordStore(out) as store:
        for part in parts:
            if not (part / "records").is_dir():
                continue
            for kind in KINDS:
                for record in iter_records(part, kind):
                    store.add(record)
    return finalize(out, heldout=tuple(heldout))


def link_repos(out: Path, parts: Iterable[Path]) -> list[Path]:
    """Link every part's library repositories (``<part>/repos/<owner>__<name>.git``, made
    by the factory) into ``<out>/repos``, so that one ``SWEWORLD_REPO_CACHE=<out>/repos``
    (beside the source mirrors) finds the base commit of every factory record. Returns
    the links made or kept."""
    target = out / "repos"
    links = []
    for part in parts:
        for repo in sorted((part / "repos").glob("*.git")) if (part / "repos").is_dir() else []:
            link = target / repo.name
            if link.is_symlink() and link.resolve() == repo.resolve():
                links.append(link)
                continue
            if link.exists() or link.is_symlink():
                continue  # another part's copy of the same library: the first one stays
            target.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(repo, target))
            links.append(link)
    return links


def state_table(out: Path, heldout: Sequence[str]) -> list[tuple[str, str, int, int, int, int]]:
    """Per repository / library: (name, split, SWT records, with a non-empty diff, live or
    replayed (a real state), SWR records), from ``<out>/records``."""
    from sweworld.data.store import iter_records

    table: dict[str, Counter[str]] = defaultdict(Counter)
    for rec in iter_records(out, "swt"):
        c = table[rec.repo]
        c["swt"] += 1
        c["diff"] += int(bool(rec.diff))
        c["state"] += int(rec.state_source in ("replay", "live"))
    for rec in iter_records(out, "swr"):
        table[rec.repo]["swr"] += 1
    held = tuple(heldout)
    return [
        (repo, split_of(repo, held), c["swt"], c["diff"], c["state"], c["swr"])
        for repo, c in sorted(table.items())
    ]


def _print_table(rows: list[tuple[str, str, int, int, int, int]]) -> None:
    header = ("repository", "split", "swt", "swt_with_diff", "swt_with_state", "swr")
    cells = [header, *[tuple(str(x) for x in r) for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    by_split: Counter[str] = Counter()
    for _, split, swt, _, state, _ in rows:
        by_split[f"{split}_swt"] += swt
        by_split[f"{split}_with_state"] += state
    print("per split:", dict(by_split))


def command_line(args: argparse.Namespace) -> str:
    """The ``sweworld data build-outcome`` command ``args`` stand for, every option spelt out
    (defaults too: the record of a build names what it ran)."""
    words = ["sweworld", "data", "build-outcome"]
    for key in ("out", "source", "repo_cache", "libraries", "jobs", "shards", "contexts",
                "max_tasks", "max_mutants", "wrong_fixes", "test_timeout", "job_timeout",
                "only", "heldout"):  # fmt: skip
        value = getattr(args, key, None)
        if value is not None:
            words += [f"--{key.replace('_', '-')}", shlex.quote(str(value))]
    return " ".join(words)


def _started_json(args: argparse.Namespace, jobs: Sequence[Job]) -> str:
    record = {
        "command": command_line(args),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "parts": [job.name for job in jobs],
    }
    return json.dumps(record, indent=1) + "\n"


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld data build-outcome``; 0 when records were written."""
    out = Path(args.out).expanduser().resolve()
    if args.repo_cache:
        add_repo_cache(Path(args.repo_cache).expanduser().resolve())
    heldout = heldout_repos(args.heldout)
    source = Path(args.source) if args.source else _default_source()
    if source is not None and not source.exists():
        print(f"sweworld: error: {source}: no such file", file=sys.stderr)
        return 2
    libraries = [x.strip() for x in args.libraries.split(",") if x.strip()]
    repos: list[str] = []
    if source is not None and args.only in (None, "import"):
        per_repo = _source_repos(source)
        repos = cached_repos(per_repo)
        missing = sorted(set(per_repo) - set(repos))
        print(f"replay: {', '.join(f'{r} ({per_repo[r]})' for r in repos) or 'none'}")
        if missing:
            print(f"not in the repo cache (left out): {', '.join(missing)}")
    jobs = plan_jobs(
        out,
        source=source if args.only in (None, "import") else None,
        repos=repos,
        libraries=libraries if args.only in (None, "factory") else [],
        shards=args.shards,
        contexts=args.contexts,
        max_tasks=args.max_tasks,
        max_mutants=args.max_mutants,
        wrong_fixes=args.wrong_fixes,
        test_timeout=args.test_timeout,
    )
    if args.only == "merge":
        jobs = []
    if args.dry_run:
        for job in jobs:
            print(" ".join(job.argv))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # what a report of the build names (a merge alone keeps the record of the build it merges)
    if jobs or not (out / "started.json").is_file():
        (out / "started.json").write_text(_started_json(args, jobs))
    done = run_jobs(jobs, parallel=args.jobs, timeout=args.job_timeout)
    parts = sorted(p for p in (out / "parts").glob("*") if p.is_dir())
    summary = merge_parts(out, parts, heldout)
    link_repos(out, parts)
    build = {
        "jobs": [asdict(j) for j in done],
        "wall_s": round(time.monotonic() - started, 1),
        "contexts": args.contexts,
        "heldout": list(heldout),
    }
    (out / "build.json").write_text(json.dumps(build, indent=2) + "\n")
    rows = state_table(out, heldout)
    _print_table(rows)
    print(f"swt {summary.get('swt', {}).get('splits')}, swr {summary.get('swr', {}).get('splits')}")
    print(f"datasets in {out}/swt and {out}/swr; parts in {out}/parts; wall {build['wall_s']} s")
    return 0 if summary.get("swt", {}).get("total") else 1
