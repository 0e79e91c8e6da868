"""Reading an OpenAI-compatible server's answers: token counts, first-token log-probabilities,
error messages, ``Retry-After`` and the room a context-length error leaves (used by
:mod:`sweworld.models.openai_lm`). Every reader is bounded: a server gone wrong cannot make
it raise or run long.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

CONTEXT_MARKERS = (
    "maximum context length",
    "context length",
    "context_length",
    "context window",
    "max_model_len",
    "prompt is too long",
    "input is too long",
    "too many tokens",
)
LIMIT_RE = re.compile(r"maximum context length is (\d{1,12})\b")
# ``(?<!\d)`` anchors the number at its first digit (a bare ``\d+`` search retries from every
# digit of a long run: quadratic); at most 12 digits are read (never int() of 4,300).
INPUT_RE = re.compile(
    r"(?<!\d)(\d{1,12}) (?:input tokens|(?:tokens? )?in the messages|prompt tokens)"
)


def token_count(value: Any) -> int:
    """A token count the server reported (0 when it is not a sane non-negative integer: a
    string, NaN, infinity or a number of thousands of digits never raises)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if 0 <= value < 2**63 else 0
    if isinstance(value, float) and math.isfinite(value) and 0 <= value < 2**63:
        return int(value)
    if isinstance(value, str) and value.isdigit() and len(value) <= 18:
        return int(value)
    return 0


def first_token_logprobs(data: dict[str, Any]) -> dict[str, float]:
    """``{token text: logprob}`` of the first generated position: the chosen token and its
    ``top_logprobs`` (chat format ``logprobs.content``, or the legacy completions format
    ``logprobs.top_logprobs``); empty when the answer has none."""
    choices = data.get("choices") or []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    logprobs = first.get("logprobs")
    out: dict[str, float] = {}

    def add(token: Any, value: Any) -> None:
        if isinstance(token, str) and isinstance(value, (int, float)) and math.isfinite(value):
            out[token] = max(float(value), out.get(token, -math.inf))

    if not isinstance(logprobs, dict):
        return out
    content = logprobs.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        entry = content[0]
        add(entry.get("token"), entry.get("logprob"))
        for top in entry.get("top_logprobs") or []:
            if isinstance(top, dict):
                add(top.get("token"), top.get("logprob"))
        return out
    tops = logprobs.get("top_logprobs")
    if isinstance(tops, list) and tops and isinstance(tops[0], dict):
        for token, value in tops[0].items():
            add(token, value)
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(values, list) and tokens and values:
        add(tokens[0], values[0])
    return out


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def excerpt(text: str, limit: int = 300) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def error_message(text: str) -> str:
    """The error message of an OpenAI-style error body (``{"error": {"message": ...}}`` or
    vLLM's older ``{"object": "error", "message": ...}``), else the raw text."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:2000]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            code = error.get("code")
            message = str(error["message"])
            return f"{message} ({code})" if isinstance(code, str) else message
        if isinstance(error, str):
            return error
        if data.get("message"):
            return str(data["message"])
    return text.strip()[:2000]


def retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def room_left(message: str) -> int | None:
    """Completion tokens that still fit, read from a context-length error that gives both
    the window and the prompt size (vLLM's wording); None when it does not."""
    message = message[:10_000]  # an error message, not a document
    limit = LIMIT_RE.search(message)
    prompt = INPUT_RE.search(message)
    if not limit or not prompt:
        return None
    room = int(limit.group(1)) - int(prompt.group(1))
    return room if room > 0 else None


#: How structured output is asked for: vLLM's ``structured_outputs`` field (``{"json": schema}``
#: or ``{"choice": [...]}``), OpenAI's ``response_format`` (a JSON schema; a choice becomes a
#: schema of one string among the choices), or not at all.
STRUCTURED_MODES = ("vllm", "response_format", "off")


def structured_fields(
    json_schema: dict[str, Any] | None, choices: tuple[str, ...], mode: str
) -> dict[str, Any]:
    """The request fields that constrain the answer to ``json_schema`` or ``choices``."""
    if mode == "off" or (json_schema is None and not choices):
        return {}
    if mode == "vllm":
        return {
            "structured_outputs": {"json": json_schema}
            if json_schema
            else {"choice": list(choices)}
        }
    schema = json_schema if json_schema is not None else {"type": "string", "enum": list(choices)}
    name = "answer" if json_schema is not None else "choice"
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": True},
        }
    }


def structured_text(text: str, choices: tuple[str, ...], mode: str) -> str:
    """The answer's text: with ``response_format`` a choice comes back as a JSON string
    (``"true"`` in quotes), read back to the choice; anything else is kept as it is."""
    if mode != "response_format" or not choices:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, str) and value in choices else text


def prompt_tail_logprob(data: dict[str, Any], tail: str) -> float | None:
    """The summed log-probability of the prompt's last tokens that spell ``tail`` (vLLM's
    ``prompt_logprobs``: one ``{token_id: {logprob, rank, decoded_token}}`` per prompt token,
    the first None). Tokens are taken from the end until their text covers ``tail``; None
    when the answer has no prompt log-probabilities or they do not end with ``tail``."""
    positions = data.get("prompt_logprobs")
    if not isinstance(positions, list) or not tail:
        return None
    pieces: list[str] = []
    total = 0.0
    for entry in reversed(positions[-(len(tail) + 8) :]):  # a token spells >= 1 character
        if not isinstance(entry, dict) or not entry:
            return None
        values = [v for v in entry.values() if isinstance(v, dict)]
        if not values:
            return None
        # the prompt's own token: the only entry (prompt_logprobs=0) or, with alternatives,
        # the one of highest rank (it is listed in addition to the top ones)
        own = max(values, key=lambda v: v.get("rank") if isinstance(v.get("rank"), int) else 0)
        token, value = own.get("decoded_token"), own.get("logprob")
        if not isinstance(token, str) or not isinstance(value, (int, float)):
            return None
        pieces.append(token)
        total += float(value)
        text = "".join(reversed(pieces))
        if len(text) >= len(tail):
            return total if text.endswith(tail) else None
    return None
