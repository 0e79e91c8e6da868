"""Reward wrappers for :class:`~sweworld.env.gymnasium_env.SWEWorldEnv` (Gymnasium 1.x).

Shaping is a wrapper around the env, not a flag of it, so one registered env serves every
reward design; time limits are gymnasium's own ``TimeLimit``:

>>> from gymnasium.wrappers import TimeLimit
>>> env = ShapedOutcome(DenseReward(TimeLimit(gymnasium.make(ENV_ID, task=t), 30)))

* :class:`DenseReward`: adds the per-step shaped signal (``info["signals"]["dense"]``: a
  step penalty, plus a weight times the change in the fraction of the task's tests seen
  passing) to each step's reward.
* :class:`ShapedOutcome`: replaces the final reward with an outcome reward (success,
  failure, timeout, error) with a per-step penalty on success, and gives episodes cut by an
  outer ``TimeLimit`` (which the env never sees end, so never grades) the timeout reward.

This module imports gymnasium at its top; nothing in sweworld imports it eagerly.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium

__all__ = ["DenseReward", "ShapedOutcome"]


def _sweworld_env(env: gymnasium.Env) -> Any:
    from sweworld.env.gymnasium_env import SWEWorldEnv

    inner = env.unwrapped
    if not isinstance(inner, SWEWorldEnv):
        raise TypeError(f"expects a sweworld env (SWEWorldEnv), got {type(inner).__name__}")
    return inner


class DenseReward(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Adds each step's dense signal to its reward.

    Args:
        env: a (wrapped) :class:`~sweworld.env.gymnasium_env.SWEWorldEnv`.
        step_penalty: subtracted per step; None uses the episode's (``step_penalty``).
        test_weight: weight of the change in the fraction of the task's FAIL_TO_PASS and
            PASS_TO_PASS tests seen passing in the step's output; None uses the episode's.

    With both None the bonus is exactly ``info["signals"]["dense"]``. Under a simulated
    executor the test statuses are the world model's predictions: a hint for shaping; the
    final reward still comes only from the reward backend on the patch. An env whose config
    already has ``dense=True`` adds the signal itself: wrapping it is a ``ValueError``
    (the signal would count twice).
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        step_penalty: float | None = None,
        test_weight: float | None = None,
    ) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(
            self, step_penalty=step_penalty, test_weight=test_weight
        )
        gymnasium.Wrapper.__init__(self, env)
        if _sweworld_env(env).config.dense:
            raise ValueError(
                "the env already adds the dense signal (dense=True); wrap an env with "
                "dense=False, or drop the wrapper"
            )
        self.step_penalty = step_penalty
        self.test_weight = test_weight

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward) + self.bonus(info), terminated, truncated, info

    def bonus(self, info: dict[str, Any]) -> float:
        """The dense reward of a step, from its ``info["signals"]``."""
        signals = info.get("signals") or {}
        if self.step_penalty is None and self.test_weight is None:
            return float(signals.get("dense", 0.0))
        config = _sweworld_env(self.env).config
        penalty = config.step_penalty if self.step_penalty is None else self.step_penalty
        weight = config.test_weight if self.test_weight is None else self.test_weight
        return weight * float(signals.get("tests_delta", 0.0)) - penalty


class ShapedOutcome(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Replaces the final reward with an outcome reward.

    On the step that ends an episode, the reward of the patch (``info["reward"]["value"]``,
    under the env's ``reward_preset``) is swapped for:

    * ``success - step_penalty * steps`` (at least ``min_success``) when the patch resolves
      the task (``info["reward"]["resolved"]``),
    * ``failure`` when the agent submitted a patch that does not,
    * ``timeout`` when the episode was truncated (the env's own limits, or an outer
      ``TimeLimit``, whose cut the env never sees: such a step has no ``info["reward"]``),
    * ``error`` when it ended in error (executor or reward failure).

    Other parts of the step's reward (a ``DenseReward`` inside this wrapper, or the env's
    ``dense=True``) are kept. The values come from
    :func:`sweworld.reward.presets.preset` (``shaped``) unless given. ``info["shaped_outcome"]``
    names the outcome used.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        success: float | None = None,
        failure: float | None = None,
        timeout: float | None = None,
        error: float | None = None,
        step_penalty: float | None = None,
        min_success: float | None = None,
    ) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(
            self,
            success=success,
            failure=failure,
            timeout=timeout,
            error=error,
            step_penalty=step_penalty,
            min_success=min_success,
        )
        gymnasium.Wrapper.__init__(self, env)
        _sweworld_env(env)
        from sweworld.reward.presets import preset

        defaults = preset("shaped")
        self.success = defaults.success if success is None else success
        self.failure = defaults.failure if failure is None else failure
        self.timeout = defaults.timeout if timeout is None else timeout
        self.error = self.failure if error is None else error
        self.step_penalty = defaults.step_penalty if step_penalty is None else step_penalty
        self.min_success = defaults.min_success if min_success is None else min_success

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            return obs, reward, terminated, truncated, info
        final = info.get("reward") or {}
        base = float(reward) - float(final.get("value", 0.0))
        outcome, value = self.outcome(info)
        info["shaped_outcome"] = outcome
        return obs, base + value, terminated, truncated, info

    def outcome(self, info: dict[str, Any]) -> tuple[str, float]:
        """``(outcome name, reward)`` of the step that ended the episode."""
        reason = info.get("reason")
        if reason == "error":
            return "error", self.error
        if reason != "submitted":  # a limit of the env's, or an outer TimeLimit
            return "timeout", self.timeout
        if (info.get("reward") or {}).get("resolved"):
            steps = int(info.get("steps") or info.get("step") or 0)
            return "success", max(self.min_success, self.success - self.step_penalty * steps)
        return "failure", self.failure
