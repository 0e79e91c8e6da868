"""SWE-bench predictions with the harness's verdicts -> SWR records (and real test runs).

Reads:

* **predictions**: ``preds.json`` (``{instance_id: {"instance_id", "model_name_or_path",
  "model_patch"}}`` or a list of such objects) and JSON Lines (``all_preds.jsonl``, one
  prediction per line);
* **reports**: the harness's per-instance ``report.json`` (``{instance_id: {"patch_is_None",
  "patch_exists", "patch_successfully_applied", "resolved", "tests_status"}}``), as it writes
  them under ``logs/run_evaluation/<run_id>/<model>/<instance_id>/``, and its run-level
  summary (``<model>.<run_id>.json``: ``resolved_ids``, ``unresolved_ids``, ``error_ids``,
  ...);
* **harness logs** beside a report: ``patch.diff`` (the candidate as evaluated),
  ``eval.sh`` and ``test_output.txt``.

Each labelled candidate becomes an :class:`~sweworld.data.schema.SWRRecord`
(``label_source="harness-report"``). When ``eval.sh`` and ``test_output.txt`` are there, the
real test run is also yielded as a :class:`~sweworld.data.schema.Trajectory` of one step: the
test command and its real output. Its state is **not** the base: it is the base with the
candidate patch and the test patch applied; both are in ``meta`` (``candidate_patch``,
``test_patch``, ``state="base+candidate_patch+test_patch"``), so that a replay applies them
before answering the command. Statuses are read by the shared grader
(:func:`sweworld.execution.grading.parse_eval_log`), never by a parser of this module.

A prediction no report labels, a report entry without a patch, an instance whose repository
is unknown, a harness error and a duplicate are skips with their reasons.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sweworld.data.importers.readers import (
    cap_text,
    first_json_object,
    iter_jsonl,
    load_task_rows,
    read_json,
    task_row,
)
from sweworld.data.importers.skip import Skip
from sweworld.data.schema import SWRRecord, Trajectory, TrajectoryStep, record_id, to_json

__all__ = [
    "NAME",
    "detect",
    "harness_run_output",
    "iter_predictions",
    "iter_report_entries",
    "parse_eval_script",
    "read",
]

NAME = "swebench"

REPORT_NAME = "report.json"
PREDICTION_NAMES = ("preds.json", "all_preds.jsonl", "predictions.json", "predictions.jsonl")
EVAL_SCRIPT = "eval.sh"
TEST_OUTPUT = "test_output.txt"
PATCH_FILE = "patch.diff"
#: Files that mark an agent run folder another importer reads (its reports are its own).
TRAJECTORY_SUFFIXES = (".traj", ".traj.json")
#: Entries looked at when detecting a folder.
DETECT_SCAN_LIMIT = 5000
#: Largest harness log read (test_output.txt); a larger one is a skip.
MAX_LOG_BYTES = 64 * 1024 * 1024

_START = ">>>>> Start Test Output"
_END = ">>>>> End Test Output"
_EXIT_VAR = "SWEBENCH_TEST_EXIT_CODE="


# ------------------------------------------------------------------------------ detection
def _is_prediction(obj: Mapping[str, Any] | None) -> bool:
    if not obj:
        return False
    if "instance_id" in obj and "model_patch" in obj:
        return True
    first = next(iter(obj.values()), None)  # preds.json: {id: prediction}
    return isinstance(first, Mapping) and "instance_id" in first and "model_patch" in first


def _is_report(obj: Mapping[str, Any] | None) -> bool:
    if not obj:
        return False
    if "resolved_ids" in obj and "unresolved_ids" in obj:
        return True
    first = next(iter(obj.values()), None)
    return isinstance(first, Mapping) and "resolved" in first and "patch_exists" in first


def _walk(root: Path, limit: int | None = None) -> Iterator[Path]:
    """Files under ``root``, sorted per folder, at most ``limit`` entries looked at."""
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if limit is not None and seen > limit:
                return
            yield Path(folder) / name


def detect(path: str | os.PathLike[str]) -> bool:
    """A predictions file, a harness report, or a folder of them (and no agent
    trajectories: a folder of ``*.traj`` / ``*.traj.json`` belongs to an agent's importer)."""
    path = Path(path)
    if path.is_file():
        name = path.name.lower()
        if name.endswith(TRAJECTORY_SUFFIXES):
            return False
        if not name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz")):
            return False
        obj = first_json_object(path)
        return _is_prediction(obj) or _is_report(obj)
    if not path.is_dir():
        return False
    found = False
    for file in _walk(path, DETECT_SCAN_LIMIT):
        name = file.name.lower()
        if name.endswith(TRAJECTORY_SUFFIXES) or name == "trajectories.jsonl":
            return False
        if name == REPORT_NAME or (name in PREDICTION_NAMES and file.parent == path):
            found = True
    return found


# ------------------------------------------------------------------------------ readers
def iter_predictions(path: Path) -> Iterator[dict[str, Any] | Skip]:
    """The predictions of a ``preds.json`` / JSON Lines file (objects with ``instance_id``
    and ``model_patch``); anything else in it is a skip."""
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        items: Iterator[tuple[str, Any]] = iter_jsonl(path)
    else:
        data = read_json(path)
        if isinstance(data, Skip):
            yield data
            return
        if isinstance(data, Mapping) and not _is_prediction(data):
            yield Skip(str(path), "not a predictions file")
            return
        if isinstance(data, Mapping) and "instance_id" in data:
            data = [data]
        values = list(data.values()) if isinstance(data, Mapping) else data
        if not isinstance(values, list):
            yield Skip(str(path), f"expected predictions, got {type(data).__name__}")
            return
        items = ((f"{path} item {i}", v) for i, v in enumerate(values))
    for where, value in items:
        if isinstance(value, Skip):
            yield value
        elif not isinstance(value, Mapping) or not isinstance(value.get("instance_id"), str):
            yield Skip(where, "prediction without an instance_id")
        elif not isinstance(value.get("model_patch"), (str, type(None))):
            yield Skip(where, "prediction whose model_patch is not text")
        else:
            yield dict(value)


def iter_report_entries(path: Path) -> Iterator[tuple[str, dict[str, Any]] | Skip]:
    """``(instance_id, entry)`` of a harness report: each instance of a per-instance
    ``report.json``; for a run-level summary, ``{"resolved": bool}`` per completed instance
    (its error and incomplete ids are skips: the harness gave no verdict)."""
    data = read_json(path)
    if isinstance(data, Skip):
        yield data
        return
    if not isinstance(data, Mapping):
        yield Skip(str(path), f"expected a report object, got {type(data).__name__}")
        return
    if "resolved_ids" in data:
        resolved = {str(i) for i in data.get("resolved_ids") or []}
        for iid in sorted(resolved | {str(i) for i in data.get("unresolved_ids") or []}):
            yield iid, {"resolved": iid in resolved, "summary": True}
        for key in ("error_ids", "incomplete_ids"):
            for iid in data.get(key) or []:
                yield Skip(f"{path}:{iid}", f"harness report lists it in {key}: no verdict")
        return
    for iid, entry in data.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("resolved"), bool):
            yield Skip(f"{path}:{iid}", "report entry without a boolean 'resolved'")
        else:
            yield str(iid), dict(entry)


def parse_eval_script(text: str) -> tuple[str, str]:
    """``(test command, test patch)`` of a harness ``eval.sh``: the lines between the start
    and end markers (the harness's own exit-code bookkeeping left out), and the body of the
    heredoc given to ``git apply`` (empty when absent)."""
    command_lines: list[str] = []
    patch_lines: list[str] = []
    in_test = False
    delimiter: str | None = None
    for line in text.split("\n"):
        if delimiter is not None:
            if line == delimiter:
                delimiter = None
            else:
                patch_lines.append(line)
            continue
        if _START in line:
            in_test = True
            continue
        if _END in line:
            in_test = False
            continue
        if in_test:
            if not line.startswith(_EXIT_VAR):
                command_lines.append(line)
            continue
        if line.lstrip().startswith("git apply") and "<<" in line and not patch_lines:
            tag = line.rsplit("<<", 1)[1].strip().strip("-").strip()
            delimiter = tag.strip("'\"") or None
    command = "\n".join(command_lines).strip()
    patch = "\n".join(patch_lines) + "\n" if patch_lines else ""
    return command, patch


def harness_run_output(log: str, command: str) -> tuple[str, int | None]:
    """What the test command printed, out of a harness ``test_output.txt`` (the text between
    the markers, less the shell's ``set -x`` traces of the command itself), and its exit
    code when the harness recorded it."""
    from sweworld.execution.log_parsers import parse_test_exit_code

    exit_code = parse_test_exit_code(log)
    if _START not in log or _END not in log:
        return "", exit_code
    inner = log.split(_START, 1)[1].split(_END, 1)[0]
    inner = inner.split("\n", 1)[1] if "\n" in inner else ""  # rest of the marker's line
    # the end marker's own line starts with its trace prefix
    inner = inner.rsplit("\n", 1)[0] + "\n" if "\n" in inner else ""
    traces = {"+ " + line.strip() for line in command.split("\n") if line.strip()}
    kept = [
        line
        for line in inner.split("\n")
        if line not in traces and not line.startswith("+ " + _EXIT_VAR)
    ]
    return "\n".join(kept), exit_code


# ------------------------------------------------------------------------------ read
def _model_key(name: Any) -> str:
    return str(name or "").replace("/", "__")


def _read_text(path: Path, limit: int = MAX_LOG_BYTES) -> str | Skip:
    try:
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        return Skip(str(path), f"cannot read ({exc})")
    if len(raw) > limit:
        return Skip(str(path), f"larger than {limit} bytes")
    return raw.decode("utf-8", errors="replace")


def _test_run(
    folder: Path, iid: str, row: dict[str, Any], patch: str, entry: dict[str, Any], model: str
) -> Trajectory | Skip | None:
    script_path, log_path = folder / EVAL_SCRIPT, folder / TEST_OUTPUT
    if not (script_path.is_file() and log_path.is_file()):
        return None
    script, log = _read_text(script_path), _read_text(log_path)
    if isinstance(script, Skip):
        return script
    if isinstance(log, Skip):
        return log
    from sweworld.execution.grading import parse_eval_log

    command, test_patch = parse_eval_script(script)
    if not command:
        return Skip(str(script_path), "eval script without a test command between the markers")
    statuses, ran = parse_eval_log(log, row.get("repo"))
    if not ran:
        return Skip(str(log_path), "the harness run gave no test results (apply failure, error)")
    output, exit_code = harness_run_output(log, command)
    output, truncated = cap_text(output)
    step = TrajectoryStep(
        command=command, output=output, exit_code=exit_code, output_truncated=truncated
    )
    return Trajectory(
        source=NAME,
        instance_id=iid,
        repo=str(row.get("repo") or ""),
        task=row,
        steps=[step],
        submission=patch,
        report={"resolved": entry["resolved"], "tests_status": entry.get("tests_status") or {}},
        meta={
            "format": "swebench-harness-log",
            "state": "base+candidate_patch+test_patch",
            "candidate_patch": patch,
            "test_patch": test_patch,
            "model_name_or_path": model,
            # several models' runs of one instance: each is its own unit and id prefix
            "trajectory_id": _model_key(model),
            "test_statuses": statuses,
            "log": str(log_path),
        },
    )


def read(
    path: str | os.PathLike[str],
    *,
    tasks: str | os.PathLike[str] | None = None,
    model: str | None = None,
    **_options: Any,
) -> Iterator[Trajectory | SWRRecord | Skip]:
    """SWR records (and real test runs) from predictions and harness reports.

    Args:
        path: a predictions file, a report, or a folder holding them (``preds.json`` /
            ``all_preds.jsonl`` at its top, ``report.json`` files anywhere below, run-level
            summaries ``*.json`` at its top).
        tasks: a task file (``--tasks``) giving each instance's row (repository, base
            commit, test lists); without it a record carries the instance id and the
            repository read from the id.
        model: keep only predictions and harness logs of this ``model_name_or_path``.
    """
    root = Path(path)
    rows, skipped = load_task_rows(tasks)
    if skipped is not None:
        yield skipped
    predictions: dict[str, dict[str, Any]] = {}
    report_files: list[Path] = []
    prediction_files: list[Path] = []
    if root.is_file():
        obj = first_json_object(root)
        (report_files if _is_report(obj) else prediction_files).append(root)
    elif root.is_dir():
        for file in _walk(root):
            name = file.name.lower()
            if name == REPORT_NAME:
                report_files.append(file)
            elif file.parent == root and name.endswith((".json", ".jsonl", ".jsonl.gz")):
                obj = first_json_object(file)
                if _is_prediction(obj):
                    prediction_files.append(file)
                elif _is_report(obj):
                    report_files.append(file)
    else:
        yield Skip(str(root), "no such file or folder")
        return
    for file in prediction_files:
        for pred in iter_predictions(file):
            if isinstance(pred, Skip):
                yield pred
                continue
            if model is not None and pred.get("model_name_or_path") != model:
                continue
            iid = pred["instance_id"]
            if iid in predictions:
                same = predictions[iid].get("model_patch") == pred.get("model_patch")
                why = "same patch" if same else "another patch kept"
                yield Skip(f"{file}:{iid}", f"duplicate prediction ({why})")
                continue
            predictions[iid] = pred

    labelled: set[tuple[str, str]] = set()
    used: set[str] = set()
    for report in report_files:
        folder = report.parent
        for item in iter_report_entries(report):
            if isinstance(item, Skip):
                yield item
                continue
            iid, entry = item
            unit = f"{report}:{iid}"
            # the harness's layout: <run_id>/<model>/<instance_id>/report.json
            harness_dir = report.name == REPORT_NAME and folder.name == iid
            model_dir = folder.parent.name if harness_dir else ""
            if model is not None and harness_dir and model_dir != _model_key(model):
                continue
            pred = predictions.get(iid)
            model_name = str(pred.get("model_name_or_path") or "") if pred else model_dir
            if harness_dir and pred and _model_key(model_name) != model_dir:
                pred, model_name = None, model_dir
            key = (_model_key(model_name), iid)
            if key in labelled:
                yield Skip(unit, "duplicate label for this model and instance")
                continue
            if entry.get("patch_is_None"):
                yield Skip(unit, "the harness had no patch (patch_is_None)")
                continue
            patch: str | None = None
            if harness_dir and (folder / PATCH_FILE).is_file():
                text = _read_text(folder / PATCH_FILE)
                patch = None if isinstance(text, Skip) else text
            if patch is None and pred is not None:
                patch = pred.get("model_patch") or ""
            if patch is None:
                yield Skip(unit, "labelled instance without a patch (no prediction, no patch.diff)")
                continue
            row = task_row(iid, rows)
            if not row.get("repo"):
                yield Skip(unit, "unknown repository (pass --tasks with this instance)")
                continue
            labelled.add(key)
            used.add(iid)
            tests_status = entry.get("tests_status") or {}
            applied = entry.get("patch_successfully_applied")
            yield SWRRecord(
                id=record_id(NAME, model_name, iid, patch),
                source=NAME,
                instance_id=iid,
                repo=str(row["repo"]),
                patch=patch,
                resolved=bool(entry["resolved"]),
                base_commit=str(row.get("base_commit") or ""),
                task=to_json(row),
                tests_status=to_json(tests_status),
                label_source="harness-report",
                candidate_kind="agent" if patch.strip() else "empty",
                meta=to_json(
                    {
                        "model_name_or_path": model_name,
                        "report": str(report),
                        "patch_successfully_applied": applied,
                        "summary_only": bool(entry.get("summary")),
                    }
                ),
            )
            if harness_dir:
                run = _test_run(folder, iid, row, patch, entry, model_name)
                if run is not None:
                    yield run
    for iid in predictions:
        if iid not in used:
            yield Skip(iid, "prediction without a harness report")
