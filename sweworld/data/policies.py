"""Policies that collect mode runs against a real executor.

A :class:`Policy` is what decides the next action of an episode: ``reset(task,
first_observation)`` starts an episode (the first observation is the task's problem
statement), ``act(observation)`` returns the next action (a string or a tool-call mapping,
as :meth:`~sweworld.sandbox.session.Session.step` takes them) or ``None`` to stop. The
first ``act`` of an episode gets the first observation again; after that, the observation
of the previous action.

A policy may set ``action_format`` (see :func:`~sweworld.sandbox.actions.parse_action`):
the collector parses each action with it before it reaches the session, and an action
that does not parse is not run: its format error is the next observation (as
mini-swe-agent answers a response without exactly one bash block). ``stop_reason`` says
why a policy stopped (``""`` while it runs).

Three policies, by short spec (:func:`make_policy`):

* ``scripted:FILE``: :class:`ScriptedPolicy`, a fixed list of actions (a JSON list, JSON
  Lines of strings or tool-call objects, or one command per line);
* ``trajectory:FILE[#INSTANCE]``: :class:`TrajectoryPolicy`, the actions of recorded
  :class:`~sweworld.data.schema.Trajectory` lines (``dataclasses.asdict`` of one per line,
  as ``trajectories.jsonl`` holds them), the one of the task's instance unless ``INSTANCE``
  names one;
* ``openai:URL#MODEL``: :class:`OpenAIPolicy`, an agent behind an OpenAI-compatible
  endpoint, in a mini-swe-agent-style loop.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sweworld.data.schema import Trajectory, TrajectoryStep

__all__ = [
    "POLICY_KINDS",
    "OpenAIPolicy",
    "Policy",
    "ScriptedPolicy",
    "TrajectoryPolicy",
    "load_trajectories",
    "make_policy",
    "make_policy_factory",
    "read_action_file",
]

Action = str | Mapping[str, Any]

POLICY_KINDS = ("scripted", "trajectory", "openai")


@runtime_checkable
class Policy(Protocol):
    """Chooses the actions of an episode (see the module docstring)."""

    def reset(self, task: Any, first_observation: str) -> None: ...

    def act(self, observation: str) -> Action | None: ...


# ------------------------------------------------------------------------------------------
# Scripted: a fixed list of actions
# ------------------------------------------------------------------------------------------


def read_action_file(path: str | Path) -> list[Action]:
    """The actions of a file: a JSON list (strings or tool-call objects), JSON Lines (each
    line a JSON string or object), or else one command per non-blank line.

    Raises ``ValueError`` for an unreadable or empty file, or a JSON list holding something
    other than strings and objects.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the actions ({exc})") from None
    actions: list[Action] | None = None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, list):
            bad = [i for i, a in enumerate(data) if not isinstance(a, (str, dict))]
            if bad:
                raise ValueError(f"{path}: item {bad[0]} is neither a command nor an object")
            actions = data
    if actions is None:
        lines = [line for line in text.splitlines() if line.strip()]
        parsed = [_json_action(line) for line in lines]
        if lines and all(a is not None for a in parsed):
            actions = parsed  # type: ignore[assignment]
        else:
            actions = [line.strip() for line in lines]
    actions = [a for a in actions if not (isinstance(a, str) and not a.strip())]
    if not actions:
        raise ValueError(f"{path}: no action in the file")
    return actions


def _json_action(line: str) -> Action | None:
    """A JSON Lines action (a JSON string or object), or None when the line is not one."""
    stripped = line.strip()
    if not stripped.startswith(('"', "{")):
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (str, dict)) else None


class ScriptedPolicy:
    """Plays a fixed list of actions, the same for every task, then stops."""

    action_format = "auto"

    def __init__(self, actions: Sequence[Action], *, name: str = "scripted"):
        self.actions = list(actions)
        self.name = name
        self.stop_reason = ""
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        """The actions of ``path`` (see :func:`read_action_file`)."""
        return cls(read_action_file(path), name=f"scripted:{path}")

    def reset(self, task: Any, first_observation: str) -> None:
        self._next = 0
        self.stop_reason = ""

    def act(self, observation: str) -> Action | None:
        if self._next >= len(self.actions):
            self.stop_reason = "script finished"
            return None
        action = self.actions[self._next]
        self._next += 1
        return action


# ------------------------------------------------------------------------------------------
# Trajectory: replay a recorded run's actions
# ------------------------------------------------------------------------------------------


def trajectory_from_dict(row: Mapping[str, Any]) -> Trajectory:
    """A :class:`Trajectory` from ``dataclasses.asdict`` of one (unknown keys ignored).

    Raises ``ValueError`` when a required field is missing or a step is not an object.
    """
    names = {f.name for f in fields(Trajectory)}
    data = {k: v for k, v in row.items() if k in names}
    missing = [n for n in ("source", "instance_id", "repo", "task") if n not in data]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    step_names = {f.name for f in fields(TrajectoryStep)}
    steps = []
    for i, step in enumerate(data.get("steps") or []):
        if not isinstance(step, Mapping) or "command" not in step:
            raise ValueError(f"step {i} is not a step object with a 'command'")
        steps.append(TrajectoryStep(**{k: v for k, v in step.items() if k in step_names}))
    data["steps"] = steps
    if not isinstance(data["task"], Mapping):
        raise ValueError("'task' is not an object")
    return Trajectory(**data)


def load_trajectories(path: str | Path) -> tuple[list[Trajectory], list[str]]:
    """The trajectories of a JSON Lines file and, for each line that is not one, why.

    Raises ``ValueError`` when the file cannot be read or holds no trajectory at all.
    """
    trajectories: list[Trajectory] = []
    errors: list[str] = []
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the trajectories ({exc})") from None
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    if not isinstance(row, Mapping):
                        raise ValueError(f"a {type(row).__name__}, not an object")
                    trajectories.append(trajectory_from_dict(row))
                except (ValueError, TypeError, RecursionError) as exc:
                    errors.append(f"{path} line {number}: not a trajectory ({exc})")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    if not trajectories:
        detail = f": {errors[0]}" if errors else ""
        raise ValueError(f"{path}: no trajectory in the file{detail}")
    return trajectories, errors


class TrajectoryPolicy:
    """Replays the actions of recorded trajectories (``step.action or step.command``).

    Args:
        trajectories: the recorded runs.
        instance: replay this instance's trajectory on every task; None: the trajectory of
            the task being reset (a task with none raises ``LookupError`` at ``reset``).
    """

    action_format = "auto"

    def __init__(
        self,
        trajectories: Sequence[Trajectory],
        *,
        instance: str | None = None,
        name: str = "trajectory",
        load_errors: Sequence[str] = (),
    ):
        self.by_instance: dict[str, Trajectory] = {}
        for trajectory in trajectories:
            self.by_instance.setdefault(trajectory.instance_id, trajectory)
        if instance is not None and instance not in self.by_instance:
            raise ValueError(f"no trajectory of instance {instance!r}")
        self.instance = instance
        self.name = name
        self.load_errors = list(load_errors)
        self.stop_reason = ""
        self._actions: list[Action] = []
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path, instance: str | None = None) -> TrajectoryPolicy:
        """The trajectories of a JSON Lines file (see :func:`load_trajectories`)."""
        trajectories, errors = load_trajectories(path)
        name = f"trajectory:{path}" + (f"#{instance}" if instance else "")
        return cls(trajectories, instance=instance, name=name, load_errors=errors)

    def reset(self, task: Any, first_observation: str) -> None:
        key = self.instance or getattr(task, "instance_id", "")
        trajectory = self.by_instance.get(key)
        if trajectory is None:
            raise LookupError(f"no recorded trajectory of instance {key!r}")
        self._actions = [s.action or s.command for s in trajectory.steps if s.action or s.command]
        self._next = 0
        self.stop_reason = ""

    def act(self, observation: str) -> Action | None:
        if self._next >= len(self._actions):
            self.stop_reason = "trajectory finished"
            return None
        action = self._actions[self._next]
        self._next += 1
        return action


# ------------------------------------------------------------------------------------------
# OpenAI-compatible agent: a mini-swe-agent-style loop
# ------------------------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You are a software engineer working in a Linux shell on a Python repository checked out \
at /testbed. You act by sending shell commands, one at a time, and you see what each one \
printed and its exit status.

Every reply must contain a short THOUGHT explaining your reasoning, followed by exactly \
ONE fenced bash block holding ONE command (several commands may be joined with && or ||). \
Nothing outside that block is run. For example:

THOUGHT: I want to see which files the package has.

```bash
ls /testbed
```

Each command runs in a fresh shell: a `cd` or an exported variable does not carry over to \
the next command, so prefix a command with `cd DIR &&` when it matters. Commands that wait \
for interactive input (editors, pagers) do not work; edit files with sed, with \
`cat <<'EOF' > FILE`, or with a small python script."""

INSTANCE_TEMPLATE = """\
<task>
{problem_statement}
</task>

Fix the issue described above by editing the non-test source files of the repository in \
/testbed, so that the behaviour the issue asks for holds. Do not edit the tests.

A good way to work: find the relevant code, write a small script that reproduces the \
problem and run it, edit the source, run the script again to check the fix, and think \
about edge cases.

When you are done, submit with this command, alone, in its own reply (you cannot continue \
after it; the submitted patch is the diff of /testbed against the original checkout):

```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
```"""


class OpenAIPolicy:
    """An agent behind an OpenAI-compatible chat endpoint (vLLM, ...), mini-swe-agent style.

    The conversation is a system prompt, an instance prompt holding the problem statement,
    then the model's replies and the observations the session rendered for them (a reply
    that is not exactly one bash block gets mini-swe-agent's format error instead). The
    reply text is the action; the collector parses it with ``action_format``
    (``mini_swe_agent``; ``auto`` also accepts R2E-Gym function calls).

    Args:
        lm: an :class:`~sweworld.models.base.LM` or a spec for :func:`sweworld.world.lm_from_spec`
            (``openai:URL#MODEL``); its retries and timeouts apply to every call.
        max_calls: most model calls per episode (then the policy stops: ``step limit``).
        max_total_tokens: most prompt + completion tokens per episode, as the server
            counts them (then it stops: ``token limit``).
        max_tokens: most tokens per reply.
        temperature, seed: sampling (greedy by default; the seed makes samples repeatable).
        action_format: how replies are parsed (``mini_swe_agent`` or ``auto``).
    """

    def __init__(
        self,
        lm: Any,
        *,
        max_calls: int = 50,
        max_total_tokens: int = 400_000,
        max_tokens: int = 2048,
        temperature: float = 0.0,
        seed: int | None = 0,
        action_format: str = "mini_swe_agent",
        system_prompt: str = SYSTEM_PROMPT,
        instance_template: str = INSTANCE_TEMPLATE,
        name: str | None = None,
    ):
        from sweworld.world import lm_from_spec

        if max_calls < 1 or max_total_tokens < 1 or max_tokens < 1:
            raise ValueError("max_calls, max_total_tokens and max_tokens must be positive")
        self.lm = lm_from_spec(lm)
        self.name = name or (lm if isinstance(lm, str) else getattr(self.lm, "name", "openai"))
        self.max_calls = int(max_calls)
        self.max_total_tokens = int(max_total_tokens)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.seed = seed
        self.action_format = action_format
        self.system_prompt = system_prompt
        self.instance_template = instance_template
        self.messages: list[dict[str, str]] = []
        self.calls = 0
        self.tokens = 0
        self.stop_reason = ""

    def reset(self, task: Any, first_observation: str) -> None:
        problem = getattr(task, "problem_statement", "") or first_observation
        self.messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.instance_template.format(problem_statement=problem)},
        ]
        self.calls = 0
        self.tokens = 0
        self.stop_reason = ""

    def act(self, observation: str) -> Action | None:
        from sweworld.models.base import ContextTooLong, GenerationRequest

        if not self.messages:
            raise RuntimeError("OpenAIPolicy.act before reset")
        if self.messages[-1]["role"] == "assistant":
            self.messages.append({"role": "user", "content": observation})
        if self.calls >= self.max_calls:
            self.stop_reason = "step limit"
            return None
        if self.tokens >= self.max_total_tokens:
            self.stop_reason = "token limit"
            return None
        request = GenerationRequest(
            messages=list(self.messages),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=None if self.seed is None else self.seed + self.calls,
        )
        self.calls += 1
        try:
            generation = self.lm.generate([request])[0][0]
        except ContextTooLong as exc:
            self.stop_reason = f"context too long: {exc}"
            return None
        self.tokens += int(generation.prompt_tokens) + int(generation.completion_tokens)
        text = generation.text
        self.messages.append({"role": "assistant", "content": text})
        return text


# ------------------------------------------------------------------------------------------
# Registry
# ------------------------------------------------------------------------------------------


def make_policy(spec: str | Policy, **kwargs: Any) -> Policy:
    """A policy from a short spec (``scripted:FILE``, ``trajectory:FILE[#INSTANCE]``,
    ``openai:URL#MODEL``) or a policy instance (returned as is). Keyword arguments go to
    :class:`OpenAIPolicy` (``max_calls``, ``max_total_tokens``, ...).

    Raises ``ValueError`` for an unknown or malformed spec or an unreadable file.
    """
    if not isinstance(spec, str):
        if not isinstance(spec, Policy):
            raise TypeError(f"{spec!r} is not a policy (needs reset() and act())")
        return spec
    kind, sep, rest = spec.strip().partition(":")
    if not sep or not rest:
        raise ValueError(f"policy spec {spec!r}: expected KIND:ARG with KIND in {POLICY_KINDS}")
    if kind == "scripted":
        return ScriptedPolicy.from_file(rest)
    if kind == "trajectory":
        path, hash_, instance = rest.partition("#")
        if hash_ and not instance:
            raise ValueError(f"policy spec {spec!r}: empty instance after '#'")
        return TrajectoryPolicy.from_file(path, instance or None)
    if kind in ("openai", "vllm"):
        url, hash_, model = rest.rpartition("#")
        if not hash_ or not url or not model:
            raise ValueError(f"policy spec {spec!r} needs a model: openai:URL#MODEL")
        return OpenAIPolicy(spec, **kwargs)
    raise ValueError(f"unknown policy kind {kind!r} in {spec!r}; expected one of {POLICY_KINDS}")


class PolicyFactory:
    """Fresh copies of one policy (files read and clients made once): ``factory()``.

    ``load_errors``: lines of the policy's input that were left out, with why.
    """

    def __init__(self, template: Policy):
        self.template = template
        self.load_errors: list[str] = list(getattr(template, "load_errors", ()))

    def __call__(self) -> Policy:
        return copy.copy(self.template)


def make_policy_factory(spec: str | Policy, **kwargs: Any) -> Callable[[], Policy]:
    """A callable giving a fresh policy per episode, for :func:`make_policy`'s arguments.

    The copies share what does not change in an episode (the actions, the trajectories,
    the HTTP client) and reset their own state, so that several workers may run at once.
    """
    return PolicyFactory(make_policy(spec, **kwargs))
