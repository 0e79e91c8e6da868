"""The task schema: one model for SWE-bench, SWE-Gym, SWE-smith and R2E-Gym rows.

Rows are accepted as their datasets publish them; :meth:`Task.from_row` recognises the
dataset and maps it onto common fields. Whatever a row carries beyond the common field
names is kept, unchanged, in :attr:`Task.extra`; what the mapping derived or replaced is
recorded in :attr:`Task.meta`.

How each dataset maps (details in :mod:`sweworld.tasks.sources`):

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
* **R2E-Gym** (``source="r2egym"``): see :func:`~sweworld.tasks.sources.r2egym_fields`.

Image names (``image_name``, ``docker_image``) are never used for execution; they stay in
``extra``. Note for blind-mode consumers: ``extra`` may hold oracle material (R2E-Gym's
``prompt`` and ``parsed_commit_content`` contain the gold patch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sweworld.tasks.fields import (
    META_KEY,
    SOURCE_KEY,
    SWEBENCH_FIELDS,
    SWEBENCH_ID_RE,
    SWESMITH_ID_RE,
    TaskValidationError,
    common_fields,
    extra_fields,
    parse_test_list,
    repo_from_instance_id,
    test_list,
)
from sweworld.tasks.patches import files_in_patch
from sweworld.tasks.sources import (
    SWESMITH_MARKERS,
    parse_pytest_summary,
    r2egym_fields,
    swesmith_fields,
)

__all__ = [
    "SWEBENCH_FIELDS",
    "TASK_SOURCES",
    "Task",
    "TaskSource",
    "TaskValidationError",
    "detect_source",
    "normalize_source",
    "parse_pytest_summary",
    "parse_test_list",
    "repo_from_instance_id",
    "test_list",
]

TaskSource = Literal["swebench", "swegym", "swesmith", "r2egym", "unknown"]
TASK_SOURCES: tuple[str, ...] = ("swebench", "swegym", "swesmith", "r2egym", "unknown")

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
                "swesmith": swesmith_fields,
                "r2egym": r2egym_fields,
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
        or SWESMITH_ID_RE.match(instance_id)
        or (
            instance_id.count("__") >= 1
            and not SWEBENCH_ID_RE.match(instance_id)
            and any(marker in instance_id for marker in SWESMITH_MARKERS)
        )
    ):
        return "swesmith"
    if SWEBENCH_ID_RE.match(instance_id) or any(
        key in row for key in ("FAIL_TO_PASS", "test_patch", "environment_setup_commit")
    ):
        return "swebench"
    return "unknown"


# ------------------------------------------------------------------------------------------
# Mappings
# ------------------------------------------------------------------------------------------


def _from_normalized(row: Mapping[str, Any]) -> dict[str, Any]:
    fields = common_fields(row)
    fields["extra"] = {
        k: v for k, v in extra_fields(row).items() if k not in (SOURCE_KEY, META_KEY)
    }
    meta = row.get(META_KEY)
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    fields["meta"] = dict(meta or {})
    return fields


def _from_swebench(row: Mapping[str, Any]) -> dict[str, Any]:
    """SWE-bench, SWE-bench Lite/Verified, SWE-Gym and lookalikes: fields as they are."""
    fields = common_fields(row)
    fields["extra"] = extra_fields(row)
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
