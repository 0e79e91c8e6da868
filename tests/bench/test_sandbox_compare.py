"""Before/after runs of the sandbox benchmarks: the worker runs on the tree it is given."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sweworld.bench.sandbox_compare import PROJECT, export_tree, pct, run_worker
from tests.conftest import requires_sandbox


def test_pct_is_the_nearest_rank():
    assert pct([5.0, 1.0, 3.0], 50) == 3.0
    assert pct(list(map(float, range(101))), 99) == 99.0
    assert pct([2.0], 95) == 2.0
    assert pct([], 50) != pct([], 50)  # NaN


@requires_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="the overlay backend mounts as root")
def test_the_worker_runs_on_each_tree_it_is_given(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "django").mkdir(parents=True)
    (repo / "django" / "__init__.py").write_text("VERSION = (5, 1)\n")
    row = run_worker(PROJECT, "compare_worker", str(repo), 2, 1, 2)
    assert Path(row["sweworld"]) == (PROJECT / "sweworld").resolve()
    assert row["create_p50"] > 0 and row["step_p50"] > 0
    inside = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], capture_output=True)
    if inside.returncode != 0:
        pytest.skip("not a git checkout: no baseline to export")
    before = export_tree("HEAD", tmp_path / "before")
    row = run_worker(before, "compare_worker", str(repo), 2, 1, 2)
    assert Path(row["sweworld"]) == (before / "sweworld").resolve()
