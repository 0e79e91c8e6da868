"""Mapping SWE-smith and R2E-Gym rows onto the common task fields (see
:mod:`sweworld.tasks.schema` for the overview of every dataset's mapping)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sweworld.tasks.fields import (
    SWESMITH_ID_RE,
    TaskValidationError,
    common_fields,
    extra_fields,
)
from sweworld.tasks.patches import PatchError, make_unified_diff, reverse_patch

__all__ = [
    "R2EGYM_REPOS",
    "SWESMITH_MARKERS",
    "SWESMITH_REPO_RE",
    "parse_pytest_summary",
    "r2egym_fields",
    "swesmith_fields",
]

# swesmith/owner__name.<commit prefix> (SWE-smith mirror repositories).
SWESMITH_REPO_RE = re.compile(
    r"^(?:swesmith/)?(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>[^/\s]+?)"
    r"\.(?P<commit>[0-9a-f]{7,40})$"
)
# Bug-generation strategies that appear in SWE-smith instance ids.
SWESMITH_MARKERS = (
    ".func_pm_",
    ".func_basic",
    ".lm_rewrite",
    ".lm_modify",
    ".combine_file",
    ".combine_module",
    ".pr_",
    ".class_rm_",
    ".mutation",
)

# R2E-Gym names repositories by their short name; these are the upstream GitHub repos.
R2EGYM_REPOS: dict[str, str] = {
    "aiohttp": "aio-libs/aiohttp",
    "coveragepy": "nedbat/coveragepy",
    "datalad": "datalad/datalad",
    "numpy": "numpy/numpy",
    "orange3": "biolab/orange3",
    "pandas": "pandas-dev/pandas",
    "pillow": "python-pillow/Pillow",
    "pyramid": "Pylons/pyramid",
    "scrapy": "scrapy/scrapy",
    "sympy": "sympy/sympy",
    "tornado": "tornadoweb/tornado",
}
_R2E_ISSUE_RE = re.compile(r"\[ISSUE\](.*)\[/ISSUE\]", re.DOTALL)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_STATUS_WORDS = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def swesmith_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """SWE-smith: ``patch`` is the bug. The gold fix is its reverse."""
    fields = common_fields(row)
    fields["extra"] = extra_fields(row)
    meta: dict[str, Any] = {}
    bug = str(row.get("patch") or "")
    fields["setup_patch"] = bug
    if row.get("setup_patch"):
        # Already split (a SWE-smith row someone normalised by hand): trust it.
        fields["setup_patch"] = row["setup_patch"]
        fields["patch"] = row.get("patch") or ""
    else:
        try:
            fields["patch"] = reverse_patch(bug)
        except PatchError as exc:
            fields["patch"] = ""
            meta["reverse_patch_error"] = str(exc)

    mirror_repo = str(row.get("repo") or "")
    instance_id = str(row.get("instance_id") or "")
    owner = name = commit = None
    for candidate, regex in ((mirror_repo, SWESMITH_REPO_RE), (instance_id, SWESMITH_ID_RE)):
        match = regex.match(candidate)
        if match:
            owner, name, commit = match.group("owner"), match.group("name"), match.group("commit")
            break
    if owner is None:
        image = str(row.get("image_name") or "")
        match = re.search(
            r"swesmith\.[^.]+\.(?P<owner>[^.]+?)_1776_(?P<name>.+)\.(?P<c>\w+)$", image
        )
        if match:
            owner, name, commit = match.group("owner"), match.group("name"), match.group("c")
    if owner is not None and name is not None:
        fields["repo"] = f"{owner}/{name}"
    elif mirror_repo and "/" in mirror_repo:
        fields["repo"] = mirror_repo
    else:
        raise TaskValidationError(
            f"cannot tell the upstream repository of SWE-smith row {instance_id!r} "
            "(expected repo 'swesmith/owner__name.<hash>' or id 'owner__name.<hash>.<bug>')",
            field="repo",
        )
    if mirror_repo:
        meta["mirror_repo"] = mirror_repo
    if row.get("base_commit"):
        meta["mirror_commit"] = row["base_commit"]
    if commit:
        meta["upstream_commit"] = commit
        fields["base_commit"] = commit
    bug_match = SWESMITH_ID_RE.match(instance_id)
    if bug_match:
        meta["bug_id"] = bug_match.group("bug")
    fields["meta"] = meta
    return fields


def r2egym_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """R2E-Gym (R2E-Gym-Subset, R2E-Gym-Lite, ...).

    * ``repo``: ``repo_name`` (a short name such as ``"aiohttp"``) mapped to its upstream
      GitHub repository (:data:`R2EGYM_REPOS`; an unknown short name ``x`` becomes ``x/x``
      and ``meta["repo_guessed"]`` is set).
    * ``base_commit``: ``parsed_commit_content.old_commit_hash`` (the commit the task
      starts from; ``commit_hash`` / the image tag is the fixed commit).
    * ``patch``: a unified diff rebuilt with :mod:`difflib` from the old and new file
      contents ``parsed_commit_content`` carries, for every non-test file (R2E-Gym's own
      test-file rule, ``FileDiff.is_test_file``). R2E-Gym's gold patch keeps only ``.py``
      files; this one keeps every non-binary file. Binary files are skipped and listed in
      ``meta["skipped_binary_files"]``.
    * ``test_patch``: the same for the commit's test files, plus R2E-Gym's hidden tests
      (``execution_result_content.test_file_names`` / ``test_file_codes``) added under
      ``r2e_tests/``, where R2E-Gym's images mount them and where the test ids point.
    * ``FAIL_TO_PASS`` / ``PASS_TO_PASS``: derived as R2E-Gym derives improvements
      (``ExecutionResult.is_good_exec``): both runs' pytest logs in
      ``execution_result_content`` (``old_commit_res_stdout`` / ``new_commit_res_stdout``)
      are parsed; a test passing on the new commit is FAIL_TO_PASS if it did not pass on
      the old one, PASS_TO_PASS if it did. Ids are pytest node ids as the log prints them
      (``r2e_tests/test_1.py::TestX::test_y``), the form SWE-bench's pytest log parser
      reads; R2E-Gym's own keys drop the file path and parameters.
      When the logs are missing or unparsable only the expected final statuses
      (``expected_output_json``) are known: every test expected to PASS is then listed in
      FAIL_TO_PASS (grading "all listed tests pass" is unchanged by the split, which the
      data cannot tell), PASS_TO_PASS is empty, the ids are R2E-Gym's short keys, and
      ``meta["tests_split"]`` is ``"expected_output_only"`` (otherwise ``"execution_logs"``).
      R2E-Gym's reward also requires the tests it expects to FAIL to keep failing; those
      are listed in ``meta["expected_fail"]``.
    * ``problem_statement``: the text inside ``[ISSUE]...[/ISSUE]`` when present (as
      R2E-Gym's runtime shows it to the agent); ``created_at``: the commit date.
    * ``instance_id``: the row's ``instance_id`` if any, else the image name without its
      registry user (``aiohttp_final:<commit>``, as debug-gym and rLLM name R2E-Gym
      tasks), else ``<repo_name>_final:<commit_hash>``.
    """
    fields: dict[str, Any] = common_fields(row)
    fields["extra"] = extra_fields(row)
    meta: dict[str, Any] = {}

    repo_name = str(row.get("repo_name") or "")
    if not fields.get("repo"):
        if "/" in repo_name:
            fields["repo"] = repo_name
        elif repo_name.lower() in R2EGYM_REPOS:
            fields["repo"] = R2EGYM_REPOS[repo_name.lower()]
        elif repo_name:
            fields["repo"] = f"{repo_name}/{repo_name}"
            meta["repo_guessed"] = True
        else:
            raise TaskValidationError("missing (no repo or repo_name)", field="repo_name")

    commit_hash = str(row.get("commit_hash") or "")
    if not fields.get("instance_id"):
        image = str(row.get("docker_image") or row.get("image_name") or "")
        if image:
            fields["instance_id"] = image.rsplit("/", 1)[-1]
        elif repo_name and commit_hash:
            fields["instance_id"] = f"{repo_name}_final:{commit_hash}"
        else:
            raise TaskValidationError(
                "missing, and no docker_image or repo_name + commit_hash to name the task",
                field="instance_id",
            )

    statement = fields.get("problem_statement")
    if isinstance(statement, str):
        match = _R2E_ISSUE_RE.search(statement)
        if match:
            fields["problem_statement"] = match.group(1).strip()
            meta["problem_statement_unwrapped"] = True

    commit = _json_field(row, "parsed_commit_content")
    execution = _json_field(row, "execution_result_content")
    if commit is not None:
        if not fields.get("base_commit"):
            fields["base_commit"] = str(commit.get("old_commit_hash") or "")
        if not fields.get("created_at") and commit.get("commit_date"):
            fields["created_at"] = str(commit["commit_date"])
        if "patch" not in fields or "test_patch" not in fields:
            gold, tests, skipped = _r2e_patches(commit.get("file_diffs") or [])
            fields.setdefault("patch", gold)
            fields.setdefault("test_patch", tests)
            if skipped:
                meta["skipped_binary_files"] = skipped
    hidden = _r2e_hidden_tests(execution)
    if hidden and "test_patch" not in common_fields(row):
        fields["test_patch"] = (fields.get("test_patch") or "") + "".join(
            make_unified_diff(path, None, code) for path, code in hidden
        )
        meta["hidden_test_files"] = [path for path, _ in hidden]

    if "FAIL_TO_PASS" not in fields and "PASS_TO_PASS" not in fields:
        expected = _json_field(row, "expected_output_json")
        f2p, p2p, split = _r2e_test_lists(execution, expected)
        fields["FAIL_TO_PASS"], fields["PASS_TO_PASS"] = f2p, p2p
        meta["tests_split"] = split
        if isinstance(expected, Mapping):
            failing = [k for k, v in expected.items() if str(v).upper() != "PASSED"]
            if failing:
                meta["expected_fail"] = failing
    fields["meta"] = meta
    return fields


# ------------------------------------------------------------------------------------------
# R2E-Gym helpers
# ------------------------------------------------------------------------------------------


def _json_field(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskValidationError(
                f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", field=key
            ) from None
    return value


def _r2e_is_test_file(path: str) -> bool:
    """R2E-Gym's ``FileDiff.is_test_file`` rule (so the gold patch matches theirs)."""
    parts = path.split("/")
    return (
        path.endswith("_test.py")
        or path.startswith("test_")
        or parts[-1].startswith("test_")
        or any(p in ("tests", "Tests", "test", "Test") for p in parts)
    )


def _r2e_patches(file_diffs: Iterable[Any]) -> tuple[str, str, list[str]]:
    gold: list[str] = []
    tests: list[str] = []
    skipped: list[str] = []
    for diff in file_diffs:
        if not isinstance(diff, Mapping):
            raise TaskValidationError(
                f"file_diffs entries must be objects, got {type(diff).__name__}",
                field="parsed_commit_content",
            )
        path = _r2e_path(diff)
        if diff.get("is_binary_file"):
            skipped.append(path)
            continue
        text = _r2e_file_patch(diff, path)
        (tests if _r2e_is_test_file(path) else gold).append(text)
    return "".join(gold), "".join(tests), skipped


def _r2e_path(diff: Mapping[str, Any]) -> str:
    header = diff.get("header") or {}
    path = ((header.get("file") or {}).get("path")) if isinstance(header, Mapping) else None
    if not path:
        for key in ("plus_file", "minus_file"):
            info = diff.get(key) or {}
            candidate = info.get("path") if isinstance(info, Mapping) else None
            if candidate and candidate != "/dev/null":
                path = candidate[2:] if candidate.startswith(("a/", "b/")) else candidate
                break
    if not path:
        raise TaskValidationError("a file diff has no path", field="parsed_commit_content")
    return str(path)


def _r2e_side(diff: Mapping[str, Any], key: str) -> str | None:
    info = diff.get(key)
    if isinstance(info, Mapping):
        return info.get("path")
    return None


def _r2e_file_patch(diff: Mapping[str, Any], path: str) -> str:
    header = diff.get("header") or {}
    misc = str(header.get("misc_line") or "") if isinstance(header, Mapping) else ""
    old = diff.get("old_file_content")
    new = diff.get("new_file_content")
    old_text: str | None = None if old is None or old == "/dev/null" else str(old)
    new_text: str | None = None if new is None or new == "/dev/null" else str(new)
    mode = "100644"
    mode_match = re.search(r"(?:new|deleted) file mode (\d+)", misc)
    if mode_match:
        mode = mode_match.group(1)
    elif isinstance(diff.get("index_line"), Mapping) and diff["index_line"].get("mode"):
        mode = str(diff["index_line"]["mode"])
    minus = _r2e_side(diff, "minus_file")
    if misc.startswith("new file mode") or minus == "/dev/null":
        old_text = None
    elif minus is None and not old_text:
        old_text = None  # R2E-Gym's FileDiff.is_new: no old content means a new file
    if misc.startswith("deleted file mode") or _r2e_side(diff, "plus_file") == "/dev/null":
        new_text = None
    hunks = diff.get("hunks") or []
    if not old_text and not new_text and hunks:
        # Contents not carried: fall back to the hunks, as R2E-Gym's get_patch renders them.
        return _r2e_render_hunks(diff, path, misc)
    if old_text is None and new_text is None:
        return ""
    return make_unified_diff(path, old_text, new_text, mode=mode)


def _r2e_render_hunks(diff: Mapping[str, Any], path: str, misc: str) -> str:
    out = [f"diff --git a/{path} b/{path}\n"]
    if misc:
        out.append(misc.rstrip("\n") + "\n")
    minus = _r2e_side(diff, "minus_file") or f"a/{path}"
    plus = _r2e_side(diff, "plus_file") or f"b/{path}"
    if minus != "/dev/null" and not minus.startswith("a/"):
        minus = "a/" + minus
    if plus != "/dev/null" and not plus.startswith("b/"):
        plus = "b/" + plus
    out.append(f"--- {minus}\n+++ {plus}\n")
    prefixes = {"context": " ", "added": "+", "deleted": "-", "note": "\\ "}
    for hunk in diff.get("hunks") or []:
        desc = hunk.get("descriptor") or {}

        def rng(r: Mapping[str, Any]) -> str:
            return f"{r['start']}" if r.get("length") is None else f"{r['start']},{r['length']}"

        section = desc.get("section") or ""
        out.append(
            f"@@ -{rng(desc['old_range'])} +{rng(desc['new_range'])} @@"
            + (f" {section}" if section else "")
            + "\n"
        )
        for line in (hunk.get("line_group") or {}).get("all_lines") or []:
            out.append(prefixes.get(str(line.get("type")), " ") + str(line.get("content")) + "\n")
    return "".join(out)


def _r2e_hidden_tests(execution: Any) -> list[tuple[str, str]]:
    if not isinstance(execution, Mapping):
        return []
    names = execution.get("test_file_names") or []
    codes = execution.get("test_file_codes") or []
    out = []
    for name, code in zip(names, codes, strict=False):
        name = str(name).lstrip("/")
        path = name if name.startswith("r2e_tests/") else f"r2e_tests/{name}"
        out.append((path, str(code)))
    return out


def parse_pytest_summary(log: str | None) -> dict[str, str]:
    """Test statuses from a ``pytest -rA`` log: ``{node id: status}``.

    Reads the lines that start with a status word, after the ``short test summary info``
    banner when there is one (as R2E-Gym's parser does), taking the node id the way
    SWE-bench's pytest parser does (the token after the status).
    """
    if not log:
        return {}
    text = _ANSI_RE.sub("", log)
    if "short test summary info" in text:
        text = text.split("short test summary info", 1)[1]
    statuses: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line.startswith(_STATUS_WORDS):
            continue
        tokens = line.replace(" - ", " ").split()
        if len(tokens) < 2 or tokens[0] not in _STATUS_WORDS:
            continue
        if tokens[1].startswith("["):
            # ``SKIPPED [2] path:line: reason`` counts skips by location: no test id.
            continue
        statuses.setdefault(tokens[1], tokens[0])
    return statuses


def _r2e_test_lists(execution: Any, expected: Any) -> tuple[list[str], list[str], str]:
    if isinstance(execution, Mapping):
        new = parse_pytest_summary(execution.get("new_commit_res_stdout"))
        if new:
            old = parse_pytest_summary(execution.get("old_commit_res_stdout"))
            f2p = [t for t, s in new.items() if s == "PASSED" and old.get(t) != "PASSED"]
            p2p = [t for t, s in new.items() if s == "PASSED" and old.get(t) == "PASSED"]
            return f2p, p2p, "execution_logs"
    if isinstance(expected, Mapping):
        passing = [str(k) for k, v in expected.items() if str(v).upper() == "PASSED"]
        return passing, [], "expected_output_only"
    return [], [], "none"
