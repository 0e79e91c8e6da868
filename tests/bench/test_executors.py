"""``sweworld bench executors``: steps, pair figures, and runs on the toy task.

Local vs Simulated runs need only the sandbox (the simulated executor answers from a
``replay:`` file); the Docker runs need an engine and the toy task's image, and skip with
a reason starting ``docker: `` otherwise (a failure under ``SWEWORLD_REQUIRE_DOCKER=1``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sweworld.bench.executor_pairs import figures_from_rows, masked, pair_names
from sweworld.bench.executor_steps import (
    PROBE_LABELS,
    patched_module,
    probe_steps,
    record_steps,
    without_caches,
)
from sweworld.bench.executor_steps import test_ids as read_test_ids
from sweworld.bench.executors import select_simulated
from sweworld.cli import main as cli_main
from sweworld.data.schema import SWTRecord
from sweworld.execution.docker import swebench_image_name
from sweworld.sandbox.executor import ExecutionResult
from tests.conftest import requires_sandbox

TOY = "sweworld__stockroom-1"
#: The replayed model's one answer: exit 0, no output.
EMPTY_ANSWER = json.dumps({"stdout": "", "stderr": "", "exit_code": 0})


def _replay(tmp_path: Path, n: int = 300) -> Path:
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"text": EMPTY_ANSWER}) + "\n" for _ in range(n)))
    return path


def _bench(out: Path, *extra: str, ids: str = TOY) -> int:
    return cli_main(["bench", "executors", "--out", str(out), "--ids", ids, *extra])


def _rows(out: Path) -> list[dict]:
    """The complete rows (a line cut short by a kill is not one)."""
    rows = []
    for line in (out / "rows.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _figure(report: dict, title: str) -> dict:
    return next(f for f in report["figures"] if f["title"].startswith(title))


# ------------------------------------------------------------------------------ steps


def test_probe_steps_of_the_toy_task(toy_task):
    steps = probe_steps(toy_task)
    measured = [s.label for s in steps if s.measured]
    assert measured == list(PROBE_LABELS)
    assert [s.index for s in steps] == list(range(len(steps)))
    gold = next(s for s in steps if s.label == "setup:gold_patch")
    assert not gold.measured and gold.kind == "setup"
    assert gold.files == (("/tmp/sweworld_bench.patch", toy_task.patch),)
    assert gold.index < next(s.index for s in steps if s.label == "tests_f2p_gold")
    f2p = next(s for s in steps if s.label == "tests_f2p_base")
    assert f2p.kind == "pytest" and toy_task.FAIL_TO_PASS[0] in f2p.command
    assert next(s for s in steps if s.label == "stdin_piped").kind == "python_c"
    module = next(s for s in steps if s.label == "import_patched_module")
    assert "import stockroom.textutil as m" in module.command


def test_probe_steps_without_tests_or_patch():
    task = dataclasses.make_dataclass("T", ["FAIL_TO_PASS", "PASS_TO_PASS", "patch"])("", [], "")
    labels = [s.label for s in probe_steps(task)]
    assert "tests_f2p_base" not in labels and "setup:gold_patch" not in labels
    assert "import_patched_module" not in labels and labels[0] == "python_version"


def test_helpers():
    assert (
        read_test_ids('["a::b", "c"]') == ["a::b", "c"]
        and read_test_ids("") == []
        and read_test_ids("x[") == []
    )
    patch = (
        "diff --git a/tests/test_x.py b/tests/test_x.py\n"
        "diff --git a/src/pkg/__init__.py b/src/pkg/__init__.py\n"
    )
    assert patched_module(patch) == "pkg"
    assert patched_module("diff --git a/README.md b/README.md\n") is None
    diff = (
        "diff --git a/.pytest_cache/README.md b/.pytest_cache/README.md\n+x\n"
        "diff --git a/a.py b/a.py\n+y\n"
        "diff --git a/p/__pycache__/a.pyc b/p/__pycache__/a.pyc\nBinary\n"
    )
    assert without_caches(diff) == "diff --git a/a.py b/a.py\n+y\n"
    assert without_caches("") == ""


def test_masked_outputs_differ_only_in_what_runs_may_differ_in():
    docker = (
        'platform linux -- Python 3.11.2\n  File "/usr/lib/python3.11/json/d.py"\n1 passed in 0.05s'
    )
    local = (
        'platform linux -- Python 3.11.7\n  File "/x/lib/python3.11/json/d.py"\n1 passed in 1.5s'
    )
    assert docker != local and masked(docker) == masked(local)
    assert masked("<f at 0x7fcf8313ab60>") == masked("<f at 0x7f0000000000>")
    assert masked("/v/lib/python3.11/site-packages/a.py") == masked("/u/dist-packages/a.py")
    assert masked("1 passed") != masked("1 failed")
    assert masked("Python 3.11.2") != masked("Python 3.12.2")


def test_masking_is_linear_in_a_long_output():
    import time

    start = time.perf_counter()
    for text in ("a/" * 200_000, "python " + "1" * 400_000, 'File "' + "/" * 400_000):
        assert masked(text) == text
    spaced = "x " * 100_000
    assert masked(spaced + "/v/site-packages/a.py") == spaced + "<site-packages>/a.py"
    assert time.perf_counter() - start < 5  # was minutes: a greedy run tried at every char


def test_simulated_steps_are_spread_evenly(toy_task):
    steps = probe_steps(toy_task)
    measured = [s.index for s in steps if s.measured]
    assert select_simulated(steps, 0) == set(measured)
    chosen = sorted(select_simulated(steps, 3))
    assert len(chosen) == 3 and chosen[0] == measured[0] and set(chosen) <= set(measured)


def _record(rid: str, step: int, command: str, diff: str = "", **kw) -> SWTRecord:
    return SWTRecord(id=rid, source="test", instance_id="i-1", repo="o/r", command=command,
                     stdout="out\n", stderr="", exit_code=0, step=step, diff=diff,
                     task=json.dumps({"instance_id": "i-1"}), **kw)  # fmt: skip


def test_record_steps_set_the_state_before_each_command():
    recs = [
        _record("c", 2, "python b.py", diff="diff --git a/b.py b/b.py\n+1\n"),
        _record("a", 0, "python -m pytest", cwd="/testbed/sub", env='{"K": "v w"}'),
        _record("b", 1, "python -c 'print(1)'", stdin="hi\n"),
        _record("d", 3, "python b.py"),
    ]
    steps, tasks = record_steps(recs)
    assert list(tasks) == ["i-1"]
    labels = [(s.label, s.measured) for s in steps["i-1"]]
    assert labels == [
        ("record:a", True),
        ("record:b", True),
        ("setup:state", False),
        ("record:c", True),
        ("setup:state", False),
        ("record:d", True),
    ]
    first, second, apply, _, reset, _ = steps["i-1"]
    assert first.command == "cd /testbed/sub && K='v w' python -m pytest"
    assert second.command == "python -c 'print(1)' <<'SWEWORLD_STDIN'\nhi\nSWEWORLD_STDIN"
    assert apply.files[0][1].startswith("diff --git a/b.py") and "git apply" in apply.command
    assert "git apply" not in reset.command and "git checkout" in reset.command
    assert first.recorded == {"stdout": "out\n", "stderr": "", "exit_code": 0}


# ------------------------------------------------------------------------------ figures


def _entry(stdout: str, exit_code: int, wall: float = 1.0) -> dict:
    return {"stdout": stdout, "stderr": "", "exit_code": exit_code, "wall_s": wall}


def _row(index, label, kind, command, docker, local, agree) -> dict:
    return {
        "task": "t",
        "repo": "o/r",
        "index": index,
        "label": label,
        "kind": kind,
        "command": command,
        "results": {"docker": docker, "local": local},
        "pairs": {"docker-local": agree},
    }


def test_figures_from_rows_by_hand():
    from sweworld.bench.executors import compare_pair

    a, b = ExecutionResult("x\n", "", 0), ExecutionResult("y\n", "", 1)
    same = compare_pair({"result": a}, {"result": a}, "python -c 1", "o/r")
    differ = compare_pair({"result": a}, {"result": b}, "ls", "o/r")
    rows = [
        _row(0, "one", "python_c", "python -c 1", _entry("x\n", 0), _entry("x\n", 0), same),
        _row(1, "two", "other", "ls", _entry("x\n", 0, 3.0), _entry("y\n", 1), differ),
    ]
    figures, summary = figures_from_rows(rows, ["docker", "local"])
    assert pair_names(["docker", "local", "simulated"]) == [
        "docker-local",
        "docker-simulated",
        "local-simulated",
    ]
    overall = _figure({"figures": figures}, "Agreement by executor pair")["rows"]
    assert overall[0] == ["docker-local", 2, 0.5, None, 1.0, 0.5, 0.5, 0.5]
    # the floor (exit 0, no output) against docker: both exit 0, neither output empty
    assert overall[1][:3] == ["docker vs floor: always exit 0, empty output", 2, 1.0]
    assert summary["by_kind"] == {"other": {"docker-local": 0.0}, "python_c": {"docker-local": 1.0}}
    listed = _figure({"figures": figures}, "Steps where local differs")["rows"]
    assert [r[1] for r in listed] == ["1 two"] and listed[0][3].startswith("exit code")
    assert summary["speed"]["docker"] == {"steps": 2, "seconds": 4.0, "steps_per_s": 0.5}
    assert summary["compared_steps"] == 2


# ------------------------------------------------------------------------------ runs


@requires_sandbox
@pytest.mark.slow
def test_local_vs_simulated_on_the_toy_task_and_resume(tmp_path):
    out = tmp_path / "out"
    replay = _replay(tmp_path)
    args = ("--executors", "local,simulated", "--model", f"replay:{replay}")
    assert _bench(out, *args) == 0
    report = json.loads((out / "report.json").read_text())
    rows = {r["row"]["label"]: r["row"] for r in _rows(out)}
    assert sorted(rows) == sorted(PROBE_LABELS)
    pair = {label: row["pairs"]["local-simulated"] for label, row in rows.items()}
    # the replayed model's answer: python --version is no longer answered by exact facts
    # (they never paid on real data, issue 19), so the model's "exit 0, no output" differs
    assert rows["python_version"]["results"]["simulated"]["sources"] == ["model"]
    assert not pair["python_version"]["identical"]
    assert rows["nonzero_exit"]["results"]["local"]["exit_code"] == 3
    assert rows["tests_f2p_base"]["results"]["local"]["exit_code"] == 1
    assert rows["tests_f2p_gold"]["results"]["local"]["exit_code"] == 0
    assert "ALPHA\nBETA" in rows["stdin_piped"]["results"]["local"]["stdout"]
    assert rows["env_var"]["results"]["local"]["stdout"] == "42\n"
    assert rows["cwd_change"]["results"]["local"]["stdout"] == "/testbed/stockroom\n"
    assert rows["python_writes_file"]["results"]["local"]["stdout"] == "written by python\n"
    # "exit 0, no output" fails validation for a test run (pytest would collect tests):
    # the simulator falls back and says nothing was run
    for label in ("tests_f2p_base", "tests_p2p_base", "tests_f2p_gold", "tests_p2p_gold"):
        assert rows[label]["results"]["simulated"]["sources"] == ["fallback"]
        assert pair[label]["exit_code"] is False and pair[label]["tests"] == 0.0
    overall = _figure(report, "Agreement by executor pair")["rows"][0]
    assert overall[:3] == ["local-simulated", 14, 6 / 14]
    assert report["summary"]["headline"][0].startswith(
        "local-simulated: exit code 42.9%, exception 85.7%"
    )
    assert (out / "report.md").read_text().count("| local-simulated |") >= 1

    # resume: rows already there are not redone; a lost tail is
    lines = (out / "rows.jsonl").read_text().splitlines()
    (out / "rows.jsonl").write_text("\n".join(lines[:5]) + "\n" + lines[5][:20])
    assert _bench(out, *args) == 0
    keys = [r["key"] for r in _rows(out)]
    assert len(keys) == 14 == len(set(keys))
    assert _bench(out, *args) == 0
    assert len(_rows(out)) == 14  # nothing left to do: no row added
    # other settings are refused unless --fresh
    assert _bench(out, *args, "--simulated-limit", "2") == 2
    assert _bench(out, *args, "--simulated-limit", "2", "--fresh") == 0
    sim = [r for r in _rows(out) if "simulated" in r["row"]["results"]]
    assert len(sim) == 2


class _DiesAfter:
    """An executor whose engine goes away after ``n`` commands: later calls come back not
    executed, as the Docker executor answers when its engine is unreachable."""

    name = "dies"

    def __init__(self, inner, n: int):
        self.inner, self.left = inner, n

    def __getattr__(self, name):  # environment(), close_session(), close()
        return getattr(self.inner, name)

    def execute(self, request):
        self.left -= 1
        if self.left >= 0:
            return self.inner.execute(request)
        return ExecutionResult(stderr="sweworld: cannot reach the Docker engine\n", exit_code=1,
                               info={"executed": False, "status": "env_failed"})  # fmt: skip


@requires_sandbox
def test_an_engine_that_dies_mid_run_keeps_the_finished_steps(tmp_path, monkeypatch):
    import sweworld.bench.executors as bench

    made = bench.bench_executor

    def make(name, args):
        executor = made(name, args)
        return _DiesAfter(executor, 3) if name == "local" else executor

    monkeypatch.setattr(bench, "bench_executor", make)
    out = tmp_path / "out"
    args = ("--executors", "simulated,local", "--model", f"replay:{_replay(tmp_path)}")
    assert _bench(out, *args) == 1  # the run says it failed
    rows = [r["row"] for r in _rows(out)]
    report = json.loads((out / "report.json").read_text())
    assert len(rows) == 14  # every step kept; the simulated side went on alone
    with_local = [r for r in rows if "local" in r["results"]]
    # three commands ran, then two steps not executed, then local was left out
    assert [bool(r["results"]["local"].get("failed")) for r in with_local] == [False] * 3 + [
        True
    ] * 2
    assert report["skipped"]["local: step not executed"] == 2
    assert "left out after step" in report["summary"]["run_failures"][0]


def test_bad_executors_and_data(tmp_path):
    assert _bench(tmp_path / "o", "--executors", "local") == 2
    assert _bench(tmp_path / "o", "--executors", "local,qemu") == 2
    assert _bench(tmp_path / "o", "--executors", "local,simulated", "--from-records",
                  str(tmp_path / "nowhere")) == 2  # fmt: skip


# ------------------------------------------------------------------------------ docker


def _engine():
    try:
        import docker

        client = docker.from_env(timeout=20)
        client.ping()
    except Exception as exc:
        return None, f"docker: no Docker engine answers: {exc}"
    return client, ""


def _toy_image(client, name: str = TOY) -> str | None:
    for image in (swebench_image_name(name), swebench_image_name(name, namespace=None)):
        try:
            client.images.get(image)
            return image
        except Exception:
            continue
    return None


@requires_sandbox
@pytest.mark.docker
def test_a_missing_image_is_counted_and_the_task_runs_without_docker(
    tmp_path, monkeypatch, toy_task
):
    client, _ = _engine()
    if client is None:
        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        reason = "docker: no Docker engine answers"
    else:
        reason = "docker: image missing (task left without it)"
    # the toy task under an id no image is named after
    row = {**toy_task.to_row(), "instance_id": "sweworld__no-image-1"}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    code = _bench(out, "--tasks", str(tasks), "--executors", "docker,simulated", "--model",
                  f"replay:{_replay(tmp_path)}", ids="sweworld__no-image-1")  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert code == 1  # nothing compared
    assert any(k.startswith(reason) for k in report["skipped"]), report["skipped"]
    assert report["summary"]["missing_executors"]["sweworld__no-image-1"]["docker"]
    rows = _rows(out)
    assert len(rows) == 14 and all("docker" not in r["row"]["results"] for r in rows)


@requires_sandbox
@pytest.mark.docker
@pytest.mark.slow
def test_docker_vs_local_on_the_toy_image(tmp_path):
    client, problem = _engine()
    if client is None:
        pytest.skip(problem)
    if _toy_image(client) is None:
        pytest.skip(
            f"docker: image {swebench_image_name(TOY)} is not on the engine "
            "(`sweworld docker build --tasks data/toy/tasks.jsonl` builds it)"
        )
    out = tmp_path / "out"
    assert _bench(out, "--executors", "docker,local") == 0
    rows = {r["row"]["label"]: r["row"] for r in _rows(out)}
    pair = {label: row["pairs"]["docker-local"] for label, row in rows.items()}
    for label in ("tests_f2p_base", "tests_p2p_base", "tests_f2p_gold", "tests_p2p_gold"):
        assert pair[label]["exit_code"] and pair[label]["tests"] == 1.0, rows[label]["results"]
    for label in ("nonzero_exit", "missing_module", "stdin_piped", "env_var", "cwd_change"):
        assert pair[label]["identical"], rows[label]["results"]
    for label in ("tests_f2p_base", "tests_f2p_gold", "traceback"):
        assert pair[label]["masked_identical"], rows[label]["results"]
    # a file Python writes in the container comes back to the session, where `cat` reads it
    writes = rows["python_writes_file"]["results"]
    assert writes["local"]["exit_code"] == writes["docker"]["exit_code"] == 0, writes
    assert pair["python_writes_file"]["identical"], writes


@requires_sandbox
def test_recorded_steps_replayed_on_the_toy_task(tmp_path, toy_task):
    """Two recorded test runs (with the test patch, then with the gold patch too)
    replayed with Local and Simulated, each also scored against the recorded result."""
    command = "python -m pytest -rA -p no:cacheprovider tests/test_textutil.py"
    task = json.dumps(toy_task.to_row())
    records = [
        SWTRecord(id="r0", source="test", instance_id=toy_task.instance_id, repo=toy_task.repo,
                  command=command, stdout="1 failed, 9 passed\n", stderr="", exit_code=1,
                  step=0, task=task, diff=toy_task.test_patch),
        SWTRecord(id="r1", source="test", instance_id=toy_task.instance_id, repo=toy_task.repo,
                  command=command, stdout="10 passed\n", stderr="", exit_code=0, step=1,
                  task=task, diff=toy_task.test_patch + toy_task.patch),
    ]  # fmt: skip
    data = tmp_path / "data"
    (data / "records").mkdir(parents=True)
    (data / "records" / "swt.jsonl").write_text(
        "".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records)
    )
    out = tmp_path / "out"
    code = _bench(out, "--executors", "local,simulated", "--model",
                  f"replay:{_replay(tmp_path)}", "--from-records", str(data))  # fmt: skip
    assert code == 0
    rows = sorted((r["row"] for r in _rows(out)), key=lambda r: r["index"])
    assert [r["label"] for r in rows] == ["record:r0", "record:r1"]  # the setup step is not a row
    assert [r["results"]["local"]["exit_code"] for r in rows] == [1, 0]
    report = json.loads((out / "report.json").read_text())
    recorded = _figure(report, "Against the recorded real result")["rows"]
    assert recorded[0][:3] == ["local", 2, 1.0]
