"""pytest's command line: :class:`PytestOptions` and :func:`parse_pytest_args`."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PytestOptions:
    """pytest's command line, as far as it matters for what is collected and printed."""

    targets: tuple[str, ...] = ()
    keyword: str | None = None
    markexpr: str | None = None
    exitfirst: bool = False
    pdb: bool = False
    maxfail: int | None = None
    verbosity: int = 0
    report_chars: str = ""
    collect_only: bool = False
    tb: str | None = None
    capture: str | None = None
    no_header: bool = False
    no_summary: bool = False
    ignore: tuple[str, ...] = ()
    ignore_glob: tuple[str, ...] = ()
    deselect: tuple[str, ...] = ()
    rootdir: str | None = None
    inifile: str | None = None
    override_ini: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    pyargs: bool = False
    continue_on_collection_errors: bool = False
    stateful: bool = False
    doctest_modules: bool = False
    xdist: bool = False
    runxfail: bool = False
    help: bool = False
    version: bool = False
    informational: bool = False
    unknown: tuple[str, ...] = ()


#: pytest options that take a value (from pytest and the common plugins of SWE-bench envs).
_PYTEST_ARG_OPTS = frozenset(
    {
        "-k", "-m", "-p", "-c", "-o", "-W", "-r", "-n", "--tb", "--maxfail", "--deselect",
        "--ignore", "--ignore-glob", "--rootdir", "--confcutdir", "--basetemp", "--durations",
        "--durations-min", "--junitxml", "--junit-xml", "--junit-prefix", "--log-level",
        "--log-format", "--log-date-format", "--log-cli-level", "--log-cli-format",
        "--log-cli-date-format", "--log-file", "--log-file-level", "--log-file-format",
        "--log-file-date-format", "--log-file-mode", "--color", "--code-highlight", "--capture",
        "--import-mode", "--timeout", "--timeout-method", "--timeout_method", "--numprocesses",
        "--dist", "--maxprocesses", "--cov-report", "--cov-config", "--cov-fail-under", "--ds",
        "--dc", "--reruns", "--reruns-delay", "--only-rerun", "--override-ini", "--inifile",
        "--config-file", "--doctest-glob", "--doctest-report", "--pastebin", "--show-capture",
        "--assert", "--report-log", "--hypothesis-seed", "--hypothesis-profile",
        "--hypothesis-verbosity", "--pdbcls", "--max-worker-restart", "--rsyncdir", "--tx",
        "--html", "--css", "--mpl-baseline-path", "--mpl-generate-path", "--randomly-seed",
        "--lfnf", "--last-failed-no-failures", "--verbosity", "--runxfail-if",
        "--benchmark-columns", "--benchmark-sort", "--benchmark-save", "--benchmark-json",
        "--django-settings", "--splits", "--group", "--count", "--repeat-scope", "-P",
    }
)  # fmt: skip
_PYTEST_OPTIONAL_ARG_OPTS = frozenset({"--cov", "--debug", "--cache-show", "--remote-data"})
_PYTEST_FLAGS = frozenset(
    {
        "-x", "-s", "-v", "-q", "-l", "-h", "-V", "-f", "-d", "-E", "-S", "--exitfirst",
        "--verbose", "--quiet", "--co", "--collect-only", "--collectonly", "--help", "--version",
        "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
        "--stepwise", "--sw-skip", "--stepwise-skip", "--pdb", "--trace", "--runxfail",
        "--showlocals", "--no-header", "--no-summary", "--strict", "--strict-markers",
        "--strict-config", "--disable-warnings", "--disable-pytest-warnings", "--fulltrace",
        "--full-trace", "--setup-only", "--setup-show", "--setup-plan", "--fixtures",
        "--funcargs", "--fixtures-per-test", "--markers", "--cache-clear", "--pyargs",
        "--continue-on-collection-errors", "--doctest-modules", "--doctest-continue-on-failure",
        "--doctest-ignore-import-errors", "--keep-duplicates", "--collect-in-virtualenv",
        "--noconftest", "--trace-config", "--no-cov", "--no-cov-on-fail", "--cov-append",
        "--cov-branch", "--looponfail", "--boxed", "--forked", "--runslow", "--run-slow",
        "--hypothesis-show-statistics", "--benchmark-skip", "--benchmark-disable",
        "--benchmark-only", "--doctest-rst", "--doctest-plus", "--open-files", "--mpl",
        "--remote-data-strict", "--migrations", "--nomigrations", "--reuse-db", "--create-db",
        "--no-migrations", "-rA", "--capture=no", "--no-showlocals", "--tb=no",
    }
)  # fmt: skip
_PYTEST_SHORT_ARG = set("kmpcoWrnP")
_PYTEST_SHORT_FLAG = set("xsvqlhVfdES")


def parse_pytest_args(args: Sequence[str]) -> PytestOptions:
    """pytest's arguments (after ``pytest`` or ``python -m pytest``) as :class:`PytestOptions`.

    Options are read like pytest's argparse parser reads them: combined short flags
    (``-xvs``), attached values (``-kfoo``, ``-rA``, ``--tb=short``), ``--`` ending options.
    Unknown long options are kept in ``unknown`` (a plugin may define them) and assumed to
    take no value unless written ``--opt=value``.
    """
    opts: dict[str, Any] = {
        "targets": [],
        "ignore": [],
        "ignore_glob": [],
        "deselect": [],
        "override_ini": [],
        "plugins": [],
        "unknown": [],
        "verbosity": 0,
        "report_chars": "",
    }

    def take(name: str, value: str) -> None:
        if name == "-k":
            opts["keyword"] = value
        elif name == "-m":
            opts["markexpr"] = value
        elif name == "-p":
            opts["plugins"].append(value)
        elif name in ("-c", "--inifile", "--config-file"):
            opts["inifile"] = value
        elif name in ("-o", "--override-ini"):
            opts["override_ini"].append(value)
        elif name == "-r":
            opts["report_chars"] += value
        elif name in ("-n", "--numprocesses", "--dist", "--tx"):
            opts["xdist"] = value not in ("0", "no")
        elif name == "--tb":
            opts["tb"] = value
        elif name == "--maxfail":
            try:
                opts["maxfail"] = int(value)
            except ValueError:
                opts["unknown"].append(f"{name}={value}")
        elif name == "--deselect":
            opts["deselect"].append(value)
        elif name == "--ignore":
            opts["ignore"].append(value)
        elif name == "--ignore-glob":
            opts["ignore_glob"].append(value)
        elif name == "--rootdir":
            opts["rootdir"] = value
        elif name == "--capture":
            opts["capture"] = value
        elif name == "--verbosity":
            if value.lstrip("-").isdigit():
                opts["verbosity"] += int(value)
        elif name in ("--lfnf", "--last-failed-no-failures"):
            pass

    def flag(name: str) -> None:
        if name in ("-x", "--exitfirst"):
            opts["exitfirst"] = True
        elif name in ("-v", "--verbose"):
            opts["verbosity"] += 1
        elif name in ("-q", "--quiet"):
            opts["verbosity"] -= 1
        elif name == "-s":
            opts["capture"] = "no"
        elif name == "--pdb":
            opts["pdb"] = True
        elif name == "--runxfail":
            opts["runxfail"] = True
        elif name in ("--co", "--collect-only", "--collectonly"):
            opts["collect_only"] = True
        elif name in ("-h", "--help"):
            opts["help"] = True
        elif name in ("-V", "--version"):
            opts["version"] = True
        elif name == "--no-header":
            opts["no_header"] = True
        elif name == "--no-summary":
            opts["no_summary"] = True
        elif name == "--pyargs":
            opts["pyargs"] = True
        elif name == "--continue-on-collection-errors":
            opts["continue_on_collection_errors"] = True
        elif name in (
            "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
            "--stepwise", "--sw-skip", "--stepwise-skip", "-f", "--looponfail",
        ):  # fmt: skip
            opts["stateful"] = True
        elif name == "--doctest-modules":
            opts["doctest_modules"] = True
        elif name in (
            "--fixtures", "--funcargs", "--fixtures-per-test", "--markers", "--setup-plan",
            "--setup-only", "--trace-config", "--cache-show",
        ):  # fmt: skip
            opts["informational"] = True

    i = 0
    args = list(args)
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            opts["targets"].extend(args[i:])
            break
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if name in _PYTEST_ARG_OPTS:
                if not eq:
                    if i >= len(args):
                        opts["unknown"].append(token)
                        continue
                    value = args[i]
                    i += 1
                take(name, value)
            elif name in _PYTEST_OPTIONAL_ARG_OPTS:
                if not eq and i < len(args) and not args[i].startswith("-"):
                    i += 1
            elif name in _PYTEST_FLAGS:
                flag(name)
            else:
                opts["unknown"].append(token)
            continue
        if token.startswith("-") and len(token) > 1:
            j = 1
            while j < len(token):
                letter = token[j]
                if letter in _PYTEST_SHORT_ARG:
                    value = token[j + 1 :]
                    if not value:
                        if i >= len(args):
                            opts["unknown"].append(token)
                            break
                        value = args[i]
                        i += 1
                    take(f"-{letter}", value)
                    break
                if letter in _PYTEST_SHORT_FLAG:
                    flag(f"-{letter}")
                else:
                    opts["unknown"].append(f"-{letter}")
                j += 1
            continue
        opts["targets"].append(token)
    for key in ("targets", "ignore", "ignore_glob", "deselect", "override_ini", "plugins"):
        opts[key] = tuple(opts[key])
    opts["unknown"] = tuple(opts["unknown"])
    return PytestOptions(**opts)


def env_addopts(variables: Mapping[str, str] | None) -> list[str]:
    """The arguments ``$PYTEST_ADDOPTS`` adds to every pytest run (split as a shell would;
    on unbalanced quotes, at whitespace)."""
    text = (variables or {}).get("PYTEST_ADDOPTS") or ""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
