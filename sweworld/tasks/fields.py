"""What every task row shares: SWE-bench's field names, the error a bad row raises, the
instance-id patterns, and the one reader of FAIL_TO_PASS / PASS_TO_PASS lists."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "COMMON_FIELDS",
    "META_KEY",
    "MODES",
    "MODE_HELP",
    "SOURCE_KEY",
    "SWEBENCH_FIELDS",
    "SWEBENCH_ID_RE",
    "SWESMITH_ID_RE",
    "TaskValidationError",
    "common_fields",
    "extra_fields",
    "parse_test_list",
    "repo_from_instance_id",
    "task_field",
    "test_list",
]

#: What the world and the reward may read of a task: ``oracle`` (its gold patch, test patch and
#: FAIL_TO_PASS / PASS_TO_PASS lists, which the agent never sees) or ``blind`` (none of
#: them). The one default of every command and config is the first.
MODES = ("oracle", "blind")
#: The ``--mode`` help text every command shares.
MODE_HELP = (
    "what the world and the reward may read: oracle (default: also the task's gold patch, test "
    "patch and test lists, which the agent never sees, like a real environment's hidden tests) "
    "or blind (the repository and the candidate only: for tasks without a reference fix, and "
    "for choosing among candidates at test time)"
)

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

# owner__name-1234 (SWE-bench / SWE-Gym instance ids). GitHub owners have no underscores.
SWEBENCH_ID_RE = re.compile(r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>.+)-(?P<num>\d+)$")
# owner__name.<commit prefix>.<bug id> (SWE-smith instance ids).
SWESMITH_ID_RE = re.compile(
    r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)__(?P<name>[^/\s]+?)\.(?P<commit>[0-9a-f]{7,40})"
    r"\.(?P<bug>[A-Za-z0-9_.-]+)$"
)


class TaskValidationError(ValueError):
    """A row that cannot become a :class:`Task`; the message names the row and field."""

    def __init__(self, message: str, *, where: str | None = None, field: str | None = None):
        self.where = where
        self.field = field
        self.reason = message
        parts = [p for p in (where, f"field {field!r}" if field else None) if p]
        super().__init__(": ".join([*parts, message]))


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


def task_field(task: Any, name: str) -> Any:
    """Field ``name`` of a :class:`~sweworld.tasks.Task` or of a raw row (a mapping); None
    when absent."""
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def test_list(task: Any, name: str) -> list[str]:
    """The test ids of ``task``'s ``name`` list (``"FAIL_TO_PASS"`` / ``"PASS_TO_PASS"``),
    for a :class:`~sweworld.tasks.Task` or a raw row (a mapping whose lists may still be
    JSON strings); ``[]`` when absent. Raises ``ValueError`` for a string that is not JSON."""
    return [str(test) for test in parse_test_list(task_field(task, name)) or ()]


test_list.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def extra_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in COMMON_FIELDS}


def common_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in COMMON_FIELDS if k in row}


def repo_from_instance_id(instance_id: str) -> str | None:
    """``owner/name`` from a SWE-bench style id ``owner__name-NNNN`` (or a SWE-smith id)."""
    match = SWEBENCH_ID_RE.match(instance_id) or SWESMITH_ID_RE.match(instance_id)
    if match:
        return f"{match.group('owner')}/{match.group('name')}"
    return None
