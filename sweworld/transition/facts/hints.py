""":func:`no_target_hint`: the hint SWE-World gives when a command has nothing to execute."""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from sweworld.transition.facts.commands import parse_command
from sweworld.transition.types import WORKDIR, WorkspaceView

#: Exit code suggested for :func:`no_target_hint` answers (the code of a usage error).
NO_TARGET_EXIT_CODE = 2


# --------------------------------------------------------------------------- hints


def no_target_hint(request: Any, view: WorkspaceView) -> str | None:
    """The hint SWE-World gives instead of an output when a command has nothing to run.

    It applies exactly when:

    1. the interpreter is started with neither a script, ``-c`` code, ``-m`` module, nor
       input on stdin (``python``, ``python3 -u``): it would start an interactive session,
       which cannot be used through one command;
    2. ``-c`` or ``-m`` is given without its argument (``python -m``);
    3. the script (``python x.py``) or a pytest target (``pytest x.py``) lies outside the
       workspace (not under ``/testbed`` or ``/tmp``, or behind a symlink leaving it), or
       one of its parent components is an existing regular file, so that no command in
       the sandbox can create it.

    A missing script that *could* be created (under ``/testbed`` or ``/tmp``) gets no hint:
    the interpreter's own message (``can't open file ...``, exit 2) is exact and tells the
    agent what to do. For other commands the function returns None.

    The caller returns the hint as stderr with exit code :data:`NO_TARGET_EXIT_CODE`.
    """
    argv = tuple(getattr(request, "argv", ()) or ())
    stdin = getattr(request, "stdin", b"") or b""
    cwd = getattr(request, "cwd", None) or view.cwd or WORKDIR
    info = parse_command(argv, stdin)
    if info.is_python:
        if info.error and ("-c option" in info.error or "-m option" in info.error):
            flag = "-c" if "-c option" in info.error else "-m"
            what = "the code to run" if flag == "-c" else "the module to run"
            return (
                f"sweworld: `{shlex.join(argv)}` has no target: `{flag}` needs {what} "
                f'(e.g. `{info.program} -c "print(1)"` or `{info.program} -m pytest '
                "tests/`). Change the command."
            )
        if info.kind == "python_stdin" and info.script is None and not stdin:
            return (
                f"sweworld: `{shlex.join(argv)}` starts an interactive interpreter, which "
                "cannot be used here: each command runs once, without a terminal. Put the "
                f"code in a file and run `{info.program} file.py`, pass it inline with "
                f'`{info.program} -c "..."`, or feed it on stdin with '
                f"`{info.program} - <<'EOF' ... EOF`."
            )
        if info.kind == "python_script" and info.script:
            reason = _uncreatable(view, posixpath.normpath(posixpath.join(cwd, info.script)))
            if reason:
                return (
                    f"sweworld: `{shlex.join(argv)}` cannot run: the script {info.script!r} "
                    f"{reason}. Only files under /testbed and /tmp can be executed; create "
                    "the script there (or run the code with `python -c`) and change the "
                    "command."
                )
        return None
    if info.kind == "pytest" and info.pytest is not None:
        for target in info.pytest.targets:
            path = posixpath.normpath(posixpath.join(cwd, target.split("::")[0]))
            reason = _uncreatable(view, path)
            if reason:
                return (
                    f"sweworld: `{shlex.join(argv)}` cannot run: the test path {target!r} "
                    f"{reason}. Only tests under /testbed and /tmp can be run; change the "
                    "command."
                )
    return None


def _uncreatable(view: WorkspaceView, path: str) -> str | None:
    """Why ``path`` cannot exist in the sandbox (None when it exists or could)."""
    if view.exists(path):
        return None
    if view.resolve(path) is None or not (
        path == WORKDIR or path.startswith((WORKDIR + "/", "/tmp/"))
    ):
        return "is outside the workspace"
    parent = posixpath.dirname(path)
    while parent not in ("/", WORKDIR, "/tmp"):
        if view.is_file(parent):
            return f"is under {parent!r}, which is a file"
        parent = posixpath.dirname(parent)
    return None
