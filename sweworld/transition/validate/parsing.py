""":func:`parse_prediction`: reading the prediction object out of a model's text, and
repairing the usual damage (a lenient JSON reader).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sweworld.models.json_text import LenientJSONReader, TruncatedJSON, json_spans
from sweworld.transition.types import Prediction
from sweworld.transition.validate.checks import _EXCEPTION_LINE, _last_line
from sweworld.transition.validate.pytest_output import parse_pytest_summary

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


def _decode_at(text: str, start: int, end: int | None) -> tuple[dict | None, list[str]]:
    """Read the object starting at ``start``: strict JSON first, then the lenient reader."""
    chunk = text[start:end] if end is not None else text[start:]
    for strict in (True, False):
        try:
            value, used = json.JSONDecoder(strict=strict).raw_decode(chunk)
        except (json.JSONDecodeError, RecursionError):
            continue
        fields = _field_dict(value)
        if fields is None:
            break
        repairs = [] if strict else ["raw control characters in strings kept"]
        if chunk[used:].strip():
            repairs.append("text after the object ignored")
        return fields, repairs
    reader = LenientJSONReader(chunk, 0)
    try:
        value = reader.value()
    except (ValueError, TruncatedJSON, RecursionError):
        return None, []
    fields = _field_dict(value)
    if fields is None:
        return None, []
    if chunk[reader.i :].strip():
        reader.note("text after the object ignored")
    return fields, reader.repairs


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
    tail = _last_line(stderr) or ""
    if "Traceback (most recent call last)" in stderr or _EXCEPTION_LINE.match(tail):
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
    if not isinstance(text, str) or not text.strip():
        return None, ["empty text"]
    fields: dict | None = None
    repairs: list[str] = []
    for start, end in json_spans(text):
        region_end = end if end is not None else len(text)
        positions = [m.start() for m in re.finditer(r"\{", text[start:region_end])][:64]
        for offset in positions:
            fields, repairs = _decode_at(text, start + offset, end)
            if fields is not None:
                break
        if fields is not None:
            break
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
    exit_code: int | None = None
    if has_code:
        if isinstance(code_value, bool):
            exit_code = int(code_value)
            repairs.append("exit_code given as a boolean")
        elif isinstance(code_value, int):
            exit_code = code_value
        elif isinstance(code_value, float) and code_value.is_integer():
            exit_code = int(code_value)
            repairs.append("exit_code given as a float")
        elif isinstance(code_value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", code_value):
            exit_code = int(code_value)
            repairs.append("exit_code given as a string")
        elif isinstance(code_value, str) and re.match(r"\s*[-+]?\d+", code_value):
            exit_code = int(re.match(r"\s*([-+]?\d+)", code_value).group(1))  # type: ignore[union-attr]
            repairs.append("exit_code given as text")
    if exit_code is None:
        exit_code = _infer_exit_code(stdout, stderr)
        repairs.append(f"exit_code {'unreadable' if has_code else 'missing'}: inferred {exit_code}")
    reasoning = lowered.get("reasoning", lowered.get("thought", ""))
    reasoning = reasoning if isinstance(reasoning, str) else json.dumps(reasoning)
    return Prediction(stdout=stdout, stderr=stderr, exit_code=exit_code, reasoning=reasoning), (
        repairs
    )
