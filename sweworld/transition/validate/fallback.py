""":func:`conservative_prediction`: the answer when the model keeps failing validation."""

from __future__ import annotations

import shlex
from typing import Any

from sweworld.sandbox.executor import NO_EXECUTOR_EXIT_CODE
from sweworld.transition.facts import (
    NO_TARGET_EXIT_CODE,
    Facts,
)
from sweworld.transition.types import Prediction

#: Exit code of :func:`conservative_prediction`: the command was not executed (the same
#: code the project uses for "refused or no executor").
FALLBACK_EXIT_CODE = NO_EXECUTOR_EXIT_CODE

#: How :func:`conservative_prediction` marks its ``reasoning``.
FALLBACK_MARKER = "[sweworld fallback]"


# =========================================================================== fallback


def conservative_prediction(request: Any, facts: Facts | None) -> Prediction:
    """The answer when the model's predictions keep failing validation.

    Decision: say plainly that the command's result could not be simulated, with exit code
    :data:`FALLBACK_EXIT_CODE` (126, "not executed", as for a session without executor),
    and state only what is known exactly. Alternatives were rejected because each makes a
    claim the simulator cannot back: empty output with exit 0 tells the agent a script ran
    cleanly (a reproduction script that "prints nothing" reads as "bug fixed"); a pytest run
    with invented outcomes, or with every test passing, would mislead the agent and any
    grader reading the log (this one has no ``PASSED``/``FAILED`` lines, so a grader counts
    its tests as not passing, the safe side for a reward).

    What is known is still given: an exact answer (:attr:`Facts.exact`) or a hint is
    returned as is; otherwise the message lists the tests pytest would collect, syntax
    errors and missing imports found, in stderr. ``reasoning`` starts with
    :data:`FALLBACK_MARKER`.
    """
    if facts is not None and facts.hint:
        return Prediction(
            stderr=facts.hint + "\n", exit_code=NO_TARGET_EXIT_CODE,
            reasoning=f"{FALLBACK_MARKER} no executable target",
        )  # fmt: skip
    if facts is not None and facts.exact is not None:
        return _replace_reasoning(facts.exact, f"{FALLBACK_MARKER} the exact answer")
    argv = tuple(getattr(request, "argv", ()) or ())
    command = shlex.join(argv) if argv else "the command"
    lines = [
        f"sweworld: the output of `{command}` could not be simulated reliably, so it is not "
        "shown: nothing was executed and no result is claimed.",
    ]
    if facts is not None:
        lines += _known_facts_lines(facts)
    lines.append("Run the command again, or a narrower one (a single test or script).")
    return Prediction(
        stdout="",
        stderr="\n".join(lines) + "\n",
        exit_code=FALLBACK_EXIT_CODE,
        reasoning=f"{FALLBACK_MARKER} predictions failed validation",
    )


def _replace_reasoning(pred: Prediction, reasoning: str) -> Prediction:
    return Prediction(
        stdout=pred.stdout, stderr=pred.stderr, exit_code=pred.exit_code, reasoning=reasoning
    )


def _known_facts_lines(facts: Facts) -> list[str]:
    lines = []
    for error in facts.syntax_errors[:3]:
        lines.append(f"Known: {error.path} has a syntax error:\n{error.text.rstrip()}")
    for missing in [m for m in facts.missing_imports if m.certain][:3]:
        where = f" ({missing.file}, line {missing.line})" if missing.file else ""
        lines.append(f"Known: {missing.error}{where}.")
    for path in facts.collection_errors[:5]:
        lines.append(f"Known: {path} cannot be collected.")
    if facts.collected_tests is not None and facts.collection_exact:
        tests = [facts.cwd_relative(t) for t in facts.collected_tests]
        shown = "\n".join(f"  {t}" for t in tests[:50])
        more = f"\n  ... and {len(tests) - 50} more" if len(tests) > 50 else ""
        lines.append(
            f"Known: pytest would collect {len(tests)} test{'s' if len(tests) != 1 else ''}"
            + (f" ({facts.deselected} deselected)" if facts.deselected else "")
            + (":\n" + shown + more if tests else ".")
        )
    return lines
