""":func:`parse_prediction`: reading the prediction object out of a model's text, and
repairing the usual damage (a lenient JSON reader).

Linear in the text: a text longer than :data:`MAX_ANSWER_CHARS` is refused before any
parsing, and the search for the object is bounded (:func:`~sweworld.models.json_text.find_object`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sweworld.models.json_text import HUGE_INT, MAX_INT_DIGITS, find_object
from sweworld.transition.types import Prediction
from sweworld.transition.validate.checks import MAX_OUTPUT_CHARS
from sweworld.transition.validate.pytest_output import parse_pytest_summary
from sweworld.transition.validate.records import EXCEPTION_LINE, last_line

#: Longest model answer :func:`parse_prediction` reads: an answer whose output alone is
#: over :data:`MAX_OUTPUT_CHARS` is refused by the checks anyway, so twice that (escapes,
#: prose) plus a margin is read and anything longer is refused unparsed.
MAX_ANSWER_CHARS = 2 * MAX_OUTPUT_CHARS + 50_000

# =========================================================================== parsing

_STDOUT_KEYS = ("stdout", "output", "out")
_STDERR_KEYS = ("stderr", "err")
_EXIT_KEYS = (
    "exit_code", "exitcode", "exitCode", "exit code", "returncode", "return_code",
    "returnCode", "exit_status", "exitstatus", "status_code",
)  # fmt: skip
_FIELD_KEYS = frozenset((*_STDOUT_KEYS, *_STDERR_KEYS, *_EXIT_KEYS))


def _field_dict(value: Any) -> dict | None:
    if isinstance(value, dict):
        if _FIELD_KEYS & set(value):
            return value
        for key in ("result", "prediction", "output", "response", "answer", "execution"):
            inner = value.get(key)
            if isinstance(inner, dict) and _FIELD_KEYS & set(inner):
                return inner
    if isinstance(value, list) and len(value) == 1:
        return _field_dict(value[0])
    return None


def _text_field(value: Any, name: str, repairs: list[str]) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        repairs.append(f"{name} given as a list of lines")
        if all(v.endswith("\n") for v in value):
            return "".join(value)
        return "\n".join(value) + ("\n" if value else "")
    repairs.append(f"{name} given as {type(value).__name__}")
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _infer_exit_code(stdout: str, stderr: str) -> int:
    tail = last_line(stderr) or ""
    if "Traceback (most recent call last)" in stderr or EXCEPTION_LINE.match(tail):
        return 1
    summary = parse_pytest_summary(stdout + stderr)
    if summary is not None and summary.bad:
        return 1
    return 0


def parse_prediction(text: str) -> tuple[Prediction | None, list[str]]:
    """Extract ``{stdout, stderr, exit_code[, reasoning]}`` from a model's text.

    Returns (the prediction or None when nothing usable is found, the repairs made, as
    short sentences). Leading prose and code fences are expected and not counted as
    repairs; anything that had to be fixed is (``unterminated string closed``,
    ``single quotes converted``, ``exit_code given as a string``, ...).
    """
    if isinstance(text, str) and len(text) > MAX_ANSWER_CHARS:
        return None, [f"answer of {len(text)} characters refused (more than {MAX_ANSWER_CHARS})"]
    if not isinstance(text, str) or not text.strip():
        return None, ["empty text"]
    fields, repairs = find_object(text, _field_dict)
    if fields is None:
        return None, ["no JSON object with stdout / stderr / exit_code found"]
    repairs = list(repairs)
    lowered = {str(k).strip().lower(): v for k, v in fields.items()}

    def pick(keys: Sequence[str]) -> tuple[bool, Any, str]:
        for key in keys:
            if key.lower() in lowered:
                return True, lowered[key.lower()], key
        return False, None, ""

    has_out, out_value, out_key = pick(_STDOUT_KEYS)
    _, err_value, _ = pick(_STDERR_KEYS)
    has_code, code_value, code_key = pick(_EXIT_KEYS)
    if has_out and out_key != "stdout":
        repairs.append(f"{out_key!r} read as stdout")
    if has_code and code_key != "exit_code":
        repairs.append(f"{code_key!r} read as exit_code")
    stdout = _text_field(out_value, "stdout", repairs)
    stderr = _text_field(err_value, "stderr", repairs)
    exit_code = _exit_code(code_value, repairs) if has_code else None
    if exit_code is None:
        exit_code = _infer_exit_code(stdout, stderr)
        repairs.append(f"exit_code {'unreadable' if has_code else 'missing'}: inferred {exit_code}")
    reasoning = lowered.get("reasoning", lowered.get("thought", ""))
    reasoning = reasoning if isinstance(reasoning, str) else json.dumps(reasoning)
    return Prediction(stdout=stdout, stderr=stderr, exit_code=exit_code, reasoning=reasoning), (
        repairs
    )


_LEADING_INT = re.compile(r"\s*([-+]?)(\d+)")


def _exit_code(value: Any, repairs: list[str]) -> int | None:
    """The exit code written as ``value`` (None when unreadable). Never converts more than
    :data:`MAX_INT_DIGITS` digits (a longer number is clamped to :data:`HUGE_INT`, outside
    0..255, so the checks reject it): Python refuses to convert over 4,300 digits."""
    if isinstance(value, bool):
        repairs.append("exit_code given as a boolean")
        return int(value)
    if isinstance(value, int):
        if abs(value) >= HUGE_INT:
            repairs.append("exit_code too large: clamped")
            return HUGE_INT if value > 0 else -HUGE_INT
        return value
    if isinstance(value, float):
        if value in (float("inf"), float("-inf")):
            repairs.append("exit_code too large: clamped")
            return HUGE_INT if value > 0 else -HUGE_INT
        if value.is_integer():
            repairs.append("exit_code given as a float")
            return int(max(-HUGE_INT, min(HUGE_INT, value)))
        return None
    if not isinstance(value, str):
        return None
    match = _LEADING_INT.match(value)  # anchored, no nested quantifier: linear
    if match is None:
        return None
    whole = not value[match.end() :].strip()
    repairs.append("exit_code given as a string" if whole else "exit_code given as text")
    sign, digits = match.group(1), match.group(2).lstrip("0") or "0"
    if len(digits) > MAX_INT_DIGITS:
        repairs.append(f"exit_code of {len(digits)} digits clamped")
        return -HUGE_INT if sign == "-" else HUGE_INT
    return int(sign + digits)
