from __future__ import annotations

import itertools
import json

import pytest

from sweworld.sandbox.actions import (
    EMPTY_ACTION_MESSAGE,
    Action,
    ActionParseError,
    parse_action,
)
from sweworld.sandbox.render import R2E_CONTINUE_MSG, render_mini_swe_agent_format_error

# ----------------------------------------------------------------------------- XML calls


def test_r2e_function_call():
    text = (
        "I will look at the file first.\n"
        "<function=file_editor>\n"
        "  <parameter=command>view</parameter>\n"
        "  <parameter=path>/testbed/pkg/mod.py</parameter>\n"
        "  <parameter=view_range>[1, 20]</parameter>\n"
        "</function>"
    )
    action = parse_action(text)
    assert action == Action(
        kind="function",
        function="file_editor",
        parameters={"command": "view", "path": "/testbed/pkg/mod.py", "view_range": "[1, 20]"},
        command="",
        raw=text,
    )
    assert action.to_xml() == (
        "<function=file_editor>\n"
        "  <parameter=command>view</parameter>\n"
        "  <parameter=path>/testbed/pkg/mod.py</parameter>\n"
        "  <parameter=view_range>[1, 20]</parameter>\n"
        "</function>"
    )
    assert parse_action(action.to_xml()).parameters == action.parameters


def test_values_are_stripped_and_multiline_like_r2e():
    text = (
        "<function = file_editor >\n"
        "<parameter=command>str_replace</parameter>\n"
        "<parameter = path > /testbed/a.py </parameter>\n"
        "<parameter=old_str>\n    x = 1\n    y = 2\n</parameter>\n"
        "<parameter=new_str>\n    x = 3\n</parameter>\n"
        "</function>"
    )
    action = parse_action(text)
    assert action.function == "file_editor"
    assert action.parameters == {
        "command": "str_replace",
        "path": "/testbed/a.py",
        "old_str": "x = 1\n    y = 2",
        "new_str": "x = 3",
    }


def test_missing_closing_function_tag_is_tolerated():
    text = "<function=execute_bash>\n<parameter=cmd>ls -la</parameter>\n"
    action = parse_action(text)
    assert action.kind == "function"
    assert action.function == "execute_bash"
    assert action.parameters == {"cmd": "ls -la"}


def test_only_the_first_function_block_counts():
    text = (
        "<function=execute_bash><parameter=cmd>ls</parameter></function>\n"
        "<function=finish><parameter=command>submit</parameter></function>"
        "<parameter=extra>ignored</parameter>"
    )
    action = parse_action(text)
    assert action.function == "execute_bash"
    assert action.parameters == {"cmd": "ls"}


@pytest.mark.parametrize(
    ("text", "function", "params"),
    [
        (
            "<function=str_replace_editor><parameter=command>view</parameter>"
            "<parameter=path>/testbed</parameter></function>",
            "file_editor",
            {"command": "view", "path": "/testbed"},
        ),
        (
            "<function=bash><parameter=command>echo hi</parameter></function>",
            "execute_bash",
            {"cmd": "echo hi"},
        ),
        (
            "<function=execute_bash><parameter=command>pwd</parameter></function>",
            "execute_bash",
            {"cmd": "pwd"},
        ),
        ("<function=submit></function>", "finish", {"command": "submit"}),
        (
            "<function=finish><parameter=command>submit</parameter>"
            "<parameter=result>done</parameter></function>",
            "finish",
            {"command": "submit", "result": "done"},
        ),
    ],
)
def test_aliases(text, function, params):
    action = parse_action(text)
    assert action.function == function
    assert action.parameters == params


def test_empty_function_name_is_an_error():
    with pytest.raises(ActionParseError) as info:
        parse_action("<function=>\n<parameter=cmd>ls</parameter>\n</function>")
    assert "<function=NAME>" in str(info.value)


# ----------------------------------------------------------------------------- bash


def test_single_bash_block():
    text = "THOUGHT: list files.\n\n```bash\nls -la\n```"
    action = parse_action(text)
    assert action.kind == "bash"
    assert action.function == ""
    assert action.command == "ls -la"
    assert action.raw == text
    assert action.to_xml() == (
        "<function=execute_bash>\n  <parameter=cmd>ls -la</parameter>\n</function>"
    )


def test_bash_block_content_is_stripped_and_multiline():
    text = "THOUGHT: x\n```bash\n  cat <<'EOF' > a.py\nprint(1)\nEOF\n\n```\n"
    assert parse_action(text).command == "cat <<'EOF' > a.py\nprint(1)\nEOF"


def test_two_bash_blocks_give_mini_swe_agent_format_error():
    text = "THOUGHT: two\n```bash\nls\n```\nthen\n```bash\npwd\n```"
    with pytest.raises(ActionParseError) as info:
        parse_action(text)
    assert str(info.value) == render_mini_swe_agent_format_error(2)
    assert str(info.value).startswith(
        "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."
    )
    assert info.value.n_actions == 2


def test_unterminated_or_missing_block_gives_format_error():
    for text in ("THOUGHT: I think\n```bash\nls", "THOUGHT: just thinking, no command"):
        with pytest.raises(ActionParseError) as info:
            parse_action(text)
        assert str(info.value) == render_mini_swe_agent_format_error(0)


def test_raw_bash_command():
    action = parse_action("  grep -rn 'def foo' src | head  \n")
    assert action.kind == "bash"
    assert action.command == "grep -rn 'def foo' src | head"
    multi = "cat > README.md <<'EOF'\n```python\nx = 1\n```\nEOF"
    assert parse_action(multi).command == multi


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n"])
def test_empty_actions_are_refused(text):
    with pytest.raises(ActionParseError) as info:
        parse_action(text)
    assert str(info.value) == EMPTY_ACTION_MESSAGE
    assert "<function=execute_bash>" in EMPTY_ACTION_MESSAGE
    assert "```bash" in EMPTY_ACTION_MESSAGE


def test_non_text_garbage_is_refused():
    with pytest.raises(ActionParseError):
        parse_action(None)  # type: ignore[arg-type]
    with pytest.raises(ActionParseError):
        parse_action(42)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- explicit formats


def test_r2e_format_requires_a_function_call():
    with pytest.raises(ActionParseError) as info:
        parse_action("I am done thinking.", format="r2e")
    assert str(info.value) == R2E_CONTINUE_MSG
    assert parse_action("<function=finish></function>", format="r2e").function == "finish"


def test_mini_swe_agent_format_requires_one_block():
    with pytest.raises(ActionParseError) as info:
        parse_action("ls -la", format="mini_swe_agent")
    assert str(info.value) == render_mini_swe_agent_format_error(0)
    # a command that greps for a function tag is still a bash block in this format
    text = "THOUGHT\n```bash\ngrep -rn '<function=' .\n```"
    assert parse_action(text, format="mini_swe_agent").command == "grep -rn '<function=' ."


def test_bash_format_takes_the_whole_text():
    assert parse_action("<function=x> literally", format="bash").command == "<function=x> literally"
    with pytest.raises(ActionParseError):
        parse_action("  ", format="bash")
    with pytest.raises(ValueError):
        parse_action("ls", format="nope")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- mappings


def test_mapping_function_and_parameters():
    action = parse_action(
        {"function": "file_editor", "parameters": {"command": "view", "path": "."}}
    )
    assert action.kind == "function"
    assert action.function == "file_editor"
    assert action.parameters == {"command": "view", "path": "."}


def test_mapping_openai_tool_call_with_json_arguments():
    call = {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "arguments": json.dumps(
                {"command": "view", "path": "/testbed/a.py", "view_range": [1, 20], "concise": True}
            ),
        },
    }
    action = parse_action(call)
    assert action.function == "file_editor"
    assert action.parameters == {
        "command": "view",
        "path": "/testbed/a.py",
        "view_range": "[1, 20]",
        "concise": "True",
    }


def test_mapping_values_are_not_stripped_and_none_is_dropped():
    action = parse_action(
        {"name": "file_editor", "arguments": {"command": "insert", "new_str": "  x\n", "x": None}}
    )
    assert action.parameters == {"command": "insert", "new_str": "  x\n"}


def test_mapping_aliases():
    assert parse_action({"name": "bash", "arguments": {"command": "ls"}}).parameters == {
        "cmd": "ls"
    }
    submit = parse_action({"name": "submit", "arguments": "{}"})
    assert submit.function == "finish"
    assert submit.parameters == {"command": "submit"}


@pytest.mark.parametrize(
    "mapping", [{"bash": "ls -la"}, {"command": "ls -la"}, {"cmd": " ls -la "}]
)
def test_mapping_bash(mapping):
    action = parse_action(mapping)
    assert action.kind == "bash"
    assert action.command == "ls -la"


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ({"name": "file_editor", "arguments": "{not json"}, "not valid JSON"),
        ({"name": "file_editor", "arguments": "[1, 2]"}, "must be a JSON object"),
        ({"name": "", "arguments": {}}, "Invalid function name"),
        ({"name": 3}, "Invalid function name"),
        ({"bash": ""}, "non-empty command"),
        ({"foo": "bar"}, "Unrecognised action object"),
        ({}, "Unrecognised action object"),
    ],
)
def test_bad_mappings(mapping, fragment):
    with pytest.raises(ActionParseError) as info:
        parse_action(mapping)
    assert fragment in str(info.value)


# ----------------------------------------------------------------------------- real data


@pytest.mark.shared_data
def test_real_mini_swe_agent_responses_parse_as_the_agent_parsed_them(
    mini_swe_agent_trajectories,
):
    errors = commands = 0
    for trajectory in mini_swe_agent_trajectories:
        messages = trajectory["messages"]
        for msg, reply in itertools.pairwise(messages):
            if msg["role"] != "assistant":
                continue
            answer = reply["content"]
            if answer.startswith("Please always provide EXACTLY ONE action"):
                with pytest.raises(ActionParseError) as info:
                    parse_action(msg["content"], format="mini_swe_agent")
                assert str(info.value) == answer
                errors += 1
            else:
                action = parse_action(msg["content"], format="mini_swe_agent")
                assert action.kind == "bash"
                if answer.startswith("The last command <command>"):
                    assert answer.startswith(f"The last command <command>{action.command}</")
                commands += 1
    assert errors > 500
    assert commands > 10000
