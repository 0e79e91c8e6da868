"""The scripted executor and the executor registry."""

from __future__ import annotations

import json

import pytest

from sweworld.execution import ExecutionRequest, Executor, NoExecutor, ScriptedExecutor
from sweworld.sandbox.registry import make_executor


def req(*argv: str) -> ExecutionRequest:
    return ExecutionRequest(argv=argv)


def test_rules_first_match_wins_and_calls_are_recorded():
    ex = ScriptedExecutor()
    ex.add("exact\n", command="python reproduce.py")
    ex.add("tests ran\n", pattern=r"pytest", exit_code=1)
    assert ex.execute(req("python", "reproduce.py")).stdout == "exact\n"
    res = ex.execute(req("python", "-m", "pytest", "-q"))
    assert (res.stdout, res.exit_code) == ("tests ran\n", 1)
    miss = ex.execute(req("make"))
    assert miss.exit_code == 127 and "no output for `make`" in miss.stderr
    assert [c.command for c in ex.calls] == ["python reproduce.py", "python -m pytest -q", "make"]
    assert isinstance(ex, Executor)


def test_rules_from_json_and_jsonl(tmp_path):
    rules = [
        {"command": "python a.py", "stdout": "A\n"},
        {"pattern": "b\\.py", "stderr": "boom\n", "exit_code": 2},
    ]
    (tmp_path / "r.json").write_text(json.dumps(rules))
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in rules) + "\n")
    for name in ("r.json", "r.jsonl"):
        ex = ScriptedExecutor.from_file(tmp_path / name)
        assert ex.execute(req("python", "a.py")).stdout == "A\n"
        assert ex.execute(req("python", "b.py")).exit_code == 2
    with pytest.raises(ValueError, match="exactly one of"):
        ScriptedExecutor([{"stdout": "no key"}])


def test_no_executor_message():
    res = NoExecutor().execute(req("python", "x.py"))
    assert res.exit_code == 126
    assert "no executor" in res.stderr and "`python x.py`" in res.stderr


def test_registry(tmp_path):
    assert isinstance(make_executor(None), NoExecutor)
    assert isinstance(make_executor("none"), NoExecutor)
    assert isinstance(make_executor("scripted"), ScriptedExecutor)
    (tmp_path / "rules.json").write_text(json.dumps([{"command": "ls", "stdout": "x"}]))
    assert make_executor(f"scripted:{tmp_path / 'rules.json'}").rules[0].command == "ls"
    assert isinstance(make_executor("sweworld.sandbox.executor:NoExecutor"), NoExecutor)
    ex = ScriptedExecutor()
    assert make_executor(ex) is ex
    with pytest.raises(ValueError, match="unknown executor 'magic'"):
        make_executor("magic")
    with pytest.raises(ValueError, match="cannot import"):
        make_executor("nowhere.module:Thing")
    with pytest.raises(TypeError, match="Executor protocol"):
        make_executor(object())


def test_default_answer_when_no_rule_matches():
    from sweworld.execution import ExecutionResult

    ex = ScriptedExecutor(
        [{"command": "ls", "stdout": "x"}],
        default=ExecutionResult(stdout="fallback\n", exit_code=4),
    )
    res = ex.execute(req("python", "anything.py"))
    assert (res.stdout, res.exit_code, res.info["rule"]) == ("fallback\n", 4, False)
    assert ex.execute(req("ls")).info["rule"] is True
