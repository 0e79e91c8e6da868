"""The SWE-bench harness's environment per repository and version, as facts.

For each repository the harness evaluates, and each of its versions: the Python the
harness's environment is built with, the test command (``test_cmd``), the install command
and the pytest version it pins (when it pins one). These are facts read from the harness's
``MAP_REPO_VERSION_TO_SPECS`` (harness 4.x, ``swebench/harness/constants/python.py``),
encoded here as rows of ``(versions, python, test command, install, pytest pin)``, with
the packages the harness pins (``pip_packages``) and its ``pre_install`` commands for the
repositories whose tests depend on them.

:func:`harness_spec` looks a repository and version up. An unknown version of a known
repository is answered with ``matched=False`` and the most recent version's row, so that
callers can keep the (per repository constant) test runner and drop what is per version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DJANGO_REPO",
    "HARNESS_WITHOUT_PYTEST",
    "SWEBENCH_SPECS",
    "HarnessSpec",
    "harness_spec",
    "repo_python",
    "runner_of_command",
]

DJANGO_REPO = "django/django"

PYTEST = "pytest -rA"
ASTROPY_OLD = "pytest -rA -vv -o console_output_style=classic --tb=no"
DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
DJANGO_NO_PARALLEL = "./tests/runtests.py --verbosity 2"
SEABORN = "pytest --no-header -rA"
SPHINX = "tox --current-env -epy39 -v --"
SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"

_PIP_E = "python -m pip install -e ."


@dataclass(frozen=True)
class HarnessSpec:
    """The harness environment of one repository version.

    Attributes:
        version: the harness's version key (``"3.0"``, ``"v5.3"``).
        python: major.minor of the environment's interpreter.
        test_command: the ``test_cmd`` without directives.
        install: the install command run in the environment.
        pytest: the pytest version the environment pins, or None when it is not pinned.
        matched: False when the asked version is not in the table (this is then the row of
            the repository's most recent version, and per-version facts do not hold).
        pip_packages: the packages the harness pins in the environment (``pip_packages``),
            installed before ``install``.
        pre_install: commands the harness runs in ``/testbed`` before ``install``.
        requirements: the repository's requirements files the harness installs first
            (``"packages": "requirements.txt"``; the first one the checkout has).
    """

    version: str
    python: str
    test_command: str
    install: str
    pytest: str | None = None
    matched: bool = True
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()

    def install_commands(self) -> tuple[str, ...]:
        """The harness's recipe as commands run in ``/testbed``: the requirements file,
        then the pinned packages again where a requirements file ran (the harness
        installs them after it), ``pre_install`` and ``install``. Empty without
        ``install``."""
        if not self.install:
            return ()
        commands: list[str] = []
        if self.requirements:
            paths = " ".join(self.requirements)
            commands.append(
                f'for f in {paths}; do if [ -f "$f" ]; then pip install -r "$f"; break; fi; done'
            )
            if self.pip_packages:
                commands.append("pip install " + " ".join(self.pip_packages))
        return (*commands, *self.pre_install, self.install)

    @property
    def test_runner(self) -> str:
        """The runner the test command starts (:func:`runner_of_command`)."""
        return runner_of_command(self.test_command)


def runner_of_command(command: str) -> str:
    """``django`` for runtests.py, ``sympy`` for bin/test, ``pytest`` for pytest (also
    through tox), ``python`` for a bare interpreter, ``unknown`` otherwise."""
    if "runtests.py" in command:
        return "django"
    if "bin/test" in command:
        return "sympy"
    if "pytest" in command or command.startswith("tox "):
        return "pytest"
    if command.strip() in ("python", "python3"):
        return "python"
    return "unknown"


# (versions, python, test command, install, pytest pin), one row per group of versions.
_Row = tuple[str, str, str, str, "str | None"]
_ROWS: dict[str, tuple[_Row, ...]] = {
    "astropy/astropy": (
        (
            "3.0 3.1 3.2 4.1 4.2 4.3 5.0 5.1 5.2",
            "3.9",
            PYTEST,
            _PIP_E + "[test] --verbose",
            "7.4.0",
        ),
        ("v5.3", "3.10", PYTEST, _PIP_E + "[test] --verbose", "7.4.0"),
        ("0.1 0.2 0.3 0.4 1.1 1.2 1.3", "3.6", ASTROPY_OLD, _PIP_E + "[test] --verbose", "3.3.1"),
    ),
    DJANGO_REPO: (
        (
            "1.4 1.5 1.6 1.7 1.8 1.10 1.11 2.0 2.1 2.2",
            "3.5",
            DJANGO,
            "python setup.py install",
            None,
        ),
        ("1.9", "3.5", DJANGO_NO_PARALLEL, "python setup.py install", None),
        ("3.0 3.1 3.2", "3.6", DJANGO, _PIP_E, None),
        ("4.0", "3.8", DJANGO, _PIP_E, None),
        ("4.1 4.2", "3.9", DJANGO, _PIP_E, None),
        ("5.0 5.1 5.2", "3.11", DJANGO, _PIP_E, None),
    ),
    "marshmallow-code/marshmallow": (
        (
            "2.18 2.19 2.20 3.0 3.1 3.2 3.4 3.8 3.9 3.10 3.11 3.12 3.13 3.15 3.16 3.19",
            "3.9",
            PYTEST,
            "python -m pip install -e '.[dev]'",
            None,
        ),
    ),
    "matplotlib/matplotlib": (
        ("3.5 3.6 3.7", "3.11", PYTEST, _PIP_E, None),
        ("3.8 3.9", "3.11", PYTEST, 'python -m pip install --no-build-isolation -e ".[dev]"', None),
        ("3.1 3.2 3.3 3.4", "3.8", PYTEST, _PIP_E, None),
        ("3.0", "3.7", PYTEST, _PIP_E, None),
        (
            "1.0 1.1 1.2 1.3 1.4 1.5 2.0 2.1 2.2",
            "3.5",
            PYTEST,
            "python setup.py build; python setup.py install",
            None,
        ),
    ),
    "mwaskom/seaborn": (
        ("0.11", "3.9", SEABORN, _PIP_E, None),
        ("0.12 0.13 0.14", "3.9", SEABORN, _PIP_E + "[dev]", None),
    ),
    "pallets/flask": (
        ("2.0", "3.9", PYTEST, _PIP_E, None),
        ("2.1", "3.10", PYTEST, _PIP_E, None),
        ("2.2 2.3 3.0 3.1", "3.11", PYTEST, _PIP_E, None),
    ),
    "psf/requests": (
        (
            "0.7 0.8 0.9 0.11 0.13 0.14 1.1 1.2 2.0 2.2 2.3 2.4 2.5 2.7 2.8 2.9 2.10 2.11 2.12"
            " 2.17 2.18 2.19 2.22 2.25 2.26 2.27 2.31 3.0",
            "3.9",
            PYTEST,
            "python -m pip install .",
            None,
        ),
    ),
    "pvlib/pvlib-python": (
        ("0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9", "3.9", PYTEST, _PIP_E + "[all]", None),
    ),
    "pydata/xarray": (
        (
            "0.12 0.18 0.19 0.20 2022.03 2022.06 2022.09 2023.07 2024.05",
            "3.10",
            PYTEST,
            _PIP_E,
            "7.4.0",
        ),
    ),
    "pydicom/pydicom": (
        ("1.0 1.1 1.2 1.3", "3.6", PYTEST, _PIP_E, None),
        ("1.4 2.0", "3.8", PYTEST, _PIP_E, None),
        ("2.1 2.2", "3.9", PYTEST, _PIP_E, None),
        ("2.3", "3.10", PYTEST, _PIP_E, None),
        ("2.4 3.0", "3.11", PYTEST, _PIP_E, None),
    ),
    "pylint-dev/astroid": (
        ("2.5 2.6 2.7 2.8 2.9 2.10 2.12 2.13 2.14 2.15 2.16 3.0", "3.9", PYTEST, _PIP_E, None),
    ),
    "pylint-dev/pylint": (
        (
            "2.8 2.9 2.10 2.11 2.13 2.14 2.15 2.16 2.17 3.0 3.1 3.2 3.3 4.0",
            "3.9",
            PYTEST,
            _PIP_E,
            None,
        ),
    ),
    "pytest-dev/pytest": (
        (
            "4.4 4.5 4.6 5.0 5.1 5.2 5.3 5.4 6.0 6.2 6.3 7.0 7.1 7.2 7.4 8.0 8.1 8.2 8.3 8.4",
            "3.9",
            PYTEST,
            _PIP_E,
            None,
        ),
    ),
    "pyvista/pyvista": ((" ".join(f"0.{n}" for n in range(20, 44)), "3.9", PYTEST, _PIP_E, None),),
    "scikit-learn/scikit-learn": (
        (
            "0.20 0.21 0.22",
            "3.6",
            PYTEST,
            "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
            None,
        ),
        (
            "1.3 1.4 1.5 1.6",
            "3.9",
            PYTEST,
            "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
            None,
        ),
    ),
    "sphinx-doc/sphinx": (
        (
            "1.5 1.6 1.7 1.8 2.0 2.1 2.2 2.3 2.4 3.0 3.1 3.2 3.3 3.4 3.5 4.0 4.1 4.2 4.3 4.4"
            " 4.5 5.0 5.1 5.2 5.3 6.0 6.2 7.0 7.1 7.2 7.3 7.4",
            "3.9",
            SPHINX,
            _PIP_E + "[test]",
            None,
        ),
        ("8.0 8.1", "3.10", SPHINX, _PIP_E + "[test]", None),
    ),
    "sqlfluff/sqlfluff": (
        (
            "0.4 0.5 0.6 0.8 0.9 0.10 0.11 0.12 0.13 1.0 1.1 1.2 1.3 1.4 2.0 2.1 2.2",
            "3.9",
            PYTEST,
            _PIP_E,
            None,
        ),
    ),
    "sympy/sympy": (
        (
            "0.7 1.0 1.1 1.2 1.4 1.5 1.6 1.7 1.8 1.9 1.10 1.11 1.12 1.13 1.14",
            "3.9",
            SYMPY,
            _PIP_E,
            None,
        ),
    ),
    "swe-bench/humaneval": (("1.0", "3.9", "python", "", None),),
}


_PYTEST_OLD = ("atomicwrites==1.4.1", "attrs==23.1.0", "more-itertools==10.1.0")
_PYTEST_6 = ("attrs==23.1.0", "iniconfig==2.0.0")
_SEABORN = (
    "contourpy==1.1.0 cycler==0.11.0 fonttools==4.42.1 importlib-resources==6.0.1 "
    "kiwisolver==1.4.5 matplotlib==3.7.2 numpy==1.25.2 packaging==23.1 {pandas} "
    "pillow==10.0.0 pyparsing==3.0.9 pytest python-dateutil==2.8.2 pytz==2023.3.post1 "
    "scipy==1.11.2 six==1.16.0 tzdata==2023.1 zipp==3.16.2"
)
_FLASK = "setuptools==70.0.0 click==8.1.3 itsdangerous==2.1.2 Jinja2==3.1.2 MarkupSafe==2.1.1"
#: The harness's ``pip_packages`` (versions, packages), for the repositories whose tests
#: depend on them being pinned (pytest's own suite on pluggy, seaborn's on matplotlib).
_PINS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "pytest-dev/pytest": (
        (
            "4.4",
            (*_PYTEST_OLD, "pluggy==0.13.1", "py==1.11.0", "setuptools==68.0.0", "six==1.16.0"),
        ),
        (
            "4.5",
            (
                *_PYTEST_OLD,
                "pluggy==0.11.0",
                "py==1.11.0",
                "setuptools==68.0.0",
                "six==1.16.0",
                "wcwidth==0.2.6",
            ),
        ),
        (
            "4.6",
            (
                *_PYTEST_OLD,
                "packaging==23.1",
                "pluggy==0.13.1",
                "py==1.11.0",
                "six==1.16.0",
                "wcwidth==0.2.6",
            ),
        ),
        (
            "5.0 5.1 5.2",
            (*_PYTEST_OLD, "packaging==23.1", "pluggy==0.13.1", "py==1.11.0", "wcwidth==0.2.6"),
        ),
        (
            "5.3",
            (
                "attrs==23.1.0",
                "more-itertools==10.1.0",
                "packaging==23.1",
                "pluggy==0.13.1",
                "py==1.11.0",
                "wcwidth==0.2.6",
            ),
        ),
        (
            "5.4",
            (
                "py==1.11.0",
                "packaging==23.1",
                "attrs==23.1.0",
                "more-itertools==10.1.0",
                "pluggy==0.13.1",
            ),
        ),
        (
            "6.0",
            (
                *_PYTEST_6,
                "more-itertools==10.1.0",
                "packaging==23.1",
                "pluggy==0.13.1",
                "py==1.11.0",
                "toml==0.10.2",
            ),
        ),
        (
            "6.2 6.3",
            (*_PYTEST_6, "packaging==23.1", "pluggy==0.13.1", "py==1.11.0", "toml==0.10.2"),
        ),
        ("7.0", (*_PYTEST_6, "packaging==23.1", "pluggy==0.13.1", "py==1.11.0")),
        (
            "7.1 7.2",
            (*_PYTEST_6, "packaging==23.1", "pluggy==0.13.1", "py==1.11.0", "tomli==2.0.1"),
        ),
        (
            "7.4 8.0 8.1 8.2 8.3 8.4",
            (
                "iniconfig==2.0.0",
                "packaging==23.1",
                "pluggy==1.3.0",
                "exceptiongroup==1.1.3",
                "tomli==2.0.1",
            ),
        ),
    ),
    "mwaskom/seaborn": (
        ("0.11", tuple(_SEABORN.format(pandas="pandas==1.3.5").split())),
        ("0.12 0.13 0.14", tuple(_SEABORN.format(pandas="pandas==2.0.0").split())),
    ),
    "pallets/flask": (
        (
            "2.0",
            (
                "setuptools==70.0.0",
                "Werkzeug==2.3.7",
                "Jinja2==3.0.1",
                "itsdangerous==2.1.2",
                "click==8.0.1",
                "MarkupSafe==2.1.3",
            ),
        ),
        ("2.1 2.2 2.3 3.0 3.1", (*_FLASK.split(), "Werkzeug==2.3.7")),
    ),
}
#: The harness's ``pre_install`` commands that change only how the project builds.
_PRE_INSTALL = {("pytest-dev/pytest", "6.3"): ("sed -i 's/>=>=/>=/' setup.cfg",)}
#: The harness's requirements files (``MAP_REPO_TO_REQS_PATHS``), for the repositories
#: whose tests need what they pin (flask's tests import pytest 7's ``notset``). Flask's
#: ``tests.txt`` first: the harness's ``dev.txt`` adds the docs' and type checkers' pins,
#: which no test imports, and flask 2.0's installs Sphinx from GitHub (no build here
#: reaches it).
_REQUIREMENTS = {"pallets/flask": ("requirements/tests.txt", "requirements/dev.txt")}


#: Repositories whose harness environment has no pytest: the harness installs SymPy's
#: (conda ``mpmath flake8``, pip ``mpmath``, ``flake8-comprehensions``) and runs
#: ``bin/test``. The recorded agent runs in the shared data agree: in SymPy's environment
#: ``python -m pytest`` ends with "No module named pytest" (exit 1) and ``pytest`` with
#: "command not found" (exit 127), 79 runs in 75 trajectories, except after an agent's own
#: ``pip install pytest``.
HARNESS_WITHOUT_PYTEST = frozenset({"sympy/sympy"})


def _build(repo: str, rows: tuple[_Row, ...]) -> dict[str, HarnessSpec]:
    pins = {v: packages for versions, packages in _PINS.get(repo, ()) for v in versions.split()}
    table: dict[str, HarnessSpec] = {}
    for versions, python, command, install, pytest in rows:
        for version in versions.split():
            table[version] = HarnessSpec(
                version,
                python,
                command,
                install,
                pytest,
                pip_packages=pins.get(version, ()),
                pre_install=_PRE_INSTALL.get((repo, version), ()),
                requirements=_REQUIREMENTS.get(repo, ()),
            )
    return table


# repository (lowercase owner/name) -> harness version -> spec
SWEBENCH_SPECS: Mapping[str, Mapping[str, HarnessSpec]] = {
    repo.lower(): _build(repo, rows) for repo, rows in _ROWS.items()
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def harness_spec(repo: str | None, version: object) -> HarnessSpec | None:
    """The harness environment of ``repo`` at ``version``; None for a repository the
    harness does not have. A version written differently (``5.3`` for ``v5.3``, ``3`` for
    ``3.0`` is not: the numbers must be equal) matches; an unknown or missing version gets
    the most recent version's row with ``matched=False``."""
    table = SWEBENCH_SPECS.get(str(repo or "").strip().lower())
    if not table:
        return None
    if version is not None:
        text = str(version).strip()
        if text in table:
            return table[text]
        key = _version_key(text)
        if key:
            for known, spec in table.items():
                if _version_key(known) == key:
                    return spec
    latest = max(table.values(), key=lambda spec: _version_key(spec.version))
    return HarnessSpec(
        latest.version, latest.python, latest.test_command, latest.install, latest.pytest, False
    )


def repo_python(repo: str | None) -> str | None:
    """The Python of every version of ``repo`` in the harness, when they all use one
    (``sympy/sympy``: 3.9), else None (``django/django``: 3.5 to 3.11, by version)."""
    table = SWEBENCH_SPECS.get(str(repo or "").strip().lower()) or {}
    pythons = {spec.python for spec in table.values()}
    return pythons.pop() if len(pythons) == 1 else None
