"""Small text helpers: slugs, truncation and word wrapping."""

from __future__ import annotations

import re
import unicodedata

_WHITESPACE_RE = re.compile(r"\s+")


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace to one space and strip both ends."""
    return _WHITESPACE_RE.sub(" ", text).strip()


def slugify(text: str, separator: str = "-") -> str:
    """Turn ``text`` into a lowercase ASCII slug for URLs and file names.

    Accents are removed and everything that is not a letter or a digit
    becomes ``separator``:

    >>> slugify("Crème Brûlée")
    'creme-brulee'
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())


def truncate(text: str, width: int, placeholder: str = "...") -> str:
    """Shorten ``text`` to at most ``width`` characters.

    When the text is too long it is cut and ``placeholder`` is appended; the
    result, placeholder included, is never longer than ``width``.
    """
    if width < len(placeholder):
        raise ValueError(f"width {width} is smaller than the placeholder {placeholder!r}")
    if len(text) <= width:
        return text
    return text[: width - len(placeholder)].rstrip() + placeholder


def wrap(text: str, width: int) -> list[str]:
    """Wrap ``text`` into lines of at most ``width`` characters.

    Whitespace is normalised first; words longer than ``width`` are split.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines: list[str] = []
    current = ""
    for word in normalize_whitespace(text).split(" "):
        if not word:
            continue
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = f"{current} {word}"
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
