"""The layers of sweworld point one way, and no module imports another's private names.

The order (``docs/ARCHITECTURE.md``)::

    tasks <- sandbox <- execution <- models <- transition / reward <- env / serve / cli

A module may import its own package and the packages below it; ``transition`` and
``reward`` are peers that do not import each other. Every import counts: module level,
inside functions, under ``TYPE_CHECKING``, relative ones, and dotted module paths written
as strings (lazy imports, ``importlib.import_module``). A private name (one leading
underscore) is never imported from another module, nor read as an attribute of an
imported sweworld module.

Imports also point one way between modules: no import circle (module ``a`` imports ``b``
which, directly or through others, imports ``a``; counted with the same imports), and the
environment layer never imports the service built on it (``env`` -> ``serve``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sweworld"

# Rank of each top-level part of ``sweworld``: a module may import ranks at or below its
# own, and only its own package at its own rank (peers do not import each other), except
# at the top, where the entry points may use each other.
LAYERS: dict[str, float] = {
    "dirs": -1,  # where caches live; imports nothing of sweworld
    "pyast": -1,  # ast.parse behind a process-wide lock; imports nothing of sweworld
    "tasks": 0,
    "sandbox": 1,
    "execution": 2,
    "models": 3,
    "transition": 4,
    "reward": 4.5,  # the verdict reads the world's outcome model (issue 20: one state, one truth)
    "data": 5,
    "train": 5,
    "env": 5,
    "serve": 5,
    "bench": 5,
    "cli": 5,
    "shell": 5,  # the interactive shell of `sweworld shell`
    "task_commands": 5,  # `sweworld tasks` / `grade`
    "doctor": 5,  # `sweworld doctor`
    "world": 5,  # the World: builds executors, models, rewarders from one config (env uses it)
    "cli_inputs": 5,  # what the command modules share (input files, tasks, the executor)
    "extras": -1,  # which extra brings a module; reads pyproject / metadata only
    "console": -1,  # warning filters and bars; imports nothing of sweworld
    "argtypes": -1,  # argparse number types; imports nothing of sweworld
    "__main__": 5,
    "__init__": 5,  # the package's lazy facade
}
TOP = max(LAYERS.values())
_MODULE_STRING = re.compile(r"^sweworld(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class Offence:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def module_name(path: Path, root: Path = ROOT) -> str:
    """``sweworld.a.b`` for ``<root>/a/b.py`` (``sweworld.a`` for ``a/__init__.py``)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The top-level part of ``sweworld`` a dotted module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def imports_of(source: str, importer: str, is_package: bool) -> Iterator[tuple[int, str, str]]:
    """``(line, imported module, name or "")`` for every sweworld import in ``source`` (a
    logger's name, ``logging.getLogger("sweworld.x")``, is a name, not an import)."""
    tree = ast.parse(source)
    logger_names = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger")
            or (isinstance(node.func, ast.Name) and node.func.id == "getLogger")
        )
        for arg in node.args
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "sweworld" or alias.name.startswith("sweworld."):
                    yield node.lineno, alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node.module, node.level, importer, is_package)
            if module == "sweworld" or module.startswith("sweworld."):
                for alias in node.names:
                    yield node.lineno, module, alias.name
        elif (
            isinstance(node, ast.Constant)
            and id(node) not in logger_names
            and isinstance(node.value, str)
            and _MODULE_STRING.match(node.value)
            and part_of(node.value) in LAYERS
        ):
            module, _, name = node.value.partition(":")
            yield node.lineno, module, name


def private_attributes(source: str) -> Iterator[tuple[int, str]]:
    """``(line, "alias._name")`` where a private attribute of an imported sweworld module or
    name is read."""
    tree = ast.parse(source)
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sweworld"):
                    aliases.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sweworld"):
            aliases.update(alias.asname or alias.name for alias in node.names)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield node.lineno, f"{node.value.id}.{node.attr}"


def offences(path: Path, source: str, root: Path = ROOT) -> list[Offence]:
    """Upward imports, imports between peers and private imports of one module."""
    importer = module_name(path, root)
    mine = part_of(importer)
    where = str(path.relative_to(root.parent))
    found: list[Offence] = []
    if mine not in LAYERS:
        return [Offence(where, 1, f"'{mine}' has no layer: add it to LAYERS in {__name__}")]
    rank = LAYERS[mine]
    for line, module, name in imports_of(source, importer, path.name == "__init__.py"):
        other = part_of(module)
        if other not in LAYERS:
            found.append(Offence(where, line, f"imports {module}, which has no layer"))
        elif other != mine and (LAYERS[other] > rank or (LAYERS[other] == rank and rank != TOP)):
            found.append(
                Offence(
                    where, line, f"{mine} (layer {rank}) imports {module} (layer {LAYERS[other]})"
                )
            )
        if name and _is_private(name) and module != importer:
            found.append(Offence(where, line, f"imports private name {name} from {module}"))
        if any(_is_private(p) for p in module.split(".")) and module.rsplit(".", 1)[0] != (
            importer if path.name == "__init__.py" else importer.rsplit(".", 1)[0]
        ):
            found.append(Offence(where, line, f"imports private module {module}"))
    for line, attribute in private_attributes(source):
        found.append(Offence(where, line, f"reads private attribute {attribute}"))
    return found


def _resolve(module: str, name: str, known: set[str]) -> str | None:
    """The module an import reaches: ``pkg.name`` when that is a module, else the longest
    known prefix of ``module`` (``from pkg import Class`` reaches ``pkg``'s ``__init__``)."""
    if name and f"{module}.{name}" in known:
        return f"{module}.{name}"
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module of the tree under ``root`` and the modules of the tree it imports (all
    imports: module level, in functions, relative, strings)."""
    paths = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        source = path.read_text(encoding="utf-8")
        edges = set()
        for _, imported, name in imports_of(source, module, path.name == "__init__.py"):
            target = _resolve(imported, name, known)
            if target is not None and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of ``graph``: its strongly connected components of two modules or
    more (Tarjan's algorithm, without recursion), each a set of module names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def upward_service_imports(root: Path = ROOT) -> list[Offence]:
    """Imports of ``serve`` by ``env`` (the environment never knows the service built on
    it: the remote episode registers itself as the world ``remote``)."""
    found = []
    for path in sorted((root / "env").rglob("*.py")):
        importer = module_name(path, root)
        source = path.read_text(encoding="utf-8")
        for line, module, _ in imports_of(source, importer, path.name == "__init__.py"):
            if part_of(module) == "serve":
                where = str(path.relative_to(root.parent))
                found.append(Offence(where, line, f"env imports {module}"))
    return found


def all_offences(root: Path = ROOT) -> list[Offence]:
    out: list[Offence] = []
    for path in sorted(root.rglob("*.py")):
        out += offences(path, path.read_text(encoding="utf-8"), root)
    return out


# ------------------------------------------------------------------------------ the check


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()}
    parts = {p for p in parts if not p.startswith(".") and p not in ("py", "__pycache__")}
    # folders of Python code (not data folders such as adapters/) and modules
    parts = {
        p
        for p in parts
        if ((ROOT / p).is_dir() and any((ROOT / p).rglob("*.py"))) or (ROOT / f"{p}.py").is_file()
    }
    assert parts - set(LAYERS) == set()


def test_layers_point_one_way_and_no_private_name_crosses_a_module() -> None:
    found = all_offences()
    assert not found, f"{len(found)} offending imports:\n" + "\n".join(map(str, found))


#: Circles tolerated for now, each with what breaks it (empty: there are none). The test fails
#: on any circle not listed, and on a listed one that is gone: the list only shrinks.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def test_no_import_circles_but_the_known_ones() -> None:
    found = circles(import_graph())
    new = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    assert not new, f"{len(new)} import circle(s):\n" + "\n".join(" <-> ".join(c) for c in new)


def test_the_known_circles_still_exist() -> None:
    """A circle broken is taken off :data:`KNOWN_CIRCLES` (the list only shrinks)."""
    gone = [sorted(c) for c in set(KNOWN_CIRCLES) - set(circles(import_graph()))]
    assert not gone, f"no longer a circle, remove it from KNOWN_CIRCLES: {gone}"


def test_env_never_imports_serve() -> None:
    found = upward_service_imports()
    assert not found, "\n".join(map(str, found))


def test_transition_imports_nothing_of_reward() -> None:
    """The world never reads the reward: ``grep -rn "from sweworld.reward"
    sweworld/transition`` finds nothing (the reward reads the world's outcome model, since
    issue 20, so that the reward and a simulated test run on one state agree)."""
    pattern = re.compile(r"^\s*(from|import)\s+sweworld\.reward\b")
    hits = []
    for path in sorted((ROOT / "transition").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        hits += [f"{path}:{n}: {line}" for n, line in enumerate(lines, 1) if pattern.match(line)]
    assert hits == []


#: The registries' builders: only their own modules define them, only sweworld/world.py
#: calls them (issue 21: spec strings become objects in one place).
REGISTRY_BUILDERS = ("make_lm", "make_executor")
BUILDER_HOME = "sweworld/world.py"


def registry_builder_calls(root: Path = ROOT) -> list[Offence]:
    """Calls of :data:`REGISTRY_BUILDERS` (``make_lm(...)``, ``x.make_executor(...)``)
    anywhere in the package but :data:`BUILDER_HOME`; their definitions and docstrings are
    not calls."""
    found = []
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root.parent))
        if where == BUILDER_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in REGISTRY_BUILDERS:
                found.append(Offence(where, node.lineno, f"calls {name}( outside {BUILDER_HOME}"))
    return found


def test_only_the_world_calls_the_registries_builders() -> None:
    found = registry_builder_calls()
    assert not found, "build it through sweworld.world:\n" + "\n".join(map(str, found))


def test_a_builder_call_below_the_world_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "world.py": "from sweworld.models import make_lm\nlm = make_lm('embedded')\n",
            "models/__init__.py": '"""``make_lm(spec)``."""\ndef make_lm(spec=None):\n    pass\n',
            "sandbox/manager.py": "from sweworld.sandbox import registry\n"
            "x = registry.make_executor('none')\n",
        },
    )
    found = [str(o) for o in registry_builder_calls(root)]
    assert found == [
        "sweworld/sandbox/manager.py:2: calls make_executor( outside sweworld/world.py"
    ]


# ------------------------------------------------------------------ the checker can fail


def _check(tmp_path: Path, relative: str, source: str) -> list[str]:
    root = tmp_path / "sweworld"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return [o.what for o in offences(path, source, root)]


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        ("reward/x.py", "from sweworld.env.config import A\n", "reward (layer 4.5) imports"),
        ("transition/x.py", "import sweworld.reward.model\n", "transition (layer 4) imports"),
        ("models/x.py", "def f():\n    from sweworld.reward import y\n", "models (layer 3)"),
        (
            "sandbox/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from sweworld.execution.base import E\n",
            "sandbox (layer 1) imports",
        ),
        ("tasks/x.py", "LAZY = {'E': 'sweworld.sandbox.session:Session'}\n", "tasks (layer 0)"),
        ("sandbox/x.py", "from ..execution import local\n", "imports sweworld.execution"),
        ("reward/a/x.py", "from .y import _helper\n", "private name _helper"),
        (
            "tasks/x.py",
            "from sweworld.tasks import schema\nschema._parse(1)\n",
            "private attribute schema._parse",
        ),
        ("tasks/x.py", "from sweworld.sandbox._impl import f\n", "private module"),
        ("widgets/x.py", "x = 1\n", "has no layer"),
    ],
)
def test_checker_reports_offences(tmp_path: Path, relative: str, source: str, expected: str):
    found = _check(tmp_path, relative, source)
    assert any(expected in what for what in found), found


@pytest.mark.parametrize(
    ("relative", "source"),
    [
        ("reward/x.py", "from sweworld.models.budget import waterfill\n"),
        ("reward/x.py", "from sweworld.reward.types import CandidateView\n"),
        ("cli.py", "from sweworld.transition import simulated\nfrom sweworld.reward import m\n"),
        ("transition/a/x.py", "from . import y\nfrom .y import public\n"),
        ("tasks/x.py", "from sweworld.dirs import cache_dir\n"),
        ("cli.py", "from sweworld import __version__\n"),
        ("models/x.py", "import json\nNAME = 'sweworld.models.embedded'\n"),
        ("tasks/x.py", "import logging\nlog = logging.getLogger('sweworld.env.pool')\n"),
    ],
)
def test_checker_accepts_downward_and_public_imports(tmp_path: Path, relative: str, source: str):
    assert _check(tmp_path, relative, source) == []


# ------------------------------------------------------------ the circle finder can fail


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sweworld"
    for relative, source in {"__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # module level one way, back in a function
            {"a.py": "from sweworld import b\n", "b.py": "def f():\n    import sweworld.a\n"},
            [{"sweworld.a", "sweworld.b"}],
        ),
        (  # three modules, one import a lazy string, one relative
            {
                "data/__init__.py": "",
                "data/x.py": "from .y import thing\n",
                "data/y.py": "LAZY = {'Z': 'sweworld.data.z:Z'}\nthing = 1\n",
                "data/z.py": "from sweworld.data import x\n",
            },
            [{"sweworld.data.x", "sweworld.data.y", "sweworld.data.z"}],
        ),
        (  # a package's __init__ re-exporting a module that imports the package
            {
                "q/__init__.py": "from sweworld.q.m import f\n",
                "q/m.py": "from sweworld.q import g\n",
            },
            [{"sweworld.q", "sweworld.q.m"}],
        ),
        (  # one way only: no circle
            {"a.py": "from sweworld import b\n", "b.py": "import json\n"},
            [],
        ),
    ],
)
def test_circle_finder(tmp_path: Path, files: dict[str, str], expected: list[set[str]]) -> None:
    found = circles(import_graph(_tree(tmp_path, files)))
    assert sorted(map(sorted, found)) == sorted(map(sorted, expected))


def test_the_circle_check_fails_on_a_new_circle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"a.py": "import sweworld.b\n", "b.py": "import sweworld.a\n"})
    new = [c for c in circles(import_graph(root)) if c not in KNOWN_CIRCLES]
    assert new == [frozenset({"sweworld.a", "sweworld.b"})]


def test_env_importing_serve_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "env/__init__.py": "",
            "env/x.py": "def f():\n    from sweworld.serve.client import RemoteEpisode\n",
            "env/y.py": "TARGET = 'sweworld.serve.remote:RemoteEpisode'\n",
            "serve/__init__.py": "from sweworld.env import x\n",
        },
    )
    found = [o.what for o in upward_service_imports(root)]
    assert found == ["env imports sweworld.serve.client", "env imports sweworld.serve.remote"]
