import json
import shlex
import subprocess
from pathlib import Path

import pytest

from sweworld.data.importers import Skip, swe_agent
from sweworld.data.importers.swe_agent import translate_action
from sweworld.data.schema import Trajectory
from sweworld.sandbox.actions import parse_action

FIXTURES = Path(__file__).parent / "fixtures" / "swe_agent"


def _read(path: Path, **options):
    items = list(swe_agent.read(path, **options))
    return [i for i in items if isinstance(i, Trajectory)], [
        i for i in items if isinstance(i, Skip)
    ]


def test_reads_a_run_folder_with_its_broken_file_as_a_skip():
    trajs, skips = _read(FIXTURES / "run")
    assert sorted(t.instance_id for t in trajs) == ["pallets__flask-4045", "psf__requests-2317"]
    assert len(skips) == 1 and "broken__thing-1" in skips[0].unit
    assert "invalid JSON" in skips[0].reason


def test_steps_tools_and_not_replayable_steps():
    (traj,), _ = _read(FIXTURES / "run" / "pallets__flask-4045")
    assert traj.repo == "pallets/flask"
    assert traj.base_commit == "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0"
    assert traj.task["problem_statement"].startswith("Raise error")
    assert traj.submission.startswith("diff --git a/src/flask/blueprints.py")
    assert traj.meta["exit_status"] == "submitted"
    assert len(traj.steps) == 12  # every step kept: indices stay right
    steps = traj.steps
    assert steps[0].command == "find src -name blueprints.py"
    open_call = parse_action(steps[1].action)
    assert (open_call.function, open_call.parameters["path"]) == (
        "file_editor",
        "/testbed/src/flask/blueprints.py",
    )
    assert parse_action(steps[2].action).parameters["command"] == "view"  # goto
    assert steps[3].command.startswith("sweworld_n=$(wc -l < /testbed/src/flask/blueprints.py)")
    create = traj.meta["tool_calls"]["4"]
    assert (
        create["parameters"]["file_text"]
        == 'from flask import Blueprint\nBlueprint("a.b", __name__)\n'
    )
    assert steps[5].command == "python reproduce.py"
    assert steps[5].output.endswith("ValueError: 'name' may not contain a dot '.' character.\n")
    assert steps[5].exit_code is None  # SWE-agent records none
    assert traj.meta["not_replayable"] == {
        "6": "edit not applied (SWE-agent reverted or refused it)",
        "7": "SWE-agent tool 'filemap' has no equivalent",
        "10": "empty action",
    }
    assert steps[6].command == steps[6].action == ""
    exact = traj.meta["tool_calls"]["8"]["parameters"]
    assert exact["old_str"] == "        x = 1" and exact["new_str"] == "        x = 2"
    assert parse_action(traj.meta["tool_calls"]["8"]).parameters["old_str"] == "        x = 1"
    assert traj.meta["tool_calls"]["9"]["parameters"]["view_range"] == "[1, 20]"
    assert parse_action(steps[11].action).function == "finish"


def test_old_format_state_as_text_and_repo_root():
    (traj,), _ = _read(FIXTURES / "run" / "psf__requests-2317")
    assert traj.repo == "psf/requests"
    assert traj.meta["repo_root"] == "/requests"
    assert (
        traj.steps[0].command
        == 'mkdir -p "$(dirname /requests/reproduce_bug.py)" && touch /requests/reproduce_bug.py'
    )
    assert "/requests/reproduce_bug.py" in traj.steps[1].command  # edit of the created file


def test_tasks_and_reports_options(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    row = {
        "instance_id": "psf__requests-2317",
        "repo": "psf/requests",
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "problem_statement": "p",
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": "[]",
        "PASS_TO_PASS": "[]",
        "version": "2.4",
    }
    tasks.write_text(json.dumps(row) + "\n")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"psf__requests-2317": {"resolved": True, "patch_exists": True}}))
    (traj,), _ = _read(FIXTURES / "run" / "psf__requests-2317", tasks=tasks, reports=report)
    assert traj.base_commit == "091991be0da19de9108dbe5e3752917fea3d7fdc"
    assert traj.report == {"resolved": True, "tests_status": {}}


def test_malformed_objects_are_skips():
    assert isinstance(swe_agent.convert([], where="x"), Skip)
    assert "trajectory" in swe_agent.convert({"info": {}}, where="x", instance_hint="a__b-1").reason
    bad_step = {"trajectory": [{"action": 3, "observation": ""}]}
    assert isinstance(swe_agent.convert(bad_step, where="x", instance_hint="a__b-1"), Skip)
    no_repo = swe_agent.convert({"trajectory": []}, where="x", instance_hint="noid")
    assert "unknown repository" in no_repo.reason
    assert isinstance(next(swe_agent.read(Path("/nonexistent/x.traj"))), Skip)


def test_translations():
    def t(action, observation="", open_file="/testbed/a.py", last=False):
        return translate_action(action, observation, open_file=open_file, cwd="/testbed", last=last)

    assert t("search_dir needle src") == (
        "",
        {"function": "search", "parameters": {"search_term": "needle", "path": "/testbed/src"}},
        None,
    )
    assert t("search_file needle")[1]["parameters"]["path"] == "/testbed/a.py"
    assert t("submit")[2] is not None and t("submit", last=True)[1]["function"] == "finish"
    assert t("edit 'old' 'new'")[2] == "edit by search and replace has no equivalent"
    assert t("edit 1:2\nx\nend_of_edit", open_file=None)[2] == "edit without an open file"
    assert t("str_replace_editor view")[2] is not None
    assert t("str_replace_editor view /testbed --bogus 1")[2].startswith(
        "str_replace_editor: unexpected"
    )
    assert "cannot split" in t("open 'unterminated")[2]
    assert t("exit_forfeit")[2] is not None
    assert t("ls -la && cat setup.py") == ("ls -la && cat setup.py", None, None)


def _window_edit(text: str, start: int, end: int, new: str) -> str:
    """SWE-agent's WindowedFile.set_window_text, as its source defines it."""
    lines = text.split("\n")
    lines[start - 1 : end] = new.split("\n") if new else []
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "start", "end", "new"),
    [
        ("a\nb\nc\nd\n", 2, 3, "X\nY\nZ"),
        ("a\nb\nc\nd\n", 1, 1, "first"),
        ("a\nb\nc\nd\n", 2, 2, ""),
        ("a\nb\nc", 3, 3, "last"),
        ("a\nb\nc\n", 4, 4, "after"),
        ("a\nb\n", 1, 2, "  indented 'quotes' $HOME `x`\n\nEOF"),
        ("", 1, 1, "new file"),
    ],
)
def test_edit_command_matches_swe_agent(tmp_path, text, start, end, new):
    target = tmp_path / "f.py"
    target.write_text(text)
    action = f"edit {start}:{end}\n{new}\nend_of_edit"
    command, _, reason = translate_action(
        action, "File updated.", open_file=str(target), cwd="/", last=False
    )
    assert reason is None
    subprocess.run(["bash", "-c", command], check=True, cwd=tmp_path)
    assert target.read_text() == _window_edit(text, start, end, new)
    assert not (tmp_path / "f.py.sweworld-edit").exists()
    assert shlex.quote(str(target)) in command
