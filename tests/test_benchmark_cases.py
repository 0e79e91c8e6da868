"""The benchmarks run every case they describe, or count and print the ones they leave out."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tests.conftest import PROJECT


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, PROJECT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_every_fidelity_state_applies_and_the_broken_one_is_broken(tmp_path, toy_tasks, index):
    from sweworld.tasks.toy import toy_data_dir

    fidelity = load("swt_fidelity")
    task = toy_tasks[index]
    states = fidelity.states(task)
    assert list(states) == ["base", "tests", "tests+gold", "tests+broken"]
    for name, patch in states.items():
        if not patch:
            continue
        tree = tmp_path / name
        shutil.copytree(toy_data_dir() / "repo", tree)
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
        applied = subprocess.run(
            ["git", "apply", "-"], input=patch, text=True, cwd=tree, capture_output=True
        )
        assert applied.returncode == 0, (name, applied.stderr)
        if name == "tests+broken":
            changed = [tree / p for p in task.patch_files()]
            assert any("raise RuntimeError('wip')" in p.read_text() for p in changed)
    assert states["tests+broken"] != states["tests+gold"]


def test_broken_patch_rejects_a_patch_without_added_lines():
    fidelity = load("swt_fidelity")
    with pytest.raises(ValueError):
        fidelity.broken_patch("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +0,0 @@\n-x\n")


def test_best_of_n_counts_the_tasks_it_leaves_out():
    from sweworld.reward.model import RewardResult

    evaluation = load("swr_eval")
    evaluation.DROPPED.clear()

    def result(score: float) -> RewardResult:
        return RewardResult("t", score=score, resolved=score >= 0.5, reward=0.0)

    groups = {
        "two": [(result(0.9), True), (result(0.1), False)],
        "one": [(result(0.9), True)],
    }
    metrics = evaluation.best_of_n(groups, 0.2)
    assert metrics["n_tasks"] == 1
    assert evaluation.DROPPED == [("best-of-N", "one", "fewer than 2 labelled candidates")]
    assert evaluation.report_dropped()["total"] == 1
