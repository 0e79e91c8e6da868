"""Fixtures for the task tests: shared data, git sandboxes, rows shaped like real datasets."""

from __future__ import annotations

import difflib
import gzip
import json
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import shared_data_dir


def _read_jsonl_gz(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def lite_path() -> Path:
    path = shared_data_dir() / "swebench_lite.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    return path


@pytest.fixture(scope="session")
def verified_path() -> Path:
    path = shared_data_dir() / "swebench_verified_resolved_patches.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    return path


@pytest.fixture(scope="session")
def lite_rows(lite_path: Path) -> list[dict[str, Any]]:
    return _read_jsonl_gz(lite_path)


@pytest.fixture(scope="session")
def verified_rows(verified_path: Path) -> list[dict[str, Any]]:
    return _read_jsonl_gz(verified_path)


# ------------------------------------------------------------------------------------------
# git sandboxes
# ------------------------------------------------------------------------------------------


class GitTree:
    """A scratch directory where patches are applied with the real ``git apply``."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)

    def write(self, files: dict[str, str | bytes], executable: tuple[str, ...] = ()) -> None:
        for rel, content in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                path.write_bytes(content.encode("utf-8", errors="surrogateescape"))
            else:
                path.write_bytes(content)
            if rel in executable:
                path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def apply(self, patch: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", *args, "-"],
            cwd=self.root,
            input=patch.encode("utf-8", errors="surrogateescape"),
            capture_output=True,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"git apply {' '.join(args)} failed: {result.stderr.decode(errors='replace')}\n"
                f"--- patch ---\n{patch[:3000]}"
            )
        return result

    def snapshot(self) -> dict[str, tuple[bytes, bool]]:
        """Every file (except .git) with its bytes and executable bit."""
        out: dict[str, tuple[bytes, bool]] = {}
        for path in sorted(self.root.rglob("*")):
            if ".git" in path.relative_to(self.root).parts or not path.is_file():
                continue
            mode = path.stat().st_mode
            out[path.relative_to(self.root).as_posix()] = (
                path.read_bytes(),
                bool(mode & stat.S_IXUSR),
            )
        return out

    def text(self, rel: str) -> str:
        return (self.root / rel).read_bytes().decode("utf-8", errors="surrogateescape")


@pytest.fixture
def git_tree(tmp_path: Path) -> Callable[[str], GitTree]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    counter = {"n": 0}

    def make(name: str = "") -> GitTree:
        counter["n"] += 1
        return GitTree(tmp_path / f"tree{counter['n']}{('-' + name) if name else ''}")

    return make


# ------------------------------------------------------------------------------------------
# Rows shaped like the real datasets
# ------------------------------------------------------------------------------------------


def _git_unified(path: str, old: str, new: str) -> str:
    """A git-style diff built independently of sweworld (used to make SWE-smith bugs)."""
    body = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


SMITH_ORIGINAL = {
    "oauthlib/common.py": (
        "import re\n"
        "\n"
        "\n"
        "def quote(s, safe=b'/'):\n"
        "    s = s.encode('utf-8') if isinstance(s, str) else s\n"
        "    return s\n"
        "\n"
        "\n"
        "def add_params_to_qs(query, params):\n"
        "    queryparams = list(query)\n"
        "    queryparams.extend(params)\n"
        "    return queryparams\n"
    ),
}
SMITH_BUGGY = {
    "oauthlib/common.py": SMITH_ORIGINAL["oauthlib/common.py"].replace(
        "    queryparams.extend(params)\n", "    queryparams = params\n"
    ),
}


@pytest.fixture
def swesmith_row() -> dict[str, Any]:
    """A row shaped like ``SWE-bench/SWE-smith`` (fields as swesmith/harness/gather.py and
    the published dataset write them: the patch introduces the bug)."""
    path = "oauthlib/common.py"
    return {
        "instance_id": "oauthlib__oauthlib.1fd52536.func_pm_remove_assign__09vlzwgc",
        "repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "patch": _git_unified(path, SMITH_ORIGINAL[path], SMITH_BUGGY[path]),
        "FAIL_TO_PASS": ["tests/test_common.py::ParamsFromDictTest::test_add_params"],
        "PASS_TO_PASS": [
            "tests/test_common.py::EncodingTest::test_urldecode",
            "tests/test_common.py::GeneratorTest::test_generate_token",
        ],
        "created_at": "2025-03-15T01:22:47.716104",
        "image_name": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
        "base_commit": "9c5f8bd2e5b7e0d4b1b4c2e5f6a7b8c9d0e1f2a3",
        "problem_statement": "add_params_to_qs drops the existing query parameters.",
    }


R2E_OLD = {
    "aiohttp/helpers.py": "def parse_mimetype(mimetype):\n    return mimetype.split('/')\n",
    "tests/test_helpers.py": "def test_parse():\n    assert True\n",
    "CHANGES/1234.bugfix": None,
}
R2E_NEW = {
    "aiohttp/helpers.py": (
        "def parse_mimetype(mimetype):\n"
        "    if not mimetype:\n"
        "        return ['', '']\n"
        "    return mimetype.split('/')\n"
    ),
    "tests/test_helpers.py": (
        "def test_parse():\n    assert True\n\n\ndef test_empty():\n    pass\n"
    ),
    "CHANGES/1234.bugfix": "Fix parse_mimetype on empty input",
}
R2E_HIDDEN_TEST = (
    "from aiohttp.helpers import parse_mimetype\n"
    "\n"
    "\n"
    "class TestParse:\n"
    "    def test_empty(self):\n"
    "        assert parse_mimetype('') == ['', '']\n"
    "\n"
    "    def test_plain(self):\n"
    "        assert parse_mimetype('text/plain') == ['text', 'plain']\n"
)
OLD_COMMIT = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
NEW_COMMIT = "d7cd0613472fd4d9940e37f1c55921f6a1515324"


def _r2e_hunks(old: str, new: str) -> list[dict[str, Any]]:
    """Hunks in R2E-Gym's ``UniHunk`` JSON shape (descriptor + line_group.all_lines)."""
    hunks = []
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3))[2:]
    current: dict[str, Any] | None = None
    for line in lines:
        if line.startswith("@@"):
            ranges = line.split("@@")[1].split()
            old_r, new_r = ranges[0][1:], ranges[1][1:]

            def rng(text: str) -> dict[str, Any]:
                start, _, length = text.partition(",")
                return {"start": int(start), "length": int(length) if length else None}

            current = {
                "descriptor": {"old_range": rng(old_r), "new_range": rng(new_r), "section": ""},
                "line_group": {"all_lines": []},
                "modified_entities": [],
                "added_entities": [],
                "deleted_entities": [],
            }
            hunks.append(current)
            continue
        assert current is not None
        kind = {" ": "context", "+": "added", "-": "deleted"}[line[0]]
        current["line_group"]["all_lines"].append({"content": line[1:], "type": kind})
    return hunks


def r2e_parsed_commit(old: dict[str, str | None], new: dict[str, str | None]) -> dict[str, Any]:
    file_diffs = []
    for path in old:
        before, after = old[path], new[path]
        added, deleted = before is None, after is None
        file_diffs.append(
            {
                "old_file_content": before or "",
                "new_file_content": after or "",
                "header": {
                    "file": {"path": path},
                    "misc_line": "new file mode 100644"
                    if added
                    else ("deleted file mode 100644" if deleted else None),
                },
                "index_line": None
                if added or deleted
                else {"old_commit_hash": "1111111", "new_commit_hash": "2222222", "mode": "100644"},
                "is_binary_file": False,
                "binary_line": None,
                "minus_file": {"path": "/dev/null" if added else f"a/{path}"},
                "plus_file": {"path": "/dev/null" if deleted else f"b/{path}"},
                "hunks": _r2e_hunks(before or "", after or ""),
            }
        )
    return {
        "file_diffs": file_diffs,
        "old_commit_hash": OLD_COMMIT,
        "new_commit_hash": NEW_COMMIT,
        "commit_message": "Fix parse_mimetype on empty input (#1234)",
        "commit_date": "2017-03-02T14:09:45",
        "metadata": {},
    }


R2E_OLD_LOG = (
    "============================= test session starts ==============================\n"
    "collected 2 items\n\n"
    "r2e_tests/test_1.py F.                                                   [100%]\n\n"
    "=========================== short test summary info ============================\n"
    "PASSED r2e_tests/test_1.py::TestParse::test_plain\n"
    "FAILED r2e_tests/test_1.py::TestParse::test_empty - AssertionError: assert [''] == ['', '']\n"
    "========================= 1 failed, 1 passed in 0.12s ==========================\n"
)
R2E_NEW_LOG = (
    "============================= test session starts ==============================\n"
    "collected 2 items\n\n"
    "r2e_tests/test_1.py ..                                                   [100%]\n\n"
    "=========================== short test summary info ============================\n"
    "PASSED r2e_tests/test_1.py::TestParse::test_empty\n"
    "PASSED r2e_tests/test_1.py::TestParse::test_plain\n"
    "============================== 2 passed in 0.10s ===============================\n"
)


@pytest.fixture
def r2e_row() -> dict[str, Any]:
    """A row shaped like ``R2E-Gym/R2E-Gym-Subset`` (fields of R2E-Gym's ``DatasetRow``;
    JSON columns shaped like ``ParsedCommit`` and ``ExecutionResult``)."""
    execution = {
        "repo_name": "aiohttp",
        "new_commit_hash": NEW_COMMIT,
        "test_file_codes": [R2E_HIDDEN_TEST],
        "test_file_names": ["test_1.py"],
        "setup_res_code": 0,
        "setup_res_stdout": "",
        "setup_res_stderr": "",
        "new_commit_res_code": 0,
        "new_commit_res_stdout": R2E_NEW_LOG,
        "new_commit_res_stderr": "",
        "old_commit_res_code": 1,
        "old_commit_res_stdout": R2E_OLD_LOG,
        "old_commit_res_stderr": "",
    }
    return {
        "repo_name": "aiohttp",
        "docker_image": f"namanjain12/aiohttp_final:{NEW_COMMIT}",
        "commit_hash": NEW_COMMIT,
        "parsed_commit_content": json.dumps(r2e_parsed_commit(R2E_OLD, R2E_NEW), indent=4),
        "execution_result_content": json.dumps(execution, indent=4),
        "modified_files": list(R2E_OLD),
        "modified_entity_summaries": [],
        "relevant_files": ["aiohttp/helpers.py"],
        "num_non_test_files": 2,
        "num_non_test_func_methods": 1,
        "num_non_test_lines": 2,
        "prompt": "Write an issue for this commit ... (contains the gold patch)",
        "problem_statement": (
            "[ISSUE]\nTitle: parse_mimetype fails on an empty string\n\n"
            "Calling parse_mimetype('') returns [''] instead of ['', ''].\n[/ISSUE]"
        ),
        "expected_output_json": json.dumps(
            {"TestParse.test_empty": "PASSED", "TestParse.test_plain": "PASSED"}, indent=4
        ),
    }


@pytest.fixture
def rowdata() -> SimpleNamespace:
    """The constants and helpers behind the row fixtures, for assertions."""
    return SimpleNamespace(
        SMITH_ORIGINAL=SMITH_ORIGINAL,
        SMITH_BUGGY=SMITH_BUGGY,
        R2E_OLD=R2E_OLD,
        R2E_NEW=R2E_NEW,
        R2E_HIDDEN_TEST=R2E_HIDDEN_TEST,
        OLD_COMMIT=OLD_COMMIT,
        NEW_COMMIT=NEW_COMMIT,
        r2e_parsed_commit=r2e_parsed_commit,
    )
