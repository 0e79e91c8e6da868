"""Candidate patches (N per task) for best-of-N verification, and their labels.

:func:`load_candidates` reads, and merges in the order given:

* **SWE-bench predictions**: ``preds.json`` as a dict ``instance_id -> {instance_id,
  model_name_or_path, model_patch}`` or a list of such dicts (``.json`` / ``.json.gz``);
* **JSONL** (``.jsonl`` / ``.jsonl.gz`` / ``.ndjson``): one such dict per line. The patch
  is read from ``candidate_patch``, else ``model_patch``, else ``patch`` (in that order: an
  SWR example row carries the task's gold ``patch`` beside its ``candidate_patch``). An
  optional ``resolved`` (or ``label``) is the label;
* **mini-swe-agent trajectories**: one ``*.traj.json`` file, a directory holding them (at
  any depth), or a ``.tar.gz`` / ``.tgz`` / ``.tar`` of such a directory. The patch is
  ``info.submission``; the instance id the file's ``instance_id`` or, when absent, the file
  name. When the directory or archive also holds the official harness reports
  (``logs/<id>/report.json``) their ``resolved`` becomes the label and ``tests_status``
  goes to ``meta``. A directory or archive without trajectories is read through its
  ``preds.json``.

Several candidates per instance are kept in order; exact duplicate patches are dropped only
with ``dedupe=True``. Errors are :class:`CandidateLoadError` (a ``ValueError``) naming the
file and the line, item or member, or ``FileNotFoundError``.

:func:`write_predictions` writes the selected patches back in SWE-bench's predictions format,
and :func:`load_verified_labelled` builds the labelled SWE-bench Verified benchmark from the
shared data (see its docstring).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.reward.candidate_files import (
    Candidate,
    CandidateLoadError,
    iter_candidate_source,
    iter_tar_candidates,
)
from sweworld.tasks.loaders import iter_json_lines
from sweworld.tasks.schema import Task, parse_test_list

__all__ = [
    "MINI_SWE_AGENT_SOURCE",
    "Candidate",
    "CandidateLoadError",
    "dedupe_candidates",
    "load_candidates",
    "load_verified_labelled",
    "write_predictions",
]

MINI_SWE_AGENT_SOURCE = "mini-swe-agent-gemini3"
VERIFIED_FILE = "swebench_verified_resolved_patches.jsonl.gz"
LITE_FILE = "swebench_lite.jsonl.gz"
MINI_SWE_AGENT_FILE = "mini-swe-agent-gemini3-verified.tar.gz"

# Task fields taken from SWE-bench Lite when the Verified instance is also in Lite.
_LITE_FIELDS = ("test_patch", "version", "environment_setup_commit", "hints_text", "created_at")


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------


def load_candidates(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    dedupe: bool = False,
) -> dict[str, list[Candidate]]:
    """Candidates per instance id from one or several files / directories (merged in order).

    With ``dedupe``, a candidate whose patch is exactly that of an earlier candidate of the
    same instance is dropped; the kept one lists the dropped ones in
    ``meta["duplicates"]`` (source and label) and gets ``meta["label_conflict"] = True``
    when their labels disagree (its own label is kept).
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out: dict[str, list[Candidate]] = {}
    for path in paths:
        for candidate in iter_candidate_source(Path(path)):
            out.setdefault(candidate.instance_id, []).append(candidate)
    return dedupe_candidates(out) if dedupe else out


def write_predictions(
    selected: Mapping[str, str | Candidate | None],
    path: str | os.PathLike[str],
    model_name: str = "sweworld-verify",
) -> Path:
    """Write SWE-bench predictions: a JSON dict keyed by instance id of
    ``{instance_id, model_name_or_path, model_patch}`` (one such object per line when the
    path ends in ``.jsonl``). Values may be patches, candidates, or None (no patch)."""
    rows: dict[str, dict[str, Any]] = {}
    for instance_id, value in selected.items():
        patch = value.patch if isinstance(value, Candidate) else value
        if patch is not None and not isinstance(patch, str):
            raise TypeError(f"{instance_id}: expected a patch string, got {type(patch).__name__}")
        rows[instance_id] = {
            "instance_id": instance_id,
            "model_name_or_path": model_name,
            "model_patch": patch,
        }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.name.lower().endswith(".jsonl"):
        text = "".join(json.dumps(row) + "\n" for row in rows.values())
    else:
        text = json.dumps(rows, indent=2) + "\n"
    out.write_text(text, encoding="utf-8")
    return out


# ------------------------------------------------------------------------------------------
# Deduplication
# ------------------------------------------------------------------------------------------


def dedupe_candidates(groups: dict[str, list[Candidate]]) -> dict[str, list[Candidate]]:
    """Drop exact duplicate patches within each instance (see :func:`load_candidates`)."""
    out: dict[str, list[Candidate]] = {}
    for instance_id, group in groups.items():
        kept: dict[str, Candidate] = {}
        for candidate in group:
            first = kept.get(candidate.patch)
            if first is None:
                kept[candidate.patch] = candidate
                continue
            first.meta.setdefault("duplicates", []).append(
                {"source": candidate.source, "label": candidate.label}
            )
            if None not in (first.label, candidate.label) and first.label != candidate.label:
                first.meta["label_conflict"] = True
        out[instance_id] = list(kept.values())
    return out


# ------------------------------------------------------------------------------------------
# The labelled SWE-bench Verified benchmark (shared data)
# ------------------------------------------------------------------------------------------


def _read_jsonl_gz(path: Path) -> list[dict[str, Any]]:
    rows = []
    for where, row in iter_json_lines(path, error=CandidateLoadError):
        if not isinstance(row, dict):
            raise CandidateLoadError(f"{where}: expected an object")
        rows.append(row)
    return rows


def _read_mini_swe_agent(path: Path) -> tuple[dict[str, Candidate], dict[str, dict[str, Any]]]:
    """Submissions (as candidates, labelled by the reports) and reports of the tarball."""
    runs: dict[str, Candidate] = {}
    reports: dict[str, dict[str, Any]] = {}
    for candidate in iter_tar_candidates(path):
        candidate.source = MINI_SWE_AGENT_SOURCE
        runs[candidate.instance_id] = candidate
        if candidate.label is not None:
            reports[candidate.instance_id] = {
                "resolved": candidate.label,
                "tests_status": candidate.meta.get("tests_status") or {},
            }
    return runs, reports


def _test_lists(tests_status: Mapping[str, Any], key: str) -> list[str]:
    part = tests_status.get(key) or {}
    return [*part.get("success", []), *part.get("failure", [])]


def load_verified_labelled(
    shared_dir: str | os.PathLike[str], *, dedupe: bool = False
) -> tuple[list[Task], dict[str, list[Candidate]]]:
    """The labelled best-of-N benchmark on SWE-bench Verified, from the shared data folder.

    Tasks come from ``swebench_verified_resolved_patches.jsonl.gz`` (problem statement,
    gold patch, base commit, repo). Those rows have no test lists, so ``FAIL_TO_PASS`` /
    ``PASS_TO_PASS`` are the tests the official harness graded in the mini-swe-agent run
    (``tests_status`` of ``logs/<id>/report.json``: success + failure lists). ``test_patch``,
    ``version``, ``environment_setup_commit``, ``hints_text`` and ``created_at`` come from
    ``swebench_lite.jsonl.gz`` when the instance is also in Lite (else empty / None).
    ``Task.meta`` records ``in_lite``, ``test_lists_from`` and, for Lite instances,
    ``test_lists_match_lite``.

    Candidates per task, in this order: the mini-swe-agent submission (source
    ``mini-swe-agent-gemini3``, label = the report's ``resolved``, ``tests_status`` in
    ``meta``), then each ``resolved_by`` entry (label True, source = the leaderboard
    system's name, e.g. ``20240628_autocoderover-v20240620``). ``dedupe`` as for
    :func:`load_candidates`.

    Raises ``FileNotFoundError`` when the Verified file or the mini-swe-agent archive is
    missing (the Lite file is optional).
    """
    root = Path(shared_dir)
    verified_path = root / VERIFIED_FILE
    runs_path = root / MINI_SWE_AGENT_FILE
    for required in (verified_path, runs_path):
        if not required.is_file():
            raise FileNotFoundError(f"shared data file not found: {required}")
    lite_path = root / LITE_FILE
    lite = (
        {row["instance_id"]: row for row in _read_jsonl_gz(lite_path)}
        if lite_path.is_file()
        else {}
    )
    runs, reports = _read_mini_swe_agent(runs_path)

    tasks: list[Task] = []
    candidates: dict[str, list[Candidate]] = {}
    for lineno, row in enumerate(_read_jsonl_gz(verified_path), start=1):
        where = f"{verified_path} line {lineno}"
        resolved_by = row.get("resolved_by") or []
        iid = row.get("instance_id")
        if not isinstance(iid, str) or not isinstance(resolved_by, list):
            raise CandidateLoadError(f"{where}: expected instance_id and a resolved_by list")
        task_row = {k: v for k, v in row.items() if k != "resolved_by"}
        meta: dict[str, Any] = {"in_lite": iid in lite, "test_lists_from": None}
        report = reports.get(iid)
        if report is not None:
            status = report["tests_status"]
            task_row["FAIL_TO_PASS"] = _test_lists(status, "FAIL_TO_PASS")
            task_row["PASS_TO_PASS"] = _test_lists(status, "PASS_TO_PASS")
            meta["test_lists_from"] = "mini-swe-agent report.json tests_status"
        lite_row = lite.get(iid)
        if lite_row is not None:
            for key in _LITE_FIELDS:
                if lite_row.get(key) is not None:
                    task_row[key] = lite_row[key]
            if report is not None:
                meta["test_lists_match_lite"] = all(
                    sorted(task_row[key]) == sorted(parse_test_list(lite_row.get(key)) or [])
                    for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
                )
        task = Task.from_row(task_row, source="swebench", where=where)
        task.meta = {**task.meta, **meta}
        tasks.append(task)

        group: list[Candidate] = []
        run = runs.get(iid)
        if run is not None:
            group.append(run)
        for index, entry in enumerate(resolved_by):
            entry_where = f"{where} resolved_by[{index}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("patch"), str):
                raise CandidateLoadError(f"{entry_where}: expected an object with a 'patch'")
            entry_meta: dict[str, Any] = {"origin": entry_where}
            if entry.get("updated_spans") is not None:
                entry_meta["updated_spans"] = entry["updated_spans"]
            group.append(
                Candidate(
                    instance_id=iid,
                    patch=entry["patch"],
                    source=str(entry.get("name") or "resolved_by"),
                    label=True,
                    meta=entry_meta,
                )
            )
        candidates[iid] = group
    return tasks, (dedupe_candidates(candidates) if dedupe else candidates)
