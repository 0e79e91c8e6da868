"""R2E-Gym and rLLM trajectories -> :class:`~sweworld.data.schema.Trajectory` objects.

**R2E-Gym** (``r2egym.agenthub.trajectory.Trajectory.model_dump_json``, one per line of the
run's ``<exp_name>.jsonl``, or one per ``.json`` file): ``trajectory_steps`` (``step_idx``,
``thought``, ``action``: the XML function call, ``observation``: ``str(Observation)``, ...),
``ds`` (the task row), ``problem_statement``, ``output_patch``, ``exit_reason``, ``reward``
(1.0 when the patch passed the task's tests in R2E-Gym's real run), ``test_output``.

**rLLM** (``rllm.agents.agent.Trajectory.to_dict``: ``steps``, ``reward``, ``task``): rLLM's
SWE agent drives R2E-Gym's environment, so its steps hold the same XML actions and
R2E-rendered observations, with two differences: a step's ``observation`` is what the agent
saw *before* acting (the result of its action is the step's ``next_observation``, or the
next step's ``observation``), and rLLM appends its own notes (``Steps Remaining: N``, the
token warning), which are removed. rLLM itself writes no trajectory files in a stable format;
this reads the JSON of its ``Trajectory`` as ``to_dict`` gives it (one per line or per file).

A step's observation is read back into the tool's output: for ``execute_bash`` the exit
code (``0``, ``Error: Exit code N``, ``-1`` for a timeout) and the stdout / stderr the
R2E-Gym script printed (both stripped by that script), marked truncated when R2E-Gym kept
only the first and last 40 lines. The action is kept as the XML call (``Session.step``
reads it); a bash call also has its ``command``. A step without a function call is kept, not
replayable (``meta["not_replayable"]``). ``reward`` is the label (``Trajectory.report``).
"""

from __future__ import annotations

import os
import re
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
from sweworld.data.schema import Trajectory, TrajectoryStep, record_id

__all__ = ["NAME", "convert", "detect", "parse_observation", "read"]

NAME = "r2e-gym"
RLLM = "rllm"
DETECT_SCAN_LIMIT = 2000

_HEADER_RE = re.compile(r"^Exit code: ([^\n]*)\nExecution output of \[([^\]\n]*)\]:\n")
_PLAIN_RE = re.compile(r"^Execution output of \[([^\]\n]*)\]:\n")
_EXIT_RE = re.compile(r"^(?:Error: Exit code )?(-?\d+)")
_TRUNCATED = "<Observation truncated in middle for saving context>"
_STDOUT = "[STDOUT]\n\n"
_STDERR = "[STDERR]\n\n"
_ERROR_PREFIX = "Error executing command:\n\n"
_FINISHED = "<<< Finished >>>"
_BASH_FUNCTIONS = ("execute_bash", "bash")
_RLLM_NOTES = (
    re.compile(r"\nSteps Remaining: \d+$"),
    re.compile(
        r"\nYou have reached the maximum number of steps\. Please submit your answer NOW\.$"
    ),
    re.compile(r"\nYou are running out of tokens\. Please submit your answer NOW\.$"),
)


# ------------------------------------------------------------------------------ detection
def _is_r2e(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj) and isinstance(obj.get("trajectory_steps"), list)  # type: ignore[union-attr]


def _is_rllm(obj: Mapping[str, Any] | None) -> bool:
    if not obj or "instance_id" in obj or not isinstance(obj.get("steps"), list):
        return False
    first = obj["steps"][0] if obj["steps"] else None
    return (
        isinstance(first, Mapping)
        and "observation" in first
        and ("model_response" in first or "chat_completions" in first)
    )


def _json_files(root: Path, limit: int | None = None) -> Iterator[Path]:
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if limit is not None and seen > limit:
                return
            if name.endswith((".json", ".jsonl", ".jsonl.gz")) and not name.endswith(".traj.json"):
                yield Path(folder) / name


def _is_trajectory_file(path: Path) -> bool:
    obj = first_json_object(path)
    return _is_r2e(obj) or _is_rllm(obj)


def detect(path: str | os.PathLike[str]) -> bool:
    """A JSON / JSON Lines file of R2E-Gym or rLLM trajectories, or a folder holding one."""
    path = Path(path)
    if path.is_file():
        if path.name.endswith(".traj.json"):
            return False
        obj = first_json_object(path)
        return _is_r2e(obj) or _is_rllm(obj)
    if path.is_dir():
        for file in _json_files(path, DETECT_SCAN_LIMIT):
            obj = first_json_object(file)
            if _is_r2e(obj) or _is_rllm(obj):
                return True
    return False


# ------------------------------------------------------------------------------ steps
def parse_observation(observation: str) -> dict[str, Any]:
    """What an R2E-Gym observation string says: ``function``, ``output``, ``stderr`` (None
    unless the bash script printed it apart), ``exit_code`` (None when not reported),
    ``truncated``."""
    out: dict[str, Any] = {
        "function": "",
        "output": observation,
        "stderr": None,
        "exit_code": None,
        "truncated": _TRUNCATED in observation,
    }
    header = _HEADER_RE.match(observation)
    if header is None:
        plain = _PLAIN_RE.match(observation)
        if plain is not None:
            out["function"] = plain.group(1)
            out["output"] = observation[plain.end() :]
        return out
    code_text, function, body = header.group(1), header.group(2), observation[header.end() :]
    out["function"] = function
    code = _EXIT_RE.match(code_text.strip())
    out["exit_code"] = int(code.group(1)) if code else None
    out["output"] = body
    if body.startswith(_ERROR_PREFIX):
        body = body[len(_ERROR_PREFIX) :]
    if body.startswith(_STDOUT) and "\n" + _STDERR in body and not out["truncated"]:
        stdout, _, stderr = body[len(_STDOUT) :].partition("\n" + _STDERR)
        # the script printed ``stdout.strip(), "\n"`` (a space and two newlines)
        stdout = stdout[: -len(" \n")] if stdout.endswith(" \n") else stdout
        out["output"] = stdout + "\n" if stdout else ""
        stderr = stderr[:-1] if stderr.endswith("\n") else stderr
        out["stderr"] = stderr + "\n" if stderr else ""
    return out


def _action_text(action: Any) -> Any:
    if isinstance(action, Mapping) and "action" in action and len(action) == 1:
        return action["action"]  # rLLM's Action dataclass
    return action


def _step(index: int, action: Any, observation: str) -> tuple[TrajectoryStep, str | None]:
    from sweworld.sandbox.actions import ActionParseError, parse_action

    action = _action_text(action)
    if action is None or (isinstance(action, str) and not action.strip()):
        output, truncated = cap_text(observation)
        return TrajectoryStep(command="", output=output, output_truncated=truncated), "empty action"
    try:
        parsed = parse_action(action, format="r2e" if isinstance(action, str) else "auto")
    except ActionParseError:
        output, truncated = cap_text(observation)
        step = TrajectoryStep(command="", output=output, output_truncated=truncated)
        return step, "no function call in the action"
    seen = parse_observation(observation)
    output, truncated = cap_text(seen["output"])
    step = TrajectoryStep(
        command="",
        output=output,
        exit_code=seen["exit_code"],
        stderr=seen["stderr"],
        output_truncated=truncated or seen["truncated"],
        action=action if isinstance(action, str) else parsed.to_xml(),
    )
    if parsed.kind == "bash":
        step.command = parsed.command
    elif parsed.function in _BASH_FUNCTIONS:
        step.command = parsed.parameters.get("cmd", "")
    elif parsed.function not in ("file_editor", "search", "finish", "submit"):
        return step, f"tool {parsed.function!r} has no equivalent in sweworld"
    return step, None


def _strip_rllm_notes(text: str) -> str:
    for pattern in _RLLM_NOTES:
        text = pattern.sub("", text)
    return text


def _task_of(
    data: Mapping[str, Any], tasks: Mapping[str, Any], where: str
) -> dict[str, Any] | Skip:
    ds = data.get("ds") if "trajectory_steps" in data else data.get("task")
    if isinstance(ds, Mapping):
        from sweworld.tasks.schema import Task

        try:
            row = Task.from_row(dict(ds)).to_row()
        except Exception as exc:  # a row the task schema refuses: say why
            return Skip(where, f"task row not readable ({exc})")
        if row["instance_id"] in tasks:
            row = {**row, **tasks[row["instance_id"]]}
        return row
    iid = data.get("instance_id")
    if isinstance(iid, str) and iid:
        return task_row(iid, tasks, problem_statement=data.get("problem_statement"))
    return Skip(where, "no task row ('ds' / 'task') and no instance id")


def convert(
    data: Any, *, where: str, tasks: Mapping[str, Mapping[str, Any]] | None = None
) -> Trajectory | Skip:
    """One R2E-Gym or rLLM trajectory object as a :class:`Trajectory`."""
    if not isinstance(data, Mapping):
        return Skip(where, f"expected a JSON object, got {type(data).__name__}")
    rllm = not _is_r2e(data)
    if rllm and not isinstance(data.get("steps"), list):
        return Skip(where, "neither 'trajectory_steps' (R2E-Gym) nor 'steps' (rLLM)")
    row = _task_of(data, tasks or {}, where)
    if isinstance(row, Skip):
        return row
    if not row.get("repo"):
        return Skip(where, "unknown repository (pass --tasks with this instance)")
    raw_steps = data["steps"] if rllm else data["trajectory_steps"]
    steps: list[TrajectoryStep] = []
    not_replayable: dict[str, str] = {}
    for index, raw in enumerate(raw_steps):
        if not isinstance(raw, Mapping):
            return Skip(f"{where} step {index}", "step is not a JSON object")
        if rllm:
            nxt = raw.get("next_observation")
            if (
                nxt is None
                and index + 1 < len(raw_steps)
                and isinstance(raw_steps[index + 1], Mapping)
            ):
                nxt = raw_steps[index + 1].get("observation")
            observation = _strip_rllm_notes(str(nxt)) if nxt is not None else ""
        else:
            observation = raw.get("observation")
        if not isinstance(observation, str):
            return Skip(f"{where} step {index}", "step without a text observation")
        step, reason = _step(index, raw.get("action"), observation)
        if reason is not None:
            not_replayable[str(index)] = reason
        steps.append(step)
    reward = data.get("reward")
    report = None
    if isinstance(reward, (int, float)):
        report = {"resolved": float(reward) >= 1.0, "tests_status": {}}
    patch = data.get("output_patch")
    return Trajectory(
        source=RLLM if rllm else NAME,
        instance_id=str(row["instance_id"]),
        repo=str(row["repo"]),
        task=row,
        steps=steps,
        submission=patch if isinstance(patch, str) else "",
        report=report,
        meta={
            "format": RLLM if rllm else NAME,
            "path": where,
            "exit_reason": data.get("exit_reason"),
            "label_source": "r2e-gym-reward" if report is not None else None,
            "not_replayable": not_replayable,
        },
    )


def read(
    path: str | os.PathLike[str],
    *,
    tasks: str | os.PathLike[str] | None = None,
    **_options: Any,
) -> Iterator[Trajectory | Skip]:
    """Trajectories of a JSON Lines file (one per line), a JSON file (one, or a list), or a
    folder of them, one line or file in memory at a time. ``tasks``: a task file whose rows
    complete or replace the rows the trajectories carry."""
    root = Path(path)
    rows, skipped = load_task_rows(tasks)
    if skipped is not None:
        yield skipped
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = [f for f in _json_files(root) if _is_trajectory_file(f)]
    else:
        yield Skip(str(root), "no such file or folder")
        return
    seen: set[str] = set()
    for file in files:
        if file.name.endswith((".jsonl", ".jsonl.gz")):
            items: Iterator[tuple[str, Any]] = iter_jsonl(file)
        else:
            data = read_json(file)
            if isinstance(data, list):
                items = ((f"{file} item {i}", v) for i, v in enumerate(data))
            else:
                items = iter([(str(file), data)])
        for where, value in items:
            result = value if isinstance(value, Skip) else convert(value, where=where, tasks=rows)
            if isinstance(result, Trajectory):
                key = record_id(
                    result.instance_id,
                    result.submission,
                    *(s.action or s.command for s in result.steps),
                )
                if key in seen:
                    yield Skip(where, f"duplicate trajectory for {result.instance_id}")
                    continue
                seen.add(key)
                # an instance may have several rollouts: each is its own unit and id prefix
                result.meta["trajectory_id"] = key
            yield result
