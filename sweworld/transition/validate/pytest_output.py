"""Reading pytest's output: the final summary line (:func:`parse_pytest_summary`) and the test
ids it names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# =========================================================================== pytest output

_SUMMARY_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "error",
    "errors": "error",
    "skipped": "skipped",
    "deselected": "deselected",
    "xfailed": "xfailed",
    "xpassed": "xpassed",
    "warning": "warnings",
    "warnings": "warnings",
    "rerun": "rerun",
    "reruns": "rerun",
}
_SUMMARY_LINE = re.compile(
    r"^(?:=+ )?(?P<body>(?:no tests ran|no tests collected[^=]*?|(?:\d+ [\w ]+?)(?:, \d+ [\w ]+?)*)"
    r"(?: \(\d+ deselected\))?) in [\d.]+ ?(?:s|seconds)(?: \([\d:.]+\))?(?: =+)?$"
)
_COLLECTED_LINE = re.compile(
    r"^(?:collecting \.\.\. )?collected (\d+) items?(?: / (\d+) errors?)?(?: / (\d+) deselected)?"
    r"(?: / (\d+) skipped)?(?: / (\d+) selected)?"
)


@dataclass(frozen=True)
class PytestSummary:
    """pytest's final line (``== 2 failed, 3 passed in 0.1s ==``) and collected line."""

    counts: dict[str, int]
    no_tests: bool
    collected: int | None
    collected_deselected: int | None
    line: str

    @property
    def ran(self) -> int:
        """Tests that ran to an outcome (errors excluded: setup and teardown errors are
        counted beside the outcome, collection errors instead of items)."""
        return sum(self.counts.get(k, 0) for k in ("passed", "failed", "skipped", "xfailed",
                                                       "xpassed"))  # fmt: skip

    @property
    def bad(self) -> int:
        return self.counts.get("failed", 0) + self.counts.get("error", 0)


def parse_pytest_summary(text: str) -> PytestSummary | None:
    """The last pytest summary line of ``text`` (None when there is none)."""
    lines = text.splitlines()
    found = None
    for line in reversed(lines):
        stripped = line.strip()
        match = _SUMMARY_LINE.match(stripped)
        if match and ("=" in stripped or stripped == line.rstrip()):
            found = match
            break
    if found is None:
        return None
    body = found.group("body")
    counts: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) ([a-z]+(?: [a-z]+)?)", body):
        key = _SUMMARY_WORDS.get(word) or _SUMMARY_WORDS.get(word.split()[-1])
        if word.startswith("subtests"):
            continue
        if key:
            counts[key] = counts.get(key, 0) + int(number)
    collected = deselected_header = None
    for line in lines:  # the first one: later ones may come from pytest runs inside tests
        match = _COLLECTED_LINE.match(line.strip())
        if match:
            collected = int(match.group(1))
            deselected_header = int(match.group(3)) if match.group(3) else 0
            break
    return PytestSummary(
        counts=counts,
        no_tests=body.startswith("no tests"),
        collected=collected,
        collected_deselected=deselected_header,
        line=found.group(0),
    )


_OUTCOMES = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
_SHORT_LINE = re.compile(rf"^(?:\[gw\d+\] (?:\[\s*\d+%\] )?)?({_OUTCOMES}) (\S.*?)(?: - .*)?$")
_VERBOSE_LINE = re.compile(rf"^(\S.*?::\S.*?) ({_OUTCOMES})(?:\s|$)")


def _output_test_ids(text: str) -> list[str]:
    ids = []
    for line in text.splitlines():
        match = _SHORT_LINE.match(line)
        if match and "::" in match.group(2) and not match.group(2).startswith("["):
            ids.append(match.group(2).strip())
            continue
        match = _VERBOSE_LINE.match(line)
        if match:
            ids.append(match.group(1).strip())
    return ids


def _strip_params(nodeid: str) -> str:
    return re.sub(r"\[.*\]$", "", nodeid)
