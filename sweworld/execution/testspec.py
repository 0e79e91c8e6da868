"""Which tests to run for a task, and how: the SWE-bench harness's test command per repository.

:func:`test_spec` gives the shell command (run from the repository root, ``/testbed``) that
the harness runs to grade a task, the test directives it appends, and the name of the log
parser that reads the output (:data:`sweworld.execution.grading.PARSERS`).

The command is the task's environment description's (:func:`sweworld.tasks.environment.
task_environment`): the task row's own ``test_cmd`` when it has one, else the harness's
``test_cmd`` for SWE-bench repositories (:mod:`sweworld.tasks.swebench_specs`, harness 4.x),
else ``python -m pytest -rA -p no:cacheprovider <test files>`` (the toy
``sweworld/stockroom``, SWE-Gym/SWE-smith/R2E-Gym repositories).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweworld.execution.grading import parser_name
from sweworld.tasks.environment import task_environment
from sweworld.tasks.swebench_specs import (
    DJANGO_REPO,
    SWEBENCH_SPECS,
)

__all__ = [
    "DJANGO_REPO",
    "NON_TEST_EXTS",
    "SWEBENCH_TEST_COMMANDS",
    "TestSpec",
    "test_directives",
    "test_spec",
]

# The harness's NON_TEST_EXTS, as written there ("csv" has no dot: any name ending in csv).
NON_TEST_EXTS: tuple[str, ...] = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)
_DIFF_HEADER_RE = re.compile(r"diff --git a/.* b/(.*)")

# Harness 4.x MAP_REPO_VERSION_TO_SPECS[repo][version]["test_cmd"]: repository -> version ->
# command, read from the one environment table (sweworld.tasks.swebench_specs).
SWEBENCH_TEST_COMMANDS: dict[str, dict[str, str]] = {
    repo: {version: spec.test_command for version, spec in versions.items()}
    for repo, versions in SWEBENCH_SPECS.items()
}


def _field(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def _repo_of(task: Any) -> str:
    return str(_field(task, "repo") or "")


def test_directives(task: Any) -> list[str]:
    """What the harness appends to the test command: SWE-bench's ``get_test_directives``.

    The files named by the ``diff --git a/... b/<path>`` headers of ``task.test_patch``, in
    order (duplicates kept), without those ending in one of :data:`NON_TEST_EXTS`. For
    Django each path becomes a test label: ``.py`` and a leading ``tests/`` removed,
    ``/`` turned into ``.`` (``tests/auth_tests/test_validators.py`` ->
    ``auth_tests.test_validators``). Every file is kept, ``tests/x/models.py`` included
    (harness 4.x; later revisions drop Django files that are not test modules).
    """
    repo = _repo_of(task)
    if repo == "swe-bench/humaneval":
        return ["test.py"]
    test_patch = str(_field(task, "test_patch") or "")
    directives = [
        path for path in _DIFF_HEADER_RE.findall(test_patch) if not path.endswith(NON_TEST_EXTS)
    ]
    if repo.lower() == DJANGO_REPO:
        labels = []
        for path in directives:
            label = path.removesuffix(".py")
            label = label.removeprefix("tests/")
            labels.append(label.replace("/", "."))
        directives = labels
    return directives


test_directives.__test__ = False  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TestSpec:
    """How to run a task's tests.

    Attributes:
        command: shell command run from the repository root (``/testbed``).
        directives: the test arguments at the end of ``command``.
        parser: name of the log parser for the output (a key of
            :data:`sweworld.execution.grading.PARSERS`; pass it to ``parse_log(parser=...)``).
        test_files: files touched by the task's ``test_patch``.
    """

    __test__ = False  # not a pytest test class

    command: str
    directives: list[str]
    parser: str
    test_files: list[str]


def _join(base: str, directives: list[str]) -> str:
    return " ".join([base, *(shlex.quote(d) for d in directives)])


def test_spec(task: Any, *, python: str = "python") -> TestSpec:
    """The test command, directives and log parser for ``task``.

    For a SWE-bench repository (:data:`SWEBENCH_TEST_COMMANDS`: astropy, django,
    marshmallow, matplotlib, seaborn, flask, requests, pvlib, xarray, pydicom, astroid,
    pylint, pytest, pyvista, scikit-learn, sphinx, sqlfluff, sympy) the harness's
    ``test_cmd`` for the task's version followed by :func:`test_directives`, exactly as the
    harness's eval script writes it (``./tests/runtests.py --verbosity 2
    --settings=test_sqlite --parallel 1 auth_tests.test_validators``). A version the harness
    does not list (or none) gets the command of the repository's most recent version.

    Any other repository: ``<python> -m pytest -rA -p no:cacheprovider <test files>`` with
    ``python`` inserted as given and the test files of ``test_patch`` (non-test extensions
    removed); no test files: the whole suite.

    Directives are shell-quoted (a no-op for ordinary paths and labels).
    """
    repo = _repo_of(task)
    directives = test_directives(task)
    files_in_test_patch = getattr(task, "test_files", None)
    if callable(files_in_test_patch):
        test_files = list(files_in_test_patch())
    else:
        test_files = _DIFF_HEADER_RE.findall(str(_field(task, "test_patch") or ""))
    base = task_environment(task).test_command
    if base is None:
        base = f"{python} -m pytest -rA -p no:cacheprovider"
    return TestSpec(
        command=_join(base, directives),
        directives=directives,
        parser=parser_name(repo),
        test_files=test_files,
    )


test_spec.__test__ = False  # type: ignore[attr-defined]
