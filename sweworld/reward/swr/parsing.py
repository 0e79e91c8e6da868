""":func:`parse_swr_output`: the SWR report read out of a model's text, repaired where it can be.

The JSON object is found and repaired with the shared lenient reader
(:mod:`sweworld.models.json_text`: code fences, prose around it, single quotes,
Python literals, trailing commas, text cut off anywhere). On top of that, the report's own
leniency: statuses in any case and their usual synonyms (``pass``, ``ok``, ``fail``...),
tests given as a mapping, a list of objects or of pairs, or SWE-bench's ``tests_status``
shape; ``resolved`` as a boolean, 0/1 (the anchor's ``reward``) or a word. Never raises:
unreadable text gives a report whose ``error`` says why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sweworld.models.json_text import find_object
from sweworld.models.text import valid_text

__all__ = ["MAX_REPORT_CHARS", "STATUSES", "ParsedReport", "normalize_status", "parse_swr_output"]

#: Longest model answer :func:`parse_swr_output` reads (a report for thousands of tests fits
#: many times over); a longer one is refused unparsed, so parsing stays bounded.
MAX_REPORT_CHARS = 1_000_000

#: What a report may say of a test (the four the prompt asks for, and pytest's xfail/xpass).
STATUSES: tuple[str, ...] = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")

_SYNONYMS = {
    **dict.fromkeys(
        ("passed", "pass", "passes", "passing", "ok", "success", "succeeded", "successful",
         "true", "yes", "1", "good", "green"),
        "PASSED",
    ),
    **dict.fromkeys(
        ("failed", "fail", "fails", "failing", "failure", "false", "no", "0", "broken", "red"),
        "FAILED",
    ),
    **dict.fromkeys(
        ("error", "errored", "errors", "err", "exception", "crash", "crashed"), "ERROR"
    ),
    **dict.fromkeys(("skipped", "skip", "skips", "ignored", "deselected"), "SKIPPED"),
    **dict.fromkeys(("xfail", "xfailed", "expected failure"), "XFAIL"),
    **dict.fromkeys(("xpass", "xpassed", "unexpected success"), "XPASS"),
}  # fmt: skip
_TESTS_KEYS = ("tests", "test_report", "tests_status", "test_status", "test_results", "report",
               "results", "statuses", "status")  # fmt: skip
_RESOLVED_KEYS = ("resolved", "reward", "is_resolved", "resolves", "resolution")
_WRAPPERS = ("result", "answer", "output", "response", "prediction", "verdict")
_NAME_KEYS = ("test", "name", "id", "nodeid", "test_id", "test_name")
_STATUS_KEYS = ("status", "outcome", "result", "state")
_TRUE_WORDS = frozenset({"true", "yes", "1", "resolved", "resolved_full", "pass", "passed"})
_FALSE_WORDS = frozenset(
    {"false", "no", "0", "unresolved", "not resolved", "resolved_no", "resolved_partial", "fail"}
)


def normalize_status(value: Any) -> str | None:
    """``PASSED`` / ``FAILED`` / ``ERROR`` / ``SKIPPED`` / ``XFAIL`` / ``XPASS`` for a status
    written any way (``"pass"``, ``"Ok"``, ``True``, ``{"status": "failed"}``), or None."""
    if isinstance(value, bool):
        return "PASSED" if value else "FAILED"
    if isinstance(value, Mapping):
        for key in _STATUS_KEYS:
            if key in value:
                return normalize_status(value[key])
        return None
    if not isinstance(value, str):
        return None
    text = value.strip().strip(".,;:!*`'\"()[]").strip().lower()
    if text.upper() in STATUSES:
        return text.upper()
    if text in _SYNONYMS:
        return _SYNONYMS[text]
    first = re.split(r"[\s(:,\-]", text, maxsplit=1)[0]
    return _SYNONYMS.get(first) if first else None


@dataclass
class ParsedReport:
    """What a model's report says.

    Attributes:
        tests: test id -> status (:data:`STATUSES`). With ``expected_tests``, only expected
            ids (reported ids matched to them); without, every readable id.
        resolved: the model's ``resolved`` (None when missing or unreadable).
        reasoning: the ``reasoning`` field, when present.
        unknown_tests: reported ids that match no expected test (ignored).
        missing_tests: expected ids the report does not give a readable status for.
        invalid: reported id -> the status that could not be read (ignored).
        repairs: what was fixed while reading (short sentences).
        error: why no report could be read (then every other field is empty).
    """

    tests: dict[str, str] = field(default_factory=dict)
    resolved: bool | None = None
    reasoning: str = ""
    unknown_tests: list[str] = field(default_factory=list)
    missing_tests: list[str] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """A report was read (``error`` is None)."""
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lower_keys(value: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k).strip().lower(): v for k, v in value.items()}


def _report_dict(value: Any, depth: int = 0) -> dict[str, Any] | None:
    """The mapping holding the report's fields (the value itself or one wrapper down)."""
    if isinstance(value, list) and len(value) == 1:
        return _report_dict(value[0], depth)
    if not isinstance(value, Mapping):
        return None
    lowered = _lower_keys(value)
    if any(k in lowered for k in (*_TESTS_KEYS, *_RESOLVED_KEYS)):
        return lowered
    if depth == 0:
        for key in _WRAPPERS:
            inner = _report_dict(lowered.get(key), 1)
            if inner is not None:
                return inner
    return None


def _decode(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The first report object in ``text`` (fenced blocks first), strict JSON before the
    lenient reader; linear in the text (see :func:`~sweworld.models.json_text.find_object`)."""
    return find_object(text, _report_dict, strict_first=False)


def _line_entry(line: str) -> tuple[str, Any] | None:
    """``"PASSED t.py::x"``, ``"t.py::x PASSED"`` or ``"t.py::x: PASSED"`` -> (id, status)."""
    parts = line.strip().split()
    if len(parts) < 2:
        return None
    if normalize_status(parts[0]) is not None:
        return " ".join(parts[1:]), parts[0]
    if normalize_status(parts[-1]) is not None:
        return " ".join(parts[:-1]).rstrip(":").strip(), parts[-1]
    return None


def _entries(value: Any, repairs: list[str]) -> list[tuple[str, Any]]:
    """(reported id, raw status) pairs from the ``tests`` value, whatever its shape."""
    if isinstance(value, Mapping):
        lowered = _lower_keys(value)
        if "fail_to_pass" in lowered or "pass_to_pass" in lowered:
            repairs.append("tests given as tests_status")
            out: list[tuple[str, Any]] = []
            for part in value.values():
                if isinstance(part, Mapping):
                    out += [(str(t), "PASSED") for t in part.get("success", ()) or ()]
                    out += [(str(t), "FAILED") for t in part.get("failure", ()) or ()]
            return out
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, Mapping):
                lowered = _lower_keys(item)
                name = next((lowered[k] for k in _NAME_KEYS if k in lowered), None)
                if name is not None:
                    out.append((str(name), item))
                elif len(item) == 1:
                    ((key, status),) = item.items()
                    out.append((str(key), status))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                out.append((str(item[0]), item[1]))
            elif isinstance(item, str) and (entry := _line_entry(item)) is not None:
                out.append(entry)
        if value:
            repairs.append("tests given as a list")
        return out
    if isinstance(value, str):
        lines = [e for e in (_line_entry(line) for line in value.splitlines()) if e is not None]
        if lines:
            repairs.append("tests given as text lines")
        return lines
    return []


def _resolved(value: Any, repairs: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        repairs.append("resolved given as a number")
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".!").lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            repairs.append("resolved given as a string")
            return word in _TRUE_WORDS
    return None


class _Matcher:
    """Maps reported ids to expected ones: exact, then whitespace-stripped, then the unique
    expected id ending with the reported one at a ``::`` or ``/`` boundary (or the reverse,
    for absolute paths)."""

    def __init__(self, expected: Sequence[str]):
        self.expected = list(dict.fromkeys(expected))
        self.exact = set(self.expected)
        self.stripped = {e.strip(): e for e in self.expected}
        # every tail of an expected id after a "::" or "/" -> the ids with that tail, so that
        # a reported id is matched in time linear in its length, not in the number of
        # expected ids (a report of 20,000 ids took seconds, quadratically)
        self.tails: dict[str, list[str]] = {}
        for e in self.expected:
            for tail in _tails(e, len(e)):
                self.tails.setdefault(tail, []).append(e)
        self.longest = max((len(e) for e in self.expected), default=0)

    def __call__(self, name: str) -> str | None:
        if name in self.exact:
            return name
        key = name.strip()
        if key in self.stripped:
            return self.stripped[key]
        if not key:
            return None
        hits = dict.fromkeys(self.tails.get(key, ()))  # expected ids ending with ::key or /key
        # the reverse: the key ends with "/" or "::" and an expected id (only the key's last
        # characters can hold one, so a long key costs no more than the longest id)
        hits.update(dict.fromkeys(t for t in _tails(key, self.longest) if t in self.exact))
        return next(iter(hits)) if len(hits) == 1 else None


def _tails(text: str, longest: int) -> list[str]:
    """The tails of ``text`` that follow a ``::`` or a ``/`` and are at most ``longest``
    characters long."""
    out = []
    start = max(0, len(text) - longest - 2)
    for sep in ("::", "/"):
        at = text.find(sep, start)
        while at >= 0:
            tail = text[at + len(sep) :]
            if len(tail) <= longest:
                out.append(tail)
            at = text.find(sep, at + 1)
    return out


def parse_swr_output(text: Any, *, expected_tests: Iterable[str] | None = None) -> ParsedReport:
    """Read ``{"tests": {...}, "resolved": ...}`` (optionally with ``reasoning``) out of a
    model's text; see the module docstring for what is accepted.

    ``expected_tests``: the test ids the prompt listed; reported ids are matched to them
    (others go to ``unknown_tests``) and those without a readable status are listed in
    ``missing_tests``. None (blind mode) keeps every readable id. A text with no report
    object, or one whose object gives neither a test status nor ``resolved``, gives a
    report with ``error`` set; nothing raises.
    """
    if not isinstance(text, str) or not text.strip():
        return ParsedReport(error="empty output")
    if len(text) > MAX_REPORT_CHARS:
        return ParsedReport(error=f"output of {len(text)} characters refused (more than "
                            f"{MAX_REPORT_CHARS})")  # fmt: skip
    text = valid_text(text)
    try:
        fields, repairs = _decode(text)
    except Exception as exc:  # the lenient reader must never take the stage down
        return ParsedReport(error=f"unreadable output ({type(exc).__name__})")
    if fields is None:
        return ParsedReport(error="no JSON report with tests / resolved found")
    repairs = list(repairs)
    nested = fields.get("tests")
    if isinstance(nested, Mapping) and "tests" in _lower_keys(nested):
        fields = {**fields, **_lower_keys(nested)}  # the report's start written twice
        repairs.append("nested report unwrapped")
    tests_key = next((k for k in _TESTS_KEYS if k in fields), None)
    if tests_key is not None and tests_key != "tests":
        repairs.append(f"{tests_key!r} read as tests")
    entries = _entries(fields.get(tests_key), repairs) if tests_key else []
    matcher = _Matcher(list(expected_tests)) if expected_tests is not None else None
    tests: dict[str, str] = {}
    unknown: dict[str, None] = {}  # an ordered set: a list's ``in`` made this quadratic
    invalid: dict[str, str] = {}
    completed = False
    for name, raw in entries:
        status = normalize_status(raw)
        target = name.strip() if matcher is None else matcher(name)
        if target is None:
            unknown[name] = None
            continue
        if target != name:
            completed = True
        if status is None:
            invalid[name] = raw if isinstance(raw, str) else json.dumps(raw, default=str)
            continue
        tests[target] = status
    if completed:
        repairs.append("test ids matched to the listed ones")
    if invalid:
        repairs.append("unreadable statuses ignored")
    resolved_key = next((k for k in _RESOLVED_KEYS if k in fields), None)
    resolved = _resolved(fields[resolved_key], repairs) if resolved_key else None
    if resolved_key not in (None, "resolved"):
        repairs.append(f"{resolved_key!r} read as resolved")
    if resolved is None:
        repairs.append("resolved unreadable" if resolved_key else "resolved missing")
    if not tests and not unknown and resolved is None:
        return ParsedReport(
            invalid=invalid, repairs=repairs, error="the report gives no test status nor resolved"
        )
    reasoning = fields.get("reasoning", fields.get("thought", ""))
    missing = [t for t in matcher.expected if t not in tests] if matcher is not None else []
    return ParsedReport(
        tests=tests,
        resolved=resolved,
        reasoning=reasoning if isinstance(reasoning, str) else json.dumps(reasoning),
        unknown_tests=list(unknown),
        missing_tests=missing,
        invalid=invalid,
        repairs=repairs,
    )
