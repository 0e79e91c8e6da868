"""What can be known exactly about an execution command without running it.

The outcome world (:mod:`sweworld.transition.outcome`) and the LM route
(:mod:`sweworld.transition.simulated`) both start from what the command and the workspace
determine, computed the way Python and pytest themselves would, without executing the
agent's code:

- :func:`parse_command`: the kind of command (``python_script``, ``python_c``,
  ``python_module``, ``python_stdin``, ``pytest``, ``pip``, ``version``, ``other``), the
  interpreter flags, the script / ``-c`` code / module, the arguments the program gets, and
  pytest's options and targets, parsed like CPython's and pytest's own parsers do.
- :func:`collect_pytest`: the ids of the tests pytest would collect (from the AST:
  ``test*`` functions, ``Test*`` classes, ``unittest.TestCase`` subclasses, literal
  ``@pytest.mark.parametrize`` ids, node ids, ``--ignore``, ini options, conftest files),
  and the test files that cannot be imported.
- :func:`format_syntax_error`: a syntax error printed the way the interpreter prints it.
- :func:`compute_facts` (the LM route's context and validation, and recorded SWT
  contexts): the files the command runs, script and test files that do not exist, syntax
  errors, imports that certainly fail, the tests selected (``-k``/``-m``/``--deselect``).
- :func:`no_target_hint`: the hint SWE-World gives when a command has nothing to execute.

Exact answers are kept only where they pay on real data (measured on 3,353 real execution
steps in the task's own environment, ``sweworld bench facts-payoff``): a script that does not
exist (its message depends only on the Python version) and a program that does not compile
(when the environment's Python is the running one's minor version). Everything else
(``python --version``, interpreter usage errors, ``python -m`` messages, a small program's
printed output, pytest's "no tests ran" and "file not found" outputs) was emulated once and
settled nothing in the task's environment; those commands are answered by the model, and
what was computed about them stays a fact.

Nothing here runs the agent's code: sources are parsed with :mod:`ast` and compiled with
:func:`compile` (which never executes them), files are read through a read-only
:class:`~sweworld.transition.types.WorkspaceView`. The top level of modules is *interpreted*
as far as it is trivially safe (imports, definitions, literals) to find imports that
certainly fail.

What holds depends on the environment the command would run in, described by
:class:`Environment` (:meth:`Environment.for_task`, from
:func:`sweworld.tasks.environment.task_environment`): a module found nowhere is only
certainly missing when the installed set is known, and a syntax error is only certain when
the environment's ``major.minor`` is the running interpreter's.
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
    "search_dirs_base",
]
