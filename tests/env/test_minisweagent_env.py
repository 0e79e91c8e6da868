"""mini-swe-agent 2.x runs on sweworld: its own agent loop, models, parser and loaders.

Every agent here is mini's ``DefaultAgent``; the scripted models are mini's
``DeterministicModel`` (answers turned into actions by mini's own ``parse_regex_actions``,
the text model's parser, so its format-error path runs for real).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import requires_sandbox

pytestmark = requires_sandbox

PROJECT = Path(__file__).resolve().parents[2]
YAML = PROJECT / "examples" / "mini_swe_agent.yaml"
ENV_CLASS = "sweworld.env.minisweagent_env.SWEWorldEnvironment"
TOY_ID = "sweworld__stockroom-1"
SUBMIT = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
FIX = (
    "THOUGHT: collapse and strip separators.\n\n```bash\n"
    r"""sed -i 's/return re.sub(r"\[^a-z0-9\]", separator, ascii_text.lower())/"""
    r"""slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n    """
    r"""return slug.strip(separator)/' stockroom/textutil.py"""
    "\n```"
)
SOLVE = [
    "THOUGHT: find it.\n\n```bash\ngrep -n 'def slugify' -A 11 stockroom/textutil.py\n```",
    "THOUGHT: reproduce.\n\n```bash\npython -c "
    "\"from stockroom.textutil import slugify; print(repr(slugify('Hello,  World!')))\"\n```",
    FIX,
    "THOUGHT: test.\n\n```bash\npython -m pytest tests/test_textutil.py -q\n```",
    SUBMIT,
]


@pytest.fixture
def mini():
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    return pytest.importorskip("minisweagent")


@pytest.fixture
def config(mini):
    """The example YAML, read by mini's own config loader."""
    from minisweagent.config import get_config_from_spec

    return get_config_from_spec(str(YAML))


def scripted_model(config: dict, answers: list[str]):
    """mini's DeterministicModel whose answers go through mini's text parser one by one
    (a ``FormatError`` is raised from ``query`` exactly as mini's text models raise it)."""
    from minisweagent.models.test_models import DeterministicModel, make_output
    from minisweagent.models.utils.actions_text import parse_regex_actions

    cfg = config["model"]

    class ParsingDeterministicModel(DeterministicModel):
        def query(self, messages, **kwargs):
            self.current_index += 1
            text = answers[self.current_index]
            actions = parse_regex_actions(
                text,
                action_regex=cfg["action_regex"],
                format_error_template=cfg["format_error_template"],
            )
            return make_output(text, actions, cost=0.0)

    return ParsingDeterministicModel(outputs=[], observation_template=cfg["observation_template"])


def make_env(manager, **options):
    from sweworld.env.minisweagent_env import SWEWorldEnvironment

    options.setdefault("tasks_file", "toy")
    options.setdefault("instance_id", TOY_ID)
    options.setdefault("executor", "none")
    options.setdefault("reward", "none")
    return SWEWorldEnvironment(manager=manager, **options)


def run_agent(config, env, answers, **agent_options):
    from minisweagent.agents.default import DefaultAgent

    agent_cfg = {k: v for k, v in config["agent"].items() if k != "agent_class"}
    agent_cfg.update(agent_options)
    agent = DefaultAgent(scripted_model(config, answers), env, **agent_cfg)
    return agent, agent.run(config["run"]["task"])


# ---------------------------------------------------------------------- acceptance


def test_mini_agent_resolves_the_toy_task_through_sweworld(config, tmp_path):
    """mini's loader builds the environment by dotted path; mini's DefaultAgent with a
    deterministic model fixes the toy bug with sed; the real reward grades it resolved."""
    from minisweagent.agents import get_agent
    from minisweagent.environments import get_environment

    assert config["environment"]["environment_class"] == ENV_CLASS
    env_cfg = dict(config["environment"], runtime_root=str(tmp_path / "rt"))
    assert env_cfg["executor"] == "local" and env_cfg["reward"] == "real"
    env = get_environment(env_cfg)
    try:
        assert type(env).__module__ + "." + type(env).__name__ == ENV_CLASS
        traj = tmp_path / "run.traj.json"
        agent = get_agent(
            scripted_model(config, SOLVE),
            env,
            dict(config["agent"], output_path=traj),
            default_type="default",
        )
        info = agent.run(config["run"]["task"])
        # the task prompt reached the agent through the env's template variables
        assert "slugify" in agent.messages[1]["content"]
        observations = [m for m in agent.messages if m["role"] == "user"][1:]
        assert "'hello---world-'" in observations[1]["content"]  # the bug, reproduced for real
        assert "passed" in observations[3]["content"]
        assert info["exit_status"] == "Submitted"
        result = env.result()
        patch = result["patch"]
        assert info["submission"] == patch
        assert "+    return slug.strip(separator)" in patch
        assert result["reason"] == "submitted" and result["steps"] == 5
        assert result["resolved"] is True
        assert result["reward"]["value"] == 1.0 and result["reward"]["source"] == "real"
        tests = result["reward"]["evidence"]["real"]["report"][TOY_ID]["tests_status"]
        assert tests["FAIL_TO_PASS"]["success"] and not tests["FAIL_TO_PASS"]["failure"]
        assert info["sweworld"]["resolved"] is True  # the exit message carries the verdict
        saved = json.loads(traj.read_text())  # mini's trajectory file, env info merged in
        assert saved["info"]["exit_status"] == "Submitted"
        assert saved["info"]["sweworld"]["reward"]["resolved"] is True
        assert saved["info"]["config"]["environment_type"] == ENV_CLASS
        assert env.session is None  # freed at submission
        record = env.trajectory()  # the episode's record: what ran (the env's exports first)
        assert record.submission == patch and record.source == "mini-swe-agent"
        assert record.steps[0].command.startswith("export PAGER=cat ")
        assert [step.command.splitlines()[-1].split()[0] for step in record.steps] == [
            "grep",
            "python",
            "sed",
            "python",
            "echo",
        ]
        assert record.meta["exit_status"] == "Submitted"
    finally:
        env.close()
    assert not any((tmp_path / "rt" / "sessions").iterdir())  # no leaked sandbox


def test_simulated_execution_real_files_and_a_real_grade(config, manager):
    """executor=simulated: SWT (here a replay model) answers `python -m pytest`; the sed edit
    is real, so the patch is real and the real reward grades it."""
    from sweworld.models.replay import ReplayLM
    from sweworld.transition.simulated import SimulatedExecutor

    answer = json.dumps(
        {"stdout": ".........  [100%]\n9 passed in 0.05s\n", "stderr": "", "exit_code": 0}
    )
    lm = ReplayLM(lambda messages: answer)
    executor = SimulatedExecutor(lm, mode="blind", step_timeout=30)
    with make_env(manager, executor=executor, reward="real") as env:
        test = "THOUGHT: test.\n\n```bash\npython -m pytest tests/test_textutil.py -q\n```"
        agent, info = run_agent(config, env, [FIX, test, SUBMIT])
        assert "9 passed in 0.05s" in agent.messages[5]["content"]  # the model's prediction
        assert lm.calls and info["exit_status"] == "Submitted"
        assert "slug.strip" in info["submission"]
        assert env.result()["resolved"] is True


# ---------------------------------------------------------------------- submission


def test_submission_is_the_workspace_patch_never_printed_text(mini, manager):
    from minisweagent.exceptions import Submitted

    from sweworld.env import EpisodeFinished

    with make_env(manager) as env:
        env.execute({"command": "echo 'x = 1' > newmod.py"})
        failed = env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; false"})
        assert failed["returncode"] == 1 and env.reason is None  # mini 2.x: exit 0 only
        routed = env.execute(
            {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; python -V; true"}
        )
        assert env.reason is None  # executor output never submits
        assert routed["extra"]["sweworld"]["submission_refused"]
        with pytest.raises(Submitted) as caught:
            env.execute(
                {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 'diff --fake'"}
            )
        message = caught.value.messages[0]
        assert message["role"] == "exit" and message["extra"]["exit_status"] == "Submitted"
        submission = message["extra"]["submission"]
        assert "+x = 1" in submission and "diff --fake" not in submission
        assert message["content"] == submission == env.result()["patch"]
        with pytest.raises(EpisodeFinished, match="ended"):
            env.execute({"command": "ls"})
        assert env.serialize()["info"]["sweworld"]["submitted"] is True


# ---------------------------------------------------------------------- bad actions


def test_format_errors_take_minis_path_and_never_reach_the_sandbox(config, manager):
    no_block = "I think the bug is in slugify."
    two_blocks = "```bash\nls\n```\nand\n```bash\npwd\n```"
    with make_env(manager) as env:
        agent, info = run_agent(config, env, [no_block, two_blocks, SUBMIT])
        errors = [m for m in agent.messages if m.get("extra", {}).get("interrupt_type")]
        assert [m["extra"]["n_actions"] for m in errors] == [0, 2]
        assert "exactly one" in errors[0]["content"]
        assert info["exit_status"] == "Submitted" and env.steps == 1

    with make_env(manager) as env:
        agent, info = run_agent(config, env, [no_block] * 3)
        assert info["exit_status"] == "RepeatedFormatError" and env.steps == 0
        result = env.result(info["exit_status"])
        assert result["reason"] == "error" and result["reward"]["status"] == "not_scored"
        assert "RepeatedFormatError" in result["error"]
        assert env.session is None


def test_action_without_command_is_answered_not_run(mini, manager):
    with make_env(manager) as env:
        for action in ({}, {"command": "  "}, {"command": 3}, "ls"):
            out = env.execute(action)
            assert out["returncode"] == -1 and "no command" in out["exception_info"]
        assert env.steps == 0


# ---------------------------------------------------------------------- limits


def test_command_timeout_is_reported_and_the_episode_goes_on(config, manager):
    with make_env(manager, timeout=1) as env:
        started = time.monotonic()
        agent, info = run_agent(config, env, ["```bash\nsleep 20\n```", SUBMIT])
        assert time.monotonic() - started < 15
        observation = agent.messages[3]
        assert observation["extra"]["exception_type"] == "TimeoutExpired"
        assert observation["extra"]["returncode"] == -1
        assert "<exception>" in observation["content"]
        assert info["exit_status"] == "Submitted"

    with make_env(manager, timeout=60) as env:  # mini's per-call timeout bounds one command
        out = env.execute({"command": "sleep 20"}, timeout=1)
        assert out["returncode"] == -1 and out["extra"]["exception_type"] == "TimeoutExpired"

    with make_env(manager, timeout=1) as env:  # ... but never past the config's timeout
        started = time.monotonic()
        out = env.execute({"command": "sleep 20"}, timeout=60)
        assert out["returncode"] == -1 and time.monotonic() - started < 15
        assert "within 1 s" in out["exception_info"]


def test_step_limits_end_the_episode_with_minis_exits(config, manager):
    from minisweagent.exceptions import LimitsExceeded, TimeExceeded

    from sweworld.env import EpisodeFinished

    with make_env(manager, max_steps=1) as env:  # sweworld's cap
        _agent, info = run_agent(config, env, [FIX, "```bash\nls\n```"])
        assert info["exit_status"] == "LimitsExceeded" and env.steps == 1
        assert env.reason == "max_steps" and "slug.strip" in env.result()["patch"]
        with pytest.raises(EpisodeFinished, match="ended"):
            env.execute({"command": "ls"})

    with make_env(manager, max_steps=1) as env:  # the step that reaches the cap raises
        with pytest.raises(LimitsExceeded) as caught:
            env.execute({"command": "echo 'x = 1' > newmod.py"})
        sweworld = caught.value.messages[0]["extra"]["sweworld"]
        assert sweworld["reason"] == "max_steps" and "+x = 1" in sweworld["patch"]
        with pytest.raises(EpisodeFinished, match="new environment"):
            env.execute({"command": "ls"})

    with make_env(manager, episode={"max_wall_s": 0.001}) as env:  # wall time: TimeExceeded
        with pytest.raises(TimeExceeded):
            env.execute({"command": "ls"})
        assert env.reason == "timeout" and env.result()["exit_status"] == "TimeExceeded"

    with make_env(manager) as env:  # mini's own step limit: the env learns it from result()
        _, info = run_agent(config, env, [FIX, "```bash\nls\n```"], step_limit=1)
        assert info["exit_status"] == "LimitsExceeded" and env.reason is None
        result = env.result(info["exit_status"])
        assert result["reason"] == "max_steps" and "slug.strip" in result["patch"]
        assert env.session is None


def test_one_environment_from_two_threads_is_refused(mini, manager):
    from sweworld.env import EpisodeBusy, EpisodeError

    with make_env(manager) as env:
        worker = threading.Thread(target=env.execute, args=({"command": "sleep 2"},))
        worker.start()
        deadline = time.monotonic() + 10
        while env.steps < 1 and time.monotonic() < deadline:  # the worker holds the episode
            time.sleep(0.01)
        with pytest.raises(EpisodeBusy):
            env.execute({"command": "ls"})
        worker.join()
        assert env.execute({"command": "echo ok"})["output"] == "ok\n"
    with pytest.raises(EpisodeError, match="closed"):
        env.execute({"command": "ls"})


class BrokenExecutor:
    """An executor whose backend is down (every call raises)."""

    name = "broken"

    def execute(self, request):
        raise RuntimeError("the model server is down")


def test_failing_executor_and_reward_end_with_the_reason(config, manager):
    from sweworld.env import EpisodeConfig, EpisodeRewarder

    with make_env(manager, executor=BrokenExecutor()) as env:  # shown to the agent, goes on
        out = env.execute({"command": "python -V"})
        assert "model server is down" in out["output"] and out["returncode"] != 0
        assert "model server is down" in out["extra"]["sweworld"]["executor_error"]
        assert env.reason is None

    with make_env(
        manager, executor=BrokenExecutor(), episode={"end_on_executor_error": True}
    ) as env:
        _agent, info = run_agent(config, env, ["```bash\npython -V\n```", SUBMIT])
        assert info["exit_status"] == "SWEWorldError" and env.reason == "error"
        assert "model server is down" in env.result()["error"]

    broken = EpisodeRewarder(
        EpisodeConfig(reward="real"), manager=manager, real_executor="no_such_executor"
    )
    with make_env(manager, rewarder=broken) as env:
        _, info = run_agent(config, env, [FIX, SUBMIT])
        assert info["exit_status"] == "Submitted" and "slug.strip" in info["submission"]
        result = env.result()
        assert result["reason"] == "error" and "reward failed" in result["error"]
        assert result["reward"]["value"] == 0.0 and env.session is None


# ---------------------------------------------------------------------- config


def test_bad_configs_are_clear_errors(mini, tmp_path):
    from minisweagent.environments import get_environment

    from sweworld.tasks.loaders import TaskNotFoundError

    base = {"environment_class": ENV_CLASS, "runtime_root": str(tmp_path), "executor": "none"}
    with pytest.raises(TaskNotFoundError, match="no task 'sweworld__nope'"):
        get_environment({**base, "tasks_file": "toy", "instance_id": "sweworld__nope"})
    with pytest.raises(ValueError, match="needs a task"):
        get_environment(base)
    with pytest.raises(ValueError, match="needs tasks_file"):
        get_environment({**base, "instance_id": TOY_ID})
    with pytest.raises(ValueError, match=r"problem_statement|instance_id|repo"):
        get_environment({**base, "task": {"repo": "x/y"}})
    with pytest.raises(ValueError, match=r"extra_forbidden|Extra inputs"):
        get_environment({**base, "tasks_file": "toy", "instance_id": TOY_ID, "timout": 3})
    with pytest.raises(ValueError, match="identifiers"):
        get_environment({**base, "tasks_file": "toy", "instance_id": TOY_ID, "env": {"A;B": "1"}})
    with pytest.raises(ValueError, match="bash"):
        get_environment(
            {**base, "tasks_file": "toy", "instance_id": TOY_ID, "interpreter": ["python", "-c"]}
        )
    with pytest.raises(ValueError, match="unknown episode option"):
        get_environment(
            {**base, "tasks_file": "toy", "instance_id": TOY_ID, "episode": {"nope": 1}}
        )


def test_task_row_template_vars_and_env(mini, manager, toy_task):
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models.test_models import DeterministicModel

    with make_env(
        manager, tasks_file="", instance_id="", task=toy_task.to_row(), env={"GREETING": "a b"}
    ) as env:
        assert env.execute({"command": 'echo "$GREETING" && cd stockroom && pwd'})["output"] == (
            "a b\n/testbed/stockroom\n"
        )
        assert env.execute({"command": "pwd"})["output"] == "/testbed\n"  # fresh shell each time
        tvars = env.get_template_vars()
        assert tvars["instance_id"] == TOY_ID and tvars["system"]
        assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in tvars["sweworld_instance_prompt"]
        agent = DefaultAgent(
            DeterministicModel(outputs=[]),
            env,
            system_template="{{ sweworld_system_prompt }}",
            instance_template="{{ problem_statement }} {{ machine }}",
        )
        assert agent._render_template(agent.config.instance_template).startswith(
            toy_task.problem_statement.strip()[:20]
        )
        json.dumps(env.serialize())


def test_importing_the_adapter_does_not_import_mini_swe_agent():
    code = (
        "import sys, sweworld.env.minisweagent_env as m; "
        "assert 'minisweagent' not in sys.modules, 'mini imported'; print(m.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "minisweagent_env" in out.stdout
