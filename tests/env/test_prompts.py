"""First observations: R2E-Gym's tools and issue template, mini-swe-agent's, plain."""

from __future__ import annotations

import pytest

from sweworld.env.prompts import TOOL_DOCS, first_observation, prompt_messages, tool_schemas
from sweworld.sandbox.actions import parse_action
from sweworld.sandbox.tools import SPECS


def test_r2egym_prompt_describes_every_tool_and_the_call_format(toy_task):
    system, user = prompt_messages(toy_task, "r2egym")
    assert system["role"] == "system" and user["role"] == "user"
    for name in ("file_editor", "search", "execute_bash", "finish"):
        assert f"] {name}\n" in system["content"]
    assert "<function=TOOL_NAME>" in system["content"]
    assert "<github_issue>" in user["content"]
    assert toy_task.problem_statement.strip() in user["content"]


def test_the_call_format_in_the_prompt_parses():
    call = "<function=execute_bash>\n<parameter=cmd>ls -la</parameter>\n</function>"
    parsed = parse_action(call, "r2e")
    assert parsed.function == "execute_bash"


def test_mini_prompt_asks_for_one_bash_block_and_the_submit_line(toy_task):
    system, user = prompt_messages(toy_task, "mini")
    assert "```bash" in system["content"]
    assert "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in user["content"]
    assert "<pr_description>" in user["content"] and "/testbed" in user["content"]
    parsed = parse_action(
        "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```", "mini_swe_agent"
    )
    assert parsed.kind == "bash"


def test_plain_prompt_is_the_problem_statement(toy_task):
    assert prompt_messages(toy_task, "plain") == [
        {"role": "user", "content": toy_task.problem_statement.strip()}
    ]
    assert first_observation(toy_task, "plain") == toy_task.problem_statement.strip()


def test_first_observation_joins_the_messages(toy_task):
    text = first_observation(toy_task, "r2egym")
    system, user = prompt_messages(toy_task, "r2egym")
    assert text == system["content"] + "\n\n" + user["content"]


def test_a_row_without_problem_statement_and_an_unknown_format():
    assert "no problem statement" in first_observation({"instance_id": "x"}, "plain")
    with pytest.raises(ValueError, match="unknown prompt format"):
        prompt_messages({"problem_statement": "p"}, "chatml")


def test_tool_schemas_match_the_tools():
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_DOCS)
    for schema in schemas:
        fn = schema["function"]
        assert schema["type"] == "function" and fn["description"]
        assert fn["parameters"]["required"] == list(SPECS[fn["name"]].required)
        assert set(fn["parameters"]["required"]) <= set(fn["parameters"]["properties"])
