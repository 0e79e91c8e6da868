"""Tasks: one schema for SWE-bench, SWE-Gym, SWE-smith and R2E-Gym rows, and loaders.

Imports: nothing of sweworld but :mod:`sweworld.dirs` and :mod:`sweworld.pyast` (the
bottom layer; everything else reads tasks).
"""

from sweworld.tasks.loaders import (
    HubUnavailableError,
    MissingDependencyError,
    TaskLoadError,
    TaskNotFoundError,
    get_task,
    iter_json_lines,
    iter_tasks,
    load_tasks,
    read_json_lines,
)
from sweworld.tasks.schema import Task, TaskSource, TaskValidationError, test_list

__all__ = [
    "HubUnavailableError",
    "MissingDependencyError",
    "Task",
    "TaskLoadError",
    "TaskNotFoundError",
    "TaskSource",
    "TaskValidationError",
    "get_task",
    "iter_json_lines",
    "iter_tasks",
    "load_tasks",
    "read_json_lines",
    "test_list",
]
