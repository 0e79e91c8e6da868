"""Shared types of the in-process R2E-Gym tools: context, configuration, result, errors."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sweworld.sandbox.paths import SandboxPaths
from sweworld.sandbox.types import BashOutcome

__all__ = [
    "DEFAULT_BLOCKED_BASH_COMMANDS",
    "DEFAULT_MAX_FILE_BYTES",
    "ToolConfig",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "atomic_write_text",
    "display_path",
    "parse_bool",
    "parse_int",
    "parse_view_range",
    "printed",
    "suffix_of",
    "valid_text",
]

#: R2E-Gym's ``BLOCKED_BASH_COMMANDS`` (tools/execute_bash.py).
DEFAULT_BLOCKED_BASH_COMMANDS: tuple[str, ...] = ("ipython", "jupyter", "pip", "nohup")
DEFAULT_MAX_FILE_BYTES = 5 * 1024 * 1024


@dataclass
class ToolConfig:
    """Knobs of the tools. Defaults are R2E-Gym's.

    Attributes:
        python_only: file_editor views and directory searches only cover ``.py`` files
            (R2E-Gym's scripts always run with ``python_only=True``).
        max_response_len: file_editor output is clipped after this many characters.
        concise_threshold: a full view of a Python file with more lines than this is
            condensed (function bodies elided).
        max_file_bytes: file_editor refuses to edit or fully read larger files.
        blocked_bash_commands: first tokens execute_bash refuses.
        cmd_timeout: seconds a command may run (quoted in the timeout message).
        search_timeout: seconds one ``search`` call may take (grep is stopped after it).
        search_max_output_bytes: matches ``search`` prints from one file at most.
    """

    python_only: bool = True
    max_response_len: int = 10000
    concise_threshold: int = 150
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    blocked_bash_commands: tuple[str, ...] = DEFAULT_BLOCKED_BASH_COMMANDS
    cmd_timeout: int = 90
    search_timeout: float = 10.0
    search_max_output_bytes: int = 1 << 20


def _no_shell(command: str) -> BashOutcome:
    return BashOutcome(stderr="bash: no shell is attached to this tool context\n", exit_code=127)


@dataclass
class ToolContext:
    """Everything a tool call may use. One per session; never shared between sessions.

    Attributes:
        paths: sandbox <-> host path mapping.
        cwd: the sandbox directory relative paths are taken from.
        history: file_editor's undo history (canonical sandbox path -> previous contents).
        run_bash: runs one shell command in the session's sandbox.
        config: tool configuration.
    """

    paths: SandboxPaths
    cwd: str = "/testbed"
    history: dict[str, list[str]] = field(default_factory=dict)
    run_bash: Callable[[str], BashOutcome] = _no_shell
    config: ToolConfig = field(default_factory=ToolConfig)


@dataclass
class ToolResult:
    """What one tool call printed, its exit code, and whether the episode is over."""

    output: str
    exit_code: int = 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """A usage error; :func:`sweworld.sandbox.tools.run_tool` turns it into ``ERROR: ...``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True)
class ToolSpec:
    """Name and parameters of a tool (used to validate calls and to explain mistakes)."""

    name: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    #: alternative parameter names -> canonical name
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.required + self.optional

    def describe(self) -> str:
        """``name(command (required), path (required), file_text, ...)``."""
        parts = [f"{p} (required)" for p in self.required] + list(self.optional)
        return f"{self.name}(" + ", ".join(parts) + ")"

    def check(self, params: Mapping[str, Any]) -> dict[str, str]:
        """Map aliases, refuse unknown parameters, require the required ones.

        Values that are not strings (a JSON tool call may send ``[1, 20]`` or ``5``) are
        converted to strings; ``None`` counts as absent.
        """
        if not isinstance(params, Mapping):
            raise ToolError(
                f"The parameters of {self.name} must be a mapping of names to values. "
                f"Expected: {self.describe()}."
            )
        out: dict[str, str] = {}
        for raw_key, value in params.items():
            key = self.aliases.get(str(raw_key), str(raw_key))
            if key not in self.parameters:
                raise ToolError(
                    f"Unknown parameter '{raw_key}' for {self.name}. Expected: {self.describe()}."
                )
            if value is None or key in out:
                continue
            if isinstance(value, str):
                out[key] = value
            elif isinstance(value, bool):
                out[key] = "True" if value else "False"
            elif isinstance(value, (list, tuple)):
                out[key] = "[" + ", ".join(str(v) for v in value) + "]"
            else:
                out[key] = str(value)
        for key in self.required:
            if key not in out:
                raise ToolError(
                    f"Missing required parameter '{key}' for {self.name}. "
                    f"Expected: {self.describe()}."
                )
        return out


# --------------------------------------------------------------------------- helpers
_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    Surrogates reach tools from agents' JSON (``"\\ud800"``) and from file names that are
    not UTF-8 (Python decodes them with ``surrogateescape``).
    """
    return _LONE_SURROGATE_RE.sub("\ufffd", text)


def printed(*lines: str) -> str:
    """What consecutive ``print(line)`` calls write."""
    return "".join(f"{line}\n" for line in lines)


def display_path(path: str) -> str:
    """A path as R2E-Gym's scripts print it (``str(pathlib.Path(path))``)."""
    return str(PurePosixPath(path))


def suffix_of(path: str) -> str:
    """``pathlib`` suffix of the last component (``.py``)."""
    return PurePosixPath(path).suffix


def parse_int(name: str, value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ToolError(
            f"Invalid value for parameter '{name}': {value!r} is not an integer."
        ) from None


def parse_view_range(value: Any) -> list[int]:
    """``[1, 20]``, ``1,20``, ``1 20`` (or a list of two ints) -> ``[1, 20]``."""
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        text = str(value).strip().strip("[]()")
        parts = text.replace(",", " ").split()
    if len(parts) != 2:
        raise ToolError(
            f"Invalid value for parameter 'view_range': {value!r}. Expected two integers "
            "[start_line, end_line], e.g. [1, 20], or [start_line, -1] to view until the end."
        )
    try:
        return [int(parts[0]), int(parts[1])]
    except ValueError:
        raise ToolError(
            f"Invalid value for parameter 'view_range': {value!r}. Expected two integers "
            "[start_line, end_line], e.g. [1, 20], or [start_line, -1] to view until the end."
        ) from None


_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off", ""}


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ToolError(
        f"Invalid value for parameter '{name}': {value!r} is not a boolean (true/false)."
    )


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same directory.

    ``os.replace`` swaps the new file in, so readers never see a half-written file and a
    hardlinked (copy-on-write) file is replaced rather than written through. An existing
    file keeps its permission bits.
    """
    directory = path.parent
    mode: int | None
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = directory / f".{path.name}.sweworld-{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8", errors="surrogateescape"))
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
