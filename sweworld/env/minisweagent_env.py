"""A mini-swe-agent 2.x ``Environment`` whose commands run in a sweworld sandbox.

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
environments are configured). The environment opens a sandboxed session on the task when it
is made; each ``execute`` runs one bash command there (file operations for real, execution
commands through the executor), from ``cwd`` (``/testbed``) in a fresh shell, as mini's
environments do. It returns mini's output dict (``output``, ``returncode``,
``exception_info``, ``extra``); mini's model renders it with its own observation template.

Submission follows mini-swe-agent 2.x: a command whose output's first line is
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` and whose exit status is 0 raises mini's
``Submitted`` with an ``exit`` message. The submission is sweworld's patch (the workspace's
``git diff`` against the base commit), never what the command printed, and a command during
which the executor answered an execution call never submits (its output may be predicted).
The patch is graded at once (``reward``: the real test run or SWR), the session is freed,
and the verdict is in the exit message's ``extra["sweworld"]``, in
:meth:`~SWEWorldEnvironment.result` and in :meth:`~SWEWorldEnvironment.serialize` (hence in
mini's trajectory file).

Why the session and not :class:`~sweworld.env.Episode`: ``Episode.step`` returns an
observation already rendered for the agent, while mini's model renders a raw output dict
itself; mini passes a per-call ``timeout``; and mini 2.x submits only on exit status 0. So
this adapter drives the episode's parts directly (the session, :func:`build_executor`,
:class:`EpisodeRewarder`, :class:`EpisodeConfig`'s limits and reward options) and keeps the
Episode's end reasons (``submitted``, ``max_steps``, ``timeout``, ``error``).

Importing this module needs no mini-swe-agent (only pydantic, a sweworld dependency); its
exceptions are imported when a command runs.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import re
import shlex
import threading
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import (
    EpisodeBusy,
    EpisodeError,
    EpisodeFinished,
    build_executor,
    coerce_task,
    truncate_text,
)
from sweworld.env.prompts import prompt_messages
from sweworld.env.rewards import EpisodeRewarder, FinalReward

__all__ = ["SWEWorldEnvironment", "SWEWorldEnvironmentConfig", "load_task"]

log = logging.getLogger(__name__)

SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

#: How mini-swe-agent's exit statuses map onto the episode's end reasons, for an agent that
#: stopped on its own (its step, cost or time limit, repeated format errors).
EXIT_STATUS_REASONS = {
    "Submitted": "submitted",
    "LimitsExceeded": "max_steps",
    "TimeExceeded": "timeout",
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
    executor: str = "simulated"
    """What answers execution commands: ``simulated`` (SWT), ``hybrid``, ``local`` (real),
    ``none``, ``scripted:FILE`` or a dotted path."""
    model: str = "embedded"
    """The SWT model of a simulated executor (``embedded``, ``openai:URL#MODEL``, ...)."""
    mode: str = "blind"
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
            "observation_format": "mini",
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
    """mini-swe-agent's ``Environment`` protocol over one sweworld session.

    Args:
        config_class: the config model (mini's convention).
        manager: a :class:`~sweworld.sandbox.manager.SessionManager` to share (one is made
            and closed with the environment otherwise).
        executor: an executor instance to share (built from the config otherwise).
        rewarder: an :class:`EpisodeRewarder` to share (built otherwise; a given one grades
            by its own config).
        **kwargs: the config's fields (the YAML ``environment`` section).

    Raises:
        ValueError: a bad option or task row; ``KeyError`` (``TaskNotFoundError``) for an
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
        self.session: Any = None
        self.config = config_class(**kwargs)
        self.episode_config = self.config.episode_config()
        self.task = load_task(self.config)
        self.executor = executor if executor is not None else build_executor(self.episode_config)
        self._own_manager = manager is None
        if manager is None:
            from pathlib import Path

            from sweworld.sandbox.manager import SessionManager

            root = Path(self.config.runtime_root) if self.config.runtime_root else None
            manager = SessionManager(runtime_root=root)
        self.manager = manager
        self._own_rewarder = rewarder is None
        self.rewarder = rewarder or EpisodeRewarder(self.episode_config, manager=manager)
        self._lock = threading.Lock()
        self.steps = 0
        self.started = time.monotonic()
        self.reason: str | None = None
        self.exit_status: str | None = None
        self.patch: str | None = None
        self.final: FinalReward | None = None
        self.error: str | None = None
        self.wall_s: float | None = None
        self._records: list[Any] = []
        self.session = self._open_session()

    def _open_session(self) -> Any:
        from sweworld.sandbox.bwrap import SandboxLimits
        from sweworld.sandbox.session import SessionConfig

        config = SessionConfig(
            limits=SandboxLimits(timeout=float(self.config.timeout)),
            observation_format="mini",
        )
        try:
            return self.manager.open(self.task, executor=self.executor, config=config)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ mini's protocol

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict:
        """Run ``action["command"]`` in the sandbox: mini's output dict.

        Raises mini's ``Submitted`` (the submission is the workspace's patch, graded),
        ``LimitsExceeded`` / ``TimeExceeded`` when the episode's step or wall-time limit is
        reached (before the command runs), :class:`EpisodeFinished` after the episode ended,
        :class:`EpisodeBusy` when called from two threads at once.
        """
        if not self._lock.acquire(blocking=False):
            raise EpisodeBusy("execute() while another call of this environment is running")
        try:
            if self._closed:
                raise EpisodeError("the environment is closed")
            if self.reason is not None:
                raise EpisodeFinished(
                    f"the episode ended ({self.reason}); make a new environment for another"
                )
            return self._execute(action, cwd, timeout)
        finally:
            self._lock.release()

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
            "problem_statement": self.task.problem_statement,
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
        resolved, source, status, evidence), ``steps``, ``wall_s``.

        When the agent stopped on its own (mini's step, cost or time limit, repeated format
        errors) the episode is still open: it is ended here, its patch taken and scored as
        unsubmitted (``score_unsubmitted``); ``exit_status`` (what ``agent.run`` returned)
        names the reason (``LimitsExceeded`` -> ``max_steps``, ``TimeExceeded`` ->
        ``timeout``, anything else -> ``error``, not scored).
        """
        with self._lock:
            if self.reason is None and not self._closed:
                reason = EXIT_STATUS_REASONS.get(exit_status or "", "error")
                self.exit_status = exit_status
                self._end(reason)
            return self._summary()

    def trajectory(self) -> Any:
        """The episode as a data-schema :class:`~sweworld.data.schema.Trajectory`."""
        from sweworld.data.schema import Trajectory

        return Trajectory(
            source="mini-swe-agent",
            instance_id=self.task.instance_id,
            repo=self.task.repo,
            task=self.task.to_row(),
            steps=list(self._records),
            submission=(self.patch or "") if self.reason == "submitted" else "",
            report=None if self.final is None else {"resolved": self.final.resolved},
            meta={"environment": "sweworld", **self._summary()},
        )

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Free the session (and the manager and reward model made here); idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._drop_session()
        if getattr(self, "_own_rewarder", False) and self.rewarder is not None:
            self.rewarder.close()
        if getattr(self, "_own_manager", False) and self.manager is not None:
            self.manager.close_all()

    cleanup = close  # the name mini's docker environment uses

    def __enter__(self) -> SWEWorldEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finaliser
            self.close()

    # ------------------------------------------------------------------ internals

    def _execute(self, action: Any, cwd: str, timeout: float | None) -> dict:
        from minisweagent.exceptions import LimitsExceeded, TimeExceeded

        cfg = self.episode_config
        if self.steps >= cfg.max_steps:
            self._end("max_steps")
            raise LimitsExceeded(self._exit_message("LimitsExceeded"))
        if cfg.max_wall_s is not None and time.monotonic() - self.started > cfg.max_wall_s:
            self._end("timeout")
            raise TimeExceeded(self._exit_message("TimeExceeded"))
        command = action.get("command") if isinstance(action, Mapping) else None
        if not isinstance(command, str) or not command.strip():
            return _failure(
                "sweworld: the action has no command (expected {'command': '...'}); nothing ran.",
                "ValueError",
            )
        self.steps += 1
        self.session.cwd = cwd or self.config.cwd
        outcome = self.session.run(
            self._script(command),
            timeout=float(timeout) if timeout else float(self.config.timeout),
            merge_stderr=True,
        )
        output, cut = truncate_text(outcome.output, cfg.max_observation_chars)
        calls = outcome.info.get("execution_calls") or []
        extra: dict[str, Any] = {"sweworld": {"step": self.steps, "execution_calls": len(calls)}}
        if cut:
            extra["sweworld"]["output_truncated"] = True
        result = {"output": output, "returncode": outcome.exit_code, "exception_info": ""}
        if outcome.timed_out:
            used = float(timeout) if timeout else float(self.config.timeout)
            result["exception_info"] = (
                f"sweworld: the command did not finish within {used:g} s and was stopped."
            )
            extra.update(exception_type="TimeoutExpired", exception=result["exception_info"])
        result["extra"] = extra
        self._record(command, output, outcome.exit_code)
        failure = _executor_failure(calls)
        if failure is not None:
            extra["sweworld"]["executor_error"] = failure
            if cfg.end_on_executor_error:
                self.error = f"executor failed: {failure}"
                self._end("error")
                self._interrupt("SWEWorldError")
        if not outcome.timed_out:
            self._check_submission(outcome, result)
        return result

    def _script(self, command: str) -> str:
        if not self.config.env:
            return command
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.config.env.items())
        return f"export {exports}\n{command}"

    def _check_submission(self, outcome: Any, result: dict) -> None:
        from minisweagent.exceptions import Submitted

        from sweworld.sandbox.render import check_submission

        calls = outcome.info.get("execution_calls")
        check = check_submission(outcome.output, outcome.exit_code, calls)
        if check.refused:  # the marker came with executor output: shown, not submitted
            result["output"] = truncate_text(
                check.output, self.episode_config.max_observation_chars
            )[0]
            result["extra"]["sweworld"]["submission_refused"] = check.refused
        if not check.accepted:
            return
        self._end("submitted")
        if self.reason != "submitted" and self.patch is None:  # the patch could not be read
            self._interrupt("SWEWorldError")
        raise Submitted(self._exit_message("Submitted"))

    def _end(self, reason: str) -> None:
        """End the episode: take the patch, score it, free the session."""
        self.reason = reason
        submitted = reason == "submitted"
        if reason != "error" and self.session is not None:
            try:
                self.patch = self.session.get_patch()
            except Exception as exc:
                log.exception("get_patch failed")
                self.reason = reason = "error"
                self.error = f"the patch could not be read: {type(exc).__name__}: {exc}"
        if reason == "error" or not (submitted or self.episode_config.score_unsubmitted):
            self.final = FinalReward(0.0, None, "none", "not_scored")
        else:
            try:
                self.final = self.rewarder.score(
                    self.task, self.patch or "", steps=self.steps, submitted=submitted
                )
            except Exception as exc:
                log.exception("the reward failed")
                why = f"{type(exc).__name__}: {exc}"
                self.final = FinalReward(0.0, None, "none", "error", error=why)
            if self.final.error is not None:
                self.reason = "error"
                self.error = f"reward failed: {self.final.error}"
        self.wall_s = time.monotonic() - self.started
        self._drop_session()

    def _exit_message(self, exit_status: str) -> dict:
        self.exit_status = exit_status
        submission = (self.patch or "") if exit_status == "Submitted" else ""
        content = submission if exit_status == "Submitted" else exit_status
        return {
            "role": "exit",
            "content": content,
            "extra": {
                "exit_status": exit_status,
                "submission": submission,
                "sweworld": self._summary(),
            },
        }

    def _interrupt(self, exit_status: str) -> None:
        from minisweagent.exceptions import InterruptAgentFlow

        message = self._exit_message(exit_status)
        message["content"] = self.error or exit_status
        raise InterruptAgentFlow(message)

    def _summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "instance_id": self.task.instance_id,
            "reason": self.reason,
            "exit_status": self.exit_status,
            "submitted": self.reason == "submitted",
            "steps": self.steps,
        }
        if self.reason is not None:
            summary.update(
                patch=self.patch or "",
                reward=self.final.to_dict() if self.final else None,
                resolved=self.final.resolved if self.final else None,
                error=self.error,
                wall_s=self.wall_s,
            )
        return summary

    def _record(self, command: str, output: str, exit_code: int) -> None:
        if not self.episode_config.record:
            return
        from sweworld.data.schema import TrajectoryStep

        self._records.append(TrajectoryStep(command=command, output=output, exit_code=exit_code))

    def _drop_session(self) -> None:
        session, self.session = getattr(self, "session", None), None
        if session is None:
            return
        try:
            session.destroy()
        except Exception:
            log.exception("destroying session %s failed", getattr(session, "id", "?"))
        hook = getattr(self.executor, "close_session", None)
        if hook is not None:
            try:
                hook(session.id)
            except Exception:
                log.exception("executor close_session failed")


def _failure(message: str, exception_type: str) -> dict:
    return {
        "output": "",
        "returncode": -1,
        "exception_info": message,
        "extra": {"exception_type": exception_type, "exception": message},
    }


def _executor_failure(calls: list[Any]) -> str | None:
    """The error of the first execution call whose executor raised or whose model failed."""
    for call in calls:
        info = call.get("info") if isinstance(call, Mapping) else None
        if isinstance(info, Mapping) and (info.get("source") == "error" or info.get("error")):
            return str(info.get("error") or "executor error")[:2000]
    return None
