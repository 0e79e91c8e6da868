"""Agent-style reproductions of a factory task, run for real on the task's states.

An agent fixing a bug usually writes a reproduction into the repository first, runs it
(it fails), edits the library and runs it again (it passes, or not). Those runs are most
of the failing steps of real agent trajectories, and a factory that only runs the
library's own tests never makes them. Here the failing test is copied into
``reproduce_issue.py`` at the repository root, as an agent writes one: the test module's
imports and helpers, the failing test (a test class keeps its other methods that are not
tests), the module's other tests left out, and a ``__main__`` block that runs it when the
file is run as a script. On each state of the task (buggy, fixed, each right fix written
otherwise than the gold patch, the first wrong fix) the file is run through pytest and as
a script, for real; every run is one SWT record whose state (diff) holds the file,
``meta.phase`` the state's name and ``meta.reproduction`` true. Agents' own fixes are
mostly right, and a task's several wrong fixes against one gold patch taught the model
that an edited state fails: the right fixes written otherwise (``alt``) are states too.

:func:`reproduction_source` is pure (the file's text from the test module's);
:func:`task_states` reads the states of a task from its recorded transitions, and
:func:`augment_part` adds reproductions to a factory part built before they existed
(``sweworld data factory-reproductions``).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweworld.argtypes import at_least, bounded
from sweworld.data.factory.transitions import REPRO_FILE, reproduction_commands
from sweworld.data.schema import parse_meta

__all__ = [
    "REPRO_FILE",
    "add_arguments",
    "augment_part",
    "augment_tasks",
    "part_records",
    "part_rows",
    "reproduction_commands",
    "reproduction_source",
    "run",
    "source_patch",
    "task_states",
]

log = logging.getLogger(__name__)

#: test modules larger than this are not copied (a reproduction is a short file)
MAX_TEST_SOURCE = 400_000


def _is_test_name(name: str) -> bool:
    return name.startswith("test") or name.startswith("Test")


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first line (decorators included) and end line (exclusive) of a statement."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return start - 1, node.end_lineno or node.lineno


def _has_relative_import(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def reproduction_source(test_source: str, test_id: str) -> str | None:
    """The text of ``reproduce_issue.py`` for the failing test ``test_id``
    (``path::func``, ``path::Class::method``, parameters in brackets allowed) copied from
    its module's text; None when the module does not parse, is too large, imports
    relatively (it cannot run from the root), or does not define the test at module or
    class level."""
    if not test_source or len(test_source) > MAX_TEST_SOURCE:
        return None
    parts = test_id.split("::")[1:]
    if not parts or len(parts) > 2:
        return None
    parts[-1] = parts[-1].split("[", 1)[0]
    try:
        tree = ast.parse(test_source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if _has_relative_import(tree):
        return None
    # lines as the parser numbers them (str.splitlines would also split at form feeds)
    lines = [line + "\n" for line in test_source.split("\n")]
    if any("\r" in line[:-2] for line in lines):
        return None  # a lone carriage return: the parser's line numbers differ
    drop: list[tuple[int, int]] = []
    target: ast.stmt | None = None
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name == parts[0]:
            target = node
            continue
        if _is_test_name(node.name):
            drop.append(_span(node))
    if target is None:
        return None
    method: ast.stmt | None = None
    if len(parts) == 2:
        if not isinstance(target, ast.ClassDef):
            return None
        for sub in target.body:
            if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if sub.name == parts[1]:
                method = sub
            elif sub.name.startswith("test"):
                drop.append(_span(sub))
        if method is None:
            return None
    elif not isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    cut = set()
    for start, end in drop:
        cut.update(range(start, end))
    kept = "".join(line for i, line in enumerate(lines) if i not in cut).rstrip("\n")
    return kept + "\n\n" + _main_block(target, method) + "\n"


def _main_block(target: ast.stmt, method: ast.stmt | None) -> str:
    """What runs the test when the file is run as a script: a test without parameters is
    called (a class's method on an instance, with ``setUp`` / ``setup_method`` first);
    otherwise pytest runs the file."""
    def_args = (method or target).args  # type: ignore[union-attr]
    params = [a.arg for a in def_args.posonlyargs + def_args.args]
    params = params[1:] if method is not None else params
    is_async = isinstance(method or target, ast.AsyncFunctionDef)
    if params or is_async or (getattr(target, "decorator_list", None) and method is None):
        body = ["    import pytest", "", "    raise SystemExit(pytest.main([__file__]))"]
    elif method is None:
        body = [f"    {target.name}()", '    print("test passed")']
    else:
        name = target.name  # type: ignore[attr-defined]
        body = [
            f"    case = {name}({_init_args(target)})",
            '    for hook in ("setUp", "setup_method"):',
            "        if hasattr(case, hook):",
            "            fn = getattr(case, hook)",
            "            fn() if hook == 'setUp' else fn(None)",
            f"    case.{method.name}()",  # type: ignore[attr-defined]
            '    print("test passed")',
        ]
    return "\n".join(['if __name__ == "__main__":', *body])


def _init_args(cls: ast.stmt) -> str:
    """A unittest case needs its method's name to be built."""
    bases = {ast.unparse(b) for b in getattr(cls, "bases", ())}
    return '"run"' if any(b.endswith("TestCase") for b in bases) else ""


def source_patch(diff: str) -> str:
    """``diff`` without the sections of files under hidden or cache folders
    (``.pytest_cache`` written by a run, ``__pycache__``): the state an edit made."""
    from sweworld.tasks.patches import split_patch

    keep = []
    for part in split_patch(diff):
        segments = part.path.split("/")
        if any(s.startswith(".") or s == "__pycache__" for s in segments[:-1]):
            continue
        keep.append(part.text)
    return "".join(keep)


def task_states(
    task_row: dict[str, Any],
    records: Iterable[Any],
    labels: Iterable[Any] = (),
) -> list[tuple[str, str, int]]:
    """The states of a task as (phase, patch, index): ``buggy`` (no patch), ``fixed`` (the
    gold patch), each right fix written otherwise (``alt``: the SWR ``labels`` of kind
    ``alt``, in their order) and each wrong fix (read from the diffs of the task's recorded
    SWT ``records``, ``meta.phase``, cache folders removed). Reproduction records are not
    states of their own."""
    wrong: dict[int, str] = {}
    for record in records:
        meta = parse_meta(record.meta)
        if meta.get("phase") == "wrong" and not meta.get("reproduction"):
            index = int(meta.get("wrong", 0))
            wrong.setdefault(index, source_patch(record.diff or ""))
    alts = [str(r.patch or "") for r in labels if r.candidate_kind == "alt"]
    states = [("buggy", "", 0), ("fixed", str(task_row.get("patch") or ""), 0)]
    states += [("alt", patch, i) for i, patch in enumerate(dict.fromkeys(alts)) if patch]
    states += [("wrong", patch, i) for i, patch in sorted(wrong.items()) if patch]
    return states


def augment_tasks(
    rows: list[dict[str, Any]],
    *,
    store: Any,
    manager: Any,
    executor: Any,
    test_sources: Callable[[str], str],
    records: dict[str, list[Any]],
    labels: dict[str, list[Any]] | None = None,
    workers: int = 2,
    timeout: float = 60.0,
    modes: tuple[str, ...] = (),
    echo: Callable[[str], None] = print,
) -> Counter:
    """Record the reproductions of the task rows ``rows`` not yet done (unit
    ``repro:<instance>`` in ``store``) on each of their states (:func:`task_states` of
    ``records[instance]`` and ``labels[instance]``, the SWR records), ``workers`` tasks at
    a time; ``test_sources(path)`` is a test module's text at base. The ``alt`` states of
    a task whose transitions have none (factory runs before them did not record them) also
    get the agent's other commands.
    Returns counts (tasks done, resumed, skipped and why, records)."""
    from sweworld.data.factory import transitions
    from sweworld.tasks.fields import test_list
    from sweworld.tasks.schema import Task

    counts: Counter = Counter()
    lock = threading.Lock()

    def one(row: dict[str, Any]) -> None:
        unit = f"repro:{row['instance_id']}"
        if store.is_done(unit):
            with lock:
                counts["tasks_resumed"] += 1
            return
        test_id = (test_list(row, "FAIL_TO_PASS") or [""])[0]
        repro = reproduction_source(test_sources(test_id.split("::", 1)[0]), test_id)
        instance = row["instance_id"]
        recorded = records.get(instance, [])
        states = task_states(row, recorded, (labels or {}).get(instance, []))
        had_alt = any(parse_meta(r.meta).get("phase") == "alt" for r in recorded)
        if repro is None:
            with lock:
                counts["tasks_not_copyable"] += 1
            if had_alt or not any(phase == "alt" for phase, _, _ in states):
                # done: the test module does not change on a rerun
                store.done(unit, swt=0, reason="not_copyable")
                return
            states = [s for s in states if s[0] == "alt"]  # their agent commands only
        try:
            n = transitions.record_transitions(
                Task.from_row(row), manager=manager, executor=executor, sink=store.add,
                repro=None, module="", timeout=timeout, modes=modes, states=states,
                reproduction=repro, agent=() if had_alt else ("alt",),
            )  # fmt: skip
        except Exception as exc:  # one task never stops the run
            log.exception("reproductions of %s failed", unit)
            store.skip(unit, "error", detail=f"{type(exc).__name__}: {exc}")
            with lock:
                counts["tasks_skipped_error"] += 1
            return
        store.done(unit, swt=n)
        with lock:
            counts["tasks_done"] += 1
            counts["swt_records"] += n

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i, _ in enumerate(pool.map(one, rows), 1):
            if i % 10 == 0 or i == len(rows):
                echo(f"reproductions: {i}/{len(rows)} tasks, {counts['swt_records']} records")
    return counts


def part_rows(part: Path) -> list[dict[str, Any]]:
    """The task rows of a factory part (``tasks.jsonl``; none when it has no tasks yet)."""
    path = Path(part) / "tasks.jsonl"
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{number}: not a JSON task row") from None
        if not isinstance(row, dict) or not row.get("instance_id"):
            raise ValueError(f"{path}:{number}: a task row needs an instance_id")
        rows.append(row)
    return rows


def part_records(part: Path, kind: str = "swt") -> dict[str, list[Any]]:
    """A factory part's records of ``kind`` written so far (``swt`` or ``swr``,
    :func:`sweworld.data.store.iter_records`) by task instance."""
    from sweworld.data.store import iter_records

    out: dict[str, list[Any]] = {}
    for record in iter_records(part, kind):
        out.setdefault(record.instance_id, []).append(record)
    return out


def augment_part(
    part: Path,
    *,
    workers: int = 2,
    timeout: float = 60.0,
    modes: tuple[str, ...] = (),
    limit: int | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, int]:
    """Add reproduction records to the factory part ``part`` built before they existed
    (its ``tasks.jsonl``, ``records/`` and ``source/`` checkout): :func:`augment_tasks`
    on its tasks (the first ``limit``), then the part's datasets finalized again. A rerun
    resumes."""
    from sweworld.data.importing import add_repo_cache
    from sweworld.data.store import RecordStore, finalize
    from sweworld.execution.local import LocalExecutor
    from sweworld.sandbox.manager import SessionManager

    part = Path(part)
    if not (part / "tasks.jsonl").is_file():
        raise FileNotFoundError(f"{part}: no tasks.jsonl (not a factory part)")
    rows = part_rows(part)
    records = part_records(part)
    labels = part_records(part, "swr")
    checkout = next((p for p in sorted((part / "source").glob("*")) if p.is_dir()), None)

    def test_source(path: str) -> str:
        try:
            return (checkout / path).read_text(encoding="utf-8") if checkout else ""
        except (OSError, UnicodeDecodeError):
            return ""

    if (part / "repos").is_dir():  # the library's repository, as the factory run made it
        add_repo_cache(part / "repos")
    store = RecordStore(part)
    manager = SessionManager()
    executor = LocalExecutor(timeout=timeout)
    try:
        counts = augment_tasks(
            rows[:limit] if limit is not None else rows, store=store, manager=manager,
            executor=executor, test_sources=test_source, records=records, labels=labels,
            workers=workers,
            timeout=timeout, modes=modes, echo=echo,
        )  # fmt: skip
    finally:
        executor.close()
        manager.close_all()
        store.close()
    summary_path = part / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    extra = {"factory": summary.get("factory", {}), "reproductions": dict(counts)}
    if "heldout_repos" in summary:
        finalize(part, heldout=summary["heldout_repos"], extra_summary=extra)
    else:
        finalize(part, extra_summary=extra)
    return dict(counts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweworld data factory-reproductions`` options."""
    parser.add_argument(
        "parts", nargs="+", help="factory output folders (make-tasks --out, or a build's parts)"
    )
    parser.add_argument("--workers", type=at_least(1), default=2, help="tasks at once (default 2)")
    parser.add_argument(
        "--timeout", type=bounded(float, 1, 86_400), default=60.0, help="seconds per run"
    )
    parser.add_argument("--limit", type=at_least(0), help="the first N tasks of each part only")


def run(args: argparse.Namespace) -> int:
    """Add reproductions to each part; 2 when a folder is not a factory part."""
    for part in args.parts:
        try:
            counts = augment_part(Path(part), workers=args.workers, timeout=args.timeout,
                                  limit=args.limit)  # fmt: skip
        except (OSError, ValueError) as exc:
            print(f"sweworld: error: {exc}", file=sys.stderr)
            return 2
        print(f"{part}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0
