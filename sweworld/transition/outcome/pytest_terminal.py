"""What pytest's terminal reporter writes around the tests, release by release.

The session header (the platform line, ``rootdir`` / ``inifile`` / ``configfile`` /
``testpaths`` as each release words them, the interpreter and cache folder with ``-v``),
the progress lines (letters wrapped at the edge, the percentage right-aligned to column
79; a line per test with ``-v``), separator lines and short-summary lines cut to the
terminal's 80 columns. Each rule is read from pytest's ``terminal.py`` of the releases
named (4.6 to 9.0) and checked against real runs. :mod:`~sweworld.transition.outcome.render`
assembles a run from these.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from sweworld.execution.interpreters import VENV_MOUNT
from sweworld.tasks.fields import task_field

__all__ = [
    "DEFAULT_PYTEST",
    "DEFAULT_PYTHON",
    "HARNESS_PYTHON_RELEASES",
    "WIDTH",
    "banner",
    "command_layout",
    "header_versions",
    "progress_lines",
    "python_executable",
    "session_header",
    "summary_line",
    "verbose_lines",
    "version_tuple",
]

#: The terminal's width pytest writes for when its output is not a terminal.
WIDTH = 80

#: The Python release of each major.minor in the SWE-bench harness images, as their pytest
#: session headers print it (the shared agent runs' outputs).
HARNESS_PYTHON_RELEASES = {
    "3.6": "3.6.13",
    "3.7": "3.7.16",
    "3.8": "3.8.20",
    "3.9": "3.9.20",
    "3.11": "3.11.11",
}
#: What the header says when the task's environment does not tell.
DEFAULT_PYTHON, DEFAULT_PYTEST = "3.11.7", "8.3.3"


def header_versions(task: Any) -> tuple[str, str]:
    """(Python, pytest) versions for the session header of ``task``'s pytest runs: the
    full Python release when the task states it (a factory task runs on the host), else
    the harness image's release of the environment's major.minor; the pytest version the
    environment pins. Each falls back to the defaults above when unknown."""
    from sweworld.tasks.environment import task_environment

    if task is None:
        return DEFAULT_PYTHON, DEFAULT_PYTEST
    try:
        env = task_environment(task)
    except Exception:  # a malformed task row: the defaults
        return DEFAULT_PYTHON, DEFAULT_PYTEST
    python = env.python_full or HARNESS_PYTHON_RELEASES.get(env.python or "") or DEFAULT_PYTHON
    pytest_version = env.runner_version if env.test_runner == "pytest" else None
    repo = str(task_field(task, "repo") or "").strip().lower()
    if pytest_version is None and repo == "pytest-dev/pytest":
        # the runner is the repository itself, at the release the task names ("5.4"): the
        # header's layout follows it (the dev suffix, from git, is not known)
        pytest_version = str(task_field(task, "version") or "") or None
    return python, pytest_version or DEFAULT_PYTEST


#: Where the interpreter of a SWE-bench harness image is, and of an environment sweworld
#: builds.
HARNESS_BIN, LOCAL_BIN = "/opt/miniconda3/envs/testbed/bin", f"{VENV_MOUNT}/bin"


def python_executable(task: Any, argv0: str) -> str:
    """``sys.executable`` of a pytest run started as ``argv0`` (``python3 -m pytest`` runs
    ``python3``; ``python -m pytest`` and the ``pytest`` script run ``python``), in the
    harness image of a SWE-bench task or in sweworld's own environment otherwise."""
    from sweworld.tasks.environment import task_environment

    try:
        harness = task is not None and task_environment(task).source == "swebench-spec"
    except Exception:  # a malformed task row: sweworld's own environment
        harness = False
    name = "python3" if posixpath.basename(argv0).startswith("python3") else "python"
    return f"{HARNESS_BIN if harness else LOCAL_BIN}/{name}"


def command_layout(options: Any, argv: Sequence[str], task: Any) -> dict[str, Any]:
    """``render_pytest``'s arguments that the task and a pytest command line decide: the
    header's versions (:func:`header_versions`), and from ``options`` (its
    :class:`~sweworld.transition.facts.pytest_args.PytestOptions`, None for another
    runner) the ``-r`` letters, ``-q`` / ``-qq``, ``--tb``, and with ``-v`` the
    interpreter's path and whether the cache provider runs."""
    python, pytest_version = header_versions(task)
    out: dict[str, Any] = {"python": python, "pytest_version": pytest_version}
    if options is None:
        return out
    out |= {
        "report_chars": options.report_chars,
        "quiet": options.verbosity < 0,
        "quieter": options.verbosity < -1,
        "tb": options.tb,
    }
    if options.verbosity > 0:
        out["verbose"] = python_executable(task, argv[0] if argv else "python")
        out["cachedir"] = "no:cacheprovider" not in options.plugins
    return out


def version_tuple(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``5.4.1.dev338+gc98bc4cd3``."""
    head = text.split(".")
    try:
        return int(head[0]), int(head[1]) if len(head) > 1 and head[1].isdigit() else 0
    except ValueError:
        return (0, 0)


def session_header(
    python: str, pytest_version: str, rootdir: str, inifile: str | None,
    testpaths: Sequence[str], verbose: str | None = None, cachedir: bool = True,
) -> list[str]:  # fmt: skip
    """The session header as the version of pytest writes it: one ``rootdir`` line naming
    the ini-file (``inifile:`` before 6.0, ``configfile:`` after) and the testpaths used,
    or, from 7.3 on, a line for each. ``verbose`` (``-v``): the interpreter's path, named
    on the platform line, and the cache folder's line after it."""
    config = posixpath.relpath(inifile, rootdir) if inifile else None
    version = version_tuple(pytest_version)
    platform = f"platform linux -- Python {python}, pytest-{pytest_version}, pluggy-1.5.0"
    out = [banner("test session starts"), platform + (f" -- {verbose}" if verbose else "")]
    out += ["cachedir: .pytest_cache"] if verbose and cachedir else []
    if version >= (7, 3):
        out.append(f"rootdir: {rootdir}")
        out += [f"configfile: {config}"] if config else []
        out += [f"testpaths: {', '.join(testpaths)}"] if testpaths else []
        return out
    line = f"rootdir: {rootdir}"
    if config:
        line += f", {'inifile' if version < (6, 0) else 'configfile'}: {config}"
    if testpaths:
        line += f", testpaths: {', '.join(testpaths)}"
    return [*out, line]


def verbose_lines(statuses: Mapping[str, str], collected: int, cut: bool) -> list[str]:
    """``-v``: a line per test, ``id WORD``, the percentage done right-aligned to column 79
    (not on a last line the debugger cut)."""
    lines = []
    for done, (test, status) in enumerate(statuses.items(), 1):
        line = f"{test} {status}"
        if cut and done == len(statuses):
            lines.append(line)
            continue
        progress = f" [{100 * done // max(collected, 1):>3}%]"
        lines.append(line + progress.rjust(WIDTH - 1 - len(line)))
    return lines


def progress_lines(
    by_file: Mapping[str, Sequence[str]], collected: int, quiet: bool, cut: bool
) -> list[str]:
    """pytest's progress lines without ``-v``, as its terminal reporter writes them: each
    file's letters after its path (with ``-q``: no paths, one stream of letters), a line
    ended with the percentage so far where the next letter would reach the edge, and the
    percentage right-aligned to column 79 when a file's line ends and at the end of the run.
    ``collected``: the tests the run set out to run (a run stopped early ends below 100%);
    ``cut``: the debugger stopped the run inside its last line (no percentage there)."""
    lines: list[str] = []
    line, done = "", 0

    def progress() -> str:
        return f" [{100 * done // max(collected, 1):>3}%]"

    def filled(text: str) -> str:
        return text + progress().rjust(WIDTH - 1 - len(text))

    first = True
    for path, letters in by_file.items():
        if not quiet:  # a new file: the line before is filled, then the path
            if not first:
                lines.append(filled(line))
            line, first = f"{path} ", False
        for letter in letters:
            line += letter
            done += 1
            if done < collected and len(line) + len(" [100%]") + 1 >= WIDTH:
                lines.append(line + progress())
                line = ""
    if by_file:
        lines.append(line if cut else filled(line))
    return lines


def banner(text: str, fill: str = "=") -> str:
    """pytest's separator line: ``text`` between runs of ``fill`` as long as fit in 80
    columns, at least one on each side (a long test name overflows), one more on the right
    where there is room."""
    if not text:
        return fill * WIDTH
    run = fill * max((WIDTH - len(text) - 2) // 2, 1)
    line = f"{run} {text} {run}"
    return line + fill if len(line) < WIDTH else line


def summary_line(status: str, test: str, message: str | None) -> str:
    """A short-summary line: ``STATUS id - message``, the message cut with ``...`` so the
    line fits 80 columns, and left out when fewer than 6 columns are left (as pytest does
    off a CI machine)."""
    line = f"{status} {test}"
    room = WIDTH - len(line)
    if message is None or room < 6:
        return line
    message = message.split("\n", 1)[0]
    if 3 + len(message) > room:
        message = message[: room - 6] + "..."
    return f"{line} - {message}"
