"""Executors: what answers a session's execution commands (real, simulated or scripted)."""

from sweworld.execution.base import (
    ExecutionRequest,
    ExecutionResult,
    Executor,
    NoExecutor,
)
from sweworld.execution.scripted import ScriptedExecutor, ScriptedRule

__all__ = [
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "NoExecutor",
    "ScriptedExecutor",
    "ScriptedRule",
]
