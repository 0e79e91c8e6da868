"""sweworld: train and evaluate software-engineering agents without Docker.

File operations run for real in a light copy-on-write sandbox; execution commands go to a
pluggable executor (simulated by a language model, or real); rewards come from a verifier.

>>> from sweworld import SessionManager, load_tasks
>>> task = load_tasks("data/toy/tasks.jsonl")[0]
>>> with SessionManager() as manager:
...     session = manager.open(task)
...     print(session.step("git log --oneline").observation)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# A library is quiet unless the application configures logging: every module logs to a
# logger under "sweworld", and this handler keeps Python from printing warnings by itself.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "Session",
    "SessionManager",
    "StepResult",
    "Task",
    "__version__",
    "get_task",
    "load_tasks",
]

_LAZY = {
    "ExecutionRequest": "sweworld.sandbox.executor",
    "ExecutionResult": "sweworld.sandbox.executor",
    "Executor": "sweworld.sandbox.executor",
    "Session": "sweworld.sandbox.session",
    "SessionManager": "sweworld.sandbox.manager",
    "StepResult": "sweworld.sandbox.types",
    "Task": "sweworld.tasks.schema",
    "get_task": "sweworld.tasks.loaders",
    "load_tasks": "sweworld.tasks.loaders",
}

if TYPE_CHECKING:
    from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult, Executor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.session import Session
    from sweworld.sandbox.types import StepResult
    from sweworld.tasks.loaders import get_task, load_tasks
    from sweworld.tasks.schema import Task


def __getattr__(name: str) -> Any:
    """Import public names on first use, so ``import sweworld`` stays cheap."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sweworld' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
