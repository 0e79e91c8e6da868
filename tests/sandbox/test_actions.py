from __future__ import annotations

import contextlib
import itertools
import json
import random
import time

import pytest

from sweworld.sandbox import actions
from sweworld.sandbox.actions import (
    EMPTY_ACTION_MESSAGE,
    FUNCTION_RE,
    MAX_ACTION_CHARS,
    MINI_SWE_AGENT_ACTION_RE,
    PARAMETER_RE,
    Action,
    ActionParseError,
    find_bash_blocks,
    find_function,
    find_parameters,
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


# ----------------------------------------------------------------------------- adversarial input

_PIECES = (
    "<function", "<parameter", "=", " =", "= ", " ", "\n", "\r", "\t", "\u2003", "\x85",
    ">", "<", "a", "b=c", "</parameter>", "</function>", "```bash", "\n```", "`", "``",
)  # fmt: skip


def test_linear_parsers_find_exactly_what_the_reference_expressions_find():
    """The one-pass parsers agree with R2E-Gym's and mini-swe-agent's expressions."""
    rng = random.Random(20260601)
    for _ in range(20000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 16)))
        match = FUNCTION_RE.search(text)
        assert find_function(text) == ((match.group(1).strip(), match.end()) if match else None)
        expected = [(key.strip(), value.strip()) for key, value in PARAMETER_RE.findall(text)]
        assert find_parameters(text) == expected, text
        assert find_bash_blocks(text) == MINI_SWE_AGENT_ACTION_RE.findall(text), text


class _Forbidden:
    def __getattr__(self, name):
        raise AssertionError("a backtracking expression ran on agent input")


ADVERSARIAL = {
    # 23 s before: every "<parameter=" scanned to the end for "</parameter>"
    "nested_parameters": "<function=f>" + "<parameter=a>" * 20000,
    "unclosed_function_tags": "<function=" * 100000,
    "unclosed_parameter_keys": "<function=f>" + "<parameter=a" * 80000,
    "backticks": "`" * 200000,
    "unterminated_fence_newlines": "THOUGHT\n```bash" + "\n" * 900000,
    "many_unterminated_fences": "THOUGHT\n" + "```bash\n x\n``" * 60000,
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_adversarial_actions_are_parsed_in_one_pass(kind, monkeypatch):
    for name in ("FUNCTION_RE", "PARAMETER_RE", "MINI_SWE_AGENT_ACTION_RE"):
        monkeypatch.setattr(actions, name, _Forbidden())
    text = ADVERSARIAL[kind]
    started = time.perf_counter()
    for fmt in ("auto", "r2e", "mini_swe_agent", "bash"):
        with contextlib.suppress(ActionParseError):
            parse_action(text, format=fmt)
    # only a catastrophic blow-up fails here (each took minutes to forever before)
    assert time.perf_counter() - started < 5


def test_nested_parameters_parse_like_r2e():
    action = parse_action(ADVERSARIAL["nested_parameters"])
    assert (action.function, action.parameters) == ("f", {})
    text = "<function=f>" + "<parameter=a>" * 20000 + "x</parameter></function>"
    assert parse_action(text).parameters == {"a": "<parameter=a>" * 19999 + "x"}
    with pytest.raises(ActionParseError) as info:
        parse_action(ADVERSARIAL["unterminated_fence_newlines"])
    assert info.value.n_actions == 0


@pytest.mark.parametrize("fmt", ["auto", "r2e", "mini_swe_agent", "bash"])
def test_oversize_actions_are_refused_with_a_clear_message(fmt):
    text = "\n" * (10 * 1024 * 1024)  # a 10 MB answer
    with pytest.raises(ActionParseError) as info:
        parse_action(text, format=fmt)
    assert str(info.value).startswith("Your response is 10,485,760 characters long; the limit is")
    with pytest.raises(ActionParseError, match="characters long"):
        parse_action(text.encode(), format=fmt)
    at_limit = "<function=execute_bash><parameter=cmd>"
    at_limit += "x" * (MAX_ACTION_CHARS - len(at_limit) - len("</parameter>")) + "</parameter>"
    assert len(at_limit) == MAX_ACTION_CHARS
    if fmt == "mini_swe_agent":  # parsed (no block in it), not refused for its size
        with pytest.raises(ActionParseError) as info:
            parse_action(at_limit, format=fmt)
        assert info.value.n_actions == 0
    elif fmt == "bash":
        assert parse_action(at_limit, format=fmt).command == at_limit
    else:
        assert len(parse_action(at_limit, format=fmt).parameters["cmd"]) > 999_000


def test_oversize_and_deeply_nested_mappings_are_refused():
    with pytest.raises(ActionParseError, match="characters long"):
        parse_action({"bash": "x" * (MAX_ACTION_CHARS + 1)})
    with pytest.raises(ActionParseError, match="nested too deeply"):
        parse_action({"name": "file_editor", "arguments": "[" * 200000})
    nested: dict = {}
    for _ in range(5000):
        nested = {"bash": nested}
    with pytest.raises(ActionParseError):
        parse_action(nested)


def test_lone_surrogates_parse_as_text():
    action = parse_action("<function=execute_bash><parameter=cmd>echo \ud800</parameter>")
    assert action.parameters == {"cmd": "echo \ud800"}
    assert parse_action("echo \udcff").command == "echo \udcff"


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
