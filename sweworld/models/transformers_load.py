"""Loading the model of :class:`~sweworld.models.transformers_lm.TransformersLM`: its
tokenizer and weights from a local folder or GGUF file, in the dtype asked for, and a peft
adapter over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweworld.models.base import LMUnavailable

__all__ = ["DTYPES", "apply_adapter", "load_model"]

#: dtype names accepted by :func:`load_model` -> the torch attribute.
DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def load_model(torch: Any, path: Path, dtype: Any, device: str) -> tuple[Any, Any]:
    """The tokenizer and the model (on ``device``) at ``path``: a folder written by
    ``save_pretrained`` or a ``.gguf`` file, local files only; ``dtype`` a name of
    :data:`DTYPES` or a torch dtype. :class:`LMUnavailable` when nothing loads there."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a hard requirement here
        raise LMUnavailable(f"transformers is not installed: {exc}") from exc
    kwargs: dict[str, Any] = {"local_files_only": True}
    if path.is_file() and path.suffix == ".gguf":
        kwargs["gguf_file"] = path.name
        source = path.parent
    elif path.is_dir() and (path / "config.json").is_file():
        source = path
    else:
        raise LMUnavailable(
            f"no model at {path}: expected a folder written by save_pretrained "
            "(config.json, weights, tokenizer) or a .gguf file"
        )
    if isinstance(dtype, str):
        key = DTYPES.get(dtype.lower())
        if key is None:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(set(DTYPES))}")
        torch_dtype = getattr(torch, key)
    else:
        torch_dtype = dtype
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch_dtype, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise LMUnavailable(f"cannot load the model at {path}: {exc}") from exc
    return tokenizer, model.to(device)


def apply_adapter(model: Any, adapter: Path, merge: bool) -> Any:
    """``model`` with the peft adapter at ``adapter`` (merged into its weights with
    ``merge``). :class:`LMUnavailable` when there is none or peft is missing."""
    if not (adapter / "adapter_config.json").is_file():
        raise LMUnavailable(f"no peft adapter at {adapter} (adapter_config.json is missing)")
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise LMUnavailable(f"loading adapter {adapter} needs peft: pip install peft") from exc
    try:
        peft_model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise LMUnavailable(f"cannot load the adapter at {adapter}: {exc}") from exc
    return peft_model.merge_and_unload() if merge else peft_model
