"""The command router's static half: parse a shell command and decide what may run.

Every command an agent sends is parsed with tree-sitter-bash (compound commands, pipes,
redirects, heredocs, command substitutions, ``bash -c '...'`` strings). Each simple command
is classified:

* ``real``: file and text operations (``ls``, ``grep``, ``sed``, ``git diff``, ...): run for
  real inside the sandbox;
* ``execution``: ``python``, ``pytest``, ``pip``, ``make``, ...: intercepted inside the sandbox
  and answered by the session's executor (see :mod:`sweworld.sandbox.shims`);
* ``refused``: containers, privilege escalation, package managers, network clients, git's
  network verbs, and writes outside the workspace. A refused command is not run at all: the
  whole command is answered with a message saying why, and the session is unchanged.

The runtime half (bubblewrap: read-only system, no network, private pid namespace) enforces
the same rules for whatever the static half cannot see (``eval``, variables).
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sweworld.sandbox.shims import EXECUTION_COMMANDS, REFUSED_COMMANDS

WORKSPACE = "/testbed"
WRITABLE_ROOTS = ("/testbed", "/tmp", "/root")  # /root is an ephemeral per-command tmpfs
_WRITABLE_DEVICES = (
    "/dev/null",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
    "/dev/zero",
    "/dev/fd/",
    "/proc/self/fd/",
)
_GIT_NETWORK = {"clone", "fetch", "pull", "push", "ls-remote"}
# Commands that run another command given in their arguments.
_WRAPPERS = {
    "env",
    "timeout",
    "nice",
    "nohup",
    "time",
    "command",
    "exec",
    "builtin",
    "stdbuf",
    "xargs",
    "ionice",
    "setsid",
    "chronic",
    "unbuffer",
}
_SHELLS = {"bash", "sh", "dash", "zsh"}
# Commands that write to (some of) their path arguments.
_WRITERS = {
    "rm",
    "rmdir",
    "mv",
    "cp",
    "touch",
    "mkdir",
    "ln",
    "chmod",
    "chown",
    "chgrp",
    "tee",
    "truncate",
    "install",
    "shred",
    "unlink",
    "rsync",
}
REFUSED_EXIT_CODE = 126


@dataclass
class SimpleCommand:
    """One simple command: its literal words (``None`` where a word is not a literal)."""

    words: list[str | None]
    text: str

    @property
    def name(self) -> str | None:
        return self.words[0] if self.words else None


@dataclass
class Analysis:
    """What a shell command contains, in source order."""

    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[tuple[str, str | None, int]] = field(default_factory=list)  # op, dest, pos
    cds: list[tuple[str | None, int]] = field(default_factory=list)  # target, position
    syntax_error: bool = False
    too_complex: bool = False  # not parsed: see MAX_OPERATORS


# tree-sitter-bash takes time quadratic in the length of a pipeline or a chain of redirects,
# holding the GIL (32,000 `a|` took 42 s, stalling every thread). Commands with more pipe
# and redirect characters than this (at most ~0.6 s of parsing) are refused unparsed.
MAX_OPERATORS = 5000


@dataclass(frozen=True)
class Refusal:
    """Why a command was refused; ``message`` is what the agent sees."""

    command: str
    reason: str

    @property
    def message(self) -> str:
        return (
            f"sweworld: refused `{self.command}`: {self.reason}. Nothing was run; the "
            "session is unchanged.\n"
        )


@functools.lru_cache(maxsize=1)
def _parser():
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


def _literal(node) -> str | None:
    """The value of a word if it has no expansions (quotes removed), else None."""
    kind = node.type
    text = node.text.decode(errors="replace")
    if kind in ("word", "number"):
        if "$" in text or "`" in text or "*" in text or "?" in text or "[" in text:
            return None
        if text.startswith("~"):
            text = "/root" + text[1:]
        return _unescape(text)
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts = [c for c in node.children if c.type not in ('"',)]
        if all(c.type == "string_content" for c in parts):
            return "".join(c.text.decode(errors="replace") for c in parts)
        return None
    if kind == "concatenation":
        pieces = [_literal(c) for c in node.children]
        return None if any(p is None for p in pieces) else "".join(pieces)  # type: ignore[arg-type]
    return None


_ESCAPED = re.compile(r"\\(.)", re.S)


def _unescape(text: str) -> str:
    """Drop the backslash of each escaped character (one linear pass in C)."""
    return _ESCAPED.sub(r"\1", text)


def analyze(script: str) -> Analysis:
    """Parse ``script`` and list its simple commands, redirects and ``cd`` targets."""
    if script.count("|") + script.count("<") + script.count(">") > MAX_OPERATORS:
        return Analysis(syntax_error=True, too_complex=True)
    tree = _parser().parse(script.encode())
    result = Analysis(syntax_error=tree.root_node.has_error)
    for node in _walk(tree.root_node):
        if node.type == "command":
            words: list[str | None] = []
            for child in node.children:
                if child.type == "command_name":
                    words.append(_literal(child.children[0]) if child.children else None)
                elif (
                    child.type
                    in (
                        "word",
                        "string",
                        "raw_string",
                        "concatenation",
                        "number",
                        "simple_expansion",
                        "expansion",
                        "command_substitution",
                    )
                    and words
                ):
                    words.append(_literal(child))
            if words:
                cmd = SimpleCommand(words, node.text.decode(errors="replace"))
                result.commands.append(cmd)
                if cmd.name == "cd":
                    target = words[1] if len(words) > 1 else "/root"
                    result.cds.append((target, node.start_byte))
        elif node.type == "file_redirect":
            op = next((c.type for c in node.children if c.type.startswith((">", "&>", "<>"))), None)
            dest = node.child_by_field_name("destination")
            if op is not None and dest is not None:
                result.redirects.append((op, _literal(dest), node.start_byte))
    return result


def _walk(node) -> Iterator:
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(reversed(cur.children))


def _unwrap(words: list[str | None]) -> list[str | None]:
    """Skip wrappers (``env X=1``, ``timeout 10``, ``xargs -n1``) to the command they run."""
    while words and words[0] in _WRAPPERS:
        rest = words[1:]
        while (
            rest
            and rest[0] is not None
            and (rest[0].startswith("-") or "=" in rest[0] or rest[0].replace(".", "").isdigit())
        ):
            rest = rest[1:]
        words = rest
    return words


def declared_scripts(repo_dir: str | Path) -> frozenset[str]:
    """The console scripts the repository at ``repo_dir`` declares (its entry points in
    setup.py / setup.cfg / pyproject.toml): routed to the executor like
    :data:`~sweworld.sandbox.shims.EXECUTION_COMMANDS` (in the sandbox, the shims' command
    not-found handler hands them over)."""
    from sweworld.tasks.repo_metadata import read_metadata

    return frozenset(read_metadata(repo_dir).console_scripts)


def classify(cmd: SimpleCommand, scripts: Collection[str] = ()) -> str:
    """``real``, ``execution`` or ``refused`` for one simple command; ``scripts``: the
    repository's console scripts (:func:`declared_scripts`), which are execution too."""
    words = _unwrap(cmd.words)
    name = words[0] if words else None
    if name is None:
        return "real"
    base = posixpath.basename(name)
    if base in REFUSED_COMMANDS:
        return "refused"
    if base == "git" and _git_subcommand(words) in _GIT_NETWORK:
        return "refused"
    if base in EXECUTION_COMMANDS or base in scripts:
        return "execution"
    return "real"


def _git_subcommand(words: list[str | None]) -> str | None:
    i = 1
    while i < len(words):
        w = words[i]
        if w in ("-C", "-c", "--git-dir", "--work-tree", "--namespace"):
            i += 2
            continue
        if w is None or not w.startswith("-"):
            return w
        i += 1
    return None


def _outside(path: str, cwd: str | None) -> bool:
    if not path.startswith("/"):
        if cwd is None:
            return False  # unknown working directory: leave it to the sandbox
        path = posixpath.join(cwd, path)
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if any(path == d.rstrip("/") or path.startswith(d) for d in _WRITABLE_DEVICES):
        return False
    return not any(path == root or path.startswith(root + "/") for root in WRITABLE_ROOTS)


def _write_targets(words: list[str | None]) -> list[str]:
    name = posixpath.basename(words[0] or "")
    args = [w for w in words[1:] if w is not None]
    paths = [a for a in args if not a.startswith("-")]
    if name == "dd":
        return [a[3:] for a in args if a.startswith("of=")]
    if name in ("cp", "ln", "install", "rsync"):
        if "-t" in args and args.index("-t") + 1 < len(args):
            return [args[args.index("-t") + 1]]
        return paths[-1:] if len(paths) >= 2 else []
    if name in ("chmod", "chown", "chgrp"):
        return paths[1:]
    if name == "sed":
        if not any(a == "-i" or a.startswith(("-i", "--in-place")) for a in args):
            return []
        return paths[1:]
    if name in _WRITERS:
        return paths
    return []


def find_refusal(script: str, cwd: str = WORKSPACE, *, _depth: int = 0) -> Refusal | None:
    """The first reason to refuse ``script`` (run from ``cwd``), or None if it may run."""
    analysis = analyze(script)
    if analysis.too_complex:
        return Refusal(
            script[:120].splitlines()[0] if script.strip() else script[:120],
            f"it has more than {MAX_OPERATORS} pipes and redirections, too many to check; "
            "split it into smaller commands or write it to a script file",
        )
    cds = sorted(analysis.cds, key=lambda c: c[1])

    def cwd_at(pos: int) -> str | None:
        current: str | None = cwd
        for target, at in cds:
            if at >= pos:
                break
            if target is None or target == "-":
                current = None
            elif current is not None or target.startswith("/"):
                current = posixpath.normpath(posixpath.join(current or "/", target))
        return current

    for cmd in analysis.commands:
        words = _unwrap(cmd.words)
        route = classify(cmd)
        short = cmd.text.strip().splitlines()[0][:120] if cmd.text.strip() else cmd.text
        if route == "refused":
            base = posixpath.basename(words[0] or "")
            if base == "git":
                return Refusal(
                    short,
                    f"`git {_git_subcommand(words)}` needs a network, and the sandbox has none",
                )
            return Refusal(short, f"`{base}`: {REFUSED_COMMANDS[base]}")
        if not words or words[0] is None:
            continue
        base = posixpath.basename(words[0])
        if base in _SHELLS and "-c" in words[1:]:
            idx = words.index("-c", 1)
            inner = words[idx + 1] if idx + 1 < len(words) else None
            if inner and _depth < 3:
                refusal = find_refusal(inner, cwd_at(0) or cwd, _depth=_depth + 1)
                if refusal is not None:
                    return refusal
        here = cwd_at(_command_pos(script, cmd))
        for target in _write_targets(words):
            if _outside(target, here):
                return Refusal(
                    short, f"it writes to {target}, outside the workspace ({WORKSPACE}) and /tmp"
                )
    for op, dest, pos in analysis.redirects:
        if dest is not None and _outside(dest, cwd_at(pos)):
            return Refusal(
                f"{op} {dest}", f"it writes to {dest}, outside the workspace ({WORKSPACE}) and /tmp"
            )
    return None


def _command_pos(script: str, cmd: SimpleCommand) -> int:
    pos = script.encode().find(cmd.text.encode())
    return max(pos, 0)


def routes(script: str, scripts: Collection[str] = ()) -> list[dict[str, str]]:
    """Each simple command with its route, for ``info`` (literal words only); ``scripts``
    as for :func:`classify`."""
    out = []
    for cmd in analyze(script).commands:
        out.append({"command": cmd.text.strip()[:200], "route": classify(cmd, scripts)})
    return out
