"""``sweworld bench serve``: the load's clients on in-process episodes, its table and report."""

from __future__ import annotations

import json
from pathlib import Path

from sweworld.bench.serve_load import table
from sweworld.bench.serve_load_drivers import MIX, action
from sweworld.cli import main
from tests.conftest import requires_sandbox


def test_actions_differ_per_client_and_step():
    assert action("a", 2) != action("b", 2) != action("a", 6)
    assert action("a", 0) == action("b", 0) == MIX[0][1]  # a view is the same for all


def test_table_puts_http_and_in_process_side_by_side():
    rows = [
        {"world": "replay", "path": "http", "clients": 4, "steps_per_s": 10.0, "p50_ms": 12.5,
         "p99_ms": 30.0, "errors": 0, "mem_per_episode_mb": 1.0,
         "server_cpu_ms_per_step": 3.0, "client_cpu_ms_per_step": 1.0},
        {"world": "replay", "path": "inprocess", "clients": 4, "steps_per_s": 20.0,
         "p50_ms": 10.0, "p99_ms": 20.0, "errors": 0, "mem_per_episode_mb": 0.5,
         "client_cpu_ms_per_step": 2.0},
    ]  # fmt: skip
    (line,) = [x for x in table(rows).splitlines() if x.startswith("| replay")]
    assert line.startswith("| replay | 4 | 10.0 | 20.0 | 12.5 / 30.0 | 10.0 / 20.0 | 2.5 |")


@requires_sandbox
def test_an_in_process_level_runs_and_writes_its_report(tmp_path: Path, capsys):
    out = tmp_path / "R"
    argv = ["bench", "serve", "--paths", "inprocess", "--levels", "2", "--steps", "8",
            "--rounds", "1", "--out", str(out), "--json", str(tmp_path / "rows.json")]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    (row,) = [r for r in rows if r["clients"] == 2]
    assert row["path"] == "inprocess" and row["errors"] == 0 and row["steps"] == 16
    report = json.loads((out / "report.json").read_text())
    assert report["benchmark"] == "serve" and report["summary"] == rows
    assert "| replay |" in capsys.readouterr().out
