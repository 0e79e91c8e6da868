"""BatchingLM: merging concurrent calls, routing results and errors, deadlines, pass-through."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from sweworld.env.batching import BatchingLM
from sweworld.models.base import (
    BaseLM,
    ContextTooLong,
    Generation,
    GenerationRequest,
    LMError,
    LMTimeout,
    LMUnavailable,
)
from sweworld.models.replay import ReplayLM


class EchoLM(BaseLM):
    """A small real LM: answers each request with its last user message reversed, after
    ``delay`` seconds per call; records the size of every call; a prompt containing
    ``TOO LONG`` fails the whole call (as the protocol says), ``DOWN`` makes it
    unreachable."""

    name = "echo"
    context_window = 4096

    def __init__(self, delay: float = 0.05, takes_max_time: bool = False):
        self.delay = delay
        self.sizes: list[int] = []
        self.max_times: list[float | None] = []
        self.seen: list[str] = []
        self.closed = False
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        return self._generate(requests, None)

    def _generate(self, requests, max_time):
        requests = list(requests)
        with self._lock:  # one call at a time, like an in-process model
            self.sizes.append(len(requests))
            self.max_times.append(max_time)
            texts = [r.last_user_message() for r in requests]
            self.seen.extend(texts)
            if any("DOWN" in t for t in texts):
                raise LMUnavailable("echo: server down")
            if any("TOO LONG" in t for t in texts):
                raise ContextTooLong("echo: prompt too long", prompt_tokens=9999)
            time.sleep(self.delay)
        return [[Generation(text=t[::-1], model=self.name) for _ in range(r.n)] for t, r in
                zip(texts, requests, strict=True)]  # fmt: skip

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def close(self) -> None:
        self.closed = True


class TimedEchoLM(EchoLM):
    """The same, taking a time budget per call (as the in-process transformers model)."""

    def generate(self, requests, *, max_time: float | None = None):  # type: ignore[override]
        return self._generate(requests, max_time)


def _request(text: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}], n=n)


def _call_from_threads(lm, texts, **kwargs):
    results: dict[int, object] = {}

    def run(i: int, text: str) -> None:
        try:
            results[i] = lm.generate([_request(text)], **kwargs)[0][0].text
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [results[i] for i in range(len(texts))]


def test_concurrent_calls_are_merged_and_each_caller_gets_its_own_answer():
    inner = EchoLM(delay=0.05)
    with BatchingLM(inner, max_batch=64, batch_wait_s=0.02) as lm:
        texts = [f"request number {i}" for i in range(32)]
        answers = _call_from_threads(lm, texts)
        assert answers == [t[::-1] for t in texts]
        assert sum(inner.sizes) == 32
        assert len(inner.sizes) < 32 and max(inner.sizes) > 1
        assert lm.stats.batches == len(inner.sizes) and lm.stats.calls == 32
    assert inner.closed


def test_max_batch_bounds_every_merged_call_and_a_call_with_n_samples():
    inner = EchoLM(delay=0.02)
    with BatchingLM(inner, max_batch=4, batch_wait_s=0.05) as lm:
        answers = _call_from_threads(lm, [f"x{i}" for i in range(20)])
        assert answers == [f"x{i}"[::-1] for i in range(20)]
        assert max(inner.sizes) <= 4
        many = lm.generate([_request("a", n=3), _request("b")])
        assert [len(g) for g in many] == [3, 1] and many[0][2].text == "a"


def test_an_error_reaches_only_the_caller_whose_request_caused_it():
    inner = EchoLM(delay=0.05)
    with BatchingLM(inner, max_batch=64, batch_wait_s=0.05) as lm:
        texts = [f"fine {i}" for i in range(8)] + ["this one is TOO LONG"]
        answers = _call_from_threads(lm, texts)
        assert isinstance(answers[-1], ContextTooLong)
        assert answers[:-1] == [t[::-1] for t in texts[:-1]]
        assert lm.stats.isolated_retries > 0


def test_an_unreachable_model_fails_every_caller_of_the_batch_at_once():
    inner = EchoLM(delay=0.0)
    with BatchingLM(inner, max_batch=64, batch_wait_s=0.1) as lm:
        answers = _call_from_threads(lm, ["a", "b", "DOWN"])
        assert all(isinstance(a, LMUnavailable) for a in answers)
        assert len(inner.sizes) == 1  # not retried one by one
        assert lm.generate([_request("back")])[0][0].text == "kcab"  # usable afterwards


def test_a_deadline_per_call_and_queued_calls_of_callers_who_gave_up_are_never_sent():
    inner = EchoLM(delay=1.0)
    with BatchingLM(inner, max_batch=1, batch_wait_s=0.0, grace_s=0.05) as lm:
        slow = threading.Thread(target=lambda: lm.generate([_request("first")]))
        slow.start()
        time.sleep(0.2)  # "first" holds the model for a second
        started = time.monotonic()
        with pytest.raises(LMTimeout):
            lm.generate([_request("impatient")], max_time=0.1)
        assert time.monotonic() - started < 0.6
        slow.join()
        time.sleep(0.1)
        assert "impatient" not in inner.seen and lm.stats.dropped == 1


def test_a_merged_call_gets_the_longest_time_budget_of_its_callers():
    inner = TimedEchoLM(delay=0.01)
    with BatchingLM(inner, max_batch=8, batch_wait_s=0.1) as lm:
        out: list[str] = []
        threads = [
            threading.Thread(target=lambda b=b: out.append(
                lm.generate([_request(f"t{b}")], max_time=b)[0][0].text))
            for b in (5.0, 9.0, 7.0)
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(out) == ["0.5t", "0.7t", "0.9t"]
        assert inner.max_times == [9.0]
        lm.generate([_request("none")])
        assert inner.max_times[-1] is None


def test_other_methods_pass_through_to_the_wrapped_model():
    replay = ReplayLM(
        ["true"],
        cycle=True,
        name="replayed",
        context_window=777,
        logprobs={"true": -0.1, "false": -2.0},
    )
    with BatchingLM(replay, close_wrapped=False) as lm:
        assert lm.name == "replayed" and lm.context_window == 777
        assert lm.count_tokens("abcdefgh") == replay.count_tokens("abcdefgh")
        assert lm.exact_tokens is replay.exact_tokens
        assert lm.supports_logprobs is True
        scores = lm.choice_logprobs([{"role": "user", "content": "q"}], ["true", "false"])
        assert scores == {"true": -0.1, "false": -2.0}
        assert lm.generate([_request("q")])[0][0].text == "true"
        assert lm.calls is replay.calls  # anything else is the wrapped model's
    assert replay.generate([_request("still open")])[0][0].text == "true"


def test_close_fails_waiting_calls_and_later_ones():
    inner = EchoLM(delay=0.5)
    lm = BatchingLM(inner, max_batch=1, batch_wait_s=0.0)
    results: list[object] = []

    def call(text: str) -> None:
        try:
            results.append(lm.generate([_request(text)])[0][0].text)
        except LMError as exc:
            results.append(exc)

    threads = [threading.Thread(target=call, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    lm.close()
    for t in threads:
        t.join(10)
    assert len(results) == 3
    assert sum(isinstance(r, LMError) for r in results) >= 1  # those still queued
    with pytest.raises(LMError, match="closed"):
        lm.generate([_request("late")])
    assert inner.closed


def test_bad_arguments():
    with pytest.raises(TypeError):
        BatchingLM(object())
    with pytest.raises(ValueError):
        BatchingLM(EchoLM(), max_batch=0)
    with pytest.raises(TypeError, match="already"):
        BatchingLM(BatchingLM(EchoLM()))
    with BatchingLM(EchoLM()) as lm:
        assert lm.generate([]) == []
