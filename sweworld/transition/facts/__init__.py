"""What can be known exactly about an execution command without running it.

The transition model (SWT) predicts what ``python ...``, ``pytest ...`` or ``pip ...`` would
print. Much of that answer can be *computed* from the command and the workspace, the way
Python and pytest themselves would compute it, without executing the agent's code:

- :func:`parse_command`: the kind of command (``python_script``, ``python_c``,
  ``python_module``, ``python_stdin``, ``pytest``, ``pip``, ``version``, ``other``), the
  interpreter flags, the script / ``-c`` code / module, the arguments the program gets, and
  pytest's options and targets, parsed like CPython's and pytest's own parsers do.
- :func:`compute_facts`: the files the command runs (test directories expanded the way
  pytest collects them), script and test files that do not exist (with the exact message
  and exit code), syntax errors (from :func:`compile`, printed the way the interpreter
  prints them), imports of modules that exist nowhere (neither in the workspace, nor in the
  standard library, nor among the installed names the caller gives), the ids
  of the tests pytest would collect (from the AST: ``test*`` functions, ``Test*`` classes,
  ``unittest.TestCase`` subclasses, literal ``@pytest.mark.parametrize`` ids, ``-k``/``-m``
  expressions, node ids, ``--deselect``, ``--ignore``, ini options), and, when the whole
  answer is determined, the :class:`~sweworld.transition.types.Prediction` itself
  (:attr:`Facts.exact`).
- :func:`no_target_hint`: the hint SWE-World gives when a command has nothing to execute.

Nothing here runs the agent's code: sources are parsed with :mod:`ast` and compiled with
:func:`compile` (which never executes them), files are read through a read-only
:class:`~sweworld.transition.types.WorkspaceView`. A few statements are *interpreted* when
that is trivially safe (``print`` of literals, ``sys.exit(<literal>)``, definitions), so that
``python -c "print('hi')"`` or a script whose third import is missing get an exact answer.

Exactness depends on the environment the command would run in, described by
:class:`Environment`, which :func:`compute_facts` takes from the request's task
(:meth:`Environment.for_task`, from :func:`sweworld.tasks.environment.task_environment`):
only what that description states is known. Python's messages change between versions
(``can't open file 'x.py'`` became ``can't open file '/testbed/x.py'`` in 3.9, carets
appeared in 3.11), so interpreter output is only claimed exact when the environment's
``major.minor`` is known and equals the running interpreter's (whose parser and traceback
layout are used); ``python --version`` only when the full version is stated; a module found
nowhere is only certainly missing when the installed set is known (declared dependencies
read statically, not a SWE-bench harness environment); pytest's answers only when its
version is known, and with its session header only when Python, pytest, pluggy and the
plugins are. Otherwise the facts that do hold (the Python version, a syntax error's line
with ``certain=False``) go to the model as context.
"""

from sweworld.transition.facts.collection import collect_pytest
from sweworld.transition.facts.collection import registered_marks as registered_marks
from sweworld.transition.facts.commands import KINDS, CommandInfo, parse_command
from sweworld.transition.facts.compute import compute_facts
from sweworld.transition.facts.environment import DEFAULT_INSTALLED, Environment
from sweworld.transition.facts.hints import NO_TARGET_EXIT_CODE, no_target_hint
from sweworld.transition.facts.imports import Importer, Workspace
from sweworld.transition.facts.keywords import keyword_matches
from sweworld.transition.facts.messages import format_syntax_error
from sweworld.transition.facts.parametrize import parametrize_id
from sweworld.transition.facts.pytest_args import PytestOptions, parse_pytest_args
from sweworld.transition.facts.pytest_render import pytest_header
from sweworld.transition.facts.records import Facts, MissingFile, MissingImport, SyntaxErrorInfo
from sweworld.transition.facts.workspace import declared_dependencies, search_dirs_base

__all__ = [
    "DEFAULT_INSTALLED",
    "KINDS",
    "NO_TARGET_EXIT_CODE",
    "CommandInfo",
    "Environment",
    "Facts",
    "Importer",
    "MissingFile",
    "MissingImport",
    "PytestOptions",
    "SyntaxErrorInfo",
    "Workspace",
    "collect_pytest",
    "compute_facts",
    "declared_dependencies",
    "format_syntax_error",
    "keyword_matches",
    "no_target_hint",
    "parametrize_id",
    "parse_command",
    "parse_pytest_args",
    "pytest_header",
    "search_dirs_base",
]
