"""``sweworld bench swt`` with the outcome world: states rebuilt from a base checkout + the
record's diff, answered by the outcome executor, scored beside the floors (with "status at
base"), and the LM route's sample scored again on the same records."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sweworld.bench.similarity import mean_interval, wilson_interval
from sweworld.bench.swt_outcome import (
    base_statuses,
    command_argv,
    is_outcome_spec,
    model_identity,
    outcome_model_path,
    session_order,
    status_at_base,
)
from sweworld.bench.swt_scoring import BASE_FLOOR, floor_summaries, score_record
from sweworld.cli import main as cli_main
from sweworld.data.record import test_statuses as statuses_of
from sweworld.data.schema import SWTRecord, command_kind, to_json
from sweworld.transition.outcome.features import STEP_FEATURES, TEST_FEATURES
from sweworld.transition.outcome.model import Head, OutcomeModel
from sweworld.transition.types import Prediction
from tests.bench.fixtures import write_dataset

REPO = "psf/requests"  # a held-out repository (the test split)
INSTANCE = "psf__requests-9"
CORE = "def f(x):\n    return x\n"
TESTS = (
    "from pkg.core import f\n\n\ndef test_f():\n    assert f(1) == 2\n\n\n"
    "def test_g():\n    assert f(0) == 0\n"
)
FIX = (
    "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n"
    "@@ -1,2 +1,2 @@\n def f(x):\n-    return x\n+    return x + 1 if x else 0\n"
)
SCRIPT = (
    "diff --git a/r.py b/r.py\nnew file mode 100644\n--- /dev/null\n+++ b/r.py\n"
    "@@ -0,0 +1 @@\n+raise ValueError('bad')\n"
)
F_ID, G_ID = "tests/test_core.py::test_f", "tests/test_core.py::test_g"


def pytest_log(statuses: dict[str, str]) -> str:
    lines = [f"{s} {t}" for t, s in statuses.items()]
    return "=== short test summary info ===\n" + "\n".join(lines) + "\n"


def record(rid: str, step: int, command: str, *, diff: str = "", stdout: str = "",
           stderr: str = "", exit_code: int = 0, commit: str = "") -> SWTRecord:  # fmt: skip
    task = {"instance_id": INSTANCE, "repo": REPO, "base_commit": commit, "patch": FIX,
            "FAIL_TO_PASS": [F_ID], "PASS_TO_PASS": [G_ID], "problem_statement": "f"}  # fmt: skip
    kind = command_kind(command)
    return SWTRecord(
        id=rid, source="test", instance_id=INSTANCE, repo=REPO, command=command,
        stdout=stdout, stderr=stderr, exit_code=exit_code, base_commit=commit,
        task=json.dumps(task), step=step, state_source="replay", cwd="/testbed", diff=diff,
        ran_tests=kind == "pytest", command_kind=kind,
        test_statuses=to_json(statuses_of(command, stdout + "\n" + stderr, REPO)),
    )  # fmt: skip


def records(commit: str = "c" * 40) -> list[SWTRecord]:
    run = "python -m pytest -rA tests/test_core.py"
    traceback = (
        'Traceback (most recent call last):\n  File "/testbed/r.py", line 1\nValueError: bad\n'
    )
    return [
        # given out of order: the route answers them in session order (step)
        record("r-script", 3, "python r.py", diff=SCRIPT, stderr=traceback, exit_code=1,
               commit=commit),
        record("r-base", 1, run, stdout=pytest_log({F_ID: "FAILED", G_ID: "PASSED"}),
               exit_code=1, commit=commit),
        record("r-fixed", 2, f"cd /testbed && {run}", diff=FIX,
               stdout=pytest_log({F_ID: "PASSED", G_ID: "PASSED"}), commit=commit),
        # no -rA: the output names no test; the labels complete it from the counts line
        record("r-quiet", 5, "python -m pytest -q tests/test_core.py", diff=FIX, commit=commit,
               stdout="..                                    [100%]\n2 passed in 0.01s\n"),
        record("r-missing", 4, "python missing.py", exit_code=2, commit=commit,
               stderr="python: can't open file '/testbed/missing.py': [Errno 2] No such file "
               "or directory\n"),
    ]  # fmt: skip


def always_failing_model(path: Path) -> Path:
    """A model that says exit 1, ValueError and FAILED for everything."""

    def const(classes: list[str], width: int, bias: float) -> Head:
        return Head({"kind": "linear", "classes": classes, "coef": [[0.0] * width],
                     "intercept": [bias]})  # fmt: skip

    step, test = len(STEP_FEATURES), len(TEST_FEATURES)
    model = OutcomeModel(
        {"exit": const(["0", "1"], step, 9.0), "exception": const(["AssertionError", "ValueError"],
         step, 9.0), "test": const(["FAILED", "PASSED"], test, -9.0)},
        {"trained_kinds": ["pytest", "python_script", "python_c"]},
    )  # fmt: skip
    return model.save(path)


@pytest.fixture
def base_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "requests.git"
    work = tmp_path / "src"
    (work / "pkg").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "core.py").write_text(CORE)
    (work / "tests" / "test_core.py").write_text(TESTS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repo)], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    return repo, commit


def test_specs_commands_and_session_order():
    assert is_outcome_spec("outcome") and is_outcome_spec("outcome:/m.json")
    assert not is_outcome_spec("embedded") and not is_outcome_spec("outcomes")
    assert outcome_model_path("outcome") is None
    assert outcome_model_path("outcome:/m.json") == "/m.json"
    with pytest.raises(ValueError, match="--modes"):
        outcome_model_path("outcome:oracle")
    assert command_argv("cd /testbed && python -m pytest -q 'a b.py'") == [
        "python", "-m", "pytest", "-q", "a b.py"
    ]  # fmt: skip
    assert command_argv("python -c 'unclosed") == ["python", "-c", "'unclosed"]
    ordered = session_order(records())[INSTANCE]
    assert [r.id for r in ordered] == ["r-base", "r-fixed", "r-script", "r-missing", "r-quiet"]


def test_status_at_base_and_its_floor():
    recs = records()
    known = base_statuses(recs)
    assert known == {INSTANCE: {F_ID: "FAILED", G_ID: "PASSED"}}  # from the empty-diff run
    fixed = recs[2]
    assert status_at_base(fixed, G_ID, {}) == "PASSED"  # no run at base: by the task's lists
    assert status_at_base(fixed, F_ID, {}) == "FAILED"
    floor = floor_summaries(recs, known)[BASE_FLOOR]["overall"]
    # r-base: 2 of 2 agree; r-fixed: test_f PASSED now (FAILED at base), test_g agrees
    assert floor["n_test_statuses"] == 4 and floor["test_statuses_pooled"] == 0.75
    assert floor["exit_code_agreement"] is None and floor["n_raised"] == 0
    assert BASE_FLOOR not in floor_summaries(recs)


def test_score_record_pools_statuses_and_reads_exceptions():
    base, script = records()[1], records()[0]
    row = score_record(
        base, Prediction(stdout=pytest_log({F_ID: "FAILED", G_ID: "FAILED"}), stderr="",
                         exit_code=1),
    )  # fmt: skip
    assert (row["tests_named"], row["tests_agree"], row["tests"]) == (2, 1, 0.5)
    assert row["exit_code"] is True and row["exception_raised"] is None  # nothing raised
    hit = score_record(script, Prediction(stdout="", stderr="ValueError: x\n", exit_code=1))
    assert hit["real_exception"] == "ValueError" and hit["exception_raised"] is False
    tb = "Traceback (most recent call last):\nValueError: other text\n"
    assert score_record(script, Prediction("", tb, 1))["exception_raised"] is True
    assert score_record(script, Prediction("", "", 0))["exception_raised"] is False
    assert wilson_interval(0, 0) is None and wilson_interval(5, 10) == [0.2366, 0.7634]
    assert mean_interval([1.0]) is None and mean_interval([0.0, 1.0, 0.0, 1.0])[0] < 0.5


def test_bench_swt_outcome_route_end_to_end(tmp_path: Path, base_repo):
    repo, commit = base_repo
    data = write_dataset(tmp_path / "ds", records(commit))
    model = always_failing_model(tmp_path / "model.json")
    out = tmp_path / "R"
    argv = ["bench", "swt", "--data", str(data), "--models", f"outcome:{model}", "--repos",
            str(repo), "--cache", str(tmp_path / "bases"), "--out", str(out),
            "--outcome-judge", "none"]  # fmt: skip
    assert cli_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    sha = model_identity(f"outcome:{model}")["sha256"]
    assert report["outcome_models"][f"outcome:{model}"]["sha256"] == sha
    rows = {(r["row"]["id"], r["row"]["mode"]): r["row"] for r in
            map(json.loads, (out / "rows.jsonl").read_text().splitlines())}  # fmt: skip
    assert len(rows) == 10  # 5 records x 2 modes
    for mode in ("oracle", "blind"):
        assert rows[("r-missing", mode)]["route"] == "exact"  # no such script: exact
        assert rows[("r-missing", mode)]["exit_code"] is True
        script = rows[("r-script", mode)]  # r.py exists in the rebuilt state: the model
        assert script["route"] == "outcome-model" and script["predicted_exit"] == 1
        assert script["exception_raised"] is True  # ValueError, as the model says
        base = rows[("r-base", mode)]
        assert base["predicted_exit"] == 1 and base["exit_code"] is True
        assert (base["tests_named"], base["tests_agree"]) == (2, 1)  # test_g really passed
        assert (base["labeled_n"], base["labeled_agree"], base["base_floor_agree"]) == (2, 1, 2)
        assert rows[("r-fixed", mode)]["exit_code"] is False
        quiet = rows[("r-quiet", mode)]
        assert quiet["tests_named"] is None  # the real output names no test ...
        assert (quiet["labeled_n"], quiet["labeled_agree"]) == (2, 0)  # ... its labels do
        assert quiet["base_floor_agree"] == 1  # test_g passes at base, test_f fails there
    series = report["summary"]["series"]
    overall = series[f"outcome:{model} (oracle)"]["overall"]
    assert overall["n"] == 5 and overall["exit_code_agreement"] == 0.6
    assert overall["n_test_statuses"] == 4 and overall["test_statuses_pooled"] == 0.25
    assert overall["n_test_labels"] == 6 and overall["test_labels_agreement"] == 1 / 6
    floor = series[f"floor: {BASE_FLOOR}"]["overall"]
    assert floor["test_statuses_pooled"] == 0.75 and floor["test_labels_agreement"] == 4 / 6
    assert series["floor: always exit 0, empty output"]["overall"]["exit_code_agreement"] == 0.4
    targets = report["figures"][0]
    assert targets["title"].startswith("Targets with 95% intervals (5 held-out records")
    cell = targets["rows"][0][targets["columns"].index("exit code, pytest commands")]
    assert cell.startswith("0.333 [") and cell.endswith("(n=3)")
    assert {row["model_sha256"] for row in rows.values()} == {sha}
    # every unit done: a second run redoes nothing; another model file: its rows are redone
    assert cli_main(argv) == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 10
    always_failing_model(tmp_path / "model.json").write_text(
        (tmp_path / "model.json").read_text().replace('"trained_kinds"', '"trained_kinds" ')
    )
    assert cli_main(argv) == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 20
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["series"][f"outcome:{model} (oracle)"]["overall"]["n"] == 5


def test_bench_swt_outcome_route_with_the_default_worlds_judge(tmp_path: Path, base_repo):
    """By default the oracle route is judged as the default world is: the shipped verdict
    decides whether a state resolves the task, and a run of its graded tests shows it (the
    same always-failing model then agrees with the real run of the fixed state)."""
    repo, commit = base_repo
    data = write_dataset(tmp_path / "ds", records(commit))
    model = always_failing_model(tmp_path / "model.json")
    out = tmp_path / "R"
    argv = ["bench", "swt", "--data", str(data), "--models", f"outcome:{model}", "--repos",
            str(repo), "--cache", str(tmp_path / "bases"), "--out", str(out)]  # fmt: skip
    assert cli_main(argv) == 0
    rows = {(r["row"]["id"], r["row"]["mode"]): r["row"] for r in
            map(json.loads, (out / "rows.jsonl").read_text().splitlines())}  # fmt: skip
    assert {row["judge"] for row in rows.values()} == {"verdict"}
    fixed = rows[("r-fixed", "oracle")]
    assert fixed["judged"] == "decided" and fixed["predicted_exit"] == 0
    assert fixed["exit_code"] is True and fixed["tests_agree"] == 2
    assert rows[("r-quiet", "oracle")]["judged"] == "remembered"  # same task, same diff
    assert rows[("r-base", "oracle")]["predicted_exit"] == 1  # the base does not resolve
    assert rows[("r-fixed", "blind")]["judged"] is None  # blind: no gold, no judge
    assert rows[("r-fixed", "blind")]["exit_code"] is False
    assert rows[("r-script", "oracle")]["judged"] is None  # not a run of the graded tests
    # rows of the other judge are not taken as done: asking for none redoes them
    assert cli_main([*argv, "--outcome-judge", "none"]) == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 20


def test_bench_swt_no_base_checkout_is_counted(tmp_path: Path):
    data = write_dataset(tmp_path / "ds", records("d" * 40))
    model = always_failing_model(tmp_path / "model.json")
    out = tmp_path / "R"
    argv = ["bench", "swt", "--data", str(data), "--models", f"outcome:{model}",
            "--cache", str(tmp_path / "bases"), "--out", str(out)]  # fmt: skip
    assert cli_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {"outcome: no base checkout (commit in no --repos)": 5}
    assert cli_main([*argv[:-2], "--models", "outcome:oracle", "--out", str(out)]) == 2


def with_context(rec: SWTRecord) -> SWTRecord:
    """``rec`` with stored LM contexts (the LM route needs them; the outcome route not)."""
    from sweworld.transition.context import SWTContext

    for mode in ("oracle", "blind"):
        ctx = SWTContext(command=rec.command, mode=mode, problem=f"problem of {rec.id}")
        setattr(rec, f"context_{mode}", json.dumps(ctx.to_dict()))
    return rec


def test_bench_swt_the_lm_sample_is_scored_again_beside_the_outcome_route(
    tmp_path: Path, base_repo
):
    from sweworld.transition.prompt import build_messages

    repo, commit = base_repo
    recs = records(commit)
    recs[1] = with_context(recs[1])  # r-base: the only record the LM route can answer
    data = write_dataset(tmp_path / "ds", recs)
    # the LM says: test_f fails, test_g passes (right), exit 1 (right)
    answer = json.dumps({"stdout": pytest_log({F_ID: "FAILED", G_ID: "PASSED"}), "stderr": "",
                         "exit_code": 1})  # fmt: skip
    replay = tmp_path / "lm.jsonl"
    replay.write_text("".join(
        json.dumps({"messages": build_messages(recs[1].context(m)), "text": answer}) + "\n"
        for m in ("oracle", "blind")
    ))  # fmt: skip
    model = always_failing_model(tmp_path / "model.json")
    out = tmp_path / "R"
    specs = f"outcome:{model},replay:{replay}"
    argv = ["bench", "swt", "--data", str(data), "--models", specs, "--repos", str(repo),
            "--cache", str(tmp_path / "bases"), "--out", str(out)]  # fmt: skip
    assert cli_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["models"] == [f"replay:{replay}"]  # outcome rows carry their hash
    assert report["sample"]["n"] == 1 and report["sample"]["outcome_records"] == 5
    lm = report["summary"]["lm_sample"]["series"]
    lm_oracle = lm[f"replay:{replay} (oracle)"]["overall"]
    assert lm_oracle["n"] == 1 and lm_oracle["exit_code_agreement"] == 1.0
    assert (lm_oracle["n_test_labels"], lm_oracle["test_labels_agreement"]) == (2, 1.0)
    assert lm[f"outcome:{model} (oracle)"]["overall"]["test_labels_agreement"] == 0.5
    assert lm[f"floor: {BASE_FLOOR}"]["overall"]["test_labels_agreement"] == 1.0
    titles = [f["title"] for f in report["figures"]]
    assert "Targets with 95% intervals (the LM sample: 1 records)" in titles
    main = report["summary"]["series"]
    assert main[f"replay:{replay} (blind)"]["overall"]["n"] == 1  # on the records it answered
    assert main[f"outcome:{model} (blind)"]["overall"]["n"] == 5
