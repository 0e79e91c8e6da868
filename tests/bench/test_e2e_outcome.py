"""``sweworld bench e2e`` with the outcome world (the default simulated feedback): the option,
the sim/real ratio with its interval, per-repository figures, and an episode on the toy
task answered by an outcome model."""

from __future__ import annotations

import argparse
import json

import pytest

from sweworld.bench.e2e import add_arguments, is_outcome_world
from sweworld.bench.e2e_report import paired_ratio
from sweworld.bench.swt_outcome import model_identity
from sweworld.cli import main
from sweworld.transition.outcome.features import STEP_FEATURES, TEST_FEATURES
from sweworld.transition.outcome.model import Head, OutcomeModel
from tests.conftest import requires_sandbox

TASK_ID = "sweworld__stockroom-1"


def test_the_outcome_world_is_the_default_and_named_so():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--out", "x"]).world_model == "outcome"
    for spec in ("outcome", "outcome:oracle", "outcome:/m/model.json"):
        assert is_outcome_world(spec)
    for spec in ("embedded", "replay:outcome.jsonl", "openai:http://h/v1#outcome"):
        assert not is_outcome_world(spec)
    assert model_identity("outcome:oracle") == model_identity("outcome")


def test_paired_ratio_and_its_bootstrap_interval():
    real = [True] * 10 + [False] * 2
    sim = [True] * 8 + [False] * 4
    first = paired_ratio(real, sim, seed=0)
    assert first["ratio"] == pytest.approx(0.8)
    lo, hi = first["ci95"]
    assert 0.4 < lo < 0.8 <= hi <= 1.0
    assert paired_ratio(real, sim, seed=0) == first  # seeded
    assert paired_ratio(real, real)["ci95"] == [1.0, 1.0]
    assert paired_ratio([False, False], [True, False]) == {"ratio": None, "ci95": None}
    assert paired_ratio([], []) == {"ratio": None, "ci95": None}


def failing_world(path):
    """An outcome model that says every test run fails (exit 1, every test FAILED)."""

    def const(classes, width, bias):
        return Head({"kind": "linear", "classes": classes, "coef": [[0.0] * width],
                     "intercept": [bias]})  # fmt: skip

    return OutcomeModel(
        {"exit": const(["0", "1"], len(STEP_FEATURES), 9.0),
         "test": const(["FAILED", "PASSED"], len(TEST_FEATURES), -9.0)},
        {"trained_kinds": ["pytest", "python_script", "python_c"]},
    ).save(path)  # fmt: skip


@requires_sandbox
@pytest.mark.slow
def test_an_outcome_world_that_says_fail_makes_the_agent_submit_the_last(tmp_path, capsys):
    model = failing_world(tmp_path / "model.json")
    out = tmp_path / "out"
    argv = ["bench", "e2e", "--out", str(out), "--ids", TASK_ID, "--mutants", "1",
            "--world-model", f"outcome:{model}", "--no-shadow", "--judge", "none"]  # fmt: skip
    assert main(argv) == 0
    rows = {
        json.loads(line)["key"]: json.loads(line)["row"]
        for line in (out / "rows.jsonl").read_text().splitlines()
    }
    sim, real = rows[f"simulated\x1f{TASK_ID}"], rows[f"real\x1f{TASK_ID}"]
    labels = [c["label"] for c in rows[f"pool\x1f{TASK_ID}"]["candidates"]]
    assert sim["status"] == "ok" and set(sim["sources"]) == {"outcome-model"}
    assert all(t["seen"] == "fail" for t in sim["test_runs"])
    assert sim["chosen"] == labels[-1]  # no run read as passing: the last one stays
    assert real["resolved"] is True and real["chosen"] == "gold"
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["world_model_file"] == model_identity(f"outcome:{model}")
    paired = report["summary"]["paired"]
    assert paired["ratio"] == float(labels[-1] == "gold") and paired["tasks"] == 1
    assert report["summary"]["by_repo"]["sweworld/stockroom"]["real"] == 1
    assert any(f["title"].startswith("Resolved per repository") for f in report["figures"])
    capsys.readouterr()


@requires_sandbox
@pytest.mark.slow
def test_with_the_verdict_judge_the_graded_run_shows_the_reward_not_the_outcome_model(
    tmp_path, capsys
):
    """The default world binds the SWR verdict as the judge of the graded tests: the same
    failing outcome model no longer hides that the gold patch resolves."""
    model = failing_world(tmp_path / "model.json")
    out = tmp_path / "out"
    argv = ["bench", "e2e", "--out", str(out), "--ids", TASK_ID, "--mutants", "1",
            "--world-model", f"outcome:{model}", "--no-shadow"]  # fmt: skip
    assert main(argv) == 0
    rows = {
        json.loads(line)["key"]: json.loads(line)["row"]
        for line in (out / "rows.jsonl").read_text().splitlines()
    }
    sim = rows[f"simulated\x1f{TASK_ID}"]
    assert sim["status"] == "ok" and sim["chosen"] == "gold" and sim["resolved"] is True
    assert any(t["seen"] == "pass" for t in sim["test_runs"])
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["judge"] == "verdict"
    capsys.readouterr()
