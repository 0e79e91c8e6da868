"""Small value types shared by the sandbox, its tools and the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
