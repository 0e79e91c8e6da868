"""``sweworld episode``: one whole episode printed for a human, as JSONL, and bad input."""

from __future__ import annotations

import io
import json

import pytest

from sweworld.cli import main
from tests.conftest import PROJECT, requires_sandbox

DEMO = str(PROJECT / "data" / "toy" / "demo_actions.jsonl")
TASK = "sweworld__stockroom-1"
REAL = ["--executor", "local", "--reward", "real"]


@pytest.fixture(autouse=True)
def own_runtime(tmp_path, monkeypatch):
    """Each test's sessions live under its own runtime folder, which must end up empty."""
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("SWEWORLD_RUNTIME_DIR", str(runtime))
    yield
    sessions = runtime / "sessions"
    assert not sessions.exists() or list(sessions.iterdir()) == []  # no leaked sandbox


def episode(*args: str) -> int:
    return main(["episode", "--id", TASK, *args])


@requires_sandbox
def test_the_demo_episode_is_printed_and_resolved(capsys):
    assert episode("--actions", DEMO, *REAL) == 0
    out = capsys.readouterr().out
    assert "== episode on sweworld__stockroom-1" in out
    assert "== prompt (first observation" in out and "<github_issue>" in out
    assert out.count("\n== step ") == 9 and "== step 9/9 [finish]" in out
    assert "hello---world-" in out  # the real run of the reproduction script
    assert "execution: real" in out
    assert "== patch\n    diff --git a/stockroom/textutil.py" in out
    assert "+    return slug.strip(separator)" in out
    assert "1.0 (resolved: True, source: real, status: resolved" in out
    assert "FAIL_TO_PASS: 1/1 pass" in out and "PASS_TO_PASS: 9/9 pass" in out
    assert "== end: submitted (terminated) after 9 step(s)" in out


@requires_sandbox
def test_json_events_and_the_trajectory_file(capsys, tmp_path):
    trajectory = tmp_path / "traj.json"
    code = episode("--actions", DEMO, *REAL, "--json", "--trajectory-out", str(trajectory))
    assert code == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["start", "reset"] + ["step"] * 9 + ["end"]
    assert events[0]["config"]["reward"] == "real" and events[0]["config"]["max_steps"] == 9
    assert events[1]["info"]["instance_id"] == TASK and "<github_issue>" in events[1]["observation"]
    steps = events[2:-1]
    assert steps[0]["action"] == "git log --oneline" and steps[0]["exit_code"] == 0
    assert steps[-1]["terminated"] is True and steps[-1]["reward"] == 1.0
    end = events[-1]
    assert end["reason"] == "submitted" and end["reward"]["resolved"] is True
    assert "slug.strip(separator)" in end["patch"] and end["rewards"][-1] == 1.0
    record = json.loads(trajectory.read_text())
    assert record["instance_id"] == TASK and record["source"] == "episode"
    assert len(record["steps"]) == 9 and record["submission"] == end["patch"]
    assert record["meta"]["reason"] == "submitted"


@requires_sandbox
def test_actions_that_run_out_truncate_and_are_still_graded(capsys, monkeypatch):
    fix = next(
        line for line in PROJECT.joinpath(DEMO).read_text().splitlines() if "str_replace" in line
    )
    lines = ['"ls"', fix]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert episode("--actions", "-", *REAL) == 0
    out = capsys.readouterr().out
    assert "== end: max_steps (truncated) after 2 step(s)" in out
    assert "resolved: True" in out  # the unsubmitted fix is graded


@requires_sandbox
def test_swr_exact_stages_show_their_verdicts(capsys):
    code = episode(
        "--actions", DEMO, "--executor", "local", "--swr-stages", "syntax,typecheck,semantic"
    )
    assert code == 0
    out = capsys.readouterr().out
    # the learned verdict decides over the stages' evidence (the demo's fix is right)
    assert "SWR: resolved, score" in out
    assert "syntax     pass" in out and "semantic   pass" in out


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "does not exist"),
        ("folder", "is a folder"),
        ("empty", "holds no action"),
        ("not_json", "line 1"),
        ("number", "expected a JSON string or object"),
        ("unknown_id", "nope-1"),
        ("executor", "unknown executor 'warp'"),
        ("model", "unknown LM spec"),
        ("max_steps", "--max-steps"),
        ("step_timeout", "--step-timeout"),
        ("stages", "--swr-stages"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(case, message, tmp_path, capsys):
    demo = ["--actions", DEMO]
    argv = {
        "missing": ["--id", TASK, "--actions", str(tmp_path / "none.jsonl")],
        "folder": ["--id", TASK, "--actions", str(tmp_path)],
        "empty": ["--id", TASK, "--actions", _write(tmp_path, "e.jsonl", "\n\n")],
        "not_json": ["--id", TASK, "--actions", _write(tmp_path, "b.jsonl", "ls -la\n")],
        "number": ["--id", TASK, "--actions", _write(tmp_path, "n.jsonl", "42\n")],
        "unknown_id": ["--id", "nope-1", *demo],
        "executor": ["--id", TASK, *demo, "--executor", "warp"],
        "model": ["--id", TASK, *demo, "--model", "bogus:model"],
        "max_steps": ["--id", TASK, *demo, "--max-steps", "0"],
        "step_timeout": ["--id", TASK, *demo, "--step-timeout", "0"],
        "stages": ["--id", TASK, *demo, "--swr-stages", "syntax,vibes"],
    }[case]
    assert main(["episode", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran, nothing printed
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweworld: error: ")
    assert message in lines[0]


def test_an_unknown_choice_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["episode", "--id", TASK, "--actions", DEMO, "--reward", "vibes"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'vibes'" in capsys.readouterr().err


@requires_sandbox
def test_the_default_simulated_executor_with_a_replayed_model(capsys, tmp_path):
    answer = {"stdout": "hello---world-\n", "stderr": "", "exit_code": 0}
    replay = _write(tmp_path, "swt.jsonl", json.dumps({"text": json.dumps(answer)}) + "\n")
    lines = PROJECT.joinpath(DEMO).read_text().splitlines()
    actions = _write(tmp_path, "a.jsonl", "\n".join([*lines[:5], lines[-1]]) + "\n")
    stages = "syntax,typecheck,semantic"
    assert episode("--actions", actions, "--model", f"replay:{replay}", "--swr-stages", stages) == 0
    out = capsys.readouterr().out
    assert "executor: simulated (SWT model replay:" in out
    assert "hello---world-\n    </output>\n   exit 0 · execution: simulated" in out
    assert "== patch\n    (no change)" in out and "SWR: unresolved" in out
    assert "== end: submitted (terminated) after 6 step(s)" in out
