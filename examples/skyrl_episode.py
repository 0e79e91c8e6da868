"""One SkyRL episode on sweworld, through skyrl_gym's own ``make`` / ``init`` / ``step``.

What it shows: the calls SkyRL's generator makes for one trajectory. The dataset row comes
from ``skyrl_dataset_row`` (``prompt``, ``env_class="sweworld"``, ``task``); the generator
passes the row without ``prompt`` and ``env_class`` as ``extras`` (plus ``max_turns``) and the
``environment.skyrl_gym.sweworld`` section of its config as ``env_config``. The policy here is
the scripted demo (``data/toy/demo_actions.jsonl``: R2E-Gym calls and bash); commands run for
real and the patch is graded by the real test run. About two seconds on a CPU::

    python examples/skyrl_episode.py

The simulated world: ``python examples/skyrl_episode.py --executor simulated --reward swr``
(SWT predicts what commands print, SWR scores the patch; the embedded default model takes
seconds per call on a CPU; point ``--model`` at a vLLM server,
``openai:http://HOST:8000/v1#swt``, for speed). In SkyRL's YAML the same choice is::

    environment:
      env_class: sweworld
      skyrl_gym:
        sweworld: {executor: simulated, reward: swr, model: "openai:http://HOST:8000/v1#swt"}

and the training entry point must ``import sweworld.env.skyrl_env`` (it registers ``sweworld``).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executor", default="local", help="local | simulated | hybrid")
    parser.add_argument("--reward", default="real", help="real | swr | both")
    parser.add_argument("--model", default="embedded", help="the SWT model (simulated)")
    args = parser.parse_args()

    import skyrl_gym

    from sweworld.env.skyrl_env import skyrl_dataset_row  # registers "sweworld"
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    started = time.perf_counter()
    task = load_tasks(toy_tasks_path())[0]
    row = skyrl_dataset_row(task)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = 20  # SkyRL's generator sets this from generator.max_turns
    env_config = {"executor": args.executor, "reward": args.reward, "model": args.model}
    env = skyrl_gym.make(row["env_class"], env_config=env_config, extras=extras)
    actions_path = toy_tasks_path().parent / "demo_actions.jsonl"
    actions = [json.loads(line) for line in actions_path.read_text().splitlines() if line]
    try:
        messages, meta = env.init(row["prompt"])
        print(f"task {meta['instance_id']}: prompt of {len(messages)} messages")
        print(messages[-1]["content"][:400], "\n")
        for number, action in enumerate(actions, 1):
            out = env.step(action)
            first = action.strip().splitlines()[0]
            if out["observations"]:
                shown = out["observations"][0]["content"]
            else:  # the last step: SkyRL gets no more observations; sweworld keeps it here
                shown = out["metadata"].get("final_observation", "")
            print(f"--- step {number}: {first[:70]}")
            print(shown[:300] + ("..." if len(shown) > 300 else ""))
            if out["done"]:
                break
        meta = out["metadata"]
        reward = meta["reward"]
        print("\n--- patch\n" + meta["patch"])
        print(
            f"done: reason={meta['reason']} reward={out['reward']} "
            f"resolved={reward['resolved']} source={reward['source']} status={reward['status']}"
        )
        print(f"metrics: {env.get_metrics()}  wall time: {time.perf_counter() - started:.1f} s")
    finally:
        env.close()


if __name__ == "__main__":
    main()
