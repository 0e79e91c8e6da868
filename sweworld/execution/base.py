"""The executor contract, defined where its caller lives (:mod:`sweworld.sandbox.executor`)
and re-exported here for the executors that implement it."""

from sweworld.sandbox.executor import (
    NO_EXECUTOR_EXIT_CODE,
    ExecutionRequest,
    ExecutionResult,
    Executor,
    NoExecutor,
)

__all__ = ["NO_EXECUTOR_EXIT_CODE", "ExecutionRequest", "ExecutionResult", "Executor", "NoExecutor"]
