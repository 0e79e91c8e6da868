"""The tests a test command runs on a workspace: pytest's collection from the AST.

One function serves the outcome executor (the ids it predicts a status for), the training
data (the ids a real run's labels are completed over) and the benchmarks (the same ids on
the record's state), so all three agree on what a command runs. Another runner's command
(SymPy's ``bin/test``, ``python -m unittest``, Django's ``runtests.py``) is collected through
its pytest equivalent (:func:`~sweworld.transition.outcome.features.pytest_equivalent`).
The task's environment (:meth:`~sweworld.transition.facts.environment.Environment.for_task`)
decides which imports are certainly missing: a SWE-bench environment installs more than a
repository declares, so a test module importing a dependency (``urllib3`` for requests) is
collected, not dropped as an import error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweworld.transition.deadline import StepOverrun
from sweworld.transition.outcome.commands import command_kind_of, pytest_equivalent

__all__ = ["Collected", "collect_tests"]


@dataclass(frozen=True)
class Collected:
    """Selected test ids in run order, how many the selection options left out, and
    whether the collection is known to be exact."""

    ids: list[str]
    deselected: int
    exact: bool
    #: pytest's rootdir and ini-file (sandbox paths; None: no ini-file), and the ini's
    #: testpaths when they stood for the command's arguments (named in the header)
    rootdir: str = "/testbed"
    inifile: str | None = None
    testpaths: tuple[str, ...] = ()
    #: pytest's usage error for a file target that does not exist ("ERROR: file or
    #: directory not found: X", as the release words it), or None
    missing: str | None = None
    #: the ``-r`` letters of the run: the command's, else those of the ini's ``addopts``
    report_chars: str = ""
    #: the ini's ``addopts``, as arguments
    addopts: tuple[str, ...] = ()


def collect_tests(
    view: Any, argv: Sequence[str], cwd: str, task: Any = None, *, limit: int = 5000
) -> Collected | None:
    """What ``argv`` runs on the workspace ``view`` (a
    :class:`~sweworld.transition.types.WorkspaceView`), with ``-k``, ``-m`` and
    ``--deselect`` applied as pytest applies them; None when the command's selection
    cannot be expressed or the layout cannot be read."""
    from sweworld.transition.facts import collect_pytest, parse_command
    from sweworld.transition.facts.environment import Environment
    from sweworld.transition.facts.keywords import select_items
    from sweworld.transition.facts.pytest_args import parse_pytest_args

    equivalent = pytest_equivalent(command_kind_of(argv), argv)
    if equivalent is None:
        return None
    options = parse_command(tuple(equivalent)).pytest
    if options is None:
        return None
    try:
        env = Environment.for_task(task, getattr(view, "root", None))
        collection, config, missing, _ = collect_pytest(view, options, cwd, env)
        selected, deselected, exact = select_items(collection.items, options, cwd, config.rootdir)
    except StepOverrun:  # the step's deadline, not the layout
        raise
    except Exception:  # an unexpected layout only loses the test ids
        return None
    testpaths = config.getlist("testpaths", [])
    addopts = config.getargs("addopts")
    report_chars = options.report_chars or (
        parse_pytest_args(addopts).report_chars if addopts else ""
    )
    return Collected(
        [item.nodeid for item in selected[:limit]],
        len(deselected),
        bool(collection.exact and exact),
        rootdir=config.rootdir,
        inifile=config.inifile,
        testpaths=tuple(testpaths) if not options.targets and cwd == config.rootdir else (),
        missing=missing[0].message if missing and not options.pyargs else None,
        report_chars=report_chars,
        addopts=tuple(addopts),
    )
