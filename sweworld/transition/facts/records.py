"""The values :func:`~sweworld.transition.facts.compute_facts` returns: :class:`Facts` and
the missing files, syntax errors and missing imports it lists.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from typing import Any

from sweworld.transition.facts.commands import CommandInfo
from sweworld.transition.types import WORKDIR, Prediction

# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class MissingFile:
    """A script or test path that does not exist, and what the program says about it."""

    path: str
    resolved: str | None
    message: str
    exit_code: int


@dataclass(frozen=True)
class SyntaxErrorInfo:
    """A syntax error in an executed file (or ``-c`` code / stdin, or a module it certainly
    imports): ``text`` is what the running interpreter prints for it (``File "...", line
    N``, the source line, the caret line, the message). ``certain`` is False when the
    environment's Python is another minor version (its grammar may differ)."""

    path: str
    line: int
    offset: int | None
    error_type: str
    message: str
    text: str
    certain: bool = True


@dataclass(frozen=True)
class MissingImport:
    """An import the executed file makes at module level that cannot succeed.

    ``certain`` is True when every statement before it is known to run (so the import is
    reached and fails); ``error`` is the last line Python prints
    (``ModuleNotFoundError: No module named 'x'``).
    """

    file: str
    line: int
    module: str
    error: str
    certain: bool = False


@dataclass(frozen=True)
class Facts:
    """Everything computed about one command (see the module docstring).

    Attributes:
        command: the parsed command.
        cwd: the working directory.
        executed_files: sandbox paths of the files the command runs (the script, the
            module, pytest's test files as pytest would collect them, existing ``.py`` files
            named in a script's arguments).
        missing_files: script / test paths that do not exist (first one decides the answer).
        syntax_errors: syntax errors of executed files.
        missing_imports: module-level imports of executed files that cannot succeed.
        collected_tests: pytest: node ids (relative to ``rootdir``) of the tests that would
            run, after node-id targets, ``-k``, ``-m`` and ``--deselect``; None when not a
            pytest command or unknown.
        collected_total: pytest: items collected before deselection.
        deselected: pytest: items deselected by ``-k`` / ``-m`` / ``--deselect``.
        collection_errors: pytest: rootdir-relative paths of test files whose import fails
            for a certain reason (syntax error, certain missing import).
        collection_exact: pytest: whether ``collected_tests`` is exact (no unknown
            parametrization, inherited tests, plugins, hooks).
        uncertain_files: pytest: test files whose list of tests may be incomplete.
        uncertain_tests: pytest: base ids (``file::Class::test``) whose parametrization ids
            are unknown (their collected ids are guesses).
        rootdir / configfile: pytest's rootdir and ini-file (sandbox paths).
        python_version: the environment's Python version.
        is_pip_install: ``pip install ...`` (answered by the model, not here).
        exact: the whole answer, when it is determined and pays on real data (a script
            that does not exist, a program that does not compile).
        hint: :func:`no_target_hint`'s text when it applies.
        notes: short explanations of approximations, for the model's context.
    """

    command: CommandInfo
    cwd: str = WORKDIR
    executed_files: tuple[str, ...] = ()
    missing_files: tuple[MissingFile, ...] = ()
    syntax_errors: tuple[SyntaxErrorInfo, ...] = ()
    missing_imports: tuple[MissingImport, ...] = ()
    collected_tests: tuple[str, ...] | None = None
    collected_total: int | None = None
    deselected: int = 0
    collection_errors: tuple[str, ...] = ()
    collection_exact: bool = False
    uncertain_files: tuple[str, ...] = ()
    uncertain_tests: tuple[str, ...] = ()
    rootdir: str | None = None
    configfile: str | None = None
    python_version: str | None = None
    is_pip_install: bool = False
    exact: Prediction | None = None
    hint: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.command.kind

    def cwd_relative(self, nodeid: str) -> str:
        """A node id as pytest prints it (relative to the invocation directory)."""
        if not self.rootdir or self.rootdir == self.cwd:
            return nodeid
        path, sep, rest = nodeid.partition("::")
        full = posixpath.normpath(posixpath.join(self.rootdir, path))
        rel = posixpath.relpath(full, self.cwd)
        return rel + sep + rest

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["exact"] = self.exact.to_dict() if self.exact is not None else None
        return out
