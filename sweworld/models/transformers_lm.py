"""An in-process backend: a causal LM loaded with transformers (local files only).

Decoding is done here, step by step with a KV cache, rather than by ``model.generate``, so
that each sample gets its own ``torch.Generator`` (sampling is reproducible per request and
seed, whatever else is in the batch's random stream), stop strings are checked as tokens
arrive, finished rows leave the batch, and a time budget can stop a call.

Batching: the samples of one request share one prefill (its cache is copied ``n`` times);
several requests are batched with left padding (``max_batch`` rows). Batched and unbatched
runs compute the same function, but float rounding in larger matrix products can differ in
the last bits, so on rare near-ties greedy decoding may pick another token; ``max_batch=1``
makes every request's result independent of the others.

``choice_logprobs`` (:mod:`~sweworld.models.transformers_scoring`) scores whole
choices by teacher forcing in one forward pass, reusing the previous context's KV cache.
"""

from __future__ import annotations

import copy
import inspect
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweworld.models.base import (
    BaseLM,
    ContextTooLong,
    Generation,
    GenerationRequest,
    LMError,
    LMTimeout,
    Messages,
    cut_at_stop,
    sample_seed,
)
from sweworld.models.fast_decode import JSONEndWatch, growing_layer_class, quantize_int8
from sweworld.models.transformers_load import apply_adapter, load_model
from sweworld.models.transformers_scoring import ChoiceScoringMixin

#: Prompt tokens read per forward pass when a generation has a time budget (the budget is
#: checked between passes, so a long prompt cannot hold the model past it).
PREFILL_CHUNK = 512


@dataclass
class _Row:
    """One sample being decoded."""

    req: int
    sample: int
    ids: list[int]
    temperature: float
    max_new: int
    stop: tuple[str, ...]
    seed: int | None
    generator: Any = None
    watch: JSONEndWatch | None = None
    out: list[int] = field(default_factory=list)
    finish: str | None = None
    stop_hit: str | None = None
    latency: float = 0.0
    batch_rows: int = 0
    reused: int = 0  # prompt tokens whose KV cache came from the previous call


class TransformersLM(ChoiceScoringMixin, BaseLM):
    """A causal LM with its tokenizer's chat template, run in this process (``count_tokens``
    is exact: its own tokenizer).

    ``choice_logprobs`` is supported (whole choices, teacher forcing).

    Args:
        model_path: a folder written by ``save_pretrained`` (config, safetensors, tokenizer)
            or a ``.gguf`` file (dequantized at load; slow, see ``embedded.py``).
        adapter: a peft LoRA adapter folder, applied on top (merged by default).
        device: torch device ("cpu", "cuda", ...).
        dtype: "float32", "bfloat16", "float16" (or a torch dtype).
        threads: ``torch.set_num_threads`` (process-wide) when given.
        max_context: the context window; default the model's ``max_position_embeddings``.
        max_time: default time budget in seconds for one ``generate`` call (None: unbounded,
            only ``max_tokens`` bounds it). When it runs out, unfinished samples return what
            they have with ``finish_reason="timeout"`` (or :class:`LMTimeout` is raised with
            ``raise_on_timeout=True``).
        max_batch: most samples decoded together.
        max_batch_tokens: most (padded) prompt tokens prefilled together.
        merge_adapter: merge the LoRA weights into the model (faster; same outputs).
        name: the model's name in ``Generation.model``; default the folder name (+ adapter).
        info: extra entries for every ``Generation.info``.
        prefix_cache: ``choice_logprobs`` keeps the KV cache of its last context (and
            ``generate`` that of a call's prompt, when the call has one prompt) and reuses it
            for the tokens the next call's context shares: scoring a report test by test, or
            the answer just generated, then runs only the new tokens. Costs the memory of one
            context's cache. ``generate`` also starts from it: a prompt that shares its first
            tokens with the previous call's prompt (the system prompt and task of the next
            step of a session) prefills only the rest.
        quantize: None (weights as loaded) or ``"int8"``: dynamic int8 quantization of the
            linear layers (CPU, float32 only), after the adapter is merged.
        json_stop: end a sample as soon as its answer's first JSON object is complete (an
            answer that starts with ``{``, the assistant prefill included; see
            :class:`~sweworld.models.fast_decode.JSONEndWatch`), instead of decoding on to
            ``max_tokens`` or the end token. ``Generation.info["stop_string"]`` is then
            ``"<json end>"``.
    """

    exact_tokens = True

    def __init__(
        self,
        model_path: str | Path,
        *,
        adapter: str | Path | None = None,
        device: str = "cpu",
        dtype: Any = "float32",
        threads: int | None = None,
        max_context: int | None = None,
        max_time: float | None = None,
        raise_on_timeout: bool = False,
        max_batch: int = 8,
        max_batch_tokens: int = 16384,
        merge_adapter: bool = True,
        name: str | None = None,
        info: dict[str, Any] | None = None,
        prefix_cache: bool = True,
        quantize: str | None = None,
        json_stop: bool = True,
    ):
        import torch

        self._torch = torch
        self._lock = threading.RLock()  # one generation at a time
        self._tok_lock = threading.Lock()  # fast tokenizers are not safe across threads
        if threads:
            torch.set_num_threads(int(threads))
        self.model_path = Path(model_path)
        self.adapter = Path(adapter) if adapter else None
        self.device = device
        self.max_time = max_time
        self.raise_on_timeout = raise_on_timeout
        self.max_batch = max(1, int(max_batch))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        self._extra_info = {"adapter": Path(adapter).name if adapter else None}
        self._extra_info.update(info or {})
        started = time.perf_counter()
        self.tokenizer, self.model = load_model(self._torch, self.model_path, dtype, device)
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize must be None or 'int8', not {quantize!r}")
        if quantize and self.adapter is not None and not merge_adapter:
            raise ValueError("quantize needs the adapter merged (merge_adapter=True)")
        if self.adapter is not None:
            self.model = apply_adapter(self.model, self.adapter, merge_adapter)
        self.model.eval()
        self.quantize = quantize
        if quantize == "int8":
            self.model = quantize_int8(self.model)
            self._extra_info["quantize"] = quantize
        self.json_stop = bool(json_stop)
        self._pieces: dict[int, str] = {}  # token id -> its text, for the JSON watch
        self.load_seconds = time.perf_counter() - started

        if name is None:
            stem = self.model_path.stem if self.model_path.is_file() else self.model_path.name
            name = stem + (f"+{self.adapter.name}" if self.adapter is not None else "")
        self.name = name
        self.context_window = self._context_window(max_context)
        self._eos = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self._pad = int(pad) if pad is not None else min(self._eos) if self._eos else 0
        self._cache_kw = self._cache_kwarg()
        self.prefix_cache = bool(prefix_cache)
        self._prefix: tuple[tuple[int, ...], Any, Any] | None = None
        self._closed = False

    # ------------------------------------------------------------------ loading

    def _context_window(self, max_context: int | None) -> int:
        if max_context:
            return int(max_context)
        config = getattr(self.model, "config", None)
        for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(limit, int) and 0 < limit < 10_000_000:
            return limit
        return 2048

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen_config = getattr(self.model, "generation_config", None)
        for value in (
            getattr(gen_config, "eos_token_id", None),
            self.tokenizer.eos_token_id,
        ):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    def _cache_kwarg(self) -> str:
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        params = inspect.signature(base.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    def _new_cache(self, reserve: int = 0) -> Any:
        """A KV cache whose full-attention layers append in place (room for ``reserve``
        positions) instead of concatenating at every step."""
        from transformers import DynamicCache

        try:
            cache = DynamicCache(config=self.model.config)
        except TypeError:  # older transformers
            return DynamicCache()
        layer_class = growing_layer_class()
        layers = getattr(cache, "layers", None)
        if layer_class is None or not isinstance(layers, list):
            return cache
        for index, layer in enumerate(layers):
            if type(layer) is layer_class.__base__:
                grown = layer_class()
                grown.reserve = reserve
                layers[index] = grown
        return cache

    # ------------------------------------------------------------------ tokens

    def count_tokens(self, text: str) -> int:
        """Exact number of tokens of ``text`` (no special tokens added)."""
        with self._tok_lock:
            return len(self._tokenizer()(text, add_special_tokens=False)["input_ids"])

    def _tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise LMError(f"{self.name}: the model was closed")
        return self.tokenizer

    def render_prompt(self, messages: Messages) -> str:
        """The prompt text the model sees: its chat template with the assistant turn opened.

        When the last message is the assistant's, the model continues it (a prefill: the
        generated text is what comes after that message's content)."""
        tokenizer = self._tokenizer()
        prefill = bool(messages) and messages[-1].get("role") == "assistant"
        if getattr(tokenizer, "chat_template", None):
            with self._tok_lock:
                return tokenizer.apply_chat_template(
                    messages,
                    add_generation_prompt=not prefill,
                    continue_final_message=prefill,
                    tokenize=False,
                )
        lines = [f"{m['role']}: {m['content']}\n" for m in messages]
        if prefill:
            return "".join(lines).rstrip("\n")
        return "".join(lines) + "assistant: "

    def encode_messages(self, messages: Messages) -> list[int]:
        """Token ids of the rendered prompt."""
        text = self.render_prompt(messages)
        with self._tok_lock:
            return list(self._tokenizer()(text, add_special_tokens=False)["input_ids"])

    # ------------------------------------------------------------------ generation

    def generate(
        self, requests: Sequence[GenerationRequest], *, max_time: float | None = None
    ) -> list[list[Generation]]:
        """Generate ``n`` samples for each request. ``max_time`` (seconds) overrides the
        instance's budget for this call. Raises :class:`ContextTooLong` (before generating
        anything) when a prompt leaves no room in the context window; otherwise the
        completion budget is ``min(max_tokens, context_window - prompt_tokens)``."""
        if self._closed:
            raise LMError(f"{self.name}: the model was closed")
        requests = list(requests)
        if not requests:
            return []
        budget = self.max_time if max_time is None else max_time
        encoded = [self.encode_messages(r.messages) for r in requests]
        for ids in encoded:
            if len(ids) >= self.context_window:
                raise ContextTooLong(
                    f"{self.name}: the prompt has {len(ids)} tokens but the context window is "
                    f"{self.context_window} tokens (room is needed for at least one new token); "
                    "shorten the prompt",
                    prompt_tokens=len(ids),
                    context_window=self.context_window,
                )
        rows = self._make_rows(requests, encoded)
        with self._lock:
            start = time.monotonic()
            deadline = None if budget is None else start + float(budget)
            for batch in self._batches(rows):
                self._run_batch(batch, deadline)
        if self.raise_on_timeout and any(r.finish == "timeout" for r in rows):
            raise LMTimeout(f"{self.name}: generation did not finish within {budget} s")
        return self._collect(requests, encoded, rows)

    def _make_rows(self, requests: list[GenerationRequest], encoded: list[list[int]]) -> list[_Row]:
        torch = self._torch
        rows: list[_Row] = []
        for index, (req, ids) in enumerate(zip(requests, encoded, strict=True)):
            max_new = min(req.max_tokens, self.context_window - len(ids))
            base_seed = None
            if req.temperature > 0:
                base_seed = req.seed if req.seed is not None else secrets.randbits(63)
            prefill = ""
            if req.messages and req.messages[-1].get("role") == "assistant":
                prefill = str(req.messages[-1].get("content", ""))
            for sample in range(req.n):
                seed = None if base_seed is None else sample_seed(base_seed, sample)
                generator = None
                if seed is not None:
                    generator = torch.Generator(device=self.device).manual_seed(seed)
                rows.append(
                    _Row(
                        req=index,
                        sample=sample,
                        ids=ids,
                        temperature=float(req.temperature),
                        max_new=max_new,
                        stop=req.stop,
                        seed=seed,
                        generator=generator,
                        watch=JSONEndWatch(prefill) if self.json_stop else None,
                    )
                )
        return rows

    def _batches(self, rows: list[_Row]) -> list[list[_Row]]:
        """Rows grouped for decoding: samples of a request stay together, requests of similar
        prompt length are batched, at most ``max_batch`` rows and ``max_batch_tokens`` padded
        prompt tokens per batch."""
        order = sorted(rows, key=lambda r: (len(r.ids), r.req, r.sample))
        batches: list[list[_Row]] = []
        current: list[_Row] = []
        prompts: set[int] = set()
        for row in order:  # ascending prompt length: the new row sets the padded width
            if current:
                padded = len(prompts | {row.req}) * len(row.ids)
                if len(current) >= self.max_batch or padded > self.max_batch_tokens:
                    batches.append(current)
                    current, prompts = [], set()
            current.append(row)
            prompts.add(row.req)
        if current:
            batches.append(current)
        return batches

    def _run_batch(self, rows: list[_Row], deadline: float | None) -> None:
        torch = self._torch
        started = time.monotonic()
        if deadline is not None and started >= deadline:
            for row in rows:
                row.finish = "timeout"
            return
        for row in rows:
            row.batch_rows = len(rows)
        with torch.inference_mode():
            # prefill each distinct prompt once (left padding)
            slot: dict[tuple[int, ...], int] = {}
            prompts: list[list[int]] = []
            keys = [tuple(row.ids) for row in rows]
            for row, key in zip(rows, keys, strict=True):
                if key not in slot:
                    slot[key] = len(prompts)
                    prompts.append(row.ids)
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for i, prompt in enumerate(prompts):
                ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
                mask[i, width - len(prompt) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            # without padding the mask is all ones: leaving it out lets attention take its
            # faster path (about a third faster per step at ~1,400 tokens of context)
            padded = any(len(p) < width for p in prompts)
            cache, start, logits = None, 0, None
            if self.prefix_cache and len(prompts) == 1:  # the previous prompt's first tokens
                cache, start, last = self._reuse(prompts[0])
                logits = None if last is None else last[None]
                for row in rows:
                    row.reused = start
            if cache is None:
                cache = self._new_cache(reserve=width + max(r.max_new for r in rows))
            if logits is None:
                logits = self._prefill(
                    ids, mask if padded else None, positions, cache, start, deadline
                )
                if logits is None:  # the deadline passed while the prompt was read
                    for row in rows:
                        row.finish, row.latency = "timeout", time.monotonic() - started
                    return
            if self.prefix_cache and len(prompts) == 1:
                # the prompt's state, for a choice_logprobs call that continues it
                self._prefix = (tuple(prompts[0]), copy.deepcopy(cache), logits[0].clone())
            select = torch.tensor([slot[key] for key in keys], dtype=torch.long)
            if len(prompts) != len(rows) or not torch.equal(select, torch.arange(len(rows))):
                cache.reorder_cache(select.to(self.device))
                logits = logits[select]
                mask = mask[select]
            next_pos = mask.sum(-1)
            active = list(rows)
            max_stop = {id(r): max((len(s) for s in r.stop), default=0) for r in rows}

            while True:
                tokens = self._choose(active, logits)
                now = time.monotonic()
                keep: list[int] = []
                for i, (row, token) in enumerate(zip(active, tokens, strict=True)):
                    row.out.append(token)
                    ended = token in self._eos
                    if ended or (row.stop and self._stop_seen(row, max_stop[id(row)])):
                        row.finish = "stop"
                    elif row.watch is not None and row.watch.feed(self._piece(token)):
                        row.finish, row.stop_hit = "stop", "<json end>"
                    elif len(row.out) >= row.max_new:
                        row.finish = "length"
                    elif deadline is not None and now >= deadline:
                        row.finish = "timeout"
                    if row.finish is None:
                        keep.append(i)
                    else:
                        row.latency = now - started
                if not keep:
                    break
                if len(keep) < len(active):
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.reorder_cache(index.to(self.device))
                    mask = mask[index]
                    next_pos = next_pos[index]
                    active = [active[i] for i in keep]
                    tokens = [tokens[i] for i in keep]
                step = torch.tensor(tokens, dtype=torch.long).unsqueeze(-1)
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype)], dim=-1)
                logits = self._forward(
                    step, mask if padded else None, next_pos.unsqueeze(-1), cache
                )
                next_pos = next_pos + 1

    def _prefill(
        self, ids: Any, mask: Any, positions: Any, cache: Any, start: int, deadline: float | None
    ) -> Any:
        """Logits after reading the prompt from ``start``: in one pass, or with a deadline
        in chunks of :data:`PREFILL_CHUNK` tokens, the deadline checked between them (None
        once it passed: one pass over an 8k-token prompt takes ~20 s on two cores)."""
        width = ids.shape[1]
        if deadline is None or width - start <= PREFILL_CHUNK:
            return self._forward(ids[:, start:], mask, positions[:, start:], cache)
        logits = None
        for begin in range(start, width, PREFILL_CHUNK):
            if time.monotonic() >= deadline:
                return None
            end = min(begin + PREFILL_CHUNK, width)
            part = None if mask is None else mask[:, :end]
            logits = self._forward(ids[:, begin:end], part, positions[:, begin:end], cache)
        return logits

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        kwargs = {self._cache_kw: cache}
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=None if mask is None else mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1, :].float()

    def _choose(self, rows: list[_Row], logits: Any) -> list[int]:
        torch = self._torch
        greedy = logits.argmax(dim=-1).tolist()
        out: list[int] = []
        for i, row in enumerate(rows):
            if row.temperature <= 0:
                out.append(int(greedy[i]))
                continue
            probs = torch.softmax(logits[i] / row.temperature, dim=-1)
            out.append(int(torch.multinomial(probs, 1, generator=row.generator).item()))
        return out

    def _piece(self, token: int) -> str:
        """The text of one token (cached): what the JSON watch reads. A token holding part
        of a multi-byte character reads as U+FFFD, never as a quote or a brace."""
        piece = self._pieces.get(token)
        if piece is None:
            with self._tok_lock:
                piece = self.tokenizer.decode([token], skip_special_tokens=True)
            self._pieces[token] = piece
        return piece

    def _stop_seen(self, row: _Row, longest: int) -> bool:
        tail = row.out[-(longest + 8) :]
        with self._tok_lock:
            text = self.tokenizer.decode(tail, skip_special_tokens=True)
        return any(s in text for s in row.stop)

    def _collect(
        self, requests: list[GenerationRequest], encoded: list[list[int]], rows: list[_Row]
    ) -> list[list[Generation]]:
        out: list[list[Generation]] = [[] for _ in requests]
        for row in sorted(rows, key=lambda r: (r.req, r.sample)):
            generated = [t for t in row.out if t not in self._eos]
            with self._tok_lock:
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
            text, hit = cut_at_stop(text, row.stop)
            info = {
                "backend": "transformers",
                "seed": row.seed,
                "sample": row.sample,
                "batch_rows": row.batch_rows,
                "prompt_tokens_reused": row.reused,
            }
            hit = hit or row.stop_hit
            if hit is not None:
                info["stop_string"] = hit
            if row.max_new < requests[row.req].max_tokens:
                info["max_tokens_clipped_to"] = row.max_new
            info.update(self._extra_info)
            out[row.req].append(
                Generation(
                    text=text,
                    finish_reason=row.finish or "timeout",
                    prompt_tokens=len(encoded[row.req]),
                    completion_tokens=len(row.out),
                    latency_s=row.latency,
                    model=self.name,
                    info=info,
                )
            )
        return out

    def close(self) -> None:
        """Drop the model and tokenizer (memory is freed once no other reference holds them)."""
        with self._lock, self._tok_lock:
            self._closed = True
            self._prefix = None
            self.model = None
            self.tokenizer = None
