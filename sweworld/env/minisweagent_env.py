"""A mini-swe-agent 2.x ``Environment`` over a sweworld :class:`~sweworld.env.Episode`.

Point mini-swe-agent at it by dotted path in its YAML config::

    environment:
      environment_class: sweworld.env.minisweagent_env.SWEWorldEnvironment
      tasks_file: toy                 # a tasks file (JSONL, JSON, parquet, ...) or "toy"
      instance_id: sweworld__stockroom-1
      executor: simulated             # simulated (SWT) | hybrid | local (real) | none
      reward: swr                     # swr | real | both | none
      timeout: 60                     # seconds per command

``minisweagent.environments.get_environment`` imports the class and passes the section as
keyword arguments, validated by :class:`SWEWorldEnvironmentConfig` (pydantic, as mini's own
environments are configured). The environment starts an :class:`~sweworld.env.Episode` on
the task when it is made (``observation_format="raw"``: outputs come back unrendered, and
mini's model renders them with its own observation template). Every rule of the episode
(limits, submission, executor failures, the patch, the reward) is the Episode's; this module
only translates:

- ``execute(action, cwd, timeout=)`` -> ``episode.step(script, timeout=)``, where the script
  is the command run from ``cwd`` (``/testbed``) as in a fresh shell, with the configured
  environment variables exported -> mini's output dict (``output``, ``returncode``,
  ``exception_info``, ``extra``).
- The episode's end -> mini's exceptions: ``submitted`` -> ``Submitted`` (the submission is
  the episode's patch, the workspace's ``git diff``, never what the command printed),
  ``max_steps`` / ``max_tokens`` -> ``LimitsExceeded``, ``timeout`` -> ``TimeExceeded``,
  ``error`` -> ``InterruptAgentFlow`` with exit status ``SWEWorldError``. Submission follows
  mini 2.x (first output line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` and exit status 0),
  and a command during which the executor answered an execution call never submits.
- An agent stopped by mini's own limits (step or cost limit, repeated format errors) ends the
  episode in :meth:`~SWEWorldEnvironment.result` through :meth:`Episode.end`.

The verdict (reward and its evidence) is in the exit message's ``extra["sweworld"]``, in
:meth:`~SWEWorldEnvironment.result` and in :meth:`~SWEWorldEnvironment.serialize` (hence in
mini's trajectory file); :meth:`~SWEWorldEnvironment.trajectory` is the episode's record.

Importing this module needs no mini-swe-agent (only pydantic, a sweworld dependency); its
exceptions are imported when an episode ends.
"""

from __future__ import annotations

import contextlib
import platform
import re
import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import Episode, EpisodeFinished, coerce_task
from sweworld.env.opening import open_episode
from sweworld.env.prompts import prompt_messages
from sweworld.env.rewards import EpisodeRewarder
from sweworld.sandbox.types import clean_text

__all__ = ["SWEWorldEnvironment", "SWEWorldEnvironmentConfig", "load_task"]

#: How mini-swe-agent's exit statuses map onto the episode's end reasons, for an agent that
#: stopped on its own (its step, cost or time limit, repeated format errors).
EXIT_STATUS_REASONS = {
    "Submitted": "submitted",
    "LimitsExceeded": "max_steps",
    "TimeExceeded": "timeout",
}

#: The step info keys the output dict's ``extra["sweworld"]`` carries, by their names there.
_STEP_FACTS = {
    "observation_truncated": "output_truncated",
    "submission_refused": "submission_refused",
    "executor_error": "executor_error",
}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class SWEWorldEnvironmentConfig(BaseModel):
    """The ``environment`` section of a mini-swe-agent config for sweworld.

    The task is ``task`` (a task row: SWE-bench, SWE-Gym, SWE-smith or R2E-Gym fields), or
    ``instance_id`` in ``tasks_file`` (anything :func:`sweworld.load_tasks` reads; ``toy``
    names the shipped toy tasks). Unknown keys are an error, so a typo is not silently
    ignored.
    """

    model_config = ConfigDict(extra="forbid")

    task: dict[str, Any] | None = None
    """A task row (mutually exclusive with ``instance_id``)."""
    instance_id: str = ""
    """The task's instance id in ``tasks_file``."""
    tasks_file: str = ""
    """Where ``instance_id`` is looked up (a path or ``toy``)."""
    split: str | None = None
    """The split of a dataset ``tasks_file``."""
    executor: str = "outcome"
    """What answers execution commands: ``outcome`` (the default world), ``simulated`` (the
    LM route), ``hybrid``, ``local`` (real),
    ``none``, ``scripted:FILE`` or a dotted path."""
    model: str = "embedded"
    """The SWT model of a simulated executor (``embedded``, ``openai:URL#MODEL``, ...)."""
    mode: str = "oracle"
    """``blind`` or ``oracle`` (the simulator and the reward model may read the gold patch)."""
    reward: str = "swr"
    """How the submitted patch is graded: ``swr``, ``real``, ``both`` or ``none``."""
    cwd: str = "/testbed"
    """Directory every command starts in (changes do not carry over, as in mini)."""
    timeout: float = 60.0
    """Seconds one command may run (mini's per-call ``timeout`` overrides it)."""
    env: dict[str, str] = {}
    """Environment variables exported before every command."""
    interpreter: list[str] = ["bash", "-c"]
    """Accepted for compatibility with mini's docker configs; commands run in the sandbox's
    bash whatever it says (only a bash or sh interpreter is accepted)."""
    max_steps: int = 250
    """Commands after which the episode ends (``max_steps``); mini's ``step_limit`` is
    usually the tighter one."""
    runtime_root: str = ""
    """Where live sandbox state goes (default: sweworld's runtime directory)."""
    episode: dict[str, Any] = {}
    """Any other :class:`~sweworld.env.EpisodeConfig` option (``reward_preset``,
    ``swr_stages``, ``swr_model``, ``score_unsubmitted``, ``max_wall_s``,
    ``max_observation_chars``, ``end_on_executor_error``, ``seed``, ...)."""

    @field_validator("env")
    @classmethod
    def _names_are_identifiers(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not _ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"environment variable names must be identifiers: {bad}")
        return value

    @field_validator("interpreter")
    @classmethod
    def _bash_only(cls, value: list[str]) -> list[str]:
        if not value or value[0].rsplit("/", 1)[-1] not in ("bash", "sh"):
            raise ValueError(f"sweworld runs commands with bash; interpreter {value!r} is not")
        return value

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"timeout must be positive, got {value!r}")
        return value

    def episode_config(self) -> EpisodeConfig:
        """The :class:`EpisodeConfig` these options describe."""
        options = {
            "executor": self.executor,
            "model": self.model,
            "mode": self.mode,
            "reward": self.reward,
            "max_steps": self.max_steps,
            "step_timeout_s": float(self.timeout),
            "prompt_format": "mini",
            "action_format": "bash",
            "observation_format": "raw",
        }
        clash = sorted(set(self.episode) & set(options))
        if clash:
            raise ValueError(f"set {clash} at the top of the environment section, not in episode")
        return EpisodeConfig.from_dict({**options, **self.episode})


def load_task(config: SWEWorldEnvironmentConfig) -> Any:
    """The :class:`~sweworld.tasks.Task` a config names (``ValueError`` / ``KeyError``)."""
    if config.task is not None:
        if config.instance_id and config.task.get("instance_id") != config.instance_id:
            raise ValueError("give the task as a row or as instance_id + tasks_file, not both")
        return coerce_task(config.task)
    if not config.instance_id:
        raise ValueError("the environment needs a task: `task` (a row) or instance_id + tasks_file")
    if not config.tasks_file:
        raise ValueError(f"instance_id {config.instance_id!r} needs tasks_file (a path or 'toy')")
    from sweworld.tasks import get_task

    source: Any = config.tasks_file
    if source == "toy":
        from sweworld.tasks.toy import toy_tasks_path

        source = toy_tasks_path()
    return get_task(source, config.instance_id, split=config.split)


class SWEWorldEnvironment:
    """mini-swe-agent's ``Environment`` protocol over one sweworld :class:`Episode`.

    Args:
        config_class: the config model (mini's convention).
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to share (one is made
            and closed with the environment otherwise).
        executor: an executor instance to share (built from the config otherwise).
        rewarder: an :class:`EpisodeRewarder` to share (built from the config otherwise).
        **kwargs: the ``environment`` section (:class:`SWEWorldEnvironmentConfig`).

    Raises:
        ValueError: a bad config or task row (pydantic's ``ValidationError`` is one), or
            ``KeyError`` (:class:`~sweworld.tasks.loaders.TaskNotFoundError`) for an
            instance id that is not in ``tasks_file``.
    """

    def __init__(
        self,
        *,
        config_class: type = SWEWorldEnvironmentConfig,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        **kwargs: Any,
    ):
        self._closed = False
        self._own_manager: Any = None
        self.episode: Episode | None = None
        self.exit_status: str | None = None
        self._end_info: dict[str, Any] = {}  # the info of the episode's last outcome
        self.config = config_class(**kwargs)
        self.task = load_task(self.config)
        if manager is None and self.config.runtime_root:
            from pathlib import Path

            from sweworld.sandbox.manager import SessionManager

            manager = SessionManager(runtime_root=Path(self.config.runtime_root))
            self._own_manager = manager
        self.episode = open_episode(
            self.task,
            self.config.episode_config(),
            manager=manager,
            executor=executor,
            rewarder=rewarder,
        )
        try:
            self.episode.reset()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the episode's state

    @property
    def steps(self) -> int:
        """Commands run so far."""
        return self.episode.steps

    @property
    def reason(self) -> str | None:
        """Why the episode ended (None while it runs)."""
        return self.episode.reason

    @property
    def session(self) -> Any:
        """The episode's live sandbox session (None once it ended)."""
        return self.episode.session

    # ------------------------------------------------------------------ mini's protocol

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict:
        """Run ``action["command"]`` as one episode step: mini's output dict.

        Raises mini's ``Submitted`` (the submission is the episode's patch, graded),
        ``LimitsExceeded`` / ``TimeExceeded`` when the step ends the episode on a limit,
        ``InterruptAgentFlow`` (``SWEWorldError``) when it ends in an error,
        :class:`EpisodeFinished` after the end, :class:`EpisodeBusy` when called from two
        threads at once. ``timeout`` bounds the command (at most the config's ``timeout``).
        """
        if self.episode.done:
            raise EpisodeFinished(
                f"the episode ended ({self.episode.reason}); make a new environment for another"
            )
        command = action.get("command") if isinstance(action, Mapping) else None
        if not isinstance(command, str) or not command.strip():
            message = "sweworld: the action has no command (expected {'command': '...'}); "
            message += "nothing ran."
            extra = {"exception_type": "ValueError", "exception": message}
            return {"output": "", "returncode": -1, "exception_info": message, "extra": extra}
        outcome = self.episode.step(self._script(command, cwd), timeout=timeout)
        info = outcome.info
        facts = {"step": info["step"], "execution_calls": len(info.get("execution_calls") or [])}
        facts.update({name: info[key] for key, name in _STEP_FACTS.items() if info.get(key)})
        result: dict[str, Any] = {
            "output": outcome.observation,
            "returncode": info["exit_code"],
            "exception_info": "",
            "extra": {"sweworld": facts},
        }
        if info.get("timed_out"):
            limit = min(timeout or self.config.timeout, self.config.timeout)
            message = f"sweworld: the command did not finish within {limit:g} s and was stopped."
            result["exception_info"] = message
            result["extra"].update(exception_type="TimeoutExpired", exception=message)
        if outcome.done:
            self._end_info = info
            self._raise_end()
        return result

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Variables for mini's templates: the config, the host's ``platform.uname()``
        (``system``, ``release``, ...), the task (``instance_id``, ``repo``,
        ``problem_statement``) and sweworld's own mini prompt (``sweworld_system_prompt``,
        ``sweworld_instance_prompt``)."""
        system, instance = (m["content"] for m in prompt_messages(self.task, "mini"))
        config = self.config.model_dump(exclude={"task"})
        return {
            **config,
            **platform.uname()._asdict(),
            "instance_id": self.task.instance_id,
            "repo": self.task.repo,
            "base_commit": self.task.base_commit,
            "problem_statement": clean_text(self.task.problem_statement or ""),
            "sweworld_system_prompt": system,
            "sweworld_instance_prompt": instance,
            **kwargs,
        }

    def serialize(self) -> dict:
        """The environment's config and, once it ended, the episode's result (JSON-safe)."""
        cls = type(self)
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{cls.__module__}.{cls.__name__}",
                },
                "sweworld": self._summary(),
            }
        }

    # ------------------------------------------------------------------ results

    def result(self, exit_status: str | None = None) -> dict[str, Any]:
        """The episode's outcome: ``reason``, ``submitted``, ``patch``, ``reward`` (value,
        resolved, source, status, evidence), ``steps``, ``wall_s``, ``error``.

        When the agent stopped on its own (mini's step, cost or time limit, repeated format
        errors) the episode is still running: it is ended here with :meth:`Episode.end`
        (its patch taken and scored as unsubmitted, ``score_unsubmitted``); ``exit_status``
        (what ``agent.run`` returned) names the reason (``LimitsExceeded`` -> ``max_steps``,
        ``TimeExceeded`` -> ``timeout``, anything else -> ``error``, not scored).
        """
        if not self.episode.done and not self._closed:
            self.exit_status = exit_status
            reason = EXIT_STATUS_REASONS.get(exit_status or "", "error")
            error = f"the agent stopped: {exit_status or 'no exit status'}"
            self._end_info = self.episode.end(
                reason, error=error if reason == "error" else None
            ).info
        return self._summary()

    def trajectory(self) -> Any:
        """The episode's data-schema :class:`~sweworld.data.schema.Trajectory`."""
        record = self.episode.trajectory()
        record.source = "mini-swe-agent"
        record.meta.update(environment="sweworld", exit_status=self.exit_status)
        return record

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Close the episode (and the manager made here); idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self.episode is not None:
            self.episode.close()
        if self._own_manager is not None:
            self._own_manager.close_all()

    cleanup = close  # the name mini's docker environment uses

    def __enter__(self) -> SWEWorldEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finaliser
            self.close()

    # ------------------------------------------------------------------ internals

    def _script(self, command: str, cwd: str) -> str:
        """The command as run from ``cwd`` in a fresh shell with the config's variables (the
        ``cd`` only when the session's directory differs, so records stay the command)."""
        lines = []
        target = cwd or self.config.cwd
        session = self.episode.session
        if session is None or session.cwd != target:
            lines.append(f"cd {shlex.quote(target)} || exit 1")
        if self.config.env:
            lines.append(
                "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.config.env.items())
            )
        return "\n".join([*lines, command])

    def _raise_end(self) -> None:
        """Raise mini's exception for the episode's end."""
        from minisweagent.exceptions import (
            InterruptAgentFlow,
            LimitsExceeded,
            Submitted,
            TimeExceeded,
        )

        if self._end_info.get("submitted"):  # even when its reward then failed (reason error)
            raise Submitted(self._exit_message("Submitted"))
        if self.episode.reason == "error":
            message = self._exit_message("SWEWorldError")
            message["content"] = self._end_info.get("error") or "SWEWorldError"
            raise InterruptAgentFlow(message)
        limit = TimeExceeded if self.episode.reason == "timeout" else LimitsExceeded
        raise limit(self._exit_message(limit.__name__))

    def _exit_message(self, exit_status: str) -> dict:
        self.exit_status = exit_status
        submission = (self.episode.patch or "") if exit_status == "Submitted" else ""
        return {
            "role": "exit",
            "content": submission if exit_status == "Submitted" else exit_status,
            "extra": {
                "exit_status": exit_status,
                "submission": submission,
                "sweworld": self._summary(),
            },
        }

    def _summary(self) -> dict[str, Any]:
        episode, info = self.episode, self._end_info
        summary: dict[str, Any] = {
            "instance_id": self.task.instance_id,
            "reason": episode.reason,
            "exit_status": self.exit_status,
            "submitted": bool(info.get("submitted")),
            "steps": episode.steps,
        }
        if episode.reason is not None:
            final = episode.final
            summary.update(
                patch=episode.patch or "",
                reward=final.to_dict() if final else None,
                resolved=final.resolved if final else None,
                error=info.get("error"),
                wall_s=info.get("wall_s"),
            )
        return summary
