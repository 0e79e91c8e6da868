import dataclasses
import json

from sweworld.data.importers import Skip, sweworld_sessions
from sweworld.data.importers.sweworld_sessions import schema_compatible
from sweworld.data.schema import SWRRecord, SWTRecord, Trajectory, TrajectoryStep
from sweworld.data.store import RecordStore


def _swt(i: int) -> SWTRecord:
    return SWTRecord(
        id=f"t{i}",
        source="collect",
        instance_id="a__b-1",
        repo="a/b",
        command="pytest -q",
        stdout="1 passed\n",
        stderr="",
        exit_code=0,
    )


def _write_output(out):
    with RecordStore(out) as store:
        store.add(_swt(1))
        store.add(_swt(2))
        store.add(
            SWRRecord(
                id="r1",
                source="collect",
                instance_id="a__b-1",
                repo="a/b",
                patch="d",
                resolved=True,
            )
        )
    swt = out / "records" / "swt.jsonl"
    rows = [
        {**_swt(3).to_dict(), "schema_version": "sweworld-data/2"},
        {k: v for k, v in _swt(4).to_dict().items() if k != "command"},
        {**_swt(5).to_dict(), "exit_code": "0"},
        _swt(1).to_dict(),
        {**_swt(6).to_dict(), "added_later": 1},
    ]
    with swt.open("a") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n{truncated\n")
    traj = Trajectory(
        source="collect",
        instance_id="a__b-1",
        repo="a/b",
        task={"instance_id": "a__b-1", "repo": "a/b"},
        steps=[
            TrajectoryStep(command="pytest -q", output="1 passed\n", exit_code=0),
            TrajectoryStep(command="", action="<function=finish>\n</function>"),
        ],
        submission="d",
        report={"resolved": True, "tests_status": {}},
        meta={"policy": "scripted"},
    )
    bad = dataclasses.asdict(traj)
    bad["steps"][0]["exit_code"] = "zero"
    (out / "trajectories.jsonl").write_text(
        json.dumps(dataclasses.asdict(traj)) + "\n" + json.dumps(bad) + "\n"
    )
    return traj


def test_records_revalidated_and_trajectories_rebuilt(tmp_path):
    out = tmp_path / "out"
    traj = _write_output(out)
    items = list(sweworld_sessions.read(out))
    swt = [i for i in items if isinstance(i, SWTRecord)]
    assert [r.id for r in swt] == ["t1", "t2", "t6"]
    assert swt[0] == _swt(1)
    assert [i.id for i in items if isinstance(i, SWRRecord)] == ["r1"]
    (rebuilt,) = [i for i in items if isinstance(i, Trajectory)]
    # several runs of one instance stay apart: each has its own id (here from its content)
    assert len(rebuilt.meta.pop("trajectory_id")) == 24
    assert rebuilt == traj and isinstance(rebuilt.steps[0], TrajectoryStep)
    reasons = sorted(
        s.reason.split(" (")[0].split(" 'sweworld")[0] for s in items if isinstance(s, Skip)
    )
    assert reasons == [
        "column 'exit_code' is str, not int",
        "duplicate swt record id t1",
        "invalid JSON",
        "missing column 'command'",
        "schema_version",
        "step whose exit_code is not an integer",
    ]
    assert next(iter(sweworld_sessions.read(out / "records" / "swr.jsonl"))).id == "r1"


def test_schema_versions_and_missing_paths(tmp_path):
    assert schema_compatible("sweworld-data/1") and schema_compatible("sweworld-data/1.3")
    assert not schema_compatible("sweworld-data/2") and not schema_compatible("other/1")
    assert not schema_compatible(None)
    assert isinstance(next(sweworld_sessions.read(tmp_path / "nothing")), Skip)
    assert "no swt.jsonl" in next(sweworld_sessions.read(tmp_path)).reason
