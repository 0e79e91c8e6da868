""":func:`check_prediction`: the ways a prediction contradicts itself or the facts computed
for the command.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any

from sweworld.transition.facts import (
    Facts,
    Importer,
    Workspace,
    search_dirs_base,
)
from sweworld.transition.types import WORKDIR, Prediction, WorkspaceView
from sweworld.transition.validate.pytest_output import (
    PytestSummary,
    output_test_ids,
    parse_pytest_summary,
    strip_params,
)
from sweworld.transition.validate.records import EXCEPTION_LINE, Issue, last_line
from sweworld.transition.validate.runners import check_runner, program_source

#: Bound on ``len(stdout) + len(stderr)`` of a prediction (a real command can print more,
#: but an observation that long is truncated by every agent scaffold anyway).
MAX_OUTPUT_CHARS = 100_000


# =========================================================================== checks

_ERROR_LINE = re.compile(r"^(?:Error|ERROR|error|fatal|FATAL)(?::| )|^\S+: error: ")


def _final_traceback(text: str) -> tuple[str | None, str] | None:
    """When ``text`` ends with a Python exception: (the file of the traceback's first
    frame, the line before the ``Traceback`` header); None otherwise."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    if not EXCEPTION_LINE.match(last) or last.split(":")[0].endswith("Warning"):
        return None
    tail = lines[-400:]
    for index in range(len(tail) - 1, -1, -1):
        if tail[index].startswith("Traceback (most recent call last):"):
            first = None
            if index + 1 < len(tail):
                match = _TB_FILE.match(tail[index + 1])
                first = match.group(1) if match else None
            before = tail[index - 1] if index else ""
            return first, before
    return None


#: Code that prints tracebacks or writes to stderr itself (or runs code that may).
_PRINTS_ERRORS = re.compile(
    r"print_exc|format_exc|print_exception|format_exception|print_tb|print_stack|logging|"
    r"logger|\.exception\(|stderr|faulthandler|subprocess|os\.system|popen|multiprocessing|"
    r"[Tt]hread|concurrent|pytest|unittest|doctest|runtests|call_command|execute_from|"
    r"management|excepthook|\bexec\(|\beval\(|runpy|import_module|__import__"
)


def _main_display(facts: Facts) -> str | None:
    info = facts.command
    if info.kind == "python_c":
        return "<string>"
    if info.kind == "python_stdin":
        return "<stdin>"
    if info.kind == "python_script" and info.script:
        if info.script.startswith("/"):
            return info.script
        return facts.cwd.rstrip("/") + "/" + info.script
    return None


def _check_exit_0(
    stderr: str, facts: Facts | None, request: Any, view: WorkspaceView | None
) -> list[Issue]:
    """A traceback or an error line at the end of stderr with exit code 0.

    Programs may print tracebacks themselves (``traceback.print_exc()``), so for Python
    programs this is only checked when their source is known and prints nothing to stderr
    by itself, and when the traceback starts in the program (not in a thread, a
    finaliser or a library's log). For pytest and pip, an ``ERROR:`` line means a failure.
    """
    if facts is None:
        return []
    kind = facts.kind
    last = last_line(stderr) or ""
    if kind in ("pytest", "pip"):
        if _ERROR_LINE.match(last):
            return [
                Issue(
                    "error_with_exit_0", f"stderr ends with an error ({last!r}) but exit_code is 0"
                )
            ]
        return []
    if kind not in ("python_script", "python_c", "python_stdin", "python_module"):
        return []
    source = program_source(facts, request, view)
    if source is None or _PRINTS_ERRORS.search(source):
        return []
    found = _final_traceback(stderr)
    if found is not None:
        first, before = found
        origin_known = first is not None and first == _main_display(facts)
        special = re.match(r"(Exception (in thread|ignored in)|Process )", before or "")
        if origin_known and not special:
            return [
                Issue(
                    "traceback_with_exit_0",
                    "stderr ends with an uncaught exception's traceback but exit_code is 0 "
                    "(an uncaught exception exits with 1)",
                )
            ]
        return []
    if _ERROR_LINE.match(last) and not re.match(r"^(ERROR|WARNING|INFO|DEBUG):[\w.]*:", last):
        return [
            Issue("error_with_exit_0", f"stderr ends with an error ({last!r}) but exit_code is 0")
        ]
    return []


# ``[ \t]*``, not ``\s*``: under re.M, ``^\s*`` runs over every following blank line from
# every line start (quadratic on a text of newlines).
_TB_FILE = re.compile(r'^[ \t]*File "([^"]+)", line (\d+)', re.M)
_PYTEST_LOCATION = re.compile(r"^([\w./-]+\.py):(\d+): ", re.M)


def _line_count(text: str) -> int:
    return len(text.splitlines())


def check_prediction(
    pred: Prediction,
    facts: Facts | None,
    request: Any = None,
    view: WorkspaceView | None = None,
    *,
    max_chars: int = MAX_OUTPUT_CHARS,
    skip: Iterable[str] = (),
) -> list[Issue]:
    """The inconsistencies of ``pred`` (empty when none is found).

    Checks that need the workspace are skipped when ``view`` is None; checks that need
    pytest's collection are skipped unless :attr:`Facts.collection_exact` (or, for test ids,
    unless the file's list of tests is known). ``skip`` lists issue codes not to report
    (e.g. ``traceback_file`` and ``module_exists`` when the view does not hold the whole
    repository).
    """
    issues: list[Issue] = []
    stdout, stderr, code = pred.stdout or "", pred.stderr or "", pred.exit_code
    combined = stdout + ("\n" if stdout and not stdout.endswith("\n") else "") + stderr
    kind = facts.kind if facts is not None else "other"

    if not isinstance(code, int) or not 0 <= code <= 255:
        issues.append(
            Issue("exit_code_range", f"exit_code {code!r} is outside 0..255 (a process's status)")
        )
    if len(stdout) + len(stderr) > max_chars:
        issues.append(
            Issue(
                "output_too_long",
                f"stdout and stderr hold {len(stdout) + len(stderr)} characters, more than "
                f"{max_chars}",
            )
        )
        return issues  # refused already; reading it further would only cost time
    if code == 0 and stderr.strip():
        issues += _check_exit_0(stderr, facts, request, view)
    if facts is None:
        return issues

    issues += _check_against_exact(pred, facts)
    issues += check_runner(pred, facts, request, view, combined)
    if kind == "pytest":
        issues += _check_pytest(pred, facts, combined)
    if (
        kind in ("python_script", "python_c", "python_stdin", "python_module")
        and facts.exact is None
    ):
        issues += _check_python_facts(pred, facts)
    skipped = set(skip)
    if view is not None:
        if "traceback_file" not in skipped:
            issues += _check_files(combined, facts, view)
        if "module_exists" not in skipped:
            issues += _check_modules(combined, facts, request, view)
    return [issue for issue in issues if issue.code not in skipped]


def _check_against_exact(pred: Prediction, facts: Facts) -> list[Issue]:
    exact = facts.exact
    if exact is None:
        return []
    if pred.exit_code != exact.exit_code:
        return [
            Issue(
                "contradicts_exact",
                f"the exit code is known to be {exact.exit_code}, not {pred.exit_code}",
            )
        ]
    if pred.stdout != exact.stdout or pred.stderr != exact.stderr:
        return [Issue("contradicts_exact", "the output is known exactly and differs from it")]
    return []


def _check_python_facts(pred: Prediction, facts: Facts) -> list[Issue]:
    issues = []
    errors = [e for e in facts.syntax_errors if e.certain]
    if errors:
        error = errors[0]
        own = error.path in ("<string>", "<stdin>") or (
            facts.command.kind == "python_script" and error.path == _main_display(facts)
        )
        if own and (pred.exit_code != 1 or error.error_type not in pred.stderr):
            issues.append(
                Issue(
                    "syntax_error_ignored",
                    f"{error.path} line {error.line} has a {error.error_type} "
                    f"({error.message}): Python prints it and exits with 1",
                )
            )
        elif not own and pred.exit_code == 0:
            issues.append(
                Issue(
                    "syntax_error_ignored",
                    f"the program imports {error.path}, which has a {error.error_type} at line "
                    f"{error.line}: it cannot succeed",
                )
            )
    certain = [m for m in facts.missing_imports if m.certain]
    if certain and not errors:
        missing = certain[0]
        shown = "No module named" in pred.stderr + pred.stdout or "ImportError" in pred.stderr
        if pred.exit_code == 0 or not shown:
            issues.append(
                Issue(
                    "missing_import_ignored",
                    f"{missing.error} is raised ({missing.file or 'the command'}, line "
                    f"{missing.line}) before anything else runs",
                )
            )
    return issues


def _check_pytest(pred: Prediction, facts: Facts, combined: str) -> list[Issue]:
    issues: list[Issue] = []
    options = facts.command.pytest
    summary = parse_pytest_summary(combined)
    code = pred.exit_code
    informational = options is not None and (options.collect_only or options.informational)
    if summary is not None and not informational:
        if summary.bad and code == 0:
            issues.append(
                Issue(
                    "pytest_failures_with_exit_0",
                    f"the summary reports failures or errors ({summary.line.strip('= ')}) but "
                    "exit_code is 0 (pytest exits with 1)",
                )
            )
        elif (
            not summary.bad
            and summary.counts.get("passed")
            and code != 0
            and ("Required test coverage" not in combined and "INTERNALERROR" not in combined)
        ):
            issues.append(
                Issue(
                    "pytest_passed_with_nonzero_exit",
                    f"every test passed ({summary.line.strip('= ')}) but exit_code is {code} "
                    "(pytest exits with 0)",
                )
            )
        elif summary.no_tests and not summary.bad and code == 0:
            issues.append(
                Issue(
                    "pytest_no_tests_with_exit_0",
                    "no test ran but exit_code is 0 (pytest exits with 5, or 4 for a usage error)",
                )
            )
    certain_errors = [e for e in facts.syntax_errors if e.certain]
    if facts.collection_errors and certain_errors and options is not None:
        # A test module that cannot be imported is an error in the summary, and pytest
        # never exits 0 (or 5) then: 2 when interrupted, 1 with -x or when told to go on,
        # 4 when a node id points into it.
        no_error = summary is not None and not summary.counts.get("error")
        if code in (0, 5) or no_error:
            error = certain_errors[0]
            issues.append(
                Issue(
                    "collection_error_ignored",
                    f"{facts.collection_errors[0]} cannot be collected ({error.path} has a "
                    f"{error.error_type} at line {error.line}): the summary counts an error "
                    "and pytest exits with 2",
                )
            )
    issues += _check_pytest_counts(facts, summary, options)
    issues += _check_test_ids(facts, combined)
    return issues


def _counts_comparable(facts: Facts, options: Any) -> bool:
    if facts.collected_tests is None or not facts.collection_exact or facts.collection_errors:
        return False
    if options is None:
        return True
    return not (
        options.exitfirst
        or options.maxfail
        or options.stateful
        or options.collect_only
        or options.unknown
        or any(p and not p.startswith("no:") for p in options.plugins)
    )


def _check_pytest_counts(facts: Facts, summary: PytestSummary | None, options: Any) -> list[Issue]:
    if summary is None or not _counts_comparable(facts, options):
        return []
    assert facts.collected_tests is not None
    expected = len(facts.collected_tests)
    issues = []
    ran = summary.ran
    errors = summary.counts.get("error", 0)
    # Errors may stand for whole modules that could not be imported (their tests are then
    # neither run nor counted): only an upper bound holds.
    if not (ran <= expected <= ran + errors) and not (errors and ran <= expected):
        issues.append(
            Issue(
                "pytest_count_mismatch",
                f"the summary accounts for {ran} tests"
                + (f" (+{errors} errors)" if errors else "")
                + f", but pytest would run {expected}",
            )
        )
    deselected = summary.counts.get("deselected", 0)
    if deselected != facts.deselected and not errors and (deselected or summary.counts):
        issues.append(
            Issue(
                "pytest_deselected_mismatch",
                f"the summary says {deselected} deselected, but {facts.deselected} tests are "
                "deselected",
            )
        )
    if (
        summary.collected is not None
        and facts.collected_total is not None
        and not errors
        and summary.collected != facts.collected_total
    ):
        issues.append(
            Issue(
                "pytest_collected_mismatch",
                f"'collected {summary.collected} items', but pytest would collect "
                f"{facts.collected_total}",
            )
        )
    return issues


def _check_test_ids(facts: Facts, combined: str) -> list[Issue]:
    if facts.collected_tests is None:
        return []
    ids = output_test_ids(combined)
    if not ids:
        return []
    known = {facts.cwd_relative(t) for t in facts.collected_tests}
    known_bases = {strip_params(t) for t in known}
    uncertain_bases = {facts.cwd_relative(t) for t in facts.uncertain_tests}
    uncertain_files = {facts.cwd_relative(f) for f in facts.uncertain_files}
    unknown = []
    for test_id in list(dict.fromkeys(ids))[:MAX_LOOKUPS]:
        if test_id in known:
            continue
        if "[" in test_id and any(k.startswith(test_id) for k in known):
            continue  # an id cut at a space by the log's format
        if any(k.startswith(test_id + "::") for k in known):
            continue  # a collector (a class) that failed
        file = test_id.split("::")[0]
        base = strip_params(test_id)
        if file in uncertain_files or base in uncertain_bases:
            continue
        if not facts.collection_exact and base in known_bases:
            continue
        unknown.append(test_id)
    if not unknown:
        return []
    shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
    return [
        Issue(
            "unknown_test_id",
            f"the output names tests that the command does not run: {shown}",
        )
    ]


#: At most this many distinct files / modules / test ids are looked up per prediction (each
#: lookup reads the workspace; the first ones are enough to show a contradiction).
MAX_LOOKUPS = 200


def _references(combined: str, facts: Facts) -> list[tuple[str, int]]:
    found: dict[tuple[str, int], None] = {}
    matches = [_TB_FILE.finditer(combined)]
    if facts.kind == "pytest":
        matches.append(_PYTEST_LOCATION.finditer(combined))
    for index, iterator in enumerate(matches):
        for match in iterator:
            path, number = match.group(1), match.group(2)
            if len(number) > 9:
                number = "999999999"  # no line number is that large; never int() 4,300 digits
            if index:
                path = posixpath.normpath(posixpath.join(facts.cwd, path))
            if path.startswith(WORKDIR + "/"):
                found[(path, int(number))] = None
                if len(found) >= MAX_LOOKUPS:
                    return list(found)
    return list(found)


def _check_files(combined: str, facts: Facts, view: WorkspaceView) -> list[Issue]:
    problems = []
    lines: dict[str, int | None] = {}
    for path, line in _references(combined, facts):
        if path not in lines:
            if not view.exists(path):
                lines[path] = None
                problems.append(f"{path} does not exist")
                continue
            text = view.read_text(path)
            lines[path] = _line_count(text) if text is not None else -1
        count = lines[path]
        if count is not None and count >= 0 and line > count + 1:
            problems.append(f"{path} has {count} lines, not {line}")
    if not problems:
        return []
    return [
        Issue(
            "traceback_file",
            "the output refers to code that is not there: " + "; ".join(problems[:5]),
        )
    ]


_NO_MODULE = re.compile(r"No module named '?([\w.]+)'?")


def _check_modules(combined: str, facts: Facts, request: Any, view: WorkspaceView) -> list[Issue]:
    names: dict[str, None] = {}
    for match in _NO_MODULE.finditer(combined):
        names[match.group(1).rstrip(".")] = None
        if len(names) >= MAX_LOOKUPS:
            break
    if not names:
        return []
    ws = Workspace(view)
    importer = Importer(ws, _command_search_dirs(facts, request, ws), frozenset())
    issues = []
    for name in names:
        if name.endswith("__main__"):
            continue
        if importer.exists(name) is True:
            where = importer.find_top(name.split(".")[0])
            location = where.package_dir or where.path if where is not None else None
            issues.append(
                Issue(
                    "module_exists",
                    f"the output says 'No module named {name!r}' but the workspace has it"
                    + (f" ({location})" if location else ""),
                )
            )
    return issues


def _command_search_dirs(facts: Facts, request: Any, ws: Workspace) -> list[str]:
    info = facts.command
    cwd = facts.cwd
    dirs: list[str] = []
    if not info.safe_path:
        if info.kind == "python_script" and info.script:
            dirs.append(posixpath.dirname(posixpath.normpath(posixpath.join(cwd, info.script))))
        elif info.kind in ("python_c", "python_stdin", "python_module") or (
            info.kind == "pytest" and info.module
        ):
            dirs.append(cwd)
    if facts.kind == "pytest":
        for path in facts.executed_files:
            directory = posixpath.dirname(path)
            while ws.is_file(posixpath.join(directory, "__init__.py")) and directory != "/":
                directory = posixpath.dirname(directory)
            dirs.append(directory)
    variables = getattr(request, "env", None) or {}
    dirs += [
        posixpath.normpath(posixpath.join(cwd, p))
        for p in variables.get("PYTHONPATH", "").split(":")
        if p
    ]
    return dirs + search_dirs_base(ws)
