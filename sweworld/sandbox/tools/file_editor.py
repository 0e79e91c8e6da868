"""R2E-Gym's ``file_editor`` tool, in process.

Same commands, parameters and output strings as ``r2egym/agenthub/tools/file_editor.py``
(view / create / str_replace / insert / undo_edit, the concise view of long Python files,
``<response clipped>`` truncation, the error strings and their ``ERROR: `` layout), with
these differences in *how* it works:

* paths are sandbox paths, resolved through :class:`~sweworld.sandbox.paths.SandboxPaths`
  (a path leaving the workspace is refused);
* the directory listing is produced with ``os.scandir`` in sorted order (``find`` order is
  arbitrary) and never follows symbolic links;
* writes are atomic (temporary file + ``os.replace``), which also breaks hardlinks so a
  copy-on-write workspace never writes through to a shared base file;
* binary files, files over ``ToolConfig.max_file_bytes`` and (for edits) files that are not
  UTF-8 are refused with a clear error instead of being decoded by guesswork;
* the undo history lives in ``ToolContext.history`` (per session), keyed by the canonical
  sandbox path.

Exit codes are R2E-Gym's (its ``file_editor.py`` ``main``, checked against R2E-Gym's
source): a failure the editor reports itself (``EditorError`` or an ``EditorResult`` error:
a ``view_range`` outside the file, a non-unique or missing ``old_str``, an ``insert_line``
outside ``[0, n]``, a missing path, a syntax error with linting on) is printed as
``ERROR: ...`` and the script exits **0**; a call its ``argparse`` refuses (a ``view_range``
that is not two integers, an ``insert_line`` that is not an integer, an unknown or missing
parameter) exits **2**. A path outside the workspace (R2E-Gym has no such notion) is a path
failure like a missing one: ``ERROR: ...``, exit 0. Whatever the exit code, every failure
sets ``info["error"]`` to its message, the signal a caller should read.
"""

from __future__ import annotations

import ast
import errno
import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import sweworld.pyast as pyast
from sweworld.sandbox.paths import PathOutsideWorkspace
from sweworld.sandbox.tools.base import (
    ToolContext,
    ToolResult,
    ToolSpec,
    atomic_write_text,
    display_path,
    parse_int,
    parse_view_range,
    printed,
    suffix_of,
)

__all__ = [
    "CAT_HEADER",
    "COMMANDS",
    "CONCISE_HEADER",
    "DIR_HEADER",
    "LATIN1_NOTE",
    "LINT_ERROR_TEMPLATE",
    "NON_PYTHON_ERROR",
    "SNIPPET_LINES",
    "SPEC",
    "TRUNCATED_MESSAGE",
    "file_editor",
    "maybe_truncate",
]

SPEC = ToolSpec(
    name="file_editor",
    required=("command", "path"),
    optional=(
        "file_text",
        "old_str",
        "new_str",
        "insert_line",
        "view_range",
        "concise",
        "enable_linting",
        "python_only",
    ),
)
COMMANDS: tuple[str, ...] = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_LINES = 4

TRUNCATED_MESSAGE = (
    "<response clipped><NOTE>To save on context only part of this file has been "
    "shown to you. You should retry this tool after you have searched inside the file "
    "with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>"
)
LINT_ERROR_TEMPLATE = (
    "Your proposed edit has introduced new syntax error(s).\n"
    "Please read this error message carefully and then retry editing the file.\n"
    "ERRORS:\n"
)
CAT_HEADER = "Here's the result of running `cat -n` on the file: {path}:\n"
CONCISE_HEADER = (
    "Here is a condensed view for file: {path}; [Note: Useful for understanding file "
    "structure in a concise manner. Please use specific view_range without concise cmd if "
    "you want to explore further into the relevant parts.]\n"
)
DIR_HEADER = "Here's the files and directories up to 2 levels deep in {path}, excluding hidden:\n"
NON_PYTHON_ERROR = (
    "ERROR: Viewing non-Python files is disallowed for saving context. "
    "File '{name}' is not a .py file."
)
LATIN1_NOTE = "Note: {path} is not valid UTF-8 text; it is shown decoded as latin-1.\n"


class _EditorError(Exception):
    """R2E's ``EditorError``: printed as ``ERROR: {message}``."""


@dataclass
class _Result:
    """R2E's ``EditorResult``: output, or an error printed after an empty output line."""

    output: str
    error: str = ""

    def printed(self) -> str:
        if self.error:
            return printed(self.output, f"ERROR: {self.error}")
        return printed(self.output)


def maybe_truncate(content: str, limit: int | None) -> str:
    if not limit or len(content) <= limit:
        return content
    return content[:limit] + TRUNCATED_MESSAGE


def _universal_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _os_error(exc: OSError, shown: str) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"Disk quota exceeded: {shown} could not be written because this session's disk "
            f"quota is full ([Errno {exc.errno}] {exc.strerror}). Nothing was changed. Remove "
            "files you do not need (for example large files in /tmp or /testbed) and retry."
        )
    if exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}: '{shown}'"
    return str(exc)


def _lenient_bool(value: str | None) -> bool:
    return value is not None and str(value).strip().lower() in ("true", "1", "yes", "on")


class _Editor:
    def __init__(self, ctx: ToolContext, enable_linting: bool) -> None:
        self.ctx = ctx
        self.cfg = ctx.config
        self.enable_linting = enable_linting

    # ------------------------------------------------------------------ file access
    def _too_large(self, shown: str, size: int, viewing: bool) -> _EditorError:
        hint = "Pass a view_range to see part of it, or use" if viewing else "Use"
        return _EditorError(
            f"The file {shown} is too large for file_editor ({size} bytes; the limit is "
            f"{self.cfg.max_file_bytes} bytes). {hint} execute_bash with `grep -n`, `head`, "
            "`tail` or `sed -n` to work with parts of it."
        )

    def _stat_regular(self, host: Path, shown: str) -> os.stat_result:
        try:
            info = os.stat(host)
        except OSError as exc:
            raise _EditorError(f"Failed to read file {shown}: {_os_error(exc, shown)}") from None
        if not stat.S_ISREG(info.st_mode):
            raise _EditorError(
                f"The path {shown} is not a regular file; file_editor only works on regular "
                "files and directories."
            )
        return info

    def _read_bytes(self, host: Path, shown: str, viewing: bool = False) -> bytes:
        size = self._stat_regular(host, shown).st_size
        if size > self.cfg.max_file_bytes:
            raise self._too_large(shown, size, viewing)
        try:
            data = host.read_bytes()
        except OSError as exc:
            raise _EditorError(f"Failed to read file {shown}: {_os_error(exc, shown)}") from None
        if b"\x00" in data:
            raise _EditorError(
                f"The file {shown} appears to be binary (it contains NUL bytes); "
                "file_editor only works on text files."
            )
        return data

    def read_for_edit(self, host: Path, shown: str) -> str:
        data = self._read_bytes(host, shown)
        try:
            return _universal_newlines(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise _EditorError(
                f"The file {shown} is not valid UTF-8 text; file_editor only edits UTF-8 "
                "files. Use execute_bash (e.g. sed) to change it."
            ) from None

    def read_for_view(self, host: Path, shown: str) -> tuple[str, str]:
        """The text and a note to print first ("" when the file is UTF-8)."""
        data = self._read_bytes(host, shown, viewing=True)
        try:
            return _universal_newlines(data.decode("utf-8")), ""
        except UnicodeDecodeError:
            return _universal_newlines(data.decode("latin-1")), LATIN1_NOTE.format(path=shown)

    def write(self, host: Path, text: str, shown: str, creating: bool = False) -> None:
        size = len(text.encode("utf-8", errors="surrogateescape"))
        if size > self.cfg.max_file_bytes:
            raise _EditorError(
                f"Refusing to write {size} bytes to {shown}: the limit is "
                f"{self.cfg.max_file_bytes} bytes."
            )
        try:
            atomic_write_text(host, text)
        except OSError as exc:
            if creating:
                raise _EditorError(
                    f"Error creating file at {shown}: {_os_error(exc, shown)}"
                ) from None
            raise _EditorError(f"Failed to write file {shown}: {_os_error(exc, shown)}") from None

    def _make_output(self, content: str, descriptor: str, init_line: int = 1) -> str:
        content = maybe_truncate(content, self.cfg.max_response_len).expandtabs()
        numbered = "\n".join(
            f"{i + init_line:6}\t{line}" for i, line in enumerate(content.split("\n"))
        )
        return f"Here's the result of running `cat -n` on {descriptor}:\n" + numbered + "\n"

    def _lint(self, text: str, shown: str) -> str:
        try:
            pyast.parse(text, filename=shown)
        except SyntaxError as exc:
            return str(exc)
        except ValueError as exc:  # e.g. source code string cannot contain null bytes
            return str(exc)
        return ""

    def _history(self, key: str) -> list[str]:
        return self.ctx.history.setdefault(key, [])

    # ------------------------------------------------------------------ view
    def view_dir(self, host: Path, shown: str, python_only: bool) -> _Result:
        lines: list[str] = []

        def wanted(path: str, name: str, is_dir: bool) -> bool:
            if fnmatch.fnmatchcase(path, "*/.*"):
                return False
            return not python_only or is_dir or fnmatch.fnmatchcase(name, "*.py")

        def child(parent: str, name: str) -> str:
            return parent + name if parent.endswith("/") else f"{parent}/{name}"

        def walk(directory: Path, path: str, depth: int) -> None:
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                return
            for entry in entries:
                sub = child(path, entry.name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if wanted(sub, entry.name, is_dir):
                    lines.append(sub)
                if is_dir and depth < 2 and not entry.name.startswith("."):
                    walk(Path(entry.path), sub, depth + 1)

        if wanted(shown, PurePosixPath(shown).name, True):
            lines.append(shown)
        walk(host, shown, 1)
        msg = DIR_HEADER.format(path=shown) + "".join(f"{line}\n" for line in lines)
        return _Result(maybe_truncate(msg, self.cfg.max_response_len))

    def _elided_lines(self, text: str, shown: str) -> list[tuple[int, str]]:
        try:
            tree = pyast.parse(text, filename=shown)
        except SyntaxError as exc:
            raise _EditorError(f"Syntax error for file {shown}: {exc}") from None
        ranges: list[tuple[int, int]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first, last = node.body[0], node.body[-1]
                start = first.lineno - 1
                end = (last.end_lineno or last.lineno) - 1
                if end - start >= 3:
                    ranges.append((start, end))
            if isinstance(node, ast.ClassDef) and node.body:
                head = node.body[0]
                is_doc = (
                    isinstance(head, ast.Expr)
                    and isinstance(head.value, ast.Constant)
                    and isinstance(head.value.value, str)
                )
                if is_doc:
                    doc_start = head.lineno - 1
                    doc_end = (head.end_lineno or head.lineno) - 1
                    if doc_end - doc_start >= 4:
                        ranges.append((doc_start + 1, doc_end - 1))
        hidden = {i for start, end in ranges for i in range(start, end + 1)}
        notices = [(start, f"... eliding lines {start + 1}-{end + 1} ...") for start, end in ranges]
        kept = [(i, line) for i, line in enumerate(text.splitlines()) if i not in hidden]
        combined = notices + kept
        combined.sort(key=lambda item: item[0])
        return combined

    def _view_range_streamed(
        self, host: Path, shown: str, view_range: list[int], header: str
    ) -> _Result:
        """A view_range of a file too large to load: read it line by line."""
        start, end = view_range
        picked: list[tuple[int, str]] = []
        total = 0
        try:
            with open(host, encoding="utf-8", errors="replace", newline=None) as handle:
                for total, line in enumerate(handle, 1):
                    if "\x00" in line:
                        raise _EditorError(
                            f"The file {shown} appears to be binary (it contains NUL bytes); "
                            "file_editor only works on text files."
                        )
                    if total >= start and (end == -1 or total <= end):
                        picked.append((total - 1, line.rstrip("\n")))
        except OSError as exc:
            raise _EditorError(f"Failed to read file {shown}: {_os_error(exc, shown)}") from None
        error = self._check_range(view_range, total)
        if error:
            return _Result("", error)
        body = "\n".join(f"{i + 1:6d} {text}" for i, text in picked)
        return _Result(maybe_truncate(header + body, self.cfg.max_response_len))

    @staticmethod
    def _check_range(view_range: list[int], total: int) -> str:
        start, end = view_range
        if not 1 <= start <= total:
            return f"Invalid view_range {view_range}: start line must be in [1, {total}]"
        if end != -1 and (end < start or end > total):
            return (
                f"Invalid view_range {view_range}: end must be >= start "
                f"and <= {total}, or -1 to view until end."
            )
        return ""

    def view(
        self,
        host: Path,
        shown: str,
        suffix: str,
        view_range: list[int] | None,
        concise: bool,
    ) -> _Result:
        python_only = self.cfg.python_only
        if host.is_dir():
            return self.view_dir(host, shown, python_only)
        if suffix != ".py" and python_only:
            return _Result("", NON_PYTHON_ERROR.format(name=PurePosixPath(shown).name))

        size = self._stat_regular(host, shown).st_size
        if size > self.cfg.max_file_bytes and view_range and not concise:
            return self._view_range_streamed(host, shown, view_range, CAT_HEADER.format(path=shown))

        text, note = self.read_for_view(host, shown)
        if (
            suffix == ".py"
            and not view_range
            and not concise
            and len(text.splitlines()) > self.cfg.concise_threshold
        ):
            concise = True
        if suffix == ".py" and concise:
            numbered = self._elided_lines(text, shown)
        else:
            numbered = list(enumerate(text.splitlines()))

        if view_range:
            error = self._check_range(view_range, len(numbered))
            if error:
                return _Result("", error)
            start, end = view_range
            numbered = [
                (i, line) for i, line in numbered if i + 1 >= start and (end == -1 or i + 1 <= end)
            ]

        header = CONCISE_HEADER if concise else CAT_HEADER
        out = header.format(path=shown) + "\n".join(f"{i + 1:6d} {line}" for i, line in numbered)
        return _Result(note + maybe_truncate(out, self.cfg.max_response_len))

    # ------------------------------------------------------------------ edits
    def create(
        self, host: Path, shown: str, key: str, suffix: str, file_text: str | None
    ) -> _Result:
        if file_text is None:
            raise _EditorError("Cannot create file without 'file_text' parameter.")
        if self.enable_linting and suffix == ".py":
            lint = self._lint(file_text, shown)
            if lint:
                return _Result("", LINT_ERROR_TEMPLATE + lint)
        self.write(host, file_text, shown, creating=True)
        self._history(key).append("")
        msg = f"File created at {shown}. " + self._make_output(file_text, shown)
        msg += "Review the file and make sure that it is as expected. Edit the file if necessary."
        return _Result(msg)

    def str_replace(
        self, host: Path, shown: str, key: str, suffix: str, old: str | None, new: str | None
    ) -> _Result:
        if old is None:
            raise _EditorError("Missing required parameter 'old_str' for 'str_replace'.")
        content = self.read_for_edit(host, shown)
        occurrences = content.count(old)
        if occurrences == 0:
            raise _EditorError(f"No occurrences of '{old}' found in {shown} for replacement.")
        if occurrences > 1:
            raise _EditorError(
                f"Multiple occurrences of '{old}' found in {shown}. "
                "Please ensure it is unique before using str_replace."
            )
        updated = content.replace(old, new or "")
        if self.enable_linting and suffix == ".py":
            lint = self._lint(updated, shown)
            if lint:
                return _Result("", LINT_ERROR_TEMPLATE + lint)
        self.write(host, updated, shown)
        self._history(key).append(content)

        line = content.split(old)[0].count("\n") if old else 0
        start = max(0, line - SNIPPET_LINES)
        end = line + SNIPPET_LINES + (new or "").count("\n")
        snippet = "\n".join(updated.split("\n")[start : end + 1])
        msg = f"The file {shown} has been edited. "
        msg += self._make_output(snippet, f"a snippet of {shown}", start + 1)
        msg += (
            "Review the changes and make sure they are as expected. "
            "Edit the file again if necessary."
        )
        return _Result(msg)

    def insert(
        self, host: Path, shown: str, key: str, suffix: str, line: int | None, new: str | None
    ) -> _Result:
        if new is None:
            raise _EditorError("Missing required parameter 'new_str' for 'insert'.")
        if line is None:
            raise _EditorError("Missing required parameter 'insert_line' for 'insert'.")
        old_text = self.read_for_edit(host, shown)
        lines = old_text.split("\n")
        if line < 0 or line > len(lines):
            raise _EditorError(f"Invalid insert_line {line}. Must be in [0, {len(lines)}].")
        new_lines = new.split("\n")
        updated = "\n".join(lines[:line] + new_lines + lines[line:])
        if self.enable_linting and suffix == ".py":
            lint = self._lint(updated, shown)
            if lint:
                return _Result("", LINT_ERROR_TEMPLATE + lint)
        self.write(host, updated, shown)
        self._history(key).append(old_text)

        snippet_lines = (
            lines[max(0, line - SNIPPET_LINES) : line]
            + new_lines
            + lines[line : line + SNIPPET_LINES]
        )
        msg = f"The file {shown} has been edited. "
        msg += self._make_output(
            "\n".join(snippet_lines),
            "a snippet of the edited file",
            max(1, line - SNIPPET_LINES + 1),
        )
        msg += (
            "Review the changes and make sure they are as expected "
            "(correct indentation, no duplicate lines, etc). Edit the file again if necessary."
        )
        return _Result(msg)

    def undo_edit(self, host: Path, shown: str, key: str) -> _Result:
        stack = self.ctx.history.get(key)
        if not stack:
            raise _EditorError(f"No previous edits found for {shown} to undo.")
        previous = stack[-1]
        self.write(host, previous, shown)
        stack.pop()
        return _Result(
            f"Last edit to {shown} undone successfully. " + self._make_output(previous, shown)
        )


def file_editor(ctx: ToolContext, params: dict[str, str]) -> ToolResult:
    """Run one ``file_editor`` call. Usage errors raise :class:`ToolError`."""
    params = SPEC.check(params)
    command = params["command"].strip()
    path = params["path"]
    view_range = parse_view_range(params["view_range"]) if "view_range" in params else None
    insert_line = (
        parse_int("insert_line", params["insert_line"]) if "insert_line" in params else None
    )
    concise = _lenient_bool(params.get("concise"))
    editor = _Editor(ctx, enable_linting=_lenient_bool(params.get("enable_linting")))

    shown = display_path(path)
    suffix = suffix_of(path)
    try:
        key = ctx.paths.resolve(path, ctx.cwd)
        host = ctx.paths.to_host(key)
    except PathOutsideWorkspace as exc:
        return ToolResult(
            printed(f"ERROR: {exc}"), info={"error": str(exc), "outside_workspace": True}
        )

    try:
        result = _dispatch(
            editor, command, host, shown, key, suffix, params, view_range, insert_line, concise
        )
    except _EditorError as exc:
        return ToolResult(printed(f"ERROR: {exc}"), info={"error": str(exc)})
    info = {"error": result.error} if result.error else {}
    info["path"] = key
    return ToolResult(result.printed(), info=info)


def _dispatch(
    editor: _Editor,
    command: str,
    host: Path,
    shown: str,
    key: str,
    suffix: str,
    params: dict[str, str],
    view_range: list[int] | None,
    insert_line: int | None,
    concise: bool,
) -> _Result:
    exists = os.path.exists(host)
    if command == "create":
        if exists or os.path.islink(host):
            raise _EditorError(f"File already exists at: {shown}. Cannot overwrite with 'create'.")
    elif not exists:
        raise _EditorError(f"The path '{shown}' does not exist.")
    if os.path.isdir(host) and command != "view":
        raise _EditorError(
            f"The path '{shown}' is a directory. Only 'view' can be used on directories."
        )

    if command == "view":
        return editor.view(host, shown, suffix, view_range, concise)
    if command == "create":
        return editor.create(host, shown, key, suffix, params.get("file_text"))
    if command == "str_replace":
        return editor.str_replace(
            host, shown, key, suffix, params.get("old_str"), params.get("new_str")
        )
    if command == "insert":
        return editor.insert(host, shown, key, suffix, insert_line, params.get("new_str"))
    if command == "undo_edit":
        return editor.undo_edit(host, shown, key)
    raise _EditorError(
        f"Unrecognized command '{command}'. "
        "Allowed commands: view, create, str_replace, insert, undo_edit."
    )
