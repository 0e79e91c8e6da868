"""An agent solves tasks on simulated and on real feedback; every final patch is graded for real.

SWE-World's own protocol: the same agent runs each task twice, once with its execution
commands answered by the simulated world (``--world-model``: by default the outcome world,
the project's default, where the outcome model decides and the renderer writes; or an SWT
language-model spec for the LM route) and once with them run for real (the local
executor); both final patches are graded by the real reward path (the task's FAIL_TO_PASS
and PASS_TO_PASS tests run in the sandbox), never by a model. The resolved rates, their
difference (the sim-to-real gap) and ratio, the agreement per task, steps, wall time, the
simulator's fallbacks and errors are reported, and, with simulated feedback, each test run
the agent saw is set against a real re-run of the same command on the same workspace
(:class:`~sweworld.bench.e2e_agents.ShadowedExecutor`).

The agents are in :mod:`sweworld.bench.e2e_agents`: ``--agent scripted`` (the test-driven
candidate agent, the default) or ``--agent openai:URL#MODEL`` (any OpenAI-compatible chat
endpoint). One row per (task, feedback) episode in ``OUT/rows.jsonl``; a run resumes (an
episode that ended in error, or a task whose candidates could not be graded, is tried again).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweworld.bench.e2e_report import DESCRIPTION, write_report

__all__ = [
    "DESCRIPTION",
    "add_arguments",
    "is_outcome_world",
    "load_task_rows",
    "run",
    "write_report",
]

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
        "--world-model",
        default="outcome",
        help="the world of the simulated feedback: outcome (the default world: the outcome "
        "model decides, the renderer writes), outcome:oracle, outcome:PATH, or an SWT "
        "language-model spec for the LM route (embedded, openai:URL#name, replay:FILE, ...)",
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
        "--judge",
        choices=("verdict", "none"),
        default="verdict",
        help="the outcome world's judge of the task's graded tests: verdict (the default "
        "world: an SWR-rewarded world asks its shipped verdict, so a simulated run of the "
        "graded tests agrees with the reward; oracle mode only) or none (the outcome model "
        "alone); the LM route has none",
    )
    parser.add_argument(
        "--no-shadow",
        action="store_true",
        help="do not re-run the simulated test commands for real",
    )


def is_outcome_world(spec: str) -> bool:
    """Whether ``--world-model`` names the outcome world (``outcome``, ``outcome:oracle``,
    ``outcome:PATH``) rather than an SWT language model."""
    return spec.partition(":")[0] == "outcome"


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
    from sweworld.bench.e2e_agents import pool_row, run_episode, usable_pool
    from sweworld.bench.e2e_candidates import candidate_pool
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
        from sweworld.world import check_lm

        if not is_outcome_world(args.world_model):
            check_lm(args.world_model)
        if not scripted:
            check_lm(args.agent)
        extra = load_candidates(args.candidates)
    except (ValueError, OSError) as exc:
        print(f"sweworld bench e2e: {exc}")
        return 2
    settings = {"agent": args.agent, "world_model": args.world_model, "mutants": args.mutants,
                "candidates": args.candidates, "seed": args.seed, "max_steps": args.max_steps,
                "max_tokens": args.max_tokens, "shadow": not args.no_shadow,
                "step_timeout": args.step_timeout,
                "judge": args.judge if is_outcome_world(args.world_model) else "none"}  # fmt: skip
    if is_outcome_world(args.world_model):
        from sweworld.bench.swt_outcome import model_identity

        settings["world_model_file"] = model_identity(args.world_model)
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
    from sweworld.sandbox.manager import SessionManager
    from sweworld.world import World, WorldConfig, build_executor, executor_from_spec

    outcome = is_outcome_world(args.world_model)
    config = EpisodeConfig(executor=args.world_model if outcome else "simulated",
                           model="embedded" if outcome else args.world_model, reward="real",
                           max_steps=args.max_steps, step_timeout_s=args.step_timeout,
                           seed=args.seed, max_wall_s=None)  # fmt: skip
    manager = SessionManager()
    built: dict[str, Any] = {}

    def simulated_executor() -> Any:
        if "sim" not in built:
            if outcome and args.judge == "verdict":  # the default world: reward swr, judged
                world_config = WorldConfig.from_episode(config).replace(reward="swr")
                built["world"] = World(world_config, manager=manager)
                sim = built["world"].executor
            else:
                sim = build_executor(WorldConfig.from_episode(config))
            if not args.no_shadow:
                real = executor_from_spec("local", timeout=args.step_timeout)
                sim = ShadowedExecutor(sim, real)
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
        "real_executor": executor_from_spec("local", timeout=args.step_timeout),
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
