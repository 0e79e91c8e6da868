"""An agent solves tasks on simulated and on real feedback; every final patch is graded for real.

SWE-World's own protocol: the same agent runs each task twice, once with its execution
commands answered by the simulator (``--world-model``, default the embedded SWT model) and
once with them run for real (the local executor); both final patches are graded by the real
reward path (the task's FAIL_TO_PASS and PASS_TO_PASS tests run in the sandbox), never by a
model. The resolved rates and their difference (the sim-to-real gap), the agreement per
task, steps, wall time, the simulator's fallbacks and errors are reported, and, with
simulated feedback, each test run the agent saw is set against a real re-run of the same
command on the same workspace (:class:`~sweworld.bench.e2e_agents.ShadowedExecutor`).

The agents are in :mod:`sweworld.bench.e2e_agents`: ``--agent scripted`` (the test-driven
candidate agent, the default) or ``--agent openai:URL#MODEL`` (any OpenAI-compatible chat
endpoint). One row per (task, feedback) episode in ``OUT/rows.jsonl``; a run resumes (an
episode that ended in error, or a task whose candidates could not be graded, is tried again).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "load_task_rows", "run", "write_report"]

TITLE = "An agent on simulated vs real feedback, graded for real (sweworld bench e2e)"
FEEDBACKS = ("simulated", "real")


def add_arguments(parser: Any) -> None:
    """The options of ``sweworld bench e2e``."""
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument("--fresh", action="store_true", help="discard the rows of earlier runs")
    parser.add_argument(
        "--tasks", nargs="+", default=None, help="task row files (JSONL; default: the toy tasks)"
    )
    parser.add_argument("--ids", default="", help="comma-separated instance ids to keep")
    parser.add_argument("--limit", type=int, default=0, help="tasks per --tasks file (0: all)")
    parser.add_argument(
        "--agent",
        default="scripted",
        help="scripted (the test-driven candidate agent) or openai:URL#MODEL",
    )
    parser.add_argument(
        "--world-model", default="embedded", help="SWT model spec of the simulated feedback"
    )
    parser.add_argument("--feedback", default="simulated,real", help="feedbacks to run")
    parser.add_argument("--mutants", type=int, default=2, help="mutants of the gold patch")
    parser.add_argument(
        "--candidates", default="", help="JSONL of extra candidates {instance_id, patch}"
    )
    parser.add_argument("--seed", type=int, default=0, help="candidate order, simulator seed")
    parser.add_argument("--max-steps", type=int, default=40, help="agent steps per episode")
    parser.add_argument("--max-tokens", type=int, default=1024, help="tokens per agent answer")
    parser.add_argument("--step-timeout", type=float, default=300.0, help="seconds per step")
    parser.add_argument(
        "--grade-timeout", type=float, default=900.0, help="seconds for one real grading"
    )
    parser.add_argument(
        "--no-shadow",
        action="store_true",
        help="do not re-run the simulated test commands for real",
    )


def load_task_rows(
    paths: Sequence[str], ids: Sequence[str], limit: int, skip: Any
) -> tuple[list[Any], list[str]]:
    """The tasks of ``paths`` (``limit`` per file after the ``ids`` filter) and the files;
    unreadable rows are counted with ``skip(reason)``."""
    from sweworld.env.stepping import coerce_task

    tasks, seen = [], set()
    for path in paths:
        taken = 0
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read --tasks {path}: {exc}") from None
        for line in lines:
            if not line.strip() or (limit and taken >= limit):
                continue
            try:
                task = coerce_task(json.loads(line))
            except (ValueError, TypeError):
                skip("bad task row (not JSON, or not a task)")
                continue
            if (ids and task.instance_id not in ids) or task.instance_id in seen:
                continue
            if not task.patch and not task.FAIL_TO_PASS:
                skip("task without a patch or FAIL_TO_PASS tests")
                continue
            seen.add(task.instance_id)
            tasks.append(task)
            taken += 1
    return tasks, list(paths)


def load_candidates(path: str) -> dict[str, list[str]]:
    """``instance_id -> [patch, ...]`` from a JSONL file (rows without both are ignored)."""
    out: dict[str, list[str]] = {}
    if not path:
        return out
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("instance_id") and row.get("patch"):
            out.setdefault(str(row["instance_id"]), []).append(str(row["patch"]))
    return out


def run(args: Any) -> int:
    """``sweworld bench e2e``: both feedbacks per task, rows resumable in ``--out``, the report
    written as rows come; 0 on success, 2 for bad arguments, 1 when no episode finished."""
    from sweworld.bench.e2e_agents import candidate_pool, pool_row, run_episode, usable_pool
    from sweworld.bench.output import BenchOutput, ResumeMismatch

    if not args.tasks:
        from sweworld.tasks.toy import toy_tasks_path

        args.tasks = [str(toy_tasks_path())]
    feedbacks = [f for f in args.feedback.split(",") if f]
    scripted = args.agent == "scripted"
    if not feedbacks or any(f not in FEEDBACKS for f in feedbacks):
        print(f"sweworld bench e2e: --feedback takes simulated and/or real, not {args.feedback!r}")
        return 2
    if not scripted and not args.agent.startswith(("openai:", "vllm:")):
        print(f"sweworld bench e2e: --agent is scripted or openai:URL#MODEL, not {args.agent!r}")
        return 2
    try:
        from sweworld.models import check_lm_spec

        check_lm_spec(args.world_model)
        if not scripted:
            check_lm_spec(args.agent)
        extra = load_candidates(args.candidates)
    except (ValueError, OSError) as exc:
        print(f"sweworld bench e2e: {exc}")
        return 2
    settings = {"agent": args.agent, "world_model": args.world_model, "mutants": args.mutants,
                "candidates": args.candidates, "seed": args.seed, "max_steps": args.max_steps,
                "max_tokens": args.max_tokens, "shadow": not args.no_shadow,
                "step_timeout": args.step_timeout}  # fmt: skip
    try:
        out = BenchOutput(args.out, "e2e", title=TITLE, description=DESCRIPTION,
                          settings=settings, data=args.tasks, fresh=args.fresh,
                          model=f"world model {args.world_model}; agent {args.agent}")  # fmt: skip
    except ResumeMismatch as exc:
        print(f"sweworld bench e2e: {exc}")
        return 2
    ids = [i for i in args.ids.split(",") if i]
    try:
        tasks, files = load_task_rows(args.tasks, ids, args.limit, out.skip)
    except ValueError as exc:
        print(f"sweworld bench e2e: {exc}")
        return 2
    if not tasks:
        print("sweworld bench e2e: no task to run (see skipped in report.json)")
        out.write([], {}, final=True)
        return 2
    by_repo = dict(Counter(t.repo for t in tasks))
    out.set("tasks", {"files": files, "ids": [t.instance_id for t in tasks], "by_repo": by_repo})
    pools = {
        t.instance_id: candidate_pool(
            t, mutants=args.mutants, seed=args.seed, extra=extra.get(t.instance_id, ())
        )
        for t in tasks
    }
    ctx = _context(args, pools if scripted else None)
    out.set("agent", ctx["agent"].name)
    done = out.done()
    print(
        f"{len(tasks)} tasks, feedback {', '.join(feedbacks)}, agent: {ctx['agent'].name}; "
        f"{len(done)} rows done before",
        file=sys.stderr,
    )
    try:
        for task in out.progress(tasks, total=len(tasks), desc="e2e tasks"):
            iid = task.instance_id
            if scripted and not usable_pool(done.get(f"pool\x1f{iid}")):
                if not pools[iid]:
                    out.skip("task without candidates (no gold patch, none in --candidates)")
                    continue
                pool = pool_row(task, pools[iid], ctx)
                if pool["error"]:  # not stored: a later run tries again
                    print(f"{iid}: the candidates cannot be graded: {pool['error']}",
                          file=sys.stderr)  # fmt: skip
                    out.skip(f"task environment failed ({pool['error'].split(':')[0]})")
                    continue
                out.add_row(f"pool\x1f{iid}", pool)
            for feedback in ("real", "simulated"):
                key = f"{feedback}\x1f{iid}"
                if feedback not in feedbacks or done.get(key, {}).get("status") == "ok":
                    continue
                row = run_episode(task, feedback, ctx)
                if row.get("status") == "error":
                    print(f"{iid} ({feedback} feedback): {row.get('error')}", file=sys.stderr)
                out.add_row(key, row)
                write_report(out, tasks, feedbacks, scripted, final=False)
    finally:
        _close(ctx)
    rows = write_report(out, tasks, feedbacks, scripted, final=True)
    episodes = [r for r in rows if r.get("feedback")]
    return 0 if any(r.get("status") == "ok" for r in episodes) else 1


def _context(args: Any, pools: dict[str, list[Any]] | None) -> dict[str, Any]:
    """What the episodes share: the agent, the config, one session manager, the rewarder
    (real grading), the real executor and the simulated one (built on first use)."""
    from sweworld.bench.e2e_agents import EndpointAgent, ScriptedAgents, ShadowedExecutor
    from sweworld.env.config import EpisodeConfig
    from sweworld.env.rewards import EpisodeRewarder
    from sweworld.env.stepping import build_executor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.registry import make_executor

    config = EpisodeConfig(executor="simulated", model=args.world_model, reward="real",
                           max_steps=args.max_steps, step_timeout_s=args.step_timeout,
                           seed=args.seed, max_wall_s=None)  # fmt: skip
    manager = SessionManager()
    built: dict[str, Any] = {}

    def simulated_executor() -> Any:
        if "sim" not in built:
            sim = build_executor(config)
            if not args.no_shadow:
                sim = ShadowedExecutor(sim, make_executor("local", timeout=args.step_timeout))
            built["sim"] = sim
        return built["sim"]

    agent: Any = ScriptedAgents(pools) if pools is not None else None
    if agent is None:
        agent = EndpointAgent(args.agent, max_tokens=args.max_tokens)
    return {
        "agent": agent,
        "config": config,
        "manager": manager,
        "rewarder": EpisodeRewarder(config, manager=manager, real_timeout_s=args.grade_timeout),
        "real_executor": make_executor("local", timeout=args.step_timeout),
        "simulated_executor": simulated_executor,
        "built": built,
        "seed": args.seed,
        "grade_timeout": args.grade_timeout,
    }


def _close(ctx: dict[str, Any]) -> None:
    closers = [ctx["agent"], ctx["rewarder"], *ctx["built"].values()]
    for thing in closers:
        inner = getattr(thing, "simulated", None)
        for obj in (thing, inner):
            close = getattr(obj, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:  # closing must not hide the run's result
                    print(f"sweworld bench e2e: closing {obj!r} failed: {exc}", file=sys.stderr)
    ctx["manager"].close_all()


def median(values: Sequence[float]) -> float | None:
    """The median, None for no values."""
    return statistics.median(values) if values else None


def mean(values: Sequence[float]) -> float | None:
    """The mean, None for no values."""
    return sum(values) / len(values) if values else None


# ---------------------------------------------------------------------- the report

DESCRIPTION = (
    "The same agent runs each task twice: with simulated feedback (its execution commands "
    "answered by the SWT world model) and with real feedback (run by the local executor). "
    "Both final patches are graded for real: the task's FAIL_TO_PASS and PASS_TO_PASS tests "
    "run in the sandbox, never judged by a model. With the scripted test-driven candidate "
    "agent the only thing that differs between the two runs is what the test runs say, so "
    "the gap between the two resolved rates measures the simulator, not an agent. Each test "
    "run seen with simulated feedback is also re-run for real on the same workspace (after "
    "the agent got the simulated answer) to count how often the agent's view was wrong. "
    "Caveats: few tasks; the candidate pool is the gold patch plus one-token mutants of it "
    "(some mutants are equivalent and really resolve: the pool figures say how many); the "
    "scripted agent is given the task's tests (it applies the test patch, which the grader "
    "resets), as a test-driven agent would write its own."
)


def _split_rows(done: dict[str, dict[str, Any]], ids: set[str]) -> tuple[dict, dict]:
    pools, episodes = {}, {}
    for key, row in done.items():
        kind, _, iid = key.partition("\x1f")
        if iid not in ids:
            continue
        if kind == "pool":
            pools[iid] = row
        else:
            episodes[(kind, iid)] = row
    return pools, episodes


def _cols(names: str) -> list[str]:
    """Column titles from one ``|``-separated string."""
    return names.split("|")


def _rate(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def _resolved_figures(
    agent: str, feedbacks: Sequence[str], episodes: dict, pools: dict, order: list[str]
) -> tuple[list[Any], dict[str, Any]]:
    from sweworld.bench.output import figure

    table, summary = [], {}
    for fb in ("real", "simulated"):
        if fb not in feedbacks:
            continue
        rows = [episodes[(fb, i)] for i in order if (fb, i) in episodes]
        ok = [r for r in rows if r.get("status") == "ok"]
        resolved = [bool(r.get("resolved")) for r in ok]
        summary[fb] = {
            "episodes": len(rows),
            "errors": len(rows) - len(ok),
            "resolved": sum(resolved),
            "rate": _rate(resolved),
        }
        table.append(
            [
                agent,
                f"{fb} feedback",
                *(summary[fb][k] for k in ("episodes", "errors", "resolved", "rate")),
            ]
        )
    both = [
        i
        for i in order
        if all(episodes.get((fb, i), {}).get("status") == "ok" for fb in ("real", "simulated"))
    ]
    real = [bool(episodes[("real", i)].get("resolved")) for i in both]
    sim = [bool(episodes[("simulated", i)].get("resolved")) for i in both]
    gap = (_rate(real) - _rate(sim)) if both else None  # type: ignore[operator]
    summary["paired"] = {
        "tasks": len(both),
        "real": _rate(real),
        "simulated": _rate(sim),
        "gap": gap,
    }
    table.append(
        ["sim-to-real gap: real − simulated (tasks with both)", "", len(both), "", "", gap]
    )
    floors = {}
    pooled = [pools[i]["candidates"] for i in order if i in pools and pools[i]["candidates"]]
    if pooled:
        floors = {
            "floor: a random candidate of the pool": mean(
                [_rate([bool(c["resolved"]) for c in p]) or 0.0 for p in pooled]
            ),
            "floor: the first candidate, untested (ignores feedback)": _rate(
                [bool(p[0]["resolved"]) for p in pooled]
            ),
            "floor: the last candidate (a simulator that never says pass)": _rate(
                [bool(p[-1]["resolved"]) for p in pooled]
            ),
            "ceiling: oracle (some candidate resolves)": _rate(
                [any(c["resolved"] for c in p) for p in pooled]
            ),
        }
        for name, value in floors.items():
            table.append([name, "none", len(pooled), "", "", value])
    summary["floors"] = floors
    fig = figure(
        "Resolved rate (real grade) with simulated vs real feedback",
        ["agent / policy", "feedback", "episodes", "errors", "resolved", "resolved rate"],
        table,
        "Resolved: the final patch passes every FAIL_TO_PASS and PASS_TO_PASS test, run for "
        "real. The rate is over the episodes that finished (errors left out). The gap is on "
        "the tasks where both episodes finished: 0 means the simulator cost the agent "
        "nothing. Floors (candidate agent): a random candidate, the first one in the "
        "agent's order submitted without testing, the last one (what the agent submits "
        "when no run reads as passing); the oracle picks a resolving candidate if any.",
        plot="resolved.png",
    )
    agreement = Counter(
        ("both" if r and s else "only real" if r else "only sim" if s else "neither")
        for r, s in zip(real, sim, strict=True)
    )
    fig2 = figure(
        "Agreement per task",
        _cols(
            "tasks with both|both resolved|only with real feedback|only with simulated feedback|"
            "neither|same outcome"
        ),
        [
            [
                len(both),
                *(agreement[k] for k in ("both", "only real", "only sim", "neither")),
                _rate([r == s for r, s in zip(real, sim, strict=True)]),
            ]
        ],
        "Per task, whether the patch of each run resolved it (real grade).",
    )
    summary["agreement"] = dict(agreement)
    return [fig, fig2], summary


def _per_task_figure(order: list[str], episodes: dict, pools: dict) -> Any:
    from sweworld.bench.output import figure

    rows = []
    for iid in order:
        pool = pools.get(iid, {}).get("candidates") or []
        cells: list[Any] = [
            iid,
            f"{sum(bool(c['resolved']) for c in pool)}/{len(pool)}" if pool else None,
        ]
        for fb in ("real", "simulated"):
            row = episodes.get((fb, iid), {})
            what = row.get("chosen") or row.get("reason")
            cells += [(row.get("error") and "error") or what, row.get("resolved")]
        rows.append(cells)
    return figure(
        "Per task",
        _cols(
            "task|pool: resolving/size|real feedback: submitted|resolved|"
            "simulated feedback: submitted|resolved"
        ),
        rows,
        "Submitted: the candidate the agent chose (or how the episode ended). Pool: how many "
        "of its candidates really resolve the task.",
    )


def _effort_figures(feedbacks: Sequence[str], episodes: dict) -> tuple[list[Any], dict]:
    from sweworld.bench.output import figure

    effort, answers, summary = [], [], {}
    sources = sorted({s for r in episodes.values() for s in (r.get("sources") or {})})
    for fb in feedbacks:
        rows = [r for (f, _), r in episodes.items() if f == fb]
        steps = [r.get("steps", 0) for r in rows]
        walls = [r.get("wall_s", 0.0) for r in rows]
        shadow_s = sum(r.get("shadow_s", 0.0) for r in rows)
        effort.append(
            [
                f"{fb} feedback",
                len(rows),
                mean(steps),
                median(steps),
                mean(walls),
                median(walls),
                max(walls, default=None),
                shadow_s,
            ]
        )
        counts = Counter()
        for r in rows:
            counts.update(r.get("sources") or {})
        totals = [sum(r.get(k, 0) for r in rows) for k in ("timed_out", "executor_errors")]
        ended = sum(r.get("status") == "error" for r in rows)
        answers.append(
            [f"{fb} feedback", sum(counts.values()), *(counts[s] for s in sources), *totals, ended]
        )
        summary[fb] = {
            "mean_steps": mean(steps),
            "mean_wall_s": mean(walls),
            "sources": dict(counts),
        }
    return [
        figure(
            "Steps and wall time per episode",
            _cols(
                "feedback|episodes|mean steps|median steps|mean wall s|median wall s|max wall s|"
                "real re-runs s (not in wall)"
            ),
            effort,
            "Wall time from the episode's start to its real grade, without the real re-runs "
            "of simulated test commands (the last column).",
        ),
        figure(
            "Who answered the execution commands; fallbacks and errors",
            [
                "feedback",
                "execution calls",
                *sources,
                *_cols("timed out|executor errors|episodes ended in error"),
            ],
            answers,
            "Execution calls by answer source: for the simulator, exact (computed without a "
            "model), model, fallback (no valid prediction: a conservative answer claiming no "
            "result), hint, error; real runs: local. File operations run for real in every "
            "world and are not counted.",
        ),
    ], summary


def _view_figure(episodes: dict) -> tuple[Any, dict[str, Any]]:
    from sweworld.bench.output import figure

    runs = [
        t for (f, _), r in episodes.items() if f == "simulated" for t in r.get("test_runs") or []
    ]
    compared = [t for t in runs if t.get("real") is not None]
    cells = Counter((t["seen"] == "pass", t["real"] == "pass") for t in compared)
    agree = [(t["seen"] == "pass") == (t["real"] == "pass") for t in compared]
    real_pass = _rate([t["real"] == "pass" for t in compared])
    floor = max(real_pass, 1 - real_pass) if real_pass is not None else None
    exit_agree = _rate([t.get("seen_exit_code") == t.get("real_exit_code") for t in compared])
    per_test = [
        t["agree"]["tests"] for t in compared if (t.get("agree") or {}).get("tests") is not None
    ]
    no_result = sum(t["seen"] == "no_result" for t in compared)
    summary = {
        "test_runs": len(runs),
        "compared": len(compared),
        "verdict_agreement": _rate(agree),
        "false_pass": cells[(True, False)],
        "false_fail": cells[(False, True)],
        "no_result": no_result,
    }
    fig = figure(
        "The agent's view of its test runs vs a real re-run (simulated feedback)",
        _cols(
            "test runs compared|seen pass, really pass|seen pass, really failing|"
            "seen not passing, really pass|both not passing|seen: no result|verdict agreement|"
            "floor: a constant verdict|exit-code agreement|per-test status agreement"
        ),
        [
            [
                len(compared),
                *(cells[k] for k in ((True, True), (True, False), (False, True), (False, False))),
                no_result,
                _rate(agree),
                floor,
                exit_agree,
                mean(per_test),
            ]
        ],
        "Every test command run with simulated feedback is run again for real on the same "
        f"workspace ({len(runs) - len(compared)} of {len(runs)} could not be compared). A "
        "run reads as passing when it exits 0 with none of the task's tests reported "
        "failing; 'no result': the simulator declined to answer (counted as not passing). "
        "Floor: the agreement of always answering the more common real verdict. With real "
        "feedback the agent's view is reality by construction.",
    )
    return fig, summary


def write_report(
    out: Any, tasks: Sequence[Any], feedbacks: Sequence[str], scripted: bool, *, final: bool
) -> list[dict[str, Any]]:
    """Figures and summary from the rows so far into ``report.json`` / ``report.md`` (and
    the resolved-rate plot when ``final``); returns the rows of these tasks."""
    from sweworld.bench.plots import bar_groups

    order = [t.instance_id for t in tasks]
    pools, episodes = _split_rows(out.done(), set(order))
    agent = out.report.data.get("agent") or "agent"
    figures, summary = _resolved_figures(agent, feedbacks, episodes, pools, order)
    figures.append(_per_task_figure(order, episodes, pools))
    effort, summary["effort"] = _effort_figures(feedbacks, episodes)
    figures += effort
    if "simulated" in feedbacks:
        view, summary["view"] = _view_figure(episodes)
        figures.append(view)
    errors = Counter(str(r.get("error"))[:200] for r in episodes.values() if r.get("error"))
    summary["errors"] = dict(errors)
    summary["scripted"] = scripted
    if final:
        bars = {f"{fb} feedback": summary[fb]["rate"] for fb in feedbacks if fb in summary}
        for name, value in (summary.get("floors") or {}).items():
            bars[name.split(":")[0] + ": " + name.split(":")[1].split("(")[0].strip()] = value
        path = bar_groups(
            {"resolved rate": bars},
            out.plot_path("resolved.png"),
            title="Resolved rate (real grade)",
            ylabel="resolved rate",
        )
        if path is None:
            figures[0].pop("plot", None)
    else:
        figures[0].pop("plot", None)
    out.write(figures, summary, final=final)
    return [*pools.values(), *episodes.values()]
