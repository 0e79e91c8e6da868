"""Rendering test logs: what a runner would print for ``{test id: status}``.

The simulated path writes its logs with :func:`render_pytest_log` (or :func:`render_log` for
the repository's own runner format); the harness's parsers
(:mod:`sweworld.execution.log_parsers`) read them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from sweworld.execution.log_parsers import TestStatus, parser_name

__all__ = [
    "render_django_log",
    "render_log",
    "render_pytest_log",
    "render_sympy_log",
    "statuses_from_tests_status",
]

_STATUS_WORDS: tuple[str, ...] = tuple(s.value for s in TestStatus)


def _status_value(status: Any) -> str:
    return status.value if isinstance(status, Enum) else str(status)


_PYTEST_SUMMARY_ORDER = ("PASSED", "SKIPPED", "XFAIL", "XPASS", "ERROR", "FAILED")
# (status, word in the final line) in the order pytest prints the counts.
_PYTEST_COUNT_ORDER = (
    ("FAILED", "failed"),
    ("PASSED", "passed"),
    ("SKIPPED", "skipped"),
    ("XFAIL", "xfailed"),
    ("XPASS", "xpassed"),
    ("ERROR", "error"),
)
_RENDERABLE = frozenset((*_STATUS_WORDS, "XPASS"))


def _checked(statuses: Mapping[str, Any]) -> list[tuple[str, str]]:
    items = []
    for test, status in statuses.items():
        value = _status_value(status).upper()
        if value not in _RENDERABLE:
            raise ValueError(f"cannot render status {status!r} of {test!r}")
        items.append((str(test), value))
    return items


def _banner(text: str, fill: str = "=", width: int = 80) -> str:
    text = f" {text} " if text else ""
    left = max(2, (width - len(text)) // 2)
    right = max(2, width - len(text) - left)
    return f"{fill * left}{text}{fill * right}"


def render_pytest_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """A ``pytest -rA`` style log reporting ``statuses`` (``{test id: status}``).

    A session header, a ``short test summary info`` section with one ``STATUS <id>`` line
    per test (grouped in pytest's order: PASSED, SKIPPED, XFAIL, XPASS, ERROR, FAILED;
    ids in the given order within a group) and the final ``=== 2 failed, 3 passed in
    0.01s ===`` line. :func:`parse_pytest_log` (and every pytest-family parser) reads it
    back to the same statuses, for ids without whitespace. Ids containing whitespace
    (Django's ``test_x (module.Class)``) cannot survive any pytest-style log, because the
    harness cuts ids at the first space: use :func:`render_log` with the repository.

    ``XPASS`` can be rendered but, as in the harness, is not read back (missing = failed).
    A real ``pytest -rA`` names a skipped test only by location (``SKIPPED [1] t.py:3:``),
    so the harness never sees a SKIPPED id there; here SKIPPED is rendered with its id so
    that the predicted statuses round-trip.
    """
    items = _checked(statuses)
    lines = [_banner("test session starts"), f"collected {len(items)} items", ""]
    if items:
        lines.append(_banner("short test summary info"))
        for group in _PYTEST_SUMMARY_ORDER:
            lines.extend(f"{status} {test}" for test, status in items if status == group)
    counts = {status: 0 for status, _ in _PYTEST_COUNT_ORDER}
    for _, status in items:
        counts[status] += 1
    parts = []
    for status, word in _PYTEST_COUNT_ORDER:
        n = counts[status]
        if n:
            parts.append(f"{n} {word}{'s' if status == 'ERROR' and n > 1 else ''}")
    summary = ", ".join(parts) if parts else "no tests ran"
    lines.append(_banner(f"{summary} in {duration:.2f}s"))
    return "\n".join(lines) + "\n"


_DJANGO_WORDS = {
    "PASSED": "ok",
    "FAILED": "FAIL",
    "ERROR": "ERROR",
    "SKIPPED": "skipped 'skipped'",
    "XFAIL": "expected failure",
    "XPASS": "unexpected success",
}


def render_django_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """The output of Django's ``runtests.py --verbosity 2`` reporting ``statuses``.

    One ``<test> ... ok|FAIL|ERROR|skipped '...'`` line per test, then Django's ``Ran N
    tests`` footer. :func:`parse_django_log` reads it back; XFAIL/XPASS are rendered the way
    unittest prints them (``expected failure``, ``unexpected success``), which the harness
    does not read (they come back missing).
    """
    items = _checked(statuses)
    lines = [
        "Testing against Django installed in '/testbed/django'",
        "System check identified no issues (0 silenced).",
    ]
    lines.extend(f"{test} ... {_DJANGO_WORDS[status]}" for test, status in items)
    counts = {s: sum(1 for _, v in items if v == s) for s in _RENDERABLE}
    lines += ["", "-" * 70, f"Ran {len(items)} tests in {duration:.3f}s", ""]
    details = [
        f"{label}={counts[s]}"
        for s, label in (
            ("FAILED", "failures"),
            ("ERROR", "errors"),
            ("SKIPPED", "skipped"),
            ("XFAIL", "expected failures"),
            ("XPASS", "unexpected successes"),
        )
        if counts[s]
    ]
    failed = counts["FAILED"] or counts["ERROR"] or counts["XPASS"]
    verdict = "FAILED" if failed else "OK"
    lines.append(f"{verdict} ({', '.join(details)})" if details else verdict)
    return "\n".join(lines) + "\n"


_SYMPY_WORDS = {
    "PASSED": "ok",
    "FAILED": "F",
    "ERROR": "E",
    "SKIPPED": "s",
    "XFAIL": "f",
    "XPASS": "X",
}


def render_sympy_log(statuses: Mapping[str, Any], *, duration: float = 0.01) -> str:
    """The output of SymPy's ``bin/test -C --verbose`` reporting ``statuses``.

    One ``<test> ok|F|E|s|f|X`` line per test; a FAILED id of the form ``path.py:name``
    is rendered as a failure header. :func:`parse_sympy_log` reads PASSED, FAILED and ERROR
    back (for ids starting with ``test_``); skips and expected failures come back missing,
    as in the harness.
    """
    items = _checked(statuses)
    lines = [_banner("test process starts"), ""]
    headers = []
    for test, status in items:
        if status == "FAILED" and ".py:" in test and not test.startswith("test_"):
            headers.append(_banner(test, fill="_"))
        else:
            lines.append(f"{test} {_SYMPY_WORDS[status]}")
    if headers:
        lines += ["", *headers]
    words = (
        ("PASSED", "passed"),
        ("FAILED", "failed"),
        ("SKIPPED", "skipped"),
        ("XFAIL", "expected to fail"),
        ("XPASS", "expected to fail but passed"),
        ("ERROR", "exceptions"),
    )
    parts = [f"{n} {w}" for s, w in words if (n := sum(1 for _, v in items if v == s))]
    lines += ["", _banner(f"tests finished: {', '.join(parts)} in {duration:.2f} seconds")]
    if any(v in ("FAILED", "ERROR", "XPASS") for _, v in items):
        lines.append("DO *NOT* COMMIT!")
    return "\n".join(lines) + "\n"


def render_log(statuses: Mapping[str, Any], repo: str | None = None) -> str:
    """The log ``repo``'s harness test command would print for ``statuses``.

    Django: :func:`render_django_log`; SymPy: :func:`render_sympy_log`; every other
    repository (pytest): :func:`render_pytest_log`. ``parse_log(render_log(s, repo), repo)``
    gives back ``s`` for every status the repository's parser can read.
    """
    name = parser_name(repo)
    if name == "django":
        return render_django_log(statuses)
    if name == "sympy":
        return render_sympy_log(statuses)
    return render_pytest_log(statuses)


def statuses_from_tests_status(
    tests_status: Mapping[str, Mapping[str, Iterable[str]]],
) -> dict[str, str]:
    """``{test: PASSED|FAILED}`` from a report's ``tests_status`` (success -> PASSED)."""
    out: dict[str, str] = {}
    for part in tests_status.values():
        for test in part.get("success", ()):
            out[test] = TestStatus.PASSED.value
        for test in part.get("failure", ()):
            out[test] = TestStatus.FAILED.value
    return out
