"""The interpreter's messages: program names and syntax errors printed the way CPython
prints them (a port of ``pythonrun.c``'s printer up to 3.12).
"""

from __future__ import annotations

import sys
import traceback
import warnings
from dataclasses import dataclass

from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.records import SyntaxErrorInfo

# --------------------------------------------------------------------------- messages


def program_name(program: str) -> str:
    return program or "python"


def script_display(script: str, cwd: str, env: Environment) -> str:
    """How Python names the main script in messages: absolute (not normalised) since 3.9."""
    if env.python >= (3, 9) and not script.startswith("/"):
        return cwd.rstrip("/") + "/" + script
    return script


def format_syntax_error(source: str, filename: str) -> tuple[SyntaxErrorInfo | None, bool]:
    """Compile ``source`` as ``filename``: (the syntax error as Python prints it, or None;
    whether compiling emitted warnings, such as ``SyntaxWarning``).

    The text is what the running interpreter prints for an uncaught ``SyntaxError`` in a
    script (checked against real runs in the tests): up to 3.12 that is the C printer of
    ``pythonrun.c`` (reproduced by :func:`_print_syntax_error`), from 3.13 on the
    :mod:`traceback` module.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(source, filename, "exec", dont_inherit=True)
        except SyntaxError as exc:
            if exc.text is None and exc.lineno and not filename.startswith("<"):
                # Errors of the compiler (not the parser) carry no text; the interpreter
                # reads the line from the file when it prints them.
                lines = source.splitlines(keepends=True)
                if 0 < exc.lineno <= len(lines):
                    exc.text = lines[exc.lineno - 1]
            if sys.version_info >= (3, 13) or exc.lineno is None:
                text = "".join(traceback.format_exception_only(type(exc), exc))
            else:
                text = _print_syntax_error(exc)
            return (
                SyntaxErrorInfo(
                    path=filename,
                    line=exc.lineno or 0,
                    offset=exc.offset,
                    error_type=type(exc).__name__,
                    message=exc.msg,
                    text=text,
                ),
                bool(caught),
            )
        except (ValueError, OverflowError, MemoryError, RecursionError):
            return None, True
    return None, bool(caught)


def _print_syntax_error(exc: SyntaxError) -> str:
    """CPython's ``print_exception`` for a SyntaxError (``Python/pythonrun.c``, 3.10-3.12):
    only ``SyntaxError`` itself uses ``end_offset``; its subclasses get one caret."""
    filename = exc.filename if exc.filename is not None else "<string>"
    lineno = exc.lineno or 0
    offset = exc.offset if exc.offset is not None else -1
    if type(exc) is SyntaxError:
        end_lineno = exc.end_lineno if exc.end_lineno is not None else lineno
        end_offset = exc.end_offset if exc.end_offset is not None else -1
    else:
        end_lineno, end_offset = lineno, -1
    out = f'  File "{filename}", line {lineno}\n'
    if exc.text is not None:
        # The printer works on the UTF-8 bytes of the line: character offsets become
        # byte offsets.
        offset = _byte_offset(exc.text, offset)
        end_offset = _byte_offset(exc.text, end_offset)
        line_size = len(exc.text.encode("utf-8", "surrogatepass"))
        if end_lineno > lineno:
            end_offset = line_size
        if end_offset > line_size + 1:
            end_offset = line_size + 1
        out += _print_error_text(offset, end_offset, exc.text)
    message = str(exc.msg) if exc.msg is not None else ""
    name = type(exc).__qualname__
    return out + (f"{name}: {message}\n" if message else f"{name}\n")


def _byte_offset(text: str, offset: int) -> int:
    if offset <= 0:
        return offset
    return len(text[: offset - 1].encode("utf-8", "surrogatepass")) + 1


def _print_error_text(offset: int, end_offset: int, text_value: str) -> str:
    carets = end_offset - offset if (end_offset > 0 and end_offset > offset) else 1
    text = text_value.encode("utf-8", "surrogatepass")
    offset -= 1
    start = 0
    while start < len(text) and text[start : start + 1] in (b" ", b"\t", b"\f"):
        start += 1
        offset -= 1
    text = text[start:]
    length = len(text)
    if length > 0 and text.endswith(b"\n"):
        length -= 1
    offset = min(offset, length)
    while True:
        newline = text.find(b"\n")
        if newline == -1 or newline >= offset:
            break
        skip = newline + 1
        text = text[skip:]
        length -= skip
        offset -= skip
    out = "    " + text.decode("utf-8", "replace")
    if length >= len(text) or text[length : length + 1] != b"\n":
        out += "\n"
    if offset < 0:
        return out
    return out + "    " + " " * offset + "^" * carets + "\n"


@dataclass(frozen=True)
class Frame:
    """Where the small interpreter stopped: a file and a line."""

    file: str
    lineno: int
