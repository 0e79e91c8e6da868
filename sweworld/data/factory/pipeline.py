"""The task factory's run: source -> baseline -> mutants -> verified tasks -> SWT / SWR data.

:func:`make_tasks` does it all for one library, writing as it goes under ``out``:

* ``repos/<owner>__<name>.git``: the library as a bare repository (``SWEWORLD_REPO_CACHE``);
* ``factory/mutants.jsonl``: every screened mutant and its verdict (resume: never re-run);
* ``tasks.jsonl``: the verified task rows (``Task.from_row`` reads them);
* ``records/``, ``swt/``, ``swr/``, ``summary.json``: the lead's :class:`RecordStore`
  (SWT transitions, SWR labels, skips with reasons) and its ``finalize``.

Mutants run in a thread pool (``workers``), each worker with its own session; a task's
verification, transitions and labels run in the same pool. A second run with the same
``out`` skips mutants and tasks already done.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.data.factory import (
    issue_text,
    labels,
    mutate,
    reproductions,
    rewrite,
    run_tests,
    source,
    tasks,
    transitions,
)
from sweworld.data.factory.library import (
    first_parsing,
    read_sources,
    relevant_test_files,
)
from sweworld.data.factory.task_rows import append_task_row, cut_torn_tail, written_task_ids
from sweworld.data.schema import split_heldout
from sweworld.data.store import RecordStore, finalize
from sweworld.tasks.unified_diff import make_unified_diff

__all__ = [
    "FactoryConfig",
    "FactoryError",
    "append_task_row",
    "first_parsing",
    "make_tasks",
    "read_sources",
    "relevant_test_files",
    "written_task_ids",
]

log = logging.getLogger(__name__)


class FactoryError(RuntimeError):
    """The library cannot be used (no sources, no environment, tests that do not run)."""


@dataclass
class FactoryConfig:
    """Options of a factory run (the CLI's flags)."""

    out: Path
    package: str | None = None
    repo_path: str | None = None
    repo_name: str | None = None
    seed: int = 0
    workers: int = 2
    max_tasks: int = 10
    max_mutants: int = 200
    max_broken_fraction: float = 0.5
    multi_fraction: float = 0.25
    timeout: float = 300.0
    screen_timeout: float = 300.0  # per mutant run: set from the baseline's wall time
    transitions: bool = True
    labels: bool = True
    wrong_fixes: int = 3  # wrong fixes per task (labels and transitions)
    alt_fixes: int = 2  # alternative right fixes per task (the gold fix rewritten; labels)
    overreach_fixes: int = 1  # the gold fix plus a wrong fix, per task (labels)
    contexts: tuple[str, ...] = ("oracle", "blind")  # SWT contexts built per record
    screen_records: bool = False  # every mutant's screening run as an SWT record too
    progress: bool = True
    #: repositories whose records go to the test split (None: the project's default list,
    #: :data:`~sweworld.data.schema.DEFAULT_HELDOUT_REPOS`)
    heldout: tuple[str, ...] | None = None
    #: where this library's records go: ``auto`` (test when it is held out, else train),
    #: ``train`` or ``test`` (whatever the held-out list says)
    split: str = "auto"
    counts: Counter = field(default_factory=Counter)


def _base_task(lib: source.LibrarySource, python: str) -> Any:
    from sweworld.tasks.schema import Task

    return Task.from_row(
        {
            "instance_id": f"{lib.repo.replace('/', '__')}-factory-base",
            "repo": lib.repo,
            "base_commit": lib.commit,
            "environment": {"python": python},
        }
    )


def _take_source(cfg: FactoryConfig) -> source.LibrarySource:
    if cfg.package:
        return source.from_package(cfg.package, cfg.out)
    if cfg.repo_path:
        return source.from_repo(cfg.repo_path, cfg.out, name=cfg.repo_name)
    raise FactoryError("give --package NAME[==VERSION] or --repo PATH")


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, unit="it", dynamic_ncols=True)


class _MutantLog:
    """``factory/mutants.jsonl``: screened mutants, read back on resume."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, tasks.Screened] = {}
        if path.is_file():
            cut_torn_tail(path)  # else the next mutant is glued to it and lost
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        item = tasks.Screened.from_json(json.loads(line))
                    except (ValueError, KeyError, TypeError):
                        continue
                    self.done[item.key] = item
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def add(self, item: tasks.Screened) -> None:
        with self._lock:
            self.done[item.key] = item
            self._file.write(json.dumps(item.to_json()) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def make_tasks(cfg: FactoryConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the factory for one library; returns the summary (also in ``summary.json``).
    Raises :class:`FactoryError` when the library cannot be used (the reason is also
    recorded as a skip in the summary)."""

    started = time.monotonic()
    cfg.out.mkdir(parents=True, exist_ok=True)
    lock = open(cfg.out / ".factory.lock", "w")  # noqa: SIM115 (held for the whole run)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise FactoryError(f"{cfg.out} is being written by another factory run") from None
    try:
        return _make_tasks(cfg, echo, started)
    finally:
        lock.close()


def _make_tasks(cfg: FactoryConfig, echo: Callable[[str], None], started: float) -> dict[str, Any]:
    from sweworld.execution.local import LocalExecutor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks.environment import HOST_PYTHON

    store = RecordStore(cfg.out)
    counts = cfg.counts
    label = cfg.package or cfg.repo_path or "?"
    try:
        lib = _take_source(cfg)
    except source.FactorySourceError as exc:
        store.skip(f"library:{label}", "source_failed", detail=str(exc))
        _finish(cfg, store, counts, started, None)
        raise FactoryError(str(exc)) from exc
    caches = [str(cfg.out / "repos"), *filter(None, [os.environ.get("SWEWORLD_REPO_CACHE")])]
    os.environ["SWEWORLD_REPO_CACHE"] = os.pathsep.join(caches)
    try:
        source.check_name_resolves(lib)
    except source.FactorySourceError as exc:
        store.skip(f"library:{lib.repo}", "name_taken", detail=str(exc))
        _finish(cfg, store, counts, started, lib)
        raise FactoryError(str(exc)) from exc
    echo(f"library {lib.repo} at {lib.commit[:12]} ({lib.version or 'no version'})")
    manager = SessionManager()
    executor = LocalExecutor(timeout=cfg.timeout)
    base = _base_task(lib, HOST_PYTHON)
    runner = run_tests.SuiteRunner(base, manager, executor, timeout=cfg.timeout)
    mutants_log = _MutantLog(cfg.out / "factory" / "mutants.jsonl")
    try:
        runner.run()  # the first run builds the environment: not timed
        timed = time.monotonic()
        baseline = runner.run()
        cfg.screen_timeout = min(cfg.timeout, max(20.0, 5 * (time.monotonic() - timed)))
        if not baseline.ok:
            reason = {"env_failed": "environment_failed"}.get(baseline.status, "tests_do_not_run")
            store.skip(f"library:{lib.repo}", reason, detail=baseline.reason[-2000:])
            raise FactoryError(f"{lib.repo}: {reason}: {baseline.reason[-1500:]}")
        base_passed = run_tests.passed(baseline.statuses)
        if not base_passed:
            tail = " | ".join(baseline.log.strip().splitlines()[-3:])
            store.skip(f"library:{lib.repo}", "tests_do_not_run", detail=tail[-2000:])
            raise FactoryError(
                f"{lib.repo}: tests_do_not_run: no test passes on the unchanged library: {tail}"
            )
        echo(f"baseline: {len(baseline.statuses)} tests, {len(base_passed)} pass")
        if cfg.screen_records:  # the base state's whole suite: what every test does at base
            record = transitions.screen_record(base, key="baseline", files=(), outcome=baseline)
            if record is not None:
                store.add(record)
        _run(cfg, lib, base, store, manager, executor, runner, mutants_log, base_passed)
    finally:
        runner.close()
        mutants_log.close()
        executor.close()
        manager.close_all()
        summary = _finish(cfg, store, counts, started, lib)
    return summary


def _finish(
    cfg: FactoryConfig,
    store: RecordStore,
    counts: Counter,
    started: float,
    lib: source.LibrarySource | None,
) -> dict[str, Any]:
    store.close()
    factory = {
        "library": lib.repo if lib else None,
        "commit": lib.commit if lib else None,
        "counts": dict(counts),
        "wall_s": round(time.monotonic() - started, 1),
    }
    return finalize(
        cfg.out,
        heldout=split_heldout(cfg.heldout, cfg.split, lib.repo if lib else None),
        extra_summary={"factory": factory},
    )


def _run(
    cfg: FactoryConfig,
    lib: source.LibrarySource,
    base: Any,
    store: RecordStore,
    manager: Any,
    executor: Any,
    runner: run_tests.SuiteRunner,
    mutants_log: _MutantLog,
    base_passed: set[str],
) -> None:
    counts = cfg.counts
    root = lib.checkout
    originals = read_sources(root, source.library_files(root), store, counts)
    tests_text = read_sources(root, source.test_files(root), store, counts)
    found: list[mutate.Mutation] = []
    for path in sorted(originals):
        found += mutate.mutations(originals[path], path, check=False)
    chosen = first_parsing(mutate.sample(found, cfg.seed), originals, cfg.max_mutants)
    counts["mutants_candidates"] = len(found)
    files_of = {p: relevant_test_files(p, tests_text) for p in originals}

    def screen(m: mutate.Mutation) -> tasks.Screened:
        prior = mutants_log.done.get(m.key)
        if prior is not None:
            return prior
        files = files_of[m.path]
        edits = {m.path: mutate.apply_mutation(originals[m.path], m)}
        outcome = runner.run(files, edits, timeout=cfg.screen_timeout)
        verdict, broken, run_passed = tasks.judge(
            base_passed, files, outcome, cfg.max_broken_fraction
        )
        if cfg.screen_records:
            diff = make_unified_diff(m.path, originals[m.path], edits[m.path])
            meta = {"verdict": verdict, "operator": m.operator, "function": m.function}
            record = transitions.screen_record(
                base, key=m.key, files=files, outcome=outcome, diff=diff, meta=meta
            )
            if record is not None and store.add(record):
                counts["swt_screen_records"] += 1
        item = tasks.Screened([m], files, verdict, broken, run_passed, outcome.log)
        mutants_log.add(item)
        return item

    kept: list[tasks.Screened] = []
    signatures: set[tuple[str, str, frozenset[str]]] = set()
    wanted_single = cfg.max_tasks - int(cfg.max_tasks * cfg.multi_fraction)
    wanted_kept = wanted_single + 4 * (cfg.max_tasks - wanted_single)  # room to pair
    bar = _progress(len(chosen), f"mutants {lib.name}", cfg.progress)
    with ThreadPoolExecutor(max_workers=max(1, cfg.workers)) as pool:
        index = 0
        # recorded screening runs are data: then every chosen mutant is screened
        while index < len(chosen) and (cfg.screen_records or len(kept) < wanted_kept):
            batch = chosen[index : index + max(1, cfg.workers) * 2]
            index += len(batch)
            for item in pool.map(screen, batch):
                bar.update(1)
                counts["mutants_tried"] += 1
                verdict = item.verdict
                m = item.mutations[0]
                signature = (m.path, m.function, frozenset(item.broken))
                if item.kept and signature in signatures:
                    verdict = "duplicate"
                if verdict == "kept":
                    signatures.add(signature)
                    kept.append(item)
                    counts["mutants_kept"] += 1
                else:
                    counts[f"rejected_{verdict}"] += 1
                bar.set_postfix(kept=len(kept))
    bar.close()
    rng = random.Random(cfg.seed)
    jobs = _task_jobs(kept, wanted_single, cfg.max_tasks, rng)
    rejected = [s for s in mutants_log.done.values() if not s.kept]

    def build(job: list[tasks.Screened]) -> None:
        _build_task(
            cfg,
            lib,
            job,
            originals,
            tests_text,
            store,
            manager,
            executor,
            runner,
            base_passed,
            rejected,
            made,
            found,
        )

    made = written_task_ids(cfg.out / "tasks.jsonl")
    bar = _progress(len(jobs), f"tasks {lib.name}", cfg.progress)
    with ThreadPoolExecutor(max_workers=max(1, cfg.workers)) as pool:
        for _ in pool.map(build, jobs):
            bar.update(1)
    bar.close()
    if cfg.transitions:  # tasks made before reproductions existed get theirs on a rerun
        rows = reproductions.part_rows(cfg.out)
        todo = [r for r in rows if not store.is_done(f"repro:{r['instance_id']}")]
        if todo:
            added = reproductions.augment_tasks(
                todo, store=store, manager=manager, executor=executor,
                test_sources=lambda path: tests_text.get(path, ""),
                records=reproductions.part_records(cfg.out),
                labels=reproductions.part_records(cfg.out, "swr"), workers=cfg.workers,
                timeout=cfg.timeout, modes=cfg.contexts, echo=log.info,
            )  # fmt: skip
            counts.update({f"repro_{k}": v for k, v in added.items()})


def _task_jobs(
    kept: list[tasks.Screened], singles: int, total: int, rng: random.Random
) -> list[list[tasks.Screened]]:
    """Single-bug tasks first, then two-bug tasks from pairs of kept mutants in different
    functions with disjoint failing sets."""
    jobs = [[k] for k in kept[:singles]]
    rest = kept[singles:]
    while len(jobs) < total and len(rest) >= 2:
        first = rest.pop(0)
        m1 = first.mutations[0]
        for i, other in enumerate(rest):
            m2 = other.mutations[0]
            if (m1.path, m1.function) != (m2.path, m2.function) and not (
                set(first.broken) & set(other.broken)
            ):
                jobs.append([first, rest.pop(i)])
                break
        else:
            jobs.append([first])
    return jobs[:total]


def _build_task(
    cfg: FactoryConfig,
    lib: source.LibrarySource,
    job: list[tasks.Screened],
    originals: dict[str, str],
    tests_text: dict[str, str],
    store: RecordStore,
    manager: Any,
    executor: Any,
    runner: run_tests.SuiteRunner,
    base_passed: set[str],
    rejected: list[tasks.Screened],
    made: set[str],
    pool: list[mutate.Mutation] | None = None,
) -> None:
    from sweworld.tasks.environment import HOST_PYTHON
    from sweworld.tasks.schema import Task

    counts = cfg.counts
    bugs = [m for s in job for m in s.mutations]
    unit = f"task:{tasks.instance_id(lib.repo, bugs)}"
    if store.is_done(unit):
        counts["tasks_resumed"] += 1
        return
    try:
        if len(job) == 1:
            screened = job[0]
        else:  # the two bugs together, run for real
            files = sorted({f for s in job for f in s.files})
            outcome = runner.run(files, tasks.mutant_texts(originals, bugs))
            verdict, broken, run_passed = tasks.judge(base_passed, files, outcome, 1.0)
            if verdict != "kept":
                store.skip(unit, f"multi_{verdict}")
                counts[f"tasks_skipped_multi_{verdict}"] += 1
                return
            screened = tasks.Screened(bugs, files, verdict, broken, run_passed, outcome.log)
        first_test = screened.broken[0]
        test_path = first_test.split("::", 1)[0]
        roots = sorted({p.split("/")[0].removesuffix(".py") for p in originals} - {"src"})
        roots += sorted(
            {p.split("/")[1] for p in originals if p.startswith("src/") and "/" in p[4:]}
        )
        repro = issue_text.find_repro_call(tests_text.get(test_path, ""), first_test, roots)
        forbidden = []
        for m in bugs:
            for text in (originals[m.path], tasks.mutant_texts(originals, [m])[m.path]):
                lines = text.splitlines()
                forbidden.append(lines[m.line - 1] if m.line <= len(lines) else "")
        statement = issue_text.problem_statement(
            package=lib.name,
            failing=screened.broken,
            log=screened.log,
            repro=repro,
            forbidden=forbidden,
        )
        row = tasks.make_row(
            repo=lib.repo,
            base_commit=lib.commit,
            version=lib.version,
            python=HOST_PYTHON,
            screened=screened,
            originals=originals,
            problem_statement=statement,
            seed=cfg.seed,
        )
        task = Task.from_row(row)
        check = tasks.verify_row(task, manager, executor, timeout=cfg.timeout)
        if not check.ok:
            store.skip(unit, f"verify_{check.reason}")
            counts[f"tasks_skipped_verify_{check.reason}"] += 1
            return
        module = transitions.module_name(bugs[0].path)
        wrongs = labels.wrong_mutations(bugs, rejected, cfg.wrong_fixes, pool or (), originals)
        wrong_patches: list[str] = []
        cands: list[tuple[str, str]] = []
        if cfg.labels or cfg.transitions:
            cands = labels.candidates(
                task,
                originals=originals,
                bugs=bugs,
                wrong=wrongs,
                test_source=tests_text.get(test_path, ""),
                alternatives=rewrite.choose(
                    originals[bugs[0].path], bugs[0].path, bugs, cfg.alt_fixes
                )
                if cfg.labels
                else (),
                overreach=cfg.overreach_fixes if cfg.labels else 0,
            )
            wrong_patches = [patch for kind, patch in cands if kind == "wrong"]
        counts["wrong_fixes"] += len(wrong_patches)
        n_swt = 0
        if cfg.transitions:
            f2p = task.FAIL_TO_PASS[0]
            reproduction = reproductions.reproduction_source(
                tests_text.get(f2p.split("::", 1)[0], ""), f2p
            )
            n_swt = transitions.record_transitions(
                task,
                manager=manager,
                executor=executor,
                sink=store.add,
                repro=repro,
                module=module,
                wrong_patches=wrong_patches,
                alt_patches=[patch for kind, patch in cands if kind == "alt"],
                timeout=cfg.timeout,
                modes=cfg.contexts,
                reproduction=reproduction,
            )
            # recorded with the task's other transitions (or none can be copied)
            store.done(f"repro:{task.instance_id}", copied=reproduction is not None)
        n_swr = 0
        if cfg.labels:
            known = {"right": check.gold, "empty": check.buggy}

            def no_label(kind: str, reason: str) -> None:
                status = reason.split(":", 1)[0]
                store.skip(f"{unit}:swr:{kind}", f"swr_{status}", detail=reason[-2000:])
                counts[f"swr_{kind}_no_label_{status}"] += 1

            for record in labels.label_records(
                task,
                cands,
                manager=manager,
                executor=executor,
                known=known,
                timeout=cfg.timeout,
                skip=no_label,
            ):
                n_swr += int(store.add(record))
                counts[
                    f"swr_{record.candidate_kind}_{'resolved' if record.resolved else 'unresolved'}"
                ] += 1
        append_task_row(cfg.out / "tasks.jsonl", row, made)
        counts["tasks_made"] += 1
        counts["swt_records"] += n_swt
        store.done(unit, swt=n_swt, swr=n_swr, bugs=len(bugs))
    except Exception as exc:  # one task never stops the run
        log.exception("factory task %s failed", unit)
        store.skip(unit, "error", detail=f"{type(exc).__name__}: {exc}")
        counts["tasks_skipped_error"] += 1
