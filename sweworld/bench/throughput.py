"""Throughput: sessions per second, file-operation, simulated and real execution steps per
second, latency and memory per live session, side by side in one run.

On the same task(s) (the toy task by default) and at each concurrency (1, 16, 64 live
episodes by default), one run measures:

- **sessions**: ``c`` sandbox sessions opened one after another (sessions/s), each given
  one command so that its sandbox server runs; then, while those ``c`` live, ``--churn``
  more opened and closed one at a time (open+close/s); then the ``c`` closed (closes/s).
  Memory per live session: the growth of the resident set (RSS) of this process and every
  process under it (the sandbox servers), and the machine's ``MemAvailable`` drop (which
  also holds kernel memory: mount namespaces, overlay superblocks, page cache), each
  divided by ``c``. No executor: this is the sandbox alone.
- **steps**: an :class:`~sweworld.env.pool.EnvPool` of ``c`` episodes, all slots stepped in
  lock step (``pool.step``) for ``--steps`` rounds after one warm-up round (not counted; its
  latency is the "first step" column: a sandbox or container starting). Backends:

  - ``file ops``: viewing, grepping, listing and creating files (real, in the sandbox; no
    executor is involved);
  - each ``--models`` spec as a simulated executor (``replay``: a replay LM answering at once
    with the real output of the same kind of command recorded once by the LocalExecutor, so
    the figure is the environment's own overhead: routing, facts, context, validation,
    batching; ``embedded``: the default world model on this CPU, few steps at small
    concurrency; ``openai:URL#name``: a served model);
  - ``local`` (the LocalExecutor running the same commands for real in its sandbox) and
    ``docker`` (the DockerExecutor, one container per session, on the SWE-bench image name of
    the task, ``swebench_image_name(instance_id)``, or its local key) where an engine and the
    image exist; skipped, with the reason, otherwise.

  Every execution backend runs the same commands: alternately a ``python -c`` that imports the
  repository's package and prints the slot and step, and ``python -m pytest`` on a test file
  of the task with a ``-k`` that deselects nothing but differs per slot and step, so that no
  answer is a cache hit of another slot's. Steps/s = slots x rounds / wall time of the
  rounds; p50 / p95 of each step's latency; memory as for sessions, after the rounds, per
  episode (the model's own memory is loaded before the baseline and is not in it; a
  container's processes are not under this process: only the machine figure counts them).

Each (metric, backend, concurrency) is one row of ``OUT/rows.jsonl``: a run stopped at any
point resumes at the first cell not done; a backend that fails (no engine, no image, a model
that does not load, an engine that dies) is counted in ``skipped`` and the others still run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweworld.argtypes import at_least, bounded
from sweworld.bench.output import BenchOutput, Figure, figure
from sweworld.bench.throughput_measure import (
    FILE_OPS,
    REAL_BACKENDS,
    docker_executor,
    load_model,
    measure_sessions,
    measure_steps,
)

__all__ = ["add_arguments", "cell_key", "run", "throughput_figures"]

#: Version of the step mixes: rows of another version are not resumed (it is in the
#: settings' fingerprint).
WORKLOAD_VERSION = 2


# =========================================================================== figures


def _backend_order(backend: str) -> tuple[int, str]:
    if backend == FILE_OPS:
        return 0, backend
    if backend in REAL_BACKENDS:
        return 2 + REAL_BACKENDS.index(backend), backend
    return 1, backend


def throughput_figures(rows: Sequence[dict[str, Any]], plot: str | None = None) -> list[Figure]:
    """The report's two tables: steps (backend x concurrency, with the real executors'
    figures beside the simulated ones) and sessions."""
    steps = sorted((r for r in rows if r.get("metric") == "steps"),
                   key=lambda r: (_backend_order(r["backend"]), r["concurrency"]))  # fmt: skip
    local = {r["concurrency"]: r.get("steps_per_s") for r in steps if r["backend"] == "local"}
    step_rows = []
    for r in steps:
        base = local.get(r["concurrency"])
        ratio = r["steps_per_s"] / base if base and r.get("steps_per_s") else None
        kind = ("file ops (real)" if r["backend"] == FILE_OPS
                else "real" if r["backend"] in REAL_BACKENDS else "simulated")  # fmt: skip
        sources = ", ".join(f"{k} {v}" for k, v in sorted(r.get("sources", {}).items()))
        step_rows.append([
            r["backend"], kind, r["concurrency"], r["steps"], r.get("steps_per_s"),
            None if r["backend"] == FILE_OPS else ratio, r.get("p50_s"), r.get("p95_s"),
            r.get("first_step_p50_s"), r.get("rss_mb_per_session"),
            r.get("outside_mb_per_session"), r.get("machine_mb_per_session"), sources,
        ])  # fmt: skip
    sessions = sorted((r for r in rows if r.get("metric") == "sessions"),
                      key=lambda r: r["concurrency"])  # fmt: skip
    session_rows = [
        [r["concurrency"], r.get("open_per_s"), r.get("first_command_s"), r.get("churn"),
         r.get("open_close_per_s"), r.get("close_per_s"), r.get("rss_mb_per_session"),
         r.get("machine_mb_per_session")]
        for r in sessions
    ]  # fmt: skip
    return [
        figure(
            "Steps per second, by backend and concurrency",
            [
                "backend",
                "kind",
                "live episodes",
                "steps",
                "steps/s",
                "x local",
                "p50 s",
                "p95 s",
                "first step p50 s",
                "RSS MB / episode",
                "container MB / episode",
                "machine MB / episode",
                "answered by",
            ],
            step_rows,
            "The baseline is real execution: `local` (the LocalExecutor, the commands run in "
            "its sandbox) and `docker` (one container per episode) beside the simulated "
            "backends, on the same commands (alternately `python -c` importing the package "
            "and pytest on a test file). `x local`: steps/s over local's at the same "
            "concurrency (above 1: the simulator is faster than running it). Episodes step in "
            "lock step, so steps/s = episodes x rounds / wall time; p50/p95: each step's "
            "latency; first step: the untimed warm-up command (`python -c 'pass'` for real "
            "executors: their sandbox or container starts; `true` for the others: the "
            "session's sandbox starts, no model is asked). "
            "`file ops`: view/grep/ls/create/head in the sandbox (no executor). Memory: the "
            "growth of this process tree's RSS (sandbox servers; not a container's "
            "processes, not a model loaded before the baseline); for docker, the containers' "
            "resident memory (their memory cgroups' rss); the machine's MemAvailable drop, "
            "which moves with every other process on the machine (negative: others freed "
            "more than the episodes took meanwhile); each per live episode. `answered by`: "
            "how the simulator answered (model, cache, exact facts, fallback) or the real "
            "executor. `replay` answers at "
            "once with real outputs recorded once: the environment's own overhead.",
            plot=plot,
        ),
        figure(
            "Sessions per second and memory per live session",
            [
                "live sessions",
                "open/s",
                "first command s",
                "churn",
                "open+close/s while live",
                "close/s",
                "RSS MB / session",
                "machine MB / session",
            ],
            session_rows,
            "Sandbox sessions on the same task, no executor. open/s: sessions opened one after "
            "another up to the live count; first command: the mean time of each one's first "
            "command (its sandbox server starts); open+close/s: `churn` sessions opened and "
            "closed one at a time while the others live; close/s: the live ones closed. "
            "Memory: process-tree RSS growth (the sandbox servers) and the machine's "
            "MemAvailable drop (adds kernel memory: namespaces, overlay mounts; moves with every "
            "other process on the machine), per live session.",
        ),
    ]


def _plot(rows: Sequence[dict[str, Any]], path: Path) -> str | None:
    """Bars of execution steps/s: one group per concurrency, one bar per backend (file
    operations, a different workload and far faster, are in the table only)."""
    from sweworld.bench import plots

    groups: dict[str, dict[str, float | None]] = {}
    steps = [r for r in rows if r.get("metric") == "steps" and r["backend"] != FILE_OPS]
    for r in sorted(steps, key=lambda r: r["concurrency"]):
        if r.get("steps_per_s"):
            groups.setdefault(f"{r['concurrency']} live", {})[r["backend"]] = r["steps_per_s"]
    title = "execution steps per second: simulated vs real, by live episodes"
    made = plots.bar_groups(groups, path, title=title, ylabel="steps / s", ylim=None)
    return made.name if made else None


# =========================================================================== command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench throughput``."""
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard rows of an earlier run")
    parser.add_argument("--tasks", default=None, help="tasks file (default: the toy task's)")
    parser.add_argument("--limit-tasks", type=int, default=1, help="tasks used, round robin")
    parser.add_argument("--concurrency", default="1,16,64", help="live episodes / sessions")
    parser.add_argument("--steps", type=at_least(1), default=6, help="timed rounds per episode")
    parser.add_argument(
        "--models", default="outcome,replay,embedded",
        help="simulated backends: outcome (the default world: the outcome model, no LM), "
        "replay (an LM route answering at once), embedded, openai:URL#name, ...",
    )  # fmt: skip
    parser.add_argument("--real", default="local,docker", help="real executors: local,docker")
    parser.add_argument("--no-file-ops", action="store_true", help="leave out file-op steps")
    parser.add_argument("--no-sessions", action="store_true", help="leave out sessions/s")
    parser.add_argument(
        "--churn", type=at_least(0), default=20, help="open+close while others live"
    )
    parser.add_argument("--embedded-concurrency", default="1,4", help="for embedded* models")
    parser.add_argument(
        "--embedded-steps", type=at_least(1), default=2, help="for embedded* models"
    )
    parser.add_argument(
        "--step-timeout", type=bounded(float, 0.001, 86_400), default=300.0,
        help="seconds per step",
    )  # fmt: skip
    parser.add_argument(
        "--compare", action="store_true",
        help="before vs after: the step cells on --baseline's tree and on this one, "
        "alternating --rounds times (medians)",
    )  # fmt: skip
    parser.add_argument("--baseline", default=None, help="commit measured as 'before'")
    parser.add_argument("--rounds", type=at_least(1), default=3, help="rounds per side")
    from sweworld.bench.throughput_serve import add_hostile_arguments

    add_hostile_arguments(parser)


def _ints(text: str) -> list[int]:
    values = [int(x) for x in str(text).split(",") if x.strip()]
    if not values or min(values) < 1:
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def _names(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def _cells(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(metric, backend, concurrency, steps) of every cell, in the order they run."""
    levels = _ints(args.concurrency)
    cells: list[tuple[str, str, int, int]] = []
    if not args.no_sessions:
        cells += [("sessions", "sandbox", c, 0) for c in levels]
    if not args.no_file_ops:
        cells += [("steps", FILE_OPS, c, args.steps) for c in levels]
    for spec in _names(args.models):
        slow = spec.startswith("embedded")
        for c in _ints(args.embedded_concurrency) if slow else levels:
            cells.append(("steps", spec, c, args.embedded_steps if slow else args.steps))
    for real in _names(args.real):
        cells += [("steps", real, c, args.steps) for c in levels]
    return cells


def cell_key(metric: str, backend: str, concurrency: int) -> str:
    """The key of a cell's row in ``rows.jsonl``."""
    return f"{metric}|{backend}|{concurrency}"


def run(args: argparse.Namespace) -> int:
    """Measure every cell not done yet, then write the report (with ``--hostile``: the
    world service quiet vs under hostile clients instead, :mod:`throughput_serve`)."""
    if getattr(args, "hostile", False):
        from sweworld.bench.throughput_serve import run_hostile

        return run_hostile(args)
    if getattr(args, "compare", False):
        from sweworld.bench.throughput_compare import run_compare

        return run_compare(args)
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    tasks_file = str(args.tasks or toy_tasks_path())
    tasks = load_tasks(tasks_file)[: max(args.limit_tasks, 1)]
    if not tasks:
        print(f"sweworld: error: no task in {tasks_file}", file=sys.stderr)
        return 2
    try:
        cells = _cells(args)
    except ValueError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    unknown = [r for r in _names(args.real) if r not in REAL_BACKENDS]
    if unknown:
        print(f"sweworld: error: unknown real executor(s) {unknown}; "
              f"known: {list(REAL_BACKENDS)}", file=sys.stderr)  # fmt: skip
        return 2
    settings = {
        "tasks": [t.instance_id for t in tasks],
        "steps": args.steps,
        "embedded_steps": args.embedded_steps,
        "churn": args.churn,
        "workload": WORKLOAD_VERSION,
    }
    out = BenchOutput(
        args.out, "throughput",
        title="Throughput: sessions, simulated and real steps per second (sweworld bench "
        "throughput)",
        description=(
            "Sessions opened per second and memory per live session; steps per second and "
            "step latency of file operations, of the simulated executor with each model and "
            "of real execution (LocalExecutor; DockerExecutor where an engine and the task's "
            "image exist), on the same task and the same commands, at each number of live "
            "episodes, in one process on this machine. Caveats: small counts (a few rounds "
            "per episode); the `replay` model answers at once, so its row is the "
            "environment's own cost, not a model's; the embedded model runs only a couple of "
            "steps at small concurrency; the machine's memory figure moves with everything "
            "else running on it."
        ),
        settings=settings, data=[tasks_file], model=", ".join(_names(args.models)),
        fresh=args.fresh,
    )  # fmt: skip
    out.set("run", {"concurrency": _ints(args.concurrency), "models": _names(args.models),
                    "real": _names(args.real),
                    "embedded_concurrency": _ints(args.embedded_concurrency)})  # fmt: skip
    done = out.done()
    todo = [c for c in cells if cell_key(*c[:3]) not in done]
    backends: dict[str, Any] = {}  # backend -> loaded model / executor factory, or failure
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="sweworld-throughput-") as tmp:
        root = Path(tmp)
        try:
            for metric, backend, level, steps in out.progress(todo, len(todo), "throughput"):
                if backend in failed:
                    out.skip(failed[backend])
                    continue
                try:
                    row = _measure(metric, backend, level, steps, tasks, root, args, backends)
                except _BackendUnavailable as exc:
                    failed[backend] = str(exc)
                    out.skip(str(exc))
                    continue
                except Exception as exc:
                    out.skip(f"{backend} at {level} live: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")  # fmt: skip
                    continue
                out.add_row(cell_key(metric, backend, level), row)
                rows = list(out.done().values())
                out.write(throughput_figures(rows), {"rows": rows}, final=False)
        finally:
            for thing in backends.values():
                closer = getattr(thing, "close", None)
                if callable(closer):
                    closer()
    rows = list(out.done().values())
    plot = _plot(rows, out.plot_path("steps_per_s.png"))
    out.write(throughput_figures(rows, plot), {"rows": rows})
    print(f"wrote {out.dir / 'report.md'}")
    return 0


class _BackendUnavailable(RuntimeError):
    """A backend that cannot run at all (no engine, no image, a model that does not load)."""


def _measure(
    metric: str,
    backend: str,
    level: int,
    steps: int,
    tasks: Sequence[Any],
    root: Path,
    args: argparse.Namespace,
    backends: dict[str, Any],
) -> dict[str, Any]:
    timeout = float(args.step_timeout)
    if metric == "sessions":
        return measure_sessions(tasks, level, args.churn, root)
    if backend == FILE_OPS:
        return measure_steps(tasks, backend, level, steps, root, executor="none",
                             step_timeout_s=timeout)  # fmt: skip
    if backend == "local":
        return measure_steps(tasks, backend, level, steps, root, executor="local",
                             step_timeout_s=timeout)  # fmt: skip
    if backend == "docker":
        executor, memory, why = docker_executor(tasks, timeout)
        if executor is None:
            raise _BackendUnavailable(why or "docker: unavailable")
        try:
            return measure_steps(tasks, backend, level, steps, root, executor=executor,
                                 step_timeout_s=timeout, outside_memory=memory)  # fmt: skip
        finally:
            if memory is not None:
                memory.client.close()  # the executor was given it: it does not close it
    if backend.partition(":")[0] == "outcome":  # the default world: no language model
        return measure_steps(tasks, backend, level, steps, root, executor=backend,
                             step_timeout_s=timeout)  # fmt: skip
    if backend not in backends:
        try:
            backends[backend] = load_model(backend, tasks, root)
        except Exception as exc:
            raise _BackendUnavailable(
                f"{backend}: the model did not load ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:160] if str(exc) else ''})"
            ) from exc
    return measure_steps(tasks, backend, level, steps, root, lm=backends[backend],
                         step_timeout_s=timeout)  # fmt: skip
