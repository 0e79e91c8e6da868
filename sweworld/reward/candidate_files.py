"""Reading candidate patches from files: SWE-bench predictions (``.json``, ``.jsonl``,
gzipped or not), mini-swe-agent trajectories (one file, a directory, a tarball) with the
harness's reports as labels. :mod:`sweworld.reward.candidates` describes the formats and is
the API to use (:func:`~sweworld.reward.candidates.load_candidates`)."""

from __future__ import annotations

import gzip
import json
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from sweworld.tasks.loaders import iter_json_lines

__all__ = [
    "Candidate",
    "CandidateLoadError",
    "iter_candidate_source",
    "iter_tar_candidates",
]

_PATCH_KEYS = ("candidate_patch", "model_patch", "patch")
_LABEL_KEYS = ("resolved", "label")
_CONSUMED = frozenset(("instance_id", "model_name_or_path", "source", *_PATCH_KEYS, *_LABEL_KEYS))
_TRAJ_SUFFIX = ".traj.json"
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson")
_JSON_SUFFIXES = (".json", ".json.gz")
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")


class CandidateLoadError(ValueError):
    """A candidate file that cannot be read, or a record in it that is not a candidate."""


@dataclass
class Candidate:
    """One candidate patch for one task.

    Attributes:
        instance_id: the task's id.
        patch: the unified diff ("" for an empty or missing patch).
        source: who produced it (model name, leaderboard system, or the file name).
        label: True / False when known to resolve / not resolve the task, else None.
        meta: whatever else the record said (origin, tests_status, exit status, ...).
    """

    instance_id: str
    patch: str
    source: str = ""
    label: bool | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------


def iter_candidate_source(path: Path) -> Iterator[Candidate]:
    """The candidates of one file or directory, by its name (see
    :mod:`sweworld.reward.candidates` for the formats)."""
    if path.is_dir():
        yield from _iter_dir(path)
        return
    if not path.exists():
        raise FileNotFoundError(f"candidate source {str(path)!r} does not exist")
    name = path.name.lower()
    if name.endswith(_TRAJ_SUFFIX):
        data = _load_json(path, _read_text(path))
        yield _from_trajectory(data, path.name, str(path), path.parent.name, {})
    elif name.endswith(_TAR_SUFFIXES):
        yield from iter_tar_candidates(path)
    elif name.endswith(_JSONL_SUFFIXES):
        yield from _iter_jsonl(path)
    elif name.endswith(_JSON_SUFFIXES):
        yield from _iter_json(path, _load_json(path, _read_text(path)))
    else:
        raise CandidateLoadError(
            f"{path}: unknown candidate format; expected SWE-bench predictions (.json, "
            ".json.gz, .jsonl, .jsonl.gz), a mini-swe-agent trajectory (*.traj.json), a "
            "directory of trajectories, or a .tar.gz of one"
        )


def _read_text(path: Path) -> str:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read()
        return path.read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise CandidateLoadError(f"{path}: cannot read ({exc})") from None


def _load_json(where: Any, text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CandidateLoadError(
            f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        raise CandidateLoadError(f"{where}: not UTF-8 ({exc})") from None


# ------------------------------------------------------------------------------------------
# Prediction rows
# ------------------------------------------------------------------------------------------


def _label(value: Any, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CandidateLoadError(f"{where}: label must be true, false, 0, 1 or null; got {value!r}")


def _from_row(
    row: Any, where: str, default_source: str, instance_id: str | None = None
) -> Candidate:
    if not isinstance(row, Mapping):
        raise CandidateLoadError(f"{where}: expected an object, got {type(row).__name__}")
    iid = row.get("instance_id") or instance_id
    if not isinstance(iid, str) or not iid:
        raise CandidateLoadError(f"{where}: missing or empty 'instance_id'")
    key = next((k for k in _PATCH_KEYS if k in row), None)
    if key is None:
        raise CandidateLoadError(
            f"{where}: no patch field (expected one of {', '.join(_PATCH_KEYS)}); "
            f"keys: {sorted(row)}"
        )
    patch = row[key]
    meta: dict[str, Any] = {"origin": where}
    if patch is None:
        patch = ""
        meta["patch_is_None"] = True
    elif not isinstance(patch, str):
        raise CandidateLoadError(f"{where}: {key!r} must be a string, got {type(patch).__name__}")
    label_key = next((k for k in _LABEL_KEYS if k in row), None)
    label = _label(row[label_key], where) if label_key else None
    source = row.get("model_name_or_path") or row.get("source") or default_source
    meta.update({k: v for k, v in row.items() if k not in _CONSUMED})
    return Candidate(instance_id=iid, patch=patch, source=str(source), label=label, meta=meta)


def _looks_like_row(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("instance_id"), str) and any(
        isinstance(data.get(k), str) or (k in data and data[k] is None) for k in _PATCH_KEYS
    )


def _looks_like_trajectory(data: Mapping[str, Any]) -> bool:
    info = data.get("info")
    return isinstance(info, Mapping) and ("submission" in info or "messages" in data)


def _iter_json(path: Path, data: Any, label: str | None = None) -> Iterator[Candidate]:
    where = label or str(path)
    source = path.name
    if isinstance(data, list):
        for index, row in enumerate(data):
            yield _from_row(row, f"{where} item {index}", source)
    elif isinstance(data, Mapping):
        if _looks_like_trajectory(data):
            yield _from_trajectory(data, path.name, where, path.parent.name, {})
        elif _looks_like_row(data):
            yield _from_row(data, where, source)
        else:
            for key, row in data.items():
                yield _from_row(row, f"{where} key {key!r}", source, instance_id=str(key))
    else:
        raise CandidateLoadError(
            f"{where}: expected SWE-bench predictions (a dict keyed by instance id or a list "
            f"of objects), got {type(data).__name__}"
        )


def _iter_jsonl(path: Path) -> Iterator[Candidate]:
    for where, row in iter_json_lines(path, error=CandidateLoadError):
        yield _from_row(row, where, path.name)


# ------------------------------------------------------------------------------------------
# mini-swe-agent trajectories and reports
# ------------------------------------------------------------------------------------------


def _instance_from_name(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base[: -len(_TRAJ_SUFFIX)] if base.lower().endswith(_TRAJ_SUFFIX) else base


def _from_trajectory(
    data: Any, name: str, where: str, default_source: str, reports: Mapping[str, Any]
) -> Candidate:
    if not isinstance(data, Mapping) or not isinstance(data.get("info"), Mapping):
        raise CandidateLoadError(f"{where}: not a mini-swe-agent trajectory (no 'info' object)")
    info = data["info"]
    iid = data.get("instance_id") or _instance_from_name(name)
    if not isinstance(iid, str) or not iid:
        raise CandidateLoadError(f"{where}: no instance id")
    submission = info.get("submission")
    meta: dict[str, Any] = {"origin": where, "exit_status": info.get("exit_status")}
    if submission is None:
        submission = ""
        meta["patch_is_None"] = True
    elif not isinstance(submission, str):
        raise CandidateLoadError(f"{where}: info.submission must be a string")
    config = info.get("config")
    model = config.get("model") if isinstance(config, Mapping) else None
    model_name = model.get("model_name") if isinstance(model, Mapping) else None
    if isinstance(info.get("model_stats"), Mapping):
        meta["model_stats"] = dict(info["model_stats"])
    label = None
    report = reports.get(iid)
    if report is not None:
        label = _label(report.get("resolved"), f"report.json of {iid}")
        meta["tests_status"] = report.get("tests_status")
        meta["patch_successfully_applied"] = report.get("patch_successfully_applied")
    return Candidate(
        instance_id=iid,
        patch=submission,
        source=str(model_name or default_source),
        label=label,
        meta=meta,
    )


def _report_entry(data: Any, instance_id: str, where: str) -> dict[str, Any]:
    """The instance's entry of a harness report.json (flat, or keyed by instance id)."""
    if isinstance(data, Mapping):
        if "resolved" in data:
            return dict(data)
        entry = data.get(instance_id)
        if isinstance(entry, Mapping) and "resolved" in entry:
            return dict(entry)
        if len(data) == 1:
            only = next(iter(data.values()))
            if isinstance(only, Mapping) and "resolved" in only:
                return dict(only)
    raise CandidateLoadError(f"{where}: not a SWE-bench harness report (no 'resolved')")


def _report_id(name: str) -> str:
    """``.../logs/<id>/report.json`` -> ``<id>``."""
    parts = name.replace("\\", "/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _iter_dir(path: Path) -> Iterator[Candidate]:
    trajectories = sorted(p for p in path.rglob(f"*{_TRAJ_SUFFIX}") if p.is_file())
    if trajectories:
        reports: dict[str, Any] = {}
        for report in sorted(path.rglob("report.json")):
            iid = _report_id(report.as_posix())
            reports[iid] = _report_entry(_load_json(report, _read_text(report)), iid, str(report))
        for traj in trajectories:
            data = _load_json(traj, _read_text(traj))
            yield _from_trajectory(data, traj.name, str(traj), path.name, reports)
        return
    files = [path / "preds.json"] if (path / "preds.json").is_file() else []
    if not files:
        files = sorted(
            p
            for p in path.iterdir()
            if p.is_file() and p.name.lower().endswith((*_JSONL_SUFFIXES, *_JSON_SUFFIXES))
        )
    if not files:
        raise CandidateLoadError(
            f"{path}: directory holds no *.traj.json trajectories, no preds.json and no "
            ".json / .jsonl prediction files"
        )
    for file in files:
        yield from iter_candidate_source(file)


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> bytes:
    handle: IO[bytes] | None = tar.extractfile(member)
    if handle is None:
        raise CandidateLoadError(f"{where}: cannot read member")
    with handle:
        return handle.read()


def iter_tar_candidates(path: Path) -> Iterator[Candidate]:
    """The candidates of a tarball of mini-swe-agent trajectories (labelled by its reports),
    or of the ``preds.json`` it holds."""
    trajectories: list[tuple[str, Any]] = []
    reports: dict[str, Any] = {}
    preds: list[tuple[str, Any]] = []
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name
                lower = name.lower()
                where = f"{path}:{name}"
                if lower.endswith(_TRAJ_SUFFIX):
                    trajectories.append((name, _load_json(where, _read_member(tar, member, where))))
                elif lower.endswith("/report.json") or lower == "report.json":
                    iid = _report_id(name)
                    data = _load_json(where, _read_member(tar, member, where))
                    reports[iid] = _report_entry(data, iid, where)
                elif lower.endswith("preds.json"):
                    preds.append((name, _load_json(where, _read_member(tar, member, where))))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise CandidateLoadError(f"{path}: not a readable tar archive ({exc})") from None
    if trajectories:
        default_source = path.name
        for name, data in trajectories:
            yield _from_trajectory(data, name, f"{path}:{name}", default_source, reports)
        return
    if not preds:
        raise CandidateLoadError(f"{path}: archive holds no *.traj.json and no preds.json")
    for name, data in preds:
        for candidate in _iter_json(Path(name), data, label=f"{path}:{name}"):
            report = reports.get(candidate.instance_id)
            if report is not None and candidate.label is None:
                candidate.label = _label(report.get("resolved"), f"{path}:{name}")
                candidate.meta["tests_status"] = report.get("tests_status")
            yield candidate
