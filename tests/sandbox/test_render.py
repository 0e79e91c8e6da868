from __future__ import annotations

import re

import pytest

from sweworld.sandbox.render import (
    MINI_SWE_AGENT_MAX_OUTPUT_CHARS,
    R2E_CONTINUE_MSG,
    R2E_FINISHED,
    detect_submission,
    r2egym_exit_code,
    render_mini_swe_agent,
    render_mini_swe_agent_format_error,
    render_mini_swe_agent_timeout,
    render_r2egym,
    strip_ansi_cr,
    truncate_middle_lines,
)

# ----------------------------------------------------------------------------- R2E-Gym


def test_r2egym_bash_observation():
    out = "[STDOUT]\n\nhello \n\n[STDERR]\n\n\n"
    assert render_r2egym("execute_bash", out, 0) == (
        "Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n\nhello \n\n[STDERR]\n\n\n"
    )
    assert render_r2egym("bash", "x\n", "0") == "Exit code: 0\nExecution output of [bash]:\nx\n"


def test_r2egym_exit_codes_as_the_runtime_reports_them():
    assert r2egym_exit_code(0) == "0"
    assert r2egym_exit_code(-1) == "-1"
    assert r2egym_exit_code(1) == "Error: Exit code 1"
    assert r2egym_exit_code(127) == "Error: Exit code 127"
    assert r2egym_exit_code("Error: Exit code 2") == "Error: Exit code 2"
    assert render_r2egym("execute_bash", "boom", 2).startswith(
        "Exit code: Error: Exit code 2\nExecution output of [execute_bash]:\nboom"
    )
    assert render_r2egym("execute_bash", "slow", -1) == (
        "Exit code: -1\nExecution output of [execute_bash]:\nslow"
    )


def test_r2egym_other_tools_have_no_exit_code_and_no_truncation():
    long = "\n".join(str(i) for i in range(500))
    assert render_r2egym("file_editor", long, 0) == "Execution output of [file_editor]:\n" + long
    assert render_r2egym("search", "", 1) == "Execution output of [search]:\n"


def test_r2egym_finish_and_missing_function():
    assert render_r2egym("finish", "<<<Finished>>>\n", 0) == "<<< Finished >>>"
    assert render_r2egym("submit", "", 0) == R2E_FINISHED
    assert render_r2egym("", "", 0) == R2E_CONTINUE_MSG
    assert R2E_CONTINUE_MSG == (
        "\nYou forgot to use a function call in your response. \n"
        "YOU MUST USE A FUNCTION CALL IN EACH RESPONSE.\n\n"
        "IMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n"
    )


def test_r2egym_truncation_keeps_40_lines_each_side():
    eighty = "\n".join(f"line {i}" for i in range(80)) + "\n"
    assert truncate_middle_lines(eighty) == eighty
    assert render_r2egym("execute_bash", eighty, 0).endswith(eighty)

    lines = [f"line {i}" for i in range(81)]
    text = "\n".join(lines) + "\n"
    expected = (
        "\n".join(lines[:40])
        + "\n"
        + "-" * 50
        + "\n<Observation truncated in middle for saving context>\n"
        + "-" * 50
        + "\n"
        + "\n".join(lines[-40:])
    )
    assert truncate_middle_lines(text) == expected
    assert render_r2egym("execute_bash", text, 0) == (
        "Exit code: 0\nExecution output of [execute_bash]:\n" + expected
    )


def test_strip_ansi_cr():
    assert strip_ansi_cr("\x1b[32mok\x1b[0m\r\n") == "ok\n"
    assert strip_ansi_cr("a\x1b[1;31mb") == "ab"


# ----------------------------------------------------------------------------- mini-swe-agent


def test_mini_swe_agent_short_output():
    assert (
        render_mini_swe_agent("hello\n", 0)
        == "<returncode>0</returncode>\n<output>\nhello\n</output>"
    )
    assert render_mini_swe_agent("", 1) == "<returncode>1</returncode>\n<output>\n</output>"
    assert render_mini_swe_agent("no newline", 2) == (
        "<returncode>2</returncode>\n<output>\nno newline</output>"
    )


WARNING = (
    "<warning>\n"
    "The output of your last command was too long.\n"
    "Please try a different command that produces less output.\n"
    "If you're looking at a file you can try use head, tail or sed to view a smaller number "
    "of lines selectively.\n"
    "If you're using grep or find and it produced too much output, you can use a more "
    "selective search pattern.\n"
    "If you really need to see something from the full command's output, you can redirect "
    "output to a file and then search in that file.\n"
    "</warning>"
)


def test_mini_swe_agent_long_output_threshold():
    assert MINI_SWE_AGENT_MAX_OUTPUT_CHARS == 10000
    short = "a" * 9999
    assert (
        render_mini_swe_agent(short, 0) == f"<returncode>0</returncode>\n<output>\n{short}</output>"
    )
    text = "H" * 5000 + "M" * 1234 + "T" * 5000
    assert render_mini_swe_agent(text, 1) == (
        "<returncode>1</returncode>\n"
        + WARNING
        + "<output_head>\n"
        + "H" * 5000
        + "\n</output_head>\n<elided_chars>\n1234 characters elided\n</elided_chars>\n"
        + "<output_tail>\n"
        + "T" * 5000
        + "\n</output_tail>"
    )
    exactly = "x" * 10000
    assert "0 characters elided" in render_mini_swe_agent(exactly, 0)


def test_mini_swe_agent_timeout():
    assert render_mini_swe_agent_timeout("sleep 100", "partial\n") == (
        "The last command <command>sleep 100</command> timed out and has been killed.\n"
        "The output of the command was:\n <output>\npartial\n\n</output>\n"
        "Please try another command and make sure to avoid those requiring interactive input."
    )


def test_mini_swe_agent_format_error():
    assert render_mini_swe_agent_format_error(2) == (
        "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\n"
        "Please format your action in triple backticks as shown in <response_example>.\n\n"
        "<response_example>\n"
        "Here are some thoughts about why you want to perform the action.\n\n"
        "```bash\n<action>\n```\n"
        "</response_example>\n\n"
        "If you have completed your assignment, please consult the first message about how to\n"
        "submit your solution (you will not be able to continue working on this task after that)."
    )


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff --git a/x b/x\n", "diff --git a/x b/x\n"),
        ("MINI_SWE_AGENT_FINAL_OUTPUT\npatch", "patch"),
        ("\n  COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT  \r\nrest\n", "rest\n"),
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", ""),
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", ""),
        ("hello\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", None),
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT extra\n", None),
        ("", None),
        ("   \n", None),
    ],
)
def test_detect_submission(output, expected):
    assert detect_submission(output) == expected


def test_detect_submission_with_failed_command():
    out = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nfatal: not a git repository\n"
    assert detect_submission(out, returncode=128) is None
    assert detect_submission(out, returncode=0) == "fatal: not a git repository\n"


# ----------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def trajectories(mini_swe_agent_trajectories) -> list[dict]:
    return mini_swe_agent_trajectories


OUTPUT_RE = re.compile(r"<returncode>(-?\d+)</returncode>\n<output>\n(.*)</output>", re.S)
LONG_RE = re.compile(
    r"<returncode>(-?\d+)</returncode>\n<warning>\n.*?\n</warning><output_head>\n(.*)\n"
    r"</output_head>\n<elided_chars>\n(\d+) characters elided\n</elided_chars>\n"
    r"<output_tail>\n(.*)\n</output_tail>",
    re.S,
)
TIMEOUT_RE = re.compile(
    r"The last command <command>(.*?)</command> timed out and has been killed\.\n"
    r"The output of the command was:\n <output>\n(.*)\n</output>\n",
    re.S,
)


@pytest.mark.shared_data
def test_real_observations_are_reproduced_exactly(trajectories):
    seen = {"short": 0, "long": 0, "timeout": 0, "submission": 0}
    for traj in trajectories:
        messages = traj["messages"]
        for msg in messages[2:]:
            if msg["role"] != "user":
                continue
            content = msg["content"]
            m = OUTPUT_RE.fullmatch(content)
            if m:
                assert render_mini_swe_agent(m.group(2), int(m.group(1))) == content
                seen["short"] += 1
                continue
            m = LONG_RE.fullmatch(content)
            if m:
                head, elided, tail = m.group(2), int(m.group(3)), m.group(4)
                raw = head + "\x00" * elided + tail
                assert render_mini_swe_agent(raw, int(m.group(1))) == content
                seen["long"] += 1
                continue
            m = TIMEOUT_RE.match(content)
            if m:
                assert render_mini_swe_agent_timeout(m.group(1), m.group(2)) == content
                seen["timeout"] += 1
        if traj["info"].get("exit_status") == "Submitted":
            submission = traj["info"]["submission"]
            assert detect_submission("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + submission) == (
                submission
            )
            seen["submission"] += 1
    assert seen["short"] > 10000
    assert seen["long"] > 100
    assert seen["timeout"] > 5
    assert seen["submission"] > 300
