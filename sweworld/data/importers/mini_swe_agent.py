"""mini-swe-agent runs on SWE-bench: trajectories, harness reports and task rows.

Layout (a ``.tar.gz`` / ``.tar`` read as a stream, or the same layout extracted in a
folder)::

    <top>/trajs/ID/ID.traj.json     messages (system, user task, then assistant / user turns)
    <top>/logs/ID/report.json       the harness report: resolved, tests_status
    <top>/preds.json                {ID: {model_patch, ...}} (the submissions again)

Each assistant message must hold exactly one ```bash block; the next user message holds the
real ``<returncode>N</returncode>`` and ``<output>...</output>`` (or ``<output_head>`` /
``<elided_chars>`` / ``<output_tail>`` when mini-swe-agent cut a long output: the step is
``output_truncated``), or mini-swe-agent's timeout message. A turn with no or several bash
blocks (a format error) produces no step; the final submission step (``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT ...``, answered by the patch itself) produces no step
either: ``info.submission`` is the patch.

Task rows come from the first user message's ``<pr_description>`` and, when found beside
the source (or passed as options), ``swebench_verified_resolved_patches.jsonl.gz`` (base
commit, gold patch, problem, ``resolved_by``) and ``swebench_lite.jsonl.gz`` (test patch,
FAIL_TO_PASS, PASS_TO_PASS); the test lists also come from the report's ``tests_status``.

Yields, per instance: the :class:`Trajectory` (its ``report`` labels the agent's
submission), then :class:`SWRRecord` labels for the gold patch (``gold``) and for every
distinct leaderboard patch that resolved it (``leaderboard``, positives). Malformed or
truncated JSON, a trajectory without report (its label only: the trajectory is still
yielded), a report without ``resolved``, a duplicate instance: :class:`Skip` with a reason.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sweworld.data.importers.readers import MAX_FILE_BYTES
from sweworld.data.importers.skip import Skip
from sweworld.data.schema import SWRRecord, Trajectory, TrajectoryStep, record_id, to_json

__all__ = [
    "NAME",
    "detect",
    "parse_observation",
    "parse_trajectory",
    "read",
    "repo_of_instance",
]

NAME = "mini-swe-agent"
SOURCE = "mini-swe-agent"
VERIFIED_FILE = "swebench_verified_resolved_patches.jsonl.gz"
LITE_FILE = "swebench_lite.jsonl.gz"
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")

# mini-swe-agent's own action regex (one fenced bash block); matched by _bash_blocks, which
# gives the same blocks in linear time (the regex backtracks quadratically on long runs of
# whitespace after an opening fence, or on many fences that are never closed)
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_OPEN, _CLOSE = "```bash", "\n```"
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
_PR_OPEN, _PR_CLOSE = "<pr_description>", "</pr_description>"
_PR_PREFIX = "Consider the following PR description:"
_TIMEOUT_PREFIX = "The last command <command>"
_ELIDED = re.compile(r"(?<!\d)(\d+) characters elided")  # one try per run of digits
_TRAJ = re.compile(r"(?:^|/)trajs/([^/]+)/([^/]+)\.traj\.json$")
_REPORT = re.compile(r"(?:^|/)logs/([^/]+)/report\.json$")


def repo_of_instance(instance_id: str) -> str:
    """``owner__name-123`` -> ``owner/name`` (empty when the id has no ``__``)."""
    owner, sep, rest = instance_id.partition("__")
    if not sep or not owner or not rest:
        return ""
    name = rest.rsplit("-", 1)[0] if "-" in rest else rest
    return f"{owner}/{name}"


# ------------------------------------------------------------------------------------------
# detection
# ------------------------------------------------------------------------------------------


def detect(path: str | Path) -> bool:
    """A folder with ``trajs/*/*.traj.json`` (or one level down), or a tarball whose first
    members are ``trajs/ID/ID.traj.json`` / ``logs/ID/report.json``."""
    path = Path(path)
    if path.is_dir():
        return any(path.glob("trajs/*/*.traj.json")) or any(path.glob("*/trajs/*/*.traj.json"))
    if not path.is_file() or not (path.name.endswith((".tar.gz", ".tgz", ".tar"))):
        return False
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for i, member in enumerate(tar):
                if _TRAJ.search(member.name) or _REPORT.search(member.name):
                    return True
                if i >= 20:
                    break
    except (tarfile.TarError, OSError, EOFError):
        return False
    return False


# ------------------------------------------------------------------------------------------
# parsing one trajectory
# ------------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's text (plain string, or a list of ``{type: text, text}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _bash_blocks(text: str) -> list[str]:
    """``_BASH_BLOCK.findall(text)``, in time linear in ``text``."""
    blocks: list[str] = []
    close = -2  # the first "\n```" at or after a position (-1: none), reused while valid
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        run_start = run_end = start + len(_OPEN)
        while run_end < len(text) and text[run_end].isspace():
            run_end += 1
        last_nl = text.rfind("\n", run_start, run_end)
        if last_nl < 0:  # no newline after the fence: \s*\n cannot match here
            pos = start + 1
            continue
        if close == -2 or (close >= 0 and close < last_nl + 1):
            close = text.find(_CLOSE, last_nl + 1)
        if close >= 0:  # greedy \s*: the body starts after the run's last newline
            blocks.append(text[last_nl + 1 : close])
            pos = close + len(_CLOSE)
            continue
        # no closing fence after the run; only "\n```" ending the run itself can close
        if last_nl == run_end - 1 and text.startswith("```", run_end):
            prev_nl = text.rfind("\n", run_start, last_nl)
            if prev_nl >= 0:
                blocks.append(text[prev_nl + 1 : last_nl])
                pos = run_end + 3
                close = -2
                continue
        pos = start + 1
    return blocks


def _between(text: str, open_tag: str, close_tag: str) -> str | None:
    start = text.find(open_tag)
    if start < 0:
        return None
    start += len(open_tag)
    end = text.rfind(close_tag)
    if end < start:
        return None
    body = text[start:end]
    return body[1:] if body.startswith("\n") else body


def parse_observation(text: str) -> tuple[int | None, str, bool] | None:
    """``(returncode, output, truncated)`` of a mini-swe-agent observation, or None when
    the text is not one (a format error message, the submission).

    A cut output is rebuilt as head, a line ``[... N characters elided ...]``, tail. A timeout
    message gives returncode None and the partial output it shows."""
    if text.startswith(_TIMEOUT_PREFIX):
        out = _between(text, "<output>", "</output>")
        return None, (out or "").rstrip(), False
    m = _RETURNCODE.match(text.lstrip())
    if m is None:
        return None
    code = int(m.group(1))
    if "<output_head>" in text:
        head = _between(text, "<output_head>", "</output_head>") or ""
        tail = _between(text, "<output_tail>", "</output_tail>") or ""
        n = _ELIDED.search(text)
        elided = n.group(1) if n else "?"
        head = head[:-1] if head.endswith("\n") else head
        tail = tail[:-1] if tail.endswith("\n") else tail
        return code, f"{head}\n[... {elided} characters elided ...]\n{tail}", True
    out = _between(text, "<output>", "</output>")
    if out is None:
        return None
    return code, out, False


def _is_submit(command: str) -> bool:
    return any(marker in command for marker in SUBMIT_MARKERS)


def parse_trajectory(data: Any) -> tuple[list[TrajectoryStep], dict[str, Any]]:
    """The steps of a ``.traj.json`` object and facts about it (``problem``,
    ``format_errors``, ``submitted``, ``timeouts``). ValueError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError("no 'messages' list")
    messages = data["messages"]
    facts: dict[str, Any] = {"format_errors": 0, "submitted": False, "timeouts": 0}
    problem = ""
    for msg in messages:
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = _text(msg.get("content"))
            start = content.find(_PR_OPEN)  # the first opening tag, then the first closing
            end = content.find(_PR_CLOSE, start + len(_PR_OPEN)) if start >= 0 else -1
            if end >= 0:
                problem = content[start + len(_PR_OPEN) : end].strip()
                if problem.startswith(_PR_PREFIX):
                    problem = problem[len(_PR_PREFIX) :].strip()
            break
    facts["problem"] = problem
    steps: list[TrajectoryStep] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        blocks = _bash_blocks(_text(msg.get("content")))
        if len(blocks) != 1:
            facts["format_errors"] += 1
            continue
        command = blocks[0].strip()
        reply = messages[i + 1] if i + 1 < len(messages) else None
        if not isinstance(reply, dict) or reply.get("role") != "user":
            continue  # the run ended on this action (no observation)
        parsed = parse_observation(_text(reply.get("content")))
        if parsed is None:
            if _is_submit(command):
                facts["submitted"] = True
            continue
        code, output, truncated = parsed
        if code is None:
            facts["timeouts"] += 1
        steps.append(
            TrajectoryStep(
                command=command, output=output, exit_code=code, output_truncated=truncated
            )
        )
    return steps, facts


# ------------------------------------------------------------------------------------------
# task rows
# ------------------------------------------------------------------------------------------


def _read_jsonl_gz(path: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("instance_id"):
                rows[str(row["instance_id"])] = row
    return rows


def _side_file(source: Path, explicit: str | Path | None, name: str) -> Path | None:
    if explicit:
        return Path(explicit)
    for folder in (source.parent, source, source.parent.parent):
        if (folder / name).is_file():
            return folder / name
    return None


def _test_lists(report: dict[str, Any] | None, key: str) -> list[str]:
    status = (report or {}).get("tests_status") or {}
    part = status.get(key) or {}
    if not isinstance(part, dict):
        return []
    return [str(t) for k in ("success", "failure") for t in (part.get(k) or [])]


def _task_row(
    instance_id: str,
    problem: str,
    verified: dict[str, Any] | None,
    lite: dict[str, Any] | None,
    report: dict[str, Any] | None,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "instance_id": instance_id,
        "repo": repo_of_instance(instance_id),
        "problem_statement": problem,
    }
    for extra in (lite, verified):
        if extra:
            for k, v in extra.items():
                if k != "resolved_by" and v not in (None, ""):
                    row[k] = v
    if problem and not row.get("problem_statement"):
        row["problem_statement"] = problem
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if not row.get(key):
            tests = _test_lists(report, key)
            if tests:
                row[key] = json.dumps(tests)
    return row


# ------------------------------------------------------------------------------------------
# reading members (stream or folder)
# ------------------------------------------------------------------------------------------


def _members(path: Path) -> Iterator[tuple[str, Any]]:
    """``(name, reader)`` for every member: a tarball streamed in order, or a folder's files.
    ``reader()`` returns the bytes (or raises)."""
    if path.is_dir():
        for p in sorted(path.rglob("*.json")):
            yield p.relative_to(path).as_posix(), functools.partial(_read_bounded, p)
        return
    with tarfile.open(path, mode="r|*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            f: IO[bytes] | None = tar.extractfile(member)
            if f is None:
                continue
            # never more than the bound in memory: a larger member is a skip
            yield member.name, functools.partial(f.read, MAX_FILE_BYTES + 1)


def _read_bounded(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(MAX_FILE_BYTES + 1)


def _load(reader: Any) -> tuple[Any, str | None]:
    try:
        raw = reader()
    except (OSError, tarfile.TarError, EOFError) as exc:
        return None, f"unreadable: {type(exc).__name__}"
    if len(raw) > MAX_FILE_BYTES:
        return None, f"larger than {MAX_FILE_BYTES} bytes"
    try:
        return json.loads(raw), None
    except (ValueError, RecursionError):
        return None, "malformed or truncated JSON"


def _report_body(data: Any, instance_id: str) -> tuple[dict[str, Any] | None, str | None]:
    if isinstance(data, dict) and instance_id in data and isinstance(data[instance_id], dict):
        data = data[instance_id]  # the harness's {instance_id: report} shape
    if not isinstance(data, dict):
        return None, "report is not an object"
    if not isinstance(data.get("resolved"), bool):
        return None, "report has no boolean 'resolved'"
    return data, None


def read(
    path: str | Path,
    *,
    verified: str | Path | None = None,
    lite: str | Path | None = None,
    instances: set[str] | None = None,
    limit: int | None = None,
    **_: Any,
) -> Iterator[Trajectory | SWRRecord | Skip]:
    """Read a mini-swe-agent run (see the module docstring). ``verified`` / ``lite``: the
    task files (default: found beside ``path``); ``instances``: only these ids; ``limit``:
    at most this many trajectories."""
    path = Path(path)
    vpath = _side_file(path, verified, VERIFIED_FILE)
    lpath = _side_file(path, lite, LITE_FILE)
    verified_rows = _read_jsonl_gz(vpath) if vpath else {}
    lite_rows = _read_jsonl_gz(lpath) if lpath else {}
    pending_traj: dict[str, tuple[Any, str | None]] = {}
    pending_report: dict[str, tuple[Any, str | None]] = {}
    seen: set[str] = set()
    count = 0

    def emit(iid: str, traj: tuple[Any, str | None], report: tuple[Any, str | None] | None):
        data, error = traj
        if iid in seen:
            yield Skip(iid, "duplicate instance")
            return
        seen.add(iid)
        if error is not None:
            yield Skip(iid, f"trajectory: {error}")
            return
        try:
            steps, facts = parse_trajectory(data)
        except ValueError as exc:
            yield Skip(iid, f"trajectory: {exc}")
            return
        body: dict[str, Any] | None = None
        if report is None:
            yield Skip(f"{iid}#swr", "missing report")
        elif report[1] is not None:
            yield Skip(f"{iid}#swr", f"report: {report[1]}")
        else:
            body, why = _report_body(report[0], iid)
            if why:
                yield Skip(f"{iid}#swr", why)
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        vrow = verified_rows.get(iid)
        task = _task_row(iid, facts["problem"], vrow, lite_rows.get(iid), body)
        traj_obj = Trajectory(
            source=SOURCE,
            instance_id=iid,
            repo=task["repo"],
            task=task,
            steps=steps,
            submission=str(info.get("submission") or ""),
            report=(
                {"resolved": body["resolved"], "tests_status": body.get("tests_status") or {}}
                if body
                else None
            ),
            meta={
                "exit_status": info.get("exit_status"),
                "mini_version": info.get("mini_version"),
                "format_errors": facts["format_errors"],
                "timeouts": facts["timeouts"],
                "submitted": facts["submitted"],
            },
        )
        yield traj_obj
        yield from _reference_labels(iid, task, vrow)

    for name, reader in _members(path):
        m_traj = _TRAJ.search(name)
        m_rep = _REPORT.search(name)
        iid = (m_traj or m_rep).group(1) if (m_traj or m_rep) else None
        if iid is None or (instances and iid not in instances):
            continue
        if limit is not None and count >= limit:
            break
        if m_traj:
            if iid in seen or iid in pending_traj:
                yield Skip(iid, "duplicate instance")
                continue
            loaded = _load(reader)
            if iid in pending_report:
                count += 1
                yield from emit(iid, loaded, pending_report.pop(iid))
            else:
                pending_traj[iid] = loaded
        else:
            loaded = _load(reader)
            if iid in pending_traj:
                count += 1
                yield from emit(iid, pending_traj.pop(iid), loaded)
            elif iid not in seen:
                pending_report[iid] = loaded
    for iid, loaded in pending_traj.items():
        if limit is not None and count >= limit:
            break
        count += 1
        yield from emit(iid, loaded, None)
    for iid in pending_report:
        if iid not in seen and (limit is None or count < limit):
            yield Skip(iid, "report without trajectory")


def _reference_labels(
    instance_id: str, task: dict[str, Any], verified_row: dict[str, Any] | None
) -> Iterator[SWRRecord]:
    """The gold patch and the leaderboard patches that resolved the task (positives)."""
    if not verified_row:
        return
    repo = task["repo"]
    base = str(task.get("base_commit") or "")
    task_json = to_json(task)
    gold = str(verified_row.get("patch") or "")
    if gold.strip():
        yield SWRRecord(
            id=record_id(SOURCE, instance_id, "gold"),
            source=SOURCE,
            instance_id=instance_id,
            repo=repo,
            patch=gold,
            resolved=True,
            base_commit=base,
            task=task_json,
            label_source="gold",
            candidate_kind="gold",
        )
    by_patch: dict[str, list[str]] = {}
    for entry in verified_row.get("resolved_by") or []:
        if not isinstance(entry, dict):
            continue
        patch = str(entry.get("patch") or "")
        if patch.strip():
            by_patch.setdefault(patch, []).append(str(entry.get("name") or ""))
    for patch, names in by_patch.items():
        yield SWRRecord(
            id=record_id(SOURCE, instance_id, "leaderboard", patch),
            source=SOURCE,
            instance_id=instance_id,
            repo=repo,
            patch=patch,
            resolved=True,
            base_commit=base,
            task=task_json,
            label_source="leaderboard",
            candidate_kind="leaderboard",
            meta=to_json({"systems": names}),
        )
