"""A scripted executor: fixed answers per command, for tests and demos."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.tasks.loaders import iter_json_lines


@dataclass(frozen=True)
class ScriptedRule:
    """Answer ``result`` to commands equal to ``command`` or matching regex ``pattern``."""

    result: ExecutionResult
    command: str | None = None
    pattern: str | None = None

    def matches(self, command: str) -> bool:
        if self.command is not None:
            return command.strip() == self.command.strip()
        return self.pattern is not None and re.search(self.pattern, command) is not None


class ScriptedExecutor:
    """Answers execution commands from a fixed script of rules, first match wins.

    Rules come from code (:meth:`add`) or a JSON / JSONL file of objects
    ``{"command" | "pattern": ..., "stdout": ..., "stderr": ..., "exit_code": ...}``.
    A command no rule matches gets ``default`` (by default a clear "no scripted output"
    message with exit code 127). Every call is recorded in :attr:`calls`.
    """

    name = "scripted"

    def __init__(
        self,
        rules: Iterable[ScriptedRule | Mapping[str, Any]] = (),
        default: ExecutionResult | None = None,
    ):
        self.rules: list[ScriptedRule] = [self._rule(r) for r in rules]
        self.default = default
        self.calls: list[ExecutionRequest] = []
        self._lock = threading.Lock()

    @staticmethod
    def _rule(rule: ScriptedRule | Mapping[str, Any]) -> ScriptedRule:
        if isinstance(rule, ScriptedRule):
            return rule
        if ("command" in rule) == ("pattern" in rule):
            raise ValueError(f"a scripted rule needs exactly one of 'command' or 'pattern': {rule}")
        result = ExecutionResult(
            stdout=str(rule.get("stdout", "")),
            stderr=str(rule.get("stderr", "")),
            exit_code=int(rule.get("exit_code", 0)),
        )
        return ScriptedRule(result=result, command=rule.get("command"), pattern=rule.get("pattern"))

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedExecutor:
        """Load rules from JSON (a list of rules) or JSONL (one rule per line)."""
        text = Path(path).read_text()
        stripped = text.lstrip()
        if stripped.startswith("["):
            rows = json.loads(text)
        else:
            rows = [row for _, row in iter_json_lines(Path(path), error=ValueError)]
        return cls(rows)

    @classmethod
    def from_spec(cls, arg: str, **kwargs: Any) -> ScriptedExecutor:
        """``scripted:PATH`` in the executor registry: the rule file at ``PATH``."""
        path = Path(arg)
        if not path.is_file():
            raise ValueError(f"scripted executor rules: {arg!r} is not a file")
        return cls.from_file(path)

    def add(
        self,
        result: ExecutionResult | str,
        *,
        command: str | None = None,
        pattern: str | None = None,
        exit_code: int = 0,
    ) -> ScriptedExecutor:
        if isinstance(result, str):
            result = ExecutionResult(stdout=result, exit_code=exit_code)
        self.rules.append(self._rule(ScriptedRule(result=result, command=command, pattern=pattern)))
        return self

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        with self._lock:
            self.calls.append(request)
        command = request.command
        matched = next((rule for rule in self.rules if rule.matches(command)), None)
        answer = matched.result if matched is not None else self.default
        if answer is not None:
            info = {"executor": self.name, "executed": False, "rule": matched is not None}
            return ExecutionResult(answer.stdout, answer.stderr, answer.exit_code, info)
        return ExecutionResult(
            stderr=f"sweworld: scripted executor has no output for `{command}`\n",
            exit_code=127,
            info={"executor": self.name, "executed": False, "rule": False},
        )
