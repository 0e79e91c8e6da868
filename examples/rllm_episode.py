"""rLLM's SWE environment on sweworld: one episode the way rLLM's engine runs it, then a
batch of episodes from a thread pool.

What it shows: ``SWEEnv.from_dict`` on a dataset row merged with ``env_args`` (sweworld's
options under the ``sweworld`` key), ``reset`` returning the issue text, ``step`` with the
``<function=...>`` text rLLM's SWE agent sends (here a scripted policy: the toy task's demo
actions, which fix the bug and submit), the 4-tuple it returns, ``compute_final_reward``
and ``close``; then four envs stepped at once from threads (``is_multithread_safe()`` is
True), two of which fix the bug, with the reward of each.

It runs real commands in the sandbox and grades by running the task's tests
(``executor="local", reward="real"``, seconds on a CPU). ``--simulated`` runs it in the
simulated world instead (the embedded SWT model predicts execution, SWR scores the patch;
slower on a CPU, 5-60 s per model call).

    python examples/rllm_episode.py [--simulated]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
from pathlib import Path

from sweworld import load_tasks
from sweworld.env.r2egym_env import Action
from sweworld.env.rllm_env import SWEEnv

DATA = Path(__file__).resolve().parents[1] / "data" / "toy"


def agent_actions() -> list[str]:
    """The demo, as rLLM's SWE agent sends it: R2E-Gym ``<function=...>`` text."""
    lines = (DATA / "demo_actions.jsonl").read_text().splitlines()
    texts = [json.loads(line) for line in lines if line.strip()]
    return [
        t if t.lstrip().startswith("<function=") else str(Action("execute_bash", {"cmd": t}))
        for t in texts
    ]


def rollout(row: dict, options: dict, actions: list[str], show: bool = False) -> float:
    env = SWEEnv.from_dict({**row, "sweworld": options})
    try:
        observation, info = env.reset()
        if show:
            print(f"reset -> issue text ({len(observation)} characters), info {sorted(info)}")
        for action in actions:
            observation, reward, done, info = env.step(action)
            if show:
                text = " | ".join(line for line in observation.splitlines() if line.strip())
                print(f"  step -> reward {reward}, done {done}: {text[:110]}")
            if done:
                break
        return env.compute_final_reward()
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulated", action="store_true", help="SWT executor, SWR reward")
    args = parser.parse_args()
    options = {"max_steps": 20}
    if not args.simulated:
        options.update(executor="local", reward="real")
    row = load_tasks(DATA / "tasks.jsonl")[0].to_row()
    demo = agent_actions()

    print(f"is_multithread_safe: {SWEEnv.is_multithread_safe()}")
    reward = rollout(row, options, demo, show=True)
    print(f"compute_final_reward() = {reward}\n")

    submit = demo[-1]
    policies = [demo, [submit], demo, [*demo[:3], submit]]  # 0 and 2 fix the bug
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        rewards = list(pool.map(lambda acts: rollout(row, options, acts), policies))
    print(f"4 envs from 4 threads: rewards {rewards}")


if __name__ == "__main__":
    main()
