"""THE registry of short names: executors, language-model backends and worlds, registered as
entry points and imported lazily.

Each kind has an entry-point group (see ``pyproject.toml``): ``executor`` ->
``sweworld.executors``, ``lm`` -> ``sweworld.lms``, ``world`` -> ``sweworld.worlds``. The
sandbox, which resolves them, never imports the packages that implement them; a third-party
package registers its own the same way, or at run time with :func:`register`
(:func:`register_executor` for executors). ``NAME:ARG`` passes ``ARG`` to an executor
class's ``from_spec`` (``scripted:rules.json``). Only :mod:`sweworld.world` turns spec
strings into objects; :func:`make_executor` here is the executor registry's own builder.
"""

from __future__ import annotations

import importlib
import threading
from importlib.metadata import entry_points
from typing import Any

from sweworld.sandbox.executor import Executor, NoExecutor

ENTRY_POINT_GROUP = "sweworld.executors"

#: The entry-point group of each kind of name.
GROUPS = {"executor": ENTRY_POINT_GROUP, "lm": "sweworld.lms", "world": "sweworld.worlds"}

#: Names every installation knows, also before its entry points are installed (the
#: language-model kinds sweworld parses itself live in :func:`sweworld.models.make_lm`,
#: the preset worlds in :mod:`sweworld.world`: the sandbox names no upper package).
BUILTIN: dict[str, dict[str, str]] = {
    "executor": {"none": "sweworld.sandbox.executor:NoExecutor"},
    "lm": {},
    "world": {},
}

_extra: dict[str, dict[str, str]] = {kind: {} for kind in GROUPS}
_lock = threading.Lock()


def register(kind: str, name: str, target: str) -> None:
    """Make ``name`` stand for ``target`` (``package.module:attr``) among the ``kind``
    names (``executor``, ``lm``, ``world``) of this process."""
    if kind not in GROUPS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(GROUPS)}")
    if not name or ":" in name or "." in name:
        raise ValueError(f"a {kind} name is a plain word, not {name!r}")
    with _lock:
        _extra[kind][name] = target


def names(kind: str) -> dict[str, str]:
    """Every known short name of ``kind`` and the dotted path it stands for: the built-in
    ones, the entry points of the kind's group, then those registered at run time."""
    if kind not in GROUPS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(GROUPS)}")
    found = dict(BUILTIN[kind])
    found.update({ep.name: ep.value for ep in entry_points(group=GROUPS[kind])})
    with _lock:
        found.update(_extra[kind])
    return found


def register_executor(name: str, target: str) -> None:
    """Make ``name`` stand for ``target`` (``package.module:attr``) in this process."""
    if not name or ":" in name or "." in name:
        raise ValueError(f"an executor name is a plain word, not {name!r}")
    register("executor", name, target)


def executor_names() -> dict[str, str]:
    """Every known executor short name and the dotted path it stands for."""
    return names("executor")


def load_object(path: str) -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``)."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"cannot import {path!r}: expected package.module:attr")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from exc


def make_executor(spec: Any = None, **kwargs: Any) -> Executor:
    """An executor from a short name (``none``, ``local``, ``simulated``, ...), ``NAME:ARG``,
    a dotted path to an executor class or factory, or an instance (returned as is).

    Raises ``ValueError`` for an unknown name, a path that does not import, or a target that
    does not build an :class:`Executor`; ``TypeError`` for an object that is not one.
    """
    if spec is None:
        spec = "none"
    if not isinstance(spec, str):
        if not isinstance(spec, Executor):
            raise TypeError(f"{spec!r} does not implement the Executor protocol")
        return spec
    names = executor_names()
    name, sep, arg = spec.partition(":")
    if sep and name in names:
        factory = load_object(names[name])
        from_spec = getattr(factory, "from_spec", None)
        if from_spec is None:
            raise ValueError(f"executor {name!r} takes no argument (got {spec!r})")
        return _checked(spec, lambda: from_spec(arg, **kwargs))
    target = names.get(spec)
    if target is None:
        if "." not in spec:
            if spec in ("scripted", "local", "simulated", "hybrid", "docker"):
                raise ValueError(
                    f"executor {spec!r} is not registered: sweworld's entry points are missing; "
                    "install the package (pip install -e .)"
                )
            known = ", ".join(sorted(names))
            raise ValueError(f"unknown executor {spec!r}; known: {known} (or a dotted path)")
        target = spec
    factory = load_object(target)
    if not callable(factory):
        raise ValueError(f"{spec!r} is not an executor class or factory")
    if factory is NoExecutor:
        return NoExecutor()
    return _checked(spec, lambda: factory(**kwargs))


def _checked(spec: str, build: Any) -> Executor:
    try:
        executor = build()
    except (TypeError, ValueError, OSError) as exc:
        raise ValueError(f"cannot build executor {spec!r}: {exc}") from exc
    if not isinstance(executor, Executor):
        raise ValueError(
            f"{spec!r} built {type(executor).__name__}, which is not an executor "
            "(needs `name` and `execute(request)`)"
        )
    return executor
