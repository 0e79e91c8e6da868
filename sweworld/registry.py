"""Short names for swappable parts, imported lazily from dotted paths (``module:attr``)."""

from __future__ import annotations

import importlib
from typing import Any

EXECUTORS: dict[str, str] = {
    "none": "sweworld.execution.base:NoExecutor",
    "scripted": "sweworld.execution.scripted:ScriptedExecutor",
    "local": "sweworld.execution.local:LocalExecutor",
    "docker": "sweworld.execution.docker:DockerExecutor",
    "simulated": "sweworld.transition.simulated:SimulatedExecutor",
    "hybrid": "sweworld.transition.hybrid:hybrid",
}


def load_object(path: str) -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``)."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from exc


def make_executor(spec: Any = None, **kwargs: Any) -> Any:
    """An executor from a short name (``none``, ``scripted``), a dotted path, or an instance.

    ``scripted:PATH`` loads a :class:`~sweworld.execution.scripted.ScriptedExecutor` rule file.
    """
    from sweworld.execution.base import Executor

    if spec is None:
        spec = "none"
    if not isinstance(spec, str):
        if not isinstance(spec, Executor):
            raise TypeError(f"{spec!r} does not implement the Executor protocol")
        return spec
    if spec.startswith("scripted:"):
        from sweworld.execution.scripted import ScriptedExecutor

        return ScriptedExecutor.from_file(spec.partition(":")[2])
    target = EXECUTORS.get(spec)
    if target is None:
        if "." not in spec:
            known = ", ".join(sorted(EXECUTORS))
            raise ValueError(f"unknown executor {spec!r}; known: {known} (or a dotted path)")
        target = spec
    return load_object(target)(**kwargs)
