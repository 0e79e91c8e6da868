"""Language-model backends of SWT behind one protocol (:class:`LM`).

``make_lm(spec)`` builds one from a short string:

- ``None`` or ``"embedded"``: SmolLM2-135M-Instruct in process (with the shipped
  ``swt-default`` adapter when present); ``"embedded+ADAPTER"`` with another adapter;
  ``"embedded:base"`` without any adapter
- ``"hf:PATH"`` / ``"hf:PATH+ADAPTER"``: a local transformers model folder (or ``.gguf``),
  optionally with a peft LoRA adapter folder
- ``"openai:URL#MODEL"`` / ``"vllm:URL#MODEL"``: an OpenAI-compatible server
  (API key from ``$SWEWORLD_LM_API_KEY`` or ``$OPENAI_API_KEY``)
- ``"replay:PATH"``: answers recorded in a JSONL file
- ``"NAME:ARG"``: a backend registered under ``NAME`` (entry-point group ``sweworld.lms``,
  or :func:`sweworld.sandbox.registry.register` with kind ``lm``), built as
  ``factory(ARG, **kwargs)``

Only :mod:`sweworld.world` calls :func:`make_lm` with a spec string; everything above the
models asks the world. Heavy imports (torch, transformers, httpx) happen only when a
backend is built.

Imports: tasks, sandbox (the registry, for backends registered by name) and
execution; nothing above (transition, reward and everything else call it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweworld.models.base import (
    LM,
    BaseLM,
    ContextTooLong,
    Generation,
    GenerationRequest,
    LMError,
    LMTimeout,
    LMUnavailable,
    Messages,
)
from sweworld.models.replay import RecordingLM, ReplayLM

if TYPE_CHECKING:
    from sweworld.models.openai_lm import OpenAILM
    from sweworld.models.transformers_lm import TransformersLM

__all__ = [
    "LM",
    "SPEC_FORMS",
    "BaseLM",
    "ContextTooLong",
    "Generation",
    "GenerationRequest",
    "LMError",
    "LMTimeout",
    "LMUnavailable",
    "Messages",
    "OpenAILM",
    "RecordingLM",
    "ReplayLM",
    "TransformersLM",
    "check_lm_spec",
    "embedded_model_path",
    "load_embedded",
    "make_lm",
    "require_lm_extras",
]

SPEC_FORMS = (
    "None or 'embedded' (the embedded SmolLM2-135M-Instruct), 'embedded+ADAPTER', "
    "'embedded:base', 'hf:PATH', 'hf:PATH+ADAPTER', 'openai:URL#MODEL', 'vllm:URL#MODEL', "
    "'replay:PATH', or an LM instance"
)

_LAZY = {
    "OpenAILM": "sweworld.models.openai_lm",
    "TransformersLM": "sweworld.models.transformers_lm",
    "embedded_model_path": "sweworld.models.embedded",
    "load_embedded": "sweworld.models.embedded",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def make_lm(spec: str | LM | None = None, **kwargs: Any) -> LM:
    """An LM from a spec string (see the module docstring) or an LM instance (returned as
    is). Keyword arguments go to the backend's constructor. Raises ``ValueError`` for an
    unknown spec."""
    if spec is not None and not isinstance(spec, str):
        if isinstance(spec, LM):
            return spec
        raise TypeError(f"{spec!r} does not implement the LM protocol; expected {SPEC_FORMS}")
    text = (spec or "embedded").strip()
    kind, sep, rest = text.partition(":")
    if text == "embedded" or text == "embedded:default":
        from sweworld.models.embedded import load_embedded

        return load_embedded(**kwargs)
    if text == "embedded:base":
        from sweworld.models.embedded import load_embedded

        return load_embedded(adapter=False, **kwargs)
    if text.startswith("embedded+"):
        from sweworld.models.embedded import load_embedded

        return load_embedded(adapter=text.partition("+")[2], **kwargs)
    if sep and kind == "replay" and rest:
        return ReplayLM.from_jsonl(rest, **kwargs)
    if sep and kind in ("openai", "vllm") and rest:
        url, hash_, model = rest.rpartition("#")
        if not hash_ or not url or not model:
            raise ValueError(f"LM spec {text!r} needs a model: {kind}:URL#MODEL")
        from sweworld.models.openai_lm import OpenAILM

        kwargs.setdefault(
            "api_key", os.environ.get("SWEWORLD_LM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        )
        return OpenAILM(url, model, **kwargs)
    if sep and kind == "hf" and rest:
        from sweworld.models.transformers_lm import TransformersLM

        path, adapter = _split_adapter(rest)
        return TransformersLM(path, adapter=adapter, **kwargs)
    target = _registered(kind) if sep and rest else None
    if target is not None:
        from sweworld.sandbox.registry import load_object

        return load_object(target)(rest, **kwargs)
    raise ValueError(f"unknown LM spec {text!r}; expected {SPEC_FORMS}")


def check_lm_spec(spec: str | None) -> None:
    """Raise what :func:`make_lm` would raise for a spec that cannot work, without loading a
    model: ``ValueError`` for an unknown or malformed spec or an unreadable replay file
    (which is read: it is small), ``FileNotFoundError`` for a missing path. A server that
    is down or a model that fails to load are found only when used."""
    text = (spec or "embedded").strip()
    kind, sep, rest = text.partition(":")
    if text in ("embedded", "embedded:default", "embedded:base") or text.startswith("embedded+"):
        return
    if sep and kind == "replay" and rest:
        path = Path(rest)
        if not path.exists():
            raise FileNotFoundError(f"replay file {rest} does not exist")
        if not path.is_file():
            raise ValueError(f"replay file {rest} is not a file")
        try:
            ReplayLM.from_jsonl(path)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"replay file {rest} is not valid: {exc}") from exc
        return
    if sep and kind in ("openai", "vllm") and rest:
        url, hash_, model = rest.rpartition("#")
        if not hash_ or not url or not model:
            raise ValueError(f"LM spec {text!r} needs a model: {kind}:URL#MODEL")
        return
    if sep and kind == "hf" and rest:
        path, _ = _split_adapter(rest)
        if not Path(path).exists():
            raise FileNotFoundError(f"model {path} does not exist (LM spec {text!r})")
        return
    if sep and rest and _registered(kind) is not None:
        return
    raise ValueError(f"unknown LM spec {text!r}; expected {SPEC_FORMS}")


def require_lm_extras(spec: str | None, what: str = "the SWT model") -> None:
    """Raise :class:`sweworld.extras.MissingExtra` (naming the ``model`` extra) when the
    packages the spec's backend imports are not installed, or :class:`LMUnavailable` when
    the embedded model's files are absent; nothing is imported or loaded. Call it before a
    run that would otherwise fail at every step (``sweworld episode --executor simulated``
    after a plain ``pip install -e .``)."""
    from sweworld.extras import require

    text = (spec or "embedded").strip()
    kind, sep, rest = text.partition(":")
    embedded = text in ("embedded", "embedded:default", "embedded:base") or text.startswith(
        "embedded+"
    )
    if embedded or (sep and kind == "hf"):
        modules = ["torch", "transformers", "safetensors"]
        if text != "embedded:base" and (embedded or "+" in rest):
            modules.append("peft")  # an adapter is applied
        require(modules, "model", what=f"{what} ({text})")
    elif sep and kind in ("openai", "vllm"):
        require("httpx", "model", what=f"{what} ({text})")
    if embedded:
        from sweworld.models.embedded import MODEL_NAME, gguf_path, models_dir

        try:
            gguf_path()
        except LMUnavailable:
            if not (models_dir() / MODEL_NAME / "config.json").is_file():  # not converted yet
                raise


def _registered(kind: str) -> str | None:
    """The dotted path a registered LM backend ``kind`` stands for, or None."""
    from sweworld.sandbox.registry import names

    return names("lm").get(kind)


def _split_adapter(rest: str) -> tuple[str, str | None]:
    """``PATH`` or ``PATH+ADAPTER`` (a path that exists as a whole is never split)."""
    if "+" not in rest or Path(rest).exists():
        return rest, None
    path, _, adapter = rest.rpartition("+")
    return path, adapter or None
