"""Tests for sweworld.tasks.schema: rows from SWE-bench, SWE-Gym, SWE-smith and R2E-Gym."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from sweworld.tasks import Task, TaskValidationError
from sweworld.tasks.patches import files_in_patch, split_patch
from sweworld.tasks.schema import SWEBENCH_FIELDS, detect_source, parse_pytest_summary, test_list

SWEBENCH_ROW: dict[str, Any] = {
    "repo": "psf/requests",
    "instance_id": "psf__requests-2317",
    "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    "patch": (
        "diff --git a/requests/sessions.py b/requests/sessions.py\n"
        "--- a/requests/sessions.py\n+++ b/requests/sessions.py\n"
        "@@ -1 +1 @@\n-method = builtin_str(method)\n+method = to_native_string(method)\n"
    ),
    "test_patch": (
        "diff --git a/test_requests.py b/test_requests.py\n"
        "--- a/test_requests.py\n+++ b/test_requests.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    ),
    "problem_statement": "method = builtin_str(method) problem",
    "hints_text": "",
    "created_at": "2014-11-01T02:20:16Z",
    "version": "2.4",
    "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
    "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_BASICAUTH_TUPLE_HTTP_200_OK_GET"]',
    "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
}


# ------------------------------------------------------------------------------------------
# SWE-bench and SWE-Gym
# ------------------------------------------------------------------------------------------


def test_swebench_lite_loads_unchanged(lite_rows: list[dict[str, Any]]) -> None:
    assert len(lite_rows) == 290
    for row in lite_rows:
        task = Task.from_row(row)
        assert task.source == "swebench"
        assert task.extra == {}
        assert task.setup_patch == ""
        assert json.loads(row["FAIL_TO_PASS"]) == task.FAIL_TO_PASS and task.FAIL_TO_PASS
        assert json.loads(row["PASS_TO_PASS"]) == task.PASS_TO_PASS
        assert task.repo == row["repo"]
        assert task.repo_slug == task.instance_id.rsplit("-", 1)[0]
        assert task.test_files() and all(f in row["test_patch"] for f in task.test_files())
        out = task.to_row()
        # Every original column comes back byte for byte, test lists as the same JSON.
        assert {k: out[k] for k in row} == row
        assert list(out)[: len(SWEBENCH_FIELDS)] == list(SWEBENCH_FIELDS)
        assert Task.from_row(out) == task


def test_verified_resolved_patches_reduced_shape(verified_rows: list[dict[str, Any]]) -> None:
    assert len(verified_rows) == 402
    for row in verified_rows:
        task = Task.from_row(row)
        assert task.source == "swebench"
        assert (task.repo, task.base_commit, task.patch) == (
            row["repo"],
            row["base_commit"],
            row["patch"],
        )
        assert task.FAIL_TO_PASS == task.PASS_TO_PASS == []
        assert task.test_patch == task.hints_text == ""
        assert task.created_at is task.version is task.environment_setup_commit is None
        assert task.extra == {"resolved_by": row["resolved_by"]}
        # Without the repo column, it is derived from owner__name-NNNN.
        reduced = {k: v for k, v in row.items() if k != "repo"}
        derived = Task.from_row(reduced)
        assert derived.repo == row["repo"]
        assert derived.meta == {"repo_derived_from_instance_id": True}


def test_test_lists_accept_lists_json_and_empty() -> None:
    base = dict(SWEBENCH_ROW)
    assert Task.from_row({**base, "FAIL_TO_PASS": ["a::b"]}).FAIL_TO_PASS == ["a::b"]
    assert Task.from_row({**base, "FAIL_TO_PASS": ("a::b", "c")}).FAIL_TO_PASS == ["a::b", "c"]
    assert Task.from_row({**base, "FAIL_TO_PASS": None}).FAIL_TO_PASS == []
    assert Task.from_row({**base, "FAIL_TO_PASS": ""}).FAIL_TO_PASS == []
    assert Task.from_row({**base, "FAIL_TO_PASS": "[]"}).FAIL_TO_PASS == []


def test_coercions() -> None:
    when = datetime(2023, 5, 1, 12, 30, tzinfo=timezone.utc)
    task = Task.from_row({**SWEBENCH_ROW, "version": 3.0, "created_at": when, "hints_text": None})
    assert task.version == "3.0"
    assert task.created_at == "2023-05-01T12:30:00+00:00"
    assert task.hints_text == ""
    assert Task.from_row({**SWEBENCH_ROW, "version": 5}).version == "5"


def test_swegym_rows_and_extra_fields() -> None:
    row = {
        **SWEBENCH_ROW,
        "instance_id": "getmoto__moto-7365",
        "repo": "getmoto/moto",
        "FAIL_TO_PASS": ["tests/test_dynamodb/test_dynamodb.py::test_put_item"],
        "PASS_TO_PASS": [],
        "difficulty": "15 min - 1 hour",
    }
    task = Task.from_row(row, source="SWE-Gym")
    assert task.source == "swegym"
    assert task.extra == {"difficulty": "15 min - 1 hour"}
    assert Task.from_row(row).source == "swebench"  # same schema: detected as SWE-bench
    out = task.to_row()
    assert out["FAIL_TO_PASS"] == '["tests/test_dynamodb/test_dynamodb.py::test_put_item"]'
    assert out["PASS_TO_PASS"] == "[]"
    assert out["difficulty"] == "15 min - 1 hour"
    assert out["sweworld_source"] == "swegym"
    assert Task.from_row(out) == task


def test_direct_construction_and_helpers() -> None:
    task = Task(instance_id="toy__calc-1", repo="toy/calc", test_patch=SWEBENCH_ROW["test_patch"])
    assert task.repo_slug == "toy__calc"
    assert task.test_files() == ["test_requests.py"]
    assert task.patch_files() == []
    assert task.source == "unknown"
    assert repr(task) == "Task(instance_id='toy__calc-1', repo='toy/calc', source='unknown')"
    assert "diff --git" not in str(task)


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


def test_error_names_row_and_field() -> None:
    with pytest.raises(TaskValidationError) as info:
        Task.from_row({**SWEBENCH_ROW, "FAIL_TO_PASS": "test_a, test_b"}, where="x.jsonl line 3")
    message = str(info.value)
    assert "x.jsonl line 3" in message
    assert "psf__requests-2317" in message
    assert "FAIL_TO_PASS" in message and "not JSON" in message
    assert info.value.field == "FAIL_TO_PASS"

    with pytest.raises(TaskValidationError, match=r"field 'PASS_TO_PASS' \[0\]"):
        Task.from_row({**SWEBENCH_ROW, "PASS_TO_PASS": [1]})
    with pytest.raises(TaskValidationError, match="field 'instance_id': missing"):
        Task.from_row({k: v for k, v in SWEBENCH_ROW.items() if k != "instance_id"})
    with pytest.raises(TaskValidationError, match=r"field 'repo'.*cannot be derived"):
        Task.from_row({"instance_id": "nonsense", "patch": ""})
    with pytest.raises(TaskValidationError, match="field 'patch'"):
        Task.from_row({**SWEBENCH_ROW, "patch": 42})
    with pytest.raises(TaskValidationError, match="unknown task source 'bogus'"):
        Task.from_row(SWEBENCH_ROW, source="bogus")
    with pytest.raises(TaskValidationError, match="must be a mapping"):
        Task.from_row(["not", "a", "row"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Detection
# ------------------------------------------------------------------------------------------


def test_detect_source(swesmith_row: dict, r2e_row: dict) -> None:
    assert detect_source(SWEBENCH_ROW) == "swebench"
    assert detect_source(swesmith_row) == "swesmith"
    assert detect_source(r2e_row) == "r2egym"
    # Each SWE-smith signal on its own is enough.
    image = "swebench/swesmith.x86_64.a_1776_b.1"
    assert detect_source({"instance_id": "x", "image_name": image}) == "swesmith"
    assert detect_source({"instance_id": "x", "repo": "swesmith/a__b.12345678"}) == "swesmith"
    assert detect_source({"instance_id": "pydantic__pydantic.acb0f10f.pr_8316"}) == "swesmith"
    assert detect_source({"instance_id": "tobymao__sqlglot.036601ba.lm_rewrite__x"}) == "swesmith"
    # SWE-bench ids never look like SWE-smith ids.
    assert detect_source({"instance_id": "scikit-learn__scikit-learn-10297"}) == "swebench"
    assert detect_source({"instance_id": "sphinx-doc__sphinx-8721"}) == "swebench"
    # An R2E-Gym row needs no parsed commit to be recognised.
    assert detect_source({"repo_name": "numpy", "docker_image": "x/numpy_final:abc"}) == "r2egym"
    assert detect_source({"instance_id": "whatever"}) == "unknown"


# ------------------------------------------------------------------------------------------
# SWE-smith
# ------------------------------------------------------------------------------------------


def test_swesmith_patch_is_the_bug(swesmith_row: dict) -> None:
    task = Task.from_row(swesmith_row)
    assert task.source == "swesmith"
    assert task.setup_patch == swesmith_row["patch"]
    assert task.patch != swesmith_row["patch"]
    assert "-    queryparams = params\n+    queryparams.extend(params)\n" in task.patch
    assert task.repo == "oauthlib/oauthlib"
    assert task.repo_slug == "oauthlib__oauthlib"
    assert task.base_commit == "1fd52536"
    assert task.meta == {
        "mirror_repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "mirror_commit": swesmith_row["base_commit"],
        "upstream_commit": "1fd52536",
        "bug_id": "func_pm_remove_assign__09vlzwgc",
    }
    assert task.extra == {"image_name": swesmith_row["image_name"]}
    assert swesmith_row["FAIL_TO_PASS"] == task.FAIL_TO_PASS
    assert task.test_patch == ""
    # Round trip keeps the split (no double reversal).
    out = task.to_row()
    assert (out["patch"], out["setup_patch"]) == (task.patch, task.setup_patch)
    assert Task.from_row(out) == task


def test_swesmith_setup_then_fix_restores_the_repo(
    rowdata: Any, swesmith_row: dict, git_tree: Any
) -> None:
    task = Task.from_row(swesmith_row)
    tree = git_tree()
    tree.write(rowdata.SMITH_ORIGINAL)
    clean = tree.snapshot()
    tree.apply(task.setup_patch)
    assert tree.text("oauthlib/common.py") == rowdata.SMITH_BUGGY["oauthlib/common.py"]
    tree.apply(task.patch)
    assert tree.snapshot() == clean


def test_swesmith_variants(swesmith_row: dict) -> None:
    # Newer images are published under swebench/; repo derivable from the id alone.
    row = {k: v for k, v in swesmith_row.items() if k not in ("repo", "base_commit")}
    row["image_name"] = "swebench/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"
    task = Task.from_row(row)
    assert (task.repo, task.base_commit) == ("oauthlib/oauthlib", "1fd52536")
    assert "mirror_repo" not in task.meta
    # Only the image name says where the task comes from.
    row = {
        "instance_id": "my-bug-7",
        "image_name": "jyangballin/swesmith.x86_64.john-kurkowski_1776_tldextract.3d1bf184",
        "patch": swesmith_row["patch"],
    }
    task = Task.from_row(row)
    assert (task.repo, task.base_commit) == ("john-kurkowski/tldextract", "3d1bf184")
    # An explicit source wins over detection.
    forced = Task.from_row({**SWEBENCH_ROW}, source="swesmith")
    assert forced.setup_patch == SWEBENCH_ROW["patch"]
    assert "+method = builtin_str(method)" in forced.patch
    assert forced.repo == "psf/requests"


def test_swesmith_binary_bug_keeps_loading(swesmith_row: dict) -> None:
    binary = (
        "diff --git a/logo.png b/logo.png\nindex 1111111..2222222 100644\n"
        "Binary files a/logo.png and b/logo.png differ\n"
    )
    task = Task.from_row({**swesmith_row, "patch": binary})
    assert task.patch == ""
    assert task.setup_patch == binary
    assert "binary" in task.meta["reverse_patch_error"]


# ------------------------------------------------------------------------------------------
# R2E-Gym
# ------------------------------------------------------------------------------------------


def test_r2egym_mapping(rowdata: Any, r2e_row: dict) -> None:
    task = Task.from_row(r2e_row)
    assert task.source == "r2egym"
    assert task.instance_id == f"aiohttp_final:{rowdata.NEW_COMMIT}"
    assert task.repo == "aio-libs/aiohttp"
    assert task.base_commit == rowdata.OLD_COMMIT
    assert task.created_at == "2017-03-02T14:09:45"
    assert task.problem_statement.startswith("Title: parse_mimetype fails on an empty string")
    assert "[ISSUE]" not in task.problem_statement
    assert task.hints_text == "" and task.version is None
    # Gold patch: non-test files, rebuilt from the file contents.
    assert task.patch_files() == ["aiohttp/helpers.py", "CHANGES/1234.bugfix"]
    assert [p.status for p in split_patch(task.patch)] == ["modified", "added"]
    assert "\\ No newline at end of file" in task.patch
    # Test patch: the commit's test files, then the hidden R2E-Gym tests.
    assert task.test_files() == ["tests/test_helpers.py", "r2e_tests/test_1.py"]
    # Test lists from the old/new execution logs.
    assert task.FAIL_TO_PASS == ["r2e_tests/test_1.py::TestParse::test_empty"]
    assert task.PASS_TO_PASS == ["r2e_tests/test_1.py::TestParse::test_plain"]
    assert task.meta["tests_split"] == "execution_logs"
    assert task.meta["hidden_test_files"] == ["r2e_tests/test_1.py"]
    assert "expected_fail" not in task.meta
    # Everything else stays, unchanged, in extra; image names are not used.
    assert set(task.extra) == set(r2e_row) - {"problem_statement"}
    assert task.extra["docker_image"] == r2e_row["docker_image"]
    assert task.extra["parsed_commit_content"] == r2e_row["parsed_commit_content"]
    assert Task.from_row(task.to_row()) == task


def test_r2egym_patches_apply_with_git(rowdata: Any, r2e_row: dict, git_tree: Any) -> None:
    task = Task.from_row(r2e_row)
    tree = git_tree()
    tree.write({path: text for path, text in rowdata.R2E_OLD.items() if text is not None})
    tree.apply(task.patch)
    tree.apply(task.test_patch)
    for path, text in rowdata.R2E_NEW.items():
        assert tree.text(path) == text
    assert tree.text("r2e_tests/test_1.py") == rowdata.R2E_HIDDEN_TEST


def test_r2egym_expected_output_only(r2e_row: dict) -> None:
    row = dict(r2e_row)
    del row["execution_result_content"]
    row["expected_output_json"] = json.dumps(
        {
            "TestParse.test_empty": "PASSED",
            "TestParse.test_plain": "PASSED",
            "TestParse.test_known_bug": "FAILED",
        }
    )
    task = Task.from_row(row)
    assert task.FAIL_TO_PASS == ["TestParse.test_empty", "TestParse.test_plain"]
    assert task.PASS_TO_PASS == []
    assert task.meta["tests_split"] == "expected_output_only"
    assert task.meta["expected_fail"] == ["TestParse.test_known_bug"]
    assert task.test_files() == ["tests/test_helpers.py"]  # no hidden tests carried


def test_r2egym_without_contents_falls_back_to_hunks(
    rowdata: Any, r2e_row: dict, git_tree: Any
) -> None:
    commit = rowdata.r2e_parsed_commit(
        {"pkg/a.py": "x = 1\ny = 2\n"}, {"pkg/a.py": "x = 1\ny = 3\nz = 4\n"}
    )
    for diff in commit["file_diffs"]:
        diff["old_file_content"] = diff["new_file_content"] = ""
    task = Task.from_row({**r2e_row, "parsed_commit_content": commit})  # a dict, not a string
    tree = git_tree()
    tree.write({"pkg/a.py": "x = 1\ny = 2\n"})
    tree.apply(task.patch)
    assert tree.text("pkg/a.py") == "x = 1\ny = 3\nz = 4\n"


def test_r2egym_instance_id_and_repo_fallbacks(rowdata: Any, r2e_row: dict) -> None:
    row = {k: v for k, v in r2e_row.items() if k != "docker_image"}
    assert Task.from_row(row).instance_id == f"aiohttp_final:{rowdata.NEW_COMMIT}"
    row["repo_name"] = "mystery"
    task = Task.from_row(row)
    assert task.repo == "mystery/mystery" and task.meta["repo_guessed"] is True
    assert Task.from_row({**r2e_row, "instance_id": "given-id"}).instance_id == "given-id"
    with pytest.raises(TaskValidationError, match=r"parsed_commit_content.*not valid JSON"):
        Task.from_row({**r2e_row, "parsed_commit_content": "{broken"})


def test_r2egym_binary_files_are_skipped(r2e_row: dict) -> None:
    commit = json.loads(r2e_row["parsed_commit_content"])
    commit["file_diffs"].append(
        {
            "old_file_content": "",
            "new_file_content": "",
            "header": {"file": {"path": "aiohttp/static/logo.png"}, "misc_line": None},
            "index_line": None,
            "is_binary_file": True,
            "binary_line": "Binary files a/aiohttp/static/logo.png and b/... differ",
            "minus_file": None,
            "plus_file": None,
            "hunks": [],
        }
    )
    task = Task.from_row({**r2e_row, "parsed_commit_content": json.dumps(commit)})
    assert task.meta["skipped_binary_files"] == ["aiohttp/static/logo.png"]
    assert "logo.png" not in files_in_patch(task.patch)


def test_parse_pytest_summary() -> None:
    log = (
        "test_x.py::test_a PASSED\n"
        "=== short test summary info ===\n"
        "\x1b[32mPASSED\x1b[0m t.py::test_a\n"
        "FAILED t.py::test_b - assert 1 == 2\n"
        "ERROR t.py::test_c\n"
        "SKIPPED [1] t.py:3: no\n"
        "XFAIL t.py::test_d - reason\n"
    )
    assert parse_pytest_summary(log) == {
        "t.py::test_a": "PASSED",
        "t.py::test_b": "FAILED",
        "t.py::test_c": "ERROR",
        "t.py::test_d": "XFAIL",
    }
    assert parse_pytest_summary(None) == {}


def test_one_test_list_reader_for_tasks_and_raw_rows() -> None:
    row = {"instance_id": "o__r-1", "repo": "o/r", "FAIL_TO_PASS": '["t::a", "t::b"]'}
    task = Task.from_row(row)
    assert test_list(task, "FAIL_TO_PASS") == test_list(row, "FAIL_TO_PASS") == ["t::a", "t::b"]
    assert test_list(row, "PASS_TO_PASS") == [] and test_list(task, "PASS_TO_PASS") == []
    assert test_list({"PASS_TO_PASS": " "}, "PASS_TO_PASS") == []
    assert test_list({"PASS_TO_PASS": ("x", 3)}, "PASS_TO_PASS") == ["x", "3"]
    with pytest.raises(ValueError, match="not JSON"):
        test_list({"FAIL_TO_PASS": "[oops"}, "FAIL_TO_PASS")
