"""The outcome route of ``sweworld bench swt``: the default world on recorded real transitions.

A model spec ``outcome`` (the shipped model) or ``outcome:PATH`` (a model file or folder) is
answered by :class:`~sweworld.transition.outcome.executor.OutcomeExecutor` itself, on the
record's workspace state rebuilt on disk: the base checkout of the record's commit (plus a
factory task's setup patch), extracted once per commit from ``--repos`` into ``--cache``
(:class:`sweworld.train.outcome_data.BaseCheckouts`), with the record's ``git diff``
applied (:class:`~sweworld.train.outcome_data.StateDir`). The request carries the rebuilt
workspace, its base, the changed paths and the task row, as a live session's does; the
executor computes the features, decides (exit code, exception, per-test statuses) and
renders the text, so the figures score what an agent would read. Records are answered in
their session's order (step, call) with one session per task instance and mode, so the
executor's ledger holds its own earlier answers, as in a live episode.

Differences from a live step: the session's ``/tmp`` is not part of a stored state (a
script under ``/tmp`` is unknown to the features), and the rendered text has no ledger of
real outputs before the record. Records whose state cannot be rebuilt (no repository holds
the commit; trajectory-only records) are counted and left out.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sweworld.data.schema import SWTRecord

__all__ = [
    "OutcomeRoute",
    "base_statuses",
    "command_argv",
    "is_outcome_spec",
    "label_counts",
    "model_identity",
    "outcome_model_path",
    "repos_for",
    "session_order",
]


def is_outcome_spec(spec: str) -> bool:
    """Whether a ``--models`` entry names the outcome world (``outcome``, ``outcome:PATH``)."""
    return spec == "outcome" or spec.startswith("outcome:")


def outcome_model_path(spec: str) -> str | None:
    """The model file of an ``outcome`` spec (None: the shipped model). The mode comes from
    ``--modes``; ``outcome:oracle`` / ``outcome:blind`` are refused to avoid two answers."""
    arg = spec.partition(":")[2]
    if arg in ("oracle", "blind"):
        raise ValueError(f"{spec!r}: the modes come from --modes; use 'outcome' or 'outcome:PATH'")
    return arg or None


def model_identity(spec: str) -> dict[str, str]:
    """The model file an ``outcome`` spec loads and the SHA-256 of its bytes (kept with
    every row: rows of another model file are redone, never resumed as this one's)."""
    import hashlib

    from sweworld.transition.outcome.executor import DEFAULT_MODEL

    arg = spec.partition(":")[2]
    path = Path(arg if arg not in ("", "oracle", "blind") else DEFAULT_MODEL)
    if path.is_dir():
        path = path / "model.json"
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        digest = "unreadable"
    return {"path": str(path), "sha256": digest}


def command_argv(command: str) -> list[str]:
    """The argument vector a recorded command ran (``cd /testbed && python x.py`` as the task
    factory records it: the part after the last ``&&``)."""
    text = command.rsplit("&&", 1)[1] if "&&" in command else command
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def session_order(records: Iterable[SWTRecord]) -> dict[str, list[SWTRecord]]:
    """Records by task instance, each instance's in session order (step, call, id)."""
    out: dict[str, list[SWTRecord]] = defaultdict(list)
    for record in records:
        out[record.instance_id].append(record)
    for recs in out.values():
        recs.sort(key=lambda r: (r.step, r.call, r.id))
    return dict(sorted(out.items()))


def base_statuses(records: Iterable[SWTRecord]) -> dict[str, dict[str, str]]:
    """instance -> test id -> its status on the untouched base: read from the instance's
    test runs with an empty diff (the floor "status at base"; a test no such run names is
    FAILED when it is in FAIL_TO_PASS, else PASSED, see :func:`status_at_base`)."""
    from sweworld.train.outcome_data import normal_status

    out: dict[str, dict[str, str]] = defaultdict(dict)
    for record in records:
        if not (record.diff or "").strip() and record.ran_tests:
            for test, status in record.statuses().items():
                out[record.instance_id].setdefault(test, normal_status(status))
    return dict(out)


def status_at_base(record: SWTRecord, test: str, known: dict[str, dict[str, str]]) -> str:
    """A test's status at base for the floor (see :func:`base_statuses`)."""
    from sweworld.tasks.fields import test_list

    found = known.get(record.instance_id, {}).get(test)
    if found:
        return found
    try:
        task = json.loads(record.task) if record.task else {}
    except ValueError:
        task = {}
    return "FAILED" if test in set(test_list(task, "FAIL_TO_PASS")) else "PASSED"


def _labels(
    command: str, stdout: str, stderr: str, exit_code: int, repo: str, ids: list[str] | None
) -> dict[str, str]:
    """Per-test labels of one output, as the outcome model's training labels are made
    (:func:`sweworld.train.outcome_data.test_labels`): the statuses the shared grader reads,
    folded, keyed by the collected ids, completed with PASSED for the collected tests a run
    without ``-rA`` does not name when the final counts line confirms it."""
    from sweworld.bench.similarity import output_statuses
    from sweworld.train.outcome_data import align_statuses, normal_status, test_labels

    argv = command_argv(command)
    parsed = output_statuses(command, stdout + "\n" + stderr, repo or None)
    statuses = align_statuses({k: normal_status(v) for k, v in parsed.items()}, ids)
    exitfirst = "-x" in argv or "--exitfirst" in argv
    return test_labels(statuses, ids, stdout, exit_code, exitfirst)


def label_counts(
    record: SWTRecord, prediction: Any, ids: list[str] | None, known: dict[str, dict[str, str]]
) -> dict[str, int]:
    """Per-test agreement over the record's real labels (:func:`_labels` of the real output):
    ``labeled_n`` tests, ``labeled_agree`` whose label from the predicted output (the same
    labeler) is equal, ``base_floor_agree`` whose status at base is (the floor)."""
    real = _labels(record.command, record.stdout, record.stderr, record.exit_code,
                   record.repo, ids)  # fmt: skip
    if not real:
        return {}
    predicted = _labels(record.command, prediction.stdout, prediction.stderr,
                        prediction.exit_code, record.repo, ids)  # fmt: skip
    return {
        "labeled_n": len(real),
        "labeled_agree": sum(predicted.get(t) == s for t, s in real.items()),
        "base_floor_agree": sum(status_at_base(record, t, known) == s for t, s in real.items()),
    }


def repos_for(data: Sequence[str], extra: Sequence[str]) -> list[Path]:
    """Repositories that may hold the base commits: ``--repos`` (a bare mirror, or a folder
    of ``*.git`` mirrors), ``repos/*.git`` beside each dataset folder, and the folders of
    ``$SWEWORLD_REPO_CACHE`` (``os.pathsep``-separated)."""
    import os

    repos: list[Path] = []
    for entry in extra:
        path = Path(entry)
        mirrors = sorted(path.glob("*.git")) if path.is_dir() and path.suffix != ".git" else []
        repos += mirrors or [path]
    for folder in data:
        path = Path(folder)
        if path.is_dir():
            repos += sorted(path.glob("repos/*.git"))
    for cache in os.environ.get("SWEWORLD_REPO_CACHE", "").split(os.pathsep):
        if cache and Path(cache).is_dir():
            repos += sorted(Path(cache).glob("*.git"))
    return list(dict.fromkeys(repos))


class OutcomeRoute:
    """The outcome executor of one spec in every mode, on rebuilt record states.

    Args:
        spec: ``outcome`` or ``outcome:PATH``.
        modes: ``oracle`` and/or ``blind`` (one executor each: separate ledgers).
        checkouts: a :class:`~sweworld.train.outcome_data.BaseCheckouts`.
        work: a scratch folder for the state on disk (a temporary one by default).
        judge: ``verdict`` (the default world's: an SWR-rewarded world binds its reward as
            the oracle executor's judge of the task's graded tests) or ``none``.
    """

    def __init__(
        self,
        spec: str,
        modes: Sequence[str],
        checkouts: Any,
        work: Path | None = None,
        judge: str = "none",
    ) -> None:
        from sweworld.train.outcome_data import StateDir
        from sweworld.transition.outcome.executor import DEFAULT_MODEL, OutcomeExecutor
        from sweworld.transition.outcome.model import OutcomeModel

        path = outcome_model_path(spec)
        self.model_path = str(path or DEFAULT_MODEL)
        model = OutcomeModel.load(Path(self.model_path))
        self.world = None
        bound = None
        if judge == "verdict":
            from sweworld.world import World, WorldConfig

            self.world = World(WorldConfig(reward="swr", mode="oracle"))

            def bound(task: Any, patch: str) -> bool | None:
                return self.world.rewarder.reward_model.judge(task, patch)

        elif judge != "none":
            raise ValueError(f"judge is verdict or none, not {judge!r}")
        self.executors = {
            mode: OutcomeExecutor(model, mode=mode, judge=bound if mode == "oracle" else None)
            for mode in modes
        }
        self.checkouts = checkouts
        self._own_work = work is None
        if work is None:  # beside the checkouts: the state is a hard-linked copy of one
            cache = Path(getattr(checkouts, "cache", tempfile.gettempdir()))
            cache.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".swt-outcome-", dir=cache))
        self.work = Path(work)
        self.state = StateDir(self.work / "ws")

    def close(self) -> None:
        if self.world is not None:
            self.world.close()
        if self._own_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def checkout(self, record: SWTRecord) -> Path | None:
        """The base checkout of ``record``'s session (None: no repository holds it)."""
        if record.state_source == "trajectory":
            return None
        try:
            task = json.loads(record.task) if record.task else {}
        except ValueError:
            task = {}
        try:
            return self.checkouts.for_task(task if isinstance(task, dict) else {},
                                           record.base_commit)  # fmt: skip
        except Exception:  # a repository that cannot be read: no state
            return None

    def answer(self, record: SWTRecord, base: Path) -> dict[str, Any]:
        """Mode -> ``(result, wall seconds, rebuild seconds)`` for ``record`` on ``base``
        plus its diff (the state is rebuilt once for every mode), and ``ids``: the tests a
        test command collects on that state (None for other commands)."""
        from sweworld.sandbox.executor import ExecutionRequest

        started = time.perf_counter()
        changed = self.state.set(base, record.diff or "")
        rebuild_s = time.perf_counter() - started
        try:
            task = json.loads(record.task) if record.task else None
        except ValueError:
            task = None
        try:
            env = {str(k): str(v) for k, v in json.loads(record.env or "{}").items()}
        except (ValueError, AttributeError):
            env = {}
        out: dict[str, Any] = {}
        from sweworld.train.outcome_data import collected_ids
        from sweworld.transition.outcome.features import TEST_RUNNER_KINDS, command_kind_of

        argv = command_argv(record.command)
        ids = None
        if command_kind_of(argv) in TEST_RUNNER_KINDS:
            ids = collected_ids(
                self.state.path, argv, record.cwd or "/testbed", exact_only=False, task=task
            )
        out["ids"] = ids
        for mode, executor in self.executors.items():
            request = ExecutionRequest(
                argv=tuple(command_argv(record.command)) or (record.command,),
                cwd=record.cwd or "/testbed",
                stdin=(record.stdin or "").encode("utf-8", "replace"),
                env=env,
                workspace=self.state.path,
                task=task,
                session_id=f"{record.instance_id}\x1f{mode}",
                base=base,
                base_commit=record.base_commit,
                changes=lambda c=changed: SimpleNamespace(written=list(c), deleted=[]),
            )
            t0 = time.perf_counter()
            result = executor.execute(request)
            out[mode] = (result, time.perf_counter() - t0, rebuild_s)
        return out

    def run(
        self,
        records: Sequence[SWTRecord],
        todo: Callable[[SWTRecord], bool],
        emit: Callable[[SWTRecord, str, Any, float, float, list[str] | None], None],
        skip: Callable[[str], None],
    ) -> None:
        """Answer ``records`` instance by instance in session order; an instance with any
        record still ``todo`` is answered from its first record (the ledger needs the earlier
        steps), and ``emit(record, mode, result, latency_s, rebuild_s, test_ids)`` is called
        for every record answered (``test_ids``: what pytest would collect on its state);
        ``skip(reason)`` for a record without a state."""
        for executor in self.executors.values():
            for session in {f"{r.instance_id}\x1f{executor.mode}" for r in records}:
                executor.forget(session)
        for recs in session_order(records).values():
            if not any(todo(r) for r in recs):
                continue
            for record in recs:
                base = self.checkout(record)
                if base is None:
                    skip("outcome: no base checkout (commit in no --repos)")
                    continue
                try:
                    answers = self.answer(record, base)
                except Exception as exc:  # one unreadable state does not stop the run
                    skip(f"outcome: state or executor failed ({type(exc).__name__})")
                    continue
                ids = answers.pop("ids")
                for mode, (result, latency, rebuild) in answers.items():
                    emit(record, mode, result, latency, rebuild, ids)
