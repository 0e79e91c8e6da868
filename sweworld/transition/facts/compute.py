""":func:`compute_facts`: everything computed about one command."""

from __future__ import annotations

import ast
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import sweworld.pyast as pyast
from sweworld.transition.facts.collection import (
    collect_pytest,
    first_missing_import,
    merge_options,
)
from sweworld.transition.facts.commands import CommandInfo, flag_letters, parse_command
from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.hints import no_target_hint
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.interpreter import Simulator
from sweworld.transition.facts.keywords import select_items
from sweworld.transition.facts.messages import (
    executable_name,
    format_syntax_error,
    format_traceback,
    program_name,
    script_display,
)
from sweworld.transition.facts.pytest_args import PytestOptions, parse_pytest_args
from sweworld.transition.facts.pytest_render import (
    pytest_caveats,
    render_pytest_empty,
)
from sweworld.transition.facts.records import Facts, MissingFile, MissingImport, SyntaxErrorInfo
from sweworld.transition.facts.simulation import Outcome
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
    set, and let the model predict (conditioned on the facts) when it is not.
    """
    if env is None:
        task = getattr(request, "task", None)
        # No task: the command runs where sweworld runs (the local executor's default).
        env = Environment() if task is None else Environment.for_task(task, view.base or view.root)
    if python_version is not None:
        env = replace(env, python_version=python_version, python_build=None)
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
    if info.kind == "version":
        return _version_facts(facts, info, env)
    if info.error and info.is_python and env.same_minor:
        return replace(
            facts,
            exact=Prediction(stdout="", stderr=info.error, exit_code=2),
            notes=("a usage error of the interpreter",),
        )
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


def _names_another_python(program: str, env: Environment) -> bool:
    """``python2`` or ``python3.8`` in an environment whose Python is another one (the
    environment may not have that interpreter at all: ``command not found``)."""
    match = re.fullmatch(r"python(\d+)(?:\.(\d+))?", posixpath.basename(program))
    if match is None:
        return False
    wanted = tuple(int(n) for n in match.groups() if n is not None)
    return env.python[: len(wanted)] != wanted


def _version_facts(facts: Facts, info: CommandInfo, env: Environment) -> Facts:
    if info.is_python and _names_another_python(info.program, env):
        return replace(facts, notes=("the command names another Python than the environment's",))
    if info.is_python:
        if info.version_flag == "-VV":
            full = env.full_version()
            if full is None:
                return replace(facts, notes=("python -VV prints the build, which is unknown",))
            text = f"Python {full}\n"
        else:
            line = env.version_line()
            if line is None:
                return replace(facts, notes=("the environment's exact Python version is unknown",))
            text = line
        # Python 2 and 3.0-3.3 printed the version to stderr; every supported one: stdout.
        return replace(facts, exact=Prediction(stdout=text, stderr="", exit_code=0))
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
    notes: list[str] = []
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
            # runpy names sys.executable, not argv[0].
            executable = executable_name(info.program, env)
            message = f"{executable}: can't find '__main__' module in {display!r}\n"
            exact = None
            if executable and env.same_minor:
                exact = Prediction(stderr=message, exit_code=1)
            return replace(facts, exact=exact)
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
        show_lines = True
    elif info.kind == "python_c":
        source = info.code or ""
        filename = "<string>"
        search = [] if info.safe_path else [cwd]
        show_lines = False
    else:
        if info.script is None and not stdin:
            return replace(facts, exact=Prediction(), notes=("no program and no input",))
        try:
            source = stdin.decode("utf-8")
        except UnicodeDecodeError:
            source = None
        filename = "<stdin>"
        search = [] if info.safe_path else [cwd]
        show_lines = False
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
    simulator = Simulator(importer, env)
    outcome = simulator.run_main(source, filename, show_lines)
    if outcome.kind != "unknown" and not _plain_interpreter(info, request):
        notes.append("interpreter options or variables that print or change behaviour")
        outcome = Outcome("unknown") if outcome.kind != "error" else outcome
        warned = True
    missing: list[MissingImport] = []
    exact = None
    syntax_errors: tuple[SyntaxErrorInfo, ...] = ()
    if outcome.kind == "error":
        tb = format_traceback(outcome.frames, outcome.error)
        if outcome.syntax is not None:
            syntax_errors = (outcome.syntax,)
        else:
            first = outcome.frames[-1]
            missing.append(
                MissingImport(first.file, first.lineno, outcome.module, outcome.error, True, tb)
            )
        if env.same_minor and not warned:
            exact = Prediction(stdout=outcome.stdout, stderr=tb, exit_code=1)
    elif outcome.kind in ("complete", "exit") and not warned and env.same_minor:
        exact = Prediction(
            stdout=outcome.stdout, stderr=outcome.stderr, exit_code=outcome.exit_code
        )
    else:
        try:
            tree: ast.Module | None = pyast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            found = first_missing_import(importer, tree, filename, source)
            if found is not None:
                missing.append(found)
            broken = static_broken_import(importer, tree, "")
            if broken is not None:
                syntax_errors = (broken,)
                notes.append(f"{broken.path} is imported and has a syntax error")
        if warned:
            notes.append("compiling the program emits warnings")
    return replace(
        facts,
        missing_imports=tuple(missing),
        syntax_errors=syntax_errors,
        exact=exact,
        notes=facts.notes + tuple(notes),
    )


#: Interpreter options that change nothing a simple program prints.
_PLAIN_FLAGS = frozenset({"-u", "-B", "-E", "-s", "-I", "-P", "-O", "-q", "-R", "-W"})
_NOISY_VARIABLES = ("PYTHONVERBOSE", "PYTHONDEVMODE", "PYTHONINSPECT", "PYTHONPROFILEIMPORTTIME",
                    "PYTHONWARNINGS", "PYTHONMALLOCSTATS", "PYTHONSTARTUP")  # fmt: skip


def _plain_interpreter(info: CommandInfo, request: Any) -> bool:
    """Whether the interpreter runs with options and variables that add no output."""
    if any(flag not in _PLAIN_FLAGS for flag in flag_letters(info.interpreter_flags)):
        return False
    variables = getattr(request, "env", None) or {}
    return not any(variables.get(name) for name in _NOISY_VARIABLES)


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
    executable = executable_name(info.program, env)
    found = importer.find_top(parts[0])
    if found is None:
        if len(parts) == 1:
            message = f"No module named {module}"
        else:
            message = (
                f"Error while finding module specification for {module!r} "
                f"(ModuleNotFoundError: No module named {parts[0]!r})"
            )
        exact = None
        if executable:
            exact = Prediction(stderr=f"{executable}: {message}\n", exit_code=1)
        return replace(
            facts,
            missing_imports=(MissingImport("", 0, parts[0], message, True),),
            exact=exact,
        )
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
        if ws.is_file(main):
            executed.append(main)
        else:
            message = (
                f"No module named {module}.__main__; {module!r} is a package and cannot be "
                "directly executed"
            )
            exact = None
            if executable:
                exact = Prediction(stderr=f"{executable}: {message}\n", exit_code=1)
            return replace(facts, exact=exact)
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
    variables = getattr(request, "env", None) or {}
    if variables.get("PYTEST_ADDOPTS"):
        try:
            extra = shlex.split(variables["PYTEST_ADDOPTS"])
        except ValueError:
            extra = variables["PYTEST_ADDOPTS"].split()
        options = merge_options(parse_pytest_args(extra), options)
    if info.module and "pytest" not in env.installed:
        executable = executable_name(info.program, env)
        message = "No module named pytest"
        exact = Prediction(stderr=f"{executable}: {message}\n", exit_code=1) if executable else None
        return replace(
            facts,
            missing_imports=(MissingImport("", 0, "pytest", message, True),),
            exact=exact,
        )
    if options.help or options.version or options.informational:
        return replace(facts, notes=("pytest's help, version or information output",))
    collection, config, missing, not_found = collect_pytest(ws, options, cwd, env)
    addopts = config.getargs("addopts")
    if addopts:
        options = merge_options(parse_pytest_args(addopts), options)
    testpaths_used: list[str] = []
    if not options.targets and cwd == config.rootdir and config.getlist("testpaths", []):
        testpaths_used = config.getlist("testpaths", [])
    facts = replace(
        facts,
        rootdir=config.rootdir,
        configfile=config.inifile,
        executed_files=tuple(collection.files),
        syntax_errors=tuple(collection.syntax_errors),
        missing_imports=tuple(collection.missing_imports),
        notes=tuple(collection.notes),
    )
    executable = executable_name(info.program, env) if info.module else None
    prints_header = options.verbosity >= 0 and not options.no_header
    exact_ok = (
        env.pytest_known
        and (env.header_known or not prints_header)
        and not options.xdist
        and not options.unknown
        and not any(p and not p.startswith("no:") for p in options.plugins)
    )
    if missing:
        first = missing[0]
        stdout = render_pytest_empty(env, config, options, 0, 0, testpaths_used, executable)
        exact = Prediction(stdout=stdout, stderr=first.message + "\n", exit_code=4)
        return replace(
            facts,
            missing_files=tuple(missing),
            exact=exact if exact_ok else None,
            exact_caveats=pytest_caveats(env, options) if exact_ok else (),
        )
    if not env.same_minor:  # what follows parses the tests with this interpreter
        exact_ok = False
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
        # (never met in 3,353 real execution steps: benchmarks/facts_payoff.py).
        return replace(facts, notes=(*facts.notes, f"not found: {not_found[0]}"))
    if collection.warnings:
        facts = replace(
            facts, notes=(*facts.notes, *(f"collection warning: {w}" for w in collection.warnings))
        )
    if not exact_collection or collection.errors or collection.warnings:
        return facts
    if not selected and exact_ok and not options.collect_only:
        stdout = render_pytest_empty(
            env, config, options, len(collection.items), len(deselected), testpaths_used,
            executable,
        )  # fmt: skip
        return replace(
            facts,
            exact=Prediction(stdout=stdout, stderr="", exit_code=5),
            exact_caveats=pytest_caveats(env, options),
        )
    return facts
