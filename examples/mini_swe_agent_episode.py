"""mini-swe-agent's own agent loop solving the toy task through sweworld.

What it shows: mini-swe-agent 2.x (``DefaultAgent``) loads sweworld's environment by dotted
path from ``examples/mini_swe_agent.yaml`` (with mini's own config loader and
``get_environment``), and mini's ``DeterministicModel`` plays a scripted agent that answers
with bash blocks: look at the code, reproduce the bug, fix it with ``sed``, run the tests,
submit. Each command runs in sweworld's sandbox; the submission is the workspace's patch,
graded by the real test run; the reward and its evidence are printed at the end.

Run it (about 5 s on a CPU, from the repository root)::

    python examples/mini_swe_agent_episode.py

The simulated world: pass ``--simulated`` (SWT predicts what ``python`` and ``pytest``
print with the embedded model, SWR grades the patch: minutes on a CPU), or set
``executor: simulated`` and ``reward: swr`` in the YAML.

A real model instead of the script: drop ``DeterministicModel`` and let mini pick its
litellm model by name, e.g. ``get_model("anthropic/claude-sonnet-4-5-20250929",
config["model"])`` here, or mini's own CLI on the same YAML::

    mini -c examples/mini_swe_agent.yaml -y --exit-immediately -m MODEL_NAME
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # mini's banner

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "mini_swe_agent.yaml"

#: What the scripted agent answers, one bash block each (the fix of the toy task).
SCRIPT = [
    "THOUGHT: Find slugify.\n\n```bash\ngrep -n 'def slugify' -A 11 stockroom/textutil.py\n```",
    "THOUGHT: Reproduce the bug.\n\n```bash\n"
    "python -c \"from stockroom.textutil import slugify; print(repr(slugify('Hello,  World!')))\""
    "\n```",
    "THOUGHT: Collapse runs of separators and strip them at both ends.\n\n```bash\n"
    r"""sed -i 's/return re.sub(r"\[^a-z0-9\]", separator, ascii_text.lower())/"""
    r"""slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n    """
    r"""return slug.strip(separator)/' stockroom/textutil.py"""
    "\n```",
    "THOUGHT: Run the tests.\n\n```bash\npython -m pytest tests/test_textutil.py -q\n```",
    "THOUGHT: Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulated", action="store_true", help="SWT + SWR instead of real runs")
    args = parser.parse_args()

    from minisweagent.agents import get_agent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments import get_environment
    from minisweagent.models.test_models import DeterministicModel, make_output
    from minisweagent.models.utils.actions_text import parse_regex_actions

    config = get_config_from_spec(str(CONFIG))
    if args.simulated:
        config["environment"].update(executor="simulated", reward="swr")
    model_cfg = config["model"]
    outputs = [  # mini's own parser turns each answer into its action
        make_output(
            text,
            parse_regex_actions(
                text,
                action_regex=model_cfg["action_regex"],
                format_error_template=model_cfg["format_error_template"],
            ),
            cost=0.0,
        )
        for text in SCRIPT
    ]
    model = DeterministicModel(
        outputs=outputs, observation_template=model_cfg["observation_template"]
    )
    env = get_environment(config["environment"])  # imports the class by its dotted path
    try:
        agent = get_agent(model, env, config["agent"], default_type="default")
        info = agent.run(config["run"]["task"])
        for message in agent.messages[2:]:
            role = message.get("role")
            text = str(message.get("content", ""))
            print(f"--- {role}\n{text[:600]}")
        result = env.result(info.get("exit_status"))
    finally:
        env.close()
    reward = result["reward"] or {}
    print("=== exit status:", info.get("exit_status"))
    print("=== submission (the workspace's patch):\n" + info.get("submission", ""))
    print(
        f"=== reason={result['reason']} steps={result['steps']} "
        f"reward={reward.get('value')} resolved={reward.get('resolved')} "
        f"source={reward.get('source')} status={reward.get('status')}"
    )
    for source, evidence in (reward.get("evidence") or {}).items():
        print(f"=== evidence ({source}):", json.dumps(evidence, default=str)[:800])
    return 0 if result["resolved"] else 1


if __name__ == "__main__":
    sys.exit(main())
