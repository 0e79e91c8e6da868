"""Dependencies are quiet by default; ``-v`` lets their warnings through."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sweworld.console import progress_enabled

SCRIPT = """
import os, sys, warnings
from sweworld.console import quiet_dependencies
quiet_dependencies({verbose})
warnings.warn_explicit("old API", FutureWarning, "x.py", 1, module="transformers.modeling_utils")
warnings.warn_explicit("ours", UserWarning, "y.py", 1, module="sweworld.models.base")
print(os.environ.get("HF_DATASETS_DISABLE_PROGRESS_BARS"), os.environ.get("TRANSFORMERS_VERBOSITY"))
from tqdm import tqdm
list(tqdm(range(3), desc="a library's own bar"))
"""


def _run(verbose: int) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(verbose=verbose)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_dependency_warnings_and_bars_are_off_by_default() -> None:
    done = _run(0)
    assert "old API" not in done.stderr  # transformers' FutureWarning filtered
    assert "ours" in done.stderr  # sweworld's own warnings are not
    assert done.stdout.split() == ["1", "error"]
    assert "a library's own bar" not in done.stderr  # not a terminal: no tqdm bar at all


def test_verbose_lets_dependency_warnings_through() -> None:
    done = _run(1)
    assert "old API" in done.stderr
    assert done.stdout.split() == ["1", "None"]  # no terminal here: no bars even with -v


def test_progress_only_on_a_terminal(tmp_path: pytest.TempPathFactory) -> None:
    with open(tmp_path / "f", "w") as handle:  # type: ignore[operator]
        assert progress_enabled(handle) is False
