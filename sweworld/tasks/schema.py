"""The task schema: one model for SWE-bench, SWE-Gym, SWE-smith and R2E-Gym rows.

Rows are accepted as their datasets publish them; :meth:`Task.from_row` recognises the
dataset and maps it onto common fields. Whatever a row carries beyond the common field
names is kept, unchanged, in :attr:`Task.extra`; what the mapping derived or replaced is
recorded in :attr:`Task.meta`.

How each dataset maps (see the ``_from_*`` functions for details):

* **SWE-bench / Lite / Verified, SWE-Gym** (``source="swebench"`` / ``"swegym"``): fields
  taken as they are; ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` may be JSON strings or lists;
  missing fields default (``repo`` is derived from an ``owner__name-NNNN`` instance id).
* **SWE-smith** (``source="swesmith"``): the row's ``patch`` *creates* the bug. It becomes
  :attr:`Task.setup_patch` and :attr:`Task.patch` (the gold fix) is its reverse. ``repo`` is
  the upstream ``owner/name`` and ``base_commit`` the upstream commit the SWE-smith mirror
  was made from (the 8-hex suffix of ``swesmith/owner__name.abcd1234``), so
  ``repo@base_commit + setup_patch`` is the buggy state. The mirror repository and the
  row's own ``base_commit`` (a commit of the mirror that already contains the bug) are in
  ``meta["mirror_repo"]`` / ``meta["mirror_commit"]``.
* **R2E-Gym** (``source="r2egym"``): see :func:`_from_r2egym`.

Image names (``image_name``, ``docker_image``) are never used for execution; they stay in
``extra``. Note for blind-mode consumers: ``extra`` may hold oracle material (R2E-Gym's
``prompt`` and ``parsed_commit_content`` contain the gold patch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sweworld.tasks.patches import PatchError, files_in_patch, make_unified_diff, reverse_patch

__all__ = [
    "TASK_SOURCES",
    "Task",
    "TaskSource",
    "TaskValidationError",
    "detect_source",
    "normalize_source",
]

TaskSource = Literal["swebench", "swegym", "swesmith", "r2egym", "unknown"]
TASK_SOURCES: tuple[str, ...] = ("swebench", "swegym", "swesmith", "r2egym", "unknown")

# Common fields, in SWE-bench's column order; a row's keys with these names are consumed.
SWEBENCH_FIELDS: tuple[str, ...] = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
)
COMMON_FIELDS: frozenset[str] = frozenset((*SWEBENCH_FIELDS, "setup_patch"))
# Keys that to_row() adds so that its output loads back as it was.
SOURCE_KEY = "sweworld_source"
META_KEY = "sweworld_meta"

_SOURCE_ALIASES = {
    "swebench": "swebench",
    "swebenchlite": "swebench",
    "swebenchverified": "swebench",
    "swegym": "swegym",
    "swesmith": "swesmith",
    "r2egym": "r2egym",
    "r2e": "r2egym",
    "unknown": "unknown",
}

# owner__name-1234 (SWE-bench / SWE-Gym instance ids). GitHub owners have no underscores.
_SWEBENCH_ID_RE = re.compile(r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>.+)-(?P<num>\d+)$")
# owner__name.<commit prefix>.<bug id> (SWE-smith instance ids).
_SWESMITH_ID_RE = re.compile(
    r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>[^/\s]+?)\.(?P<commit>[0-9a-f]{7,40})"
    r"\.(?P<bug>[A-Za-z0-9_.-]+)$"
)
# swesmith/owner__name.<commit prefix> (SWE-smith mirror repositories).
_SWESMITH_REPO_RE = re.compile(
    r"^(?:swesmith/)?(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>[^/\s]+?)"
    r"\.(?P<commit>[0-9a-f]{7,40})$"
)
# Bug-generation strategies that appear in SWE-smith instance ids.
_SWESMITH_MARKERS = (
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


class TaskValidationError(ValueError):
    """A row that cannot become a :class:`Task`; the message names the row and field."""

    def __init__(self, message: str, *, where: str | None = None, field: str | None = None):
        self.where = where
        self.field = field
        self.reason = message
        parts = [p for p in (where, f"field {field!r}" if field else None) if p]
        super().__init__(": ".join([*parts, message]))


class Task(BaseModel):
    """One software-engineering task, whatever dataset it came from."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1, description="upstream GitHub owner/name")
    base_commit: str = ""
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str | None = None
    patch: str = Field("", description="gold fix (unified diff); may be empty")
    test_patch: str = ""
    setup_patch: str = Field("", description="applied on top of base_commit to create the task")
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str | None = None
    environment_setup_commit: str | None = None
    source: TaskSource = "unknown"
    extra: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)

    # ---------------------------------------------------------------- validators

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _parse_test_list(cls, value: Any) -> Any:
        return parse_test_list(value)

    @field_validator("version", mode="before")
    @classmethod
    def _version_to_str(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return str(value)
        return value

    @field_validator("created_at", mode="before")
    @classmethod
    def _date_to_str(cls, value: Any) -> Any:
        if isinstance(value, datetime | date):
            return value.isoformat()
        return value

    @field_validator(
        "base_commit",
        "problem_statement",
        "hints_text",
        "patch",
        "test_patch",
        "setup_patch",
        mode="before",
    )
    @classmethod
    def _none_to_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_row(
        cls, row: Mapping[str, Any], source: str | None = None, *, where: str | None = None
    ) -> Task:
        """Build a task from a dataset row, as the dataset publishes it.

        ``source`` forces the mapping (``"swebench"``, ``"swegym"``, ``"swesmith"``,
        ``"r2egym"``, ``"unknown"``; ``None`` or ``"auto"`` detects it). Rows written by
        :meth:`to_row` load back unchanged whatever ``source`` says. ``where`` (e.g.
        ``"tasks.jsonl line 12"``) prefixes error messages.
        """
        if not isinstance(row, Mapping):
            raise TaskValidationError(
                f"a task row must be a mapping, got {type(row).__name__}", where=where
            )
        label = _row_label(row, where)
        if SOURCE_KEY in row:
            kind = normalize_source(row[SOURCE_KEY], where=label)
            fields = _from_normalized(row)
        else:
            if source is not None and str(source).strip().lower() not in ("", "auto"):
                kind = normalize_source(source, where=label)
            else:
                kind = detect_source(row)
            builder = {
                "swebench": _from_swebench,
                "swegym": _from_swebench,
                "unknown": _from_swebench,
                "swesmith": _from_swesmith,
                "r2egym": _from_r2egym,
            }[kind]
            try:
                fields = builder(row)
            except TaskValidationError as exc:
                raise TaskValidationError(exc.reason, where=label, field=exc.field) from None
        fields["source"] = kind
        return _validate(fields, label)

    def to_row(self) -> dict[str, Any]:
        """A SWE-bench-shaped dict: SWE-bench's columns in its order (test lists as JSON
        strings), then ``setup_patch``, then every extra field of the original row, then
        ``sweworld_source`` / ``sweworld_meta`` so that :meth:`from_row` restores the task."""
        row: dict[str, Any] = {}
        for name in SWEBENCH_FIELDS:
            value = getattr(self, name)
            row[name] = json.dumps(value) if name in ("FAIL_TO_PASS", "PASS_TO_PASS") else value
        row["setup_patch"] = self.setup_patch
        for key, value in self.extra.items():
            row.setdefault(key, value)
        row[SOURCE_KEY] = self.source
        if self.meta:
            row[META_KEY] = self.meta
        return row

    # ---------------------------------------------------------------- helpers

    @property
    def repo_slug(self) -> str:
        """``owner__name``, as in SWE-bench instance ids and image names."""
        return self.repo.replace("/", "__")

    def test_files(self) -> list[str]:
        """Files touched by :attr:`test_patch`."""
        return files_in_patch(self.test_patch)

    def patch_files(self) -> list[str]:
        """Files touched by the gold :attr:`patch`."""
        return files_in_patch(self.patch)

    def __repr__(self) -> str:
        return f"Task(instance_id={self.instance_id!r}, repo={self.repo!r}, source={self.source!r})"

    __str__ = __repr__


# ------------------------------------------------------------------------------------------
# Source detection
# ------------------------------------------------------------------------------------------


def normalize_source(source: Any, *, where: str | None = None) -> str:
    """Canonical source name for ``source`` (accepts ``SWE-bench``, ``swe_smith``, ...)."""
    if source is None or str(source).lower() == "auto":
        return "unknown"
    key = re.sub(r"[\s_\-]", "", str(source)).lower()
    if key not in _SOURCE_ALIASES:
        raise TaskValidationError(
            f"unknown task source {source!r}; expected one of {', '.join(TASK_SOURCES)}",
            where=where,
            field="source",
        )
    return _SOURCE_ALIASES[key]


def detect_source(row: Mapping[str, Any]) -> str:
    """Which dataset a row comes from, by its fields.

    * R2E-Gym: a ``parsed_commit_content`` column, or ``repo_name`` with ``docker_image``
      / ``commit_hash`` and no ``patch``.
    * SWE-smith: an image name of the form ``*/swesmith.<arch>.*``, a ``repo`` of the
      form ``swesmith/owner__name.<hash>``, or an ``owner__name.<hash>.<bug>`` instance id.
    * SWE-bench (also SWE-Gym): an ``owner__name-NNNN`` instance id or SWE-bench's
      test fields. Anything else with an instance id is ``"unknown"`` (mapped the same way).
    """
    if "parsed_commit_content" in row or (
        "repo_name" in row
        and ("docker_image" in row or "commit_hash" in row)
        and "patch" not in row
    ):
        return "r2egym"
    image = str(row.get("image_name") or row.get("docker_image") or "")
    repo = str(row.get("repo") or "")
    instance_id = str(row.get("instance_id") or "")
    if (
        re.search(r"(^|/)swesmith\.", image)
        or repo.startswith("swesmith/")
        or _SWESMITH_ID_RE.match(instance_id)
        or (
            instance_id.count("__") >= 1
            and not _SWEBENCH_ID_RE.match(instance_id)
            and any(marker in instance_id for marker in _SWESMITH_MARKERS)
        )
    ):
        return "swesmith"
    if _SWEBENCH_ID_RE.match(instance_id) or any(
        key in row for key in ("FAIL_TO_PASS", "test_patch", "environment_setup_commit")
    ):
        return "swebench"
    return "unknown"


# ------------------------------------------------------------------------------------------
# Mappings
# ------------------------------------------------------------------------------------------


def parse_test_list(value: Any) -> Any:
    """A list of test ids from a list, a JSON string of one, ``None`` or ``""``."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                "expected a list of test ids or a JSON string of one; "
                f"got a string that is not JSON ({exc.msg})"
            ) from None
        return parsed
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, list | dict):
        return value.tolist()  # numpy arrays from pandas-read parquet
    return value


def _extra(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in COMMON_FIELDS}


def _common(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in COMMON_FIELDS if k in row}


def repo_from_instance_id(instance_id: str) -> str | None:
    """``owner/name`` from a SWE-bench style id ``owner__name-NNNN`` (or a SWE-smith id)."""
    match = _SWEBENCH_ID_RE.match(instance_id) or _SWESMITH_ID_RE.match(instance_id)
    if match:
        return f"{match.group('owner')}/{match.group('name')}"
    return None


def _from_normalized(row: Mapping[str, Any]) -> dict[str, Any]:
    fields = _common(row)
    fields["extra"] = {k: v for k, v in _extra(row).items() if k not in (SOURCE_KEY, META_KEY)}
    meta = row.get(META_KEY)
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    fields["meta"] = dict(meta or {})
    return fields


def _from_swebench(row: Mapping[str, Any]) -> dict[str, Any]:
    """SWE-bench, SWE-bench Lite/Verified, SWE-Gym and lookalikes: fields as they are."""
    fields = _common(row)
    fields["extra"] = _extra(row)
    fields["meta"] = {}
    if not row.get("instance_id"):
        raise TaskValidationError("missing or empty", field="instance_id")
    if not fields.get("repo"):
        derived = repo_from_instance_id(str(row.get("instance_id") or ""))
        if derived is None:
            raise TaskValidationError(
                "missing, and cannot be derived from the instance id "
                f"{row.get('instance_id')!r} (expected 'owner__name-NNNN')",
                field="repo",
            )
        fields["repo"] = derived
        fields["meta"]["repo_derived_from_instance_id"] = True
    return fields


def _from_swesmith(row: Mapping[str, Any]) -> dict[str, Any]:
    """SWE-smith: ``patch`` is the bug. The gold fix is its reverse."""
    fields = _common(row)
    fields["extra"] = _extra(row)
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
    for candidate, regex in ((mirror_repo, _SWESMITH_REPO_RE), (instance_id, _SWESMITH_ID_RE)):
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
    bug_match = _SWESMITH_ID_RE.match(instance_id)
    if bug_match:
        meta["bug_id"] = bug_match.group("bug")
    fields["meta"] = meta
    return fields


def _from_r2egym(row: Mapping[str, Any]) -> dict[str, Any]:
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
    fields: dict[str, Any] = _common(row)
    fields["extra"] = _extra(row)
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
    if hidden and "test_patch" not in _common(row):
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


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------


def _row_label(row: Mapping[str, Any], where: str | None) -> str:
    ident = row.get("instance_id") or row.get("docker_image") or row.get("image_name")
    parts = [p for p in (where, f"instance {ident!r}" if ident else None) if p]
    return ", ".join(parts) or "task row"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _validate(fields: dict[str, Any], label: str) -> Task:
    try:
        return Task.model_validate(fields)
    except ValidationError as exc:
        problems = []
        first_field = None
        for error in exc.errors():
            loc = error.get("loc") or ()
            name = str(loc[0]) if loc else "?"
            first_field = first_field or name
            detail = ".".join(str(p) for p in loc[1:])
            got = _short(error.get("input"))
            msg = str(error.get("msg", "")).removeprefix("Value error, ")
            problems.append(f"field {name!r}{f' [{detail}]' if detail else ''}: {msg} (got {got})")
        error = TaskValidationError("invalid task row: " + "; ".join(problems), where=label)
        error.field = first_field
        raise error from None
