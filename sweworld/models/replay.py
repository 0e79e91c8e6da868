"""Answers given in advance: for tests, demos, and replaying recorded runs.

``ReplayLM(responses)`` answers from

- a **list** (or tuple) of answers, served in order, one per sample; when the list is
  exhausted it raises :class:`~sweworld.models.base.LMError` (an unexpected extra call
  is a bug worth seeing), unless ``cycle=True``, which starts over;
- a **dict**: the key equal to the last user message wins; otherwise the first key (in the
  dict's order) found as a substring of the last user message, then of any message; no
  match raises ``LMError`` unless ``default`` is given;
- a **callable** ``messages -> str``, called once per sample.

An answer is a string or a dict with ``text`` (and optionally ``finish_reason``); a dict
value may also be a list of answers, served in order for that key (the last one repeats).
Stop strings are applied as a real model would (the text is cut before the first one);
``max_tokens`` is not. Every request is recorded in ``.calls``. Token counts are
approximate (four characters per token).

``choice_logprobs`` answers from ``logprobs=`` (a fixed ``{choice: logprob}``, a list of them
served in order, or a function) or, without it, derives them from the text replayed for the
same conversation: the choice that the replayed answer continues with after the prefix gets
``log(logprob_confidence)``, the others share the rest; see :meth:`ReplayLM.choice_logprobs`.

:class:`RecordingLM` wraps any LM and appends each request and its generations to a JSONL
file that :meth:`ReplayLM.from_jsonl` replays.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.models.base import (
    BaseLM,
    Generation,
    GenerationRequest,
    LMError,
    LogprobsUnsupported,
    Messages,
    approx_tokens,
    assistant_prefix,
    check_choices,
    cut_at_stop,
    make_token_counter,
)
from sweworld.tasks.loaders import iter_json_lines

Answer = str | Mapping[str, Any]


def conversation_key(messages: Messages) -> str:
    """A canonical string for a whole conversation (what recorded runs are keyed by)."""
    return json.dumps(
        [[str(m.get("role", "")), str(m.get("content", ""))] for m in messages],
        ensure_ascii=False,
    )


class ReplayLM(BaseLM):
    """An LM that answers from a list, a dict, or a function (see the module's docstring).

    Args:
        responses: the answers.
        cycle: for a list, start over when exhausted instead of raising.
        default: for a dict, the answer when no key matches (None: raise).
        delay: seconds to sleep per request (to simulate latency).
        name: the model name reported in ``Generation.model``.
        context_window: reported window; prompts longer (approximately) raise nothing.
        logprobs: answers of ``choice_logprobs``: a ``{choice: logprob}`` mapping (every
            call), a list of mappings (served in order; ``cycle`` applies), or a function
            ``(messages, choices, prefix) -> mapping``; None derives them from the replayed
            text.
        logprob_confidence: the probability a derived answer gives to the replayed choice.
        tokenizer: the replayed model's tokenizer (a local folder, a tokenizer object or a
            ``text -> count`` function) for exact ``count_tokens``; None: approximate.
    """

    supports_logprobs = True

    def __init__(
        self,
        responses: Sequence[Answer] | Mapping[str, Any] | Callable[[Messages], Any],
        *,
        cycle: bool = False,
        default: Answer | None = None,
        delay: float = 0.0,
        name: str = "replay",
        context_window: int = 1_000_000,
        logprobs: Any = None,
        logprob_confidence: float = 0.9,
        tokenizer: Any = None,
    ):
        self._count = make_token_counter(tokenizer) if tokenizer is not None else None
        self.exact_tokens = self._count is not None
        if not 0.0 < logprob_confidence <= 1.0:
            raise ValueError(f"logprob_confidence must be in (0, 1], got {logprob_confidence}")
        self.name = name
        self.context_window = context_window
        self.cycle = cycle
        self.default = default
        self.delay = delay
        self.calls: list[GenerationRequest] = []
        self._lock = threading.Lock()
        self._sequence: list[Answer] | None = None
        self._table: dict[str, Any] | None = None
        self._conversations: dict[str, list[Answer]] = {}
        self._function: Callable[[Messages], Any] | None = None
        self._position = 0
        self._key_positions: dict[str, int] = {}
        self.logprobs = list(logprobs) if isinstance(logprobs, (list, tuple)) else logprobs
        self.logprob_confidence = float(logprob_confidence)
        self.logprob_calls: list[tuple[Messages, list[str], str]] = []
        self._logprob_position = 0
        self._served: dict[str, list[str]] = {}  # conversation -> whole answers replayed
        if callable(responses) and not isinstance(responses, Mapping):
            self._function = responses
        elif isinstance(responses, Mapping):
            self._table = dict(responses)
        elif isinstance(responses, (str, bytes)):
            raise TypeError("responses must be a list of answers, a dict or a callable")
        else:
            self._sequence = list(responses)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_jsonl(cls, path: str | Path, **kwargs: Any) -> ReplayLM:
        """Answers recorded in a JSONL file, one JSON object per line.

        A line is either ``{"text": ...}`` (answers served in order, as a list) or a recorded
        exchange ``{"request": {"messages": [...], ...}, "generations": [{"text": ...}, ...]}``
        (as :class:`RecordingLM` writes; ``{"messages": [...], "text": ...}`` also works).
        Recorded exchanges are matched on the whole conversation, then on its last user
        message; a conversation recorded several times is answered in recorded order.
        """
        lines = [value for _, value in iter_json_lines(Path(path), error=ValueError)]
        if not lines:
            raise ValueError(f"{path}: no recorded answers")
        if all(_messages_of(line) is None for line in lines):
            return cls([_answer_of(line) for line in lines], **kwargs)
        table: dict[str, list[Answer]] = {}
        conversations: dict[str, list[Answer]] = {}
        for number, line in enumerate(lines, 1):
            messages = _messages_of(line)
            if messages is None:
                raise ValueError(f"{path}:{number}: a recorded exchange needs 'messages'")
            answers = _answers_of(line)
            conversations.setdefault(conversation_key(messages), []).extend(answers)
            last_user = GenerationRequest(messages=messages).last_user_message()
            table.setdefault(last_user, []).extend(answers)
        replay = cls(table, **kwargs)
        replay._conversations = conversations
        return replay

    # ------------------------------------------------------------------ answering

    def count_tokens(self, text: str) -> int:
        """With ``tokenizer=``, its count; otherwise approximate: one token per four
        characters."""
        if self._count is not None:
            return self._count(text)
        return approx_tokens(text)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        out: list[list[Generation]] = []
        for request in requests:
            started = time.perf_counter()
            with self._lock:
                self.calls.append(request)
            if self.delay:
                time.sleep(self.delay)
            prompt = sum(approx_tokens(str(m.get("content", ""))) for m in request.messages)
            samples = []
            for index in range(request.n):
                answer = self._answer(request.messages)
                samples.append(self._generation(request, answer, index, prompt, started))
            self._remember(request.messages, samples)
            out.append(samples)
        return out

    # ------------------------------------------------------------------ log-probabilities

    def _remember(self, messages: Messages, samples: list[Generation]) -> None:
        chat, started = assistant_prefix(messages)
        key = conversation_key(chat)
        with self._lock:
            served = self._served.setdefault(key, [])
            served.extend(started + g.text for g in samples)
            del served[:-64]

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]:
        """Scripted or derived log-probabilities (every call is recorded in
        ``logprob_calls``).

        With ``logprobs=`` given, its mapping answers (a choice it does not name gets its
        lowest value). Otherwise they are derived, deterministically, from the answers
        replayed for the same conversation (newest first): the answer that starts with the
        assistant's text so far, else the newest one in which the end of that text occurs;
        the choice it continues with (leading whitespace ignored) gets
        ``log(logprob_confidence)``, the other choices share the rest equally; when it
        continues with none of them, every choice is equally likely. Nothing replayed yet
        for the conversation raises :class:`LogprobsUnsupported`.
        """
        options = check_choices(choices)
        with self._lock:
            self.logprob_calls.append((list(messages), options, prefix))
        if self.logprobs is not None:
            return self._scripted_logprobs(messages, options, prefix)
        chat, answer = assistant_prefix(messages, prefix)
        with self._lock:
            served = list(self._served.get(conversation_key(chat), ()))
        if not served:
            raise LogprobsUnsupported(
                f"{self.name}: nothing was replayed for this conversation to derive "
                "log-probabilities from (pass logprobs= to script them)"
            )
        rest = _continuation(served, answer)
        picked = None
        if rest is not None:
            stripped = rest.lstrip()
            matches = [c for c in options if stripped.startswith(c)]
            picked = max(matches, key=len) if matches else None
        if picked is None or len(options) == 1:
            return {c: math.log(1.0 / len(options)) for c in options}
        others = (1.0 - self.logprob_confidence) / (len(options) - 1)
        low = math.log(others) if others > 0 else -math.inf
        return {c: math.log(self.logprob_confidence) if c == picked else low for c in options}

    def _scripted_logprobs(
        self, messages: Messages, options: list[str], prefix: str
    ) -> dict[str, float]:
        source = self.logprobs
        if isinstance(source, list):
            with self._lock:
                if self._logprob_position >= len(source):
                    if not self.cycle or not source:
                        raise LMError(
                            f"{self.name}: all {len(source)} replayed log-probability answers "
                            "were used"
                        )
                    self._logprob_position = 0
                value = source[self._logprob_position]
                self._logprob_position += 1
        elif callable(source) and not isinstance(source, Mapping):
            value = source(messages, options, prefix)
        else:
            value = source
        if not isinstance(value, Mapping) or not value:
            raise LMError(f"{self.name}: a log-probability answer must be a mapping, got {value!r}")
        given = {str(k): float(v) for k, v in value.items()}
        floor = min(given.values())
        return {c: given.get(c, floor) for c in options}

    def _generation(
        self, request: GenerationRequest, answer: Any, index: int, prompt: int, started: float
    ) -> Generation:
        if isinstance(answer, Mapping):
            text = str(answer.get("text", ""))
            finish = str(answer.get("finish_reason", "stop"))
        elif isinstance(answer, str):
            text, finish = answer, "stop"
        else:
            raise LMError(f"{self.name}: an answer must be a string or a dict, got {answer!r}")
        text, hit = cut_at_stop(text, request.stop)
        info: dict[str, Any] = {"backend": "replay", "sample": index}
        if hit is not None:
            finish = "stop"
            info["stop_string"] = hit
        return Generation(
            text=text,
            finish_reason=finish,
            prompt_tokens=prompt,
            completion_tokens=approx_tokens(text),
            latency_s=time.perf_counter() - started,
            model=self.name,
            info=info,
        )

    def _answer(self, messages: Messages) -> Any:
        if self._function is not None:
            return self._function(messages)
        with self._lock:
            if self._sequence is not None:
                return self._next_in_sequence()
            return self._lookup(messages)

    def _next_in_sequence(self) -> Answer:
        assert self._sequence is not None
        if self._position >= len(self._sequence):
            if not self.cycle or not self._sequence:
                raise LMError(
                    f"{self.name}: all {len(self._sequence)} replayed answers were used "
                    "(pass cycle=True to start over)"
                )
            self._position = 0
        answer = self._sequence[self._position]
        self._position += 1
        return answer

    def _lookup(self, messages: Messages) -> Any:
        assert self._table is not None
        conversation = conversation_key(messages)
        if conversation in self._conversations:
            return self._take("conv:" + conversation, self._conversations[conversation])
        last_user = GenerationRequest(messages=messages).last_user_message()
        if last_user in self._table:
            return self._take("key:" + last_user, self._table[last_user])
        for key, value in self._table.items():
            if key and key in last_user:
                return self._take("key:" + key, value)
        everything = "\n".join(str(m.get("content", "")) for m in messages)
        for key, value in self._table.items():
            if key and key in everything:
                return self._take("key:" + key, value)
        if self.default is not None:
            return self.default
        raise LMError(
            f"{self.name}: no replayed answer matches the last user message "
            f"{last_user[:200]!r} (keys: {list(self._table)[:10]!r})"
        )

    def _take(self, key: str, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if not value:
            raise LMError(f"{self.name}: no answers recorded for {key[:100]!r}")
        position = self._key_positions.get(key, 0)
        self._key_positions[key] = position + 1
        return value[min(position, len(value) - 1)]

    def reset(self) -> None:
        """Forget the calls and start the answers over."""
        with self._lock:
            self.calls.clear()
            self._position = 0
            self._key_positions.clear()
            self.logprob_calls.clear()
            self._logprob_position = 0
            self._served.clear()


def _continuation(served: list[str], answer: str) -> str | None:
    """What follows ``answer`` in the newest replayed answer that continues it (see
    :meth:`ReplayLM.choice_logprobs`), or None."""
    for text in reversed(served):
        if text.startswith(answer):
            return text[len(answer) :]
    tail = answer.rstrip()
    for size in (64, 24, 12):
        key = tail[-size:]
        if not key:
            break
        for text in reversed(served):
            at = text.rfind(key)
            if at >= 0:
                return text[at + len(key) :]
    return None


def _messages_of(line: Any) -> Messages | None:
    if not isinstance(line, Mapping):
        return None
    request = line.get("request")
    if isinstance(request, Mapping) and isinstance(request.get("messages"), list):
        return request["messages"]
    messages = line.get("messages")
    return messages if isinstance(messages, list) else None


def _answer_of(line: Any) -> Answer:
    if isinstance(line, str):
        return line
    if not isinstance(line, Mapping):
        raise ValueError(f"a recorded answer must be a string or an object, got {line!r}")
    if "text" in line:
        return {"text": line["text"], "finish_reason": line.get("finish_reason", "stop")}
    if "response" in line:
        return str(line["response"])
    raise ValueError(f"a recorded answer needs 'text': {str(line)[:200]}")


def _answers_of(line: Mapping[str, Any]) -> list[Answer]:
    generations = line.get("generations")
    if isinstance(generations, list):
        return [_answer_of(g) for g in generations]
    return [_answer_of(line)]


class RecordingLM(BaseLM):
    """Wraps an LM and appends every request with its generations to a JSONL file (one line
    per request, in the format :meth:`ReplayLM.from_jsonl` reads)."""

    def __init__(self, inner: Any, path: str | Path):
        self.inner = inner
        self.path = Path(path)
        self.name = inner.name
        self.context_window = inner.context_window
        self.exact_tokens = bool(getattr(inner, "exact_tokens", False))
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def supports_logprobs(self) -> bool:  # type: ignore[override]
        from sweworld.models.base import supports_choice_logprobs

        return supports_choice_logprobs(self.inner)

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]:
        """The wrapped LM's ``choice_logprobs`` (not recorded)."""
        from sweworld.models.base import lm_choice_logprobs

        return lm_choice_logprobs(self.inner, messages, choices, prefix=prefix)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        requests = list(requests)
        results = self.inner.generate(requests)
        lines = [
            json.dumps(
                {
                    "request": request.to_dict(),
                    "generations": [g.to_dict() for g in generations],
                },
                ensure_ascii=False,
                default=str,
            )
            for request, generations in zip(requests, results, strict=True)
        ]
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
        return results

    def close(self) -> None:
        self.inner.close()
