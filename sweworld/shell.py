"""``sweworld shell``: a session on one task, actions typed at a prompt."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from sweworld import __version__

__all__ = ["cmd_shell", "read_action"]

_SHELL_HELP = """Type an action and press Enter:
  a bash command:              grep -n slugify stockroom/textutil.py
  an R2E-Gym function call:    <function=file_editor>
                                 <parameter=command>view</parameter>
                                 <parameter=path>/testbed/README.md</parameter>
                               </function>
A function call is read until </function>; a bash line ending in \\ continues, and a heredoc
(<<EOF) is read until its end marker. Commands: :patch (current diff), :help, :quit."""


def read_action(stream: TextIO, out: TextIO) -> str | None:
    """One action typed at the prompt: a function call read until ``</function>``, a bash
    line continued by ``\\`` or a heredoc read until its marker; None at end of input."""
    out.write("sweworld> ")
    out.flush()
    first = stream.readline()
    if not first:
        return None
    lines = [first]
    text = first
    if "<function=" in first:
        while "</function>" not in text:
            nxt = stream.readline()
            if not nxt:
                break
            lines.append(nxt)
            text = "".join(lines)
        return text.strip()
    marker = re.search(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", first)
    while True:
        if text.rstrip("\n").endswith("\\") or (
            marker and not any(ln.strip() == marker.group(1) for ln in lines[1:])
        ):
            nxt = stream.readline()
        else:
            break
        if not nxt:
            break
        lines.append(nxt)
        text = "".join(lines)
    return text.rstrip("\n")


def cmd_shell(
    args: argparse.Namespace, stream: TextIO | None = None, out: TextIO | None = None
) -> int:
    """``sweworld shell``: a session on the task, actions typed one at a time."""
    from sweworld.cli_inputs import open_session

    stream = stream or sys.stdin
    out = out or sys.stdout
    manager, session = open_session(args)
    print(
        f"sweworld {__version__}: session {session.id} on {args.id} "
        f"({session.workspace.backend} workspace, executor: {args.executor}). "
        "Type :help for help.",
        file=out,
    )
    try:
        while True:
            action = read_action(stream, out)
            if action is None or action.strip() in (":quit", ":q", "exit"):
                break
            if not action.strip():
                continue
            if action.strip() == ":help":
                print(_SHELL_HELP, file=out)
                continue
            if action.strip() == ":patch":
                print(session.get_patch() or "(no changes)", file=out)
                continue
            result = session.step(action)
            print(result.observation, file=out)
            if result.done:
                print("[episode finished]", file=out)
                break
    finally:
        manager.close_all()
    return 0
