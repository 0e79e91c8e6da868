"""Speed options of the in-process backend (``TransformersLM``).

- :class:`JSONEndWatch`: ends a sample as soon as its answer's JSON object is complete.
  An SWT answer is one object ``{"stdout", "stderr", "exit_code"}``; a small model often
  writes on after it (another object, prose) until ``max_tokens``, and every such token
  costs a decoding step. The watch reads the answer as it is generated (the assistant
  prefill included), linearly, one token's text at a time.
- :func:`quantize_int8`: dynamic int8 quantization of the ``nn.Linear`` layers (weights
  int8 per channel, activations quantized per call), for CPU inference. A LoRA adapter must
  be merged into the weights first (``merge_and_unload``); the caller does that.
- :func:`growing_layer_class`: a KV-cache layer that appends in place.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

__all__ = [
    "QUANTIZE_CHOICES",
    "JSONEndWatch",
    "growing_layer_class",
    "quantize_int8",
]

#: Values of ``TransformersLM(quantize=...)``.
QUANTIZE_CHOICES = (None, "int8")

_STRICT = json.JSONDecoder(strict=False)


class JSONEndWatch:
    """Tells when the first top-level JSON object of an answer is complete.

    Fed the answer's text piece by piece (:meth:`feed`), it tracks strings (with escapes)
    and brace / bracket depth. Only an answer whose first non-blank character is ``{`` is
    watched; any other answer never ends here. When the depth returns to zero, the object
    is read with Python's JSON decoder (raw control characters in strings allowed, as the
    answer readers accept them): only an object that reads is complete. An object that does
    not read (a model's unescaped quote, say) turns the watch off for the rest of the
    answer, so broken answers run to their usual end and the lenient readers see them whole.
    Linear in the answer: each character is scanned once, the decoder runs at most once.
    """

    __slots__ = ("_buffer", "_depth", "_escape", "_in_string", "_started", "done", "off")

    def __init__(self, prefix: str = "") -> None:
        self._buffer: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._started = False
        self.done = False
        self.off = False
        if prefix:
            self.feed(prefix)

    def feed(self, text: str) -> bool:
        """Read ``text`` (the next piece of the answer); True once the object is complete."""
        if self.done or self.off or not text:
            return self.done
        for index, char in enumerate(text):
            if not self._started:
                if char.isspace():
                    continue
                if char != "{":
                    self.off = True
                    return False
                self._started = True
                self._buffer.append(text[index:])
                self._depth = 1
                return self._scan(text, index + 1)
            self._buffer.append(text)
            return self._scan(text, 0)
        return False

    def _scan(self, text: str, start: int) -> bool:
        for index in range(start, len(text)):
            char = text[index]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif char == "\\":
                    self._escape = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return self._closed()
        return False

    def _closed(self) -> bool:
        answer = "".join(self._buffer)
        self._buffer = []
        try:
            value, _ = _STRICT.raw_decode(answer, 0)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            self.done = True
        else:
            self.off = True
        return self.done


def quantize_int8(model: Any) -> Any:
    """``model`` with its ``nn.Linear`` layers replaced by dynamically quantized int8 ones
    (CPU only; the embeddings and norms stay in float). A peft model is refused: merge its
    adapter first, or the LoRA branches would be quantized apart from the weights they
    modify. Raises ``ValueError`` for a model that is not float32 on the CPU."""
    import torch

    if hasattr(model, "peft_config"):
        raise ValueError("merge the LoRA adapter (merge_and_unload) before quantizing")
    parameter = next(model.parameters(), None)
    if parameter is not None and (
        parameter.device.type != "cpu" or parameter.dtype != torch.float32
    ):
        raise ValueError(
            f"int8 dynamic quantization needs a float32 model on the CPU, not "
            f"{parameter.dtype} on {parameter.device}"
        )
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch announces the move of this API to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False)


_GROWING_LAYER: Any = None


def growing_layer_class() -> Any:
    """A transformers ``DynamicLayer`` that writes new keys and values into a buffer with
    spare room and hands out views, rather than concatenating the whole cache at every
    step (which, at ~1,500 tokens of context, made each decoding step up to ~40% slower on
    CPU). Same values, same results. None when this transformers has no ``DynamicLayer``."""
    global _GROWING_LAYER
    if _GROWING_LAYER is not None:
        return _GROWING_LAYER
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return None

    class GrowingLayer(DynamicLayer):
        reserve = 0
        _keys_buffer: Any = None
        _values_buffer: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            length = self.get_seq_length()
            total = length + key_states.shape[-2]
            keys = self._keys_buffer
            # the buffer is still ours unless the cache was reordered or cropped meanwhile
            usable = (
                keys is not None
                and keys.shape[-2] >= total
                and keys.shape[:2] == key_states.shape[:2]
                and (length == 0 or self.keys.data_ptr() == keys.data_ptr())
            )
            if not usable:
                room = max(total + 256, self.reserve)
                keys = key_states.new_empty((*key_states.shape[:2], room, key_states.shape[-1]))
                values = value_states.new_empty(
                    (*value_states.shape[:2], room, value_states.shape[-1])
                )
                if length:
                    keys[:, :, :length] = self.keys
                    values[:, :, :length] = self.values
                self._keys_buffer, self._values_buffer = keys, values
            self._keys_buffer[:, :, length:total] = key_states
            self._values_buffer[:, :, length:total] = value_states
            self.keys = self._keys_buffer[:, :, :total]
            self.values = self._values_buffer[:, :, :total]
            return self.keys, self.values

        def reset(self) -> None:
            self._keys_buffer = self._values_buffer = None
            super().reset()

    _GROWING_LAYER = GrowingLayer
    return GrowingLayer
