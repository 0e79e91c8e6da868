"""``choice_logprobs`` for :class:`~sweworld.models.transformers_lm.TransformersLM`:
whole choices scored by teacher forcing, in one forward pass per call.

The prompt is rendered exactly as ``generate`` renders a prefilled assistant turn. The
context's tokens not already in the kept KV cache (the previous call's context, or the last
single-prompt ``generate`` call's prompt, cut to what they share) and every choice's tokens
run in one pass, the choices packed side by side under a tree-shaped attention mask; the
cache is then cut back to the context and kept. On a CPU a forward pass costs about the same
for one token as for a few dozen (the weights are read once per pass), so scoring a report
test by test costs one short pass per test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sweworld.models.base import (
    ContextTooLong,
    LMError,
    Messages,
    assistant_prefix,
    check_choices,
)

__all__ = ["ChoiceScoringMixin", "crop_cache"]


def crop_cache(cache: Any, length: int) -> bool:
    """Cut every layer of a ``DynamicCache`` to its first ``length`` positions, in place;
    False (nothing changed) for caches whose layers are not plain full-attention layers
    (sliding windows, older transformers)."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return False
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list) or not all(isinstance(x, DynamicLayer) for x in layers):
        return False
    if any(type(x).__name__ != "GrowingLayer" and type(x) is not DynamicLayer for x in layers):
        return False
    for layer in layers:
        if getattr(layer, "keys", None) is not None and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]
    return True


class ChoiceScoringMixin:
    """``choice_logprobs`` for a class with ``model``, ``tokenizer``, ``render_prompt``,
    ``_forward``, ``_new_cache``, ``_lock``, ``_tok_lock``, ``_torch``, ``device``,
    ``_cache_kw``, ``context_window``, ``prefix_cache`` and ``_prefix``
    (:class:`~sweworld.models.transformers_lm.TransformersLM`)."""

    # attributes provided by the host class
    model: Any
    name: str
    context_window: int
    device: str
    prefix_cache: bool
    _prefix: Any
    _closed: bool
    _cache_kw: str
    _lock: Any
    _tok_lock: Any
    _torch: Any
    render_prompt: Callable[[Messages], str]
    _tokenizer: Callable[[], Any]
    _new_cache: Callable[..., Any]

    supports_logprobs = True

    def choice_logprobs(
        self, messages: Messages, choices: Sequence[str], *, prefix: str = ""
    ) -> dict[str, float]:
        """Log-probability of each whole choice (the sum over its tokens, teacher forcing)
        continuing the assistant's answer that starts with ``prefix``.

        The prompt is rendered as ``generate`` renders a prefilled answer. Tokenizers merge
        text across the boundary (``": "`` + ``"true"`` becomes ``":"`` + ``" true"``), so
        the scored context is the longest token prefix shared by the prompt alone and by
        every prompt + choice; each choice's score is that of the tokens after it. The text
        in that gap (here the space) is the same for every choice, so the ratios between
        choices, hence :func:`~sweworld.models.base.choice_probabilities`, are those
        of the choices themselves. Raises :class:`ContextTooLong` when the prompt and the
        longest choice do not fit the context window.
        """
        if self._closed:
            raise LMError(f"{self.name}: the model was closed")
        options = check_choices(choices)
        text = self._scoring_prompt(messages, prefix)
        with self._tok_lock:
            encode = self._tokenizer()
            base = list(encode(text, add_special_tokens=False)["input_ids"])
            full = [list(encode(text + c, add_special_tokens=False)["input_ids"]) for c in options]
        shared = len(base)
        for ids in full:
            common = 0
            limit = min(shared, len(ids))
            while common < limit and ids[common] == base[common]:
                common += 1
            shared = common
        if shared == 0:
            raise LMError(f"{self.name}: cannot score choices after an empty prompt")
        longest = max(len(ids) for ids in full)
        if longest > self.context_window:
            raise ContextTooLong(
                f"{self.name}: the prompt and a choice take {longest} tokens but the context "
                f"window is {self.context_window} tokens; shorten the prompt",
                prompt_tokens=len(base),
                context_window=self.context_window,
            )
        tails = [ids[shared:] for ids in full]
        with self._lock:
            scores = self._score_tails(base[:shared], tails)
        return dict(zip(options, scores, strict=True))

    def _scoring_prompt(self, messages: Messages, prefix: str) -> str:
        chat, answer = assistant_prefix(messages, prefix)
        if not answer:
            return self.render_prompt(chat)
        text = self.render_prompt([*chat, {"role": "assistant", "content": answer}])
        if not text.endswith(answer):  # a template that strips the answer's trailing spaces
            kept = answer.rstrip()
            if text.endswith(kept):
                text += answer[len(kept) :]
        return text

    def _score_tails(self, context: list[int], tails: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each tail after ``context``, in one forward pass: the
        context's tokens not already in the reused cache, then every tail, packed in one row
        under a tree-shaped attention mask (each tail sees the context and itself) with the
        tails' positions all starting where the context ends. The cache is then cut back to
        the context and kept for the next call (``prefix_cache``). On a CPU a forward pass
        costs about the same for one token as for a few dozen (the weights are read once),
        so this is ~5x cheaper than a pass per tail."""
        torch = self._torch
        if not getattr(self, "_tree_ok", True):
            return self._score_tails_plainly(context, tails)
        with torch.inference_mode():
            cache, start, last = self._reuse(context)
            new = context[start:]
            segments = [t[:-1] for t in tails]
            packed = new + [token for segment in segments for token in segment]
            logprobs = None
            if packed:
                positions = list(range(start, len(context)))
                for segment in segments:
                    positions.extend(range(len(context), len(context) + len(segment)))
                try:
                    mask = self._tree_mask(start, len(new), [len(s) for s in segments])
                    out = self.model(
                        input_ids=torch.tensor([packed], dtype=torch.long).to(self.device),
                        position_ids=torch.tensor([positions], dtype=torch.long).to(self.device),
                        attention_mask=mask.to(self.device),
                        use_cache=True,
                        **{self._cache_kw: cache},
                    )
                except (TypeError, ValueError, RuntimeError, NotImplementedError):
                    # a model that takes no custom 4D mask: score each choice plainly
                    self._tree_ok = False
                    return self._score_tails_plainly(context, tails)
                logprobs = torch.log_softmax(out.logits[0].float(), dim=-1)
                if new:
                    last = out.logits[0, len(new) - 1].float()
            first = torch.log_softmax(last, dim=-1)
            scores = [float(first[t[0]]) if t else 0.0 for t in tails]
            offset = len(new)
            for i, tail in enumerate(tails):
                for j, token in enumerate(tail[1:]):
                    assert logprobs is not None
                    scores[i] += float(logprobs[offset + j, token])
                offset += len(segments[i])
            keep = self.prefix_cache and crop_cache(cache, len(context))
            self._prefix = (tuple(context), cache, last) if keep else None
        return scores

    def _score_tails_plainly(self, context: list[int], tails: list[list[int]]) -> list[float]:
        """The same scores without a cache or a custom mask: context + choice run whole, one
        choice at a time (slow; for models that refuse the tree-shaped mask)."""
        torch = self._torch
        scores: list[float] = []
        with torch.inference_mode():
            for tail in tails:
                ids = torch.tensor([context + tail], dtype=torch.long).to(self.device)
                logits = self.model(input_ids=ids, use_cache=False).logits[0].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                scores.append(
                    sum(float(logprobs[len(context) + j - 1, t]) for j, t in enumerate(tail))
                )
        self._prefix = None
        return scores

    def _tree_mask(self, past: int, new: int, segments: list[int]) -> Any:
        """Additive 4D mask (1, 1, queries, past + queries): the context's new tokens are
        causal; each segment sees the whole context and its own earlier tokens."""
        torch = self._torch
        queries = new + sum(segments)
        dtype = getattr(self.model, "dtype", torch.float32)
        allowed = torch.zeros((queries, past + queries), dtype=torch.bool)
        allowed[:, :past] = True
        context_end = past + new
        allowed[:new, past:context_end] = torch.tril(torch.ones((new, new), dtype=torch.bool))
        row = new
        for size in segments:
            allowed[row : row + size, :context_end] = True
            block = torch.tril(torch.ones((size, size), dtype=torch.bool))
            allowed[row : row + size, past + row : past + row + size] = block
            row += size
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[None, None]

    def _reuse(self, context: list[int]) -> tuple[Any, int, Any]:
        """A KV cache holding the first ``start`` tokens of ``context`` (the previous call's,
        cut to what the two contexts share, when ``prefix_cache`` is on; else a new one), and
        the logits after the whole context when ``start == len(context)`` (else None)."""
        entry, self._prefix = self._prefix, None
        if entry is not None:
            ids, cache, last = entry
            common = 0
            limit = min(len(ids), len(context))
            while common < limit and ids[common] == context[common]:
                common += 1
            if common == len(ids) == len(context):
                return cache, common, last
            common = min(common, len(context) - 1)  # at least one token to run: its logits
            if common > 0 and crop_cache(cache, common):
                return cache, common, None
        return self._new_cache(reserve=len(context) + 256), 0, None
