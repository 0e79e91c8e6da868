"""The ``LM`` protocol: how SWT asks a language model for text, whatever serves it.

A prompt is a list of chat messages (``{"role": ..., "content": ...}``). ``generate`` is
batched: it takes several :class:`GenerationRequest` and returns, for each, a list of ``n``
:class:`Generation`. Every backend (in-process transformers, an OpenAI-compatible server such
as vLLM, replayed answers) behaves the same way:

- ``temperature == 0`` is greedy decoding; otherwise sampling, reproducible when ``seed`` is
  set (same backend, same request, same seed: same text).
- ``stop`` strings end a generation; the returned text excludes the stop string and
  ``finish_reason`` is ``"stop"``.
- ``finish_reason`` is ``"stop"`` (end of sequence or a stop string), ``"length"``
  (``max_tokens`` or the context window reached) or ``"timeout"`` (an in-process time budget
  ran out: ``text`` holds what was generated until then).
- A prompt that does not fit the context window raises :class:`ContextTooLong`; nothing is
  ever truncated silently.
- An error for any request of a batch raises for the whole call (one :class:`LMError`).
- Backends are safe to call from several threads at once.

Optional capability, **choice log-probabilities**: ``choice_logprobs(messages, choices,
prefix=...)`` scores a few short continuations (``"true"`` / ``"false"``) of the assistant
answer that starts with ``prefix``. In-process transformers, OpenAI-compatible servers that
return ``logprobs`` (vLLM) and :class:`~sweworld.models.replay.ReplayLM` have it;
other backends raise :class:`LogprobsUnsupported`. :func:`choice_probabilities` turns the
scores into probabilities (a softmax over the choices).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sweworld.models.text import valid_messages, valid_text

Messages = list[dict[str, str]]


@dataclass
class GenerationRequest:
    """One prompt and how to sample from it.

    Attributes:
        messages: the chat, oldest first (``role`` is ``system``, ``user`` or ``assistant``).
        max_tokens: most tokens to generate per sample.
        temperature: 0 for greedy decoding, > 0 to sample.
        seed: makes sampling reproducible; None draws a fresh seed (recorded in
            ``Generation.info["seed"]`` where the backend knows it).
        stop: strings that end the generation (not included in the text).
        n: how many samples to return.
        json_schema: structured output: the answer must be JSON matching this schema.
        choices: structured output: the answer must be exactly one of these strings.

    ``json_schema`` and ``choices`` (at most one of them) are honoured by backends with
    structured output (:class:`~sweworld.models.openai_lm.OpenAILM` against vLLM; recorded in
    ``Generation.info["structured"]``); the others ignore them, so callers still parse and
    check the answer.
    """

    messages: Messages
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    json_schema: dict[str, Any] | None = None
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = (self.stop,)
        else:
            self.stop = tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        self.choices = tuple(check_choices(self.choices)) if self.choices else ()
        if self.json_schema is not None and not isinstance(self.json_schema, dict):
            raise ValueError(f"json_schema must be a dict, got {type(self.json_schema).__name__}")
        if self.json_schema is not None and self.choices:
            raise ValueError("give json_schema or choices, not both")
        if isinstance(self.messages, (str, bytes, dict)) or not all(
            isinstance(m, dict) and "role" in m and "content" in m for m in self.messages
        ):
            raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
        # Lone surrogates (from an earlier answer's "\ud800" escape, say) would make every
        # tokenizer and HTTP body fail: a prompt is always valid UTF-8.
        self.messages = valid_messages(self.messages)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stop"] = list(self.stop)
        out["choices"] = list(self.choices)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationRequest:
        known = {
            "messages",
            "max_tokens",
            "temperature",
            "seed",
            "stop",
            "n",
            "json_schema",
            "choices",
        }
        return cls(**{k: v for k, v in data.items() if k in known})

    def last_user_message(self) -> str:
        """Content of the last ``user`` message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return str(message.get("content", ""))
        return ""


@dataclass
class Generation:
    """One sample: its text and what it cost.

    ``prompt_tokens`` / ``completion_tokens`` are counted by the backend (approximate for
    :class:`~sweworld.models.replay.ReplayLM`); ``latency_s`` is the wall time from the
    start of the call (or of the sample's batch) to this sample's end; ``model`` names the
    model that answered (with its adapter); ``info`` holds backend details (``backend``,
    ``seed``, ``adapter``, ...).
    """

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    model: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.text, str):
            self.text = valid_text(self.text)  # what leaves a backend is valid UTF-8

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Generation:
        known = {
            "text",
            "finish_reason",
            "prompt_tokens",
            "completion_tokens",
            "latency_s",
            "model",
            "info",
        }
        out = cls(**{k: v for k, v in data.items() if k in known})
        out.info = dict(out.info or {})
        return out


class LMError(RuntimeError):
    """A language model could not answer. The message says which backend and why."""


class LMTimeout(LMError):
    """The model (or the server) did not answer within the time allowed."""


class LMUnavailable(LMError):
    """The model cannot be reached or loaded (server down, package missing, retries spent)."""


class ContextTooLong(LMError):
    """The prompt does not fit the model's context window (nothing is truncated silently).

    ``prompt_tokens`` and ``context_window`` are filled in when known.
    """

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        context_window: int | None = None,
    ):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window


class LogprobsUnsupported(LMError):
    """The backend cannot give log-probabilities (``choice_logprobs``): the backend has no
    such capability, or the server answered without ``logprobs``."""


@runtime_checkable
class LM(Protocol):
    """A language model backend. Implementations must be safe to call from several threads."""

    name: str
    context_window: int

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        """For each request, in order, a list of ``request.n`` generations."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` (exact or approximate: see the backend)."""
        ...

    def close(self) -> None:
        """Release the model, connections and threads; the object is unusable afterwards."""
        ...


@runtime_checkable
class ScoresChoices(Protocol):
    """The optional log-probability capability of an :class:`LM` (see :func:`choice_logprobs
    <BaseLM.choice_logprobs>`)."""

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]: ...


class BaseLM:
    """Conveniences shared by the backends (not part of the protocol): context-manager
    support, one-request helpers, and the default (unsupported) ``choice_logprobs``."""

    name: str = "lm"
    context_window: int = 0
    #: whether ``choice_logprobs`` can work at all (a server may still refuse at run time)
    supports_logprobs: bool = False
    #: whether ``count_tokens`` uses the model's own tokenizer (False: an approximation);
    #: prompt budgets use it instead of characters / 4 when True
    exact_tokens: bool = False

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]:
        """Natural-log probability of each choice continuing the assistant's answer.

        The answer is the chat ``messages`` (oldest first) answered by the assistant with a
        text that starts with ``prefix`` (when the last message is the assistant's, its
        content comes first and ``prefix`` is appended to it). ``choices`` are short,
        distinct, non-empty strings (``"true"``, ``"false"``). Each backend documents how a
        choice is scored (whole choice by teacher forcing, or its first token). Returns
        ``{choice: logprob}`` for every choice; :func:`choice_probabilities` normalises.

        Raises :class:`LogprobsUnsupported` when the backend cannot score (this default),
        other :class:`LMError` as ``generate`` does, ``ValueError`` for bad ``choices``.
        """
        raise LogprobsUnsupported(f"{self.name}: this backend gives no log-probabilities")

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        raise NotImplementedError

    def close(self) -> None:
        return None

    def complete(self, messages: Messages, **options: Any) -> str:
        """The text of one generation for ``messages`` (options as in GenerationRequest)."""
        return self.generate([GenerationRequest(messages=messages, **options)])[0][0].text

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def check_choices(choices: Sequence[str]) -> list[str]:
    """``choices`` as a list, after checking they are distinct non-empty strings."""
    if isinstance(choices, str):
        raise ValueError("choices must be a sequence of strings, not one string")
    out = list(choices)
    if not out:
        raise ValueError("choices must not be empty")
    if any(not isinstance(c, str) or not c for c in out):
        raise ValueError(f"choices must be non-empty strings, got {out!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"choices must be distinct, got {out!r}")
    return out


def assistant_prefix(messages: Messages, prefix: str = "") -> tuple[Messages, str]:
    """Split a ``choice_logprobs`` question into the chat before the assistant's answer and
    the answer's start: a final assistant message's content is followed by ``prefix``.
    Both come out as valid UTF-8 (lone surrogates replaced)."""
    chat = valid_messages(messages)
    prefix = valid_text(prefix)
    if chat and chat[-1].get("role") == "assistant":
        return chat[:-1], str(chat[-1].get("content", "")) + prefix
    return chat, prefix


def choice_probabilities(logprobs: Mapping[str, float]) -> dict[str, float]:
    """A softmax over the choices' log-probabilities: ``P(choice | one of the choices)``.

    Every value is in [0, 1] and they sum to 1; ``-inf`` scores get 0; when every score is
    ``-inf`` (or NaN) the choices are equally likely. Raises ``ValueError`` when empty."""
    if not logprobs:
        raise ValueError("no choices to normalise")
    finite = {k: float(v) for k, v in logprobs.items() if math.isfinite(float(v))}
    if not finite:
        return {k: 1.0 / len(logprobs) for k in logprobs}
    top = max(finite.values())
    weights = {k: math.exp(finite[k] - top) if k in finite else 0.0 for k in logprobs}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def supports_choice_logprobs(lm: Any) -> bool:
    """Whether ``lm`` claims the ``choice_logprobs`` capability (a server may still refuse
    at run time with :class:`LogprobsUnsupported`)."""
    if isinstance(lm, BaseLM):
        return bool(lm.supports_logprobs)
    return isinstance(lm, ScoresChoices)


def lm_choice_logprobs(
    lm: Any, messages: Messages, choices: Sequence[str], *, prefix: str = ""
) -> dict[str, float]:
    """``lm.choice_logprobs(...)`` for any LM; :class:`LogprobsUnsupported` for an LM that
    has no such method."""
    method = getattr(lm, "choice_logprobs", None)
    if not callable(method):
        name = getattr(lm, "name", type(lm).__name__)
        raise LogprobsUnsupported(f"{name}: this backend gives no log-probabilities")
    return method(messages, choices, prefix=prefix)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """``text`` up to the earliest stop string, and that string (None when none occurs)."""
    best = -1
    which = None
    for s in stop:
        pos = text.find(s)
        if pos >= 0 and (best < 0 or pos < best):
            best, which = pos, s
    if which is None:
        return text, None
    return text[:best], which


def sample_seed(seed: int, index: int) -> int:
    """The seed of sample ``index`` of a request seeded with ``seed``: sample 0 uses the seed
    itself, the others a hash of (seed, index), so seeds of neighbouring requests never
    share streams."""
    if index == 0:
        return int(seed) & 0x7FFF_FFFF_FFFF_FFFF
    digest = hashlib.sha256(f"{int(seed)}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def approx_tokens(text: str) -> int:
    """A rough token count: one token per four characters (rounded up)."""
    return (len(text) + 3) // 4


def make_token_counter(tokenizer: Any) -> Callable[[str], int]:
    """A ``text -> number of tokens`` function from a tokenizer: a local tokenizer folder
    (loaded with ``transformers.AutoTokenizer``, offline), a tokenizer object with
    ``encode`` (Hugging Face), or a function returning the count. Raises
    :class:`LMUnavailable` when a folder cannot be loaded, ``TypeError`` for anything else."""
    if isinstance(tokenizer, (str, Path)):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
        except (ImportError, OSError, ValueError) as exc:
            raise LMUnavailable(f"cannot load the tokenizer {str(tokenizer)!r}: {exc}") from exc
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        lock = threading.Lock()  # fast tokenizers are not safe across threads

        def count(text: str) -> int:
            with lock:
                try:
                    return len(encode(text, add_special_tokens=False))
                except TypeError:
                    return len(encode(text))

        return count
    if callable(tokenizer):
        return lambda text: int(tokenizer(text))
    raise TypeError(f"not a tokenizer: {tokenizer!r} (a folder, an object with encode, or a "
                    "function text -> count)")  # fmt: skip
