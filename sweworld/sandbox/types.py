"""Small value types shared by the sandbox, its tools and the session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def clean_text(text: str) -> str:
    """``text`` as valid Unicode (encodable as UTF-8): surrogate pairs written as two code
    points are joined, and every lone surrogate becomes U+FFFD. Everything that crosses the
    session's boundary (actions in, observations and executor results out) goes through
    this, so a lone surrogate never raises and never reaches an agent or a model."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_value(value: Any) -> Any:
    """:func:`clean_text` applied to every string of a (nested) mapping, list or string."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean_value(v) for v in value)
    return value


@dataclass
class BashOutcome:
    """What one shell command did inside the sandbox.

    ``exit_code`` is the shell's status; ``-1`` when the command was stopped (timeout or
    output flood). ``info`` carries routing and limit details (which execution commands
    were intercepted, whether output was truncated, ...).
    """

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    timed_out: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def output(self) -> str:
        """stdout followed by stderr, the way a terminal shows them."""
        if self.stdout and self.stderr and not self.stdout.endswith("\n"):
            return self.stdout + "\n" + self.stderr
        return self.stdout + self.stderr


@dataclass
class StepResult:
    """One observation returned to the agent."""

    observation: str
    exit_code: int = 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"observation": self.observation, "exit_code": self.exit_code, "done": self.done}
