"""Policies: action files, trajectory replay, the OpenAI-compatible agent loop, the registry."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from sweworld.data.policies import (
    OpenAIPolicy,
    ScriptedPolicy,
    TrajectoryPolicy,
    make_policy,
    make_policy_factory,
    read_action_file,
)
from sweworld.data.schema import Trajectory, TrajectoryStep

CALL = {"function": "file_editor", "parameters": {"command": "view", "path": "/testbed"}}


def test_action_files_in_three_formats(tmp_path):
    as_list = tmp_path / "a.json"
    as_list.write_text(json.dumps(["ls", CALL]))
    assert read_action_file(as_list) == ["ls", CALL]
    as_jsonl = tmp_path / "a.jsonl"
    as_jsonl.write_text('"ls -la"\n\n' + json.dumps(CALL) + '\n"cat <<EOF > f\\nx\\nEOF"\n')
    assert read_action_file(as_jsonl) == ["ls -la", CALL, "cat <<EOF > f\nx\nEOF"]
    plain = tmp_path / "a.txt"
    plain.write_text('ls\n  \npython -c "print(1)"\n{not json\n')
    assert read_action_file(plain) == ["ls", 'python -c "print(1)"', "{not json"]
    empty = tmp_path / "e.txt"
    empty.write_text("\n \n")
    with pytest.raises(ValueError, match="no action"):
        read_action_file(empty)
    with pytest.raises(ValueError, match="cannot read"):
        read_action_file(tmp_path / "missing.txt")
    bad = tmp_path / "b.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="item 0"):
        read_action_file(bad)


def test_scripted_policy_plays_its_actions_then_stops(tmp_path):
    policy = ScriptedPolicy(["a", "b"])
    policy.reset(None, "problem")
    assert [policy.act("o"), policy.act("o"), policy.act("o")] == ["a", "b", None]
    assert policy.stop_reason == "script finished"
    policy.reset(None, "problem")
    assert policy.act("o") == "a" and policy.stop_reason == ""


def _trajectory(instance, commands, actions=None):
    actions = actions or [""] * len(commands)
    steps = [TrajectoryStep(command=c, action=a) for c, a in zip(commands, actions, strict=True)]
    return Trajectory("mini-swe-agent", instance, "o/r", {"instance_id": instance}, steps)


def test_trajectory_policy_replays_the_task_s_trajectory(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    lines = [
        json.dumps(asdict(_trajectory("t-1", ["ls", "", "pytest"], ["", "", ""]))),
        "{torn",
        json.dumps({"source": "x"}),
        json.dumps(asdict(_trajectory("t-2", ["", "cat f"], [json.dumps(CALL), ""]))),
    ]
    path.write_text("\n".join(lines) + "\n")
    policy = make_policy(f"trajectory:{path}")
    assert isinstance(policy, TrajectoryPolicy)
    assert len(policy.load_errors) == 2 and "line 2" in policy.load_errors[0]
    assert "missing field(s) instance_id, repo, task" in policy.load_errors[1]

    class T:
        instance_id = "t-2"

    policy.reset(T(), "p")
    assert [policy.act(""), policy.act(""), policy.act("")] == [json.dumps(CALL), "cat f", None]
    T.instance_id = "t-9"
    with pytest.raises(LookupError, match="t-9"):
        policy.reset(T(), "p")
    fixed = make_policy(f"trajectory:{path}#t-1")
    fixed.reset(T(), "p")  # any task: the named instance's actions
    assert [fixed.act(""), fixed.act(""), fixed.act("")] == ["ls", "pytest", None]
    with pytest.raises(ValueError, match="no trajectory of instance"):
        make_policy(f"trajectory:{path}#t-7")
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text("[]\n")
    with pytest.raises(ValueError, match="no trajectory in the file"):
        make_policy(f"trajectory:{only_bad}")


def test_registry_rejects_bad_specs(tmp_path):
    for spec in ("nothing", "scripted:", "magic:x", "openai:http://h:1", "trajectory:f#"):
        with pytest.raises(ValueError):
            make_policy(spec)
    with pytest.raises(TypeError):
        make_policy(42)  # type: ignore[arg-type]
    policy = ScriptedPolicy(["ls"])
    assert make_policy(policy) is policy


def test_factory_gives_independent_copies(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("a\nb\n")
    factory = make_policy_factory(f"scripted:{path}")
    one, two = factory(), factory()
    one.reset(None, "")
    two.reset(None, "")
    assert one.act("") == "a" and one.act("") == "b" and two.act("") == "a"


class _Task:
    problem_statement = "slugify keeps repeated dashes"


def test_openai_policy_conversation_caps_and_context_errors():
    from sweworld.models import ReplayLM
    from sweworld.models.base import ContextTooLong

    lm = ReplayLM(["first", "second", "third"])
    policy = OpenAIPolicy(lm, max_calls=2)
    policy.reset(_Task(), "ignored when the task has a problem statement")
    assert policy.messages[0]["role"] == "system" and "bash" in policy.messages[0]["content"]
    assert "slugify keeps repeated dashes" in policy.messages[1]["content"]
    assert policy.act("first observation") == "first"
    assert policy.act("obs 1") == "second"
    assert policy.act("obs 2") is None and policy.stop_reason == "step limit"
    assert [m["content"] for m in lm.calls[1].messages[2:]] == ["first", "obs 1"]
    assert policy.tokens > 0

    small = OpenAIPolicy(ReplayLM(["x" * 400], cycle=True), max_total_tokens=150)
    small.reset(_Task(), "")
    steps = 0
    while small.act("o") is not None:
        steps += 1
    assert small.stop_reason == "token limit" and 1 <= steps < 5

    class TooLong(ReplayLM):
        def generate(self, requests):
            raise ContextTooLong("prompt of 40000 tokens")

    full = OpenAIPolicy(TooLong(["x"]))
    full.reset(_Task(), "")
    assert full.act("o") is None and full.stop_reason.startswith("context too long")
    with pytest.raises(RuntimeError, match="before reset"):
        OpenAIPolicy(lm).act("o")
