"""Features of one execution command on one workspace state, for the outcome model.

Everything here is computed exactly and cheaply from what a session knows, without running
the agent's code:

* the **command**: its kind (:data:`KINDS`), targets, selected tests, options that change
  the exit code (``-x``, ``--maxfail``, ``-k``, ``--collect-only``), parsed by
  :func:`sweworld.transition.facts.parse_command`;
* the **state**: what the diff against the base changed (files, and the functions and
  classes whose AST differs), whether the modules the command reaches still parse
  (:func:`ast.parse`, the grammar of the running interpreter), and whether the script or the
  test files reach the changed code through imports of workspace modules;
* the **task** (oracle mode only): the FAIL_TO_PASS / PASS_TO_PASS lists and how the state
  relates to the gold patch (same files, same functions, equal to the gold state after AST
  normalisation); blind mode sets these to their neutral values and ``oracle`` to 0;
* the **ledger**: earlier outcomes of the same command and the same tests in the session.

Costs are linear in the size of what is read and bounded: at most :data:`MAX_REACHED`
modules are followed through imports and every file read is capped
(:data:`~sweworld.transition.outcome.state.MAX_FILE_BYTES`).
"""

from __future__ import annotations

import ast
import posixpath
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.tasks.fields import test_list
from sweworld.tasks.patches import patch_hunks
from sweworld.transition.deadline import check_deadline
from sweworld.transition.facts import parse_command
from sweworld.transition.outcome.commands import (
    KINDS,
    TEST_RUNNER_KINDS,
    command_kind_of,
    pytest_equivalent,
    runner_args,
)
from sweworld.transition.outcome.programs import changed_names, parse_source, same_program
from sweworld.transition.outcome.state import FileState, apply_patch_text

__all__ = [
    "KINDS",
    "MAX_REACHED",
    "STEP_FEATURES",
    "TEST_FEATURES",
    "TEST_RUNNER_KINDS",
    "Ledger",
    "StepFeatures",
    "command_kind_of",
    "per_test_features",
    "per_test_rows",
    "pytest_equivalent",
    "runner_args",
    "step_features",
]

#: Modules followed through imports at most, per command.
MAX_REACHED = 400
_STATUS_CODE = {"": -1, "PASSED": 0, "FAILED": 1, "ERROR": 2, "SKIPPED": 3, "XFAIL": 3, "XPASS": 0}


# ------------------------------------------------------------------------------ AST helpers


def _imports(tree: ast.Module, rel: str) -> list[str]:
    """Absolute module names imported anywhere in ``tree`` (relative imports resolved
    against the file's package; ``from a import b`` gives ``a`` and ``a.b``)."""
    package = posixpath.dirname(rel).replace("/", ".")
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in [*parts, node.module or ""] if p)
            else:
                base = node.module or ""
            if base:
                out.append(base)
                out.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


# ------------------------------------------------------------------------------ the ledger


@dataclass
class Ledger:
    """What a session saw earlier: last exit code by command, last status by test id,
    whether it may have installed packages."""

    exits: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    #: a command of the session may have installed packages (the environment's plugins
    #: are no longer known)
    installed: bool = False

    def record(self, command: str, exit_code: int, statuses: Mapping[str, str]) -> None:
        self.exits[command] = int(exit_code)
        self.statuses.update({str(k): str(v) for k, v in statuses.items()})
        self.steps += 1


# ------------------------------------------------------------------------------ features


STEP_FEATURES: tuple[str, ...] = (
    *(f"kind_{k}" for k in KINDS),
    "n_targets",
    "n_node_ids",
    "has_keyword",
    "exitfirst",
    "collect_only",
    "target_missing",
    "script_in_tmp",
    "entry_parses",
    "n_changed_files",
    "n_changed_py",
    "n_changed_tests",
    "n_changed_defs",
    "changed_unparsable",
    "n_reached",
    "reached_unparsable",
    "reaches_changed",
    "reach_depth",
    "entry_changed",
    "oracle",
    "n_selected_f2p",
    "n_selected_p2p",
    "gold_file_overlap",
    "gold_def_overlap",
    "state_is_gold",
    "state_is_base_on_gold",
    "prev_exit",
    "ledger_steps",
)

TEST_FEATURES: tuple[str, ...] = (
    *STEP_FEATURES,
    "t_in_f2p",
    "t_in_p2p",
    "t_base_status",
    "t_prev_status",
    "t_file_changed",
    "t_def_changed",
    "t_reaches_changed",
    "t_module_parses",
)


@dataclass
class StepFeatures:
    """A step's feature vector (``values`` in :data:`STEP_FEATURES` order) and what the
    per-test features and the renderer reuse."""

    kind: str
    values: list[float]
    info: Any
    entry_files: list[str]
    changed_files: list[str]
    changed_defs: dict[str, set[str]]
    reach: dict[str, int]
    unparsable: set[str]
    f2p: list[str]
    p2p: list[str]
    #: the lists above as sets: a test's features look each test up in them, and an agent
    #: decides how many files it changes (per-test cost stays independent of that)
    changed_set: frozenset[str] = field(init=False, repr=False)
    f2p_set: frozenset[str] = field(init=False, repr=False)
    p2p_set: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.changed_set = frozenset(self.changed_files)
        self.f2p_set = frozenset(self.f2p)
        self.p2p_set = frozenset(self.p2p)


def _module_file(state: FileState, name: str, roots: Sequence[str]) -> str | None:
    key = ("module_file", name, *roots)
    if key in state.memo:
        return state.memo[key]
    stem = name.replace(".", "/")
    candidates = (f"{r}{stem}{tail}" for r in roots for tail in (".py", "/__init__.py"))
    found = next((c for c in candidates if state.text(c) is not None), None)
    state.memo[key] = found
    return found


_IMPORTS_CACHE: dict[tuple[str, int, int, bool], tuple[bool, tuple[str, ...]]] = {}
_IMPORTS_CACHE_MAX = 50_000
_IMPORTS_LOCK = threading.Lock()


def scan_imports(rel: str, text: str) -> tuple[str, ...]:
    """The module names :func:`_imports` finds, by a scan of the lines instead of a parse
    (linear, ~50x faster on a large module): ``import a.b as c, d`` and ``from .x import (a,
    b)`` statements at any indentation, parenthesised or backslash-continued. A docstring
    line that reads like an import adds a name that usually resolves to no workspace file."""
    package = posixpath.dirname(rel).replace("/", ".")
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not (line.startswith("import ") or line.startswith("from ")):
            continue
        stmt = line.split("#", 1)[0]
        while i < len(lines) and (
            stmt.rstrip().endswith("\\") or ("(" in stmt and ")" not in stmt)
        ):
            stmt = stmt.rstrip().rstrip("\\") + " " + lines[i].split("#", 1)[0].strip()
            i += 1
        stmt = stmt.split(";", 1)[0]
        if stmt.startswith("import "):
            for part in stmt[len("import ") :].split(","):
                name = part.split(" as ", 1)[0].strip()
                if name.replace(".", "").replace("_", "").isalnum():
                    out.append(name)
            continue
        head, sep, names = stmt[len("from ") :].partition(" import ")
        head = head.strip()
        if not sep or not head:
            continue
        level = len(head) - len(head.lstrip("."))
        module = head[level:]
        if level:
            parts = package.split(".") if package else []
            parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
            base = ".".join(p for p in [*parts, module] if p)
        else:
            base = module
        if not base or not base.replace(".", "").replace("_", "").isalnum():
            continue
        out.append(base)
        for part in names.strip().strip("()").split(","):
            name = part.split(" as ", 1)[0].strip().strip("()")
            if name and name != "*" and name.replace("_", "").isalnum():
                out.append(f"{base}.{name}")
    return tuple(out)


def module_imports(
    rel: str, text: str, *, check_syntax: bool = True
) -> tuple[bool, tuple[str, ...]]:
    """(parses, imported module names) of one module's text, memoised by content (the
    same base files are read by every step of every session on a repository). Without
    ``check_syntax`` (a file unchanged since the base commit, which parses there) the names
    come from :func:`scan_imports` and the module is taken to parse."""
    key = (rel, len(text), hash(text), check_syntax)
    found = _IMPORTS_CACHE.get(key)
    if found is not None:
        return found
    if check_syntax:
        tree = parse_source(text, rel)
        value = (False, ()) if tree is None else (True, tuple(_imports(tree, rel)))
    else:
        value = (True, scan_imports(rel, text))
    with _IMPORTS_LOCK:
        if len(_IMPORTS_CACHE) >= _IMPORTS_CACHE_MAX:
            _IMPORTS_CACHE.clear()
        _IMPORTS_CACHE[key] = value
    return value


def reachability(
    state: FileState, entries: Sequence[str], entry_texts: Mapping[str, str] | None = None
) -> tuple[dict[str, int], set[str]]:
    """Workspace modules reached from ``entries`` through imports (breadth first, at most
    :data:`MAX_REACHED`): path -> depth, and the reached paths that do not parse."""
    roots = ["", "src/"]
    depth: dict[str, int] = {}
    unparsable: set[str] = set()
    queue: list[tuple[str, int]] = [(e, 0) for e in entries]
    texts = dict(entry_texts or {})
    changed = set(state.changed)
    i = 0
    while i < len(queue) and len(depth) < MAX_REACHED:
        rel, d = queue[i]
        i += 1
        if rel in depth:
            continue
        check_deadline("the import graph")
        depth[rel] = d
        text = texts.get(rel) if rel in texts else state.text(rel)
        if text is None:
            continue
        parses, names = module_imports(
            rel, text, check_syntax=rel in texts or rel in changed or rel.startswith("<")
        )
        if not parses:
            unparsable.add(rel)
            continue
        for name in names:
            found = _module_file(state, name, roots)
            if found is not None and found not in depth:
                # a package's __init__ runs before its submodules
                parts = found.split("/")
                for k in range(1, len(parts) - 1):
                    init = "/".join(parts[:k]) + "/__init__.py"
                    if init not in depth and state.text(init) is not None:
                        queue.append((init, d + 1))
                queue.append((found, d + 1))
    return depth, unparsable


def _gold_relation(
    state: FileState, gold: str, changed_defs: dict[str, set[str]]
) -> tuple[float, float, float, float]:
    hunks = patch_hunks(gold)
    if not hunks:
        return 0.0, 0.0, 0.0, 0.0
    gold_files = set(hunks)
    changed = set(changed_defs) | set(state.changed)
    file_overlap = len(gold_files & changed) / len(gold_files)
    gold_defs: set[tuple[str, str]] = set()
    is_gold = is_base = True
    for path, file_hunks in hunks.items():
        base = state.base_text(path)
        golden = apply_patch_text(base, list(file_hunks))
        now = state.text(path)
        if golden is None and base is not None:  # the gold patch does not apply here
            is_gold = False
            continue
        gold_defs |= {(path, n) for n in changed_names(base, golden)}
        is_gold = is_gold and same_program(now, golden)
        is_base = is_base and same_program(now, base)
    ours = {(p, n) for p, names in changed_defs.items() for n in names}
    def_overlap = len(gold_defs & ours) / len(gold_defs) if gold_defs else 0.0
    return file_overlap, def_overlap, float(is_gold), float(is_base)


def _is_test_path(rel: str) -> bool:
    name = posixpath.basename(rel)
    return name.startswith("test") or name.endswith("_test.py") or "/tests/" in f"/{rel}"


def step_features(
    argv: Sequence[str],
    cwd: str,
    state: FileState,
    task: Any = None,
    *,
    oracle: bool = True,
    ledger: Ledger | None = None,
    stdin: str = "",
    test_ids: Sequence[str] = (),
) -> StepFeatures:
    """The features of running ``argv`` in ``cwd`` on ``state``. ``task`` is a task row or
    :class:`~sweworld.tasks.Task` (its lists and gold ``patch`` are read in oracle mode
    only); ``test_ids``: the tests the command collects (their files are what a pytest run
    without file targets reaches)."""
    info = parse_command(tuple(argv), stdin.encode() if stdin else None)
    kind = command_kind_of(argv)
    ledger = ledger or Ledger()
    entries: list[str] = []
    entry_texts: dict[str, str] = {}
    target_missing = script_in_tmp = 0.0
    entry_parses = 1.0
    n_targets = n_nodes = 0
    has_k = exitfirst = collect_only = 0.0
    equivalent = pytest_equivalent(kind, argv) if kind != "pytest" else None
    opts = info.pytest if kind == "pytest" else None
    if equivalent is not None:
        opts = parse_command(tuple(equivalent)).pytest
    if opts is not None:
        n_targets = len(opts.targets)
        n_nodes = sum("::" in t for t in opts.targets)
        has_k = float(bool(opts.keyword or opts.markexpr))
        exitfirst = float(opts.exitfirst or opts.maxfail == 1)
        collect_only = float(opts.collect_only)
        for target in opts.targets[:50]:
            path = target.split("::", 1)[0]
            rel = state.relative(path, cwd)
            if rel is None or (state.text(rel) is None and not rel.endswith("/") and "." in rel):
                target_missing = 1.0 if rel is not None and rel.endswith(".py") else target_missing
            if rel is not None and rel.endswith(".py"):
                entries.append(rel)
        if not entries:
            entries = sorted({t.split("::", 1)[0] for t in test_ids})[:200]
    elif kind in ("python_script", "django_runtests") and info.script and info.script != "-":
        where, text = state.sandbox_text(info.script, cwd)
        script_in_tmp = float(where == "tmp")
        if text is None:
            target_missing = 1.0 if where == "workspace" else 0.0
        else:
            key = state.relative(info.script, cwd) or f"<tmp>/{info.script}"
            entries.append(key)
            entry_texts[key] = text
    elif kind == "python_c" and info.code is not None:
        entries.append("<-c>")
        entry_texts["<-c>"] = info.code
    elif kind == "python_script" and stdin:
        entries.append("<stdin>")
        entry_texts["<stdin>"] = stdin
    elif kind == "python_module" and info.module:
        found = _module_file(state, info.module, ["", "src/"])
        if found:
            entries.append(found)
    for key, text in entry_texts.items():
        if parse_source(text, key) is None:
            entry_parses = 0.0
    changed_defs: dict[str, set[str]] = {}
    changed_unparsable = 0.0
    for rel in state.changed[:200]:
        if not rel.endswith(".py"):
            continue
        check_deadline("the changed files' definitions")
        now, before = state.text(rel), state.base_text(rel)
        if now is not None and parse_source(now, rel) is None:
            changed_unparsable = 1.0
        changed_defs[rel] = changed_names(before, now)
    reach, unparsable = reachability(state, entries, entry_texts)
    changed_set = set(state.changed)
    reached_changed = [reach[p] for p in reach if p in changed_defs or p in changed_set]
    f2p = test_list(task, "FAIL_TO_PASS") if (oracle and task is not None) else []
    p2p = test_list(task, "PASS_TO_PASS") if (oracle and task is not None) else []
    gold = ""
    if oracle and task is not None:
        gold = str(task.get("patch") if isinstance(task, Mapping) else getattr(task, "patch", ""))
    relation = _gold_relation(state, gold, changed_defs) if gold else (0.0, 0.0, 0.0, 0.0)
    selected = {t for t in opts.targets if "::" in t} if opts is not None else set()
    values = [
        *(float(kind == k) for k in KINDS),
        float(n_targets),
        float(n_nodes),
        has_k,
        exitfirst,
        collect_only,
        target_missing,
        script_in_tmp,
        entry_parses,
        float(len(state.changed)),
        float(sum(p.endswith(".py") for p in state.changed)),
        float(sum(_is_test_path(p) for p in state.changed)),
        float(sum(len(v) for v in changed_defs.values())),
        changed_unparsable,
        float(len(reach)),
        float(bool(unparsable)),
        float(bool(reached_changed)),
        float(min(reached_changed)) if reached_changed else -1.0,
        float(any(e in changed_set for e in entries)),
        float(bool(oracle and task is not None)),
        float(_count_selected(f2p, selected)),
        float(_count_selected(p2p, selected)),
        *relation,
        float(ledger.exits.get(shlex_join(argv), -1)),
        float(ledger.steps),
    ]
    return StepFeatures(
        kind, values, info, entries, list(state.changed), changed_defs, reach, unparsable, f2p, p2p
    )


def _count_selected(tests: Sequence[str], selected: set[str]) -> int:
    """How many of ``tests`` a node-id target selects (the id itself or a prefix of it:
    a class, a test without its parameters). Each test looks up its prefixes of the
    targets' lengths, so the cost is not tests x targets."""
    lengths = sorted({len(s) for s in selected})
    return sum(any(t[:k] in selected for k in lengths if k <= len(t)) for t in tests)


def per_test_rows(
    step: StepFeatures,
    test_ids: Sequence[str],
    state: FileState,
    ledger: Ledger | None = None,
    *,
    stage: str = "the tests' features",
) -> list[list[float]]:
    """:func:`per_test_features` of every test of ``test_ids`` (one reachability per test
    file), the step's deadline checked every 64 tests (``stage`` names where it stopped)."""
    cache: dict[str, tuple[dict[str, int], set[str], bool]] = {}
    rows = []
    for i, test in enumerate(test_ids):
        if i % 64 == 0:
            check_deadline(stage)
        rows.append(per_test_features(step, test, state, ledger, cache))
    return rows


def shlex_join(argv: Sequence[str]) -> str:
    """The ledger's key of a command."""
    import shlex

    return shlex.join(argv)


def per_test_features(
    step: StepFeatures,
    test_id: str,
    state: FileState,
    ledger: Ledger | None = None,
    reach_cache: dict[str, tuple[dict[str, int], set[str], bool]] | None = None,
) -> list[float]:
    """Per-test features (:data:`TEST_FEATURES` order) of ``test_id`` within ``step``."""
    ledger = ledger or Ledger()
    rel = test_id.split("::", 1)[0]
    parts = test_id.split("::")[1:]
    func = parts[-1].split("[", 1)[0] if parts else ""
    qual = ".".join([*parts[:-1], func]) if parts else ""
    if reach_cache is not None and rel in reach_cache:
        reach, unparsable, reached_changed = reach_cache[rel]
    else:
        reach, unparsable = reachability(state, [rel])
        reached_changed = any(p in step.changed_defs or p in step.changed_set for p in reach)
        if reach_cache is not None:
            reach_cache[rel] = (reach, unparsable, reached_changed)
    in_f2p = test_id in step.f2p_set
    in_p2p = test_id in step.p2p_set
    if in_f2p:
        base_status = _STATUS_CODE["FAILED"]
    elif in_p2p:
        base_status = _STATUS_CODE["PASSED"]
    else:
        base_status = -1
    prev = _STATUS_CODE.get(ledger.statuses.get(test_id, ""), -1)
    defs = step.changed_defs.get(rel, set())
    return [
        *step.values,
        float(in_f2p),
        float(in_p2p),
        float(base_status),
        float(prev),
        float(rel in step.changed_set),
        float(bool(qual) and (qual in defs or func in defs or parts[0] in defs)),
        float(reached_changed),
        float(rel not in unparsable and state.text(rel) is not None),
    ]
