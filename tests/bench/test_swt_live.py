"""``sweworld bench swt-live``: every workspace state it describes applies to the toy repo."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sweworld.bench import swt_live


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_every_fidelity_state_applies_and_the_broken_one_is_broken(tmp_path, toy_tasks, index):
    from sweworld.tasks.toy import toy_data_dir

    task = toy_tasks[index]
    states = swt_live.states(task)
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
    with pytest.raises(ValueError):
        swt_live.broken_patch("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +0,0 @@\n-x\n")
