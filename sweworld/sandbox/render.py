"""Observation strings exactly as the trainers' own environments render them.

Two formats:

* **R2E-Gym** (``r2egym.agenthub.observation.Observation.__str__`` on top of what
  ``DockerRuntime.run`` returns): ``Exit code: {code}\\nExecution output of [{fn}]:\\n{output}``
  for ``execute_bash``/``bash`` (long outputs keep the first and last 40 lines), a bare
  ``Execution output of [{fn}]:\\n{output}`` for the other tools, ``<<< Finished >>>`` for
  ``finish``/``submit`` and a reminder when the response held no function call.
* **mini-swe-agent** (its ``action_observation_template`` / ``timeout_template`` /
  ``format_error_template`` Jinja templates, as recorded in real trajectories of
  mini-swe-agent 1.15): ``<returncode>N</returncode>\\n<output>\\n...</output>``, with a
  head/tail layout for outputs of 10,000 characters or more.

All functions here are pure; every fixed string is a module constant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MINI_SWE_AGENT_ELIDED_TEMPLATE",
    "MINI_SWE_AGENT_FORMAT_ERROR_TEMPLATE",
    "MINI_SWE_AGENT_HEAD_CHARS",
    "MINI_SWE_AGENT_MAX_OUTPUT_CHARS",
    "MINI_SWE_AGENT_SUBMISSION_REFUSED",
    "MINI_SWE_AGENT_SUBMIT_MARKERS",
    "MINI_SWE_AGENT_TAIL_CHARS",
    "MINI_SWE_AGENT_TIMEOUT_TEMPLATE",
    "MINI_SWE_AGENT_WARNING",
    "R2E_ANSI_CR_RE",
    "R2E_BASH_FUNCTIONS",
    "R2E_CONTINUE_MSG",
    "R2E_DIVIDER",
    "R2E_FINISHED",
    "R2E_FINISH_FUNCTIONS",
    "R2E_NUM_LINES",
    "R2E_TRUNCATION_NOTICE",
    "SubmissionCheck",
    "check_submission",
    "detect_submission",
    "r2egym_exit_code",
    "render_mini_swe_agent",
    "render_mini_swe_agent_format_error",
    "render_mini_swe_agent_timeout",
    "render_r2egym",
    "strip_ansi_cr",
    "truncate_middle_lines",
]

# --------------------------------------------------------------------------- R2E-Gym
#: Lines kept at each end of a long bash output.
R2E_NUM_LINES = 40
R2E_DIVIDER = "-" * 50
R2E_TRUNCATION_NOTICE = "<Observation truncated in middle for saving context>"
R2E_FINISHED = "<<< Finished >>>"
#: What R2E-Gym shows when a response holds no (complete) function call.
R2E_CONTINUE_MSG = (
    "\n"
    "You forgot to use a function call in your response. \n"
    "YOU MUST USE A FUNCTION CALL IN EACH RESPONSE.\n"
    "\n"
    "IMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n"
)
R2E_BASH_FUNCTIONS = ("execute_bash", "bash")
R2E_FINISH_FUNCTIONS = ("finish", "submit")
#: R2E-Gym's runtime removes colour codes and carriage returns from successful outputs.
R2E_ANSI_CR_RE = re.compile(r"\x1b\[[0-9;]*m|\r")


def strip_ansi_cr(text: str) -> str:
    """Remove ANSI colour codes and ``\\r`` the way R2E-Gym's runtime does (exit code 0 only)."""
    return R2E_ANSI_CR_RE.sub("", text)


def r2egym_exit_code(exit_code: int | str) -> str:
    """The exit code as R2E-Gym's runtime reports it.

    ``0`` -> ``"0"``, ``-1`` (timeout or runtime failure) -> ``"-1"``, any other integer
    ``n`` -> ``"Error: Exit code n"``; a string is taken as already formatted.
    """
    if isinstance(exit_code, str):
        return exit_code
    code = int(exit_code)
    if code in (0, -1):
        return str(code)
    return f"Error: Exit code {code}"


def truncate_middle_lines(output: str, num_lines: int = R2E_NUM_LINES) -> str:
    """Keep the first and last ``num_lines`` lines of an output longer than twice that."""
    lines = output.splitlines() if output else []
    if len(lines) <= 2 * num_lines:
        return output
    top = "\n".join(lines[:num_lines])
    bottom = "\n".join(lines[-num_lines:])
    return f"{top}\n{R2E_DIVIDER}\n{R2E_TRUNCATION_NOTICE}\n{R2E_DIVIDER}\n{bottom}"


def render_r2egym(function: str, output: str, exit_code: int | str) -> str:
    """R2E-Gym's observation string for one step.

    Args:
        function: the function name of the action (``""`` when the response had none).
        output: what the tool printed (stdout and stderr together).
        exit_code: an int (formatted by :func:`r2egym_exit_code`) or R2E's own string.
    """
    if not function:
        return R2E_CONTINUE_MSG
    if function in R2E_FINISH_FUNCTIONS:
        return R2E_FINISHED
    if function in R2E_BASH_FUNCTIONS:
        return (
            f"Exit code: {r2egym_exit_code(exit_code)}\n"
            f"Execution output of [{function}]:\n"
            f"{truncate_middle_lines(output)}"
        )
    return f"Execution output of [{function}]:\n{output}"


# --------------------------------------------------------------------------- mini-swe-agent
#: Outputs of this many characters or more get the head/tail layout.
MINI_SWE_AGENT_MAX_OUTPUT_CHARS = 10000
MINI_SWE_AGENT_HEAD_CHARS = 5000
MINI_SWE_AGENT_TAIL_CHARS = 5000
MINI_SWE_AGENT_WARNING = (
    "The output of your last command was too long.\n"
    "Please try a different command that produces less output.\n"
    "If you're looking at a file you can try use head, tail or sed to view a smaller "
    "number of lines selectively.\n"
    "If you're using grep or find and it produced too much output, you can use a more "
    "selective search pattern.\n"
    "If you really need to see something from the full command's output, you can redirect "
    "output to a file and then search in that file."
)
MINI_SWE_AGENT_ELIDED_TEMPLATE = "{n} characters elided"
MINI_SWE_AGENT_TIMEOUT_TEMPLATE = (
    "The last command <command>{command}</command> timed out and has been killed.\n"
    "The output of the command was:\n"
    " <output>\n"
    "{output}\n"
    "</output>\n"
    "Please try another command and make sure to avoid those requiring interactive input."
)
MINI_SWE_AGENT_FORMAT_ERROR_TEMPLATE = (
    "Please always provide EXACTLY ONE action in triple backticks, found {n} actions.\n"
    "\n"
    "Please format your action in triple backticks as shown in <response_example>.\n"
    "\n"
    "<response_example>\n"
    "Here are some thoughts about why you want to perform the action.\n"
    "\n"
    "```bash\n"
    "<action>\n"
    "```\n"
    "</response_example>\n"
    "\n"
    "If you have completed your assignment, please consult the first message about how to\n"
    "submit your solution (you will not be able to continue working on this task after that)."
)
MINI_SWE_AGENT_SUBMIT_MARKERS = (
    "MINI_SWE_AGENT_FINAL_OUTPUT",
    "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
)


def render_mini_swe_agent(output: str, returncode: int) -> str:
    """mini-swe-agent's observation of one command (``action_observation_template``)."""
    head = f"<returncode>{returncode}</returncode>\n"
    if len(output) < MINI_SWE_AGENT_MAX_OUTPUT_CHARS:
        return f"{head}<output>\n{output}</output>"
    elided = len(output) - MINI_SWE_AGENT_MAX_OUTPUT_CHARS
    return (
        f"{head}<warning>\n{MINI_SWE_AGENT_WARNING}\n</warning>"
        f"<output_head>\n{output[:MINI_SWE_AGENT_HEAD_CHARS]}\n</output_head>\n"
        f"<elided_chars>\n{MINI_SWE_AGENT_ELIDED_TEMPLATE.format(n=elided)}\n</elided_chars>\n"
        f"<output_tail>\n{output[-MINI_SWE_AGENT_TAIL_CHARS:]}\n</output_tail>"
    )


def render_mini_swe_agent_timeout(command: str, output: str) -> str:
    """mini-swe-agent's message for a command that timed out (``timeout_template``)."""
    return MINI_SWE_AGENT_TIMEOUT_TEMPLATE.format(command=command, output=output)


def render_mini_swe_agent_format_error(n_actions: int) -> str:
    """mini-swe-agent's message for a response without exactly one bash block."""
    return MINI_SWE_AGENT_FORMAT_ERROR_TEMPLATE.format(n=n_actions)


def detect_submission(output: str, returncode: int | None = None) -> str | None:
    """The submitted patch when ``output`` is mini-swe-agent's submission, else ``None``.

    The rule is mini-swe-agent's: after stripping leading whitespace, the first line (itself
    stripped) is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` or ``MINI_SWE_AGENT_FINAL_OUTPUT``;
    everything after that line is the submission. When ``returncode`` is given and non-zero,
    nothing is submitted (newer mini-swe-agent releases let the agent see the failure).
    """
    lines = output.lstrip().splitlines(keepends=True)
    if not lines or lines[0].strip() not in MINI_SWE_AGENT_SUBMIT_MARKERS:
        return None
    if returncode is not None and returncode != 0:
        return None
    return "".join(lines[1:])


#: Added to the observation when the submission marker came from a command that ran an
#: execution command (its output may be the executor's, e.g. a simulated prediction).
MINI_SWE_AGENT_SUBMISSION_REFUSED = (
    "\nsweworld: this was not taken as a submission: the command also ran {commands}, "
    "whose output comes from the executor and cannot submit. To submit, run a command "
    "that runs nothing else, e.g. `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`; the "
    "submitted patch is always the diff of the workspace.\n"
)


@dataclass(frozen=True)
class SubmissionCheck:
    """What a mini-swe-agent command's output means for the episode.

    Attributes:
        accepted: the agent submitted (the episode ends; the patch is the workspace's diff,
            never ``text``).
        text: what the command printed after the marker (the observation of a submission).
        output: the output to render when not accepted (with a note when refused).
        refused: why a marker was not taken as a submission (``""`` when there was none).
    """

    accepted: bool
    text: str
    output: str
    refused: str = ""


def check_submission(
    output: str,
    returncode: int | None = None,
    execution_calls: Sequence[Mapping[str, Any]] | None = None,
) -> SubmissionCheck:
    """Whether a command's output is a submission, counting only what really ran.

    The marker rule is :func:`detect_submission`'s. A command during which the executor
    answered an execution command (``execution_calls``, as the sandbox records them) never
    submits: the marker, and the exit codes that decided what ran after it, may be a model's
    prediction (a simulated ``python`` that prints the marker and an invented diff).
    """
    text = detect_submission(output, returncode)
    if text is None:
        return SubmissionCheck(accepted=False, text="", output=output)
    if execution_calls:
        commands = ", ".join(f"`{call.get('command', '?')}`" for call in list(execution_calls)[:3])
        if len(execution_calls) > 3:
            commands += f" and {len(execution_calls) - 3} more"
        note = MINI_SWE_AGENT_SUBMISSION_REFUSED.format(commands=commands)
        reason = f"the output of {len(execution_calls)} execution command(s) was part of it"
        sep = "" if not output or output.endswith("\n") else "\n"
        return SubmissionCheck(
            accepted=False, text=text, output=output + sep + note, refused=reason
        )
    return SubmissionCheck(accepted=True, text=text, output=output)
