"""``sweworld bench outcome-speed`` runs end to end on the toy task (one round, no LM)."""

from __future__ import annotations

import json

from sweworld.bench.outcome_speed import add_arguments, run


def test_one_round_with_and_without_the_judge(tmp_path, capsys, manager) -> None:
    """``manager``: the suite's sandbox check (skips without bubblewrap)."""
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--rounds", "2", "--baseline-rounds", "0", "--out", str(tmp_path)])
    assert run(args) == 0
    text = capsys.readouterr().out
    assert "outcome + judge (SWR verdict)" in text
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["figures"][0]["rows"]
    assert {r[0] for r in rows} == {"outcome", "outcome + judge (SWR verdict)"}
    assert all(int(r[2]) > 0 for r in rows)
