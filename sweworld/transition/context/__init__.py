"""The SWT context: what the transition model reads to predict one execution command.

:func:`build_context` gathers, for one :class:`~sweworld.sandbox.executor.ExecutionRequest`
and the session's :class:`~sweworld.transition.types.WorkspaceView`:

* the problem statement, the agent's changes (``git diff`` against the base), the command
  with its working directory, environment variables and stdin;
* the **executed code**: each file the command runs, with its sandbox path and line
  numbers (a script, ``python -c`` code, a heredoc or piped script, a module run with
  ``-m``); pytest and unittest targets resolved to the selected test functions or classes
  (the rest of the file as signatures), a whole test file when a file is targeted, the test
  files of a targeted directory (at most ``max_files``);
* the **related code**: the workspace modules the executed code imports, the conftest files
  of a pytest run and the files the agent changed, as outlines (imports, signatures, first
  docstring lines) whose bodies are filled in while the budget allows: first the
  definitions the agent changed, then those the executed code names, then the rest;
* a short rendering of the computed facts (``sweworld.transition.facts``), the last few
  execution steps of the session, and, in ``oracle`` mode only, the gold patch, the test
  patch and the FAIL_TO_PASS / PASS_TO_PASS lists.

Every field has a token budget (:class:`ContextConfig`) and the fields together a total cap
(shared in proportion to the budgets when the fields would exceed it). Text is cut
deterministically, whole lines only, keeping its head and tail around a marker
``... [N lines cut] ...``; the command line alone, a single line, is cut by characters.
In ``blind`` mode nothing from the gold patch, the test patch, the test lists or
``task.extra`` (which may hold oracle material) is read.

Pure: the same request, workspace, task, history, facts and config give the same context.
"""

from sweworld.models.budget import truncate_lines
from sweworld.transition.context.build import build_context
from sweworld.transition.context.config import (
    CONTEXT_FIELDS,
    CONTEXT_VERSION,
    ORACLE_FIELDS,
    ContextConfig,
    HistoryItem,
    SWTContext,
    approx_tokens,
)
from sweworld.transition.context.config import TokenCounter as TokenCounter

__all__ = [
    "CONTEXT_FIELDS",
    "CONTEXT_VERSION",
    "ORACLE_FIELDS",
    "ContextConfig",
    "HistoryItem",
    "SWTContext",
    "approx_tokens",
    "build_context",
    "truncate_lines",
]
