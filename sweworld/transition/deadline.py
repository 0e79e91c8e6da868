"""The step's deadline, as the code that computes a simulated step sees it.

:meth:`~sweworld.transition.outcome.executor.OutcomeExecutor.execute` runs a step inside
``with step_deadline(request.deadline):``; the loops whose length the input decides (the
test files collected and the definitions in each, the changed files, the import graph, the
tests' features) call :func:`check_deadline` between two items, which raises
:class:`StepOverrun` once the deadline has passed. A step can still run past its deadline by
one item: one parse of one module (``ast.parse`` is not interrupted). The deadline is a
context variable: each thread (each step) sees its own, and code run outside a step (the
trainer building rows) sees none and never stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from time import monotonic

__all__ = ["StepOverrun", "check_deadline", "step_deadline"]

_DEADLINE: ContextVar[float | None] = ContextVar("sweworld_outcome_deadline", default=None)


class StepOverrun(Exception):
    """The step's deadline passed while ``stage`` was computed."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"the step's deadline passed during {stage}")
        self.stage = stage


@contextlib.contextmanager
def step_deadline(deadline: float | None) -> Iterator[None]:
    """Within the block, :func:`check_deadline` raises once ``time.monotonic()`` passes
    ``deadline`` (None: no deadline)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline(stage: str) -> None:
    """Raise :class:`StepOverrun` when the current step's deadline has passed."""
    deadline = _DEADLINE.get()
    if deadline is not None and monotonic() >= deadline:
        raise StepOverrun(stage)
