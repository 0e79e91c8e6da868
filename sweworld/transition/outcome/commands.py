"""What kind of command an execution step runs, and the tests it selects as pytest would.

:func:`command_kind_of` sorts an argument vector into :data:`KINDS` (pytest, a script,
``python -c``, ``python -m``, Django's ``runtests.py``, SymPy's ``bin/test``, unittest, or
other); :func:`pytest_equivalent` writes another runner's selection as a ``python -m pytest``
command, so that every runner's tests are collected by one collector.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from sweworld.transition.facts import parse_command

__all__ = [
    "KINDS",
    "TEST_RUNNER_KINDS",
    "command_kind_of",
    "pytest_equivalent",
    "runner_args",
]

#: Command kinds the model knows; anything else is ``other`` (answered conservatively).
KINDS = (
    "pytest",
    "python_script",
    "python_c",
    "python_module",
    "django_runtests",
    "sympy_test",
    "unittest",
    "other",
)
#: Kinds that run a test suite: their tests are collected and each gets a status.
TEST_RUNNER_KINDS = ("pytest", "django_runtests", "sympy_test", "unittest")


def _is_sympy_runner(path: str) -> bool:
    return posixpath.normpath(path) == "bin/test"


def command_kind_of(argv: Sequence[str]) -> str:
    """One of :data:`KINDS` for an argument vector."""
    if argv and _is_sympy_runner(argv[0]):
        return "sympy_test"  # SymPy's runner, executable (#!/usr/bin/env python)
    info = parse_command(tuple(argv))
    if info.kind == "pytest":
        return "pytest"
    script = posixpath.normpath(info.script or "")
    if info.kind == "python_script" and _is_sympy_runner(script):
        return "sympy_test"
    if info.kind == "python_script" and script in ("tests/runtests.py", "runtests.py"):
        return "django_runtests"
    if info.kind == "python_module" and info.module == "unittest":
        return "unittest"
    if info.kind in KINDS:
        return info.kind
    if info.kind == "python_stdin":
        return "python_script"
    return "other"


def runner_args(argv: Sequence[str]) -> list[str]:
    """The arguments a test runner of :data:`TEST_RUNNER_KINDS` receives (after the script
    or ``-m unittest``)."""
    argv = list(argv)
    if argv and _is_sympy_runner(argv[0]):
        return argv[1:]
    info = parse_command(tuple(argv))
    return list(info.args)


def pytest_equivalent(kind: str, argv: Sequence[str]) -> list[str] | None:
    """A ``python -m pytest`` argument vector that collects the tests another runner would
    run (SymPy's ``bin/test PATHS``, ``python -m unittest MODULES``), None when the runner's
    selection cannot be expressed (``-k`` with SymPy's semantics, ``discover`` options, Django
    labels). Collection, and so the test ids, are then the pytest collector's."""
    if kind == "pytest":
        return list(argv)
    if kind == "django_runtests":
        return _django_equivalent(argv)
    if kind not in ("sympy_test", "unittest"):
        return None
    targets: list[str] = []
    for arg in runner_args(argv):
        if arg.startswith("-"):
            if kind == "sympy_test" and arg in ("-v", "--verbose", "-q", "--quiet"):
                continue
            if kind == "unittest" and arg in ("-v", "--verbose", "-q", "--quiet", "-b", "-c"):
                continue
            return None
        if kind == "unittest":
            if arg == "discover":
                continue
            if "/" in arg or arg.endswith(".py"):
                targets.append(arg)
                continue
            # module parts up to the first capitalised one (a TestCase class, by PEP 8)
            parts = arg.split(".")
            cut = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
            mods, rest = parts[:cut], parts[cut:]
            path = "/".join(mods) + ".py" if mods else ""
            targets.append("::".join([path, *rest]) if rest and path else path or arg)
        else:
            targets.append(arg)
    return ["python", "-m", "pytest", *targets]


#: Django ``runtests.py`` options that take a value as the next argument.
_DJANGO_VALUED = frozenset(
    ("--settings", "--parallel", "-v", "--verbosity", "--tag", "--exclude-tag", "-k", "--start-at",
     "--start-after", "--shuffle", "--pair")
)  # fmt: skip


def _django_equivalent(argv: Sequence[str]) -> list[str] | None:
    """Django's labels (``app.tests.Case.test``, relative to the runner's folder) as pytest
    targets; None for a run of the whole suite or a ``-k`` selection."""
    info = parse_command(tuple(argv))
    root = posixpath.dirname(posixpath.normpath(info.script or ""))
    targets: list[str] = []
    args = list(info.args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("-"):
            if arg == "-k":
                return None
            if arg in _DJANGO_VALUED:
                i += 1
            continue
        parts = arg.split(".")
        cut = next((j for j, part in enumerate(parts) if part[:1].isupper()), len(parts))
        path = posixpath.join(root, *parts[:cut]) if parts[:cut] else root
        leaf = path + ".py" if cut < len(parts) or len(parts) > 1 else path
        targets.append("::".join([leaf, *parts[cut:]]))
    return ["python", "-m", "pytest", *targets] if targets else None
