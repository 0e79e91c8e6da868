"""Text that can cross any boundary: valid Unicode that encodes to UTF-8.

Python strings may hold lone surrogates (``"\\ud800"``): a model's JSON answer with a
``\\ud800`` escape decodes to one, and the first ``.encode("utf-8")`` downstream (a
tokenizer, an HTTP body, a log file, a terminal) raises ``UnicodeEncodeError``.
:func:`valid_text` is applied to whatever leaves the LM backends, the parsers and the
simulated executor, and to every prompt before it reaches a backend.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with surrogate pairs joined into their character and lone surrogates
    replaced by U+FFFD; the same object when it is already valid (the common case costs
    one ``encode``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return _SURROGATE.sub("\ufffd", joined)


def valid_messages(messages: Any) -> Any:
    """Chat messages with every string content made :func:`valid_text` (other values and
    keys are kept as they are)."""
    out = []
    for message in messages:
        if isinstance(message, Mapping):
            message = {
                key: valid_text(value) if isinstance(value, str) else value
                for key, value in message.items()
            }
        out.append(message)
    return out


def valid_value(value: Any) -> tuple[Any, bool]:
    """A decoded JSON value with every string (keys included) made :func:`valid_text`, and
    whether anything changed (containers are rebuilt only then)."""
    if isinstance(value, str):
        clean = valid_text(value)
        return clean, clean is not value
    if isinstance(value, list):
        items = [valid_value(v) for v in value]
        if any(changed for _, changed in items):
            return [v for v, _ in items], True
        return value, False
    if isinstance(value, dict):
        pairs = [(valid_value(k), valid_value(v)) for k, v in value.items()]
        if any(kc or vc for (_, kc), (_, vc) in pairs):
            return {k: v for (k, _), (v, _) in pairs}, True
        return value, False
    return value, False
