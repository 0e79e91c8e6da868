"""Executors: what answers a session's execution commands (real, simulated or scripted).

Imports: :mod:`sweworld.tasks` and :mod:`sweworld.sandbox` (whose ``Executor`` protocol
these implement); nothing above.
"""

from sweworld.execution.scripted import ScriptedExecutor, ScriptedRule
from sweworld.sandbox.executor import (
    ExecutionRequest,
    ExecutionResult,
    Executor,
    NoExecutor,
)

__all__ = [
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "NoExecutor",
    "ScriptedExecutor",
    "ScriptedRule",
]
