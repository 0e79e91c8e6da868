"""Training rows for the outcome model from stored SWT records with workspace states.

A record (``sweworld.data.schema.SWTRecord``) holds the command, the ``git diff`` of the
state it ran on, the task row and what really happened. Its state is rebuilt from the
repository at the record's base commit (extracted once per commit with ``git archive`` from
a local repository or bare mirror) plus the diff applied in memory, then
:func:`~sweworld.transition.outcome.features.step_features` computes the features exactly as
the executor does in a live session. Records whose state cannot be rebuilt (no repository,
``state_source="trajectory"``) are skipped and counted.

Labels: the exit-code class, the exception type read from the output (the last
``Name: message`` line of a traceback, or pytest's first ``E   Name`` line), and the
per-test statuses the shared grader read from the output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.data.divergence import state_diverged
from sweworld.data.schema import SWTRecord, parse_meta, record_from_dict, split_of
from sweworld.tasks.fields import test_list
from sweworld.transition.outcome.features import (
    TEST_RUNNER_KINDS,
    Ledger,
    command_kind_of,
    per_test_features,
    shlex_join,
    step_features,
)
from sweworld.transition.outcome.model import exit_class
from sweworld.transition.outcome.state import FileState, diff_overlay

__all__ = [
    "BaseCheckouts",
    "Row",
    "TestRow",
    "exception_of",
    "exit_with_parent",
    "is_reproduction",
    "iter_records",
    "load_rows",
    "normal_status",
]

_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure))\b")
_PYTEST_E = re.compile(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning|Failure))\b")


def exception_of(stdout: str, stderr: str, kind: str) -> str:
    """The exception type a command's output shows, ``none`` when it shows none."""
    if kind in ("pytest", "django_runtests"):
        for line in (stdout + "\n" + stderr).splitlines():
            m = _PYTEST_E.match(line)
            if m:
                return m.group(1).rsplit(".", 1)[-1]
        return "none"
    text = stderr if stderr.strip() else stdout
    if "Traceback (most recent call last)" not in text and "SyntaxError" not in text:
        return "none"
    found = "none"
    for line in text.splitlines():
        m = _EXC.match(line)
        if m:
            found = m.group(1).rsplit(".", 1)[-1]
    return found


def normal_status(status: str) -> str:
    """A grader status folded into the model's classes (XFAIL counts as SKIPPED, XPASS as
    PASSED)."""
    status = str(status).strip().rstrip(":").upper()
    status = {"XFAIL": "SKIPPED", "XPASS": "PASSED", "ERRORS": "ERROR"}.get(status, status)
    return status if status in ("PASSED", "FAILED", "ERROR", "SKIPPED") else "ERROR"


class BaseCheckouts:
    """Base checkouts on disk, one per commit, extracted from local repositories."""

    def __init__(self, repos: Sequence[Path], cache: Path, *, extract: bool = True):
        self.repos = [Path(r) for r in repos]
        self.cache = Path(cache)
        self.extract = extract
        self._dirs: dict[str, Path | None] = {}

    def get(self, commit: str) -> Path | None:
        """The checkout of ``commit``, or None when no repository has it."""
        if not commit:
            return None
        if commit in self._dirs:
            return self._dirs[commit]
        out = self.cache / commit
        if not (out / ".complete").exists():
            out = self._extract(commit, out) if self.extract else None
        self._dirs[commit] = out
        return out

    def for_task(self, task: dict[str, Any], fallback_commit: str = "") -> Path | None:
        """The checkout a task's session starts from: its base commit, plus its setup patch
        for a SWE-smith / factory task (the bug is applied on top, as the session does)."""
        commit = str(task.get("base_commit") or fallback_commit)
        base = self.get(commit)
        setup = str(task.get("setup_patch") or "")
        if base is None or not setup:
            return base
        import hashlib

        key = f"{commit}-{hashlib.sha256(setup.encode()).hexdigest()[:16]}"
        if key in self._dirs:
            return self._dirs[key]
        out = self.cache / key
        if not (out / ".complete").exists():
            materialize(base, setup, out)
            (out / ".complete").write_text(key)
        self._dirs[key] = out
        return out

    def prepare(self, records: Iterable[SWTRecord]) -> None:
        """Extract (or find) the checkout of every record's task now, so that processes
        sharing the cache later only read it."""
        for rec in records:
            self.for_task(json.loads(rec.task) if rec.task else {}, rec.base_commit)

    def _extract(self, commit: str, out: Path) -> Path | None:
        for repo in self.repos:
            probe = subprocess.run(
                ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                capture_output=True,
            )
            if probe.returncode != 0:
                continue
            out.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile() as tar:
                subprocess.run(
                    ["git", "-C", str(repo), "archive", "--format=tar", commit],
                    stdout=tar,
                    check=True,
                )
                tar.seek(0)
                with tarfile.open(fileobj=tar) as tf:
                    tf.extractall(out, filter="data")
            (out / ".complete").write_text(commit)
            return out
        return None


def iter_records(paths: Iterable[Path]) -> Iterator[SWTRecord]:
    """SWT records from ``swt.jsonl`` files (or folders holding ``records/swt.jsonl``)."""
    for path in paths:
        path = Path(path)
        files = [path] if path.is_file() else sorted(path.rglob("swt.jsonl"))
        for file in files:
            with file.open(encoding="utf-8") as fh:
                for line in fh:
                    line = line.strip()
                    if line:
                        rec = record_from_dict("swt", json.loads(line))
                        assert isinstance(rec, SWTRecord)
                        yield rec


def _argv(command: str) -> list[str]:
    import shlex

    text = command
    if "&&" in text:  # "cd /testbed && python ..." as the factory records it
        text = text.rsplit("&&", 1)[1]
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


_COUNTS = re.compile(r"(\d+) (passed|failed|errors|error|skipped|xfailed|xpassed|deselected)\b")


def materialize(base: Path, diff: str, into: Path) -> list[str]:
    """The state ``base`` + ``diff`` as files under ``into`` (a hard-linked copy of the base
    whose changed files are new files); returns the changed relative paths."""
    if into.exists():
        shutil.rmtree(into)
    subprocess.run(["cp", "-al", str(base), str(into)], check=True)
    overlay = diff_overlay(base, diff)
    for rel, text in overlay.items():
        target = into / rel
        if target.exists() or target.is_symlink():
            target.unlink()
        if text is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return list(overlay)


class StateDir:
    """One on-disk workspace, moved from state to state by touching only changed files (a
    hard-linked copy of the base; changed files are new files)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.base: Path | None = None
        self.overlay: list[str] = []

    def set(self, base: Path, diff: str) -> list[str]:
        """Make the folder hold ``base`` + ``diff``; returns the changed relative paths."""
        if self.base != base:
            if self.path.exists():
                shutil.rmtree(self.path)
            subprocess.run(["cp", "-al", str(base), str(self.path)], check=True)
            self.base, self.overlay = base, []
        for rel in self.overlay:  # back to the base for what the last state changed
            target, original = self.path / rel, base / rel
            if target.exists() or target.is_symlink():
                target.unlink()
            if original.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(original, target)
        overlay = diff_overlay(base, diff)
        for rel, text in overlay.items():
            target = self.path / rel
            if target.exists() or target.is_symlink():
                target.unlink()
            if text is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
        self.overlay = list(overlay)
        return self.overlay


def align_statuses(statuses: dict[str, str], ids: Sequence[str] | None) -> dict[str, str]:
    """``statuses`` keyed by the collected pytest ids: a runner that names tests by function
    (SymPy's ``test_foo``) or as unittest does (``test_foo (pkg.mod.Case)``) is matched on
    the test's own name; keys already in ``ids`` stay."""
    if not ids or not statuses or all(k in ids for k in statuses):
        return statuses
    by_name: dict[str, str] = {}
    for key, status in statuses.items():
        by_name[key.split(" ", 1)[0].split("::")[-1].split(".")[-1]] = status
    out = {k: v for k, v in statuses.items() if k in ids}
    for test in ids:
        name = test.split("::")[-1].split("[", 1)[0]
        if test not in out and name in by_name:
            out[test] = by_name[name]
    return out


def collected_ids(
    workspace: Path,
    argv: Sequence[str],
    cwd: str,
    *,
    exact_only: bool = True,
    task: Any = None,
) -> list[str] | None:
    """The test ids the outcome executor collects for ``argv`` on the files under
    ``workspace`` in ``task``'s environment (:func:`~sweworld.transition.outcome.collect.
    collect_tests`), None when it cannot tell (or, with ``exact_only``, when the collection
    is not known to be exact)."""
    from sweworld.transition.outcome.collect import collect_tests
    from sweworld.transition.types import WorkspaceView

    found = collect_tests(WorkspaceView(workspace, cwd=cwd), argv, cwd, task)
    if found is None or (exact_only and not found.exact):
        return None
    return found.ids


def test_labels(
    parsed: dict[str, str], ids: list[str] | None, stdout: str, exit_code: int, exitfirst: bool
) -> dict[str, str]:
    """Per-test labels of a run: the parsed statuses, completed with PASSED for the collected
    tests a run without ``-rA`` does not name, when the final counts line confirms it.

    Two ways to confirm: the completed labels' PASSED count equals the line's ``passed``; or
    (a collection that may name a parametrized id differently, or ``-x`` cutting the run) the
    run reports only passes and failures, every failure is named, and the number of collected
    ids is within a tenth of the line's total (a static collection may miss or misname a few
    parametrized cases), so every unnamed collected test that ran passed."""
    if ids is None or exit_code not in (0, 1) or "PASSED" in parsed.values():
        return parsed
    labels: dict[str, str] = {}
    for test in ids:
        labels[test] = parsed.get(test, "PASSED")
        if exitfirst and labels[test] in ("FAILED", "ERROR"):
            break
    # the final counts line (SymPy's runner may print "DO *NOT* COMMIT!" after it)
    tail = next((ln for ln in reversed(stdout.strip().splitlines()[-3:]) if _COUNTS.search(ln)), "")
    counts = {w.rstrip("s") if w != "passed" else w: int(n) for n, w in _COUNTS.findall(tail)}
    if counts.get("passed", -1) == sum(v == "PASSED" for v in labels.values()):
        return labels
    failing = sum(v in ("FAILED", "ERROR") for v in parsed.values())
    if (
        not exitfirst
        and not {"skipped", "xfailed", "xpassed", "deselected"} & counts.keys()
        and counts.get("failed", 0) + counts.get("error", 0) == failing
        and abs(counts.get("passed", 0) + failing - len(ids)) <= 0.1 * len(ids)
    ):
        return {test: "PASSED" for test in ids} | parsed
    return parsed


@dataclass
class TestRow:
    """One test's features and real status (and its status at base, for the floor)."""

    features: list[float]
    status: str
    base_status: str
    test_id: str


@dataclass
class Row:
    """One record's features (oracle or blind) and labels."""

    record_id: str
    instance_id: str
    repo: str
    split: str
    mode: str
    kind: str
    features: list[float]
    exit_class: str
    exit_code: int
    exception: str
    tests: list[TestRow] = field(default_factory=list)


def _base_statuses(records: Sequence[SWTRecord]) -> dict[str, dict[str, str]]:
    """instance -> test id -> status on the untouched base (runs with an empty diff)."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for rec in records:
        if not rec.diff.strip() and rec.ran_tests:
            for test, status in rec.statuses().items():
                out[rec.instance_id].setdefault(test, normal_status(status))
    return out


def load_rows(
    paths: Iterable[Path],
    checkouts: BaseCheckouts,
    heldout: Sequence[str] | None = None,
    modes: Sequence[str] = ("oracle", "blind"),
    stats: dict[str, int] | None = None,
    jobs: int = 1,
) -> list[Row]:
    """Feature rows of every record whose state can be rebuilt, in both ``modes``.

    With ``jobs`` > 1 the tasks' records are shared out between that many processes, at most
    the CPUs and the tasks (every record of a task in one process: a task's ledger runs
    through its records in order); the base checkouts are extracted first, here, so no two
    processes extract one. The rows and counts are the same as with one process, in the
    same order."""
    jobs = max(1, min(jobs, os.cpu_count() or 1))
    stats = stats if stats is not None else {}
    records = list(iter_records(paths))
    base = _base_statuses(records)
    by_instance: dict[str, list[SWTRecord]] = defaultdict(list)
    for rec in records:
        by_instance[rec.instance_id].append(rec)
    groups = list(by_instance.values())
    if jobs > 1 and len(groups) > 1:
        return _load_parallel(groups, checkouts, heldout, modes, stats, base, jobs)
    return _rows_of_groups(groups, checkouts, heldout, modes, stats, base)


def is_reproduction(rec: SWTRecord) -> bool:
    """Whether ``rec`` is a run of the task factory's reproduction file (``meta.reproduction``).

    :func:`load_rows` leaves out those run as scripts (``python reproduce_issue.py``): the
    factory's copy of the failing test raises at its first failed assert, where agents'
    reproduction scripts mostly print what they see and exit 0 (84-86% of the held-out agent
    runs' script steps pass, before a fix as after). Trained on, they taught that a script on
    an unfixed state fails, and cost 0.07 on the agent runs' script exit codes (bench swt).
    Their pytest runs are kept: a failing test is what pytest reports either way."""
    return bool(parse_meta(rec.meta).get("reproduction"))


def _rows_of_groups(
    groups: Sequence[list[SWTRecord]],
    checkouts: BaseCheckouts,
    heldout: Sequence[str] | None,
    modes: Sequence[str],
    stats: dict[str, int],
    base: dict[str, dict[str, str]],
) -> list[Row]:
    """The rows of each task's records (``groups``: one list per task), in order."""
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="outcome-state-"))
    ws = StateDir(work / "ws")
    split_args = {"heldout": heldout} if heldout is not None else {}
    for recs in groups:
        instance = recs[0].instance_id
        recs.sort(key=lambda r: (r.step, r.call))
        ledgers = {mode: Ledger() for mode in modes}
        for rec in recs:
            task = json.loads(rec.task) if rec.task else {}
            checkout = checkouts.for_task(task, rec.base_commit)
            if checkout is None or rec.state_source == "trajectory":
                stats["skipped_no_state"] = stats.get("skipped_no_state", 0) + 1
                continue
            if state_diverged(rec):  # its state is not the one its output was made on
                stats["skipped_diverged"] = stats.get("skipped_diverged", 0) + 1
                continue
            argv = _argv(rec.command)
            if not argv:
                continue
            kind = command_kind_of(argv)
            if kind not in TEST_RUNNER_KINDS and is_reproduction(rec):
                stats["skipped_reproduction_script"] = (
                    stats.get("skipped_reproduction_script", 0) + 1
                )
                continue
            changed = ws.set(checkout, rec.diff)
            state = FileState.from_dirs(ws.path, checkout, changed, exact_changes=True)
            statuses = {k: normal_status(v) for k, v in rec.statuses().items()}
            ids = None
            if kind in TEST_RUNNER_KINDS:
                ids = collected_ids(ws.path, argv, rec.cwd, exact_only=False, task=task)
                statuses = align_statuses(statuses, ids)
                exitfirst = "-x" in argv or "--exitfirst" in argv
                statuses = test_labels(statuses, ids, rec.stdout, rec.exit_code, exitfirst)
            exc = exception_of(rec.stdout, rec.stderr, kind)
            for mode in modes:
                oracle = mode == "oracle"
                ledger = ledgers[mode]
                step = step_features(
                    argv,
                    rec.cwd,
                    state,
                    task,
                    oracle=oracle,
                    ledger=ledger,
                    stdin=rec.stdin,
                    test_ids=ids or (),
                )
                row = Row(
                    rec.id,
                    rec.instance_id,
                    rec.repo,
                    split_of(rec.repo, **split_args),
                    mode,
                    kind,
                    step.values,
                    exit_class(rec.exit_code),
                    rec.exit_code,
                    exc,
                )
                f2p = set(test_list(task, "FAIL_TO_PASS"))
                reach_cache: dict[str, Any] = {}
                for test, status in statuses.items():
                    at_base = base.get(instance, {}).get(test) or (
                        "FAILED" if test in f2p else "PASSED"
                    )
                    feats = per_test_features(step, test, state, ledger, reach_cache)
                    row.tests.append(TestRow(feats, status, at_base, test))
                rows.append(row)
                ledger.record(shlex_join(argv), rec.exit_code, statuses)
            stats["records"] = stats.get("records", 0) + 1
    shutil.rmtree(work, ignore_errors=True)
    return rows


def _worker_rows(
    groups: Sequence[list[SWTRecord]],
    repos: Sequence[Path],
    cache: Path,
    heldout: Sequence[str] | None,
    modes: Sequence[str],
    base: dict[str, dict[str, str]],
) -> tuple[list[Row], dict[str, int]]:
    """One process's share of :func:`load_rows` (checkouts already extracted)."""
    stats: dict[str, int] = {}
    checkouts = BaseCheckouts(repos, cache, extract=False)
    return _rows_of_groups(groups, checkouts, heldout, modes, stats, base), stats


def exit_with_parent(parent: int, every: float = 1.0) -> None:
    """A feature process's initializer: a thread that ends the process once its parent is
    gone (a training run stopped or killed), instead of leaving it to compute its share."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _load_parallel(
    groups: list[list[SWTRecord]],
    checkouts: BaseCheckouts,
    heldout: Sequence[str] | None,
    modes: Sequence[str],
    stats: dict[str, int],
    base: dict[str, dict[str, str]],
    jobs: int,
) -> list[Row]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    checkouts.prepare(rec for recs in groups for rec in recs)  # here, once
    # tasks to processes, largest first onto the least loaded; each process keeps its
    # tasks in their original order, and the rows are put back in that order at the end
    shares: list[list[int]] = [[] for _ in range(min(jobs, len(groups)))]
    loads = [0] * len(shares)
    for index in sorted(range(len(groups)), key=lambda k: -len(groups[k])):
        least = loads.index(min(loads))
        shares[least].append(index)
        loads[least] += len(groups[index])
    by_group: dict[str, list[Row]] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=len(shares), mp_context=context, initializer=exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:  # fmt: skip
        futures = [
            pool.submit(
                _worker_rows,
                [groups[k] for k in sorted(share)],
                checkouts.repos,
                checkouts.cache,
                heldout,
                modes,
                {groups[k][0].instance_id: base.get(groups[k][0].instance_id, {}) for k in share},
            )
            for share in shares
        ]
        for future in futures:
            part, counts = future.result()
            for row in part:
                by_group.setdefault(row.instance_id, []).append(row)
            for key, n in counts.items():
                stats[key] = stats.get(key, 0) + n
    return [row for recs in groups for row in by_group.get(recs[0].instance_id, [])]
