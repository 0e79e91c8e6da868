"""``choice_logprobs`` for :class:`~sweworld.models.openai_lm.OpenAILM`: the first token
of each choice from one request's ``top_logprobs`` (``choice_scoring="first_token"``), or
whole choices scored by teacher forcing, one request per choice with vLLM's
``prompt_logprobs`` (``choice_scoring="prompt"``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sweworld.models.base import (
    ContextTooLong,
    LMError,
    LogprobsUnsupported,
    Messages,
    assistant_prefix,
    check_choices,
)
from sweworld.models.openai_responses import (
    excerpt,
    first_token_logprobs,
    logsumexp,
    prompt_tail_logprob,
)

__all__ = ["OpenAIScoringMixin"]


class OpenAIScoringMixin:
    """Choice scoring over the endpoint of an :class:`~sweworld.models.openai_lm.OpenAILM`
    (which sets every attribute and method named here)."""

    url: str
    model: str
    choice_scoring: str
    extra_body: dict[str, Any]
    top_logprobs: int
    _thread: threading.Thread | None
    _ensure_loop: Callable[[], asyncio.AbstractEventLoop]
    _post_with_retries: Callable[..., Awaitable[tuple[dict[str, Any], int, dict[str, Any]]]]

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]:
        """Log-probability of the FIRST TOKEN of each choice continuing the assistant's
        answer that starts with ``prefix`` (one request, ``max_tokens=1``, greedy).

        The answer's prefix is sent without its trailing whitespace (so that the model's
        next token is the natural ``" true"``, not ``"true"`` after a lone space); a returned
        token counts for a choice when, leading whitespace removed, it is a non-empty start
        of the choice (case-sensitive); several such tokens add up. Choices that share
        their first token get the same score. A choice missing from the returned
        ``top_logprobs`` gets the lowest returned log-probability: an upper bound of its
        true value (a token outside the top list is at most as likely as the last one).

        Raises :class:`LogprobsUnsupported` when the server answers without log-probabilities
        or rejects the request's ``logprobs`` / ``continue_final_message`` fields; other
        errors as ``generate``.
        """
        options = check_choices(choices)
        if threading.current_thread() is self._thread:
            raise RuntimeError("OpenAILM.choice_logprobs called from its own event loop thread")
        chat, answer = assistant_prefix(messages, prefix)
        if self.choice_scoring == "prompt":
            return self._whole_choice_logprobs(chat, answer, options)
        sent = answer.rstrip()
        body: dict[str, Any] = dict(self.extra_body)
        body.update(
            {
                "model": self.model,
                "messages": [*chat, {"role": "assistant", "content": sent}] if sent else chat,
                "max_tokens": 1,
                "temperature": 0.0,
                "n": 1,
                "logprobs": True,
                "top_logprobs": self.top_logprobs,
            }
        )
        if sent:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        data = self._scoring_answers([body])[0]
        tokens = first_token_logprobs(data)
        if not tokens:
            raise LogprobsUnsupported(
                f"{self.url} (model {self.model}) answered without log-probabilities: "
                f"{excerpt(json.dumps(data))}"
            )
        floor = min(tokens.values())
        out: dict[str, float] = {}
        for choice in options:
            matched = [
                lp
                for token, lp in tokens.items()
                if token.lstrip() and choice.startswith(token.lstrip())
            ]
            out[choice] = logsumexp(matched) if matched else floor
        return out

    def _scoring_answers(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The answers to log-probability requests, sent together; a 4xx about their fields
        raises :class:`LogprobsUnsupported`."""

        async def post_all() -> list[dict[str, Any]]:
            answers = await asyncio.gather(*(self._post_with_retries(b) for b in bodies))
            return [data for data, _, _ in answers]

        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(post_all(), loop)
        try:
            return future.result()
        except ContextTooLong:
            raise
        except LMError as exc:
            text = str(exc)
            fields = ("logprobs", "continue_final_message", "generation_prompt")
            if " status 4" in text and any(word in text for word in fields):
                raise LogprobsUnsupported(
                    f"{self.url} (model {self.model}) refused a log-probability request: {text}"
                ) from exc
            raise

    def _whole_choice_logprobs(
        self, chat: Messages, answer: str, options: list[str]
    ) -> dict[str, float]:
        """``choice_scoring="prompt"``: each choice appended to the answer and scored by
        teacher forcing (the summed ``prompt_logprobs`` of its tokens)."""
        bodies = []
        for choice in options:
            body: dict[str, Any] = dict(self.extra_body)
            body.update(
                {
                    "model": self.model,
                    "messages": [*chat, {"role": "assistant", "content": answer + choice}],
                    "max_tokens": 1,
                    "temperature": 0.0,
                    "n": 1,
                    "prompt_logprobs": 0,
                    "continue_final_message": True,
                    "add_generation_prompt": False,
                }
            )
            bodies.append(body)
        out: dict[str, float] = {}
        for choice, data in zip(options, self._scoring_answers(bodies), strict=True):
            value = prompt_tail_logprob(data, choice)
            if value is None:
                raise LogprobsUnsupported(
                    f"{self.url} (model {self.model}) gave no prompt log-probabilities ending "
                    f"with {choice!r}: {excerpt(json.dumps(data))}"
                )
            out[choice] = value
        return out
