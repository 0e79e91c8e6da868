"""Shared types of the SWR pipeline: a candidate's changed files, stage results, rewards.

A candidate patch is seen through a :class:`CandidateView`: for every file it touches, the
text before and after (``scope == "files"``, when the task's base checkout is available) or
only the hunks' two sides (``scope == "hunks"``, when it is not: e.g. SWE-bench rows without
the repository). Every stage is a :class:`RewardStage`: a pure-ish function of a
:class:`RewardContext` that returns a :class:`StageResult` and never raises for bad input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Verdict = Literal["pass", "fail", "skip", "error"]
Mode = Literal["oracle", "blind"]
Scope = Literal["files", "hunks"]

VERDICTS: tuple[str, ...] = ("pass", "fail", "skip", "error")


@dataclass
class ChangedFile:
    """One file a patch touches.

    Attributes:
        path: path after the change (the old path for deletions), relative to the repo root.
        old_path: path before the change (differs from ``path`` for renames).
        status: ``added``, ``deleted``, ``modified`` or ``renamed``.
        before / after: whole text before / after (None: the file does not exist on that
            side, or the text is unknown because only hunks are available, see ``scope``).
        before_fragments / after_fragments: each hunk's old / new side (always filled for
            text patches; context lines included, in hunk order).
        binary: the patch changes the file as binary data (a ``GIT binary patch`` or
            ``Binary files ... differ``).
        is_python: the path ends in ``.py`` or ``.pyi``.
        is_test: the path is a test file or test-runner configuration (see
            :func:`sweworld.tasks.patches.is_test_path`).
        error: why the text is not usable (not UTF-8, too large), or None.
    """

    path: str
    old_path: str | None = None
    status: str = "modified"
    before: str | None = None
    after: str | None = None
    before_fragments: list[str] = field(default_factory=list)
    after_fragments: list[str] = field(default_factory=list)
    binary: bool = False
    is_python: bool = False
    is_test: bool = False
    error: str | None = None


@dataclass
class CandidateView:
    """A candidate patch resolved against the base.

    ``scope`` is ``files`` when ``before`` / ``after`` hold whole files, ``hunks`` when only
    fragments are known. ``apply_error`` says why the patch could not be applied to the base
    (then ``files`` still lists what the diff names, with fragments only).
    """

    patch: str
    files: list[ChangedFile] = field(default_factory=list)
    scope: Scope = "hunks"
    apply_error: str | None = None
    parse_error: str | None = None

    @property
    def empty(self) -> bool:
        """No file is changed (empty or whitespace-only diff)."""
        return not self.files and not self.parse_error


@dataclass
class StageResult:
    """What one stage found.

    Attributes:
        stage: the stage's name (``syntax``, ``typecheck``, ``semantic``, ``tests``).
        verdict: ``pass`` / ``fail`` (the candidate is judged bad: later stages may be
            skipped), ``skip`` (stage not applicable or not run; ``message`` says why) or
            ``error`` (the stage itself failed; treated as no evidence).
        score: the stage's estimate that the candidate resolves the task, in [0, 1], or None
            when the stage gives no such estimate.
        short_circuit: stop here: the final score is 0 without running later stages.
        message: one human line.
        evidence: machine-readable details (files, lines, error lists, flags, samples).
        latency_s: wall time spent in the stage.
    """

    stage: str
    verdict: Verdict
    score: float | None = None
    short_circuit: bool = False
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.score is not None and not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RewardContext:
    """Everything a stage may read.

    Attributes:
        task: the :class:`~sweworld.tasks.schema.Task`.
        candidate: the candidate patch's view.
        mode: ``oracle`` (gold patch, test patch and test lists may be used) or ``blind``
            (none of them).
        gold: the gold patch's view in oracle mode (None in blind mode or when the task has
            no gold patch).
        base_dir: the task's base checkout on the host, when available.
        results: results of the stages already run, by stage name.
        deadline: ``time.monotonic()`` value by which the whole score is due (None: only
            each stage's own limit); a stage that runs a process stops it there, and stages
            not started by then are not run.
    """

    task: Any
    candidate: CandidateView
    mode: Mode = "oracle"
    gold: CandidateView | None = None
    base_dir: Any = None
    results: dict[str, StageResult] = field(default_factory=dict)
    deadline: float | None = None

    def time_left(self, limit: float) -> float:
        """Seconds a stage may take: ``limit``, or less when the deadline is nearer (never
        negative)."""
        if self.deadline is None:
            return limit
        import time

        return max(0.0, min(limit, self.deadline - time.monotonic()))


@runtime_checkable
class RewardStage(Protocol):
    """One stage of the reward pipeline. ``run`` must not raise for bad input: it returns a
    ``StageResult`` with verdict ``error`` and a message instead."""

    name: str

    def run(self, ctx: RewardContext) -> StageResult: ...
