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
models asks the world (``sweworld.world.lm_from_spec(spec, lazy=True)`` gives a
:class:`LazyLM`: the spec kept, the model loaded on first use). Heavy imports (torch,
transformers, httpx) happen only when a backend is built.

Imports: tasks, sandbox (the registry, for backends registered by name) and
execution; nothing above (transition, reward and everything else call it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
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
    "LazyLM",
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


class LazyLM:
    """An LM proxy built from a spec: the model is loaded on first use (thread-safe, once).

    Made by ``sweworld.world.lm_from_spec(spec, lazy=True)`` for the executors that may
    never call their model (a world that runs no step loads none). ``spec`` is kept (the
    executors read it: the embedded model's small budgets); ``loader(spec)`` builds the
    model (default: :func:`make_lm` with ``options``). ``generate``, ``count_tokens``,
    ``choice_logprobs``, ``exact_tokens``, ``context_window``, ``_extra_info`` and any other
    attribute are the loaded model's (reading one loads it); ``name`` is the spec until the
    model is loaded. :meth:`close` closes the loaded model, if any (not a ``shared`` one,
    which its loader's owner closes); the proxy cannot load again after it.
    """

    def __init__(
        self,
        spec: str | None = None,
        *,
        loader: Callable[[str], Any] | None = None,
        shared: bool = False,
        **options: Any,
    ):
        if spec is not None and not isinstance(spec, str):
            raise TypeError(f"a LazyLM is built from a spec string, not {type(spec).__name__}")
        self.spec = (spec or "embedded").strip()
        self._loader = loader
        self._shared = shared
        self._options = options
        self._model: Any = None
        self._closed = False
        self._load_lock = threading.Lock()
        self._loading: int | None = None  # the thread running the loader, while it runs

    def load(self) -> Any:
        """The model (loaded now if it was not). A load that raises leaves the proxy
        unloaded (the next use tries again and raises again); a loader that answers None or
        loads this proxy again (itself, directly or through other proxies) raises
        :class:`LMUnavailable` instead of returning None or deadlocking."""
        if self._loading == threading.get_ident():
            raise LMUnavailable(f"the loader of {self.spec!r} loads the same proxy again")
        with self._load_lock:
            if self._model is None:
                if self._closed:
                    raise LMUnavailable(f"the model {self.spec!r} was closed")
                build = self._loader or make_lm
                self._loading = threading.get_ident()
                try:
                    model = build(self.spec, **self._options)
                    if isinstance(model, LazyLM):  # a loader that answers lazily: its model
                        model = model.load()
                finally:
                    self._loading = None
                if model is None:
                    raise LMUnavailable(f"the loader of {self.spec!r} returned no model")
                self._model = model
            return self._model

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (nothing is loaded to answer)."""
        return self._model is not None

    @property
    def wrapped(self) -> Any:
        """The loaded model (as a :class:`~sweworld.env.batching.BatchingLM`'s ``wrapped``)."""
        return self.load()

    @property
    def name(self) -> str:
        model = self._model
        return str(getattr(model, "name", self.spec)) if model is not None else self.spec

    @property
    def context_window(self) -> int:
        return int(getattr(self.load(), "context_window", 0))

    def generate(self, requests: Any, **options: Any) -> Any:
        return self.load().generate(requests, **options)

    def count_tokens(self, text: str) -> int:
        return self.load().count_tokens(text)

    def choice_logprobs(self, messages: Any, choices: Any, **options: Any) -> Any:
        return self.load().choice_logprobs(messages, choices, **options)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") or attribute in (
            "_model",
            "_loader",
            "_options",
            "_shared",
            "_closed",
            "_load_lock",
            "_loading",
            "spec",
        ):
            raise AttributeError(attribute)  # copy, pickle and half-built proxies
        return getattr(self.load(), attribute)

    def close(self) -> None:
        """Close the loaded model, if any (a model never loaded is never loaded now)."""
        with self._load_lock:
            model, self._model, self._closed = self._model, None, True
        closer = None if self._shared else getattr(model, "close", None)
        if callable(closer):
            closer()

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"LazyLM({self.spec!r}, {state})"


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
