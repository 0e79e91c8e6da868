"""The problem statement's reported exception."""

from __future__ import annotations

from sweworld.transition.outcome.priors import reported_exception


def test_the_exception_the_issue_names_most() -> None:
    statement = (
        "Calling f() raises ValueError.\n\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\nValueError: bad\n\n'
        "I expected a TypeError instead."
    )
    assert reported_exception({"problem_statement": statement}) == "ValueError"
    # equals: the first named; warnings and library exceptions count
    tie = "A DeprecationWarning, then an IDNAError."
    assert reported_exception({"problem_statement": tie}) == "DeprecationWarning"
    assert reported_exception({"problem_statement": "it prints the wrong value"}) is None
    assert reported_exception({}) is None and reported_exception(None) is None
    # words that only end like an exception's name are not one (a lower-case start), nor
    # is a "name" longer than 80 characters
    assert reported_exception({"problem_statement": "the valueError is odd"}) is None
    huge = "A" * 150_000 + "Error, then a KeyError"
    assert reported_exception({"problem_statement": huge}) == "KeyError"


def test_a_huge_statement_is_read_up_to_a_bound() -> None:
    """Names past the first 200,000 characters are not read (two TypeErrors there)."""
    statement = "KeyError " + "x" * 5_000_000 + " TypeError TypeError"
    assert reported_exception({"problem_statement": statement}) == "KeyError"
