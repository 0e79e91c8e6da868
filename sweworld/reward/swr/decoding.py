"""Constrained decoding of an SWR report: the model chooses each listed test's status.

In oracle mode the tests a report must cover are known, so the report's text is forced
except for the statuses and the ``resolved`` value: for each test in order, the answer so
far (:func:`~sweworld.reward.swr.swr_status_prefix`) is scored with ``choice_logprobs``
against the four statuses, and the chosen one is written; finally ``true`` / ``false`` is
chosen after :func:`~sweworld.reward.swr.swr_resolved_prefix`. Every report is well formed,
whatever the model's size, and costs one scoring call per test: with the in-process
backend, whose cache keeps the previous context, each call runs only the few new tokens
in one forward pass (on a CPU ~20x cheaper than generating the report token by token).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from sweworld.reward.swr.prompt import (
    SWRPrompt,
    swr_resolved_prefix,
    swr_status_prefix,
    swr_target,
)

__all__ = ["RESOLVED_CHOICES", "STATUS_CHOICES", "constrained_reports"]

RESOLVED_CHOICES = ("true", "false")
#: The statuses chosen among, with the closing quote (each a whole JSON value).
STATUS_CHOICES = ('PASSED"', 'FAILED"', 'ERROR"', 'SKIPPED"')


def constrained_reports(
    lm: Any,
    prompt: SWRPrompt,
    *,
    samples: int = 1,
    temperature: float = 0.7,
    seed: int = 0,
    max_time_s: float | None = None,
) -> list[Any]:
    """``samples`` reports for ``prompt.expected_tests`` as
    :class:`~sweworld.models.base.Generation` objects (``text`` is the report;
    ``info`` holds ``decoding``, ``seed``, ``p_pass`` (test -> P(PASSED) among the
    statuses) and ``logprobs`` (of ``true`` / ``false``)).

    ``samples == 1`` (or ``temperature == 0``) is greedy (ties go to the first choice:
    PASSED, true); otherwise every choice is drawn from the choices' probabilities at
    ``temperature`` with a generator seeded per sample. When ``max_time_s`` runs out the
    current report stops where it is (``finish_reason="timeout"``, no ``resolved``).
    Errors of ``choice_logprobs`` (:class:`~sweworld.models.base.LMError`) propagate.
    """
    from sweworld.models.base import (
        Generation,
        choice_probabilities,
        lm_choice_logprobs,
        sample_seed,
    )

    greedy = samples == 1 or temperature <= 0
    count = getattr(lm, "count_tokens", None) or (lambda text: (len(text) + 3) // 4)
    started = time.monotonic()
    tests = list(dict.fromkeys(prompt.expected_tests))
    out = []
    for index in range(samples):
        sample = None if greedy else sample_seed(seed, index)
        rng = random.Random(sample)

        def pick(logprobs: Mapping[str, float], rng: random.Random = rng) -> str:
            if greedy:
                return max(logprobs, key=lambda c: logprobs[c])
            probs = choice_probabilities({c: v / temperature for c, v in logprobs.items()})
            return rng.choices(list(probs), weights=list(probs.values()))[0]

        statuses: dict[str, str] = {}
        p_pass: dict[str, float] = {}
        info: dict[str, Any] = {"decoding": "constrained", "seed": sample, "p_pass": p_pass}
        finish = "stop"
        for test in tests:
            if max_time_s is not None and time.monotonic() - started > max_time_s:
                finish = "timeout"
                break
            logprobs = lm_choice_logprobs(
                lm, prompt.messages, STATUS_CHOICES, prefix=swr_status_prefix(statuses, test)
            )
            p_pass[test] = choice_probabilities(logprobs)[STATUS_CHOICES[0]]
            statuses[test] = pick(logprobs)[:-1]
        if finish == "timeout":
            text = swr_resolved_prefix(statuses).removesuffix(', "resolved": ') + "}"
        else:
            logprobs = lm_choice_logprobs(
                lm, prompt.messages, RESOLVED_CHOICES, prefix=swr_resolved_prefix(statuses)
            )
            info["logprobs"] = dict(logprobs)
            text = swr_target(statuses, pick(logprobs) == "true")
        out.append(
            Generation(
                text=text,
                finish_reason=finish,
                completion_tokens=count(text),
                model=str(getattr(lm, "name", "")),
                info=info,
            )
        )
    return out
