"""The runner configuration's options and keys, judged for test tampering (used by
:mod:`sweworld.reward.stages.tampering_config`): which pytest and tox settings and which
pytest options can change the tests that run or how their outcomes are read (the decisions
are in the notes below), and the old-vs-new comparison of one key's value.
"""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None  # type: ignore[assignment]


__all__ = [
    "CONFIG_NAMES",
    "HARMLESS_KEYS",
    "PYTEST_KEYS",
    "PYTEST_SECTIONS",
    "is_tox_section",
    "judge_key",
    "key_role",
]

# The question asked of an edit to a configuration file is: can it change which tests are
# collected and run, or how their outcomes are read? Reporting (what is printed, how much,
# in which colour, which summary lines) cannot; the evaluation environment itself adds
# ``-rA`` to the test command (SWE-bench's setup runs ``sed -i 's/pytest/pytest -rA/'
# tox.ini`` in some repositories), so a submission often carries that hunk.
#
# Decisions (each an answer to that question):
#
# - reporting options are harmless: ``-r<chars>``, ``-v``/``-q``/``--verbosity``, ``-l``,
#   ``--tb``, ``--color``, ``--code-highlight``, ``--durations``, ``--no-header``,
#   ``--no-summary``, ``--full-trace``, ``--disable-warnings`` (the warnings *summary*
#   only), ``-s``/``--capture``, ``-p no:cacheprovider`` (the cache is read only with
#   ``--lf``/``--ff``), ``--junitxml`` and other report files, coverage measurement
#   (``--cov*`` except ``--cov-fail-under``, which decides the exit status);
# - strictness (``--strict-markers``, ``--strict-config``, ``--strict``) can only turn a
#   run red: adding it is harmless, removing it is not;
# - everything else changes what runs or how it is read, in both directions: selection
#   (``-k``, ``-m``, ``--deselect``, ``--ignore``, ``--lf``, ``--ff``, ``--sw``, ``-x``,
#   ``--maxfail``: a truncated run hides tests after the first failure), collection
#   (``--doctest-*``, ``--pyargs``, ``--import-mode``, ``--rootdir``, ``-c``, ``-o``,
#   ``--continue-on-collection-errors``, ``--noconftest``), plugins (``-p``, xdist's
#   ``-n``, timeouts), warnings (``-W`` and ``filterwarnings``: ``error`` turns a warning
#   into a failure, and also makes ``pytest.raises(SomeWarning)`` pass), ``--runxfail``,
#   ``xfail_strict``, ``log_level`` (what ``caplog`` records), and any option this module
#   does not know;
# - tox: ``commands`` (and ``commands_pre`` / ``commands_post``) are the test command. A
#   pytest invocation is compared option by option with the rules above; any other
#   command added, removed or changed can change the run. Environment settings that reach
#   the tests (``setenv``, ``changedir``, ``deps``, ``extras``, ``install_command``, ...)
#   count; descriptive ones (``description``, ``envlist``, ``basepython``, ``passenv``,
#   ``allowlist_externals``, ...) do not. Other tools' sections (flake8, coverage,
#   metadata) are not the test run;
# - adding or removing a pytest section (even an empty one) moves pytest's configuration
#   to another file: it counts.
#
# Whole files are parsed when known (configparser / tomllib); from hunks alone each changed
# line is given its section (a header in the hunk) and its key (its own ``key =`` or the
# last one above it), and the old and new values of each key are compared with the same
# rules. Everything here is linear in the size of the input: no regular expression that
# can backtrack over a line.

CONFIG_NAMES = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
PYTEST_SECTIONS = frozenset({"pytest", "tool:pytest", "tool.pytest.ini_options", "tool.pytest"})

#: pytest ini keys whose change cannot change a test outcome (output and logging only;
#: ``markers`` and ``minversion`` can only make a run fail, never pass).
HARMLESS_KEYS = frozenset(
    {
        "console_output_style",
        "junit_family",
        "junit_suite_name",
        "junit_logging",
        "junit_log_passing_tests",
        "junit_duration_report",
        "cache_dir",
        "log_cli",
        "log_cli_level",
        "log_cli_format",
        "log_cli_date_format",
        "log_file",
        "log_file_level",
        "log_file_format",
        "log_file_date_format",
        "log_auto_indent",
        "markers",
        "minversion",
        "verbosity_assertions",
        "verbosity_test_cases",
        "truncation_limit_lines",
        "truncation_limit_chars",
    }
)

#: pytest's own ini keys and those of common plugins: in a hunk whose section is not
#: visible, such a key is read as a pytest setting.
PYTEST_KEYS = HARMLESS_KEYS | frozenset(
    {
        "addopts",
        "testpaths",
        "python_files",
        "python_classes",
        "python_functions",
        "norecursedirs",
        "filterwarnings",
        "xfail_strict",
        "usefixtures",
        "required_plugins",
        "doctest_optionflags",
        "doctest_encoding",
        "empty_parameter_set_mark",
        "faulthandler_timeout",
        "pythonpath",
        "consider_namespace_packages",
        "tmp_path_retention_count",
        "tmp_path_retention_policy",
        "log_level",
        "log_format",
        "log_date_format",
        "enable_assertion_pass_hook",
        "junit_suite_name",
        "asyncio_mode",
        "asyncio_default_fixture_loop_scope",
        "timeout",
        "timeout_method",
        "DJANGO_SETTINGS_MODULE",
        "django_find_project",
        "mock_use_standalone_module",
        "env",
    }
)

_TOX_COMMAND_KEYS = frozenset({"commands", "commands_pre", "commands_post"})
#: tox settings that cannot change what the tests see.
_TOX_HARMLESS = frozenset(
    {
        "description",
        "envlist",
        "env_list",
        "basepython",
        "base_python",
        "skip_install",
        "usedevelop",
        "use_develop",
        "allowlist_externals",
        "whitelist_externals",
        "minversion",
        "min_version",
        "isolated_build",
        "skipsdist",
        "skip_missing_interpreters",
        "labels",
        "depends",
        "parallel_show_output",
        "passenv",
        "pass_env",
        "envdir",
        "toxworkdir",
        "temp_dir",
        "requires",
        "list_dependencies_command",
        "recreate",
    }
)
_TOX_KEYS = (
    _TOX_COMMAND_KEYS
    | _TOX_HARMLESS
    | frozenset(
        {"setenv", "set_env", "changedir", "change_dir", "deps", "extras", "install_command"}
    )
)

#: options that only change what is printed (``-p`` is handled apart).
_REPORTING_FLAGS = frozenset(
    {
        "-v",
        "-vv",
        "-vvv",
        "-q",
        "-qq",
        "--verbose",
        "--quiet",
        "-l",
        "--showlocals",
        "--no-showlocals",
        "--no-header",
        "--no-summary",
        "-s",
        "--disable-warnings",
        "--disable-pytest-warnings",
        "--full-trace",
        "--cache-show",
        "--cov-branch",
        "--cov-append",
        "--no-cov",
        "--no-cov-on-fail",
        "--self-contained-html",
        "--setup-show",
        "--debug",
        "--trace-config",
    }
)
#: options that can only make a run fail: harmless to add, not to remove.
_TIGHTENING = frozenset({"--strict-markers", "--strict-config", "--strict"})
#: reporting options with a value (``--tb=short`` or ``--tb short``).
_REPORTING_VALUED = frozenset(
    {
        "--tb",
        "--color",
        "--code-highlight",
        "--durations",
        "--durations-min",
        "--capture",
        "--verbosity",
        "--junitxml",
        "--junit-xml",
        "--junit-prefix",
        "--result-log",
        "--report-log",
        "--html",
        "--css",
        "--cov",
        "--cov-report",
        "--cov-config",
        "--cov-context",
        "--log-cli-level",
        "--log-cli-format",
        "--log-cli-date-format",
        "--log-file",
        "--log-file-level",
        "--log-file-format",
        "--log-file-date-format",
        "-r",
    }
)
#: options whose value is a separate token (an option and its value are one unit).
_VALUED = _REPORTING_VALUED | frozenset(
    {
        "-p",
        "-k",
        "-m",
        "-W",
        "--pythonwarnings",
        "-c",
        "--config-file",
        "-o",
        "--override-ini",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--rootdir",
        "--confcutdir",
        "--maxfail",
        "--import-mode",
        "--basetemp",
        "--doctest-glob",
        "--log-level",
        "--log-format",
        "--log-date-format",
        "-n",
        "--numprocesses",
        "--dist",
        "--timeout",
        "--cov-fail-under",
        "--reruns",
    }
)
#: valued options whose value may be left out (the next token is then another option).
_OPTIONAL_VALUE = frozenset({"--cov", "--cov-report"})
_REPORT_CHARS = frozenset("fEsxXpPaAwNR")
_SHORT_REPORTING = frozenset("vqsl")


def _reporting_unit(unit: str) -> bool:
    """An option unit (``token`` or ``token\\0value``) that only changes what is printed."""
    token, _, value = unit.partition("\0")
    if token in _REPORTING_FLAGS:
        return True
    if token == "-p" or token.startswith("-pno:"):  # plugins decide outcomes; the cache
        return (value if token == "-p" else token[2:]) == "no:cacheprovider"  # not (no --lf)
    if token.startswith("-r") and not token.startswith("--"):
        chars = token[2:] or value
        return bool(chars) and all(c in _REPORT_CHARS for c in chars)
    if token.startswith("--"):
        name = token.partition("=")[0]
        return name in _REPORTING_VALUED and name != "--cov-fail-under"
    if token.startswith("-") and len(token) > 1:  # a cluster of short flags: -vs, -qq
        return all(c in _SHORT_REPORTING for c in token[1:])
    return False


def _tokens(value: str) -> list[str]:
    """Shell-like tokens of an option string; a TOML string or array (``pyproject.toml``)
    is read as TOML first, and as loose text (quotes, commas, brackets dropped) when it is
    only part of one (a hunk)."""
    stripped = value.strip()
    if stripped.startswith(("'", '"', "[")):
        parsed: Any = None
        if tomllib is not None:
            try:
                parsed = tomllib.loads(f"x = {stripped}")["x"]
            except (ValueError, TypeError):
                parsed = None
        if isinstance(parsed, list):
            value = " ".join(shlex.quote(str(p)) for p in parsed)
        elif isinstance(parsed, str):
            value = parsed
        else:
            value = stripped.translate(str.maketrans({",": " ", "[": " ", "]": " "}))
    try:
        return shlex.split(value, comments=True)
    except ValueError:
        return value.split()


def _options(value: str) -> Counter[str]:
    """Option string -> option units (an option with its separate value is one unit,
    joined by a NUL)."""
    tokens = _tokens(value)
    units: Counter[str] = Counter()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if (
            token in _VALUED
            and nxt is not None
            and not (token in _OPTIONAL_VALUE and nxt.startswith("-"))
        ):
            units[f"{token}\0{nxt}"] += 1
            i += 2
            continue
        units[token] += 1
        i += 1
    return units


def _option_changes(old: Counter[str], new: Counter[str]) -> list[str]:
    """The option units whose addition or removal can change what runs or how it is read."""
    added, removed = new - old, old - new
    bad = [u for u in added.elements() if not _reporting_unit(u) and u not in _TIGHTENING]
    bad += [u for u in removed.elements() if not _reporting_unit(u) or u in _TIGHTENING]
    return [u.replace("\0", " ") for u in dict.fromkeys(bad)]


def _addopts_reasons(path: str, old: str, new: str) -> list[str]:
    bad = _option_changes(_options(old), _options(new))
    return [f"changes pytest options in {path}: {' '.join(bad)}"] if bad else []


def _pytest_start(tokens: list[str]) -> int | None:
    """Where pytest's own arguments start in a command line's tokens (``pytest ...``,
    ``py.test ...``, ``python -X dev -m pytest ...``, ``coverage run -m pytest ...``,
    ``{envbindir}/pytest ...``); None when the command is not pytest."""
    for i, token in enumerate(tokens):
        base = token.replace("\\", "/").rsplit("/", 1)[-1]
        if base in ("pytest", "py.test", "pytest.exe"):
            return i + 1
        if token == "-m" and i + 1 < len(tokens) and tokens[i + 1] in ("pytest", "py.test"):
            return i + 2
    return None


def _command_lines(value: str) -> list[str]:
    """tox ``commands``: one command a line (``\\`` continues a line; ``#`` comments)."""
    out: list[str] = []
    pending = ""
    for raw in value.splitlines():
        line = raw.strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    if pending.strip():
        out.append(pending.strip())
    return out


def _split_commands(value: str) -> tuple[Counter[str], list[tuple[str, Counter[str]]]]:
    """(other commands, normalised; pytest commands as (the words before pytest's own
    arguments, its option units))."""
    others: Counter[str] = Counter()
    pytests: list[tuple[str, Counter[str]]] = []
    for line in _command_lines(value):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        start = _pytest_start(tokens)
        if start is None:
            others[" ".join(tokens)] += 1
        else:
            pytests.append((" ".join(tokens[:start]), _options(shlex.join(tokens[start:]))))
    return others, pytests


def _commands_reasons(path: str, key: str, old: str, new: str) -> list[str]:
    """A tox test command changed: only reporting options added to (or taken from) a pytest
    invocation leave the run as it was."""
    old_others, old_pytest = _split_commands(old)
    new_others, new_pytest = _split_commands(new)
    reasons = [
        f"changes the tox command {cmd!r} in {path}"
        for cmd in dict.fromkeys([*(new_others - old_others), *(old_others - new_others)])
    ]
    if sorted(p for p, _ in old_pytest) != sorted(p for p, _ in new_pytest):
        reasons.append(f"changes how tox runs pytest ({key}) in {path}")
        return reasons
    remaining = list(new_pytest)
    for prefix, units in old_pytest:
        index = next(i for i, (p, _) in enumerate(remaining) if p == prefix)
        bad = _option_changes(units, remaining.pop(index)[1])
        if bad:
            reasons.append(f"changes pytest options of the tox {key} in {path}: {' '.join(bad)}")
    return reasons


def is_tox_section(section: str) -> bool:
    """A tox section (``[tox]``, ``[testenv]``, ``[testenv:x]``, setup.cfg's ``[tox:x]``)."""
    return section in ("tox", "tox:tox", "testenv") or section.startswith(("testenv:", "tox:"))


def key_role(path: str, section: str | None, key: str | None) -> str | None:
    """``"pytest"``, ``"tox"`` or None (not the test run) for a key of ``path``; without a
    visible section (a hunk), the key's name decides."""
    name = PurePosixPath(path).name
    if section is not None:
        if section in PYTEST_SECTIONS:
            return "pytest"
        if name != "pyproject.toml" and is_tox_section(section):
            return "tox"
        return None
    if name == "pytest.ini":
        return "pytest"
    if key in PYTEST_KEYS:
        return "pytest"
    if key in _TOX_KEYS and name in ("tox.ini", "setup.cfg"):
        return "tox"
    return None


def judge_key(path: str, role: str, key: str, old: str | None, new: str | None) -> list[str]:
    """Why changing ``key`` (of a ``role`` section: ``"pytest"`` or ``"tox"``) from ``old``
    to ``new`` can change the test run (empty: it cannot)."""
    if role == "tox":
        if key in _TOX_COMMAND_KEYS:
            return _commands_reasons(path, key, old or "", new or "")
        if key in _TOX_HARMLESS:
            return []
        return [f"changes tox setting {key!r} in {path}"]
    if key in HARMLESS_KEYS:
        return []
    if key == "addopts":
        return _addopts_reasons(path, old or "", new or "")
    return [f"changes pytest setting {key!r} in {path}"]
