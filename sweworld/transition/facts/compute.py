""":func:`compute_facts`: everything computed about one command."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import sweworld.pyast as pyast
from sweworld.transition.facts.collection import (
    collect_pytest,
    first_missing_import,
    merge_options,
)
from sweworld.transition.facts.commands import CommandInfo, parse_command
from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.hints import no_target_hint
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.interpreter import Simulator
from sweworld.transition.facts.keywords import select_items
from sweworld.transition.facts.messages import (
    format_syntax_error,
    program_name,
    script_display,
)
from sweworld.transition.facts.pytest_args import PytestOptions, env_addopts, parse_pytest_args
from sweworld.transition.facts.records import Facts, MissingFile, MissingImport, SyntaxErrorInfo
from sweworld.transition.facts.workspace import (
    declared_dependencies,
    search_dirs_base,
    static_broken_import,
)
from sweworld.transition.types import WORKDIR, Prediction, WorkspaceView

# --------------------------------------------------------------------------- compute_facts


def _resolve_installed(
    ws: Workspace, env: Environment, installed: Iterable[str] | None
) -> frozenset[str]:
    base = frozenset(installed) if installed is not None else env.installed
    return base | declared_dependencies(ws)  # type: ignore[arg-type]


def compute_facts(
    request: Any,
    view: WorkspaceView,
    *,
    python_version: str | None = None,
    installed: Iterable[str] | None = None,
    env: Environment | None = None,
) -> Facts:
    """Everything that can be computed exactly about ``request`` (an
    :class:`~sweworld.sandbox.executor.ExecutionRequest`: ``argv``, ``cwd``, ``stdin``,
    ``env``) in the workspace seen through ``view``.

    Args:
        python_version: the environment's Python version (default: the running
            interpreter's, or ``env``'s).
        installed: top-level names of installed third-party modules (default:
            :data:`DEFAULT_INSTALLED`, i.e. pytest); the workspace's declared dependencies
            are always added.
        env: the rest of the environment (:class:`Environment`); default: the request's
            task's (:meth:`Environment.for_task`: only what its description states is
            known), or, for a request without a task, the host running sweworld.

    When :func:`no_target_hint` applies, :attr:`Facts.hint` is set and nothing else is
    computed: the hint is the answer. Otherwise answer with :attr:`Facts.exact` when it is
    set (a script that does not exist, a program that does not compile: the exact answers
    that paid on real steps), and let the model predict (conditioned on the facts) when it
    is not.
    """
    if env is None:
        task = getattr(request, "task", None)
        # No task: the command runs where sweworld runs (the local executor's default).
        env = Environment() if task is None else Environment.for_task(task, view.base or view.root)
    if python_version is not None:
        env = replace(env, python_version=python_version)
    ws = Workspace(view)
    env = replace(env, installed=_resolve_installed(ws, env, installed))
    argv = tuple(getattr(request, "argv", ()) or ())
    stdin = getattr(request, "stdin", b"") or b""
    cwd = getattr(request, "cwd", None) or view.cwd or WORKDIR
    info = parse_command(argv, stdin)
    facts = Facts(
        command=info,
        cwd=cwd,
        python_version=env.python_version,
        is_pip_install=info.is_pip_install,
    )
    hint = no_target_hint(request, view)
    if hint is not None:
        # The hint is the answer (see no_target_hint); nothing else is computed.
        return replace(facts, hint=hint)
    if info.kind in ("python_script", "python_c", "python_stdin"):
        facts = _python_facts(facts, info, request, ws, env, cwd, stdin)
    elif info.kind == "python_module":
        facts = _module_facts(facts, info, request, ws, env, cwd)
    elif info.kind == "pytest":
        facts = _pytest_facts(facts, info, request, ws, env, cwd)
    if facts.syntax_errors and not env.same_minor:
        facts = replace(
            facts, syntax_errors=tuple(replace(e, certain=False) for e in facts.syntax_errors)
        )
    return facts


def _env_paths(request: Any, cwd: str, info: CommandInfo) -> list[str]:
    if info.isolated:
        return []
    variables = getattr(request, "env", None) or {}
    value = variables.get("PYTHONPATH", "")
    return [posixpath.normpath(posixpath.join(cwd, p)) for p in value.split(":") if p]


def _python_facts(
    facts: Facts,
    info: CommandInfo,
    request: Any,
    ws: Workspace,
    env: Environment,
    cwd: str,
    stdin: bytes,
) -> Facts:
    program = program_name(info.program)
    executed: list[str] = []
    if info.kind == "python_script":
        script = info.script or ""
        full = posixpath.normpath(posixpath.join(cwd, script))
        display = script_display(script, cwd, env)
        if ws.is_dir(full):
            main = posixpath.join(full, "__main__.py")
            if ws.is_file(main):
                executed.append(main)
                return replace(facts, executed_files=tuple(executed))
            return facts
        if not ws.exists(full):
            if ws.view.resolve(full) is None or not full.startswith((WORKDIR, "/tmp")):
                return replace(facts, notes=("the script is outside the workspace",))
            message = (
                f"{program}: can't open file {display!r}: [Errno 2] No such file or directory\n"
            )
            missing = MissingFile(script, full, message, 2)
            # The message's form depends on the version (absolute paths from 3.9 on).
            exact = Prediction(stderr=message, exit_code=2) if env.python_known else None
            return replace(facts, missing_files=(missing,), exact=exact)
        source = ws.text(full)
        executed.append(full)
        script_dir = posixpath.dirname(full)
        search = [] if info.safe_path else [script_dir]
        filename = display
    elif info.kind == "python_c":
        source = info.code or ""
        filename = "<string>"
        search = [] if info.safe_path else [cwd]
    else:
        try:
            source = stdin.decode("utf-8")
        except UnicodeDecodeError:
            source = None
        filename = "<stdin>"
        search = [] if info.safe_path else [cwd]
    for arg in info.args:
        if arg.endswith(".py"):
            candidate = posixpath.normpath(posixpath.join(cwd, arg))
            if ws.is_file(candidate) and candidate not in executed:
                executed.append(candidate)
    script_path = facts.command.script
    if script_path and posixpath.basename(script_path) == "runtests.py" and executed:
        executed += [p for p in _django_labels(ws, executed[0], info.args) if p not in executed]
    facts = replace(facts, executed_files=tuple(executed))
    if source is None:
        return replace(facts, notes=("the program's source is not readable text",))
    syntax, warned = format_syntax_error(source, filename)
    if syntax is not None:
        exact = Prediction(stderr=syntax.text, exit_code=1) if env.same_minor else None
        return replace(facts, syntax_errors=(syntax,), exact=exact)
    search_dirs = [*search, *_env_paths(request, cwd, info), *search_dirs_base(ws)]
    importer = Importer(ws, search_dirs, env.installed, complete=env.installed_complete)
    # The top level as far as it is certain: an import that certainly fails is a fact (the
    # program's output is left to the model: measured on real steps, an interpreted answer
    # never paid in the task's own environment, sweworld bench facts-payoff).
    outcome = Simulator(importer, env).run_main(source, filename)
    if outcome.kind == "error":
        if outcome.syntax is not None:
            return replace(facts, syntax_errors=(outcome.syntax,))
        first = outcome.frames[-1]
        missing = MissingImport(first.file, first.lineno, outcome.module, outcome.error, True)
        return replace(facts, missing_imports=(missing,))
    if outcome.kind != "unknown":  # the top level runs through: nothing more is known
        return facts
    notes: list[str] = []
    missing_imports: tuple[MissingImport, ...] = ()
    syntax_errors: tuple[SyntaxErrorInfo, ...] = ()
    try:
        tree: ast.Module | None = pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None:
        found = first_missing_import(importer, tree, filename, source)
        if found is not None:
            missing_imports = (found,)
        broken = static_broken_import(importer, tree, "")
        if broken is not None:
            syntax_errors = (broken,)
            notes.append(f"{broken.path} is imported and has a syntax error")
    if warned:
        notes.append("compiling the program emits warnings")
    return replace(
        facts,
        missing_imports=missing_imports,
        syntax_errors=syntax_errors,
        notes=facts.notes + tuple(notes),
    )


def _django_labels(ws: Workspace, runtests: str, args: Sequence[str]) -> list[str]:
    """Test modules named by Django's ``runtests.py`` labels (``queries.tests.Cls.test``)."""
    base = posixpath.dirname(runtests)
    out = []
    for arg in args:
        if arg.startswith("-") or "/" in arg:
            continue
        parts = arg.split(".")
        for cut in range(len(parts), 0, -1):
            rel = "/".join(parts[:cut])
            for candidate in (f"{base}/{rel}.py", f"{base}/{rel}/__init__.py"):
                if ws.is_file(candidate):
                    if candidate.endswith("__init__.py"):
                        package = posixpath.dirname(candidate)
                        out += [
                            f"{package}/{n}"
                            for n in ws.listdir(package)
                            if n.startswith("test") and n.endswith(".py")
                        ]
                    else:
                        out.append(candidate)
                    break
            else:
                continue
            break
    return out[:20]


def _module_facts(
    facts: Facts, info: CommandInfo, request: Any, ws: Workspace, env: Environment, cwd: str
) -> Facts:
    module = info.module or ""
    search = [] if info.safe_path else [cwd]
    importer = Importer(ws, [*search, *_env_paths(request, cwd, info), *search_dirs_base(ws)],
                         env.installed, complete=env.installed_complete)  # fmt: skip
    parts = module.split(".")
    found = importer.find_top(parts[0])
    if found is None:
        if len(parts) == 1:
            message = f"No module named {module}"
        else:
            message = (
                f"Error while finding module specification for {module!r} "
                f"(ModuleNotFoundError: No module named {parts[0]!r})"
            )
        return replace(facts, missing_imports=(MissingImport("", 0, parts[0], message, True),))
    for part in parts[1:]:
        if found.kind != "workspace":
            break
        sub = importer.find_sub(found, part)
        if sub is None:
            return replace(facts, notes=(f"{module}: no such module in the workspace",))
        found = sub
    if found.kind != "workspace":
        return facts
    executed: list[str] = []
    if found.package_dir is not None:
        main = posixpath.join(found.package_dir, "__main__.py")
        if not ws.is_file(main):
            return facts  # "is a package and cannot be directly executed"
        executed.append(main)
    elif found.path:
        executed.append(found.path)
    syntax_errors = []
    for path in executed:
        text = ws.text(path)
        if text is None:
            continue
        syntax, _ = format_syntax_error(text, path)
        if syntax is not None:
            syntax_errors.append(syntax)
    return replace(
        facts,
        executed_files=tuple(executed),
        syntax_errors=tuple(syntax_errors),
        notes=("runpy's traceback frames are not computed",) if syntax_errors else (),
    )


def _pytest_facts(
    facts: Facts, info: CommandInfo, request: Any, ws: Workspace, env: Environment, cwd: str
) -> Facts:
    options = info.pytest or PytestOptions()
    extra = env_addopts(getattr(request, "env", None))
    if extra:
        options = merge_options(parse_pytest_args(extra), options)
    if info.module and "pytest" not in env.installed:
        missing_pytest = MissingImport("", 0, "pytest", "No module named pytest", True)
        return replace(facts, missing_imports=(missing_pytest,))
    if options.help or options.version or options.informational:
        return replace(facts, notes=("pytest's help, version or information output",))
    collection, config, missing, not_found = collect_pytest(ws, options, cwd, env)
    addopts = config.getargs("addopts")
    if addopts:
        options = merge_options(parse_pytest_args(addopts), options)
    facts = replace(
        facts,
        rootdir=config.rootdir,
        configfile=config.inifile,
        executed_files=tuple(collection.files),
        syntax_errors=tuple(collection.syntax_errors),
        missing_imports=tuple(collection.missing_imports),
        notes=tuple(collection.notes),
    )
    if missing:
        # pytest's "file or directory not found" (exit 4) is a fact; its rendered output
        # never paid in the task's own environment (sweworld bench facts-payoff).
        return replace(facts, missing_files=tuple(missing))
    selected, deselected, select_exact = select_items(
        collection.items, options, cwd, config.rootdir
    )
    exact_collection = collection.exact and select_exact
    facts = replace(
        facts,
        collected_tests=tuple(i.nodeid for i in selected),
        collected_total=len(collection.items),
        deselected=len(deselected),
        collection_errors=tuple(collection.errors),
        collection_exact=exact_collection,
        uncertain_files=tuple(collection.uncertain_files),
        uncertain_tests=tuple(dict.fromkeys(i.base for i in collection.items if i.uncertain)),
    )
    if not_found:
        # A node id that matches nothing is a fact; pytest's message for it is not rendered
        # (never met in 3,353 real execution steps: sweworld bench facts-payoff).
        return replace(facts, notes=(*facts.notes, f"not found: {not_found[0]}"))
    if collection.warnings:
        facts = replace(
            facts, notes=(*facts.notes, *(f"collection warning: {w}" for w in collection.warnings))
        )
    return facts
