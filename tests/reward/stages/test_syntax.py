"""SyntaxStage: introduced Python syntax errors fail the candidate, in files and hunks scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweworld.reward.candidate import view_candidate
from sweworld.reward.stages import SyntaxStage
from sweworld.reward.stages.syntax import check_source, tree_sitter_errors
from sweworld.reward.types import RewardContext
from sweworld.tasks.patches import make_unified_diff
from tests.reward.stages import context, diff, make_repo, toy_base, write

MOD = """\
import os


def load(path):
    with open(path) as handle:
        return handle.read()


def size(path):
    return os.path.getsize(path)
"""


def run(patch: str | None, base: Path | None = None, **kwargs) -> object:
    view = view_candidate(patch, base_dir=base)
    return SyntaxStage(**kwargs).run(RewardContext(task=None, candidate=view))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "pkg/mod.py": MOD,
            "pkg/legacy.py": "print 'python 2'\n\nX = 1\n",
            "pkg/old.py": "Y = 2\n",
            "docs/index.md": "# docs\n",
        },
    )


@pytest.mark.parametrize("with_base", [True, False])
def test_toy_gold_patches_pass(toy_tasks, tmp_path: Path, with_base: bool) -> None:
    for task in toy_tasks:
        base = toy_base(task, tmp_path / task.instance_id) if with_base else None
        result = SyntaxStage().run(context(task, task.patch, base))
        assert result.verdict == "pass", result.message
        assert result.score is None and not result.short_circuit
        assert result.evidence["checked"] == [
            f.path for f in context(task, task.patch, None).candidate.files
        ]
        assert result.latency_s < 0.5


@pytest.mark.parametrize("with_base", [True, False])
def test_broken_toy_patch_fails_with_file_and_line(
    toy_tasks, tmp_path: Path, with_base: bool
) -> None:
    task = toy_tasks[1]
    base = toy_base(task, tmp_path / "base")
    gold = context(task, task.patch, base).candidate.files[0]
    assert gold.before is not None and gold.after is not None
    lines = gold.after.split("\n")
    target = next(i for i, line in enumerate(lines) if line.strip().startswith("if ") and i > 40)
    lines[target] = lines[target].rstrip(":")  # "if x" without its colon
    patch = make_unified_diff(gold.path, gold.before, "\n".join(lines))
    result = SyntaxStage().run(context(task, patch, base if with_base else None))
    assert result.verdict == "fail"
    if with_base:  # a whole file that does not compile: score 0, the pipeline stops
        assert result.score == 0.0 and result.short_circuit
    else:  # a hunk is a fragment: reported as suspected, the pipeline goes on
        assert result.score is None and not result.short_circuit
        assert result.evidence["suspected_only"] is True
    (error,) = result.evidence["errors"]
    assert error["file"] == gold.path
    assert error["line"] == target + 1
    assert error["scope"] == ("file" if with_base else "hunk")
    assert f"{gold.path}:{target + 1}:" in result.message


def test_unclosed_bracket_reports_tree_sitter_location(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("os.path.getsize(path)", "os.path.getsize(path")})
    result = run(diff(repo), repo)
    assert result.verdict == "fail"
    error = result.evidence["errors"][0]
    assert error["line"] == 10 and error["ts_line"] == 10
    assert "never closed" in error["message"]


def test_compile_time_errors_count(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD + "\nreturn 1\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "fail"
    assert "'return' outside function" in result.evidence["errors"][0]["message"]


def test_preexisting_errors_do_not_fail(repo: Path) -> None:
    write(repo, {"pkg/legacy.py": "print 'python 2'\n\nX = 2\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "pass"
    assert result.evidence["preexisting"][0]["file"] == "pkg/legacy.py"
    assert result.evidence["errors"] == []


def test_deleted_and_non_python_files(repo: Path) -> None:
    write(repo, {"pkg/old.py": None})
    result = run(diff(repo), repo)
    assert result.verdict == "skip" and result.evidence["checked"] == []
    write(repo, {"docs/index.md": "# docs (\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "skip" and "no Python file" in result.message


def test_added_file_checked_without_base(repo: Path) -> None:
    write(repo, {"pkg/new.py": "def f(:\n    pass\n"})
    result = run(diff(repo))
    assert result.verdict == "fail"
    assert result.evidence["errors"][0]["file"] == "pkg/new.py"
    assert result.evidence["errors"][0]["scope"] == "file"


def test_empty_garbage_and_unapplicable(repo: Path) -> None:
    assert run("").verdict == "skip"
    garbage = run("Sure! Here is the fix you asked for.\n")
    assert garbage.verdict == "fail" and garbage.short_circuit and "parse" in garbage.message
    wrong = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n-import sys\n+import re\n \n"
    result = run(wrong, repo)
    assert result.verdict == "fail" and "does not apply" in result.message
    lenient = run(wrong, repo, fail_on_apply_error=False)
    assert lenient.verdict == "pass" and lenient.evidence["apply_error"]


def test_unreadable_files_are_listed_not_fatal(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r", {"enc.py": "x = 'caf\xe9'\n".encode("latin-1"), "ok.py": "a = 1\n"}
    )
    write(repo, {"enc.py": "x = 'th\xe9'\n".encode("latin-1"), "ok.py": "a = 2\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "pass"
    assert result.evidence["unchecked"][0]["file"] == "enc.py"
    assert result.evidence["checked"] == ["ok.py"]


def test_python_version_feature_check(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("return os.path.getsize(path)", "return (n := 1)")})
    patch = diff(repo)
    assert run(patch, repo).verdict == "pass"
    old = run(patch, repo, python_version="3.7")
    assert old.verdict == "fail" and old.evidence["errors"][0]["line"] == 10


def test_hunks_are_conservative(repo: Path) -> None:
    # a change inside a bracketed expression whose opening is outside the hunk's context
    base = make_repo(
        repo.parent / "wide",
        {"m.py": "VALUES = [\n" + "".join(f"    {i},\n" for i in range(20)) + "]\n"},
    )
    write(base, {"m.py": "VALUES = [\n" + "".join(f"    {i * 2},\n" for i in range(20)) + "]\n"})
    patch = diff(base, "-U1")
    result = run(patch)
    assert result.verdict == "pass", result.evidence
    # a broken def line inside an otherwise complete hunk is caught
    write(repo, {"pkg/mod.py": MOD.replace("def size(path):", "def size(path:")})
    result = run(diff(repo))
    assert result.verdict == "fail" and result.evidence["errors"][0]["line"] == 9


def test_check_source_and_tree_sitter_errors() -> None:
    assert check_source("x = 1\n") is None
    issue = check_source("x = (1,\ny = 2\n")
    assert issue is not None and issue.line == 1 and issue.ts_line is not None
    assert check_source("a = 1\0\n") is not None
    assert tree_sitter_errors("def f():\n    return 1\n") == []
    assert tree_sitter_errors("def f(:\n")[0][0] == 1


def test_pathological_input_never_raises(repo: Path) -> None:
    deep = "x = " + "(" * 300 + ")" * 300 + "\n"
    write(repo, {"pkg/deep.py": deep})
    result = run(diff(repo), repo)
    assert result.verdict == "fail"  # CPython's own limit: 200 nested parentheses
    assert "too many nested parentheses" in result.message
    assert result.latency_s < 5
