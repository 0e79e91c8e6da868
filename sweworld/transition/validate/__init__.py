"""Checking and repairing what the transition model writes.

- :func:`parse_prediction` reads the ``{stdout, stderr, exit_code[, reasoning]}`` object out
  of a model's text, whatever surrounds it (prose, a code fence, text after it), and repairs
  the usual damage (truncation at the token limit, single quotes, Python literals, trailing
  commas, invalid escapes, an exit code written as a string), saying what it repaired.
- :func:`check_prediction` lists the ways a prediction contradicts itself or the
  :class:`~sweworld.transition.facts.Facts` computed for the command: a traceback at the end
  of stderr with exit code 0, a pytest summary that disagrees with the exit code or with the
  number of tests pytest would collect, test ids that do not exist, tracebacks that name
  files or lines that do not exist, ``No module named 'x'`` for a module the workspace has,
  exit codes outside 0..255, outputs longer than a bound. Every check stays silent when the
  information it needs is missing (no workspace view, collection not exact, ...), so that a
  real, consistent output is not flagged: the tests measure this on real outputs.
- :func:`conservative_prediction`: the answer when the model keeps failing validation.
"""

from sweworld.transition.validate.checks import MAX_OUTPUT_CHARS, Issue, check_prediction
from sweworld.transition.validate.fallback import (
    FALLBACK_EXIT_CODE,
    FALLBACK_MARKER,
    conservative_prediction,
)
from sweworld.transition.validate.parsing import MAX_ANSWER_CHARS, parse_prediction
from sweworld.transition.validate.pytest_output import PytestSummary, parse_pytest_summary

__all__ = [
    "FALLBACK_EXIT_CODE",
    "FALLBACK_MARKER",
    "MAX_ANSWER_CHARS",
    "MAX_OUTPUT_CHARS",
    "Issue",
    "PytestSummary",
    "check_prediction",
    "conservative_prediction",
    "parse_prediction",
    "parse_pytest_summary",
]
