"""Collect mode: a policy runs against a real executor; every step becomes training data.

For each task a session is opened whose executor is a
:class:`~sweworld.data.record.RecordingExecutor` around the real executor (``local`` or
``docker``, by the registry's names): every execution call is answered for real and
recorded as an :class:`~sweworld.data.schema.SWTRecord` (``source="collect"``,
``state_source="live"``), with the simulator's prediction beside the truth when
``predict`` names an SWT model (the ``collect --executor hybrid`` of the data pipeline:
truth and prediction of the same command on the same state, in one record). The policy
(:mod:`sweworld.data.policies`) acts until it stops, submits or reaches ``max_steps``;
the whole run is one :class:`~sweworld.data.schema.Trajectory` line in
``<out>/trajectories.jsonl`` (every action and observation), and its final patch
(``session.get_patch()``) one :class:`~sweworld.data.schema.SWRRecord` labelled by the
**real** reward (:func:`sweworld.reward.real.real_reward`: the task's tests run for real
and graded by the shared grader; ``label_source="real-run"``).

A task is one unit of work: its records are written together when it ends, then it is
marked done, so a run killed at any point loses at most the tasks in progress and the same
command again resumes. A policy that raises, an executor that fails (an exception, an
environment that does not build, a command it could not run) or a session that cannot
open skips the task with the reason (``summary.json``); the other tasks go on.

    sweworld data collect --tasks toy --policy scripted:actions.txt --out D
    sweworld data collect --tasks T.jsonl --ids A B --policy openai:URL#MODEL \\
        --predict replay:answers.jsonl --mode oracle --max-steps 40 --workers 2 --out D
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweworld.data.collector import Collector, CollectStats, Guard
from sweworld.data.policies import Policy, make_policy_factory
from sweworld.data.schema import DEFAULT_HELDOUT_REPOS
from sweworld.data.store import RecordStore, finalize

__all__ = [
    "CollectStats",
    "add_arguments",
    "collect",
    "load_collect_tasks",
    "run",
]


def collect(
    tasks: Iterable[Any],
    policy_factory: Callable[[], Policy] | str,
    *,
    out: str | Path,
    executor: Any = "local",
    predict: str | None = None,
    mode: str = "oracle",
    max_steps: int = 30,
    step_timeout: float | None = None,
    workers: int = 1,
    label: bool = True,
    label_timeout: float = 1800.0,
    manager: Any = None,
    heldout: Iterable[str] = DEFAULT_HELDOUT_REPOS,
    finalize_out: bool = True,
    echo: Any = None,
) -> CollectStats:
    """Run a policy on each task against a real executor and record everything under ``out``.

    Args:
        tasks: :class:`~sweworld.tasks.Task` objects.
        policy_factory: a callable giving a fresh policy per task, or a policy spec
            (``scripted:FILE``, ``trajectory:FILE[#ID]``, ``openai:URL#MODEL``).
        out: the dataset folder (records, ``trajectories.jsonl``, ``summary.json``).
        executor: the real executor: a registry name (``local``, ``docker``) or an instance.
        predict: an SWT model spec (``embedded``, ``replay:FILE``, ``openai:URL#MODEL``...):
            its prediction is recorded beside the truth of every call; None: none.
        mode: the predictor's mode (``blind`` or ``oracle``).
        max_steps: most policy actions per task.
        step_timeout: seconds a command may run (the real executor's and the sandbox's
            limit, and the predictor's step deadline); None: their defaults.
        workers: tasks run at once (threads; one session each).
        label: label each final patch with the real reward (an SWR record).
        label_timeout: seconds the real reward's test run may take.
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to use (else one is
            made and closed).
        finalize_out: build the split datasets and ``summary.json`` at the end.
        echo: a text stream for one line per task (None: quiet).
    """
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.session import SessionConfig
    from sweworld.world import check_lm, executor_from_spec

    if max_steps < 1 or workers < 1:
        raise ValueError("max_steps and workers must be at least 1")
    if step_timeout is not None and not step_timeout > 0:
        raise ValueError(f"step_timeout must be positive, not {step_timeout}")
    if isinstance(policy_factory, str):
        policy_factory = make_policy_factory(policy_factory)
    out = Path(out)
    started = time.perf_counter()
    timeout_kw = {"timeout": step_timeout} if step_timeout is not None else {}
    truth = executor_from_spec(executor, **timeout_kw) if isinstance(executor, str) else executor
    predictor = None
    if predict:
        check_lm(predict)
        sim_kw = {"step_timeout": step_timeout} if step_timeout is not None else {}
        predictor = executor_from_spec("simulated", lm=predict, mode=mode, **sim_kw)
    session_config = None
    if step_timeout is not None:
        from sweworld.sandbox.limits import SandboxLimits

        session_config = SessionConfig(limits=SandboxLimits(timeout=step_timeout))
    own = manager is None
    manager = manager or SessionManager()
    store = RecordStore(out)
    collector = Collector(
        store,
        out,
        policy_factory=policy_factory,
        guard=Guard(truth),
        predictor=predictor,
        predict=predict,
        manager=manager,
        session_config=session_config,
        max_steps=int(max_steps),
        label=label,
        # a fresh executor with the label deadline for the real labels (built by the world)
        label_executor=(
            executor_from_spec(executor, timeout=label_timeout)
            if executor in ("local", "docker")
            else truth
        ),
        label_timeout=label_timeout,
        executor_name=executor if isinstance(executor, str) else getattr(truth, "name", "?"),
        echo=echo,
    )
    for error in getattr(policy_factory, "load_errors", ()):
        collector.skip("collect:policy-input", error)
    task_list = list(tasks)
    collector.stats.tasks = len(task_list)
    try:
        if workers == 1:
            for task in task_list:
                collector.run_task(task)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(collector.run_task, task_list))
    finally:
        store.close()
        if own:
            manager.close_all()
    stats = collector.stats
    stats.wall_s = time.perf_counter() - started
    if finalize_out:
        finalize(out, heldout=heldout, extra_summary={"collect": stats.to_dict()})
    return stats


# ------------------------------------------------------------------------------------------
# Tasks and the command line
# ------------------------------------------------------------------------------------------


def load_collect_tasks(
    source: str, ids: Iterable[str] | None = None, *, store: RecordStore | None = None
) -> list[Any]:
    """The tasks of ``source`` (``toy`` or a task file), those of ``ids`` only when given.

    In a JSON Lines file a line that is not a valid task, or repeats an instance id, is
    skipped with the reason (in ``store`` when given); other formats load whole
    (:func:`~sweworld.tasks.load_tasks`). An id not found is skipped the same way.
    """
    from sweworld.tasks import Task, load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    path = Path(toy_tasks_path() if source == "toy" else source)

    def skip(unit: str, reason: str) -> None:
        if store is not None:
            store.skip(unit, reason)
        print(f"sweworld: skipped {unit}: {reason}", file=sys.stderr)

    tasks: list[Any] = []
    if path.name.endswith((".jsonl", ".jsonl.gz")) and path.is_file():
        from sweworld.tasks.loaders import TaskLoadError, iter_json_lines

        rows: list[tuple[str, Any]] = []
        try:
            rows = list(iter_json_lines(path))
        except TaskLoadError:  # a bad line stops the reader: read line by line instead
            rows = []
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append((f"{path} line {number}", json.loads(line)))
                except (ValueError, RecursionError) as exc:
                    skip(f"task:{path} line {number}", f"bad task row: invalid JSON ({exc})")
        for where, row in rows:
            try:
                tasks.append(Task.from_row(row, where=where))
            except (ValueError, TypeError, KeyError) as exc:
                skip(f"task:{where}", f"bad task row: {exc}")
    else:
        tasks = list(load_tasks(str(path)))
    unique: dict[str, Any] = {}
    for task in tasks:
        if task.instance_id in unique:
            skip(f"task:{task.instance_id}", "bad task row: duplicate instance id")
            continue
        unique[task.instance_id] = task
    if ids is None:
        return list(unique.values())
    chosen = []
    for instance in ids:
        if instance in unique:
            chosen.append(unique[instance])
        else:
            skip(f"task:{instance}", f"unknown instance: not in {path}")
    return chosen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld data collect``."""
    parser.add_argument("--tasks", required=True, help="task file, or 'toy' (the toy tasks)")
    parser.add_argument("--ids", nargs="+", default=None, help="only these instance ids")
    parser.add_argument(
        "--policy",
        required=True,
        help="scripted:FILE (JSON list, JSON Lines or one command per line), "
        "trajectory:FILE[#INSTANCE] (trajectories.jsonl lines) or openai:URL#MODEL",
    )
    parser.add_argument(
        "--executor", default="local", help="the real executor: local (default) or docker"
    )
    parser.add_argument(
        "--predict",
        nargs="?",
        const="embedded",
        default=None,
        metavar="MODEL",
        help="record the simulator's prediction beside the truth (SWT model spec; "
        "default when given without one: embedded)",
    )
    parser.add_argument(
        "--mode", default="oracle", choices=["oracle", "blind"], help="the predictor's mode"
    )
    parser.add_argument("--max-steps", type=int, default=30, help="most actions per task")
    parser.add_argument(
        "--step-timeout", type=float, default=None, help="seconds a command may run"
    )
    parser.add_argument("--workers", type=int, default=1, help="tasks run at once")
    parser.add_argument(
        "--agent-max-tokens",
        type=int,
        default=400_000,
        help="openai policy: most prompt + completion tokens per task",
    )
    parser.add_argument(
        "--no-label", action="store_true", help="do not label final patches with the real reward"
    )
    parser.add_argument("--out", required=True, help="output dataset folder")


def run(args: argparse.Namespace) -> int:
    """``sweworld data collect``: collect, finalize, print the counts."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.policy.startswith(("openai:", "vllm:")):
        factory = make_policy_factory(
            args.policy, max_calls=args.max_steps, max_total_tokens=args.agent_max_tokens
        )
    else:
        factory = make_policy_factory(args.policy)
    with RecordStore(out) as store:
        tasks = load_collect_tasks(args.tasks, args.ids, store=store)
    if not tasks:
        print("sweworld: error: no task to collect", file=sys.stderr)
        return 2
    stats = collect(
        tasks,
        factory,
        out=out,
        executor=args.executor,
        predict=args.predict,
        mode=args.mode,
        max_steps=args.max_steps,
        step_timeout=args.step_timeout,
        workers=args.workers,
        label=not args.no_label,
        echo=sys.stderr,
    )
    summary = json.loads((out / "summary.json").read_text())
    print(
        json.dumps(
            {
                "collect": stats.to_dict(),
                "swt": summary.get("swt"),
                "swr": summary.get("swr"),
                "skipped": summary.get("skipped"),
            },
            indent=2,
        )
    )
    return 0
