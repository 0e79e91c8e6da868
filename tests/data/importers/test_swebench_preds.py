import json
from pathlib import Path

from sweworld.data.importers import Skip, swebench_preds
from sweworld.data.importers.swebench_preds import harness_run_output, parse_eval_script
from sweworld.data.schema import SWRRecord, Trajectory

FIXTURES = Path(__file__).parent / "fixtures" / "swebench"
LOGS = FIXTURES / "eval" / "logs" / "run_evaluation" / "run1" / "org__model-x"


def _split(items):
    records = {r.instance_id: r for r in items if isinstance(r, SWRRecord)}
    runs = [r for r in items if isinstance(r, Trajectory)]
    skips = [r for r in items if isinstance(r, Skip)]
    return records, runs, skips


def test_harness_logs_give_labels_and_the_real_test_run():
    records, runs, skips = _split(list(swebench_preds.read(FIXTURES / "eval")))
    resolved, failed = records["psf__requests-2317"], records["pallets__flask-4045"]
    assert resolved.resolved is True and resolved.label_source == "harness-report"
    assert resolved.repo == "psf/requests" and resolved.source == "swebench"
    assert resolved.patch == (LOGS / "psf__requests-2317" / "patch.diff").read_text()
    status = json.loads(resolved.tests_status)
    assert status["FAIL_TO_PASS"]["success"] == [
        "test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"
    ]
    assert json.loads(resolved.meta)["model_name_or_path"] == "org/model-x"
    assert (
        failed.resolved is False and json.loads(failed.meta)["patch_successfully_applied"] is False
    )
    (run,) = runs
    (step,) = run.steps
    assert step.command == "pytest -rA test_requests.py" and step.exit_code == 0
    assert step.output.startswith("============================= test session starts")
    assert step.output.rstrip().endswith("2 passed in 0.31s ===============================")
    assert "+ " not in step.output and ">>>>>" not in step.output
    assert run.meta["state"] == "base+candidate_patch+test_patch"
    assert run.meta["test_patch"].startswith("diff --git a/test_requests.py") and run.meta[
        "test_patch"
    ].endswith("+# new test\n")
    assert run.meta["candidate_patch"] == resolved.patch
    assert set(run.meta["test_statuses"].values()) == {"PASSED"}
    assert run.report["resolved"] is True
    reasons = {s.unit.rsplit(":", 1)[-1].split("/")[-1]: s.reason for s in skips}
    assert reasons["astropy__astropy-12907"] == "report entry without a boolean 'resolved'"
    assert reasons["sympy__sympy-20590"] == "prediction without a harness report"


def test_run_summary_with_jsonl_predictions():
    records, runs, skips = _split(list(swebench_preds.read(FIXTURES / "summary")))
    assert {k: r.resolved for k, r in records.items()} == {
        "psf__requests-2317": True,
        "pallets__flask-4045": False,
    }
    assert records["psf__requests-2317"].tests_status == "{}"
    assert not runs
    reasons = sorted(s.reason.split(" (")[0] for s in skips)
    assert reasons == [
        "duplicate prediction",
        "harness report lists it in error_ids: no verdict",
        "invalid JSON",
        "prediction without a harness report",
    ]


def test_model_filter_and_tasks_option(tmp_path):
    items = list(swebench_preds.read(FIXTURES / "eval", model="someone/else"))
    assert not any(isinstance(i, SWRRecord) for i in items)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps(
            {
                "instance_id": "psf__requests-2317",
                "repo": "psf/requests",
                "base_commit": "091991be",
                "version": "2.4",
            }
        )
        + "\n"
    )
    records, _, _ = _split(list(swebench_preds.read(FIXTURES / "eval", tasks=tasks)))
    assert records["psf__requests-2317"].base_commit == "091991be"


def test_single_report_without_patch_and_unknown_repo(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"noid": {"resolved": True, "patch_exists": True}}))
    (skip,) = list(swebench_preds.read(report))
    assert skip.reason.startswith("labelled instance without a patch")
    (tmp_path / "preds.json").write_text(json.dumps([{"instance_id": "noid", "model_patch": "d"}]))
    reasons = [s.reason for s in swebench_preds.read(tmp_path)]
    assert reasons == [
        "unknown repository (pass --tasks with this instance)",
        "prediction without a harness report",
    ]
    none_patch = tmp_path / "x" / "report.json"
    none_patch.parent.mkdir()
    none_patch.write_text(
        json.dumps({"a__b-1": {"resolved": False, "patch_exists": False, "patch_is_None": True}})
    )
    assert [s.reason for s in swebench_preds.read(none_patch)] == [
        "the harness had no patch (patch_is_None)"
    ]


def test_eval_script_and_output_readers():
    command, patch = parse_eval_script((LOGS / "psf__requests-2317" / "eval.sh").read_text())
    assert command == "pytest -rA test_requests.py"
    assert patch.count("\n") == 6
    assert parse_eval_script("echo hi\n") == ("", "")
    assert harness_run_output("no markers", "pytest") == ("", None)
