"""Collect mode on the toy tasks with the real LocalExecutor (sandbox required)."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.conftest import requires_sandbox

pytestmark = [requires_sandbox, pytest.mark.slow]

SLUG = "python -c \"from stockroom.textutil import slugify; print(slugify('Hello,  World!'))\""
FIX = (
    "<function=file_editor>\n  <parameter=command>str_replace</parameter>\n"
    "  <parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
    '  <parameter=old_str>    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
    "</parameter>\n"
    '  <parameter=new_str>    slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n'
    "    return slug.strip(separator)</parameter>\n</function>"
)
TESTS = "python -m pytest -rA tests/test_textutil.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SCRIPT = [SLUG, FIX, SLUG, TESTS, SUBMIT]


def _script_file(tmp_path, actions=SCRIPT):
    path = tmp_path / "actions.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_scripted_policy_records_truth_trajectory_and_real_label(tmp_path, manager, toy_tasks):
    from sweworld.data.collect import collect
    from sweworld.data.store import load_split
    from sweworld.reward.real import real_reward

    task = toy_tasks[0]
    out = tmp_path / "out"
    spec = f"scripted:{_script_file(tmp_path)}"
    stats = collect([task], spec, out=out, manager=manager)
    assert (stats.done, stats.skipped, stats.steps, stats.swt, stats.swr) == (1, 0, 5, 3, 1)

    swt = sorted(load_split(out, "swt", "all"), key=lambda r: r.step)
    # the executor sees the intercepted argv, re-quoted: the same words
    assert [shlex.split(r.command) for r in swt] == [shlex.split(c) for c in (SLUG, SLUG, TESTS)]
    before, after, tests = swt
    assert before.stdout == "hello---world-\n" and before.diff == ""
    assert after.stdout == "hello-world\n" and "slug.strip(separator)" in after.diff
    assert all(r.state_source == "live" and r.source == "collect" for r in swt)
    assert all(r.exit_code == 0 and r.prediction == "" for r in swt)
    assert tests.ran_tests and tests.command_kind == "pytest"
    statuses = tests.statuses()
    assert len(statuses) == 9 and set(statuses.values()) == {"PASSED"}
    assert json.loads(tests.context_oracle)["command"] == tests.command
    assert len({r.id for r in swt}) == 3

    (traj,) = _rows(out / "trajectories.jsonl")
    assert [s["action"] for s in traj["steps"]] == SCRIPT
    assert traj["steps"][1]["command"] == "" and "file_editor" in traj["steps"][1]["output"]
    assert "hello-world" in traj["steps"][2]["output"]
    assert traj["meta"]["end"] == "submitted"
    assert "slug.strip(separator)" in traj["submission"]

    (swr,) = load_split(out, "swr", "all")
    truth = real_reward(task, traj["submission"], manager=manager)
    assert swr.patch == traj["submission"]
    assert swr.resolved is truth.resolved is True
    assert swr.label_source == "real-run" and swr.candidate_kind == "agent"
    label = json.loads(swr.tests_status)
    assert label == truth.report[task.instance_id]["tests_status"]
    assert label["FAIL_TO_PASS"]["success"] == [
        "tests/test_textutil.py::test_slugify_collapses_separators"
    ]
    assert traj["report"]["resolved"] is True
    summary = json.loads((out / "summary.json").read_text())
    assert summary["collect"]["swt"] == 3 and summary["swr"]["resolved"] == {"True": 1}


def test_cli_resumes_and_skips_a_failing_policy(tmp_path, manager, toy_tasks, monkeypatch):
    from sweworld.cli import main

    script = _script_file(tmp_path, [SLUG, SUBMIT])
    out = tmp_path / "out"
    argv = ["data", "collect", "--tasks", "toy", "--ids", "sweworld__stockroom-1", "nope"]
    argv += ["--policy", f"scripted:{script}", "--max-steps", "5", "--out", str(out)]
    argv += ["--no-label"]
    assert main(argv) == 0
    swt_lines = (out / "records" / "swt.jsonl").read_text()
    assert len(swt_lines.splitlines()) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"]["by_reason"] == {"unknown instance: not in " + _toy_path(): 1}

    assert main(argv) == 0  # resumed: nothing new
    assert (out / "records" / "swt.jsonl").read_text() == swt_lines
    assert len(_rows(out / "trajectories.jsonl")) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["collect"]["resumed"] == 1 and summary["collect"]["done"] == 0


def _toy_path():
    from sweworld.tasks.toy import toy_tasks_path

    return str(toy_tasks_path())


class _Raises:
    """Acts once, then raises on the second task's first action."""

    name = "raises"

    def reset(self, task, first_observation):
        self.task = task
        self.n = 0

    def act(self, observation):
        self.n += 1
        if self.task.instance_id.endswith("-2"):
            raise RuntimeError("the agent crashed")
        return SLUG if self.n == 1 else None


def test_a_policy_that_raises_skips_its_task_only(tmp_path, manager, toy_tasks):
    from sweworld.data.collect import collect

    out = tmp_path / "out"
    stats = collect(toy_tasks[:2], _Raises, out=out, manager=manager, label=False, workers=2)
    assert (stats.done, stats.skipped, stats.swt) == (1, 1, 1)
    skipped = _rows(out / "records" / "skipped.jsonl")
    assert skipped == [
        {
            "unit": "collect:raises:sweworld__stockroom-2",
            "reason": "policy failed: RuntimeError: the agent crashed",
        }
    ]
    (traj,) = _rows(out / "trajectories.jsonl")
    assert traj["instance_id"] == "sweworld__stockroom-1"
    assert traj["meta"]["end"] == "policy stopped"


class _BrokenExecutor:
    name = "broken"

    def execute(self, request):
        raise OSError("the engine went away")


def test_an_executor_that_fails_skips_the_task(tmp_path, manager, toy_tasks):
    from sweworld.data.collect import collect

    out = tmp_path / "out"
    spec = f"scripted:{_script_file(tmp_path, ['ls', SLUG, SUBMIT])}"
    stats = collect(toy_tasks[:1], spec, out=out, executor=_BrokenExecutor(), manager=manager)
    assert (stats.done, stats.skipped, stats.swt, stats.swr) == (0, 1, 0, 0)
    (skip,) = _rows(out / "records" / "skipped.jsonl")
    assert skip["reason"].startswith("executor failed: `python -c")
    assert "OSError: the engine went away" in skip["reason"]
    assert not (out / "trajectories.jsonl").exists()


def test_predict_replay_puts_the_prediction_beside_the_truth(tmp_path, manager, toy_tasks):
    from sweworld.data.collect import collect
    from sweworld.data.store import iter_records

    answer = {"stdout": "hello-world\n", "stderr": "", "exit_code": 0}
    replay = tmp_path / "answers.jsonl"
    replay.write_text((json.dumps({"text": json.dumps(answer)}) + "\n") * 6)
    out = tmp_path / "out"
    spec = f"scripted:{_script_file(tmp_path, [SLUG, SUBMIT])}"
    stats = collect(
        toy_tasks[:1], spec, out=out, predict=f"replay:{replay}", manager=manager, label=False
    )
    assert stats.swt == 1
    (record,) = list(iter_records(out, "swt"))
    assert record.stdout == "hello---world-\n"  # the truth: the bug is still there
    prediction = json.loads(record.prediction)
    assert prediction["stdout"] == "hello-world\n" and prediction["exit_code"] == 0
    assert prediction["source"] == "model"


def test_openai_policy_against_a_loopback_server(tmp_path, manager, toy_tasks):
    from sweworld.data.collect import collect
    from sweworld.data.policies import make_policy_factory
    from sweworld.models import ReplayLM
    from tests.model_fixtures import ChatServer

    answers = [
        "I will just look around first, no code block here.",
        'THOUGHT: try the function.\n\n```bash\npython -c "print(6 * 7)"\n```',
        f"THOUGHT: done.\n\n```bash\n{SUBMIT}\n```",
    ]
    server = ChatServer(ReplayLM(answers))
    try:
        factory = make_policy_factory(f"openai:{server.url}#agent", max_calls=10)
        out = tmp_path / "out"
        stats = collect(toy_tasks[:1], factory, out=out, manager=manager)
    finally:
        server.close()
    assert (stats.done, stats.steps, stats.swt, stats.swr) == (1, 3, 1, 1)
    (traj,) = _rows(out / "trajectories.jsonl")
    garbage, run, submit = traj["steps"]
    assert submit["command"] == SUBMIT
    assert garbage["command"] == "" and garbage["exit_code"] is None
    assert "EXACTLY ONE action in triple backticks, found 0 actions" in garbage["output"]
    assert run["command"] == 'python -c "print(6 * 7)"'
    assert run["output"] == "<returncode>0</returncode>\n<output>\n42\n</output>"
    assert traj["meta"]["end"] == "submitted"
    # the model saw the problem, then the format error, then the rendered observation
    first, second, third = (body["messages"] for body in server.bodies)
    assert toy_tasks[0].problem_statement.strip() in first[1]["content"]
    assert second[-1] == {"role": "user", "content": garbage["output"]}
    assert third[-1] == {"role": "user", "content": run["output"]}
    records = _rows(out / "records" / "swt.jsonl")
    assert [(shlex.split(r["command"]), r["stdout"], r["step"]) for r in records] == [
        (["python", "-c", "print(6 * 7)"], "42\n", 1)
    ]
    (swr,) = _rows(out / "records" / "swr.jsonl")
    assert swr["patch"] == "" and swr["candidate_kind"] == "empty" and swr["resolved"] is False


def test_a_torn_trajectory_line_does_not_swallow_the_next_one(tmp_path, manager, toy_tasks):
    """A run killed mid-line leaves a torn last line: the next task's trajectory must start a
    line of its own (glued to the torn text it was lost, its unit marked done)."""
    from sweworld.data.collect import collect

    out = tmp_path / "out"
    out.mkdir()
    (out / "trajectories.jsonl").write_text('{"source": "collect", "instance_id": "x", "st')
    spec = f"scripted:{_script_file(tmp_path, ['ls /testbed', SUBMIT])}"
    stats = collect([toy_tasks[0]], spec, out=out, manager=manager, label=False)
    assert stats.done == 1
    (traj,) = _rows(out / "trajectories.jsonl")
    assert traj["instance_id"] == toy_tasks[0].instance_id and len(traj["steps"]) == 2
