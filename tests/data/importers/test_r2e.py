import json
from pathlib import Path

from sweworld.data.importers import Skip, r2e
from sweworld.data.importers.r2e import parse_observation
from sweworld.data.schema import Trajectory
from sweworld.sandbox.actions import parse_action

FIXTURES = Path(__file__).parent / "fixtures" / "r2e"


def _read(path, **options):
    items = list(r2e.read(path, **options))
    return [i for i in items if isinstance(i, Trajectory)], [
        i for i in items if isinstance(i, Skip)
    ]


def test_r2e_jsonl_steps_outputs_exit_codes_and_label():
    trajs, skips = _read(FIXTURES / "fixture.jsonl")
    assert [t.source for t in trajs] == ["r2e-gym", "r2e-gym"]
    first = trajs[0]
    assert (first.instance_id, first.repo) == ("psf__requests-2317", "psf/requests")
    assert first.base_commit == "091991be0da19de9108dbe5e3752917fea3d7fdc"
    assert first.report == {"resolved": True, "tests_status": {}}
    assert trajs[1].report["resolved"] is False
    assert first.submission.startswith("diff --git a/requests/sessions.py")
    view, failing, passing, timeout, prose, finish = first.steps
    assert view.command == "" and parse_action(view.action).function == "file_editor"
    assert view.output.startswith("Here's the result of running `cat -n`")
    assert (failing.command, failing.exit_code, failing.output) == (
        "python reproduce.py",
        1,
        "before\n",
    )
    assert failing.stderr.endswith("NameError: name 'x' is not defined\n")
    assert passing.exit_code == 0 and passing.output.endswith("1 passed in 0.05s\n")
    assert passing.stderr == ""
    assert timeout.exit_code == -1 and timeout.stderr is None
    assert prose.command == prose.action == ""
    assert first.meta["not_replayable"] == {"4": "no function call in the action"}
    assert parse_action(finish.action).function == "finish" and finish.output == "<<< Finished >>>"
    reasons = sorted(s.reason.split(" (")[0] for s in skips)
    assert reasons == [
        "duplicate trajectory for psf__requests-2317",
        "invalid JSON",
        "task row not readable",
    ]


def test_rllm_trajectory_takes_the_next_observation_without_rllm_notes():
    (traj,), skips = _read(FIXTURES / "rllm_traj.json")
    assert not skips
    assert traj.source == "rllm" and traj.instance_id == "psf__requests-2317"
    run, finish = traj.steps
    assert run.command == "python -c 'print(1)'"
    assert (run.exit_code, run.output, run.stderr) == (0, "1\n", "")
    assert parse_action(finish.action).function == "finish" and finish.output == ""
    assert traj.report == {"resolved": False, "tests_status": {}}


def test_folder_reads_both_files():
    trajs, _ = _read(FIXTURES)
    assert sorted(t.source for t in trajs) == ["r2e-gym", "r2e-gym", "rllm"]


def test_parse_observation_truncated_and_plain():
    middle = "<Observation truncated in middle for saving context>"
    seen = parse_observation(
        f"Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n\na\n{middle}\nz"
    )
    assert seen["truncated"] and seen["exit_code"] == 0 and seen["stderr"] is None
    plain = parse_observation("Execution output of [search]:\nFound 2 matches")
    assert (plain["function"], plain["output"], plain["exit_code"]) == (
        "search",
        "Found 2 matches",
        None,
    )


def test_bad_rows_are_skips(tmp_path):
    path = tmp_path / "bad.jsonl"
    good_ds = {"instance_id": "psf__requests-1", "repo": "psf/requests", "base_commit": "abc"}
    rows = [
        [1, 2],
        {"trajectory_steps": [{"action": "x", "observation": 5}], "ds": good_ds},
        {"trajectory_steps": ["nope"], "ds": good_ds},
        {"trajectory_steps": []},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trajs, skips = _read(path)
    assert not trajs and len(skips) == 4
    assert isinstance(next(r2e.read(tmp_path / "missing.jsonl")), Skip)
