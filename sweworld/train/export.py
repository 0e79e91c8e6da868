"""Writing a trained adapter: the peft adapter, the tokenizer, ``sweworld-adapter.json``
and, with ``--merge``, the merged model.

Layout of ``<out>``::

    adapter_config.json  adapter_model.safetensors    the LoRA adapter (peft's format;
                                                      vLLM's --lora-modules reads it too)
    tokenizer files, chat template                    the base model's
    sweworld-adapter.json                             what it is and how it was trained
    merged/                                           --merge: base + adapter as one model
                                                      (safetensors, config, tokenizer, chat
                                                      template): transformers and vLLM load it
    checkpoints/                                      Trainer checkpoints (resume)
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

__all__ = ["METADATA_FILE", "export_adapter", "export_merged", "prompt_version"]

METADATA_FILE = "sweworld-adapter.json"


def prompt_version(target: str) -> str:
    """The prompt format version a model of ``target`` is trained for."""
    if target == "swt":
        from sweworld.transition.prompt import PROMPT_VERSION

        return PROMPT_VERSION
    from sweworld.reward.swr import SWR_FORMAT_VERSION

    return SWR_FORMAT_VERSION


def _versions() -> dict[str, str]:
    import importlib.metadata

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "accelerate", "datasets"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def export_adapter(
    model: Any,
    tokenizer: Any,
    out: str | Path,
    *,
    config: Any,
    base_model: str,
    metrics: dict[str, Any],
    data: dict[str, Any],
) -> Path:
    """Save the peft ``model``'s adapter, the tokenizer and ``sweworld-adapter.json`` in
    ``out``. Returns ``out``."""
    from sweworld.transition.context import CONTEXT_VERSION

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    meta = {
        "format": "sweworld-adapter/1",
        "target": config.target,
        "base_model": base_model,
        "prompt_version": prompt_version(config.target),
        "context_version": CONTEXT_VERSION if config.target == "swt" else None,
        "answer": 'generator: JSON after the prefill {"stdout": "'
        if config.target == "swt"
        else "scorer: P(true) at the 'resolved' slot (statuses auxiliary)",
        "modes": list(config.modes),
        "data": data,
        "metrics": metrics,
        "config": config.to_dict(),
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def export_merged(model: Any, tokenizer: Any, out: str | Path) -> Path:
    """Merge the adapter into the base weights and save the whole model with its tokenizer
    (chat template included) in ``out`` as safetensors. The peft ``model`` is merged in
    place: use it last."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    merged = model.merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out
