"""Reading a JSON object out of a language model's free text: fenced blocks first, then a
lenient reader that repairs the usual damage (single quotes, trailing commas, raw control
characters, unterminated output). Shared by SWT's and SWR's output parsers.

Everything here runs in time linear in the text (no regular expression that can backtrack
over the whole input; a budget on how much the lenient reader may read in all), so that no
model answer can stall the process: :func:`find_object` is the entry point.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sweworld.models.text import valid_value

T = TypeVar("T")

#: Integers longer than this are not converted (Python refuses above 4,300 digits, and no
#: field a model writes needs more): they become :data:`HUGE_INT` with their sign.
MAX_INT_DIGITS = 30
#: What an integer literal longer than :data:`MAX_INT_DIGITS` digits is read as.
HUGE_INT = 2**63 - 1

_WORD = re.compile(r"[A-Za-z_][\w.]*")
_KEY = re.compile(r"[A-Za-z_][\w ]*")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_HEX2 = re.compile(r"[0-9a-fA-F]{2}")


def bounded_int(text: str) -> int:
    """``int(text)`` for an optionally signed run of digits, clamped to +-:data:`HUGE_INT`
    when it has more than :data:`MAX_INT_DIGITS` digits (never Python's digit-limit error)."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    digits = body.lstrip("+-").lstrip("0") or "0"
    if len(digits) > MAX_INT_DIGITS:
        return sign * HUGE_INT
    return sign * int(digits)


class TruncatedJSON(Exception):
    pass


class LenientJSONReader:
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
            raise TruncatedJSON
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in "\"'":
            return self.string()
        if c in "-+0123456789.":
            return self.number()
        match = _WORD.match(self.s, self.i)
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
                except TruncatedJSON:
                    self.note("unterminated object closed")
                    return out
            else:
                # A bare key: word characters and spaces up to the colon (greedy, then the
                # spaces before the colon dropped: linear, unlike a lazy match + lookahead).
                match = _KEY.match(self.s, self.i)
                if not match:
                    raise ValueError("bad key")
                key = match.group(0).rstrip(" ")
                self.i = match.start() + len(key)
                after = self.i
                while after < len(self.s) and self.s[after].isspace():
                    after += 1
                if after >= len(self.s) or self.s[after] != ":":
                    raise ValueError("bad key")
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
            except TruncatedJSON:
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
            except TruncatedJSON:
                self.note("unterminated array closed")
                return out

    def number(self) -> Any:
        match = _NUMBER.match(self.s, self.i)
        if not match:
            raise ValueError("bad number")
        self.i = match.end()
        text = match.group(0)
        if match.group(1).isdigit() and not match.group(2):
            return bounded_int(text)
        try:
            return float(text)
        except ValueError as exc:  # e.g. "1." followed by nothing is fine; guard the rest
            raise ValueError("bad number") from exc

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
                    if _HEX4.fullmatch(hex_digits):
                        code = int(hex_digits, 16)
                        self.i += 6
                        if 0xD800 <= code < 0xDC00 and s.startswith("\\u", self.i):
                            low = s[self.i + 2 : self.i + 6]
                            if _HEX4.fullmatch(low) and (0xDC00 <= int(low, 16) < 0xE000):
                                code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                                self.i += 6
                        out.append(chr(code))
                        continue
                if nxt == "x" and _HEX2.fullmatch(s[self.i + 2 : self.i + 4]):
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


def _lang_char(char: str) -> bool:
    return (char.isascii() and char.isalnum()) or char in "_+-"


def fenced_blocks(text: str) -> Iterator[tuple[str, int, int]]:
    """(language, start, end) of each fenced block of ``text``: a line opened by three
    backticks (the language is the word after them), the content from the next line to the
    next three backticks or to the end. One pass with ``str.find`` (linear; a regular
    expression for this backtracks quadratically on a long run of backticks)."""
    pos = 0
    while True:
        opening = text.find("```", pos)
        if opening < 0:
            return
        newline = text.find("\n", opening + 3)
        if newline < 0:
            return  # no line follows this fence, nor any later one on the same line
        info = text[opening + 3 : newline].lstrip(" \t")
        length = 0
        while length < len(info) and _lang_char(info[length]):
            length += 1
        start = newline + 1
        closing = text.find("```", start)
        end = len(text) if closing < 0 else closing
        yield info[:length], start, end
        if closing < 0:
            return
        pos = closing + 3


def json_spans(text: str) -> list[tuple[int, int | None]]:
    """(start, end) spans to look for the object in: fenced blocks first (json ones before
    others), then the whole text."""
    spans: list[tuple[int, int | None, int]] = []
    for lang, start, end in fenced_blocks(text):
        rank = 0 if lang.lower() in ("json", "json5", "javascript", "js") else 1
        spans.append((start, end, rank))
    spans.sort(key=lambda s: s[2])
    return [(a, b) for a, b, _ in spans] + [(0, None)]


#: Candidate ``{`` positions tried per span.
MAX_STARTS = 64

#: Deepest nesting of a value :func:`find_object` hands on: no answer a model writes needs
#: more, and a deeper one (still under the decoder's recursion limit) would make any
#: recursive walk downstream (the text cleaning, ``json.dumps``) raise ``RecursionError``.
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists / dicts more than ``limit`` levels (iterative, linear)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def find_object(
    text: str, accept: Callable[[Any], T | None], *, strict_first: bool = True
) -> tuple[T | None, list[str]]:
    """The first JSON value in ``text`` that ``accept`` turns into something (not None),
    with the repairs made to read it.

    Spans are searched in :func:`json_spans` order; in each, up to :data:`MAX_STARTS` ``{``
    positions. At each, strict JSON first (``strict_first``; C speed), then the lenient
    reader. The lenient reader's total reading is bounded by a budget of a few times the
    text's length, so the whole search is linear in ``len(text)``. A value nested deeper
    than :data:`MAX_DEPTH` is passed over. Strings of the value are made valid (lone
    surrogates from ``\\ud800`` escapes replaced, noted as a repair).
    """
    budget = 4 * len(text) + 65_536
    decoders = [json.JSONDecoder(parse_int=bounded_int)] if strict_first else []
    decoders.append(json.JSONDecoder(strict=False, parse_int=bounded_int))
    for start, end in json_spans(text):
        region = text[start:end] if end is not None else text  # spans are disjoint
        position = region.find("{")
        tried = 0
        while position >= 0 and tried < MAX_STARTS and budget > 0:
            tried += 1
            for index, decoder in enumerate(decoders):
                try:
                    value, used = decoder.raw_decode(region, position)
                except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
                    continue
                if too_deep(value):
                    break
                value, changed = valid_value(value)
                found = accept(value)
                if found is None:
                    break
                repairs = ["lone surrogates replaced"] if changed else []
                if strict_first and index:
                    repairs.append("raw control characters in strings kept")
                if region[used:].strip():
                    repairs.append("text after the object ignored")
                return found, repairs
            reader = LenientJSONReader(region, position)
            try:
                value = reader.value()
            except (ValueError, TruncatedJSON, RecursionError):
                value = None
            budget -= max(reader.i - position, 1)
            if too_deep(value):
                value = None
            value, changed = valid_value(value)
            found = accept(value) if value is not None else None
            if found is not None:
                if changed:
                    reader.note("lone surrogates replaced")
                if region[reader.i :].strip():
                    reader.note("text after the object ignored")
                return found, list(reader.repairs)
            position = region.find("{", position + 1)
    return None, []
