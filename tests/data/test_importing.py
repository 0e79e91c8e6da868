"""``sweworld data import``: the driver, resume, fallback marking, the CLI, the shared data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sweworld.cli import main
from sweworld.data.importing import import_source, submission_label
from sweworld.data.schema import Trajectory
from sweworld.data.store import iter_records, load_split
from tests.conftest import requires_sandbox, shared_data_dir
from tests.data import report, report_member, toy_source, toy_turns, traj_member, trajectory

SHARED = shared_data_dir() / "mini-swe-agent-gemini3-verified.tar.gz"
MISSING = "nobody__nothing-7"  # a repository no cache holds: fallback records


def _source(tmp_path):
    turns = toy_turns("Fix the thing in nothing.")
    extra = [
        traj_member(MISSING, trajectory(MISSING, turns, "diff --git a/a b/a")),
        report_member(MISSING, report(True, ["t::a"], ["t::b"])),
        traj_member("nobody__nothing-8", b"{truncated"),
        report_member("nobody__nothing-8", report(False, [], [])),
    ]
    return toy_source(tmp_path, extra=extra)


def _lines(out, kind):
    return (out / "records" / f"{kind}.jsonl").read_text().splitlines()


def test_submission_label_from_the_report():
    traj = Trajectory(
        source="mini-swe-agent",
        instance_id="a__b-1",
        repo="a/b",
        task={"instance_id": "a__b-1"},
        submission="diff --git a/x b/x",
        report={"resolved": True, "tests_status": {"FAIL_TO_PASS": {"success": ["t"]}}},
    )
    label = submission_label(traj)
    assert label.resolved and label.label_source == "harness-report"
    assert label.candidate_kind == "agent"
    assert json.loads(label.tests_status)["FAIL_TO_PASS"]["success"] == ["t"]
    traj.report = None
    assert submission_label(traj) is None


@requires_sandbox
@pytest.mark.slow
def test_import_replays_falls_back_resumes_and_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(tmp_path / "no-cache"))
    src = _source(tmp_path)
    out = tmp_path / "out"
    argv = ["data", "import", "--source", str(src), "--out", str(out), "--workers", "2"]
    argv += ["--step-timeout", "1", "--context-model", "default", "--heldout", "nobody/nothing"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "sweworld/stockroom" in printed and "nobody/nothing" in printed
    assert "several execution commands in one step" in printed
    assert "trajectory: malformed or truncated JSON" in printed

    swt = list(iter_records(out, "swt"))
    by_repo = Counter((r.repo, r.state_source) for r in swt)
    assert by_repo == {("sweworld/stockroom", "replay"): 5, ("nobody/nothing", "trajectory"): 5}
    swr = list(iter_records(out, "swr"))
    kinds = Counter((r.instance_id, r.candidate_kind, r.resolved) for r in swr)
    assert kinds[("sweworld__stockroom-1", "agent", False)] == 1
    assert kinds[(MISSING, "agent", True)] == 1
    assert kinds[("sweworld__stockroom-1", "gold", True)] == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["import"]["fallback_reasons"] == {"no local copy of the repository": 1}
    assert summary["swt"]["splits"] == {"train": 5, "test": 5}
    assert {r.repo for r in load_split(out, "swt", "test")} == {"nobody/nothing"}

    # a second run skips the finished trajectories and writes no duplicate
    before = {k: _lines(out, k) for k in ("swt", "swr", "skipped")}
    assert main(argv) == 0
    assert {k: _lines(out, k) for k in ("swt", "swr", "skipped")} == before
    again = json.loads((out / "summary.json").read_text())
    assert again["import"]["counts"]["trajectories_already_done"] == 2
    assert again["skipped"] == summary["skipped"]


def test_no_replay_and_bad_arguments(tmp_path, capsys):
    src = _source(tmp_path)
    out = tmp_path / "fb"
    summary = import_source(src, out, replay=False, progress=False, model="default")
    assert summary["swt"]["state_source"] == {"trajectory": 10}
    assert summary["import"]["counts"]["trajectories_trajectory"] == 2
    assert main(["data", "import", "--source", str(tmp_path / "nope"), "--out", str(out)]) == 2
    junk = tmp_path / "junk.txt"
    junk.write_text("not a run")
    assert main(["data", "import", "--source", str(junk), "--out", str(out)]) == 2
    assert "unknown format" in capsys.readouterr().err


@pytest.mark.skipif(not SHARED.is_file(), reason="shared data not present")
@pytest.mark.slow
def test_shared_tarball_fallback_import(tmp_path, capsys):
    out = tmp_path / "msa"
    argv = ["data", "import", "--source", str(SHARED), "--out", str(out), "--no-replay"]
    argv += ["--limit", "12", "--context-model", "default"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["import"]["counts"]["trajectories_trajectory"] == 12
    assert summary["swt"]["total"] > 12 and summary["swt"]["state_source"] == {
        "trajectory": summary["swt"]["total"]
    }
    # each agent label is its report's verdict
    labels = {r.instance_id: r for r in iter_records(out, "swr") if r.candidate_kind == "agent"}
    assert len(labels) == 12
    import tarfile

    with tarfile.open(SHARED) as tar:
        for iid, label in labels.items():
            name = f"mini-swe-agent-gemini3-verified/logs/{iid}/report.json"
            rep = json.load(tar.extractfile(name))
            assert label.resolved == rep["resolved"]
            assert json.loads(label.tests_status) == rep["tests_status"]
    assert "django/django" in capsys.readouterr().out


def test_sweworld_records_go_through_the_driver(tmp_path, capsys):
    """A folder of sweworld's own records is imported as checked records, resumably."""
    from sweworld.data.schema import SWTRecord
    from sweworld.data.store import RecordStore

    src = tmp_path / "src"
    with RecordStore(src) as store:
        own = dict(id="own-1", source="collect", instance_id="i", repo="psf/requests")
        store.add(SWTRecord(**own, command="python x.py", stdout="x\n", stderr="", exit_code=0))
    out = tmp_path / "out"
    for _ in range(2):
        assert main(["data", "import", "--source", str(src), "--out", str(out),
                     "--format", "sweworld", "--no-replay"]) == 0  # fmt: skip
    assert [r.id for r in load_split(out, "swt", "test")] == ["own-1"]


R2E_FIXTURE = Path(__file__).parent / "importers/fixtures/r2e/fixture.jsonl"


def test_several_rollouts_of_one_instance_are_all_kept_and_resume(tmp_path):
    """Two R2E-Gym rollouts of one instance are two units: neither's records are lost to the
    other's ids, and a second run redoes neither."""
    out = tmp_path / "r2e"
    kw = dict(replay=False, progress=False, model="default", workers=1)
    summary = import_source(R2E_FIXTURE, out, **kw)
    assert summary["import"]["counts"]["trajectories_trajectory"] == 2
    swt = list(iter_records(out, "swt"))
    # rollout 1: reproduce + pytest; rollout 2: its own reproduce run (same command, step)
    assert Counter(r.command for r in swt) == {
        "python reproduce.py": 2,
        "python -m pytest -q test_requests.py::test_x": 1,
    }
    assert len({r.id for r in swt}) == 3
    units = [json.loads(line)["unit"] for line in _lines(out, "done") if "r2e-gym:" in line]
    assert len(units) == len(set(units)) == 2
    again = import_source(R2E_FIXTURE, out, **kw)
    assert again["import"]["counts"]["trajectories_already_done"] == 2
    assert len(list(iter_records(out, "swt"))) == 3


def test_instances_and_limit_apply_to_every_format(tmp_path):
    kw = dict(replay=False, progress=False, model="default", workers=1)
    none = import_source(R2E_FIXTURE, tmp_path / "a", instances=["other__x-1"], **kw)
    assert "trajectories_trajectory" not in none["import"]["counts"]
    assert none["swt"]["total"] == none["swr"]["total"] == 0
    one = import_source(R2E_FIXTURE, tmp_path / "b", limit=1, **kw)
    assert one["import"]["counts"]["trajectories_trajectory"] == 1


def test_bad_import_arguments_are_one_line_errors(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    base = ["data", "import", "--source", str(R2E_FIXTURE), "--no-replay"]
    assert main([*base, "--out", str(afile)]) == 2
    assert main([*base, "--out", str(tmp_path / "o"), "--workers", "0"]) == 2
    assert main([*base, "--out", str(tmp_path / "o"), "--step-timeout", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Not a directory" in err and "--workers" in err
