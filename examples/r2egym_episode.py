"""One R2E-Gym episode on the toy task: R2E-Gym's RepoEnv calls, on sweworld.

What it shows: the calls R2E-Gym's agent makes (``RepoEnv(EnvArgs(ds=row))``, ``reset``,
``add_commands`` with R2E-Gym's tool files, ``runtime.get_task_instruction``, ``step`` with
its ``Action`` objects and their ``<function=...>`` text, ``runtime.get_patch``,
``compute_reward``) made against ``sweworld.env.r2egym_env`` by a scripted policy: the toy
task's demo actions (bash lines become ``execute_bash`` calls), which fix the bug and
submit. Then the gold-patch check R2E-Gym users run to validate a task: a fresh episode,
``apply_patch(gold)``, ``compute_reward()``.

It runs real commands in the sandbox and grades by running the task's tests
(``executor="local", reward="real"``, a few seconds on a CPU). ``--simulated`` runs it in the
simulated world instead (the embedded SWT model predicts execution, SWR scores the patch;
slower on a CPU, 5-60 s per model call).

    python examples/r2egym_episode.py [--simulated]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sweworld import load_tasks
from sweworld.env.r2egym_env import Action, EnvArgs, RepoEnv

DATA = Path(__file__).resolve().parents[1] / "data" / "toy"
R2E_TOOLS = ["tools/file_editor.py", "tools/search.py", "tools/execute_bash.py", "tools/finish.py"]


def scripted_actions() -> list[Action]:
    """The demo, as R2E-Gym's agent would hold it: Action objects."""
    lines = (DATA / "demo_actions.jsonl").read_text().splitlines()
    texts = [json.loads(line) for line in lines if line.strip()]
    return [
        Action.from_string(t)
        if t.lstrip().startswith("<function=")
        else Action("execute_bash", {"cmd": t})
        for t in texts
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulated", action="store_true", help="SWT executor, SWR reward")
    args = parser.parse_args()
    world = {} if args.simulated else {"executor": "local", "reward": "real"}
    row = load_tasks(DATA / "tasks.jsonl")[0].to_row()

    env = RepoEnv(EnvArgs(ds=row), verbose=False, max_steps=20, **world)
    try:
        env.reset()
        env.add_commands(R2E_TOOLS)
        issue = env.runtime.get_task_instruction()
        print(f"task {row['instance_id']}: {issue.splitlines()[0]}\n")
        for step, action in enumerate(scripted_actions(), start=1):
            obs, _, done, info = env.step(action, timeout=90)
            print(f"step {step}  {action.to_bashcmd().splitlines()[0][:80]}")
            print("        " + str(obs).strip().replace("\n", "\n        ")[:300])
            if done:
                break
        print(f"\nended: {info['reason']} after {info['steps']} steps")
        print("patch:\n" + env.runtime.get_patch())
        print(f"compute_reward() = {env.compute_reward()} ({env.last_reward.source})")
    finally:
        env.close()

    with RepoEnv(EnvArgs(ds=row), verbose=False, **world) as check:
        check.reset()
        _, code = check.apply_patch(row["patch"])
        print(
            f"\ngold patch: apply_patch -> exit {code}; compute_reward() = {check.compute_reward()}"
        )


if __name__ == "__main__":
    main()
