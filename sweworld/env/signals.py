"""Dense per-step signals: a step penalty and the change in the task's tests seen passing.

Pure functions. A step's observation is read with the task repository's test-log parser
(the same one that grades real runs); the latest status seen for each of the task's
FAIL_TO_PASS and PASS_TO_PASS tests is kept, and the signal is the change in the fraction
of them passing. Under a simulated executor the statuses are the world model's predictions:
the signal is a shaping hint, never the final reward, which comes only from the reward
backend on the patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.grading import test_passed
from sweworld.execution.log_parsers import parse_log

__all__ = ["TestTracker", "dense_signal"]

#: Observations longer than this are not parsed for test statuses (a bounded cost per step:
#: every log parser is linear in its input, adversarial output included).
MAX_PARSED_CHARS = 2_000_000


@dataclass
class TestTracker:
    """The latest status seen for each of a task's tests, and the fraction passing."""

    tests: tuple[str, ...]
    repo: str | None = None
    known: dict[str, str] = field(default_factory=dict)
    _index: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tests = tuple(self.tests)
        self._index = frozenset(self.tests)  # built once: update() stays linear in its input

    @classmethod
    def for_task(cls, task: Any) -> TestTracker:
        tests = [*getattr(task, "FAIL_TO_PASS", []), *getattr(task, "PASS_TO_PASS", [])]
        return cls(tests=tuple(dict.fromkeys(str(t) for t in tests)), repo=task.repo)

    def passing(self) -> float:
        """Fraction of the task's tests whose latest status seen is a pass (0 when none)."""
        if not self.tests:
            return 0.0
        return sum(test_passed(t, self.known) for t in self.tests) / len(self.tests)

    def update(self, output: str) -> tuple[float, dict[str, list[str]]]:
        """Read a step's output; ``(change in the passing fraction, {fixed, broken})``."""
        if not self.tests or not output or len(output) > MAX_PARSED_CHARS:
            return 0.0, {"fixed": [], "broken": []}
        statuses = parse_log(output, self.repo)
        relevant = {t: s for t, s in statuses.items() if t in self._index}
        if not relevant:
            return 0.0, {"fixed": [], "broken": []}
        before = self.passing()
        was = {t: test_passed(t, self.known) for t in relevant}
        self.known.update(relevant)
        now = {t: test_passed(t, self.known) for t in relevant}
        fixed = sorted(t for t in relevant if now[t] and not was[t])
        broken = sorted(t for t in relevant if was[t] and not now[t])
        return self.passing() - before, {"fixed": fixed, "broken": broken}


def dense_signal(delta_passing: float, *, step_penalty: float, test_weight: float) -> float:
    """The shaped reward of one step: ``test_weight * delta_passing - step_penalty``."""
    return test_weight * delta_passing - step_penalty


def signals_info(
    tracker: TestTracker, delta: float, changes: Mapping[str, list[str]], value: float
) -> dict[str, Any]:
    """What a step's ``info["signals"]`` holds."""
    return {
        "dense": value,
        "tests_passing": tracker.passing(),
        "tests_delta": delta,
        "tests_fixed": list(changes.get("fixed", [])),
        "tests_broken": list(changes.get("broken", [])),
    }
