"""A tiny library with real git history and SWT records of it, made in the test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

CALC = """def add(a, b):
    return a + b


def div(a, b):
    return a / b
"""
TESTS = """from pkg.calc import add, div


def test_add():
    assert add(1, 2) == 3


def test_div():
    assert div(4, 2) == 2


def test_other():
    assert True
"""


def _diff(new_line: str) -> str:
    """A diff of pkg/calc.py replacing ``add``'s body line by ``new_line``."""
    head = ["diff --git a/pkg/calc.py b/pkg/calc.py", "--- a/pkg/calc.py", "+++ b/pkg/calc.py"]
    hunk = ["@@ -1,5 +1,5 @@", " def add(a, b):", "-    return a + b", f"+{new_line}", " ", " "]
    return "\n".join([*head, *hunk, " def div(a, b):", ""])


BUG = _diff("    return a - b")
BROKEN = _diff("    return a + (b")
IDS = [
    "tests/test_calc.py::test_add",
    "tests/test_calc.py::test_div",
    "tests/test_calc.py::test_other",
]


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def _log(statuses: dict[str, str]) -> str:
    lines = ["=" * 20 + " short test summary info " + "=" * 20]
    lines += [f"{s} {t}" for t, s in statuses.items()]
    failed = sum(s == "FAILED" for s in statuses.values())
    passed = sum(s == "PASSED" for s in statuses.values())
    lines.append(f"{failed} failed, {passed} passed in 0.01s" if failed else f"{passed} passed")
    return "\n".join(lines) + "\n"


def _record(repo_name: str, commit: str, i: int, command: str, diff: str, gold: str,
            statuses: dict[str, str], code: int, stderr: str = "") -> dict:  # fmt: skip
    task = {"instance_id": f"{repo_name}-{i // 10}", "repo": repo_name, "base_commit": commit,
            "patch": gold, "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
            "PASS_TO_PASS": json.dumps(IDS[1:])}  # fmt: skip
    return {
        "id": f"{repo_name}-{i}", "source": "test", "instance_id": task["instance_id"],
        "repo": repo_name, "command": command, "stdout": _log(statuses) if statuses else "",
        "stderr": stderr, "exit_code": code, "base_commit": commit, "task": json.dumps(task),
        "step": i, "diff": diff, "ran_tests": bool(statuses),
        "test_statuses": json.dumps(statuses), "command_kind": "pytest",
    }  # fmt: skip


@pytest.fixture(scope="session")
def calc_data(tmp_path_factory) -> dict:
    """A git repository and SWT records of two "repositories" (train / held-out) on it: test
    runs on the base, a buggy state, the fixed state and an unparsable state, and scripts."""
    root = tmp_path_factory.mktemp("calc")
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    commit = _git(repo, "rev-parse", "HEAD")
    from sweworld.tasks.patches import reverse_patch

    fix = reverse_patch(BUG)
    passing = {t: "PASSED" for t in IDS}
    buggy = {**passing, IDS[0]: "FAILED"}
    records = []
    for name in ("acme/train", "acme/heldout"):
        i = 0
        for _ in range(6):
            for command, diff, statuses, code, stderr in (
                ("python -m pytest -rA tests/test_calc.py", "", passing, 0, ""),
                ("python -m pytest -rA tests/test_calc.py", BUG, buggy, 1, ""),
                ("python -m pytest -rA tests/test_calc.py::test_add", BUG,
                 {IDS[0]: "FAILED"}, 1, ""),
                ("python -m pytest -rA tests/test_calc.py", BROKEN, {}, 2, ""),
                ("python -c 'from pkg.calc import add; print(add(1, 2))'", "", {}, 0, ""),
                ("python -c 'from pkg.calc import div; div(1, 0)'", "", {}, 1,
                 "Traceback (most recent call last):\n  File \"<string>\", line 1\n"
                 "ZeroDivisionError: division by zero\n"),
            ):  # fmt: skip
                gold = fix if diff == BUG else BUG
                records.append(
                    _record(name, commit, i, command, diff, gold, statuses, code, stderr)
                )
                i += 1
    data = root / "records" / "swt.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"repo": repo, "data": data, "commit": commit, "root": root}


@pytest.fixture(scope="module")
def calc_model(calc_data, tmp_path_factory) -> Path:
    """An outcome model trained on the tiny library's records (seconds)."""
    from sweworld.train.outcome import TreeSettings, train_heads
    from sweworld.train.outcome_data import BaseCheckouts, load_rows
    from sweworld.transition.outcome.model import OutcomeModel

    cache = tmp_path_factory.mktemp("bases")
    rows = load_rows([calc_data["data"]], BaseCheckouts([calc_data["repo"]], cache))
    model = OutcomeModel(
        train_heads(rows, "hgb", 0, TreeSettings(max_iter=20, min_samples_leaf=5, l2=0.0)),
        {"trained_kinds": sorted({r.kind for r in rows})},
    )
    return model.save(tmp_path_factory.mktemp("model") / "model.json")
