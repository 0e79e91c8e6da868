"""The outcome model's data build, measured: records with states per repository and split,
replay and factory throughput, from a ``sweworld data build-outcome`` folder (finished or
still running) and, optionally, ``sweworld bench import --json`` files.

    sweworld bench data-outcome --build /work/data-outcome/build \\
        --bench both=/tmp/bench_req_both.json none=/tmp/bench_req_none.json \\
        [--out benchmarks/results/data-outcome]

Writes ``report.json`` (the ``sweworld bench render`` format) into ``--out`` and prints the
tables. Counts are read from each part's record files, so a build still running is reported
as far as it got (its ``build.json`` is written only at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from sweworld.data.schema import DEFAULT_HELDOUT_REPOS, parse_meta, split_of
from sweworld.data.store import iter_records


def _done_rows(part: Path) -> list[dict[str, Any]]:
    path = part / "records" / "done.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def _part_counts(part: Path) -> dict[str, Any]:
    """SWT records (all, with a diff, with a real state), SWR records, by repository."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    phases: Counter[str] = Counter()
    for rec in iter_records(part, "swt"):
        c = table[rec.repo]
        c["swt"] += 1
        c["diff"] += int(bool(rec.diff))
        c["state"] += int(rec.state_source in ("replay", "live"))
        phases[parse_meta(rec.meta).get("phase") or rec.state_source] += 1
    for rec in iter_records(part, "swr"):
        table[rec.repo]["swr"] += 1
        table[rec.repo][f"swr_{rec.candidate_kind}"] += 1
    return {"repos": table, "phases": phases}


def _mtime_span(part: Path) -> float:
    """Seconds between a part's first and last write (its wall time while it runs)."""
    files = [p for p in (part / "records").glob("*.jsonl") if p.stat().st_size]
    if not files:
        return 0.0
    start = min(p.stat().st_ctime for p in [part / "records"])
    return max(p.stat().st_mtime for p in files) - start


_LOG_WALL = re.compile(r"\bwall (\d+(?:\.\d+)?) s\b")


def _log_wall(build: Path, name: str) -> float:
    """Seconds the part's finished runs took, as each printed it at its end in the part's
    log (a run stopped before its end printed none and is not counted)."""
    try:
        text = (build / "logs" / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0.0
    return sum(float(m) for m in _LOG_WALL.findall(text))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench data-outcome``."""
    parser.add_argument("--build", required=True, help="a build-outcome --out folder")
    parser.add_argument(
        "--bench", nargs="*", default=[], help="LABEL=FILE of `sweworld bench import --json FILE`"
    )
    parser.add_argument("--out", help="folder for report.json")
    parser.add_argument("--note", default="", help="a sentence added to the description")


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench data-outcome``."""

    build = Path(args.build)
    held = DEFAULT_HELDOUT_REPOS
    build_json = build / "build.json"
    finished = json.loads(build_json.read_text()) if build_json.is_file() else None
    walls = {j["name"]: j["wall_s"] for j in (finished or {}).get("jobs", [])}
    per_repo: dict[str, Counter[str]] = defaultdict(Counter)
    part_rows = []
    replay_rows = []
    for part in sorted(p for p in (build / "parts").glob("*") if p.is_dir()):
        counts = _part_counts(part)
        swt = sum(c["swt"] for c in counts["repos"].values())
        state = sum(c["state"] for c in counts["repos"].values())
        swr = sum(c["swr"] for c in counts["repos"].values())
        for repo, c in counts["repos"].items():
            per_repo[repo].update(c)
        wall = walls.get(part.name) or _log_wall(build, part.name) or _mtime_span(part)
        phases = ", ".join(f"{k} {v}" for k, v in counts["phases"].most_common())
        rate = f"{state / wall:.2f}" if wall else "-"
        part_rows.append([part.name, swt, state, swr, round(wall), rate, phases])
        if part.name.startswith("import"):
            for row in _done_rows(part):
                if "repo" in row and row.get("state_source") == "replay":
                    replay_rows.append(row)
    by_repo: dict[str, Counter[str]] = defaultdict(Counter)
    for row in replay_rows:
        c = by_repo[row["repo"]]
        c["trajectories"] += 1
        c["steps"] += int(row.get("steps", 0))
        c["consistent"] += int(row.get("steps_consistent", 0))
        c["ms"] += int(1000 * float(row.get("seconds", 0)))
    replay_table = [
        [
            repo,
            c["trajectories"],
            c["steps"],
            round(c["ms"] / 1000, 1),
            round(c["steps"] / max(c["ms"] / 1000, 1e-9), 1),
            round(c["consistent"] / max(c["steps"], 1), 3),
        ]
        for repo, c in sorted(by_repo.items())
    ]
    repo_table = [
        [repo, split_of(repo, held), c["swt"], c["diff"], c["state"], c["swr"], c["swr_wrong"]]
        for repo, c in sorted(per_repo.items())
    ]
    splits: Counter[str] = Counter()
    for _repo, split, _swt, _diff, state, _swr, _wrong in repo_table:
        splits[split] += state
    bench_rows = []
    for item in args.bench:
        label, _, path = item.partition("=")
        data = json.loads(Path(path).read_text())
        rep = data["replay"]
        bench_rows.append(
            [
                label,
                rep["trajectories"],
                rep["steps"],
                rep["wall_s"],
                rep["steps_per_s"],
                rep["records_per_s"],
                rep["steps_reproduced"],
            ]
        )
    figures = [
        {
            "title": "Records with workspace states, per repository / library",
            "columns": [
                "repository",
                "split",
                "swt",
                "with a diff",
                "with a real state",
                "swr",
                "swr wrong fixes",
            ],
            "rows": repo_table,
        },
        {
            "title": "Parts of the build (processes)",
            "columns": ["part", "swt", "with state", "swr", "wall s", "states/s", "phases"],
            "rows": part_rows,
        },
        {
            "title": "Replay import per repository (one process each shard, checkouts included)",
            "columns": ["repository", "trajectories", "steps", "s", "steps/s", "reproduced"],
            "rows": replay_table,
        },
    ]
    if bench_rows:
        figures.append(
            {
                "title": "Replay throughput, sweworld bench import (same trajectories)",
                "columns": [
                    "run",
                    "trajectories",
                    "steps",
                    "wall s",
                    "steps/s",
                    "records/s",
                    "reproduced",
                ],
                "rows": bench_rows,
            }
        )
    total_state = sum(r[4] for r in repo_table)
    try:
        start = json.loads((build / "started.json").read_text())
    except (OSError, ValueError):
        start = {}
    planned = start.get("parts") or []
    # a part is done when it wrote its summary (a stopped one resumes without it)
    done_parts = [p for p in planned if (build / "parts" / p / "summary.json").is_file()]
    complete = finished is not None and len(done_parts) == len(planned)
    description = (
        f"`sweworld data build-outcome` into `{build}`"
        + (
            " (finished)"
            if complete
            else f" (not finished: {len(done_parts)} of {len(planned) or '?'} parts finished, "
            f"{len(part_rows)} started; counts as far as it got)"
        )
        + f": {total_state} SWT records with a real workspace state (replayed or live), "
        f"per split {dict(splits)}. Measured on a {os.cpu_count()}-core machine (load "
        f"average {os.getloadavg()[0]:.0f} when reported). A part's wall s: the build's own "
        "timing of it, else the sum of the part's runs that finished as its log prints them (a "
        "run stopped part way is not counted), else its first to last write."
        + (f" {args.note}" if args.note else "")
    )
    report = {
        "report_version": 1,
        "benchmark": "data-outcome",
        "title": "Outcome model data: replay import and task factory (issue 19)",
        "description": description,
        "model": "none (data generation)",
        "provenance": {
            "command": (finished or {}).get("command")
            or start.get("command")
            or "unknown (the build wrote no started.json)",
            "machine": {
                "platform": f"{platform.system()}, {platform.release()}, shared CPU VM",
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "data": ["mini-swe-agent-gemini3-verified (shared)", "package-index libraries"],
            "started": start.get("started") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "settings": {"heldout": list(held)},
        "skipped": {},
        "figures": figures,
    }
    for fig in figures:
        print(f"## {fig['title']}")
        print(" | ".join(fig["columns"]))
        for row in fig["rows"]:
            print(" | ".join(str(x) for x in row))
    print(description)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0
