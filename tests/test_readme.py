"""The README's shell commands, run in order as a new user runs them (issue 22).

Every command of a ```bash block of README.md is either run (in a temporary folder that
holds the clone's ``data/`` and ``examples/``, so relative paths resolve as they do in a
clone and outputs land in the temporary folder) or skipped with a reason listed in
:data:`SKIP`. A command the list does not know is run: a new README command is tested the
day it is written, and a skip rule that matches no command fails the fast test below, so the
list cannot drift from the README.

Commands that read ``../shared/data`` run with that path replaced by the shared data folder
the other tests use (``$SWEWORLD_SHARED_DATA``, which ``.ci/run`` sets, or ``../shared/data``
beside the clone), and skip, saying so, when there is none.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: (regex searched in the command, why it does not run here). First match wins.
SKIP: list[tuple[str, str]] = [
    (r"^apt-get ", "changes the machine's packages (needs root)"),
    (r"^pip install", "installs packages (network; the environment running this test has them)"),
    (r"^python -m pytest", "the test suite itself (this test is part of it)"),
    (r"<mirrors>", "needs a folder of repository mirrors (a placeholder) and hours of replay"),
    (r"--package ", "downloads the library from the package index (network)"),
    (r"<toolz checkout>", "needs a checkout of toolz (a placeholder); the run takes 14 minutes"),
    (r"--max-minutes 58", "a 55-minute training run (the shipped adapters' recipe)"),
    (r"^for t in swt swr", "copies the 55-minute runs' adapters over the shipped ones"),
    (r"localhost:8000|127\.0\.0\.1:8011", "needs a running vLLM server"),
    (r"^(SWEWORLD_VLLM_PYTHON=.*)?sweworld serve ", "starts a server that runs until stopped"),
    (r"^curl ", "needs the world server started by the line before"),
    (r"^sweworld bench render", "rewrites the clone's BENCHMARKS.md (the tests run --check)"),
    (r"^sweworld bench ", "a benchmark: minutes to hours, on a dataset D or Docker"),
]

SHARED = "../shared/data"


def bash_blocks(text: str) -> list[str]:
    """The bodies of the ```bash fenced blocks of ``text``, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def block_commands(block: str) -> list[str]:
    """The commands of a block: backslash continuations joined, comment lines and blank
    lines dropped (a trailing ``# comment`` stays: the shell ignores it)."""
    commands: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.strip()[:-1].strip() + " "
            continue
        commands.append(pending + line.strip())
        pending = ""
    if pending:
        commands.append(pending.strip())
    return commands


def readme_commands() -> list[str]:
    """Every command of the README's bash blocks, in order."""
    return [c for b in bash_blocks(README.read_text(encoding="utf-8")) for c in block_commands(b)]


def skip_reason(command: str, shared: str | None) -> str | None:
    """Why ``command`` is not run here, or None to run it."""
    for pattern, reason in SKIP:
        if re.search(pattern, command):
            return reason
    if SHARED in command and not shared:
        return f"reads {SHARED}: no shared data ($SWEWORLD_SHARED_DATA or ../shared/data)"
    return None


def test_the_readme_has_commands_and_every_skip_rule_is_used() -> None:
    commands = readme_commands()
    assert len(commands) >= 20, commands
    unused = [p for p, _ in SKIP if not any(re.search(p, c) for c in commands)]
    assert not unused, f"skip rules that match no README command (remove them): {unused}"
    ran = [c for c in commands if skip_reason(c, shared="x") is None]
    assert any(c.startswith("sweworld episode ") for c in ran)


def test_the_files_the_readme_commands_use_are_shipped() -> None:
    """Every data/ or examples/ path a README command names exists in the clone (outputs
    the commands write, such as T/ or runs/, are not under these folders)."""
    missing = []
    for command in readme_commands():
        for path in re.findall(r"(?<![\w/.])((?:data|examples)/[\w./-]+)", command):
            if not (ROOT / path).exists():
                missing.append((path, command))
    assert not missing, missing


def test_block_commands_joins_continuations_and_drops_comments() -> None:
    block = "# a comment\nsweworld a \\\n    --b c   # note\n\nsweworld d\n"
    assert block_commands(block) == ["sweworld a --b c   # note", "sweworld d"]


@pytest.mark.slow
def test_readme_commands_run_in_order(tmp_path: Path) -> None:
    """Run the README's commands in order; print what ran (with its time) and what was
    skipped (with why)."""
    shared = str(shared_data_dir()) if shared_data_dir().is_dir() else None
    for name in ("data", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = dict(os.environ)
    # `python` and `sweworld` are this interpreter's (the clone's environment)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("SWEWORLD_REPO_CACHE", None)  # a fresh clone's user has none (import: no replay)
    lines, failures = [], []
    start_all = time.monotonic()
    for command in readme_commands():
        reason = skip_reason(command, shared)
        if reason is not None:
            lines.append(f"skip  {command}\n      ({reason})")
            continue
        if shared:
            command = command.replace(SHARED, shared)
        start = time.monotonic()
        proc = subprocess.run(
            command,
            shell=True,
            executable="/bin/bash",
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        took = time.monotonic() - start
        lines.append(f"ran   {command}  [{took:.1f} s, exit {proc.returncode}]")
        if proc.returncode != 0:
            failures.append(
                f"{command}\n  exit {proc.returncode}\n  stdout: {proc.stdout[-2000:]}\n"
                f"  stderr: {proc.stderr[-3000:]}"
            )
    print("\n".join(lines) + f"\nall: {time.monotonic() - start_all:.0f} s")
    assert not failures, "\n\n".join(failures)
