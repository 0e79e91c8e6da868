""":func:`parse_prediction`: reading the prediction object out of a model's text, and
repairing the usual damage (a lenient JSON reader).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

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


class _Truncated(Exception):
    pass


class _Lenient:
    """A forgiving reader of JSON-like text: single quotes, Python literals, bare words,
    trailing or missing commas, invalid escapes, and text cut off anywhere (everything
    open is closed)."""

    def __init__(self, text: str, start: int):
        self.s = text
        self.i = start
        self.repairs: list[str] = []

    def note(self, repair: str) -> None:
        if repair not in self.repairs:
            self.repairs.append(repair)

    def ws(self) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#" or (c == "/" and s.startswith("//", self.i)):
                end = s.find("\n", self.i)
                self.i = len(s) if end == -1 else end + 1
                self.note("comments removed")
            else:
                break

    def eof(self) -> bool:
        return self.i >= len(self.s)

    def value(self) -> Any:
        self.ws()
        if self.eof():
            raise _Truncated
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in "\"'":
            return self.string()
        if c in "-+0123456789.":
            return self.number()
        match = re.compile(r"[A-Za-z_][\w.]*").match(self.s, self.i)
        if match:
            word = match.group(0)
            self.i = match.end()
            if word in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[word]
            if word in ("True", "False", "None"):
                self.note("Python literals converted")
                return {"True": True, "False": False, "None": None}[word]
            self.note("bare words read as strings")
            return word
        raise ValueError(f"unexpected {c!r}")

    def obj(self) -> dict:
        self.i += 1
        out: dict[str, Any] = {}
        while True:
            self.ws()
            if self.eof():
                self.note("unterminated object closed")
                return out
            c = self.s[self.i]
            if c == "}":
                self.i += 1
                return out
            if c == ",":
                self.i += 1
                continue
            if c in "\"'":
                try:
                    key = self.string()
                except _Truncated:
                    self.note("unterminated object closed")
                    return out
            else:
                match = re.compile(r"[A-Za-z_][\w ]*?(?=\s*:)").match(self.s, self.i)
                if not match:
                    raise ValueError("bad key")
                key = match.group(0)
                self.i = match.end()
                self.note("unquoted keys quoted")
            self.ws()
            if self.eof():
                self.note("unterminated object closed")
                return out
            if self.s[self.i] in ":=":
                self.i += 1
            else:
                raise ValueError("missing colon")
            try:
                out[str(key)] = self.value()
            except _Truncated:
                self.note("unterminated object closed")
                return out
            self.ws()
            if self.eof():
                self.note("unterminated object closed")
                return out
            c = self.s[self.i]
            if c == ",":
                self.i += 1
                self.ws()
                if not self.eof() and self.s[self.i] == "}":
                    self.note("trailing commas removed")
            elif c == "}":
                continue
            else:
                self.note("missing commas added")

    def arr(self) -> list:
        self.i += 1
        out: list[Any] = []
        while True:
            self.ws()
            if self.eof():
                self.note("unterminated array closed")
                return out
            c = self.s[self.i]
            if c == "]":
                self.i += 1
                return out
            if c == ",":
                self.i += 1
                self.ws()
                if not self.eof() and self.s[self.i] == "]":
                    self.note("trailing commas removed")
                continue
            try:
                out.append(self.value())
            except _Truncated:
                self.note("unterminated array closed")
                return out

    def number(self) -> Any:
        match = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?").match(self.s, self.i)
        if not match:
            raise ValueError("bad number")
        self.i = match.end()
        text = match.group(0)
        try:
            return int(text)
        except ValueError:
            return float(text)

    def string(self) -> str:
        s = self.s
        quote = s[self.i]
        if quote == "'":
            self.note("single quotes converted")
        triple = s.startswith(quote * 3, self.i)
        self.i += 3 if triple else 1
        out: list[str] = []
        while True:
            if self.i >= len(s):
                self.note("unterminated string closed")
                return "".join(out)
            c = s[self.i]
            if triple and s.startswith(quote * 3, self.i):
                self.i += 3
                self.note("triple-quoted strings converted")
                return "".join(out)
            if not triple and c == quote:
                self.i += 1
                return "".join(out)
            if c == "\\":
                if self.i + 1 >= len(s):
                    self.i += 1
                    continue
                nxt = s[self.i + 1]
                simple = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/",
                          "\\": "\\", '"': '"', "'": "'", "0": "\0"}  # fmt: skip
                if nxt in simple:
                    out.append(simple[nxt])
                    self.i += 2
                    continue
                if nxt == "u":
                    hex_digits = s[self.i + 2 : self.i + 6]
                    if re.fullmatch(r"[0-9a-fA-F]{4}", hex_digits):
                        code = int(hex_digits, 16)
                        self.i += 6
                        if 0xD800 <= code < 0xDC00 and s.startswith("\\u", self.i):
                            low = s[self.i + 2 : self.i + 6]
                            if re.fullmatch(r"[0-9a-fA-F]{4}", low) and (
                                0xDC00 <= int(low, 16) < 0xE000
                            ):
                                code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                                self.i += 6
                        out.append(chr(code))
                        continue
                if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", s[self.i + 2 : self.i + 4]):
                    out.append(chr(int(s[self.i + 2 : self.i + 4], 16)))
                    self.i += 4
                    self.note("invalid escapes kept")
                    continue
                if nxt == "\n":
                    self.i += 2
                    continue
                self.note("invalid escapes kept")
                out.append("\\" + nxt)
                self.i += 2
                continue
            if c in "\n\r\t" and not triple:
                self.note("raw control characters in strings kept")
            out.append(c)
            self.i += 1


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def _candidates(text: str) -> list[tuple[int, int | None]]:
    """(start, end) spans to look for the object in: fenced blocks first (json ones before
    others), then the whole text."""
    spans: list[tuple[int, int | None, int]] = []
    for match in _FENCE.finditer(text):
        lang = match.group(1).lower()
        rank = 0 if lang in ("json", "json5", "javascript", "js") else 1
        spans.append((match.start(2), match.end(2), rank))
    spans.sort(key=lambda s: s[2])
    return [(a, b) for a, b, _ in spans] + [(0, None)]


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
    reader = _Lenient(chunk, 0)
    try:
        value = reader.value()
    except (ValueError, _Truncated, RecursionError):
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
    for start, end in _candidates(text):
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
