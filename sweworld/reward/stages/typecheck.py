"""The type-check stage: type errors a candidate introduces, by mypy, without the repository.

Every changed Python file whose whole text is known is written twice into a temporary
folder, ``swr_before/<path>`` and ``swr_after/<path>`` (path components that are not
Python identifiers are renamed), and ONE ``python -m mypy`` run checks both sides with
``--explicit-package-bases`` (so the two copies are distinct modules, ``swr_before.pkg.mod``
and ``swr_after.pkg.mod``), ``--follow-imports=skip --ignore-missing-imports
--no-site-packages`` (nothing outside the changed files is read: the repository's
dependencies are not needed, and every import is ``Any``), an empty config file, and a
persistent private cache (typeshed's stubs are parsed once; later runs take ~0.6 s).

Only errors the patch introduces count. Errors are compared as multisets, first by
``(file, code, message)`` with line numbers and the ``swr_*`` prefixes normalised, then
what is left by ``(file, code, message with quoted text blanked)`` (so renaming a name that
already had an error does not count as a new error). Missing-import errors, and errors
about the temporary package structure (``Module "swr_after.pkg" has no attribute``), are
ignored. Files whose old or new text does not parse are left out (the syntax stage owns
them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import keyword
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import sweworld.pyast as pyast
from sweworld.reward.types import CandidateView, ChangedFile, RewardContext, StageResult

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

__all__ = ["MypyError", "TypecheckStage", "introduced_errors", "parse_mypy_output"]

SIDES = ("swr_before", "swr_after")
IGNORED_CODES = frozenset({"import", "import-not-found", "import-untyped"})
_IGNORED_MESSAGES = (
    "Cannot find implementation or library stub",
    "Library stubs not installed",
    "Skipping analyzing",
    "Duplicate module named",
)
_OWN_MODULE_RE = re.compile(r'Module "swr_(?:before|after)(?:\.[\w.]*)?" has no attribute')
_LINE_RE = re.compile(
    r"^(?P<file>[^:\n]+?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>error|note|warning): "
    r"(?P<msg>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
_SIDE_PREFIX_RE = re.compile(r"\bswr_(?:before|after)\.")
_LINE_NO_RE = re.compile(r"\b(lines?) \d+(?:-\d+)?")
_QUOTED_RE = re.compile(r'"[^"]*"')


@dataclass(frozen=True)
class MypyError:
    """One mypy error, mapped back to the repository path."""

    side: str  # "before" | "after"
    file: str
    line: int
    code: str
    message: str

    @property
    def key(self) -> tuple[str, str, str]:
        """(file, code, message with line numbers and temporary module names normalised)."""
        message = _SIDE_PREFIX_RE.sub("", self.message)
        return self.file, self.code, _LINE_NO_RE.sub(r"\1 N", message)

    @property
    def loose_key(self) -> tuple[str, str, str]:
        """:attr:`key` with quoted text blanked."""
        file, code, message = self.key
        return file, code, _QUOTED_RE.sub('"…"', message)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "code": self.code, "message": self.message}


def _identifier(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    if keyword.iskeyword(out) or out in SIDES:
        out += "_"
    return out


def module_layout(paths: list[str]) -> dict[str, str]:
    """Repository path -> a relative path whose every component is an identifier (unique,
    extension kept), so that mypy derives a valid, distinct module name for each file."""
    layout: dict[str, str] = {}
    taken: set[str] = set()
    for path in paths:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        name = parts[-1]
        stem, dot, ext = name.rpartition(".")
        if not dot:
            stem, ext = name, "py"
        dirs = [_identifier(p) for p in parts[:-1]]
        base = stem if stem == "__init__" else _identifier(stem)
        candidate, n = base, 1
        while "/".join([*dirs, candidate]).lower() in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add("/".join([*dirs, candidate]).lower())
        layout[path] = "/".join([*dirs, f"{candidate}.{ext}"])
    return layout


def parse_mypy_output(output: str, reverse: dict[str, tuple[str, str]]) -> list[MypyError]:
    """The ``error`` lines of mypy's output whose file is in ``reverse`` (temporary path
    -> (side, repository path)); notes and lines about other files are dropped."""
    errors: list[MypyError] = []
    for raw in output.splitlines():
        match = _LINE_RE.match(raw.rstrip())
        if not match or match.group("sev") != "error":
            continue
        where = reverse.get(match.group("file").replace("\\", "/"))
        if where is None:
            continue
        side, path = where
        errors.append(
            MypyError(
                side=side,
                file=path,
                line=int(match.group("line")),
                code=match.group("code") or "",
                message=match.group("msg"),
            )
        )
    return errors


def _ignored(error: MypyError) -> bool:
    return (
        error.code in IGNORED_CODES
        or any(m in error.message for m in _IGNORED_MESSAGES)
        or bool(_OWN_MODULE_RE.search(error.message))
    )


def introduced_errors(before: list[MypyError], after: list[MypyError]) -> list[MypyError]:
    """The errors of ``after`` not matched by an error of ``before`` (multisets; exact keys
    first, then loose keys among what is left)."""
    exact = Counter(e.key for e in before)
    leftover_after: list[MypyError] = []
    for error in after:
        if exact[error.key] > 0:
            exact[error.key] -= 1
        else:
            leftover_after.append(error)
    loose: Counter[tuple[str, str, str]] = Counter()
    for error in before:
        if exact[error.key] > 0:  # not consumed by an exact match
            exact[error.key] -= 1
            loose[error.loose_key] += 1
    out: list[MypyError] = []
    for error in leftover_after:
        if loose[error.loose_key] > 0:
            loose[error.loose_key] -= 1
        else:
            out.append(error)
    return out


def _parses(text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pyast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


@lru_cache(maxsize=1)
def _mypy_min_version() -> tuple[int, int]:
    try:
        from mypy import defaults

        return tuple(defaults.PYTHON3_VERSION_MIN)[:2]  # type: ignore[return-value]
    except Exception:
        return (3, 8)


def _version_arg(value: str | tuple[int, int] | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        major, _, minor = value.strip().partition(".")
        version = (int(major), int(minor.split(".")[0] or 0))
    else:
        version = (int(value[0]), int(value[1]))
    version = max(version, _mypy_min_version())
    return f"{version[0]}.{version[1]}"


def _default_cache_dir() -> Path:
    from sweworld.dirs import cache_dir

    return cache_dir() / "mypy"


class TypecheckStage:
    """Counts the mypy errors a candidate introduces; ``fail`` (no short circuit, score
    None) when there is at least one, ``pass`` when none, ``skip`` when there is nothing to
    check (no Python file with whole text, mypy not installed) and ``error`` on timeout.

    Args:
        timeout_s: wall-clock limit of the mypy run (the process group is killed).
        python_version: ``--python-version`` (raised to mypy's minimum when older); None:
            the running interpreter.
        check_untyped_defs: pass ``--check-untyped-defs``.
        cache_dir: mypy's cache (None: ``<sweworld cache>/mypy``).
        extra_args: more mypy arguments.
    """

    name = "typecheck"

    def __init__(
        self,
        timeout_s: float = 30.0,
        python_version: str | tuple[int, int] | None = None,
        *,
        check_untyped_defs: bool = False,
        cache_dir: str | Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.timeout_s = timeout_s
        self.python_version = python_version
        self.check_untyped_defs = check_untyped_defs
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.extra_args = tuple(extra_args)

    def run(self, ctx: RewardContext) -> StageResult:
        """Type-check ``ctx.candidate``; never raises."""
        start = time.perf_counter()
        try:
            result = self._run(ctx.candidate, ctx.time_left(self.timeout_s))
        except Exception as exc:
            logger.debug("typecheck stage failed", exc_info=True)
            result = StageResult(self.name, "error", message=f"{type(exc).__name__}: {exc}")
        result.latency_s = time.perf_counter() - start
        return result

    # ------------------------------------------------------------------ internals

    def _run(self, view: CandidateView, timeout_s: float) -> StageResult:
        if view.parse_error:
            return StageResult(self.name, "skip", message="the patch does not parse")
        if view.empty:
            return StageResult(self.name, "skip", message="empty candidate")
        python = [f for f in view.files if f.is_python and f.status != "deleted"]
        if not python:
            return StageResult(self.name, "skip", message="no Python file changed")
        files: list[ChangedFile] = []
        unchecked: list[dict[str, str]] = []
        deadline = time.monotonic() + timeout_s
        for changed in python:
            if time.monotonic() >= deadline:  # parsing is not interruptible: between files
                return StageResult(
                    self.name,
                    "error",
                    message=f"the deadline ({timeout_s:.3g} s) passed while reading the files",
                    evidence={"timeout_s": timeout_s},
                )
            reason = _unusable(changed)
            if reason:
                unchecked.append({"file": changed.path, "reason": reason})
            else:
                files.append(changed)
        evidence: dict[str, Any] = {"scope": view.scope, "unchecked": unchecked}
        if not files:
            return StageResult(
                self.name,
                "skip",
                message="no Python file with whole text to check"
                + (" (scope hunks)" if view.scope == "hunks" else ""),
                evidence=evidence,
            )
        if importlib.util.find_spec("mypy") is None:
            return StageResult(self.name, "skip", message="mypy is not installed")
        outcome = self._mypy(files, max(deadline - time.monotonic(), 0.0))
        if isinstance(outcome, StageResult):
            outcome.evidence.update(evidence)
            return outcome
        before, after, ignored = outcome
        introduced = introduced_errors(before, after)
        evidence.update(
            checked=[f.path for f in files],
            introduced=[e.to_dict() for e in introduced],
            before_errors=len(before),
            after_errors=len(after),
            ignored=ignored,
        )
        if not introduced:
            return StageResult(
                self.name,
                "pass",
                message=f"no type error introduced in {len(files)} file(s)",
                evidence=evidence,
            )
        first = introduced[0]
        return StageResult(
            self.name,
            "fail",
            message=f"{len(introduced)} type error(s) introduced; first: "
            f"{first.file}:{first.line}: {first.message} [{first.code}]",
            evidence=evidence,
        )

    def _command(self, cache: Path | None) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--ignore-missing-imports",
            "--follow-imports=skip",
            "--no-site-packages",
            "--explicit-package-bases",
            "--no-error-summary",
            "--show-error-codes",
            "--no-pretty",
            "--no-color-output",
            "--hide-error-context",
        ]
        argv += ["--cache-dir", str(cache)] if cache is not None else ["--no-incremental"]
        version = _version_arg(self.python_version)
        if version:
            argv += ["--python-version", version]
        if self.check_untyped_defs:
            argv.append("--check-untyped-defs")
        return argv + list(self.extra_args)

    def _mypy(
        self, files: list[ChangedFile], timeout_s: float
    ) -> tuple[list[MypyError], list[MypyError], int] | StageResult:
        layout = module_layout([f.path for f in files])
        cache: Path | None = self.cache_dir or _default_cache_dir()
        try:
            assert cache is not None
            cache.mkdir(parents=True, exist_ok=True)
        except OSError:
            cache = None
        with tempfile.TemporaryDirectory(prefix="swr-mypy-") as tmp:
            root = Path(tmp)
            (root / "mypy.ini").write_text("[mypy]\n", encoding="utf-8")
            reverse: dict[str, tuple[str, str]] = {}
            targets: list[str] = []
            for changed in files:
                for side, text in zip(SIDES, (changed.before, changed.after), strict=True):
                    if text is None:
                        continue
                    rel = f"{side}/{layout[changed.path]}"
                    dest = root / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(text, encoding="utf-8", errors="surrogateescape")
                    reverse[rel] = (side.removeprefix("swr_"), changed.path)
                    targets.append(rel)
            outcome = self._execute(self._command(cache) + targets, root, timeout_s)
        if isinstance(outcome, StageResult):
            return outcome
        returncode, output = outcome
        errors = parse_mypy_output(output, reverse)
        if returncode not in (0, 1) or (returncode == 1 and not errors and output.strip()):
            return StageResult(
                self.name,
                "error",
                message=f"mypy exited with {returncode}",
                evidence={"output_tail": output[-2000:]},
            )
        kept = [e for e in errors if not _ignored(e)]
        before = [e for e in kept if e.side == "before"]
        after = [e for e in kept if e.side == "after"]
        return before, after, len(errors) - len(kept)

    def _execute(
        self, argv: list[str], cwd: Path, timeout_s: float
    ) -> tuple[int, str] | StageResult:
        """Run mypy in a process group of its own, killed whole at ``timeout_s`` (the
        stage's limit, or what is left of the reward's deadline)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MYPY")}
        env["NO_COLOR"] = "1"
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return StageResult(self.name, "error", message=f"cannot start mypy: {exc}")
        try:
            stdout, _ = proc.communicate(timeout=max(timeout_s, 0.001))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return StageResult(
                self.name,
                "error",
                message=f"mypy timed out after {timeout_s:.3g} s and was killed",
                evidence={"timeout_s": timeout_s},
            )
        except BaseException:
            _kill_group(proc)
            raise
        return proc.returncode, stdout.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except Exception:
        proc.kill()


def _unusable(changed: ChangedFile) -> str | None:
    """Why a file cannot be type-checked, or None."""
    if changed.error:
        return changed.error
    if changed.after is None:
        return "whole text unknown (hunks only)"
    if changed.status == "added":
        # Every error of a new file would count as "introduced", including the strictness
        # errors (missing annotations) that mypy raises on any unannotated module; agents'
        # new files are mostly scratch scripts and tests. Only existing code is compared.
        return "new file (only changes to existing files are compared)"
    if changed.before is None:
        return "old text unknown"
    if not _parses(changed.after):
        return "new text does not parse"
    if changed.before is not None and not _parses(changed.before):
        return "old text does not parse"
    return None
