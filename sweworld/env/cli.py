"""``sweworld episode``: one whole episode on one task, printed for a human (or as JSONL).

The policy is scripted: a JSONL file of actions (one JSON string per line: an R2E-Gym
function call or a bash command, or a tool-call object), as ``sweworld run`` reads. The
episode is an :class:`~sweworld.env.Episode`: the first observation (the task prompt), each
step (action, observation, exit code), the patch, the final reward with its evidence
(per-stage verdicts, the test report) and why the episode ended.

When the actions run out before the agent submits, the episode is truncated there (reason
``max_steps``) and its patch is still graded, as a trainer would grade an unsubmitted one.

Exit status: 0 when the episode ran to its end, 1 when it ended with reason ``error`` (the
executor or the reward failed), 2 for a configuration error (one ``sweworld: error:`` line).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from typing import Any, TextIO

from sweworld.tasks.fields import MODE_HELP, MODES

__all__ = ["add_episode_parser", "run"]

#: Longest observation the human view prints whole (the episode's own limit still applies;
#: ``--json`` always carries the whole observation).
HUMAN_OBSERVATION_CHARS = 4_000


def add_episode_parser(sub: Any, add_task_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``episode`` to the CLI's subparsers (``add_task_args`` adds --file/--split/--id)."""
    from sweworld.env.config import PROMPT_FORMATS, REWARD_SOURCES
    from sweworld.reward.presets import PRESETS

    help_text = "run one whole episode (prompt, steps, patch, reward and its evidence)"
    p = sub.add_parser("episode", help=help_text, description=help_text)
    add_task_args(p)
    p.add_argument(
        "--actions",
        required=True,
        help="the scripted policy: a JSONL file, one JSON string per line (an R2E-Gym "
        "function call or a bash command) or one tool-call object per line; '-' for stdin",
    )
    p.add_argument(
        "--executor",
        default=None,
        help="what answers execution commands: outcome (default; simulated when --model is "
        "given: the outcome model decides, "
        "the renderer writes), simulated (the SWT language model writes the output), hybrid, "
        "local (real, in the sandbox), none, scripted:RULES.json or a dotted path",
    )
    p.add_argument(
        "--model",
        default=None,
        help="SWT model for --executor simulated/hybrid (default: embedded, the shipped "
        "adapter on SmolLM2-135M; also openai:URL#MODEL, hf:PATH[+ADAPTER], replay:FILE)",
    )
    p.add_argument(
        "--mode",
        default="oracle",
        choices=list(MODES),
        help=MODE_HELP,
    )
    p.add_argument(
        "--reward",
        default="swr",
        choices=list(REWARD_SOURCES),
        help="final reward: swr (default: the reward model's stages), real (the task's tests "
        "run for real), both (real is the reward, SWR's verdict beside it) or none",
    )
    p.add_argument(
        "--reward-preset",
        default="binary",
        choices=list(PRESETS),
        help="how the verdict becomes a number (default: binary)",
    )
    p.add_argument(
        "--swr-stages",
        default=None,
        help="comma-separated SWR stages to run (default: all of syntax,typecheck,semantic,"
        "tests; without tests SWR cannot confirm a fix and says undetermined)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="step limit (default: the number of actions; at most that many are taken)",
    )
    p.add_argument(
        "--step-timeout",
        type=float,
        default=300.0,
        help="seconds one step may take, model calls included (default 300)",
    )
    p.add_argument(
        "--prompt-format",
        default="r2egym",
        choices=list(PROMPT_FORMATS),
        help="first observation: r2egym (default: tool descriptions and the issue), mini "
        "(mini-swe-agent's instance template) or plain (the problem statement)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the simulator and the reward")
    p.add_argument(
        "--json", action="store_true", help="print JSONL events instead of the human view"
    )
    p.add_argument(
        "--trajectory-out",
        default=None,
        help="write the episode's Trajectory (the data schema) to this JSON file",
    )


def _config(args: argparse.Namespace, n_actions: int) -> Any:
    """The episode config the options name (a ValueError says what is wrong)."""
    from sweworld.env.config import EpisodeConfig

    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be a positive integer, not {args.max_steps}")
    if not args.step_timeout > 0:
        raise ValueError(f"--step-timeout must be positive, not {args.step_timeout}")
    stages = None
    if args.swr_stages is not None:
        stages = tuple(s.strip() for s in args.swr_stages.split(",") if s.strip())
        from sweworld.reward.model import STAGE_NAMES

        unknown = [s for s in stages if s not in STAGE_NAMES]
        if unknown or not stages:
            raise ValueError(
                f"--swr-stages: unknown stage(s) {unknown or [args.swr_stages]}; "
                f"use a comma-separated subset of {','.join(STAGE_NAMES)}"
            )
    max_steps = min(args.max_steps or n_actions, n_actions)
    return EpisodeConfig(
        max_steps=max_steps,
        step_timeout_s=args.step_timeout,
        prompt_format=args.prompt_format,
        executor=args.executor or ("simulated" if args.model else "outcome"),
        model=args.model or "embedded",
        mode=args.mode,
        reward=args.reward,
        reward_preset=args.reward_preset,
        swr_stages=stages,
        seed=args.seed,
        record=True,
    )


def _read_actions(args: argparse.Namespace) -> list[Any]:
    from sweworld.cli_inputs import read_actions, read_input

    source = "<stdin>" if args.actions == "-" else args.actions
    text = read_input(args.actions, "actions file")
    actions = list(read_actions(text.split("\n"), source))
    if not actions:
        raise ValueError(f"actions file {source} holds no action")
    return actions


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``sweworld episode``; the exit status (see the module docstring)."""
    from sweworld.cli_inputs import task_from_args
    from sweworld.env.episode import Episode
    from sweworld.world import LM_EXECUTORS, World, require_lm

    out = out or sys.stdout
    actions = _read_actions(args)
    config = _config(args, len(actions))
    task = task_from_args(args)
    if config.executor in LM_EXECUTORS:
        require_lm(config.model, f"sweworld episode --executor {config.executor}")
    world = World.for_episode(config)
    world.executor  # noqa: B018 (a bad executor or model spec is said before anything runs)
    view = JsonView(out) if args.json else HumanView(out)
    with world, Episode(task, config, world=world) as episode:
        view.start(episode)
        prompt, info = episode.reset()
        view.prompt(prompt, info)
        outcome = None
        for action in actions:
            outcome = episode.step(action)
            view.step(episode, action, outcome)
            if outcome.done:
                break
        assert outcome is not None and outcome.done  # max_steps <= len(actions)
        view.end(episode, outcome)
        if args.trajectory_out:
            write_trajectory(episode, args.trajectory_out)
        return 1 if episode.reason == "error" else 0


def write_trajectory(episode: Any, path: str) -> None:
    """Write the episode's Trajectory as JSON (the data schema's fields, steps as objects)."""
    import dataclasses
    from pathlib import Path

    record = dataclasses.asdict(episode.trajectory())
    Path(path).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------- views


def _execution_source(info: dict[str, Any]) -> str:
    calls = info.get("execution_calls") or []
    kinds = []
    for call in calls:
        call_info = call.get("info") or {}
        kinds.append("real" if call_info.get("executed") else str(call.get("executor", "?")))
    return ", ".join(dict.fromkeys(kinds))


class HumanView:
    """The episode as a person reads it in a terminal."""

    def __init__(self, out: TextIO):
        self.out = out

    def _print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def _block(self, text: str, limit: int | None = None) -> None:
        if limit is not None and len(text) > limit:
            cut = len(text) - limit
            text = (
                text[: limit // 2]
                + f"\n[... {cut} characters not shown ...]\n"
                + text[-limit // 2 :]
            )
        self._print(textwrap.indent(text.rstrip("\n") or "(empty)", "    ", lambda _: True))

    def start(self, episode: Any) -> None:
        cfg = episode.config
        task = episode.task
        executor = cfg.executor
        if executor in ("simulated", "hybrid"):
            executor = f"{executor} (SWT model {cfg.model}, {cfg.mode})"
        elif isinstance(executor, str) and executor.partition(":")[0] == "outcome":
            executor = f"{executor} (outcome model decides, renderer writes; {cfg.mode})"
        reward = cfg.reward
        if reward in ("swr", "both"):
            from sweworld.reward.model_types import DEFAULT_STAGES

            stages = tuple(cfg.swr_stages or DEFAULT_STAGES)
            judge = "task's tests by the outcome model" if cfg.mode == "oracle" else "verdict"
            if "tests" in stages:
                judge = f"test report by {cfg.swr_model}"
            reward = f"{reward} ({','.join(stages)} + {judge}; {cfg.mode})"
        self._print(f"== episode on {task.instance_id} ({task.repo})")
        self._print(f"   executor: {executor}")
        self._print(f"   reward:   {reward}, preset {cfg.reward_preset}")
        self._print(f"   limits:   {cfg.max_steps} steps, {cfg.step_timeout_s:g} s per step")

    def prompt(self, prompt: str, info: dict[str, Any]) -> None:
        self._print(f"\n== prompt (first observation, {len(prompt)} characters)")
        self._block(prompt)

    def step(self, episode: Any, action: Any, outcome: Any) -> None:
        info = outcome.info
        label = info.get("tool") or info.get("action_error") or "action"
        self._print(f"\n== step {info['step']}/{episode.config.max_steps} [{label}]")
        text = action if isinstance(action, str) else json.dumps(action)
        self._block(text)
        self._print("  ->")
        self._block(outcome.observation, HUMAN_OBSERVATION_CHARS)
        facts = [f"exit {info.get('exit_code')}"]
        source = _execution_source(info)
        if source:
            facts.append(f"execution: {source}")
        if info.get("latency_s") is not None:
            facts.append(f"{info['latency_s']:.2f} s")
        signals = info.get("signals") or {}
        if signals.get("tests_delta"):
            facts.append(f"tests passing {signals['tests_passing']:.0%}")
        if info.get("executor_error"):
            facts.append(f"executor: {info['executor_error']}")
        self._print("   " + " · ".join(facts))

    def end(self, episode: Any, outcome: Any) -> None:
        info = outcome.info
        patch = info.get("patch") or ""
        self._print("\n== patch")
        self._block(patch or "(no change)")
        reward = info.get("reward") or {}
        self._print("\n== reward")
        self._print(
            f"   {reward.get('value')} (resolved: {reward.get('resolved')}, source: "
            f"{reward.get('source')}, status: {reward.get('status')}, "
            f"{reward.get('latency_s', 0.0):.1f} s)"
        )
        if reward.get("error"):
            self._print(f"   error: {reward['error']}")
        evidence = reward.get("evidence") or {}
        swr = evidence.get("swr")
        if swr:
            self._print(f"   SWR: {swr.get('status')}, score {_num(swr.get('score'))}")
            for name, stage in (swr.get("stages") or {}).items():
                score = _num(stage.get("score"))
                self._print(
                    f"     {name:<10} {stage.get('verdict', '?'):<5} score {score:<5} "
                    f"{stage.get('message', '')}"
                )
            why = (swr.get("info") or {}).get("undetermined")
            if why:
                self._print(f"     undetermined: {why}")
            self._report(swr.get("report"))
        real = evidence.get("real")
        if real:
            self._print(f"   real test run: {real.get('status')}, resolved {real.get('resolved')}")
            if real.get("reason"):
                self._print(f"     {real['reason']}")
            self._report(real.get("report"))
        end = "terminated" if outcome.terminated else "truncated"
        self._print(
            f"\n== end: {info.get('reason')} ({end}) after {info.get('steps')} step(s), "
            f"{info.get('wall_s', 0.0):.1f} s"
        )
        if info.get("error"):
            self._print(f"   error: {info['error']}")

    def _report(self, report: Any) -> None:
        """One line per test list of a SWE-bench shaped report (``{id: {tests_status}}``)."""
        if not isinstance(report, dict) or not report:
            return
        inner = next(iter(report.values())) if "tests_status" not in report else report
        status = inner.get("tests_status") if isinstance(inner, dict) else None
        if not isinstance(status, dict):
            return
        for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            lists = status.get(group) or {}
            ok, bad = lists.get("success") or [], lists.get("failure") or []
            if ok or bad:
                line = f"     {group}: {len(ok)}/{len(ok) + len(bad)} pass"
                if bad:
                    line += f" (failing: {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''})"
                self._print(line)


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


class JsonView:
    """The episode as JSONL events: ``start``, ``reset``, one ``step`` per step, ``end``."""

    def __init__(self, out: TextIO):
        self.out = out

    def _emit(self, event: dict[str, Any]) -> None:
        print(json.dumps(event, default=str), file=self.out, flush=True)

    def start(self, episode: Any) -> None:
        self._emit({"event": "start", "config": episode.config.to_dict()})

    def prompt(self, prompt: str, info: dict[str, Any]) -> None:
        self._emit({"event": "reset", "observation": prompt, "info": info})

    def step(self, episode: Any, action: Any, outcome: Any) -> None:
        info = {k: v for k, v in outcome.info.items() if k not in ("patch", "reward")}
        self._emit(
            {
                "event": "step",
                "action": action,
                "observation": outcome.observation,
                "exit_code": outcome.info.get("exit_code"),
                "reward": outcome.reward,
                "terminated": outcome.terminated,
                "truncated": outcome.truncated,
                "info": info,
            }
        )

    def end(self, episode: Any, outcome: Any) -> None:
        info = outcome.info
        self._emit(
            {
                "event": "end",
                "reason": info.get("reason"),
                "terminated": outcome.terminated,
                "truncated": outcome.truncated,
                "steps": info.get("steps"),
                "patch": info.get("patch", ""),
                "reward": info.get("reward"),
                "rewards": list(episode.rewards),
                "error": info.get("error"),
                "wall_s": info.get("wall_s"),
            }
        )
