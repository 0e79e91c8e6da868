"""R2E-Gym's RepoEnv on sweworld, driven with the actions R2E-Gym's agent sends.

R2E-Gym is not on the package index. Where its source is on this machine (a bare mirror,
``$SWEWORLD_R2EGYM_REPO``), its own ``Action`` and ``Observation`` classes are loaded from it
and run against the adapter: its parser makes the actions and its ``Observation.__str__``
must print what the adapter's observations print. Elsewhere those tests skip and the others
use the same action strings, written out.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweworld.env import EpisodeBusy, EpisodeFinished
from sweworld.env.r2egym_env import (
    RESET_OBSERVATION,
    Action,
    EnvArgs,
    Observation,
    RepoEnv,
    task_instruction,
)
from sweworld.sandbox.render import R2E_CONTINUE_MSG, R2E_FINISHED, render_r2egym
from sweworld.sandbox.tools.execute_bash import format_outcome
from sweworld.tasks.toy import toy_tasks_path

R2E_TOOL_FILES = [
    "./src/r2egym/agenthub/tools/file_editor.py",
    "./src/r2egym/agenthub/tools/search.py",
    "./src/r2egym/agenthub/tools/execute_bash.py",
    "./src/r2egym/agenthub/tools/finish.py",
]


def r2egym_source() -> Path | None:
    """A clone or mirror of R2E-Gym: ``$SWEWORLD_R2EGYM_REPO``, else ``R2E-Gym__R2E-Gym(.git)``
    in a repository cache (``$SWEWORLD_REPO_CACHE``, the shared data's, the user cache)."""
    named = os.environ.get("SWEWORLD_R2EGYM_REPO")
    if named:
        return Path(named)
    from sweworld.sandbox.repos import repo_cache_dirs

    from ..conftest import shared_data_dir

    for folder in [*repo_cache_dirs(), shared_data_dir() / "repo-cache"]:
        for name in ("R2E-Gym__R2E-Gym.git", "R2E-Gym__R2E-Gym"):
            if (folder / name).is_dir():
                return folder / name
    return None


R2E_MIRROR = r2egym_source()
R2E_FILES = [
    "src/r2egym/__init__.py",
    "src/r2egym/agenthub/__init__.py",
    "src/r2egym/agenthub/action/__init__.py",
    "src/r2egym/agenthub/action/action.py",
    "src/r2egym/agenthub/observation/__init__.py",
    "src/r2egym/agenthub/observation/observation.py",
]


def as_call(command: str) -> str:
    """A bash command as R2E-Gym's agent sends it (``Action.to_xml_string`` layout)."""
    return f"<function=execute_bash>\n  <parameter=cmd>{command}</parameter>\n</function>"


def demo_calls() -> list[str]:
    """The toy task's demo, every step an R2E-Gym function call."""
    path = toy_tasks_path().parent / "demo_actions.jsonl"
    actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [a if a.lstrip().startswith("<function=") else as_call(a) for a in actions]


def make_env(task, manager, **options) -> RepoEnv:
    options.setdefault("executor", "local")
    options.setdefault("reward", "real")
    options.setdefault("max_steps", 20)
    return RepoEnv(EnvArgs(ds=task.to_row()), manager=manager, **options)


@pytest.fixture(scope="module")
def r2egym(tmp_path_factory):
    """R2E-Gym's own ``r2egym.agenthub`` action and observation modules, from its source."""
    if R2E_MIRROR is None or not (
        (R2E_MIRROR / "HEAD").is_file() or (R2E_MIRROR / ".git").exists()
    ):
        pytest.skip(
            "R2E-Gym's source is not here (it is not on the package index and CI cannot clone "
            "it): set $SWEWORLD_R2EGYM_REPO to a clone or mirror of github.com/R2E-Gym/R2E-Gym, "
            f"or put R2E-Gym__R2E-Gym.git in $SWEWORLD_REPO_CACHE (looked: {R2E_MIRROR})"
        )
    root = tmp_path_factory.mktemp("r2egym-src")
    for name in R2E_FILES:
        text = subprocess.run(
            ["git", "-C", str(R2E_MIRROR), "show", f"HEAD:{name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        target = root / name.removeprefix("src/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    sys.path.insert(0, str(root))
    try:
        yield (
            importlib.import_module("r2egym.agenthub.action").Action,
            importlib.import_module("r2egym.agenthub.observation").Observation,
        )
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == "r2egym" or m.startswith("r2egym.")]:
            del sys.modules[module]


# --------------------------------------------------------------------------- agent loop


def test_r2egym_agent_loop_resolves_the_toy_task(toy_task, manager):
    """R2E-Gym's agent calls, in its order, to a resolved task under the real reward."""
    with make_env(toy_task, manager) as env:
        assert env.reset() == RESET_OBSERVATION
        env.add_commands(R2E_TOOL_FILES)
        assert [c.name for c in env.commands] == ["file_editor", "search", "execute_bash", "finish"]
        assert "slugify()" in env.runtime.get_task_instruction()
        test_patch = env.runtime.commit.get_patch(test_file=True, non_test_file=False)
        assert test_patch == toy_task.test_patch
        assert dataclasses.asdict(env.args)["ds"]["instance_id"] == toy_task.instance_id
        assert env.runtime.docker_image and env.runtime.repo_name == toy_task.repo

        seen = []
        for call in demo_calls():
            action = Action.from_string(call)
            obs, reward, done, info = env.step(action, timeout=90)
            seen.append(obs)
            assert isinstance(obs, Observation) and obs.action == action
            assert reward == 0.0 and isinstance(info["total_time"], float)
            if done:
                break
        assert done and info["reason"] == "submitted"
        assert str(seen[-1]) == R2E_FINISHED
        search = str(seen[1])
        assert search.startswith("Execution output of [search]:\nFound 1 matches")
        pytest_run = str(seen[-2])
        assert pytest_run.startswith("Exit code: 0\nExecution output of [execute_bash]:\n")
        assert "9 passed" in pytest_run

        patch = env.runtime.get_patch()
        assert patch == env.get_patch() == info["patch"]
        assert '+    slug = re.sub(r"[^a-z0-9]+", separator' in patch
        assert env.compute_reward() == 1.0
        assert env.last_reward is env.episode.final and env.last_reward.resolved is True
        report = env.last_reward.evidence["real"]["report"][toy_task.instance_id]
        assert report["resolved"] is True

        with pytest.raises(EpisodeFinished):
            env.step(as_call("ls"))
        assert env.compute_reward() == 1.0  # cached, still answers after the end
        assert env.reset() == RESET_OBSERVATION  # a fresh sandbox
        assert env.get_patch() == ""


def test_observations_are_sweworlds_r2egym_renderings(toy_task, manager):
    with make_env(toy_task, manager, reward="none") as env:
        env.reset()
        long = as_call("seq 1 200")
        failing = as_call("ls /testbed/missing")
        view = (
            "<function=file_editor>\n  <parameter=command>view</parameter>\n"
            "  <parameter=path>/testbed/stockroom/textutil.py</parameter>\n"
            "  <parameter=view_range>[1, 3]</parameter>\n</function>"
        )
        for call, code in ((failing, 2), (view, 0)):
            obs, _, done, info = env.step(call)
            tool = obs.action.function_name
            assert not done and info["exit_code"] == code
            assert str(obs) == render_r2egym(tool, obs.bash_output, code) == obs.render()
        obs, *_ = env.step(long)
        seq = "".join(f"{i}\n" for i in range(1, 201))
        assert str(obs) == render_r2egym("execute_bash", format_outcome(seq, "", 0), 0)
        assert "<Observation truncated in middle for saving context>" in str(obs)
        assert str(obs).count("\n") < 100
        obs, *_ = env.step(failing)
        assert obs.error_code == "Error: Exit code 2"
        assert str(obs).startswith("Exit code: Error: Exit code 2\n")


def test_actions_read_and_write_r2egyms_format():
    text = (
        "I will look.\n<function = file_editor>\n  <parameter=command>view</parameter>\n"
        "  <parameter=path>/testbed/a b.py</parameter>\n</function>\n<parameter=x>1</parameter>"
    )
    action = Action.from_string(text)
    assert action.function_name == "file_editor"
    assert action.parameters == {"command": "view", "path": "/testbed/a b.py"}
    assert Action.from_string(str(action)) == action
    assert action.to_bashcmd() == "file_editor view --path '/testbed/a b.py'"
    assert Action("finish", {"command": "submit"}).to_bashcmd() == "echo '<<<Finished>>>'"
    assert Action.from_string("no call here") == Action("", {})
    assert Action.from_string("<parameter=a>" * 20_000).function_name == ""  # linear


def test_r2egyms_own_action_and_observation_agree(r2egym, toy_task, manager):
    """R2E-Gym's own parser makes the actions; its own Observation prints ours."""
    r2e_action, r2e_observation = r2egym
    with make_env(toy_task, manager) as env:
        env.reset()
        for call in demo_calls():
            theirs = r2e_action.from_string(call)
            assert str(Action.from_string(call)) == theirs.to_xml_string()
            assert Action.from_string(call).to_bashcmd() == theirs.to_bashcmd()
            obs, _, done, _ = env.step(theirs)  # their Action object, as their agent passes it
            assert str(r2e_observation(obs.bash_output, obs.error_code, theirs)) == str(obs)
        assert done and env.compute_reward() == 1.0


# --------------------------------------------------------------------------- patches


def test_gold_patch_applied_then_rewarded(toy_task, manager):
    with make_env(toy_task, manager) as env:
        assert env.compute_reward() == 0.0  # the base itself does not resolve the task
        assert env.apply_patch(toy_task.patch) == ("", "0")
        assert env.get_patch().count("diff --git") == 1
        assert env.compute_reward() == 1.0  # graded in its own sandbox; the episode goes on
        assert not env.done and env.episode.steps == 0
        assert env.runtime.reverse_patch(toy_task.patch)[1] == "0"
        assert env.get_patch() == ""
        output, code = env.apply_patch("not a diff\n")
        assert code == "Error: Exit code 128" and "No valid patches" in output
        assert env.runtime.run("ls", workdir="/testbed/stockroom")[1] == "0"
        assert env.runtime.run("exit 3") == ("", "Error: Exit code 3")


# --------------------------------------------------------------------------- bad input


def test_bad_actions_are_answered_not_run(toy_task, manager):
    with make_env(toy_task, manager, reward="none", max_steps=4) as env:
        env.reset()
        mini = "THOUGHT: list\n\n```bash\ntouch /testbed/made_by_mini\n```"
        obs, _, done, info = env.step(mini)  # a mini-swe-agent answer: no function call
        assert str(obs) == R2E_CONTINUE_MSG and not done and info["action_error"] == "parse"
        assert obs.action.function_name == "" and obs.bash_output == ""
        obs, _, done, _ = env.step("<function=frobnicate>\n<parameter=x>1</parameter>\n</function>")
        assert "Unknown tool 'frobnicate'" in str(obs) and not done
        with pytest.raises(TypeError):
            env.step(42)
        with pytest.raises(ValueError):
            env.step(as_call("ls"), timeout=-1)
        assert env.get_patch() == ""  # nothing ran
        obs, _, done, info = env.step(as_call("ls"))
        obs, _, done, info = env.step(Action("search", {"search_term": "slugify"}))
        assert done and info["reason"] == "max_steps" and env.episode.final is not None
        with pytest.raises(EpisodeFinished):
            env.step(as_call("ls"))
        with pytest.raises(EpisodeFinished):
            env.apply_patch(toy_task.patch)


def test_bad_rows_and_commands(toy_task, manager):
    row = toy_task.to_row()
    with pytest.raises(ValueError, match="instance_id"):
        RepoEnv(EnvArgs(ds={k: v for k, v in row.items() if k != "instance_id"}))
    with pytest.raises(ValueError):
        RepoEnv(EnvArgs(ds={}))
    with pytest.raises(TypeError):
        RepoEnv(row)
    with make_env(toy_task, manager, reward="none") as env:
        with pytest.raises(ValueError, match="search_dir"):
            env.add_commands(["tools/search_dir.py"])
        env.add_commands(["sweagent/str_replace_editor.py", "sweagent/submit.py"])
        assert [c.name for c in env.commands] == ["file_editor", "finish"]
    with pytest.raises(Exception, match="closed"):
        env.reset()


def test_one_env_from_two_threads_is_refused(toy_task, manager):
    with make_env(toy_task, manager, reward="none") as env:
        env.reset()
        worker = threading.Thread(target=env.step, args=(as_call("sleep 1.5"),))
        worker.start()
        time.sleep(0.4)
        with pytest.raises(EpisodeBusy):
            env.step(as_call("ls"))
        worker.join()
        obs, *_ = env.step(as_call("echo after"))
        assert "after" in obs.bash_output


def test_task_instruction_takes_the_issue_block():
    assert task_instruction("x [ISSUE]the bug[/ISSUE] y") == "the bug"
    assert task_instruction("plain statement") == "plain statement"
    assert task_instruction("[/ISSUE] then [ISSUE]") == "[/ISSUE] then [ISSUE]"
