"""R2E-Gym's ``search`` tool, in process.

Same parameters and output strings as ``r2egym/agenthub/tools/search.py``:

* ``path`` (default ``.``, relative to the working directory) names a **file**: GNU
  ``grep -n`` runs on it, as in R2E-Gym (``search_term`` is a basic regular expression);
* otherwise a **directory**: every non-hidden file (only ``.py`` files when
  ``python_only``) below it, hidden directories skipped, counted per file by substring
  match per line; more than 100 matching files ask the agent to narrow the search.

Bounded work, whatever the input:

* grep is a real process, never Python's backtracking ``re`` (``\\(aa*\\)*b`` on a line of
  28 ``a`` took 15 s there): it reads the file on its standard input (opened here after the
  path was resolved inside the sandbox), with ``LC_ALL=C`` (a plain container's locale) and
  ``-e`` (a term starting with ``-`` is a pattern, not an option); it is stopped after
  ``ToolConfig.search_timeout`` seconds (back-references can be exponential even in grep)
  and after ``ToolConfig.search_max_output_bytes`` bytes of matches; the thread waiting on it
  holds no lock, so other sessions keep running;
* a directory search reads each file in chunks (a file of one huge line never becomes one
  huge string), keeps the same deadline, and ``search_term`` is at most
  :data:`MAX_SEARCH_TERM_CHARS` characters.

Differences, with their reasons: a binary file that matches prints grep's older line
``Binary file PATH matches`` (grep >= 3.5 prints nothing on standard output, which leaves
the agent an empty list); a stopped search says why. Directories are walked with
``os.scandir`` in sorted order (top-down, like ``os.walk``); symbolic links are resolved
inside the sandbox and skipped when they leave it; paths are printed as sandbox paths (the
searched directory by its canonical path, files relative to the working directory and
prefixed with ``./``, as R2E-Gym prints them).
"""

from __future__ import annotations

import os
import posixpath
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sweworld.sandbox.paths import PathOutsideWorkspace
from sweworld.sandbox.tools.base import (
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    parse_bool,
    printed,
)

__all__ = [
    "GREP_ENV",
    "MAX_MATCHED_FILES",
    "MAX_SEARCH_TERM_CHARS",
    "SPEC",
    "TIMEOUT_MESSAGE",
    "GrepRun",
    "count_matching_lines",
    "run_grep",
    "search",
]

SPEC = ToolSpec(name="search", required=("search_term",), optional=("path", "python_only"))
MAX_MATCHED_FILES = 100
#: Longer terms are refused (R2E-Gym passes the term as one argv string: 128 KiB at most).
MAX_SEARCH_TERM_CHARS = 10_000
#: R2E-Gym's runtime message for a tool that ran past its time limit.
TIMEOUT_MESSAGE = "The command took too long to execute (>{timeout}s)"
#: grep's whole environment: the C locale (bytes are characters; no file is "binary" for
#: its encoding) and nothing of the host's (no GREP_COLORS, GREP_OPTIONS, secrets).
GREP_ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
_READ_CHUNK = 1 << 16
_MAX_STDERR = 1 << 16
_BINARY_MATCHES = b"binary file matches"


@dataclass
class GrepRun:
    """What one bounded grep run printed."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False


def _grep_binary() -> str:
    found = shutil.which("grep", path="/usr/bin:/bin:/usr/local/bin") or shutil.which("grep")
    if found is None:
        raise ToolError("The search tool needs GNU grep, which is not installed here.", 1)
    return found


def run_grep(term: bytes, source: IO[bytes], *, timeout: float, max_output_bytes: int) -> GrepRun:
    """``grep -n -e TERM`` over ``source`` (its standard input), stopped at the limits.

    Reads at most ``max_output_bytes`` of matches (then stops grep: ``truncated``) and waits
    at most ``timeout`` seconds (then kills it: ``timed_out``).
    """
    proc = subprocess.Popen(
        ["grep", "-n", "-e", term],
        executable=_grep_binary(),
        stdin=source,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=GREP_ENV,
        close_fds=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    err = bytearray()
    timed_out = truncated = False
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, _READ_CHUNK)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf: bytearray = key.data
                    buf += chunk
                    if buf is err and len(err) > _MAX_STDERR:
                        del err[_MAX_STDERR:]
                if len(out) > max_output_bytes:
                    truncated = True
                    break
        finally:
            if timed_out or truncated:
                proc.kill()
            proc.stdout.close()
            proc.stderr.close()
            returncode = proc.wait()
    if truncated:
        cut = out.rfind(b"\n", 0, max_output_bytes + 1)
        del out[cut + 1 if cut != -1 else max_output_bytes :]
    return GrepRun(returncode, bytes(out), bytes(err), timed_out, truncated)


def _timeout_result(seconds: float, where: str, hint: str) -> ToolResult:
    shown = int(seconds) if float(seconds).is_integer() else seconds
    message = TIMEOUT_MESSAGE.format(timeout=shown)
    return ToolResult(
        printed(message, f"The search was stopped {where}. {hint}"),
        exit_code=-1,
        info={"timed_out": True},
    )


def _search_file(ctx: ToolContext, term: str, host: Path, shown: str) -> ToolResult:
    config = ctx.config
    try:
        with open(host, "rb") as handle:
            run = run_grep(
                term.encode("utf-8", "surrogateescape"),
                handle,
                timeout=config.search_timeout,
                max_output_bytes=config.search_max_output_bytes,
            )
    except OSError as exc:
        message = f"grep: {shown}: {exc.strerror or exc}"
        return ToolResult(printed(f"Error executing grep:\n{message}\n"), exit_code=2)
    if run.timed_out:
        return _timeout_result(
            config.search_timeout,
            f"in {shown}",
            "Back-references (\\1) and nested repetitions can make grep take exponential "
            "time; use a simpler search_term.",
        )
    stderr = run.stderr.decode("utf-8", "replace")
    binary = _BINARY_MATCHES in run.stderr.lower()
    if run.returncode == 1 or (run.returncode == 0 and not run.stdout and not binary):
        return ToolResult(printed(f'No matches found for "{term}" in {shown}'))
    if run.returncode not in (0, 1) and not run.truncated:
        return ToolResult(
            printed(f"Error executing grep:\n{stderr}"),
            exit_code=run.returncode,
        )
    body = run.stdout.decode("utf-8", "replace").replace(
        "Binary file (standard input) matches", f"Binary file {shown} matches"
    )
    lines = [f'Matches for "{term}" in {shown}:', body.strip()]
    if binary:
        lines.append(f"Binary file {shown} matches")
    info: dict[str, object] = {}
    if run.truncated:
        lines.append(
            f"[The matches were cut after {config.search_max_output_bytes} bytes; "
            "use a more specific search_term.]"
        )
        info["truncated"] = True
    return ToolResult(printed(*lines), info=info)


def count_matching_lines(
    handle: IO[str], term: str, *, deadline: float | None = None, chunk_chars: int = _READ_CHUNK
) -> int:
    """How many lines of ``handle`` contain ``term`` (lines keep their ``"\\n"``).

    The same count as ``sum(term in line for line in handle)`` (R2E-Gym's loop), reading
    ``chunk_chars`` at a time: memory stays bounded and the work linear, even for a file of
    one huge line.

    Raises:
        TimeoutError: ``time.monotonic()`` passed ``deadline`` (checked once per chunk).
    """
    count = 0
    keep = max(len(term) - 1, 0)
    tail = ""  # the end of the current line, enough to find a term that crosses chunks
    matched = False  # the current line contains ``term``
    started = False  # the current line has at least one character
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError
        chunk = handle.read(chunk_chars)
        if not chunk:
            break
        for index, piece in enumerate(chunk.split("\n")):
            if index:  # a newline ended the current line
                count += matched or term in tail + "\n"
                tail, matched, started = "", False, False
            if piece and not matched:
                started = True
                text = tail + piece
                matched = term in text
                tail = text[-keep:] if keep and not matched else ""
            elif piece:
                started = True
    return count + (started and matched)


def _walk(
    ctx: ToolContext, host_dir: Path, sandbox_dir: str, python_only: bool
) -> Iterator[tuple[str, Path]]:
    """Yield ``(sandbox_path, host_path)`` of the files to search, in ``os.walk`` order."""
    stack: list[tuple[Path, str]] = [(host_dir, sandbox_dir)]
    while stack:
        host, sandbox = stack.pop()
        try:
            with os.scandir(host) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[tuple[Path, str]] = []
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            sandbox_path = posixpath.join(sandbox, name)
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_link:
                try:
                    target = ctx.paths.to_host(sandbox_path)
                except PathOutsideWorkspace:
                    continue
                if not target.is_file():
                    continue  # os.walk does not descend into linked directories
                if python_only and not name.endswith(".py"):
                    continue
                yield sandbox_path, target
            elif is_dir:
                subdirs.append((Path(entry.path), sandbox_path))
            elif entry.is_file(follow_symlinks=False):  # never open a FIFO or a device
                if python_only and not name.endswith(".py"):
                    continue
                yield sandbox_path, Path(entry.path)
        stack.extend(reversed(subdirs))


def _count_in_file(term: str, host: Path, deadline: float) -> int:
    with open(host, encoding="utf-8", errors="ignore", newline=None) as handle:
        return count_matching_lines(handle, term, deadline=deadline)


def _search_dir(
    ctx: ToolContext, term: str, host: Path, directory: str, python_only: bool
) -> ToolResult:
    deadline = time.monotonic() + ctx.config.search_timeout
    matches: list[tuple[str, int]] = []
    files = 0
    try:
        for sandbox_path, host_path in _walk(ctx, host, directory, python_only):
            if time.monotonic() > deadline:
                raise TimeoutError
            files += 1
            try:
                count = _count_in_file(term, host_path, deadline)
            except TimeoutError:
                raise
            except OSError:  # unreadable: skipped, as R2E-Gym skips it
                continue
            if count:
                matches.append((sandbox_path, count))
    except TimeoutError:
        return _timeout_result(
            ctx.config.search_timeout,
            f"after reading {files} files under {directory}",
            "Search a smaller directory, or a single file.",
        )
    if not matches:
        return ToolResult(printed(f'No matches found for "{term}" in {directory}'))
    if len(matches) > MAX_MATCHED_FILES:
        return ToolResult(
            printed(
                f'More than {len(matches)} files matched for "{term}" in {directory}. '
                "Please narrow your search."
            )
        )
    total = sum(count for _, count in matches)
    lines = [f'Found {total} matches for "{term}" in {directory}:']
    for sandbox_path, count in matches:
        rel = posixpath.relpath(sandbox_path, ctx.cwd)
        if not rel.startswith("./"):
            rel = "./" + rel
        lines.append(f"{rel} ({count} matches)")
    lines.append(f'End of matches for "{term}" in {directory}')
    return ToolResult(printed(*lines), info={"files": len(matches), "matches": total})


def search(ctx: ToolContext, params: dict[str, str]) -> ToolResult:
    """Run one ``search`` call. Usage errors raise :class:`~.base.ToolError`."""
    params = SPEC.check(params)
    term = params["search_term"]
    if len(term) > MAX_SEARCH_TERM_CHARS:
        raise ToolError(
            f"The search_term is {len(term)} characters long; the limit is "
            f"{MAX_SEARCH_TERM_CHARS}. Search for a shorter, distinctive part of it."
        )
    if "\x00" in term:
        raise ToolError("The search_term contains a NUL character, which grep cannot take.")
    path = params.get("path", ".")
    python_only = (
        parse_bool("python_only", params["python_only"])
        if "python_only" in params
        else ctx.config.python_only
    )
    try:
        canonical = ctx.paths.resolve(path, ctx.cwd)
        host = ctx.paths.to_host(canonical)
    except PathOutsideWorkspace as exc:
        return ToolResult(printed(f"ERROR: {exc}"), exit_code=1)
    if host.is_file():
        return _search_file(ctx, term, host, canonical)
    if not host.is_dir():
        return ToolResult(
            printed(f"Directory '{canonical}' not found or not a directory."), exit_code=1
        )
    return _search_dir(ctx, term, host, canonical, python_only)
