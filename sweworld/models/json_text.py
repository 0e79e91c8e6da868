"""Reading a JSON object out of a language model's free text: fenced blocks first, then a
lenient reader that repairs the usual damage (single quotes, trailing commas, raw control
characters, unterminated output). Shared by SWT's and SWR's output parsers.
"""

from __future__ import annotations

import re
from typing import Any


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
                except TruncatedJSON:
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


FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def json_spans(text: str) -> list[tuple[int, int | None]]:
    """(start, end) spans to look for the object in: fenced blocks first (json ones before
    others), then the whole text."""
    spans: list[tuple[int, int | None, int]] = []
    for match in FENCE.finditer(text):
        lang = match.group(1).lower()
        rank = 0 if lang in ("json", "json5", "javascript", "js") else 1
        spans.append((match.start(2), match.end(2), rank))
    spans.sort(key=lambda s: s[2])
    return [(a, b) for a, b, _ in spans] + [(0, None)]
