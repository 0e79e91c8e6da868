"""Parsing execution commands: :func:`parse_command` and :class:`CommandInfo` (the interpreter's
own options parsed like CPython parses them).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from sweworld.transition.facts.pytest_args import PytestOptions, parse_pytest_args

KINDS = (
    "python_script",
    "python_c",
    "python_module",
    "python_stdin",
    "pytest",
    "pip",
    "version",
    "other",
)


_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
_PIP_NAME = re.compile(r"^pip(\d+(\.\d+)?)?$")
_PYTEST_NAMES = frozenset({"pytest", "py.test", "pytest-3"})


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class CommandInfo:
    """One execution command, parsed.

    Attributes:
        argv: the argument vector.
        kind: one of :data:`KINDS`.
        program: ``argv[0]``.
        interpreter_flags: CPython options before the target (``("-u", "-W", "ignore")``).
        script: the script path as given (``python_script``; ``-`` for stdin).
        code: the ``-c`` program.
        module: the ``-m`` module (``pytest`` and ``pip`` included).
        args: what the program receives as ``sys.argv[1:]`` (pytest's and pip's arguments
            for those kinds).
        pytest: pytest's parsed options (kind ``pytest``).
        pip_command: ``install``, ``list``, ... (kind ``pip``).
        version_flag: ``--version`` / ``-V`` / ``-VV`` for kind ``version``.
        error: a usage error of the interpreter itself (``Argument expected for the -c
            option``), which is what it prints.
    """

    argv: tuple[str, ...]
    kind: str
    program: str = ""
    interpreter_flags: tuple[str, ...] = ()
    script: str | None = None
    code: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    pytest: PytestOptions | None = None
    pip_command: str | None = None
    version_flag: str | None = None
    error: str | None = None

    @property
    def is_python(self) -> bool:
        return _is_python(self.program)

    @property
    def is_pip_install(self) -> bool:
        return self.kind == "pip" and self.pip_command == "install"

    @property
    def safe_path(self) -> bool:
        """``-P`` / ``-I``: the script's directory (or cwd) is not put on ``sys.path``."""
        return any(f in ("-P", "-I") for f in flag_letters(self.interpreter_flags))

    @property
    def isolated(self) -> bool:
        """``-I`` / ``-E``: ``PYTHON*`` environment variables are ignored."""
        return any(f in ("-I", "-E") for f in flag_letters(self.interpreter_flags))


def flag_letters(flags: Sequence[str]) -> Iterator[str]:
    skip = False
    for token in flags:
        if skip:
            skip = False
            continue
        if token in ("-W", "-X", "--check-hash-based-pycs"):
            skip = True
            yield token
            continue
        if token.startswith("--"):
            yield token
            continue
        yield token[:2]


def _is_python(program: str) -> bool:
    return bool(_PYTHON_NAME.match(posixpath.basename(program or "")))


def _usage(program: str) -> str:
    return (
        f"usage: {program} [option] ... [-c cmd | -m mod | file | -] [arg] ...\n"
        "Try `python -h' for more information.\n"
    )


_PY_NOARG = set("bBdEhiIOPqRsStuvVx?")
_PY_ARG = set("cmWX")


def _parse_python(argv: tuple[str, ...], stdin: bytes | None) -> CommandInfo:
    program = argv[0]
    flags: list[str] = []
    i = 1
    version_count = 0
    help_flag = False
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token == "-" or not token.startswith("-"):
            break
        if token.startswith("--"):
            name, _, value = token.partition("=")
            if name == "--version":
                version_count += 1
                flags.append(token)
                i += 1
                continue
            if name in ("--help", "--help-env", "--help-xoptions", "--help-all"):
                help_flag = True
                flags.append(token)
                i += 1
                continue
            if name == "--check-hash-based-pycs":
                flags.append(name)
                if value:
                    flags.append(value)
                    i += 1
                elif i + 1 < len(argv):
                    flags.append(argv[i + 1])
                    i += 2
                else:
                    i += 1
                continue
            return CommandInfo(
                argv,
                "other",
                program=program,
                interpreter_flags=tuple(flags),
                error=f"unknown option {token}\n{_usage(program)}",
            )
        j = 1
        while j < len(token):
            letter = token[j]
            if letter in _PY_ARG:
                value = token[j + 1 :]
                if not value:
                    if i + 1 >= len(argv):
                        return CommandInfo(
                            argv,
                            "other",
                            program=program,
                            interpreter_flags=tuple(flags),
                            error=f"Argument expected for the -{letter} option\n{_usage(program)}",
                        )
                    value = argv[i + 1]
                    i += 1
                if letter == "c":
                    info = CommandInfo(
                        argv,
                        "python_c",
                        program=program,
                        interpreter_flags=tuple(flags),
                        code=value,
                        args=tuple(argv[i + 1 :]),
                    )
                    return _with_version(info, version_count, help_flag)
                if letter == "m":
                    info = _python_module(argv, program, tuple(flags), value, tuple(argv[i + 1 :]))
                    return _with_version(info, version_count, help_flag)
                flags.extend([f"-{letter}", value])
                break
            if letter in _PY_NOARG:
                if letter == "V":
                    version_count += 1
                if letter in "h?":
                    help_flag = True
                flags.append(f"-{letter}")
                j += 1
                continue
            return CommandInfo(
                argv,
                "other",
                program=program,
                interpreter_flags=tuple(flags),
                error=f"Unknown option: -{letter}\n{_usage(program)}",
            )
        i += 1
    if help_flag:
        return CommandInfo(argv, "other", program=program, interpreter_flags=tuple(flags))
    if version_count:
        return CommandInfo(
            argv,
            "version",
            program=program,
            interpreter_flags=tuple(flags),
            version_flag=_version_flag(version_count),
        )
    if i >= len(argv) or argv[i] == "-":
        rest = tuple(argv[i + 1 :]) if i < len(argv) else ()
        return CommandInfo(
            argv,
            "python_stdin",
            program=program,
            interpreter_flags=tuple(flags),
            script="-" if i < len(argv) else None,
            args=rest,
        )
    return CommandInfo(
        argv,
        "python_script",
        program=program,
        interpreter_flags=tuple(flags),
        script=argv[i],
        args=tuple(argv[i + 1 :]),
    )


def _version_flag(count: int) -> str:
    return "-VV" if count >= 2 else "--version"


def _with_version(info: CommandInfo, version_count: int, help_flag: bool) -> CommandInfo:
    """``-V`` / ``-h`` anywhere among the interpreter's options win over the target."""
    if help_flag:
        return replace(info, kind="other")
    if version_count:
        return replace(info, kind="version", version_flag=_version_flag(version_count))
    return info


def _python_module(
    argv: tuple[str, ...], program: str, flags: tuple[str, ...], module: str, args: tuple[str, ...]
) -> CommandInfo:
    if module in ("pytest", "py.test"):
        return CommandInfo(
            argv,
            "pytest",
            program=program,
            interpreter_flags=flags,
            module=module,
            args=args,
            pytest=parse_pytest_args(args),
        )
    if module == "pip":
        return CommandInfo(
            argv,
            "pip",
            program=program,
            interpreter_flags=flags,
            module=module,
            args=args,
            pip_command=_pip_command(args),
        )
    return CommandInfo(
        argv, "python_module", program=program, interpreter_flags=flags, module=module, args=args
    )


def _pip_command(args: Sequence[str]) -> str | None:
    skip = False
    for token in args:
        if skip:
            skip = False
            continue
        if token in ("--python", "--log", "--cache-dir", "--proxy", "--retries", "--timeout"):
            skip = True
            continue
        if token.startswith("-"):
            continue
        return token
    return None


def parse_command(argv: Sequence[str], stdin: bytes | None = None) -> CommandInfo:
    """Parse an execution command's argument vector (``argv[0]`` is the program)."""
    argv = tuple(str(a) for a in argv)
    if not argv:
        return CommandInfo(argv, "other")
    program = argv[0]
    base = posixpath.basename(program)
    if _is_python(program):
        return _parse_python(argv, stdin)
    if base in _PYTEST_NAMES:
        options = parse_pytest_args(argv[1:])
        return CommandInfo(argv, "pytest", program=program, args=argv[1:], pytest=options)
    if _PIP_NAME.match(base):
        return CommandInfo(
            argv, "pip", program=program, args=argv[1:], pip_command=_pip_command(argv[1:])
        )
    return CommandInfo(argv, "other", program=program, args=argv[1:])
