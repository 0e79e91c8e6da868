"""Records -> tokenized training examples, in exactly the format inference uses.

**SWT** (a generator). A record's stored context (:meth:`SWTRecord.context`, built by the
same builder and budgets as the simulator at inference) becomes the chat messages of
:func:`sweworld.transition.prompt.build_messages` followed by the assistant prefill
``{"stdout": "`` that :class:`~sweworld.transition.simulated.SimulatedExecutor` writes for
in-process models; :func:`render_chat` renders and tokenizes them as
:meth:`TransformersLM.encode_messages` does (the chat template, the assistant turn
continued). The target is what the model must generate after that prefill: the rest of
:func:`~sweworld.transition.prompt.render_target`'s JSON, then the end-of-turn token.
Loss is on the target tokens only. Outputs too long for the simulator's generation budget
(``max_target_tokens``) keep their head and tail lines around the context builder's
``... [N lines cut] ...`` marker (:func:`fit_target`), so the model learns answers it can
finish (an unfinished JSON answer fails to parse and falls back).

**SWR** (a scorer). The reward's tests stage reads P(resolved) from the log-probabilities
of ``true`` / ``false`` after ``{"tests": {...}, "resolved": `` (``choice_logprobs``, which
tokenizes the rendered prompt, the answer so far and the choice as one text and scores
the choice's tokens after the longest shared token prefix). :func:`swr_example` builds
exactly that token sequence, the real per-test statuses in the answer, and puts loss on the
tokens of the real choice (and, with ``statuses``, on the status values: the tokens
constrained decoding chooses among). Blind mode generates its report, so there loss is on
the whole answer.

:func:`pack` packs short examples into rows; :class:`Collator` pads them and, for
``isolated`` packing, gives each row a block-diagonal causal mask and positions that
restart per example (the packed examples compute exactly what they compute alone).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.models.budget import LineTokens, truncate_text

__all__ = [
    "IGNORE",
    "SWT_PREFILL",
    "Collator",
    "Example",
    "balance_classes",
    "fit_target",
    "pack",
    "render_chat",
    "swr_example",
    "swr_statuses",
    "swt_example",
    "swt_messages",
]

IGNORE = -100
#: The start of the SWT answer written for in-process models (``SimulatedExecutor``).
SWT_PREFILL = '{"stdout": "'
_COMPACT_PREFIX = '{"stdout":"'
_STATUS_OF = {"success": "PASSED", "failure": "FAILED"}


@dataclass
class Example:
    """One tokenized example: ``labels`` is ``IGNORE`` except on the answer's tokens."""

    input_ids: list[int]
    labels: list[int]
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def target_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE)


# ------------------------------------------------------------------------------------------
# Rendering (what TransformersLM does at inference)
# ------------------------------------------------------------------------------------------


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> str:
    """The prompt text the in-process backend renders: the chat template with the assistant
    turn opened, or continued when the last message is the assistant's (a prefill)."""
    prefill = bool(messages) and messages[-1].get("role") == "assistant"
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=not prefill,
            continue_final_message=prefill,
            tokenize=False,
        )
    lines = [f"{m['role']}: {m['content']}\n" for m in messages]
    if prefill:
        return "".join(lines).rstrip("\n")
    return "".join(lines) + "assistant: "


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _eos_id(tokenizer: Any) -> int | None:
    eos = tokenizer.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return int(eos) if eos is not None else None


# ------------------------------------------------------------------------------------------
# SWT
# ------------------------------------------------------------------------------------------


def swt_messages(context: Any) -> list[dict[str, str]]:
    """The messages the simulator sends an in-process model: the prompt and the prefill."""
    from sweworld.transition.prompt import build_messages

    return [*build_messages(context), {"role": "assistant", "content": SWT_PREFILL}]


def _continuation(stdout: str, stderr: str, exit_code: int) -> str:
    from sweworld.transition.prompt import render_target
    from sweworld.transition.types import Prediction

    text = render_target(Prediction(stdout=stdout, stderr=stderr, exit_code=int(exit_code)))
    assert text.startswith(_COMPACT_PREFIX)
    return text[len(_COMPACT_PREFIX) :]


def fit_target(
    stdout: str,
    stderr: str,
    exit_code: int,
    count: Callable[[str], int],
    max_tokens: int,
) -> tuple[str, dict[str, int]]:
    """The answer after the prefill, within ``max_tokens`` (end-of-turn token included):
    stdout and stderr cut to whole head and tail lines around ``... [N lines cut] ...`` when
    needed, the room shared between them in proportion to their lengths (the tail, where
    pytest's summary and a traceback's error line are, is kept). Returns the text and the
    lines cut per stream."""
    cut = {"stdout": 0, "stderr": 0}
    text = _continuation(stdout, stderr, exit_code)
    if count(text) + 1 <= max_tokens:
        return text, cut

    def escaped(s: str) -> int:
        return count(json.dumps(s, ensure_ascii=False)[1:-1])

    tok = LineTokens(escaped)
    overhead = count(_continuation("", "", exit_code)) + 1
    room = max(max_tokens - overhead, 8)
    streams = {"stdout": stdout, "stderr": stderr}
    for _ in range(8):
        demand = {k: escaped(v) for k, v in streams.items()}
        total = sum(demand.values()) or 1
        budgets = {k: max(4, room * demand[k] // total) for k in streams}
        # a stream that needs less than its share gives the rest to the other
        for k, other in (("stdout", "stderr"), ("stderr", "stdout")):
            if demand[k] < budgets[k]:
                budgets[other] += budgets[k] - demand[k]
        kept = {}
        for k, v in streams.items():
            kept[k], n = truncate_text(v, budgets[k], tok) if v else ("", 0)
            cut[k] = n
        text = _continuation(kept["stdout"], kept["stderr"], exit_code)
        over = count(text) + 1 - max_tokens
        if over <= 0:
            return text, cut
        room -= max(over, 4)
        if room <= 8:
            break
    return text, cut


def swt_example(
    record: Any,
    mode: str,
    tokenizer: Any,
    *,
    max_target_tokens: int = 256,
    count: Callable[[str], int] | None = None,
) -> Example | None:
    """The SWT example of ``record`` in ``mode`` (None when the record has no context for
    it). ``count`` counts tokens (default: ``tokenizer``)."""
    context = record.context(mode)
    if context is None:
        return None
    count = count or (lambda text: len(_encode(tokenizer, text)))
    prompt_ids = _encode(tokenizer, render_chat(tokenizer, swt_messages(context)))
    answer, cut = fit_target(
        record.stdout, record.stderr, record.exit_code, count, max_target_tokens
    )
    answer_ids = _encode(tokenizer, answer)
    eos = _eos_id(tokenizer)
    if eos is not None:
        answer_ids.append(eos)
    return Example(
        input_ids=prompt_ids + answer_ids,
        labels=[IGNORE] * len(prompt_ids) + answer_ids,
        meta={
            "id": record.id,
            "repo": record.repo,
            "mode": mode,
            "kind": "swt",
            "prompt_tokens": len(prompt_ids),
            "lines_cut": cut["stdout"] + cut["stderr"],
            "exit_code": int(record.exit_code),
        },
    )


# ------------------------------------------------------------------------------------------
# SWR
# ------------------------------------------------------------------------------------------


def swr_statuses(
    record: Any, task: Any, mode: str, expected: Sequence[str], *, blind_max_tests: int = 20
) -> tuple[dict[str, str], set[str]]:
    """The report a model is trained to write for ``record``, and the tests whose status is
    known (labelled). Oracle: the prompt's listed tests in order, with their real status
    (``tests_status``); when the label has no per-test statuses, a resolved candidate passed
    every listed test (``resolved`` means exactly that), and an unresolved one is given the
    statuses without the fix (FAIL_TO_PASS failed, PASS_TO_PASS passed), unlabelled. Blind:
    the tests the real run reported (FAIL_TO_PASS first), at most ``blind_max_tests``."""
    from sweworld.tasks.fields import test_list

    report = json.loads(record.tests_status or "{}") if record.tests_status else {}
    known: dict[str, str] = {}
    order: list[str] = []
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        for outcome, status in _STATUS_OF.items():
            for test in (report.get(key) or {}).get(outcome, []) or []:
                if str(test) not in known:
                    order.append(str(test))
                known[str(test)] = status
    if mode == "blind":
        tests = order[:blind_max_tests]
        return {t: known[t] for t in tests}, set(tests)
    statuses: dict[str, str] = {}
    labelled: set[str] = set()
    f2p = set(test_list(task, "FAIL_TO_PASS"))
    for test in expected:
        if test in known:
            statuses[test] = known[test]
            labelled.add(test)
        elif record.resolved:
            statuses[test] = "PASSED"
            labelled.add(test)
        else:
            statuses[test] = "FAILED" if test in f2p else "PASSED"
    return statuses, labelled


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def swr_example(
    record: Any,
    mode: str,
    tokenizer: Any,
    *,
    config: Any = None,
    statuses_loss: bool = True,
    count: Callable[[str], int] | None = None,
) -> Example | None:
    """The SWR scorer example of ``record`` in ``mode`` (see the module docstring); None
    when the record has no task row."""
    from sweworld.reward.stages.simulated_tests import shown_candidate_patch
    from sweworld.reward.swr import (
        EMBEDDED_SWR_CONFIG,
        RESOLVED_CHOICES,
        SWR_PREFILL,
        build_swr_prompt,
        swr_resolved_prefix,
    )

    if not record.task:
        return None
    task = json.loads(record.task)
    if not isinstance(task, dict):
        return None
    count = count or (lambda text: len(_encode(tokenizer, text)))
    patch = shown_candidate_patch(record.patch, task, mode)
    prompt = build_swr_prompt(
        task, patch, mode=mode, config=config or EMBEDDED_SWR_CONFIG, count_tokens=count
    )
    statuses, labelled = swr_statuses(record, task, mode, prompt.expected_tests)
    answer = swr_resolved_prefix(statuses)
    text = render_chat(
        tokenizer, [*prompt.messages, {"role": "assistant", "content": answer}]
    )  # as choice_logprobs renders it (a template that strips trailing spaces: put back)
    if not text.endswith(answer) and text.endswith(answer.rstrip()):
        text += answer[len(answer.rstrip()) :]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    base = list(enc["input_ids"])
    full = {c: _encode(tokenizer, text + c) for c in RESOLVED_CHOICES}
    shared = min(_common_prefix(base, ids) for ids in full.values())
    chosen = "true" if record.resolved else "false"
    ids = full[chosen]
    labels = [IGNORE] * len(ids)
    for i in range(shared, len(ids)):
        labels[i] = ids[i]
    answer_start = len(text) - len(answer)
    if mode == "blind":  # generated: the whole report is the target
        start = answer_start + len(SWR_PREFILL)
        for i, (_lo, hi) in enumerate(enc["offset_mapping"][:shared]):
            if hi > start:
                labels[i] = ids[i]
    elif statuses_loss and labelled:
        spans = _status_spans(text, answer_start, statuses, labelled)
        for i, (lo, hi) in enumerate(enc["offset_mapping"][:shared]):
            if any(lo < s_hi and hi > s_lo for s_lo, s_hi in spans):
                labels[i] = ids[i]
    return Example(
        input_ids=ids,
        labels=labels,
        meta={
            "id": record.id,
            "repo": record.repo,
            "mode": mode,
            "kind": "swr",
            "resolved": bool(record.resolved),
            "answer_at": shared,
            "choices": {c: full[c][shared:] for c in RESOLVED_CHOICES},
            "tests": len(statuses),
        },
    )


def _status_spans(
    text: str, answer_start: int, statuses: Mapping[str, str], labelled: set[str]
) -> list[tuple[int, int]]:
    """Character spans of the labelled status values in the rendered answer."""
    spans = []
    pos = answer_start
    for test, status in statuses.items():
        marker = json.dumps(test, ensure_ascii=False) + ': "'
        at = text.find(marker, pos)
        if at < 0:
            break
        start = at + len(marker)
        pos = start + len(status)
        if test in labelled:
            spans.append((start, pos))
    return spans


def balance_classes(examples: list[Example], seed: int = 0) -> list[Example]:
    """The examples with the minority class of ``meta["resolved"]`` repeated (drawn without
    replacement, cycling) until both classes are equally many, shuffled."""
    rng = random.Random(seed)
    pos = [e for e in examples if e.meta.get("resolved")]
    neg = [e for e in examples if not e.meta.get("resolved")]
    out = list(examples)
    if pos and neg:
        small, big = (pos, neg) if len(pos) < len(neg) else (neg, pos)
        need = len(big) - len(small)
        pool: list[Example] = []
        while len(pool) < need:
            batch = list(small)
            rng.shuffle(batch)
            pool.extend(batch)
        out.extend(pool[:need])
    rng.shuffle(out)
    return out


# ------------------------------------------------------------------------------------------
# Packing and batching
# ------------------------------------------------------------------------------------------


def pack(examples: Iterable[Example], max_length: int) -> list[Example]:
    """Examples packed into rows of at most ``max_length`` tokens, first fit in order (an
    example longer than ``max_length`` gets a row of its own). A packed row's
    ``meta["segments"]`` lists its examples' lengths."""
    rows: list[Example] = []
    open_rows: list[Example] = []
    for ex in examples:
        placed = False
        for row in open_rows:
            if len(row) + len(ex) <= max_length:
                row.input_ids.extend(ex.input_ids)
                row.labels.extend(ex.labels)
                row.meta["segments"].append(len(ex))
                row.meta["ids"].append(ex.meta.get("id"))
                placed = True
                break
        if not placed:
            row = Example(
                list(ex.input_ids),
                list(ex.labels),
                {"segments": [len(ex)], "ids": [ex.meta.get("id")]},
            )
            rows.append(row)
            open_rows.append(row)
            # at most 8 rows stay open (first fit among them: linear in the examples)
            open_rows = [r for r in open_rows if len(r) < max_length][-8:]
    return rows


class Collator:
    """Pads a batch (right side). ``packing="isolated"``: a 4D attention mask that lets each
    packed example see only itself (causally) and positions restarting at each example;
    ``mask_dtype`` None gives a boolean mask (True: attend; for SDPA and flex attention),
    a float dtype an additive one (0 / most negative; eager attention)."""

    def __init__(self, pad_id: int, packing: str = "none", mask_dtype: Any = None):
        self.pad_id = int(pad_id)
        self.packing = packing
        self.mask_dtype = mask_dtype

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        import torch

        rows = [self._row(b) for b in batch]
        width = max(len(r[0]) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        out: dict[str, Any] = {}
        for i, (ids, labs, _) in enumerate(rows):
            input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            labels[i, : len(labs)] = torch.tensor(labs, dtype=torch.long)
        out["input_ids"], out["labels"] = input_ids, labels
        if self.packing != "isolated":
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (ids, _, _) in enumerate(rows):
                mask[i, : len(ids)] = 1
            out["attention_mask"] = mask
            return out
        allowed = torch.zeros((len(rows), 1, width, width), dtype=torch.bool)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (_ids, _, segments) in enumerate(rows):
            start = 0
            for size in segments:
                end = start + size
                allowed[i, 0, start:end, start:end] = torch.tril(
                    torch.ones((size, size), dtype=torch.bool)
                )
                positions[i, start:end] = torch.arange(size)
                start = end
            for pad in range(start, width):  # padding attends to itself (no empty softmax)
                allowed[i, 0, pad, pad] = True
        out["position_ids"] = positions
        if self.mask_dtype is None:
            out["attention_mask"] = allowed
        else:
            mask = torch.zeros(allowed.shape, dtype=self.mask_dtype)
            mask.masked_fill_(~allowed, torch.finfo(self.mask_dtype).min)
            out["attention_mask"] = mask
        return out

    @staticmethod
    def _row(item: Any) -> tuple[list[int], list[int], list[int]]:
        if isinstance(item, Example):
            ids, labels, meta = item.input_ids, item.labels, item.meta
        else:  # a dict row of a datasets.Dataset
            ids, labels, meta = item["input_ids"], item["labels"], item
        segments = list(meta.get("segments") or [len(ids)])
        return list(ids), list(labels), segments
