"""SWT fidelity and latency on the toy tasks, with real execution (LocalExecutor) as truth.

For every toy task and several workspace states (the base; the task's test patch applied;
test patch + gold fix; test patch + a broken edit), a set of commands agents run
(the task's test command, single test node ids, a reproduction script, `python -c`
snippets, a script that raises, a missing file, `python --version`) is executed for real and
predicted by the simulated executor, in blind and in oracle mode. Printed side by side:

  * exit-code agreement, per-test status agreement (pytest commands, graded by the shared
    grader's parser), exception-type agreement, line-level output similarity;
  * where the answers came from (exact facts, model, fallback after failed validation);
  * latency p50 / p95 per simulated step, split into context / generation / validation,
    and the latency of a cache hit.

    sweworld bench swt-live [--model embedded] [--json out.json]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter, defaultdict

from sweworld.bench.summary import add_report_arguments, write_summary

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def broken_patch(patch: str) -> str:
    """The gold patch with ``raise RuntimeError('wip')`` added before its first added line
    (same indentation), the hunk's new-side count raised by one: a half-done fix that
    applies. Raises ValueError when the patch has no added line."""
    lines = patch.split("\n")
    header = None
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            header = i
        elif header is not None and line.startswith("+") and not line.startswith("+++"):
            body = line[1:]
            indent = body[: len(body) - len(body.lstrip())]
            match = _HUNK_RE.match(lines[header])
            if match is None:
                raise ValueError(f"unreadable hunk header {lines[header]!r}")
            old_start, old_len, new_start, new_len, tail = match.groups()
            new_len = str(int(new_len if new_len is not None else 1) + 1)
            old = f"{old_start},{old_len}" if old_len is not None else old_start
            lines[header] = f"@@ -{old} +{new_start},{new_len} @@{tail}"
            lines.insert(i, f"+{indent}raise RuntimeError('wip')")
            return "\n".join(lines)
    raise ValueError("the patch adds no line")


def states(task) -> dict[str, str]:
    """name -> patch applied on the base before the commands run."""
    return {
        "base": "",
        "tests": task.test_patch,
        "tests+gold": task.test_patch + task.patch,
        "tests+broken": task.test_patch + broken_patch(task.patch),
    }


def commands(task) -> list[str]:
    from sweworld.execution.testspec import test_spec

    spec = test_spec(task)
    out = [spec.command, "python --version", "python missing_script.py"]
    out += [f"python -m pytest -rA -p no:cacheprovider '{t}'" for t in task.FAIL_TO_PASS[:1]]
    out.append(
        "python -c 'import stockroom; print(sorted(n for n in dir(stockroom) "
        'if not n.startswith("_")))\''
    )
    out.append(
        "cat > /tmp/repro.py <<'EOF'\nfrom stockroom.textutil import slugify\n"
        "print(slugify('Hello,  World!'))\nprint(slugify('  a--b  '))\nEOF\n"
        "python /tmp/repro.py"
    )
    out.append("python -c 'from stockroom.money import Money; print(Money(-5))'")
    out.append("python -c 'import stockroom.inventory as i; i.Inventory().remove_stock(\"x\", 1)'")
    return out


def apply(session, patch: str) -> bool:
    if not patch:
        return True
    session.write_file("/tmp/state.patch", patch)
    return session.run("git apply /tmp/state.patch").exit_code == 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench swt-live``."""
    parser.add_argument("--model", default=None, help="SWT model spec (default: embedded)")
    parser.add_argument("--modes", default="blind,oracle", help="SWT context modes")
    parser.add_argument("--limit-tasks", type=int, default=None, help="first N toy tasks")
    parser.add_argument(
        "--attempts", type=int, default=3, help="model attempts per step before the fallback (1-3)"
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench swt-live``."""

    from sweworld.execution.local import LocalExecutor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path
    from sweworld.transition.hybrid import compare
    from sweworld.transition.simulated import SimulatedExecutor

    tasks = load_tasks(toy_tasks_path())[: args.limit_tasks]
    manager = SessionManager()
    real = LocalExecutor(timeout=120)
    results: dict = {}
    # Every case that does not produce a row is counted and printed: (mode, task, state,
    # command or "-", why).
    skipped: list[tuple[str, str, str, str, str]] = []
    for mode in args.modes.split(","):
        from sweworld.transition.simulated import DEFAULT_SCHEDULE
        from sweworld.world import lm_from_spec

        sim = SimulatedExecutor(
            lm_from_spec(args.model, lazy=True),
            mode=mode,
            schedule=DEFAULT_SCHEDULE[: args.attempts],
        )
        rows = []
        t0 = time.perf_counter()
        for task in tasks:
            for state_name, patch in states(task).items():
                with (
                    manager.open(task, executor=real, history="none") as rs,
                    manager.open(task, executor=sim, history="none") as ss,
                ):
                    if not (apply(rs, patch) and apply(ss, patch)):
                        why = "the state's patch does not apply"
                        skipped.append((mode, task.instance_id, state_name, "-", why))
                        continue
                    for cmd in commands(task):
                        r = rs.run(cmd)
                        s = ss.run(cmd)
                        calls = s.info.get("execution_calls", [])
                        if not calls:
                            why = "no execution reached the simulator"
                            skipped.append(
                                (mode, task.instance_id, state_name, cmd.splitlines()[-1], why)
                            )
                            continue
                        info = calls[-1].get("info", {})
                        from sweworld.sandbox.executor import ExecutionResult

                        agree = compare(
                            ExecutionResult(r.stdout, r.stderr, r.exit_code),
                            ExecutionResult(s.stdout, s.stderr, s.exit_code),
                        )
                        again_t = time.perf_counter()
                        ss.run(cmd)  # same state, same command: must be a cache hit
                        cache_s = time.perf_counter() - again_t
                        rows.append(
                            {
                                "task": task.instance_id,
                                "state": state_name,
                                "command": cmd.splitlines()[-1],
                                "source": info.get("source"),
                                "latency_s": info.get("latency_s", 0.0),
                                "timings_s": info.get("timings_s", {}),
                                "cache_step_s": cache_s,
                                **agree,
                            }
                        )
        elapsed = time.perf_counter() - t0
        results[mode] = summarize(rows, elapsed)
        results[mode]["rows"] = rows
        results[mode]["skipped"] = [list(c) for c in skipped if c[0] == mode]
        report(mode, results[mode])
        sim.close()
    real.close()
    manager.close_all()
    write_summary(args, "swt-live", results, title="SWT fidelity on live toy runs")
    return 0


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile: :func:`sweworld.bench.similarity.percentile`."""
    from sweworld.bench.similarity import percentile

    return percentile(values, q)


def summarize(rows: list[dict], elapsed: float) -> dict:
    def rate(key: str, subset=None) -> float:
        vals = [r[key] for r in (subset or rows) if r[key] is not None]
        return (
            sum(bool(v) if not isinstance(v, float) else v for v in vals) / len(vals)
            if vals
            else float("nan")
        )

    pytest_rows = [r for r in rows if r["tests"] is not None]
    model_rows = [r for r in rows if r["source"] in ("model", "fallback")]
    by_source = Counter(r["source"] for r in rows)
    timing = defaultdict(list)
    for r in model_rows:
        for k, v in r["timings_s"].items():
            timing[k].append(v)
    return {
        "steps": len(rows),
        "states": dict(Counter(r["state"] for r in rows)),
        "elapsed_s": elapsed,
        "sources": dict(by_source),
        "exit_code_agreement": rate("exit_code"),
        "exit_code_agreement_model_only": rate("exit_code", model_rows),
        "test_status_agreement": rate("tests", pytest_rows),
        "exception_agreement": rate("exception"),
        "line_similarity_mean": statistics.mean(r["line_similarity"] for r in rows)
        if rows
        else float("nan"),
        "latency_p50_s": pct([r["latency_s"] for r in rows], 50),
        "latency_p95_s": pct([r["latency_s"] for r in rows], 95),
        "model_latency_p50_s": pct([r["latency_s"] for r in model_rows], 50),
        "model_latency_p95_s": pct([r["latency_s"] for r in model_rows], 95),
        "model_timing_p50_s": {k: pct(v, 50) for k, v in timing.items()},
        "cache_step_p50_s": pct([r["cache_step_s"] for r in rows], 50),
    }


def report(mode: str, s: dict) -> None:
    print(f"== {mode}: {s['steps']} steps ({s['elapsed_s']:.0f} s), answers from {s['sources']}")
    print(f"  steps by state                 {s['states']}")
    print(f"  skipped cases                  {len(s.get('skipped', []))}")
    for case in s.get("skipped", []):
        print(f"    skipped: {' | '.join(case[1:])}")
    print(
        f"  exit code agreement            {s['exit_code_agreement']:.3f} "
        f"(model-answered steps only: {s['exit_code_agreement_model_only']:.3f})"
    )
    print(f"  per-test status agreement      {s['test_status_agreement']:.3f}")
    print(f"  exception type agreement       {s['exception_agreement']:.3f}")
    print(f"  line similarity (mean)         {s['line_similarity_mean']:.3f}")
    print(
        f"  latency per step p50 / p95     {s['latency_p50_s']:.2f} s / "
        f"{s['latency_p95_s']:.2f} s (all); model steps {s['model_latency_p50_s']:.2f} s / "
        f"{s['model_latency_p95_s']:.2f} s"
    )
    print(f"  model step breakdown p50       {s['model_timing_p50_s']}")
    print(f"  cache hit (whole shell step)   {s['cache_step_p50_s'] * 1000:.1f} ms\n")
