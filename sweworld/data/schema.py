"""The data schema: SWT and SWR training/evaluation examples, versioned.

Two record kinds, both flat (strings, integers, booleans; nested values as JSON strings), so
that every source writes the same columns and ``datasets`` stores them as Arrow without a
per-source schema:

* :class:`SWTRecord`: one execution command at one state of a workspace, with what really
  happened (stdout, stderr, exit code, per-test statuses when it ran tests) and the SWT
  contexts built for it, exactly as :class:`~sweworld.transition.simulated.SimulatedExecutor`
  builds them at inference (``context_oracle`` / ``context_blind``: the JSON of
  :meth:`SWTContext.to_dict`; empty when the state could not be rebuilt).
* :class:`SWRRecord`: one candidate patch for a task, with its real label (resolved, the
  per-test statuses of the harness or of a real run) and where the label came from.

Every record carries ``repo``: datasets are split **by repository** (:func:`split_of`), never
by row, so that a test split holds only repositories the training split never saw.

``SCHEMA_VERSION`` changes whenever a column is added, removed or changes meaning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

__all__ = [
    "DEFAULT_HELDOUT_REPOS",
    "SCHEMA_VERSION",
    "STATE_SOURCES",
    "SWRRecord",
    "SWTRecord",
    "Trajectory",
    "TrajectoryStep",
    "command_kind",
    "features",
    "parse_meta",
    "record_from_dict",
    "split_heldout",
    "split_of",
]

SCHEMA_VERSION = "sweworld-data/1"

#: Repositories kept out of training by default: a quarter and more of the shared
#: SWE-bench repositories (the ones whose sources are in the repo cache, so their examples
#: are replayed exactly) plus a factory library.
DEFAULT_HELDOUT_REPOS: tuple[str, ...] = (
    "pytest-dev/pytest",
    "psf/requests",
    "pallets/flask",
    "mwaskom/seaborn",
    "pypi/inflection",
)

#: How the state of an SWT example was obtained:
#: ``replay``: the trajectory's file operations were replayed for real in a session on the
#: repository at its base commit (the context is what SWT sees at inference);
#: ``live``: recorded while the command ran for real (collect mode, the task factory);
#: ``trajectory``: no repository was available; the context holds what the trajectory
#: itself showed (problem, history, command), not the workspace. Marked, never mixed up.
STATE_SOURCES = ("replay", "live", "trajectory")


def command_kind(command: str) -> str:
    """A coarse kind of an execution command, for per-kind figures: ``pytest`` (pytest or
    ``python -m pytest``, also Django's ``runtests.py`` and ``tox``-less test runners),
    ``unittest``, ``python_c``, ``python_module``, ``python_script`` or ``other``."""
    words = command.replace("&&", " ").replace(";", " ").replace("|", " ").split()
    text = " ".join(words)
    if "pytest" in text or "py.test" in text or "runtests.py" in text or "bin/test" in text:
        return "pytest"
    if "unittest" in text:
        return "unittest"
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if base.startswith("python"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if nxt == "-c":
                return "python_c"
            if nxt == "-m":
                return "python_module"
            if nxt.endswith(".py") or nxt == "-" or nxt.startswith("<"):
                return "python_script"
            return "python_script" if nxt else "other"
    return "other"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def record_id(*parts: Any) -> str:
    """A stable id from the parts that identify a record (source, instance, step, ...)."""
    blob = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(blob.encode("utf-8", "replace")).hexdigest()[:24]


@dataclass
class SWTRecord:
    """One execution command at one workspace state, and what really happened.

    Attributes:
        id: stable id (resume and de-duplication key).
        source: where it came from (``mini-swe-agent``, ``swe-agent``, ``r2e-gym``,
            ``rllm``, ``swebench``, ``sweworld``, ``factory``, ``collect``).
        instance_id, repo, base_commit: the task.
        task: the task row (``Task.to_row()``) as JSON.
        step: index of the agent's step in its trajectory; ``call``: index of the
            executor call within that step (a step may run several commands).
        state_source: one of :data:`STATE_SOURCES`.
        command, cwd, stdin, env: the execution request (``env`` as a JSON object).
        diff: ``git diff`` of the workspace against the base when the command ran.
        history: the earlier execution steps of the episode, JSON list of
            ``{command, exit_code, output}`` (outputs cut to their last 4,000 characters).
        context_oracle, context_blind: the SWT contexts (JSON of ``SWTContext.to_dict()``);
            empty when no context could be built.
        stdout, stderr, exit_code: the real result. ``streams`` is ``separate`` or
            ``merged`` (the source recorded stdout and stderr as one text, in ``stdout``).
        output_truncated: the source kept only part of the output (head / tail).
        ran_tests: the command ran tests; ``test_statuses``: JSON ``{test id: status}``
            read from the output by the shared grader's parser.
        command_kind: :func:`command_kind` of the command.
        consistent: replaying the whole step reproduced the recorded output (only
            meaningful for ``replay``; True for ``live``).
        prediction: the simulator's answer beside the truth (JSON ``{stdout, stderr,
            exit_code, source}``), empty when none was asked for.
        meta: anything else, JSON.
    """

    kind: ClassVar[str] = "swt"

    id: str
    source: str
    instance_id: str
    repo: str
    command: str
    stdout: str
    stderr: str
    exit_code: int
    base_commit: str = ""
    task: str = ""
    step: int = 0
    call: int = 0
    state_source: str = "live"
    cwd: str = "/testbed"
    stdin: str = ""
    env: str = "{}"
    diff: str = ""
    history: str = "[]"
    context_oracle: str = ""
    context_blind: str = ""
    streams: str = "separate"
    output_truncated: bool = False
    ran_tests: bool = False
    test_statuses: str = "{}"
    command_kind: str = "other"
    consistent: bool = True
    prediction: str = ""
    meta: str = "{}"
    schema_version: str = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def context(self, mode: str = "oracle") -> Any:
        """The stored :class:`~sweworld.transition.context.SWTContext` for ``mode``, or None."""
        from sweworld.transition.context import SWTContext

        text = self.context_oracle if mode == "oracle" else self.context_blind
        if not text:
            return None
        data = json.loads(text)
        data["truncated"] = {str(k): int(v) for k, v in (data.get("truncated") or {}).items()}
        return SWTContext(**data)

    def statuses(self) -> dict[str, str]:
        return json.loads(self.test_statuses or "{}")


@dataclass
class SWRRecord:
    """One candidate patch for a task and its real label.

    Attributes:
        id, source, instance_id, repo, base_commit, task: as in :class:`SWTRecord`.
        patch: the candidate (unified diff).
        resolved: the real verdict.
        tests_status: JSON in the harness's ``report.json`` shape:
            ``{"FAIL_TO_PASS": {"success": [...], "failure": [...]}, "PASS_TO_PASS": ...}``
            (empty object when the label gives no per-test statuses).
        label_source: ``harness-report`` (an official SWE-bench report), ``real-run``
            (sweworld ran the tests for real), ``leaderboard`` (a patch a leaderboard
            system resolved the task with: positive, no per-test statuses).
        candidate_kind: ``agent``, ``gold``, ``leaderboard``, ``right``, ``alt``,
            ``partial``, ``wrong``, ``overreach``, ``empty``, ``test_edit``, ``decoy``,
            ``gold_decoy``, ...
        meta: JSON.
    """

    kind: ClassVar[str] = "swr"

    id: str
    source: str
    instance_id: str
    repo: str
    patch: str
    resolved: bool
    base_commit: str = ""
    task: str = ""
    tests_status: str = "{}"
    label_source: str = "real-run"
    candidate_kind: str = "agent"
    meta: str = "{}"
    schema_version: str = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RECORD_TYPES: dict[str, type] = {"swt": SWTRecord, "swr": SWRRecord}


def parse_meta(meta: Any) -> dict[str, Any]:
    """A record's ``meta`` (JSON text, or a mapping already) as a new dict; empty when it is
    missing or not a JSON object (a torn or foreign value is read as no meta)."""
    if isinstance(meta, Mapping):
        return dict(meta)
    try:
        value = json.loads(meta or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def record_from_dict(kind: str, row: Mapping[str, Any]) -> SWTRecord | SWRRecord:
    """Rebuild a record from a stored row (unknown columns are ignored, so that a reader
    of this version reads rows written by a later one that only added columns)."""
    cls = RECORD_TYPES[kind]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in row.items() if k in names})


def features(kind: str) -> Any:
    """The ``datasets.Features`` of a record kind."""
    import datasets

    types = {str: "string", int: "int64", bool: "bool"}
    cls = RECORD_TYPES[kind]
    out = {}
    for f in fields(cls):
        py = f.type if isinstance(f.type, type) else {"str": str, "int": int, "bool": bool}[f.type]
        out[f.name] = datasets.Value(types[py])
    return datasets.Features(out)


def split_heldout(
    heldout: Iterable[str] | None, split: str = "auto", repo: str | None = None
) -> tuple[str, ...]:
    """The held-out repositories (``None``: :data:`DEFAULT_HELDOUT_REPOS`) with ``repo``'s
    records sent to ``split``: ``auto`` (as the list says), ``train`` (taken off the list)
    or ``test`` (put on it)."""
    held = tuple(DEFAULT_HELDOUT_REPOS if heldout is None else heldout)
    if repo is None or split == "auto":
        return held
    if split == "train":
        return tuple(r for r in held if r != repo)
    if split == "test":
        return held if repo in held else (*held, repo)
    raise ValueError(f"split must be auto, train or test, not {split!r}")


def split_of(repo: str, heldout: Iterable[str] = DEFAULT_HELDOUT_REPOS) -> str:
    """``test`` for a held-out repository, else ``train``."""
    return "test" if repo in set(heldout) else "train"


# ------------------------------------------------------------------------------------------
# What importers read a trajectory into (before it is replayed into SWT records)
# ------------------------------------------------------------------------------------------


@dataclass
class TrajectoryStep:
    """One action of an agent and what it observed.

    ``command``: the bash command (tool calls are rendered to the equivalent command, or kept
    as the tool action string in ``action`` with ``command`` empty); ``output``: what the
    agent saw (stdout and stderr merged unless ``stderr`` is given separately);
    ``exit_code``: None when the source did not record one; ``output_truncated``: the source
    kept only part of the output.
    """

    command: str
    output: str = ""
    exit_code: int | None = None
    stderr: str | None = None
    output_truncated: bool = False
    action: str = ""


@dataclass
class Trajectory:
    """An agent run on one task: its steps, final patch and (when known) real label.

    ``task`` is a task row (SWE-bench shaped; may lack the test lists); ``report`` the
    harness report of the submission when the source has one: ``{"resolved": bool,
    "tests_status": {...}}``.
    """

    source: str
    instance_id: str
    repo: str
    task: dict[str, Any]
    steps: list[TrajectoryStep] = field(default_factory=list)
    submission: str = ""
    report: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def base_commit(self) -> str:
        return str(self.task.get("base_commit") or "")


def to_json(value: Any) -> str:
    """JSON for a record's JSON-string column (sorted keys, non-ASCII kept)."""
    return _json(value)
