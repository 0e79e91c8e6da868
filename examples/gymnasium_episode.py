"""One Gymnasium episode on the toy task: make the env by id, step it, print the reward.

What it shows: ``gymnasium.make("sweworld/SWEWorld-v0", ...)`` after ``import sweworld``,
gymnasium's own ``TimeLimit`` and sweworld's ``DenseReward`` / ``ShapedOutcome`` wrappers,
a scripted policy (the toy task's demo actions, which fix the bug and submit), and the
final reward with its evidence from ``info`` at the end. ``--random`` runs a random agent
(samples of the action space) instead, cut by the time limit.

It runs real commands in the sandbox and grades the patch by running the task's tests
(``executor="local", reward="real"``, a few seconds on a CPU). To run it in the simulated
world instead, the env's defaults, pass ``--simulated``: the embedded SWT model predicts
the two execution steps and SWR scores the patch (minutes on a 2-core CPU: 5-60 s per
model call).

    python examples/gymnasium_episode.py [--simulated] [--random]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium
from gymnasium.wrappers import TimeLimit

import sweworld  # noqa: F401  (registers sweworld/SWEWorld-v0)
from sweworld.env.gymnasium_wrappers import DenseReward, ShapedOutcome

DATA = Path(__file__).resolve().parents[1] / "data" / "toy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulated", action="store_true", help="SWT executor, SWR reward")
    parser.add_argument("--random", action="store_true", help="a random agent")
    args = parser.parse_args()
    world = {} if args.simulated else {"executor": "local", "reward": "real"}

    env = gymnasium.make("sweworld/SWEWorld-v0", task="sweworld__stockroom-1", **world)
    env = ShapedOutcome(DenseReward(TimeLimit(env, max_episode_steps=12)))
    lines = (DATA / "demo_actions.jsonl").read_text().splitlines()
    actions = [json.loads(line) for line in lines if line.strip()]
    try:
        prompt, info = env.reset(seed=0)
        env.action_space.seed(0)
        print(f"task {info['instance_id']}: prompt of {len(prompt)} characters\n")
        total, step = 0.0, 0
        while True:
            action = env.action_space.sample()[:40] if args.random else actions[step]
            obs, reward, terminated, truncated, info = env.step(action)
            step += 1
            total += reward
            first_line = action.strip().splitlines()[0][:70]
            print(f"step {step:2d}  reward {reward:+.3f}  {first_line}")
            print("         " + obs.strip().replace("\n", "\n         ")[:400])
            if terminated or truncated:
                break
        reason = info.get("reason", "cut by TimeLimit")
        print(f"\nended: {reason}, outcome {info['shaped_outcome']}")
        print(f"return {total:+.3f}")
        final = info.get("reward")
        if final is not None:
            print(
                f"final reward {final['value']} from {final['source']} ({final['status']}), "
                f"resolved: {final['resolved']}"
            )
            print(json.dumps(final["evidence"], indent=2)[:2000])
            print("patch:\n" + info["patch"])
        print("timings:", env.unwrapped.timings)
    finally:
        env.close()


if __name__ == "__main__":
    main()
