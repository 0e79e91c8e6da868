"""``sweworld bench executors``: the same agent steps on Docker, Local and Simulated executors.

For each task, one session per executor (``--executors docker,local,simulated``, any
subset; the first is the reference) replays the same steps
(:mod:`sweworld.bench.executor_steps`: the built-in probe, or ``--from-records`` the
execution commands of recorded SWT examples). Every measured step is compared for each pair
of executors by :func:`sweworld.bench.similarity.compare_results`: exit code, per-test
statuses (the shared grader's parser), the type of the last exception, line similarity of
stdout + stderr; plus identical output and the time each executor took.

Before a task, each executor is checked: Docker needs the task's image (SWE-bench's name for
the instance; ``--build-images`` builds a missing one with
:func:`sweworld.execution.docker.images.build_task_image`), Local needs the task's Python
environment. A task that fails a check is run without that executor (counted by reason in
``skipped``, its comparisons missing). A step an executor could not run (``executed`` false:
an engine gone, an environment failed) has no comparison with it; after two such steps in a
row the executor is left out for the rest of the task, and the run ends with exit code 1.
Rows are keyed ``instance_id#step``: a killed run resumes at the first step not done (the
setup steps, file operations, are run again to rebuild the workspace; the probe's measured
steps do not change the files later steps read).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweworld.bench.executor_pairs import figures_from_rows, plot_by_kind
from sweworld.tasks.fields import MODE_HELP

__all__ = ["add_arguments", "run", "run_step", "select_simulated"]

#: Characters kept of each stream in a row (head and tail).
KEEP_CHARS = 3000
#: Executors a run knows, by name.
KNOWN = ("docker", "local", "simulated")
#: Consecutive steps an executor may fail to run before it is left out of the task.
MAX_FAILED_IN_ROW = 2

TITLE = "Docker vs Local vs Simulated on the same steps (sweworld bench executors)"


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench executors``."""
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")
    parser.add_argument(
        "--tasks", nargs="+", default=None, help="tasks JSONL files (default: the toy tasks)"
    )
    parser.add_argument("--ids", default="", help="comma-separated instance ids to run")
    parser.add_argument(
        "--limit", type=int, default=0, help="at most this many tasks per tasks file (0: all)"
    )
    parser.add_argument(
        "--executors",
        default="docker,local,simulated",
        help="comma-separated executors (docker, local, simulated); the first is the reference",
    )
    parser.add_argument("--model", default="embedded", help="LM spec of the simulated executor")
    parser.add_argument("--mode", default="oracle", choices=("oracle", "blind"), help=MODE_HELP)
    parser.add_argument(
        "--simulated-limit",
        type=int,
        default=0,
        help="measured steps per task given to the simulated executor, spread evenly (0: all)",
    )
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per step")
    parser.add_argument("--max-tests", type=int, default=20, help="test ids per probe test run")
    parser.add_argument(
        "--from-records",
        nargs="+",
        default=None,
        metavar="DIR",
        help="replay the SWT records of these dataset folders instead of the probe",
    )
    parser.add_argument("--split", default="all", help="split of the records (train/test/all)")
    parser.add_argument(
        "--record-steps", type=int, default=12, help="measured record steps per task (0: all)"
    )
    parser.add_argument(
        "--build-images", action="store_true", help="build a task's missing Docker image"
    )


# ------------------------------------------------------------------------------ executors


def bench_executor(name: str, args: Any) -> Any:
    """A fresh executor named ``name`` (one of :data:`KNOWN`) with the run's deadline, built
    by :func:`sweworld.world.executor_from_spec`."""
    from sweworld.world import executor_from_spec

    if name not in KNOWN:
        raise ValueError(f"unknown executor {name!r} (known: {', '.join(KNOWN)})")
    if name == "simulated":
        lm = getattr(args, "lm", None) or args.model
        return executor_from_spec(name, lm=lm, mode=args.mode, step_timeout=args.deadline)
    return executor_from_spec(name, timeout=args.deadline)


def docker_client() -> tuple[Any, str]:
    """A client of the local Docker engine, or None and why not."""
    try:
        import docker
    except ImportError:
        return None, "the docker package is not installed"
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        return None, f"no Docker engine answers ({type(exc).__name__})"
    return client, ""


def docker_image_problem(
    client: Any, task: Any, *, build: bool, manager: Any, notes: dict[str, Any]
) -> str:
    """Why the task has no Docker image to run in ('' when it has one). With ``build``,
    :func:`~sweworld.execution.docker.images.build_task_image` builds a missing or stale
    image (one whose ``/testbed`` is not the task's base checkout); what it says about the
    image goes into ``notes``."""
    from sweworld.execution.docker import swebench_image_name

    if build:
        try:
            from sweworld.execution.docker.images import build_task_image
        except ImportError:
            return "image not built (no image builder in this version)"
        try:
            made = build_task_image(task, manager=manager, client=client)
        except Exception as exc:
            return f"image build failed ({type(exc).__name__})"
        notes[task.instance_id] = {
            "image": made.name,
            "built": made.built,
            "seconds": round(made.seconds, 1),
            "note": made.note,
        }
        return ""
    names = [
        swebench_image_name(task.instance_id),
        swebench_image_name(task.instance_id, namespace=None),
    ]
    for name in names:
        try:
            client.images.get(name)
            return ""
        except Exception as exc:
            if type(exc).__name__ not in ("ImageNotFound", "NotFound"):
                return f"image lookup failed ({type(exc).__name__})"
    return "image missing"


def preflight(name: str, executor: Any, task: Any, manager: Any, ctx: dict[str, Any]) -> str:
    """Why ``executor`` cannot run ``task`` ('' when it can)."""
    if name == "docker":
        if ctx.get("docker_client") is None:
            return ctx.get("docker_problem") or "no Docker engine"
        return docker_image_problem(
            ctx["docker_client"],
            task,
            build=ctx.get("build_images", False),
            manager=manager,
            notes=ctx["images"],
        )
    if name == "local":
        try:
            env = executor.environment(task, manager.checkout(task).path)
        except Exception as exc:
            return f"environment failed ({type(exc).__name__})"
        return "" if env.ok else "environment failed to build"
    return ""


# ------------------------------------------------------------------------------ one step


def _shorten(text: str, keep: int = KEEP_CHARS) -> str:
    if len(text) <= keep:
        return text
    half = keep // 2
    return f"{text[:half]}\n[... {len(text) - keep} characters ...]\n{text[-half:]}"


def run_step(session: Any, step: Any, deadline: float) -> dict[str, Any]:
    """Run ``step`` in ``session``: its files written, its command run (within
    ``deadline`` seconds); the result as a row entry (outputs shortened)."""
    from sweworld.sandbox.executor import ExecutionResult

    started = time.perf_counter()
    try:
        for path, text in step.files:
            session.write_file(path, text)
        outcome = session.run(step.command, timeout=deadline)
    except Exception as exc:  # a session that broke is this executor's failure, not the run's
        return {
            "failed": f"{type(exc).__name__}: {exc}"[:300],
            "wall_s": time.perf_counter() - started,
        }
    wall = time.perf_counter() - started
    calls = outcome.info.get("execution_calls") or []
    infos = [c.get("info") or {} for c in calls if isinstance(c, dict)]
    # a simulated answer is never "executed"; a real executor's call that did not run is
    failed = next(
        (
            str(i.get("status") or "not executed")
            for i in infos
            if i.get("executed") is False and not i.get("simulated")
        ),
        None,
    )
    entry: dict[str, Any] = {
        "result": ExecutionResult(outcome.stdout, outcome.stderr, outcome.exit_code),
        "stdout": _shorten(outcome.stdout),
        "stderr": _shorten(outcome.stderr),
        "exit_code": outcome.exit_code,
        "wall_s": wall,
        "calls": len(calls),
        "timed_out": bool(outcome.timed_out),
    }
    sources = [str(i["source"]) for i in infos if i.get("source")]
    if sources:
        entry["sources"] = sources
    if failed:
        entry["failed"] = f"{failed}: {(outcome.stderr.strip().splitlines() or [''])[0][:200]}"
    return entry


def compare_pair(a: Mapping[str, Any], b: Mapping[str, Any], command: str, repo: str) -> dict:
    """The pair's agreement on one step (:func:`compare_results` plus ``identical`` and
    ``masked_identical``: equal once timings, addresses, versions and paths are masked)."""
    from sweworld.bench.executor_pairs import masked
    from sweworld.bench.similarity import compare_results

    ra, rb = a["result"], b["result"]
    agree = compare_results(ra, rb, command=command, repo=repo)
    agree["identical"] = (ra.stdout, ra.stderr, ra.exit_code) == (
        rb.stdout,
        rb.stderr,
        rb.exit_code,
    )
    agree["masked_identical"] = ra.exit_code == rb.exit_code and (
        masked(ra.stdout),
        masked(ra.stderr),
    ) == (masked(rb.stdout), masked(rb.stderr))
    return agree


def select_simulated(steps: Sequence[Any], limit: int) -> set[int]:
    """Indices of the measured steps the simulated executor runs: all, or ``limit`` of
    them spread evenly over the task's list."""
    measured = [s.index for s in steps if s.measured]
    if limit <= 0 or limit >= len(measured):
        return set(measured)
    stride = len(measured) / limit
    return {measured[int(i * stride)] for i in range(limit)}


# ------------------------------------------------------------------------------ one task


def run_task(
    task: Any,
    steps: Sequence[Any],
    names: Sequence[str],
    executors: Mapping[str, Any],
    manager: Any,
    out: Any,
    args: Any,
    ctx: dict[str, Any],
) -> None:
    """Every step of ``task`` not done yet, in one session per usable executor."""
    done = out.done()
    todo = [s for s in steps if s.measured and f"{task.instance_id}#{s.index}" not in done]
    if not todo:
        return
    usable: list[str] = []
    for name in names:
        problem = preflight(name, executors[name], task, manager, ctx)
        if problem:
            out.skip(f"{name}: {problem} (task left without it)")
            ctx["missing"].setdefault(task.instance_id, {})[name] = problem
        else:
            usable.append(name)
    if not usable:
        out.skip("task: no executor could run it", len(todo))
        return
    try:
        sessions = {name: manager.open(task, executor=executors[name]) for name in usable}
    except Exception as exc:
        out.skip(f"task: session failed to open ({type(exc).__name__})", len(todo))
        return
    simulated_steps = select_simulated(steps, args.simulated_limit)
    failed_in_row = dict.fromkeys(usable, 0)
    try:
        for step in steps:
            key = f"{task.instance_id}#{step.index}"
            if step.measured and key in done:
                continue
            live = [n for n in usable if failed_in_row[n] < MAX_FAILED_IN_ROW]
            if step.measured and "simulated" in live and step.index not in simulated_steps:
                live.remove("simulated")
            entries = {name: run_step(sessions[name], step, args.deadline) for name in live}
            if not step.measured:
                bad = {
                    n: e.get("failed") or e.get("exit_code")
                    for n, e in entries.items()
                    if e.get("failed") or e.get("exit_code")
                }
                if bad:
                    out.skip(f"setup step failed ({step.label})")
                    ctx["setup_failures"].append(
                        {"task": task.instance_id, "step": step.label, "failed": bad}
                    )
                continue
            for name, entry in entries.items():
                if entry.get("failed"):
                    failed_in_row[name] += 1
                    out.skip(f"{name}: step not executed")
                    if failed_in_row[name] == MAX_FAILED_IN_ROW:
                        ctx["run_failures"].append(
                            f"{name} on {task.instance_id}: left out after step {step.index}: "
                            f"{entry['failed']}"
                        )
                else:
                    failed_in_row[name] = 0
            out.add_row(key, _row(task, step, names, entries))
    finally:
        for session in sessions.values():
            try:
                session.destroy()
            except Exception:
                out.skip("session failed to close")


def _row(task: Any, step: Any, names: Sequence[str], entries: Mapping[str, Any]) -> dict:
    ok = {n: e for n, e in entries.items() if not e.get("failed") and "result" in e}
    pairs: dict[str, Any] = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if a in ok and b in ok:
                pairs[f"{a}-{b}"] = compare_pair(ok[a], ok[b], step.command, task.repo)
    results = {n: {k: v for k, v in e.items() if k != "result"} for n, e in entries.items()}
    row = {
        "task": task.instance_id,
        "repo": task.repo,
        "index": step.index,
        "label": step.label,
        "kind": step.kind,
        "command": step.command,
        "results": results,
        "pairs": pairs,
    }
    if step.recorded is not None and ok:
        from sweworld.bench.similarity import compare_results
        from sweworld.sandbox.executor import ExecutionResult

        rec = step.recorded
        recorded = ExecutionResult(rec["stdout"], rec["stderr"], rec["exit_code"])
        row["vs_recorded"] = {
            n: compare_results(recorded, e["result"], command=step.command, repo=task.repo)
            for n, e in ok.items()
        }
    return row


# ------------------------------------------------------------------------------ command line


def load_work(args: Any) -> tuple[list[tuple[Any, list[Any]]], dict[str, Any], list[str]]:
    """(task, steps) pairs to run, counts of what was left out, and the data folders."""
    from sweworld.bench.executor_steps import probe_steps, record_steps
    from sweworld.tasks import load_tasks
    from sweworld.tasks.schema import Task

    ids = {i for i in args.ids.split(",") if i}
    left: dict[str, Any] = {}
    if args.from_records:
        import json

        from sweworld.bench.records import load_records

        records, counts = load_records(args.from_records, "swt", args.split)
        left.update({f"records: {k}": v for k, v in (counts.get("bad_rows") or {}).items()})
        steps_by_task, rows = record_steps(records)
        work = []
        for instance, steps in steps_by_task.items():
            if instance not in rows:
                left["records: no task row"] = left.get("records: no task row", 0) + 1
                continue
            row = json.loads(rows[instance]) if isinstance(rows[instance], str) else rows[instance]
            task = Task.from_row(row)
            if args.record_steps > 0:
                measured = [s for s in steps if s.measured][: args.record_steps]
                last = measured[-1].index if measured else -1
                steps = [s for s in steps if s.index <= last]
            work.append((task, steps))
        data = list(args.from_records)
    else:
        from sweworld.tasks.toy import toy_tasks_path

        data = list(args.tasks or [str(toy_tasks_path())])
        work = []
        for path in data:
            tasks = [t for t in load_tasks(path) if not ids or t.instance_id in ids]
            if args.limit > 0:
                tasks = tasks[: args.limit]
            work += [(t, probe_steps(t, max_tests=args.max_tests)) for t in tasks]
        return work, left, data
    if ids:
        work = [(t, s) for t, s in work if t.instance_id in ids]
    if args.limit > 0:
        work = work[: args.limit]
    return work, left, data


def _description(names: Sequence[str], args: Any) -> str:
    source = (
        "the execution commands of recorded SWT examples (--from-records), replayed at "
        "their recorded workspace state"
        if args.from_records
        else "a built-in probe per task (tests at the base and after the gold patch, an "
        "import, a non-zero exit, a traceback, a missing module, a /tmp script, piped "
        "stdin, a cwd change, an environment variable, a file written by Python then "
        "read by the shell)"
    )
    sim = ""
    if "simulated" in names:
        sim = (
            f" The simulated executor is `{args.model}` ({args.mode})"
            + (
                f", given {args.simulated_limit} measured steps per task, spread evenly"
                if args.simulated_limit
                else ""
            )
            + "."
        )
    return (
        f"The same steps run in one session per executor ({', '.join(names)}); "
        f"**{names[0]} is the reference**. Steps: {source}. File operations run for real in "
        "every session alike; only the execution commands go to the executor (the Docker "
        "executor copies what a command changes in its container back into the session). "
        "Docker's images are built here from Debian bookworm (`sweworld docker build`), "
        "Local runs the host's interpreter: the Python patch versions differ." + sim
    )


def run(args: Any) -> int:
    """Run the comparison and write the report; 0 on success, 1 when an executor failed
    mid-run or nothing was compared, 2 for bad options."""
    from sweworld.bench.output import BenchOutput, ResumeMismatch
    from sweworld.bench.records import DataError
    from sweworld.sandbox.manager import SessionManager

    names = [n.strip() for n in args.executors.split(",") if n.strip()]
    bad = [n for n in names if n not in KNOWN]
    if bad or len(names) < 2 or len(set(names)) != len(names):
        print(f"--executors takes two or more of {', '.join(KNOWN)} (got {args.executors!r})")
        return 2
    try:
        work, left, data = load_work(args)
    except (DataError, OSError, ValueError) as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    settings = {
        "executors": names,
        "steps": "records" if args.from_records else "probe",
        "model": args.model if "simulated" in names else None,
        "mode": args.mode,
        "simulated_limit": args.simulated_limit,
        "deadline_s": args.deadline,
        "max_tests": args.max_tests,
        "record_steps": args.record_steps if args.from_records else None,
    }
    try:
        out = BenchOutput(
            args.out,
            "executors",
            title=TITLE,
            settings=settings,
            data=data,
            description=_description(names, args),
            fresh=args.fresh,
            model=settings["model"] or "",
        )
    except ResumeMismatch as exc:
        print(exc)
        return 2
    for reason, count in left.items():
        out.skip(reason, count)
    ctx: dict[str, Any] = {
        "missing": {},
        "setup_failures": [],
        "run_failures": [],
        "images": {},
        "build_images": args.build_images,
    }
    if "docker" in names:
        ctx["docker_client"], ctx["docker_problem"] = docker_client()
    executors = {name: bench_executor(name, args) for name in names}
    started = time.perf_counter()
    try:
        with SessionManager() as manager:
            for task, steps in out.progress(work, total=len(work), desc="tasks"):
                try:
                    run_task(task, steps, names, executors, manager, out, args, ctx)
                except Exception as exc:  # one broken task never loses the others' rows
                    out.skip(f"task: error ({type(exc).__name__})")
                    ctx["run_failures"].append(f"{task.instance_id}: {type(exc).__name__}: {exc}")
                _write(out, names, ctx, started, final=False)
    finally:
        for executor in executors.values():
            close = getattr(executor, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    out.skip("executor failed to close")
    summary = _write(out, names, ctx, started, final=True)
    print(f"wrote {out.dir / 'report.md'}")
    for line in summary["headline"]:
        print(line)
    for failure in ctx["run_failures"]:
        print(f"failure: {failure}")
    return 1 if ctx["run_failures"] or not summary["compared_steps"] else 0


def _write(
    out: Any, names: Sequence[str], ctx: Mapping[str, Any], started: float, *, final: bool
) -> dict[str, Any]:
    rows = _rows_in_order(out.done().values())
    figures, summary = figures_from_rows(rows, names)
    if final:
        plots = plot_by_kind(summary, out.dir)
        for fig in figures:
            if fig.get("plot_key") in plots:
                fig["plot"] = plots[fig["plot_key"]]
    for fig in figures:
        fig.pop("plot_key", None)
    summary.update(
        missing_executors=ctx["missing"],
        docker_images=ctx["images"],
        setup_failures=ctx["setup_failures"],
        run_failures=ctx["run_failures"],
        elapsed_s=time.perf_counter() - started,
    )
    out.write(figures, summary, final=final)
    return summary


def _rows_in_order(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(rows, key=lambda r: (str(r.get("task")), int(r.get("index", 0))))
