"""``sweworld bench e2e``: the scripted candidate agent and an OpenAI-compatible agent on the
toy task, simulated feedback from a replayed world model, every patch graded for real."""

from __future__ import annotations

import http.server
import json
import random
import socket
import threading
from typing import ClassVar

import pytest

from sweworld.bench.e2e_agents import read_test_run
from sweworld.bench.e2e_candidates import candidate_pool, mutate_patch
from sweworld.cli import main
from sweworld.tasks import load_tasks
from sweworld.tasks.toy import toy_tasks_path
from tests.conftest import requires_sandbox

TASK_ID = "sweworld__stockroom-1"


@pytest.fixture(scope="module")
def task():
    return next(t for t in load_tasks(toy_tasks_path()) if t.instance_id == TASK_ID)


def pytest_output(tests, failing=()):
    lines = [("FAILED " if t in failing else "PASSED ") + t for t in tests]
    return (
        "============================= test session starts ==============================\n"
        f"collected {len(tests)} items\n\n"
        "=========================== short test summary info ============================\n"
        + "\n".join(lines)
        + f"\n============================== {len(tests)} passed in 0.02s ==========\n"
    )


def all_pass_world(tmp_path, task):
    """A replayed SWT model that says every test of the task passes, whatever the code."""
    tests = sorted(set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS))
    answer = json.dumps({"stdout": pytest_output(tests), "stderr": "", "exit_code": 0})
    path = tmp_path / "all_pass.jsonl"
    path.write_text((json.dumps({"text": answer}) + "\n") * 30)
    return path


def rows_of(out):
    return {
        json.loads(line)["key"]: json.loads(line)["row"]
        for line in (out / "rows.jsonl").read_text().splitlines()
    }


def figure(report, start):
    return next(f for f in report["figures"] if f["title"].startswith(start))


def test_mutants_change_one_added_code_line(task):
    mutants = mutate_patch(task.patch, 3, random.Random(0))
    assert mutants and len({m.patch for m in mutants}) == len(mutants)
    gold = task.patch.splitlines()
    for mutant in mutants:
        lines = mutant.patch.splitlines()
        assert len(lines) == len(gold)
        changed = [(a, b) for a, b in zip(gold, lines, strict=True) if a != b]
        assert len(changed) == 1 and changed[0][0].startswith("+")
        assert '"""' not in changed[0][0] and "Accents" not in changed[0][0]  # not a docstring


def test_the_pool_order_is_seeded_and_the_same_for_both_feedbacks(task):
    first = [c.label for c in candidate_pool(task, mutants=2, seed=0)]
    assert first == [c.label for c in candidate_pool(task, mutants=2, seed=0)]
    assert "gold" in first and len(first) == 3
    orders = {tuple(c.label for c in candidate_pool(task, mutants=2, seed=s)) for s in range(8)}
    assert len(orders) > 1  # the gold patch is not always first


def test_reading_a_test_run(task):
    tests = sorted(set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS))
    assert read_test_run(pytest_output(tests), 0, task) == "pass"
    assert read_test_run(pytest_output(tests, failing=tests[:1]), 1, task) == "fail"
    assert read_test_run(pytest_output(tests, failing=tests[:1]), 0, task) == "fail"
    assert read_test_run("sweworld: could not be simulated reliably", 126, task) == "no_result"


@requires_sandbox
@pytest.mark.slow
def test_scripted_agent_on_simulated_and_real_feedback(tmp_path, task, capsys):
    world = all_pass_world(tmp_path, task)
    tasks = tmp_path / "tasks.jsonl"
    elsewhere = {**task.to_row(), "repo": "nobody/nowhere", "instance_id": "nobody-1"}
    rows = [json.dumps(task.to_row()), '{"repo": 3}', json.dumps(elsewhere)]
    tasks.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    argv = ["bench", "e2e", "--out", str(out), "--tasks", str(tasks), "--mutants", "1",
            "--world-model", f"replay:{world}"]  # fmt: skip
    assert main(argv) == 0
    rows = rows_of(out)
    pool = rows[f"pool\x1f{TASK_ID}"]["candidates"]
    order = [c.label for c in candidate_pool(task, mutants=1, seed=0)]
    assert [c["label"] for c in pool] == order
    assert {c["status"] for c in pool} == {"resolved", "unresolved"}  # both applied, graded
    assert sum(c["resolved"] for c in pool) == 1  # the gold patch; the mutant breaks a test
    real, sim = rows[f"real\x1f{TASK_ID}"], rows[f"simulated\x1f{TASK_ID}"]
    # real feedback: the agent submits the candidate that really passes
    assert real["status"] == "ok" and real["resolved"] is True and real["chosen"] == "gold"
    assert real["grade_status"] == "resolved"
    # a world that says every run passes: the first candidate tried is submitted
    assert sim["status"] == "ok" and sim["chosen"] == order[0]
    assert sim["resolved"] is (order[0] == "gold")
    assert sim["sources"] == {"model": len(sim["test_runs"])}
    # the simulated base run said "pass"; really the FAIL_TO_PASS test fails
    base = sim["test_runs"][0]
    assert (base["seen"], base["real"], base["real_exit_code"]) == ("pass", "fail", 1)

    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {
        "bad task row (not JSON, or not a task)": 1,
        "task environment failed (error)": 1,  # no copy of nobody/nowhere: no episode run
    }
    assert not any("nobody-1" in key for key in rows)
    assert report["agent"] == "scripted test-driven candidate agent"
    resolved = figure(report, "Resolved rate")
    by_name = {row[1] or row[0]: row for row in resolved["rows"]}
    at = resolved["columns"].index("resolved rate")
    assert by_name["real feedback"][at] == 1.0
    assert by_name["real feedback"][at + 1].endswith(", 1.000]")  # Wilson, 1 of 1
    assert by_name["simulated feedback"][at] == float(order[0] == "gold")
    gap = next(r for r in resolved["rows"] if r[0].startswith("sim-to-real gap"))
    assert gap[at] == 1.0 - float(order[0] == "gold")
    ratio = next(r for r in resolved["rows"] if r[0].startswith("fidelity"))
    assert ratio[at] == float(order[0] == "gold")
    floors = {r[0]: r[at] for r in resolved["rows"] if r[1] == "none"}
    assert floors["floor: a random candidate of the pool"] == 0.5
    assert floors["ceiling: oracle (some candidate resolves)"] == 1.0
    view = figure(report, "The agent's view")
    compared, _, seen_pass_really_failing = view["rows"][0][:3]
    assert compared == len(sim["test_runs"]) and seen_pass_really_failing >= 1
    assert (out / "report.md").read_text().count("sim-to-real gap") == 1
    assert (out / "resolved.png").stat().st_size > 0

    # resumed: nothing is run again, the report is the same
    before = (out / "rows.jsonl").read_text()
    assert main(argv) == 0
    assert (out / "rows.jsonl").read_text() == before
    again = json.loads((out / "report.json").read_text())
    assert again["figures"] == report["figures"] and again["resumed_rows"] == 3
    capsys.readouterr()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@requires_sandbox
def test_a_down_endpoint_is_a_recorded_error(tmp_path, capsys):
    out = tmp_path / "out"
    agent = f"openai:http://127.0.0.1:{closed_port()}/v1#tiny-agent"
    argv = ["bench", "e2e", "--out", str(out), "--ids", TASK_ID, "--feedback", "real",
            "--agent", agent]  # fmt: skip
    assert main(argv) == 1  # every episode failed
    row = rows_of(out)[f"real\x1f{TASK_ID}"]
    assert row["status"] == "error" and row["resolved"] is None
    assert "agent endpoint" in row["error"] and "127.0.0.1" in row["error"]
    assert "LMUnavailable" in row["error"]
    report = json.loads((out / "report.json").read_text())
    assert report["agent"].startswith("tiny-agent (OpenAI-compatible endpoint")
    assert list(report["summary"]["errors"]) == [row["error"][:200]]
    assert "agent endpoint" in capsys.readouterr().err
    # resumed: an episode that ended in error is tried again (its row replaced)
    assert main(argv) == 1
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == [f"real\x1f{TASK_ID}"] * 2
    assert json.loads((out / "report.json").read_text())["summary"]["real"]["episodes"] == 1


class ScriptedChat(http.server.BaseHTTPRequestHandler):
    """Chat completions answered with the next scripted action."""

    answers: ClassVar[list[str]] = []
    requests: ClassVar[list[dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        text = type(self).answers[min(len(self.requests), len(self.answers)) - 1]
        data = json.dumps({
            "id": f"c{len(self.requests)}", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10},
        }).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@requires_sandbox
@pytest.mark.slow
def test_an_openai_compatible_agent_against_a_local_server(tmp_path, task, capsys):
    fix = (
        "Fixing slugify.\n<function=file_editor>\n<parameter=command>str_replace</parameter>\n"
        "<parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
        '<parameter=old_str>    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
        "</parameter>\n"
        '<parameter=new_str>    slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n'
        "    return slug.strip(separator)</parameter>\n</function>"
    )
    test = (
        "<function=execute_bash>\n<parameter=cmd>cd /testbed && python -m pytest -rA "
        "tests/test_textutil.py</parameter>\n</function>"
    )
    submit = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"
    ScriptedChat.answers, ScriptedChat.requests = [fix, test, submit], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "out"
        agent = f"openai:http://127.0.0.1:{server.server_address[1]}/v1#scripted-chat"
        argv = ["bench", "e2e", "--out", str(out), "--ids", TASK_ID, "--feedback", "real",
                "--agent", agent]  # fmt: skip
        assert main(argv) == 0
    finally:
        server.shutdown()
        server.server_close()
    row = rows_of(out)[f"real\x1f{TASK_ID}"]
    assert (row["status"], row["reason"], row["resolved"], row["steps"]) == (
        "ok",
        "submitted",
        True,
        3,
    )
    assert [r["seen"] for r in row["test_runs"]] == ["pass"]
    first = ScriptedChat.requests[0]
    assert first["model"] == "scripted-chat" and "<github_issue>" in json.dumps(first)
    # the second request carries the first answer and its observation
    assert [m["role"] for m in ScriptedChat.requests[1]["messages"][-2:]] == ["assistant", "user"]
    report = json.loads((out / "report.json").read_text())
    assert report["agent"].startswith("scripted-chat (OpenAI-compatible endpoint")
    assert figure(report, "Resolved rate")["rows"][0][-2] == 1.0  # [-1]: its interval
    capsys.readouterr()
