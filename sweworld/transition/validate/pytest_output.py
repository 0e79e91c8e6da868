"""Reading pytest's output: the final summary line (:func:`parse_pytest_summary`) and the test
ids it names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IN = re.compile(" in ")
_COLLECTED_WORD = re.compile("collected ")

#: pytest's summary and collection lines are short; longer lines are not read as such (this
#: also bounds the patterns' work per line).
MAX_SUMMARY_LINE = 1_000


def lines_with(text: str, pattern: re.Pattern[str]) -> Iterator[str]:
    """The lines of ``text`` (as ``str.splitlines`` splits them) that contain a match of
    ``pattern``, in order, each once; one pass of ``pattern`` in C instead of a Python loop
    over every line (a text of 100,000 blank lines has no candidate at all)."""
    position = 0
    while True:
        match = pattern.search(text, position)
        if match is None:
            return
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        for line in text[start:end].splitlines():
            if pattern.search(line):
                yield line
        position = end + 1


def _summary_match(line: str) -> re.Match[str] | None:
    if len(line) > MAX_SUMMARY_LINE:
        return None
    if "\x1b" in line:  # a colored terminal
        line = _ANSI.sub("", line)
    stripped = line.strip()
    match = _SUMMARY_LINE.match(stripped)
    if match and ("=" in stripped or stripped == line.rstrip()):
        return match
    return None


def parse_pytest_summary(text: str) -> PytestSummary | None:
    """The last pytest summary line of ``text`` (None when there is none)."""
    found = None
    for line in lines_with(text, _IN):  # every summary line says " in <duration>"
        match = _summary_match(line)
        if match is not None:
            found = match
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
    # The first one: later ones may come from pytest runs inside tests.
    for line in lines_with(text, _COLLECTED_WORD):
        if len(line) > MAX_SUMMARY_LINE:
            continue
        if "\x1b" in line:
            line = _ANSI.sub("", line)
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
_COLONS = re.compile(r"::\S")
_OUTCOME_WORD = re.compile(_OUTCOMES)
_OUTCOME_AFTER = re.compile(rf" ({_OUTCOMES})(?:\s|$)")
#: Longer lines are not read as test result lines.
MAX_RESULT_LINE = 10_000


def _verbose_id(line: str) -> str | None:
    """The test id of a verbose result line (``t.py::test_x PASSED [ 50%]``): the text
    before the first `` OUTCOME`` that follows the first ``::`` followed by a non-space. The
    equivalent pattern ``^(\\S.*?::\\S.*?) (OUTCOME)`` is quadratic on a line of ``::``."""
    if not line or line[0].isspace():
        return None
    colons = _COLONS.search(line, 1)
    if colons is None:
        return None
    match = _OUTCOME_AFTER.search(line, colons.end())
    return line[: match.start()] if match else None


def output_test_ids(text: str) -> list[str]:
    """The test ids that pytest's result lines in ``text`` name (short ``-rA`` lines
    ``PASSED t.py::x`` and verbose lines ``t.py::x PASSED``), in order."""
    ids = []
    for line in lines_with(text, _OUTCOME_WORD):  # both forms name an outcome
        if len(line) > MAX_RESULT_LINE:
            continue
        match = _SHORT_LINE.match(line)
        if match and "::" in match.group(2) and not match.group(2).startswith("["):
            ids.append(match.group(2).strip())
            continue
        verbose = _verbose_id(line)
        if verbose is not None:
            ids.append(verbose.strip())
    return ids


def strip_params(nodeid: str) -> str:
    """``t.py::test_x[1-a]`` -> ``t.py::test_x`` (a node id without its parameters)."""
    if nodeid.endswith("]"):
        start = nodeid.find("[")
        if start >= 0:
            return nodeid[:start]
    return nodeid
