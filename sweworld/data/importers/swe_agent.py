"""SWE-agent ``.traj`` files -> :class:`~sweworld.data.schema.Trajectory` objects.

A ``.traj`` file (SWE-agent 0.x and 1.x, ``Agent.save_trajectory``) is one JSON object:
``trajectory`` (the steps: ``action``, ``observation``, ``response``, ``thought``,
``state``, ``execution_time``, ...), ``history`` (the messages), ``info`` (``submission``,
``exit_status``, ``model_stats``, ...), ``replay_config`` (1.x: the run's configuration as
JSON text: problem statement id and text, repository, base commit) and ``environment``. A
retrying agent writes ``attempts`` (a list of such objects) with the chosen one in
``info.best_attempt_idx``. Runs lay them out as ``<run>/<instance_id>/<instance_id>.traj``
(or ``<run>/<instance_id>.traj``).

Every action is a line run by SWE-agent's shell: a bash command, or one of its tools. Each
step becomes a :class:`~sweworld.data.schema.TrajectoryStep`:

* a bash command: ``command``;
* a tool sweworld has (``str_replace_editor``, ``open`` / ``goto`` / ``scroll_*`` (a view of
  the file), ``search_dir`` / ``search_file``, ``submit``): ``action`` holds the equivalent
  R2E-Gym function call (XML, what :meth:`Session.step <sweworld.sandbox.session.Session.step>`
  reads); since that form strips parameter values, the exact call (values as the agent
  sent them) is also in ``meta["tool_calls"][str(index)]`` as a ``{"function",
  "parameters"}`` mapping, which ``Session.step`` accepts unchanged;
* a windowed ``edit S:E`` of the open file and ``create FILE``: the equivalent bash command
  (``head`` / ``tail`` / heredoc / ``touch``: real file operations), ``find_file``: ``find``;
* anything else (``exit_*``, ``filemap``, images, browsers, an empty action, an edit the
  linter reverted, a submit answered with a review): kept in place with ``command`` and
  ``action`` empty, and the reason in ``meta["not_replayable"][str(index)]``.

SWE-agent records no exit code: ``exit_code`` is None. Labels: ``reports`` (a harness
report file or folder, :func:`~sweworld.data.importers.swebench_preds.iter_report_entries`)
fills ``Trajectory.report``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sweworld.data.importers.readers import cap_text, load_task_rows, read_json, task_row
from sweworld.data.importers.skip import Skip
from sweworld.data.schema import Trajectory, TrajectoryStep

__all__ = ["NAME", "convert", "detect", "read", "translate_action"]

NAME = "swe-agent"
SUFFIX = ".traj"
DEFAULT_ROOT = "/testbed"
#: Longest action translated (a longer one is kept, not replayable).
MAX_ACTION_CHARS = 1_000_000
DETECT_SCAN_LIMIT = 5000

_EDITOR_FLAGS = {"--file_text": "file_text", "--old_str": "old_str", "--new_str": "new_str"}
_LINE_RANGE = re.compile(r"^(\d+):(\d+)$")
_NOT_APPLIED = (
    "Your changes have NOT been applied",
    "No file opened",
    "Usage: edit",
)
_NO_EQUIVALENT = frozenset(
    {
        "exit",
        "exit_forfeit",
        "exit_cost",
        "exit_context",
        "exit_error",
        "exit_format",
        "filemap",
        "view_image",
        "insert",  # windowed_edit_replace: insert text at a line of the open file
    }
)
_VIEW_MOVES = frozenset({"goto", "scroll_up", "scroll_down"})
_EDIT_DELIMITER = "SWEWORLD_SWE_AGENT_EDIT"


def detect(path: str | os.PathLike[str]) -> bool:
    """A ``.traj`` file, or a folder with ``.traj`` files (``*.traj.json`` is
    mini-swe-agent's, not this format)."""
    path = Path(path)
    if path.is_file():
        return path.name.endswith(SUFFIX)
    if not path.is_dir():
        return False
    seen = 0
    for _folder, dirs, files in os.walk(path):
        dirs.sort()
        for name in files:
            seen += 1
            if name.endswith(SUFFIX):
                return True
            if seen > DETECT_SCAN_LIMIT:
                return False
    return False


# ------------------------------------------------------------------------------ actions
def _function(name: str, params: dict[str, str]) -> dict[str, Any]:
    return {"function": name, "parameters": params}


def _absolute(path: str, cwd: str) -> str:
    if path.startswith("/"):
        return path
    return os.path.normpath(os.path.join(cwd, path))


def _str_replace_editor(args: list[str], cwd: str) -> dict[str, Any] | str:
    if len(args) < 2:
        return "str_replace_editor without a command and a path"
    command, path, rest = args[0], args[1], args[2:]
    if command not in ("view", "create", "str_replace", "insert", "undo_edit"):
        return f"str_replace_editor command {command!r} has no equivalent"
    params = {"command": command, "path": _absolute(path, cwd)}
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag in _EDITOR_FLAGS and i + 1 < len(rest):
            params[_EDITOR_FLAGS[flag]] = rest[i + 1]
            i += 2
        elif flag == "--insert_line" and i + 1 < len(rest):
            params["insert_line"] = rest[i + 1]
            i += 2
        elif flag == "--view_range" and i + 2 < len(rest) + 1 and i + 2 <= len(rest):
            values = rest[i + 1 : i + 3]
            if len(values) == 1:  # "--view_range '[1, 20]'"
                params["view_range"] = values[0]
                i += 2
            else:
                params["view_range"] = f"[{values[0]}, {values[1]}]"
                i += 3
        else:
            return f"str_replace_editor: unexpected argument {flag!r}"
    return _function("file_editor", params)


def _edit_command(path: str, start: int, end: int, text: str) -> str:
    """Bash replacing lines ``start``..``end`` of ``path`` with ``text`` exactly as SWE-agent's
    windowed ``edit`` does (``lines[start-1:end] = text.split("\\n")`` on the file split at
    newlines), with real file operations only."""
    quoted = shlex.quote(path)
    delimiter = _EDIT_DELIMITER
    while delimiter in text:
        delimiter += "_"
    lines = [
        f"sweworld_n=$(wc -l < {quoted}) && {{",
        f"head -n {max(start - 1, 0)} {quoted}",
    ]
    if text:
        lines += [
            f"cat <<'{delimiter}' | if [ \"$sweworld_n\" -ge {end} ]; then cat; "
            "else head -c -1; fi",
            text,
            delimiter,
        ]
    lines += [
        f'if [ "$sweworld_n" -ge {end} ]; then tail -n +{end + 1} {quoted}; fi',
        f"}} > {quoted}.sweworld-edit && cat {quoted}.sweworld-edit > {quoted} && "
        f"rm -f {quoted}.sweworld-edit",
    ]
    return "\n".join(lines)


def translate_action(
    action: str, observation: str, *, open_file: str | None, cwd: str, last: bool
) -> tuple[str, dict[str, Any] | None, str | None]:
    """``(bash command, tool call, reason not replayable)`` for one SWE-agent action (one of
    the three is set). ``open_file`` is the file SWE-agent's windowed tools act on,
    ``cwd`` the shell's directory, ``last`` whether this is the trajectory's last step."""
    text = action.strip()
    if not text:
        return "", None, "empty action"
    if len(text) > MAX_ACTION_CHARS:
        return "", None, f"action longer than {MAX_ACTION_CHARS} characters"
    head, _, rest = text.partition("\n")
    name = head.split(None, 1)[0]
    if name == "edit":
        words = head.split()
        match = _LINE_RANGE.match(words[1]) if len(words) == 2 else None
        if match is None:
            return "", None, "edit by search and replace has no equivalent"
        if open_file is None:
            return "", None, "edit without an open file"
        if any(marker in observation for marker in _NOT_APPLIED):
            return "", None, "edit not applied (SWE-agent reverted or refused it)"
        body = rest
        if body.endswith("end_of_edit"):
            body = body[: -len("end_of_edit")]
            body = body[:-1] if body.endswith("\n") else body
        start, end = int(match.group(1)), int(match.group(2))
        return _edit_command(open_file, start, end, body), None, None
    known = {"str_replace_editor", "open", "create", "find_file", "search_dir", "search_file"}
    if name in _NO_EQUIVALENT or name.startswith("exit_"):
        return "", None, f"SWE-agent tool {name!r} has no equivalent"
    if name == "submit":
        if not last:
            return "", None, "submit answered by SWE-agent without ending the run"
        return "", _function("finish", {"command": "submit"}), None
    if name in _VIEW_MOVES:
        if open_file is None:
            return "", None, f"{name} without an open file"
        return "", _function("file_editor", {"command": "view", "path": open_file}), None
    if name not in known:
        return text, None, None
    try:
        args = shlex.split(text)[1:]
    except ValueError as exc:
        return "", None, f"cannot split the arguments of {name} ({exc})"
    if name == "str_replace_editor":
        call = _str_replace_editor(args, cwd)
        return ("", call, None) if isinstance(call, dict) else ("", None, call)
    if not args:
        return "", None, f"{name} without arguments"
    if name == "open":
        return (
            "",
            _function("file_editor", {"command": "view", "path": _absolute(args[0], cwd)}),
            None,
        )
    if name == "create":
        if "already exists" in observation:
            return "", None, "create of a file that already existed (nothing done)"
        target = shlex.quote(_absolute(args[0], cwd))
        return f'mkdir -p "$(dirname {target})" && touch {target}', None, None
    if name == "find_file":
        where = shlex.quote(args[1]) if len(args) > 1 else "."
        return f"find {where} -name {shlex.quote(args[0])}", None, None
    params = {"search_term": args[0]}
    if len(args) > 1:
        params["path"] = _absolute(args[1], cwd)
    elif name == "search_file":
        if open_file is None:
            return "", None, "search_file without a file or an open file"
        params["path"] = open_file
    return "", _function("search", params), None


def _to_xml(call: Mapping[str, Any]) -> str:
    from sweworld.sandbox.actions import Action

    return Action(
        kind="function", function=call["function"], parameters=call["parameters"]
    ).to_xml()


# ------------------------------------------------------------------------------ files
def _state(step: Mapping[str, Any]) -> dict[str, Any]:
    state = step.get("state")
    if isinstance(state, str):  # SWE-agent 0.x: the state as JSON text
        try:
            state = json.loads(state)
        except (json.JSONDecodeError, RecursionError):
            return {}
    return dict(state) if isinstance(state, Mapping) else {}


def _replay_config(data: Mapping[str, Any]) -> dict[str, Any]:
    config = data.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (json.JSONDecodeError, RecursionError):
            return {}
    return dict(config) if isinstance(config, Mapping) else {}


def _dig(data: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def convert(
    data: Any,
    *,
    where: str,
    instance_hint: str = "",
    tasks: Mapping[str, Mapping[str, Any]] | None = None,
    reports: Mapping[str, Mapping[str, Any]] | None = None,
) -> Trajectory | Skip:
    """One loaded ``.traj`` object as a :class:`Trajectory` (or why it cannot be one)."""
    if not isinstance(data, Mapping):
        return Skip(where, f"expected a JSON object, got {type(data).__name__}")
    info = data.get("info") if isinstance(data.get("info"), Mapping) else {}
    if "trajectory" not in data and isinstance(data.get("attempts"), list) and data["attempts"]:
        index = info.get("best_attempt_idx")
        attempts = data["attempts"]
        chosen = (
            attempts[index]
            if isinstance(index, int) and 0 <= index < len(attempts)
            else attempts[-1]
        )
        if not isinstance(chosen, Mapping):
            return Skip(where, "attempt is not a JSON object")
        data = {**chosen, "info": {**(chosen.get("info") or {}), **info}}
        info = data["info"]
    steps_in = data.get("trajectory")
    if not isinstance(steps_in, list):
        return Skip(where, "no 'trajectory' list: not a SWE-agent trajectory")
    config = _replay_config(data)
    iid = _dig(config, "problem_statement", "id") or instance_hint
    if not isinstance(iid, str) or not iid:
        return Skip(where, "no instance id (neither in replay_config nor in the file name)")
    row = task_row(
        iid,
        tasks or {},
        base_commit=_dig(config, "env", "repo", "base_commit"),
        problem_statement=_dig(config, "problem_statement", "text"),
    )
    if not row.get("repo"):
        return Skip(where, "unknown repository (pass --tasks with this instance)")
    steps: list[TrajectoryStep] = []
    tool_calls: dict[str, Any] = {}
    not_replayable: dict[str, str] = {}
    open_file: str | None = None
    first_state = _state(steps_in[0]) if steps_in and isinstance(steps_in[0], Mapping) else {}
    root = first_state.get("working_dir")
    cwd = root if isinstance(root, str) and root.startswith("/") else DEFAULT_ROOT
    repo_root = cwd
    for index, raw in enumerate(steps_in):
        if not isinstance(raw, Mapping):
            return Skip(f"{where} step {index}", "step is not a JSON object")
        action, observation = raw.get("action"), raw.get("observation")
        if not isinstance(action, str) or not isinstance(observation, (str, type(None))):
            return Skip(f"{where} step {index}", "step without a text action and observation")
        observation = observation or ""
        command, call, reason = translate_action(
            action, observation, open_file=open_file, cwd=cwd, last=index == len(steps_in) - 1
        )
        output, truncated = cap_text(observation)
        step = TrajectoryStep(command=command, output=output, output_truncated=truncated)
        if call is not None:
            step.action = _to_xml(call)
            tool_calls[str(index)] = call
            if call["function"] == "file_editor" and call["parameters"].get("command") == "view":
                open_file = call["parameters"]["path"]
        if reason is not None:
            not_replayable[str(index)] = reason
        if command.startswith("mkdir -p") and action.strip().startswith("create"):
            open_file = _absolute(shlex.split(action.strip())[1], cwd)
        steps.append(step)
        state = _state(raw)
        if isinstance(state.get("open_file"), str) and state["open_file"] not in ("", "n/a"):
            open_file = state["open_file"]
        if isinstance(state.get("working_dir"), str) and state["working_dir"].startswith("/"):
            cwd = state["working_dir"]
    submission = info.get("submission")
    if isinstance(submission, Mapping):
        submission = submission.get("model_patch") or submission.get("patch")
    report = None
    if reports and iid in reports:
        entry = reports[iid]
        report = {"resolved": entry["resolved"], "tests_status": entry.get("tests_status") or {}}
    return Trajectory(
        source=NAME,
        instance_id=iid,
        repo=str(row["repo"]),
        task=row,
        steps=steps,
        submission=submission if isinstance(submission, str) else "",
        report=report,
        meta={
            "format": NAME,
            "path": where,
            "exit_status": info.get("exit_status"),
            "model_stats": info.get("model_stats")
            if isinstance(info.get("model_stats"), Mapping)
            else None,
            "environment": data.get("environment"),
            "repo_root": repo_root,
            "tool_calls": tool_calls,
            "not_replayable": not_replayable,
        },
    )


def _load_reports(
    source: str | os.PathLike[str] | None,
) -> tuple[dict[str, dict[str, Any]], list[Skip]]:
    reports: dict[str, dict[str, Any]] = {}
    skips: list[Skip] = []
    if not source:
        return reports, skips
    from sweworld.data.importers.swebench_preds import iter_report_entries

    root = Path(source)
    files = [root] if root.is_file() else sorted(root.rglob("*.json")) if root.is_dir() else []
    if not files:
        skips.append(Skip(str(root), "no report found"))
    for file in files:
        for item in iter_report_entries(file):
            if isinstance(item, Skip):
                skips.append(item)
            elif item[0] in reports:
                skips.append(Skip(f"{file}:{item[0]}", "duplicate report (first kept)"))
            else:
                reports[item[0]] = item[1]
    return reports, skips


def read(
    path: str | os.PathLike[str],
    *,
    tasks: str | os.PathLike[str] | None = None,
    reports: str | os.PathLike[str] | None = None,
    **_options: Any,
) -> Iterator[Trajectory | Skip]:
    """Trajectories of a ``.traj`` file or of every ``.traj`` under a folder, one file in
    memory at a time.

    Args:
        tasks: a task file giving each instance's row (``--tasks``).
        reports: harness reports labelling the submissions (a ``report.json``, a run-level
            summary, or a folder of them).
    """
    root = Path(path)
    rows, skipped = load_task_rows(tasks)
    if skipped is not None:
        yield skipped
    labels, report_skips = _load_reports(reports)
    yield from report_skips
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob(f"*{SUFFIX}") if p.is_file())
    else:
        yield Skip(str(root), "no such file or folder")
        return
    seen: set[str] = set()
    for file in files:
        data = read_json(file)
        if isinstance(data, Skip):
            yield data
            continue
        result = convert(
            data,
            where=str(file),
            instance_hint=file.name[: -len(SUFFIX)],
            tasks=rows,
            reports=labels,
        )
        if isinstance(result, Trajectory):
            if result.instance_id in seen:
                yield Skip(str(file), f"duplicate trajectory for {result.instance_id}")
                continue
            seen.add(result.instance_id)
        yield result
