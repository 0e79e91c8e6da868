"""Labelled candidates for the verdict, and their features in both modes.

Sources (deduplicated by task and patch text):

* SWR datasets written by ``sweworld data`` / ``sweworld data build-outcome`` (HF
  ``datasets`` folders, or folders holding them): factory candidates (right / partial /
  wrong / empty / test-edit, labelled by real runs) and imported Verified candidates;
* the shared mini-swe-agent run (``mini-swe-agent-gemini3-verified.tar.gz``, read with the
  project's importer :func:`sweworld.data.importers.mini_swe_agent.read`): every
  submission with its harness ``report.json`` label, the gold patches and the leaderboard
  patches that resolved each task (positives), on every repository, including those whose
  checkout is not available here (their features that need the base are missing values).

:func:`feature_rows` scores each candidate with :class:`~sweworld.reward.model.RewardModel`
(the exact stages, no verdict, no LM) and keeps ``result.features``: the exact inputs the
shipped verdict reads at scoring time.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Candidate", "candidate_key", "decoy_candidates", "feature_rows", "load_candidates"]


@dataclass
class Candidate:
    """One labelled candidate patch."""

    instance_id: str
    repo: str
    patch: str
    resolved: bool
    task: dict[str, Any]
    source: str = ""
    kind: str = ""
    features: dict[str, dict[str, float]] = field(default_factory=dict)
    hard: dict[str, str | None] = field(default_factory=dict)


def candidate_key(instance_id: str, patch: str) -> str:
    return instance_id + ":" + hashlib.sha256(patch.strip().encode()).hexdigest()[:16]


def _datasets(path: Path) -> Iterator[Any]:
    import datasets

    if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
        loaded = datasets.load_from_disk(str(path))
        yield from loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
        return
    for child in sorted(path.glob("*/")):
        if child.name == "swr":
            yield from _datasets(child)
        elif (child / "swr").is_dir():
            yield from _datasets(child / "swr")


def _from_dataset(path: Path) -> Iterator[Candidate]:
    for ds in _datasets(path):
        for row in ds:
            resolved = row["resolved"]
            if isinstance(resolved, str):
                resolved = resolved.strip().lower() == "true"
            task = json.loads(row["task"]) if row.get("task") else {}
            yield Candidate(
                str(row["instance_id"]),
                str(row["repo"]),
                str(row["patch"] or ""),
                bool(resolved),
                task,
                str(row.get("source") or ""),
                str(row.get("candidate_kind") or ""),
            )


def _from_shared(tarball: Path) -> Iterator[Candidate]:
    from sweworld.data.importers.mini_swe_agent import read
    from sweworld.data.schema import SWRRecord, Trajectory

    for item in read(tarball):
        if isinstance(item, Trajectory):
            if item.report is None:
                continue
            yield Candidate(
                item.instance_id,
                item.repo,
                item.submission or "",
                bool(item.report.get("resolved")),
                dict(item.task),
                "mini-swe-agent",
                "agent",
            )
        elif isinstance(item, SWRRecord):
            yield Candidate(
                item.instance_id,
                item.repo,
                item.patch,
                bool(item.resolved),
                json.loads(item.task) if item.task else {},
                "mini-swe-agent",
                item.candidate_kind or "",
            )


def load_candidates(data: Iterable[str | Path]) -> list[Candidate]:
    """Every labelled candidate under ``data`` (SWR dataset folders, folders holding them, or
    the shared mini-swe-agent tarball), deduplicated by task and patch (first seen wins)."""
    seen: dict[str, Candidate] = {}
    for spec in data:
        path = Path(spec)
        items = _from_shared(path) if path.is_file() else _from_dataset(path)
        for cand in items:
            key = candidate_key(cand.instance_id, cand.patch)
            if key not in seen:
                seen[key] = cand
            elif not seen[key].task.get("test_patch") and cand.task.get("test_patch"):
                seen[key].task = cand.task
    return list(seen.values())


#: Decoy additions: code nothing uses (a constant, a function, a class), by shape.
_DECOY_BODIES = (
    ("return None",),
    ("result = value", "return result"),
    ("if value is None:", "    return default", "return value"),
    ("items = list(value or ())", "items.sort()", "count = len(items)", "return items, count"),
    (
        "total = 0",
        "for item in value or ():",
        "    if item is None:",
        "        continue",
        "    total += len(str(item))",
        "return total or default",
    ),
)


def _decoy_helper(instance_id: str, patch: str) -> str:
    """Code appended to a module that nothing refers to, in one of several shapes."""
    digest = hashlib.sha256(f"{instance_id}\0{patch}".encode()).digest()
    name = f"_{('helper', 'normalize', 'coerce', 'lookup')[digest[1] % 4]}_{digest[2:4].hex()}"
    shape = digest[0] % 8
    if shape == 5:
        lines = [f"{name}_value = {digest[4] % 100}"]
    elif shape == 6:
        lines = [f"{name}_pair = ({digest[4] % 10}, {digest[5] % 10})", f"{name}_limit = 64"]
    elif shape == 7:
        cls = "_" + name.strip("_").title().replace("_", "")
        lines = [f"class {cls}:", "    def __init__(self, value=None):"]
        lines.append("        self.value = value")
    else:
        body = _DECOY_BODIES[shape]
        lines = [f"def {name}(value=None, default=None):", *(f"    {line}" for line in body)]
    return "\n\n" + "\n".join(lines) + "\n"


def _decoys_of(task_patch: str, base: Path, helper: str) -> tuple[str, str] | None:
    """(decoy, gold_decoy) patches of one task, or None when the gold patch's first source
    file cannot take them exactly (not text, the gold hunks do not apply byte for byte)."""
    from sweworld.reward.candidate import view_candidate
    from sweworld.tasks.patch_paths import is_test_path, split_lines
    from sweworld.tasks.patches import apply_hunks, split_patch
    from sweworld.tasks.unified_diff import make_unified_diff
    from sweworld.transition.outcome.graded import MAX_JUDGED_FILE_BYTES, read_raw_text

    try:
        parts = split_patch(task_patch)
    except Exception:
        return None
    sources = [
        p
        for p in parts
        if p.path.endswith(".py") and not is_test_path(p.path) and p.status == "modified"
    ]
    if not sources or "settings" in sources[0].path or "conf" in sources[0].path.split("/"):
        return None  # a settings module reads every upper-case name it defines
    target = sources[0]
    readable, old = read_raw_text(base, target.path, MAX_JUDGED_FILE_BYTES)
    if not readable or old is None:
        return None
    applied = apply_hunks(split_lines(old), target.hunks, offsets=False)
    if applied is None:
        return None
    fixed = "".join(applied[0])
    decoy = make_unified_diff(target.path, old, old + helper)
    beside = make_unified_diff(target.path, old, fixed + helper)
    both = "".join(beside if p is target else p.text for p in parts)
    for patch, files in ((decoy, 1), (both, len(parts))):
        view = view_candidate(patch, base_dir=base)
        if view.apply_error or view.scope != "files" or len(view.files) != files:
            return None
    return decoy, both


def decoy_candidates(candidates: Sequence[Candidate], checkouts: Any) -> list[Candidate]:
    """Candidates whose label follows from SWE-bench's rule without a run, made from each
    task's gold patch where a base checkout is found: ``decoy`` adds code nothing refers to
    (a private constant, function or class) to the end of the first source file the gold
    patch changes (a change in the right file that cannot change any test's outcome, so the
    FAIL_TO_PASS tests still fail: unresolved), and ``gold_decoy`` adds the same beside the
    gold patch (the gold patch's behaviour: resolved). Together they teach that an edit in
    the right place is not a fix by itself, and that extra code beside a fix does not undo
    it. A task whose patches do not apply exactly to its checkout gets none."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for cand in candidates:
        patch = str(cand.task.get("patch") or (cand.patch if cand.kind == "gold" else ""))
        if cand.instance_id in seen or not patch.strip() or checkouts is None:
            continue
        seen.add(cand.instance_id)
        base = checkouts.for_task(cand.task, str(cand.task.get("base_commit") or ""))
        made = (
            _decoys_of(patch, Path(base), _decoy_helper(cand.instance_id, patch)) if base else None
        )
        if made is None:
            continue
        for kind, text, resolved in zip(("decoy", "gold_decoy"), made, (False, True), strict=True):
            out.append(
                Candidate(cand.instance_id, cand.repo, text, resolved, cand.task, "decoy", kind)
            )
    return out


def feature_rows(
    candidates: Sequence[Candidate],
    checkouts: Any,
    modes: Sequence[str] = ("oracle", "blind"),
    *,
    outcome: str | None = None,
    progress: bool = True,
) -> None:
    """Fill ``features[mode]`` and ``hard[mode]`` (the stage that stopped the candidate, or
    None) of every candidate, scoring it with the exact stages and the outcome model."""
    from sweworld.reward.model import RewardModel, SWRConfig

    models = {
        mode: RewardModel(
            SWRConfig(
                mode=mode,
                stages=("syntax", "semantic"),
                calibration=None,
                verdict=None,
                outcome=outcome,
            )
        )
        for mode in modes
    }
    started = time.perf_counter()
    tasks: dict[str, Any] = {}
    for i, cand in enumerate(candidates):
        task = tasks.get(cand.instance_id + str(len(cand.task)))
        if task is None:
            task = _task(cand)
            tasks[cand.instance_id + str(len(cand.task))] = task
        base = (
            checkouts.for_task(cand.task, str(cand.task.get("base_commit") or ""))
            if (checkouts is not None)
            else None
        )
        for mode in modes:
            result = models[mode].score(task, cand.patch, base_dir=base or False)
            cand.features[mode] = dict(result.evidence)
            cand.hard[mode] = result.info.get("short_circuit") or (
                "unanalysable" if result.info.get("unanalysable") else None
            )
        if progress and (i + 1) % 200 == 0:
            rate = (i + 1) / (time.perf_counter() - started)
            print(f"  features: {i + 1}/{len(candidates)} ({rate:.1f}/s)", file=sys.stderr)


def _task(cand: Candidate) -> Any:
    """A task object for the reward model (a raw row when it does not validate)."""
    from sweworld.tasks.schema import Task

    row = dict(cand.task)
    row.setdefault("instance_id", cand.instance_id)
    row.setdefault("repo", cand.repo)
    row.setdefault("base_commit", "")
    row.setdefault("problem_statement", "")
    try:
        return Task.from_row(row)
    except Exception:
        return row


def add_outcome_features(
    candidates: Sequence[Candidate], checkouts: Any, model: Any, *, progress: bool = True
) -> int:
    """Fill the ``oc_*`` features (oracle mode) of candidates no exact stage stopped, with the
    outcome model ``model`` (a loaded model or a path): the same function the reward calls
    (:func:`sweworld.reward.test_outcomes.predicted_test_features`). Returns how many got
    a prediction."""
    from sweworld.reward.test_outcomes import TestPredictor

    predictor = TestPredictor(None if model == "default" else model)
    done = 0
    started = time.perf_counter()
    for i, cand in enumerate(candidates):
        feats = cand.features.get("oracle")
        if feats is None or cand.hard.get("oracle") is not None:
            continue
        base = checkouts.for_task(cand.task, str(cand.task.get("base_commit") or ""))
        if base is None:
            continue
        try:
            got = predictor.predict(_task(cand), cand.patch, base, "oracle")
        except Exception as exc:  # a candidate the features cannot read: missing values
            print(f"  outcome features failed on {cand.instance_id}: {exc}", file=sys.stderr)
            continue
        if got is not None:
            feats.update(got[0])
            done += 1
        if progress and (i + 1) % 200 == 0:
            rate = (i + 1) / (time.perf_counter() - started)
            print(f"  outcome: {i + 1}/{len(candidates)} ({rate:.1f}/s)", file=sys.stderr)
    return done
