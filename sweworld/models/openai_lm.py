"""A client for an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM or any other).

Asynchronous inside: one ``httpx.AsyncClient`` on an event loop in a background thread, and
the requests of a call sent together, at most ``concurrency`` in flight across all callers.
``generate`` is the synchronous face (safe from any number of threads); ``agenerate`` the
asynchronous one (for callers that run their own event loop).

Errors: connection failures, 429 and 5xx are retried with exponential backoff (honouring a
numeric ``Retry-After``) and end in :class:`LMUnavailable` once ``max_retries`` retries are
spent; a request that takes longer than ``timeout`` raises :class:`LMTimeout` (not retried:
the server is up but slow); a 400 about the context length raises :class:`ContextTooLong`;
any other failure or an unreadable body raises :class:`LMError` with the status and the
start of the body. When the server says the prompt fits but ``max_tokens`` does not, the
request is sent once more with ``max_tokens`` reduced to the room left (as the in-process
backend clips its completion budget).

``choice_logprobs`` asks the same endpoint for one token with ``logprobs`` and
``top_logprobs``; the answer's prefix is sent as a final assistant message continued with
vLLM's ``continue_final_message=true`` / ``add_generation_prompt=false``. By default only the
first token of each choice is scored; ``choice_scoring="prompt"`` scores whole choices by
teacher forcing (one request per choice, vLLM's ``prompt_logprobs``), as the in-process
backend does (see :meth:`OpenAILM.choice_logprobs`).

Structured output: a request's ``json_schema`` or ``choices`` is sent as vLLM's
``structured_outputs`` (``{"json": schema}`` / ``{"choice": [...]}``; vLLM 0.32 no longer
reads the older ``guided_json`` / ``guided_choice`` fields and ignores them silently), or as
OpenAI's ``response_format`` (``structured_output="response_format"``), or not at all
(``"off"``), so that the answer is well formed by construction.

Why httpx and not the ``openai`` SDK (evaluated against openai 3.63): the SDK would be a
transport only. Its retries cannot be kept as they are (it retries a request that timed out,
where a slow server must end in :class:`LMTimeout` at once; it retries 409 and obeys
``x-should-retry``; its backoff is fixed at 0.5-8 s, not ``backoff`` / ``max_backoff``), so it
would run with ``max_retries=0`` under the loop here; it reads any body whole (here a body
past :data:`MAX_BODY_BYTES` is refused unread); vLLM's fields (``structured_outputs``,
``continue_final_message``, ``prompt_logprobs``) and answers go through ``extra_body`` and
untyped extras anyway; and the context-length clip reads the error text either way. The
deadline (``max_time`` cancels the requests and closes their connections) would work the
same with either. What the SDK would remove is about 40 lines of ``_post``; it would add a
dependency to the ``model`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sweworld.models.base import (
    BaseLM,
    ContextTooLong,
    Generation,
    GenerationRequest,
    LMError,
    LMTimeout,
    LMUnavailable,
    approx_tokens,
    make_token_counter,
    sample_seed,
)
from sweworld.models.openai_responses import (
    CONTEXT_MARKERS,
    STRUCTURED_MODES,
    error_message,
    excerpt,
    retry_after,
    room_left,
    structured_fields,
    structured_text,
    token_count,
)
from sweworld.models.openai_scoring import OpenAIScoringMixin

#: Environment variable giving the default ``structured_output`` (e.g. ``off`` for a server
#: that rejects vLLM's fields).
STRUCTURED_ENV = "SWEWORLD_LM_STRUCTURED"
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Largest response body read (bytes); a longer one is an error, read no further (a server
#: gone wrong must not fill the trainer's memory).
MAX_BODY_BYTES = 64 * 1024 * 1024


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def normalize_base_url(base_url: str) -> str:
    """``http://host:8000`` and ``http://host:8000/v1/`` both become ``http://host:8000/v1``
    (a URL with another path is kept as given, without its trailing slash)."""
    url = base_url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    rest = url.partition("://")[2]
    if "/" not in rest:
        url += "/v1"
    return url


class OpenAILM(OpenAIScoringMixin, BaseLM):
    """Chat completions over HTTP.

    Args:
        base_url: the API root, e.g. ``http://localhost:8000/v1`` (``/v1`` is added to a bare
            ``host:port``).
        model: the served model's name (for vLLM with LoRA, the adapter's name).
        api_key: sent as ``Authorization: Bearer``.
        timeout: seconds allowed for one HTTP request (connect + answer).
        max_retries: retries after a connection error, 429 or 5xx (so at most
            ``max_retries + 1`` attempts).
        concurrency: most requests in flight at once (shared by all threads using this
            object).
        context_window: the window reported to prompt builders (the server enforces its own).
        backoff: first retry delay in seconds, doubled each retry, at most ``max_backoff``.
        extra_body: extra JSON fields for every request (vLLM's ``top_k``, ``logprobs``...).
        name: the name reported in ``Generation.model`` when the server names none.
        top_logprobs: alternatives asked for by ``choice_logprobs`` (vLLM's default server
            limit and OpenAI's maximum are 20).
        tokenizer: the served model's tokenizer (a local folder, a tokenizer object or a
            ``text -> count`` function) for exact ``count_tokens``; None: approximate.
        structured_output: how a request's ``json_schema`` / ``choices`` is sent: ``vllm``
            (``structured_outputs``), ``response_format`` (OpenAI's JSON schema) or ``off``;
            None: ``$SWEWORLD_LM_STRUCTURED`` or ``vllm``.
        choice_scoring: ``first_token`` (one request, the first token of each choice) or
            ``prompt`` (whole choices, one request per choice with ``prompt_logprobs``: vLLM).
    """

    supports_logprobs = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        context_window: int = 32768,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
        top_logprobs: int = 20,
        tokenizer: Any = None,
        structured_output: str | None = None,
        choice_scoring: str = "first_token",
    ):
        structured_output = structured_output or os.environ.get(STRUCTURED_ENV) or "vllm"
        if structured_output not in STRUCTURED_MODES:
            raise ValueError(
                f"structured_output must be one of {STRUCTURED_MODES}, got {structured_output!r}"
            )
        if choice_scoring not in ("first_token", "prompt"):
            raise ValueError(
                f"choice_scoring must be first_token or prompt, got {choice_scoring!r}"
            )
        self.structured_output = structured_output
        self.choice_scoring = choice_scoring
        self._count = make_token_counter(tokenizer) if tokenizer is not None else None
        self.exact_tokens = self._count is not None
        self.base_url = normalize_base_url(base_url)
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.name = name or model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.concurrency = max(1, int(concurrency))
        self.context_window = int(context_window)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.extra_body = dict(extra_body or {})
        self.top_logprobs = max(1, int(top_logprobs))
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAILM({self.base_url!r}, {self.model!r})"

    # ------------------------------------------------------------------ public

    def count_tokens(self, text: str) -> int:
        """With ``tokenizer=``, exact; otherwise APPROXIMATE: one token per four characters
        (the server is not asked); leave a margin when fitting prompts to ``context_window``."""
        if self._count is not None:
            return self._count(text)
        return approx_tokens(text)

    def generate(
        self, requests: Sequence[GenerationRequest], *, max_time: float | None = None
    ) -> list[list[Generation]]:
        """Send every request (concurrently) and wait for all answers. ``max_time`` bounds
        the whole call, retries included: past it the requests are cancelled (connections
        closed: the server stops generating) and :class:`LMTimeout` is raised."""
        requests = list(requests)
        if not requests:
            return []
        if threading.current_thread() is self._thread:
            raise RuntimeError("OpenAILM.generate called from its own event loop thread")
        future = self._submit(requests, max_time)
        return future.result()

    async def agenerate(
        self, requests: Sequence[GenerationRequest], *, max_time: float | None = None
    ) -> list[list[Generation]]:
        """``generate`` for callers inside an event loop (the work runs on this object's own
        loop; the caller's loop is never blocked)."""
        requests = list(requests)
        if not requests:
            return []
        return await asyncio.wrap_future(self._submit(requests, max_time))

    def close(self) -> None:
        """Close the connections and stop the background thread."""
        with self._start_lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if self._client is not None:
            done = asyncio.run_coroutine_threadsafe(self._client.aclose(), loop)
            with contextlib.suppress(Exception):  # closing is best effort
                done.result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()
        self._client = None

    # ------------------------------------------------------------------ loop

    def _submit(self, requests: list[GenerationRequest], max_time: float | None = None) -> Future:
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(self._generate_all(requests, max_time), loop)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._closed:
                raise LMError(f"{self!r} was closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="sweworld-openai-lm", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                # an OpenAILM dropped without close() does not leave its thread running
                weakref.finalize(self, _stop_loop, loop, thread)
            return self._loop

    def _client_and_semaphore(self) -> tuple[Any, asyncio.Semaphore]:
        # runs on the loop thread: the client and the semaphore belong to this loop
        if self._client is None:
            import httpx

            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            limits = httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            )
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                limits=limits,
            )
            self._semaphore = asyncio.Semaphore(self.concurrency)
        assert self._semaphore is not None
        return self._client, self._semaphore

    async def _generate_all(
        self, requests: list[GenerationRequest], max_time: float | None = None
    ) -> list[list[Generation]]:
        tasks = [asyncio.ensure_future(self._generate_one(r)) for r in requests]
        try:
            if max_time is None or not math.isfinite(max_time):
                return list(await asyncio.gather(*tasks))
            try:
                return list(await asyncio.wait_for(asyncio.gather(*tasks), max(max_time, 0.0)))
            except asyncio.TimeoutError:
                raise LMTimeout(
                    f"{self.url} did not answer within the caller's {max_time:g} s "
                    f"(model {self.model}); the requests were cancelled"
                ) from None
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    # ------------------------------------------------------------------ one request

    def _body(self, request: GenerationRequest, n: int, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "n": n,
        }
        if seed is not None:
            body["seed"] = seed
        if request.stop:
            body["stop"] = list(request.stop)
        body.update(self.extra_body)
        body.update(structured_fields(request.json_schema, request.choices, self.structured_output))
        return body

    async def _generate_one(self, request: GenerationRequest) -> list[Generation]:
        started = time.perf_counter()
        out: list[Generation] = []
        # a server that returns fewer choices than asked (some ignore ``n``) is asked again
        # for the rest, with a derived seed so that the extra samples differ
        for call in range(request.n):
            seed = request.seed
            if seed is not None and call > 0:
                seed = sample_seed(seed, len(out))
            body = self._body(request, request.n - len(out), seed)
            data, attempts, sent = await self._post_with_retries(body)
            generations = self._parse(data, sent, request, started, attempts)
            if not generations:
                raise LMError(f"{self.url} returned no choices: {excerpt(json.dumps(data))}")
            out.extend(generations)
            if len(out) >= request.n:
                break
        for index, generation in enumerate(out[: request.n]):
            generation.info["sample"] = index
        return out[: request.n]

    async def _post_with_retries(
        self, body: dict[str, Any]
    ) -> tuple[dict[str, Any], int, dict[str, Any]]:
        """The decoded answer, the number of attempts, and the body finally sent."""
        client, semaphore = self._client_and_semaphore()
        clipped = False
        attempt = 0
        while True:
            attempt += 1
            try:
                async with semaphore:
                    return await self._post(client, body), attempt, body
            except _Retryable as exc:
                if attempt > self.max_retries:
                    raise LMUnavailable(
                        f"{self.url} is unavailable after {attempt} attempts: {exc.reason}"
                    ) from None
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
                if exc.retry_after is not None:
                    delay = min(self.max_backoff, max(delay, exc.retry_after))
                await asyncio.sleep(delay * (1 + 0.1 * random.random()))
            except ContextTooLong as exc:
                room = room_left(str(exc))
                if clipped or room is None or room >= body["max_tokens"]:
                    raise
                body = {**body, "max_tokens": room}
                clipped = True
                attempt -= 1  # not a failure of the server

    async def _post(self, client: Any, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        async def fetch() -> tuple[Any, bytes]:
            async with client.stream("POST", self.url, json=body) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise LMError(
                            f"{self.url} answered a body of more than {MAX_BODY_BYTES} bytes "
                            f"(status {response.status_code}): not read"
                        )
                    chunks.append(chunk)
                return response, b"".join(chunks)

        try:
            response, raw = await asyncio.wait_for(fetch(), self.timeout)
        except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            raise LMTimeout(
                f"{self.url} did not answer within {self.timeout} s (model {self.model})"
            ) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise _Retryable(f"cannot connect: {exc!r}") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise _Retryable(f"connection broken: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise LMError(f"request to {self.url} failed: {exc!r}") from exc

        status = response.status_code
        text = raw.decode(response.charset_encoding or "utf-8", errors="replace")
        if status in RETRY_STATUSES or status >= 500:
            raise _Retryable(f"status {status}: {excerpt(text)}", retry_after(response))
        if status != 200:
            message = error_message(text)
            if status in (400, 413, 422) and any(m in message.lower() for m in CONTEXT_MARKERS):
                raise ContextTooLong(f"{self.url} (model {self.model}): {message}")
            raise LMError(f"{self.url} answered status {status}: {excerpt(text)}")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise LMError(
                f"{self.url} answered status 200 with a body that is not JSON: {excerpt(text)}"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise LMError(
                f"{self.url} answered status 200 without a 'choices' list: {excerpt(text)}"
            )
        return data

    def _parse(
        self,
        data: dict[str, Any],
        body: dict[str, Any],
        request: GenerationRequest,
        started: float,
        attempts: int,
    ) -> list[Generation]:
        latency = time.perf_counter() - started
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        choices = sorted(
            (c for c in data["choices"] if isinstance(c, dict)),
            key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0,
        )
        if len(choices) != len(data["choices"]):
            raise LMError(f"{self.url}: malformed choices: {excerpt(json.dumps(data))}")
        prompt_tokens = token_count(usage.get("prompt_tokens"))
        completion_total = token_count(usage.get("completion_tokens"))
        out = []
        for choice in choices:
            message = choice.get("message")
            if not isinstance(message, dict):
                raise LMError(f"{self.url}: a choice without a message: {excerpt(str(choice))}")
            content = message.get("content")
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                content = "".join(
                    str(part.get("text") or "") for part in content if isinstance(part, dict)
                )
            text = content if isinstance(content, str) else ""
            text = structured_text(text, request.choices, self.structured_output)
            info: dict[str, Any] = {
                "backend": "openai",
                "base_url": self.base_url,
                "id": data.get("id"),
                "attempts": attempts,
            }
            if self.structured_output != "off" and (request.json_schema or request.choices):
                info["structured"] = "json_schema" if request.json_schema else "choice"
            if body.get("seed") is not None:
                info["seed"] = body["seed"]
            if body["max_tokens"] != request.max_tokens:
                info["max_tokens_clipped_to"] = body["max_tokens"]
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                info["reasoning"] = reasoning
            # per-choice token counts: exact with logprobs, else the total split evenly
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
                tokens = len(logprobs["content"])
                info["logprobs"] = logprobs["content"]
            elif len(choices) == 1:
                tokens = completion_total or approx_tokens(text)
            else:
                tokens = completion_total // len(choices) if completion_total else 0
                tokens = tokens or approx_tokens(text)
                info["completion_tokens_approx"] = True
            out.append(
                Generation(
                    text=text,
                    finish_reason=str(choice.get("finish_reason") or "stop"),
                    prompt_tokens=prompt_tokens,
                    completion_tokens=tokens,
                    latency_s=latency,
                    model=str(data.get("model") or self.name),
                    info=info,
                )
            )
        return out


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    if loop.is_running():
        loop.call_soon_threadsafe(loop.stop)
    if thread is not threading.current_thread():
        thread.join(timeout=5)
