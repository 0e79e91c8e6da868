"""TypecheckStage: mypy errors introduced by a candidate, without the repository's deps."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

from sweworld.reward.candidate import view_candidate
from sweworld.reward.stages import TypecheckStage
from sweworld.reward.stages.typecheck import MypyError, introduced_errors, module_layout
from sweworld.reward.types import RewardContext
from tests.reward.stages import context, diff, make_repo, toy_base, write

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="needs mypy")

MOD = """\
from __future__ import annotations

import numpy  # not installed here: must not count


def total(values: list[int]) -> int:
    return sum(values)


def label(n: int) -> str:
    return str(n)


BROKEN: int = "already wrong"
"""


def run(patch: str, base: Path | None, **kwargs):
    view = view_candidate(patch, base_dir=base)
    return TypecheckStage(**kwargs).run(RewardContext(task=None, candidate=view))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "pkg/__init__.py": "from .mod import total\n",
            "pkg/mod.py": MOD,
            "my-tools/2to3.py": "X: int = 1\n",
            "other-tools/2to3.py": "Y: int = 1\n",
            "README.md": "readme\n",
        },
    )


def test_toy_gold_patches_introduce_nothing(toy_tasks, tmp_path: Path) -> None:
    for task in toy_tasks:
        base = toy_base(task, tmp_path / task.instance_id)
        result = TypecheckStage().run(context(task, task.patch, base))
        assert result.verdict == "pass", (result.message, result.evidence)
        assert result.evidence["introduced"] == []
        assert result.evidence["checked"] == [f.path for f in view_candidate(task.patch).files]


def test_introduced_error_fails_with_file_and_line(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("return str(n)", "return n")})
    start = time.perf_counter()
    result = run(diff(repo), repo)
    elapsed = time.perf_counter() - start
    assert result.verdict == "fail" and result.score is None and not result.short_circuit
    (error,) = result.evidence["introduced"]
    assert error["file"] == "pkg/mod.py" and error["line"] == 11
    assert error["code"] == "return-value"
    assert "pkg/mod.py:11" in result.message
    assert result.evidence["before_errors"] == 1  # BROKEN, unchanged
    assert elapsed < 30


def test_preexisting_errors_shifted_or_renamed_do_not_count(repo: Path) -> None:
    new = "# a comment\n\n" + MOD.replace("BROKEN: int", "RENAMED: int")
    write(repo, {"pkg/mod.py": new + "\nimport not_a_real_module\nfrom . import sibling\n"})
    write(repo, {"pkg/__init__.py": "from .mod import total\nfrom . import newmod\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "pass", result.evidence
    assert result.evidence["before_errors"] == result.evidence["after_errors"] == 1


def test_odd_paths_and_added_files(repo: Path) -> None:
    write(repo, {"my-tools/2to3.py": "X: int = 2\n", "other-tools/2to3.py": "Y: int = 2\n"})
    write(repo, {"class/new-file.py": "def f() -> int:\n    return 'x'\n"})
    result = run(diff(repo), repo)
    # Both odd-named modified files are checked without duplicate-module errors; the added
    # file is not compared (all its errors would count as introduced).
    assert result.verdict == "pass", result.evidence
    assert result.evidence["introduced"] == []
    assert sorted(result.evidence["checked"]) == ["my-tools/2to3.py", "other-tools/2to3.py"]
    assert [u["file"] for u in result.evidence["unchecked"]] == ["class/new-file.py"]
    write(repo, {"my-tools/2to3.py": "X: int = 'two'\n"})
    result = run(diff(repo), repo)
    assert result.verdict == "fail", result.evidence
    assert [e["file"] for e in result.evidence["introduced"]] == ["my-tools/2to3.py"]


def test_skips(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("return str(n)", "return n")})
    patch = diff(repo)
    hunks = run(patch, None)
    assert hunks.verdict == "skip" and "hunks" in hunks.message
    assert hunks.evidence["unchecked"][0]["file"] == "pkg/mod.py"
    write(repo, {"README.md": "changed\n"})
    assert run(diff(repo), repo).verdict == "skip"
    assert run("", repo).verdict == "skip"
    assert run("garbage\n", repo).verdict == "skip"
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mypy" else real_find_spec(name, *a),
    )
    missing = run(patch, repo)
    assert missing.verdict == "skip" and "not installed" in missing.message


def test_files_that_do_not_parse_are_left_out(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("def label(n: int)", "def label(n: int")})
    result = run(diff(repo), repo)
    assert result.verdict == "skip"
    assert result.evidence["unchecked"][0]["reason"] == "new text does not parse"


def test_timeout_gives_error_quickly(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("return str(n)", "return n")})
    patch = diff(repo)
    start = time.perf_counter()
    result = run(patch, repo, timeout_s=0.01)
    assert time.perf_counter() - start < 10
    assert result.verdict == "error" and "timed out" in result.message


def test_private_cache_dir_and_options(repo: Path, tmp_path: Path) -> None:
    write(repo, {"pkg/mod.py": MOD + "\n\ndef untyped():\n    x: int = 'no'\n    return x\n"})
    patch = diff(repo)
    cache = tmp_path / "mypy-cache"
    default = run(patch, repo, cache_dir=cache)
    assert default.verdict == "pass" and cache.is_dir()
    strict = run(patch, repo, check_untyped_defs=True, python_version="3.6")
    assert strict.verdict == "fail"
    assert strict.evidence["introduced"][0]["code"] == "assignment"


def test_module_layout_and_matching() -> None:
    layout = module_layout(["a-b/2to3.py", "a_b/_2to3.py", "pkg/__init__.py", "class/x.pyi"])
    assert layout == {
        "a-b/2to3.py": "a_b/_2to3.py",
        "a_b/_2to3.py": "a_b/_2to3_2.py",
        "pkg/__init__.py": "pkg/__init__.py",
        "class/x.pyi": "class_/x.pyi",
    }

    def err(side: str, line: int, message: str, code: str = "assignment") -> MypyError:
        return MypyError(side, "m.py", line, code, message)

    before = [err("before", 3, 'Name "a" is not defined'), err("before", 9, "see line 3")]
    after = [
        err("after", 5, 'Name "b" is not defined'),  # renamed: loose match
        err("after", 11, "see line 5"),  # moved: exact match after normalisation
        err("after", 12, 'Name "c" is not defined'),  # new
    ]
    introduced = introduced_errors(before, after)
    assert [e.line for e in introduced] == [12]


def _mypy_children() -> list[int]:
    """mypy processes started by this process (the stage's, in their own group)."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = handle.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except (OSError, IndexError):
            continue
        if parent == me and b"mypy" in cmdline:
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class _StuckChecker(TypecheckStage):
    """The stage with its checker replaced by a process that never finishes and starts a
    child of its own (as mypy's workers would): what the deadline must kill, whatever the
    speed of the real mypy on this machine."""

    def __init__(self, pids: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.pids = pids

    def _command(self, cache: Path | None) -> list[str]:
        code = (
            "import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(self.pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
            "time.sleep(600)\n"
        )
        return [sys.executable, "-c", code]


def test_the_reward_deadline_kills_the_checker_and_its_group(tmp_path: Path) -> None:
    """The reward's deadline, not the stage's own 600 s, ends the checker: the stage answers
    ``error`` saying it was killed, and neither the process nor its child is left."""
    repo = make_repo(
        tmp_path / "repo",
        {"pkg/__init__.py": "", "pkg/m.py": "def f(a: int) -> int:\n    return a\n"},
    )
    write(repo, {"pkg/m.py": "def f(a: int) -> int:\n    return a + 1\n"})
    view = view_candidate(diff(repo), base_dir=repo)
    pids = tmp_path / "pids"
    stage = _StuckChecker(pids, timeout_s=600, cache_dir=tmp_path / "cache")
    deadline = time.monotonic() + 3.0
    result = stage.run(RewardContext(task=None, candidate=view, deadline=deadline))
    assert time.monotonic() < deadline + 60  # killed at the deadline, not after 600 s
    assert result.verdict == "error", result.message
    assert "killed" in result.message
    assert result.evidence["timeout_s"] < 600
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2
    end = time.monotonic() + 10
    while not all(_gone(pid) for pid in started) and time.monotonic() < end:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in started)  # the whole group, not only the leader


def test_a_deadline_that_passes_while_reading_files_stops_before_mypy(tmp_path: Path) -> None:
    body = "".join(f"def f{i}(a: int) -> int:\n    return a + {i}\n" for i in range(5_000))
    names = [f"pkg/m{n}.py" for n in range(4)]
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", **dict.fromkeys(names, body)})
    write(repo, dict.fromkeys(names, body.replace("return a + 7\n", "return a + 8\n", 1)))
    view = view_candidate(diff(repo), base_dir=repo)
    stage = TypecheckStage(timeout_s=600, cache_dir=tmp_path / "cache")
    result = stage.run(RewardContext(task=None, candidate=view, deadline=time.monotonic()))
    assert result.verdict == "error" and "passed while reading" in result.message
    assert _mypy_children() == []


def test_stages_not_started_by_the_deadline_are_not_run(repo: Path) -> None:
    from sweworld.reward.model import RewardModel, SWRConfig

    write(repo, {"pkg/mod.py": MOD.replace("return str(n)", "return n")})
    patch = diff(repo)
    model = RewardModel(SWRConfig(stages=("syntax", "typecheck"), mode="blind"))
    result = model.score(None, patch, base_dir=repo, deadline=time.monotonic() - 1)
    assert result.info.get("deadline_passed") is True
    assert result.stages["syntax"].verdict == "error"
    assert "deadline" in result.stages["syntax"].message and "typecheck" not in result.stages
    assert result.resolved is False
    fresh = model.score(None, patch, base_dir=repo, deadline=time.monotonic() + 120)
    assert fresh.stages["typecheck"].verdict == "fail"  # with time left, the stages run
