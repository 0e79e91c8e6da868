"""Shared by the check modules: what they report (:class:`Issue`) and how they read the
line that ends a Python traceback."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The last line of a Python traceback (``ValueError: bad``, ``pkg.mod.CustomError``).
EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Warning)"
    r"(?::.*)?$|^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*$"
)


def last_line(text: str) -> str | None:
    """The last line of ``text`` that is not blank (right-stripped), or None."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.rstrip()
    return None


@dataclass(frozen=True)
class Issue:
    """One inconsistency of a prediction: a stable ``code`` and a message for the model."""

    code: str
    message: str
