"""Configuration of an episode: limits, the executor, the reward and the prompt format."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

#: Why an episode ended. ``submitted`` and ``error`` terminate it (the MDP reached an end
#: state); ``max_steps``, ``timeout`` and ``max_tokens`` truncate it (a limit outside the
#: MDP cut it short), as Gymnasium separates them.
TERMINATED_REASONS = ("submitted", "error")
TRUNCATED_REASONS = ("max_steps", "timeout", "max_tokens")
END_REASONS = TERMINATED_REASONS + TRUNCATED_REASONS

#: First-observation formats: R2E-Gym's tool descriptions and issue template, mini-swe-agent's
#: instance template (one bash block per answer), or the problem statement alone.
PROMPT_FORMATS = ("r2egym", "mini", "plain")

#: Where the final reward comes from: the reward model (SWR stages), the real test run,
#: both (the real one is the reward, SWR's verdict is kept beside it), or none (0.0).
REWARD_SOURCES = ("swr", "real", "both", "none")


@dataclass
class EpisodeConfig:
    """The rules of an episode (every field has a default that runs on a CPU).

    Attributes:
        max_steps: agent actions before the episode is truncated (``max_steps``).
        max_wall_s: seconds from reset to the end of a step after which the episode is
            truncated (``timeout``); None for no limit.
        step_timeout_s: deadline of one step: every command in the sandbox and every
            simulated execution call is bounded by it.
        max_observation_chars: longest observation returned; longer ones keep their head
            and tail with a marker in the middle.
        max_action_chars: longest action accepted; a longer one is answered with an error
            observation and not run.
        max_tokens: total tokens of actions and observations after which the episode is
            truncated (``max_tokens``); counted with ``token_counter`` when given, else
            approximated as characters / 4. None for no limit.
        prompt_format: ``r2egym``, ``mini`` or ``plain`` (see :data:`PROMPT_FORMATS`).
        action_format: how actions are parsed: ``auto`` (R2E-Gym calls, bash blocks or raw
            bash), ``r2e`` (function calls only), ``mini_swe_agent`` (one bash block only).
        observation_format: ``auto``, ``r2egym`` or ``mini`` (how observations are rendered),
            or ``raw`` (the command's output unrendered, for agents that render it themselves).
        executor: what answers execution commands: ``outcome`` (the default world: the
            outcome model decides, the renderer writes; milliseconds a step), ``simulated``
            (the language-model route: SWT writes the whole output), ``hybrid``, ``local``
            (real), ``none``, ``scripted:FILE``, a dotted path or an executor.
        model: the SWT model spec for ``simulated`` / ``hybrid`` (``embedded``,
            ``openai:URL#MODEL``, ``replay:FILE``, ...).
        mode: ``blind`` or ``oracle`` for the simulator and the reward model.
        reward: ``swr``, ``real``, ``both`` or ``none`` (see :data:`REWARD_SOURCES`).
        reward_preset: how the verdict becomes a scalar (``binary``, ``score``, ``shaped``,
            ``stage_penalty``).
        swr_stages: SWR stages to run (default: all four).
        swr_model: the SWR model spec (default ``embedded``: the shipped SWR adapter).
        score_unsubmitted: also grade the patch of an episode truncated before it submitted
            (the reward is then computed with outcome ``timeout``).
        dense: add the per-step shaped signals to each step's reward (they are always in
            ``info["signals"]``): ``-step_penalty`` per step and ``test_weight`` times the
            change in the fraction of the task's tests seen passing.
        step_penalty: dense penalty per step.
        test_weight: dense weight of test status changes.
        end_on_executor_error: end the episode (reason ``error``) when the executor raises,
            instead of showing the error to the agent and going on.
        record: keep the trajectory (``Episode.trajectory()``); off saves memory.
        seed: base seed (the simulator's sampling and the reward's).
        world: URL of a ``sweworld serve world`` service: the episode runs there (its
            sandbox, executor and reward are the service's; the fields set here that
            differ from their defaults are sent as overrides). None: in this process.
        world_token: the service's bearer token (default: ``$SWEWORLD_WORLD_TOKEN``); a
            secret, so never in :meth:`to_dict`, ``repr`` or trajectories.
    """

    max_steps: int = 50
    max_wall_s: float | None = 3600.0
    step_timeout_s: float = 300.0
    max_observation_chars: int = 20_000
    max_action_chars: int = 100_000
    max_tokens: int | None = None
    prompt_format: str = "r2egym"
    action_format: str = "auto"
    observation_format: str = "auto"
    executor: Any = "outcome"
    model: str = "embedded"
    mode: str = "oracle"
    reward: str = "swr"
    reward_preset: str = "binary"
    swr_stages: tuple[str, ...] | None = None
    swr_model: str = "embedded"
    score_unsubmitted: bool = True
    dense: bool = False
    step_penalty: float = 0.01
    test_weight: float = 0.5
    end_on_executor_error: bool = False
    record: bool = True
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    world: str | None = None
    world_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not _is_int(self.max_steps) or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {self.max_steps!r}")
        if self.max_wall_s is not None and not (
            _is_number(self.max_wall_s) and self.max_wall_s > 0
        ):
            raise ValueError(f"max_wall_s must be positive or None, got {self.max_wall_s!r}")
        # a step deadline the clocks cannot hold (inf, 1e300) failed every step at run time
        if not (_is_number(self.step_timeout_s) and 0 < self.step_timeout_s <= MAX_STEP_TIMEOUT_S):
            raise ValueError(
                f"step_timeout_s must be a number of seconds in (0, {MAX_STEP_TIMEOUT_S:.0f}], "
                f"got {self.step_timeout_s!r}"
            )
        for name in ("max_observation_chars", "max_action_chars"):
            value = getattr(self, name)
            if not _is_int(value) or value < 200:  # a float limit broke slicing at run time
                raise ValueError(f"{name} must be an integer of at least 200, got {value!r}")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens < 1):
            raise ValueError(
                f"max_tokens must be a positive integer or None, got {self.max_tokens!r}"
            )
        _choice("prompt_format", self.prompt_format, PROMPT_FORMATS)
        _choice("action_format", self.action_format, ("auto", "r2e", "mini_swe_agent", "bash"))
        _choice("observation_format", self.observation_format, ("auto", "r2egym", "mini", "raw"))
        _choice("mode", self.mode, ("blind", "oracle"))
        _choice("reward", self.reward, REWARD_SOURCES)
        from sweworld.reward.presets import PRESETS

        _choice("reward_preset", self.reward_preset, PRESETS)
        if self.swr_stages is not None:
            self.swr_stages = tuple(self.swr_stages)
        if self.world is not None and not (
            isinstance(self.world, str) and self.world.startswith(("http://", "https://"))
        ):
            raise ValueError(
                f"world must be the http(s):// URL of a `sweworld serve world`, got {self.world!r}"
            )
        if self.world_token is not None and not isinstance(self.world_token, str):
            raise ValueError("world_token must be a string")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeConfig:
        """A config from a mapping (YAML section, CLI overrides); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown episode option(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    def replace(self, **changes: Any) -> EpisodeConfig:
        """A copy with ``changes`` applied (validated again)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return EpisodeConfig.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (what trajectories record); ``world_token`` left out."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "world_token"}
        if not isinstance(self.executor, str):
            data["executor"] = getattr(self.executor, "name", type(self.executor).__name__)
        data["swr_stages"] = list(self.swr_stages) if self.swr_stages is not None else None
        data["extra"] = dict(self.extra)
        return data


#: Longest step deadline accepted (a week); longer ones overflow the sandbox's clocks.
MAX_STEP_TIMEOUT_S = 7 * 24 * 3600.0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
