"""``sweworld bench throughput``: the report's rows, resuming, a failing backend counted.

Speed figures are never asserted (they belong to the benchmark's report): only that every
cell measured what it was asked to, with sane values.
"""

from __future__ import annotations

import json
import math

import pytest

from sweworld.bench.throughput import cell_key, throughput_figures
from sweworld.bench.throughput_measure import (
    exec_action,
    file_op_action,
    machine_available_bytes,
    process_tree,
    replay_world_lm,
    tree_rss_bytes,
)
from sweworld.cli import main
from sweworld.models.base import GenerationRequest
from tests.conftest import requires_sandbox

TINY = ["--concurrency", "1,2", "--steps", "2", "--churn", "2"]


def _bench(out, *extra: str) -> int:
    return main(["bench", "throughput", "--out", str(out), *TINY, *extra])


def _report(out) -> dict:
    return json.loads((out / "report.json").read_text())


def test_workload_actions_are_distinct_per_slot_and_step(toy_task):
    commands = {exec_action(toy_task, slot, step) for slot in range(3) for step in range(4)}
    assert len(commands) == 12  # no slot's answer can be another's cache hit
    assert "python -m pytest tests/test_textutil.py" in exec_action(toy_task, 0, 1)
    assert "import stockroom" in exec_action(toy_task, 0, 0)
    creates = [file_op_action(toy_task, 0, step) for step in (3, 8)]
    assert creates[0] != creates[1] and all("create" in c for c in creates)


def test_memory_probes_read_this_process():
    assert process_tree()[0] > 0
    assert tree_rss_bytes() > 0
    assert machine_available_bytes() > 0


def test_replay_world_lm_answers_the_recorded_output_of_the_command_kind():
    answers = {
        ("pytest", "tests/test_a.py"): {"stdout": "1 passed\n", "stderr": "", "exit_code": 0},
        ("python", "pkg"): {"stdout": "hi\n", "stderr": "", "exit_code": 3},
    }
    lm = replay_world_lm(answers)
    prompt = "context $ python -m pytest x\n<command>\ncwd: /testbed\n$ python -c 'import pkg'\n"
    request = GenerationRequest([{"role": "user", "content": prompt + "</command>"}])
    text = lm.generate([request])[0][0].text
    assert json.loads(text)["exit_code"] == 3  # the command's line, not the context's
    other = GenerationRequest([{"role": "user", "content": "<command>\n$ ls\n</command>"}])
    assert json.loads(lm.generate([other])[0][0].text)["exit_code"] == 0


def test_figures_put_local_beside_the_simulated_rows():
    rows = [
        {"metric": "steps", "backend": "local", "concurrency": 1, "steps": 4, "steps_per_s": 2.0},
        {"metric": "steps", "backend": "replay", "concurrency": 1, "steps": 4, "steps_per_s": 8.0},
        {"metric": "sessions", "backend": "sandbox", "concurrency": 1, "open_per_s": 5.0},
    ]
    steps, sessions = throughput_figures(rows)
    by_backend = {r[0]: r for r in steps["rows"]}
    ratio = steps["columns"].index("x local")
    assert by_backend["replay"][ratio] == 4.0 and by_backend["local"][ratio] == 1.0
    assert [r[0] for r in steps["rows"]] == ["replay", "local"]  # real rows after simulated
    assert sessions["rows"][0][1] == 5.0


@requires_sandbox
@pytest.mark.slow
def test_bench_throughput_rows_resume_and_report(tmp_path):
    out = tmp_path / "tp"
    assert _bench(out, "--models", "replay", "--real", "local") == 0
    report = _report(out)
    keys = {cell_key(m, b, c) for m, b in (("sessions", "sandbox"), ("steps", "file ops"),
            ("steps", "replay"), ("steps", "local")) for c in (1, 2)}  # fmt: skip
    rows = {json.loads(line)["key"]: json.loads(line)["row"] for line in
            (out / "rows.jsonl").read_text().splitlines()}  # fmt: skip
    assert set(rows) == keys
    assert report["skipped"] == {}
    for key, row in rows.items():
        c = row["concurrency"]
        if row["metric"] == "sessions":
            assert row["sessions"] == c and row["open_per_s"] > 0 and row["close_per_s"] > 0
            assert row["open_close_per_s"] > 0
            assert row["rss_mb_per_session"] > 0  # each live session has a sandbox server
        else:
            assert row["steps"] == row["steps_requested"] == 2 * c, key
            assert row["steps_per_s"] > 0 and 0 < row["p50_s"] <= row["p95_s"], key
            assert row["executor_errors"] == 0, key
            assert math.isfinite(row["rss_mb_per_session"]), key
        if row["backend"] == "replay":  # the recorded real answers pass validation
            assert row["sources"] == {"model": 2 * c}
        if row["backend"] == "local":
            assert sum(row["sources"].values()) == 2 * c
    titles = [f["title"] for f in report["figures"]]
    assert len(titles) == 2 and len(report["figures"][0]["rows"]) == 6
    assert report["finished"] and (out / "report.md").read_text().startswith("# Throughput")

    # Resumed: nothing is measured again; the report still has every row.
    lines = (out / "rows.jsonl").read_text()
    assert _bench(out, "--models", "replay", "--real", "local") == 0
    assert (out / "rows.jsonl").read_text() == lines
    assert _report(out)["resumed_rows"] == 8
    assert len(_report(out)["figures"][0]["rows"]) == 6


@requires_sandbox
def test_a_backend_that_fails_is_counted_and_the_others_run(tmp_path):
    out = tmp_path / "tp"
    code = _bench(out, "--no-sessions", "--real", "", "--models", "replay:/nonexistent.jsonl")
    assert code == 0
    report = _report(out)
    (reason, count), *_ = report["skipped"].items()
    assert count == 2 and "replay:/nonexistent.jsonl" in reason  # one per concurrency
    assert {row[0] for row in report["figures"][0]["rows"]} == {"file ops"}


def test_bad_options_are_refused(tmp_path):
    assert _bench(tmp_path / "a", "--real", "podman") == 2
    assert main(["bench", "throughput", "--out", str(tmp_path / "b"), "--concurrency", "0"]) == 2
    for option, value in (
        ("--steps", "0"),  # 0 timed rounds: rates of 0/0 reached rows.jsonl as NaN
        ("--embedded-steps", "-1"),
        ("--churn", "-5"),
        ("--step-timeout", "-1"),
        ("--step-timeout", "nan"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "throughput", "--out", str(tmp_path / "c"), option, value])
        assert exit_info.value.code == 2, option
    assert not (tmp_path / "c").exists()


def _docker_image_of(task) -> str | None:
    """The task's image on a Docker engine that answers, or None."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception:
        return None
    from sweworld.execution.docker.naming import swebench_image_name

    try:
        name = swebench_image_name(task.instance_id)
        client.images.get(name)
        return name
    except Exception:
        return None
    finally:
        client.close()


@requires_sandbox
@pytest.mark.slow
def test_docker_backend_counts_its_containers_memory(tmp_path, toy_task):
    if _docker_image_of(toy_task) is None:
        pytest.skip("docker: no engine with the toy task's image (sweworld docker build)")
    out = tmp_path / "tp"
    args = ["--concurrency", "1", "--no-sessions", "--no-file-ops", "--models", ""]
    assert main(["bench", "throughput", "--out", str(out), *TINY[2:], *args,
                 "--real", "docker"]) == 0  # fmt: skip
    row = json.loads((out / "rows.jsonl").read_text().splitlines()[0])["row"]
    assert row["backend"] == "docker" and row["steps"] == 2 and row["executor_errors"] == 0
    assert row["outside_processes"] == 1  # the episode's container
    assert row["outside_mb_per_session"] is None or row["outside_mb_per_session"] > 0
