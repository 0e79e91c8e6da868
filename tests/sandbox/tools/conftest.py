"""A ToolContext over a temporary sandbox (``/testbed`` and ``/tmp``) with a fake shell."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sweworld.sandbox.paths import SandboxPaths
from sweworld.sandbox.tools import ToolConfig, ToolContext
from sweworld.sandbox.types import BashOutcome


@dataclass
class FakeBash:
    """Returns canned outcomes (the last one repeats) and records the commands."""

    outcomes: list[BashOutcome] = field(default_factory=lambda: [BashOutcome()])
    commands: list[str] = field(default_factory=list)

    def __call__(self, command: str) -> BashOutcome:
        self.commands.append(command)
        if len(self.outcomes) > 1:
            return self.outcomes.pop(0)
        return self.outcomes[0]


@dataclass
class Sandbox:
    root: Path
    testbed: Path
    tmp: Path
    ctx: ToolContext
    bash: FakeBash

    def write(self, rel: str, text: str | bytes) -> Path:
        path = self.testbed / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_bytes(text.encode("utf-8"))
        return path

    def read(self, rel: str) -> str:
        return (self.testbed / rel).read_bytes().decode("utf-8")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    testbed = tmp_path / "merged"
    tmp = tmp_path / "session_tmp"
    testbed.mkdir()
    tmp.mkdir()
    paths = SandboxPaths({"/testbed": testbed, "/tmp": tmp})
    bash = FakeBash()
    ctx = ToolContext(paths=paths, cwd="/testbed", run_bash=bash, config=ToolConfig())
    return Sandbox(root=tmp_path, testbed=testbed, tmp=tmp, ctx=ctx, bash=bash)
