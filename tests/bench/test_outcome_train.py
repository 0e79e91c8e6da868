"""``sweworld bench outcome-train``: the features by one and by several processes on the same
records, checked equal, then the fit; a report for ``sweworld bench render``."""

from __future__ import annotations

import json

from sweworld.cli import main as cli_main
from tests.transition.outcome.conftest import calc_data  # noqa: F401 (a fixture)


def test_outcome_train_bench_times_features_by_processes_and_the_fit(
    calc_data,  # noqa: F811 (the fixture imported above)
    tmp_path,
    capsys,
) -> None:
    out = tmp_path / "report"
    code = cli_main(
        [
            "bench", "outcome-train", "--data", str(calc_data["data"]),
            "--repos", str(calc_data["repo"]), "--cache", str(tmp_path / "bases"),
            "--jobs", "1,2", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    features = [x for x in lines if x["stage"] == "features"]
    assert [x["jobs"] for x in features] == [1, 2]
    assert all(x["records"] == 72 and x["same rows"] is True for x in features)
    fit = [x for x in lines if x["stage"] == "fit heads"]
    assert len(fit) == 1 and fit[0]["records"] == 72  # no repository here is held out
    assert "outcome-train" in json.dumps(report)


def test_outcome_train_bench_refuses_process_counts_it_cannot_run(tmp_path, capsys) -> None:
    for jobs in ("0", "1,100000", "two", ""):
        code = cli_main(
            ["bench", "outcome-train", "--data", str(tmp_path), "--jobs", jobs,
             "--out", str(tmp_path / "out")]
        )  # fmt: skip
        assert code == 2
        assert "--jobs takes process counts from 1 to the CPUs" in capsys.readouterr().err
