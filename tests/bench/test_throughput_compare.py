"""``sweworld bench throughput --compare``: rows read back, a missing baseline refused, and a
real before/after run of the file-op cells against this repository's HEAD."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweworld.bench.throughput_compare import side_rows

ROOT = Path(__file__).resolve().parents[2]


def test_side_rows_reads_the_step_cells_only(tmp_path):
    rows = [
        {"key": "steps|file ops|4", "row": {"metric": "steps", "backend": "file ops",
                                             "concurrency": 4, "steps_per_s": 100.0,
                                             "p50_s": 0.01}},
        {"key": "sessions|sandbox|4", "row": {"metric": "sessions", "backend": "sandbox",
                                               "concurrency": 4}},
        {"key": "broken"},
    ]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert side_rows(tmp_path) == {("file ops", 4): {"steps_per_s": 100.0, "p50_s": 0.01}}
    assert side_rows(tmp_path / "absent") == {}


def test_compare_without_a_baseline_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "sweworld", "bench", "throughput", "--compare", "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2 and "--compare needs --baseline" in done.stderr


@pytest.mark.slow
def test_compare_runs_both_trees_and_writes_the_table(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs the project's git history")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "sweworld", "bench", "throughput", "--compare", "--baseline",
         "HEAD", "--rounds", "1", "--models", "", "--real", "", "--concurrency", "1",
         "--steps", "2", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    (cells,) = [f["rows"] for f in report["figures"]]
    assert [c[:2] for c in cells] == [["file ops", 1]]
    assert cells[0][2] > 0 and cells[0][3] > 0 and cells[0][4] > 0


def test_a_baseline_git_would_read_as_an_option_is_refused(tmp_path):
    from sweworld.bench.sandbox_compare import export_tree

    for ref in ("--output=" + str(tmp_path / "x.tar"), "-o", ""):
        with pytest.raises(ValueError, match="not a commit"):
            export_tree(ref, tmp_path / "tree")
    assert not (tmp_path / "x.tar").exists()
