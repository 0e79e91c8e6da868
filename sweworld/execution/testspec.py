"""Which tests to run for a task, and how: the SWE-bench harness's test command per repository.

:func:`test_spec` gives the shell command (run from the repository root, ``/testbed``) that
the harness runs to grade a task, the test directives it appends, and the name of the log
parser that reads the output (:data:`sweworld.execution.grading.PARSERS`).

The commands are facts from the harness's ``MAP_REPO_VERSION_TO_SPECS`` (``test_cmd``,
``swebench/harness/constants/python.py``, harness 4.x), encoded below as one default per
repository plus per-version overrides where the harness has them. Repositories outside
SWE-bench (the toy ``sweworld/stockroom``, SWE-Gym/SWE-smith/R2E-Gym repositories) are run
with ``python -m pytest -rA -p no:cacheprovider <test files>``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.grading import parser_name

__all__ = [
    "DJANGO_REPO",
    "NON_TEST_EXTS",
    "SWEBENCH_TEST_COMMANDS",
    "TestSpec",
    "harness_test_command",
    "is_swebench_repo",
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
DJANGO_REPO = "django/django"
_DIFF_HEADER_RE = re.compile(r"diff --git a/.* b/(.*)")

_PYTEST = "pytest -rA"
_ASTROPY_OLD = "pytest -rA -vv -o console_output_style=classic --tb=no"
_DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
_DJANGO_NO_PARALLEL = "./tests/runtests.py --verbosity 2"
_SEABORN = "pytest --no-header -rA"
_SPHINX = "tox --current-env -epy39 -v --"
_SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"


@dataclass(frozen=True)
class _RepoCommands:
    """A repository's test command: ``default`` unless ``overrides`` names the version."""

    default: str
    versions: tuple[str, ...]
    overrides: Mapping[str, str] = field(default_factory=dict)

    def command(self, version: Any) -> str:
        """The command for ``version``; an unknown version gets the latest version's."""
        chosen = _match_version(version, self.versions) or _latest(self.versions)
        return self.overrides.get(chosen, self.default)


def _v(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Harness 4.x MAP_REPO_VERSION_TO_SPECS[repo][version]["test_cmd"], by repository.
SWEBENCH_TEST_COMMANDS: dict[str, _RepoCommands] = {
    "astropy/astropy": _RepoCommands(
        _PYTEST,
        _v("0.1 0.2 0.3 0.4 1.1 1.2 1.3 3.0 3.1 3.2 4.1 4.2 4.3 5.0 5.1 5.2 v5.3"),
        dict.fromkeys(_v("0.1 0.2 0.3 0.4 1.1 1.2 1.3"), _ASTROPY_OLD),
    ),
    DJANGO_REPO: _RepoCommands(
        _DJANGO,
        _v("1.4 1.5 1.6 1.7 1.8 1.9 1.10 1.11 2.0 2.1 2.2 3.0 3.1 3.2 4.0 4.1 4.2 5.0 5.1 5.2"),
        {"1.9": _DJANGO_NO_PARALLEL},
    ),
    "marshmallow-code/marshmallow": _RepoCommands(
        _PYTEST, _v("2.18 2.19 2.20 3.0 3.1 3.2 3.4 3.8 3.9 3.10 3.11 3.12 3.13 3.15 3.16 3.19")
    ),
    "matplotlib/matplotlib": _RepoCommands(
        _PYTEST, _v("1.0 1.1 1.2 1.3 1.4 1.5 2.0 2.1 2.2 3.0 3.1 3.2 3.3 3.4 3.5 3.6 3.7 3.8 3.9")
    ),
    "mwaskom/seaborn": _RepoCommands(_SEABORN, _v("0.11 0.12 0.13 0.14")),
    "pallets/flask": _RepoCommands(_PYTEST, _v("2.0 2.1 2.2 2.3 3.0 3.1")),
    "psf/requests": _RepoCommands(
        _PYTEST,
        _v(
            "0.7 0.8 0.9 0.11 0.13 0.14 1.1 1.2 2.0 2.2 2.3 2.4 2.5 2.7 2.8 2.9 2.10 2.11 2.12"
            " 2.17 2.18 2.19 2.22 2.25 2.26 2.27 2.31 3.0"
        ),
    ),
    "pvlib/pvlib-python": _RepoCommands(_PYTEST, _v("0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9")),
    "pydata/xarray": _RepoCommands(
        _PYTEST, _v("0.12 0.18 0.19 0.20 2022.03 2022.06 2022.09 2023.07 2024.05")
    ),
    "pydicom/pydicom": _RepoCommands(_PYTEST, _v("1.0 1.1 1.2 1.3 1.4 2.0 2.1 2.2 2.3 2.4 3.0")),
    "pylint-dev/astroid": _RepoCommands(
        _PYTEST, _v("2.5 2.6 2.7 2.8 2.9 2.10 2.12 2.13 2.14 2.15 2.16 3.0")
    ),
    "pylint-dev/pylint": _RepoCommands(
        _PYTEST, _v("2.8 2.9 2.10 2.11 2.13 2.14 2.15 2.16 2.17 3.0 3.1 3.2 3.3 4.0")
    ),
    "pytest-dev/pytest": _RepoCommands(
        _PYTEST,
        _v("4.4 4.5 4.6 5.0 5.1 5.2 5.3 5.4 6.0 6.2 6.3 7.0 7.1 7.2 7.4 8.0 8.1 8.2 8.3 8.4"),
    ),
    "pyvista/pyvista": _RepoCommands(_PYTEST, tuple(f"0.{n}" for n in range(20, 44))),
    "scikit-learn/scikit-learn": _RepoCommands(_PYTEST, _v("0.20 0.21 0.22 1.3 1.4 1.5 1.6")),
    "sphinx-doc/sphinx": _RepoCommands(
        _SPHINX,
        _v(
            "1.5 1.6 1.7 1.8 2.0 2.1 2.2 2.3 2.4 3.0 3.1 3.2 3.3 3.4 3.5 4.0 4.1 4.2 4.3 4.4"
            " 4.5 5.0 5.1 5.2 5.3 6.0 6.2 7.0 7.1 7.2 7.3 7.4 8.0 8.1"
        ),
    ),
    "sqlfluff/sqlfluff": _RepoCommands(
        _PYTEST, _v("0.4 0.5 0.6 0.8 0.9 0.10 0.11 0.12 0.13 1.0 1.1 1.2 1.3 1.4 2.0 2.1 2.2")
    ),
    "sympy/sympy": _RepoCommands(
        _SYMPY, _v("0.7 1.0 1.1 1.2 1.4 1.5 1.6 1.7 1.8 1.9 1.10 1.11 1.12 1.13 1.14")
    ),
}
_COMMANDS_BY_LOWER_REPO = {repo.lower(): spec for repo, spec in SWEBENCH_TEST_COMMANDS.items()}


def _version_key(version: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", version)
    return tuple(int(n) for n in numbers)


def _match_version(version: Any, known: tuple[str, ...]) -> str | None:
    if version is None:
        return None
    text = str(version).strip()
    if text in known:
        return text
    key = _version_key(text)
    if not key:
        return None
    return next((k for k in known if _version_key(k) == key), None)


def _latest(versions: tuple[str, ...]) -> str:
    return max(versions, key=_version_key)


def _repo_of(task: Any) -> str:
    value = task.get("repo") if isinstance(task, Mapping) else getattr(task, "repo", "")
    return str(value or "")


def _field(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def is_swebench_repo(repo: str | None) -> bool:
    """Whether the harness has a test command for ``repo`` (``owner/name``)."""
    return bool(repo) and repo.strip().lower() in _COMMANDS_BY_LOWER_REPO


def harness_test_command(repo: str, version: str | None) -> str | None:
    """The harness's ``test_cmd`` for ``repo`` at ``version``, without directives.

    None for a repository the harness has no command for. An unknown (or missing) version
    of a known repository gets the command of the repository's most recent version in the
    harness table (the harness itself would fail with a ``KeyError``).
    """
    spec = _COMMANDS_BY_LOWER_REPO.get((repo or "").strip().lower())
    if spec is None:
        return None
    return spec.command(version)


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
    base = harness_test_command(repo, _field(task, "version"))
    if base is None:
        base = f"{python} -m pytest -rA -p no:cacheprovider"
    return TestSpec(
        command=_join(base, directives),
        directives=directives,
        parser=parser_name(repo),
        test_files=test_files,
    )


test_spec.__test__ = False  # type: ignore[attr-defined]
