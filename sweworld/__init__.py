"""sweworld: train and evaluate software-engineering agents without Docker.

File operations run for real in a light copy-on-write sandbox; execution commands go to a
pluggable executor (simulated by a language model, or real); rewards come from a verifier.

>>> from sweworld import SessionManager, load_tasks
>>> task = load_tasks("data/toy/tasks.jsonl")[0]
>>> with SessionManager() as manager:
...     session = manager.open(task)
...     print(session.step("git log --oneline").observation)

The package's lazy facade: names resolve on first use, so ``import sweworld`` imports
nothing else. The folders and what each may import: ``docs/ARCHITECTURE.md`` (Layers);
``tests/test_layers.py`` keeps them so.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# A library is quiet unless the application configures logging: every module logs to a
# logger under "sweworld", and this handler keeps Python from printing warnings by itself.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "Session",
    "SessionManager",
    "StepResult",
    "Task",
    "__version__",
    "get_task",
    "load_tasks",
]

_LAZY = {
    "ExecutionRequest": "sweworld.sandbox.executor",
    "ExecutionResult": "sweworld.sandbox.executor",
    "Executor": "sweworld.sandbox.executor",
    "Session": "sweworld.sandbox.session",
    "SessionManager": "sweworld.sandbox.manager",
    "StepResult": "sweworld.sandbox.types",
    "Task": "sweworld.tasks.schema",
    "get_task": "sweworld.tasks.loaders",
    "load_tasks": "sweworld.tasks.loaders",
}

if TYPE_CHECKING:
    from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult, Executor
    from sweworld.sandbox.manager import SessionManager
    from sweworld.sandbox.session import Session
    from sweworld.sandbox.types import StepResult
    from sweworld.tasks.loaders import get_task, load_tasks
    from sweworld.tasks.schema import Task


def __getattr__(name: str) -> Any:
    """Import public names on first use, so ``import sweworld`` stays cheap."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sweworld' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


# Gymnasium 1.x finds environments only in its registry (it has no plugin entry points), so
# ``gymnasium.make("sweworld/SWEWorld-v0")`` works once this package is imported: at once
# when gymnasium is already loaded, else right after gymnasium's own import finishes (a
# one-shot import hook). ``import sweworld`` never imports gymnasium itself.
_GYMNASIUM_ENV = ("sweworld/SWEWorld-v0", "sweworld.env.gymnasium_env:SWEWorldEnv")


def _register_gymnasium_env() -> None:
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # gymnasium absent or broken: nothing to register with
        return
    env_id, entry_point = _GYMNASIUM_ENV
    if env_id not in registry:
        register(id=env_id, entry_point=entry_point)


class _AfterGymnasiumImport:
    """A ``sys.meta_path`` finder that registers the env once ``gymnasium`` is imported."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "gymnasium":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; the real finders locate the package
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _register_gymnasium_env()

        loader.exec_module = exec_then_register
        return spec


if "gymnasium.envs.registration" in sys.modules:
    _register_gymnasium_env()
elif not any(isinstance(f, _AfterGymnasiumImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterGymnasiumImport())
