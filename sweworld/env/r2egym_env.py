"""R2E-Gym's ``RepoEnv`` on sweworld: change the import, keep the agent.

R2E-Gym (``r2egym.agenthub``) drives a Docker container per task through
``RepoEnv(EnvArgs(ds=row))``. This module gives the same call shapes, backed by a
:class:`~sweworld.env.Episode` (a sandboxed checkout, a simulated or real executor, SWR or the
real reward) instead of a container::

    # from r2egym.agenthub.environment.env import EnvArgs, RepoEnv
    from sweworld.env.r2egym_env import EnvArgs, RepoEnv

    env = RepoEnv(EnvArgs(ds=row))            # row: a SWE-bench / SWE-Gym / R2E-Gym task row
    env.reset()
    env.add_commands(command_files)           # R2E-Gym's tool files: the tools are built in
    obs, reward, done, info = env.step(action)   # an Action, or its "<function=...>" text
    env.compute_reward(); env.get_patch(); env.apply_patch(diff); env.close()

What matches R2E-Gym: its ``<function=...>`` actions, tool and parameter names, the
observation strings (``str(obs)``, from :mod:`sweworld.sandbox.render`), ``info["total_time"]``,
``done`` after ``finish``, ``reset()`` returning ``"Environment reset"``, and the ``runtime``
attributes its agent reads (``get_task_instruction``, ``get_patch``, ``commit.get_patch``,
``docker_image``, ``repo_name``, ``run``, ``apply_patch``).

What differs, on purpose:

* the reward of a step is 0.0 (R2E-Gym's too) plus, with ``dense=True``, sweworld's shaped
  signal; the episode's reward is what ``compute_reward()`` returns, computed once when the
  episode ends (``info["reward"]`` holds its evidence) and cached;
* the episode ends at ``finish`` and at its limits (``max_steps``, wall time, tokens);
  ``step`` after the end raises :class:`~sweworld.env.EpisodeFinished` (call ``reset``);
  ``get_patch`` and ``compute_reward`` still answer;
* the tools are built in: ``add_commands`` records the tools named by R2E-Gym's command files
  (``file_editor.py`` -> ``file_editor``, ...), copies nothing, and refuses tools sweworld
  does not have; every built-in tool stays callable;
* an action with no function call is answered with R2E-Gym's reminder, counted as a step;
  an unknown function is answered with the list of tools; neither runs anything;
* ``backend``, ``EnvArgs.repo_path`` and ``EnvArgs.docker_image`` are accepted and unused:
  the sandbox replaces the container, the repository is always at ``/testbed``;
* the deadline of a step is the episode's ``step_timeout_s`` (``step_timeout=`` here): the
  ``timeout`` argument of ``step`` is checked and recorded in ``info`` but cannot move it.

Neither R2E-Gym nor gym is imported: ``Action``, ``Observation`` and ``EnvArgs`` are written
here with the attributes and string forms R2E-Gym's agent reads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import EpisodeBusy, EpisodeError, EpisodeFinished, coerce_task
from sweworld.env.opening import open_episode
from sweworld.env.r2egym_types import Action, Observation, as_action
from sweworld.env.rewards import EpisodeRewarder, FinalReward
from sweworld.sandbox.actions import FUNCTION_ALIASES
from sweworld.sandbox.render import (
    strip_ansi_cr,
)
from sweworld.sandbox.types import clean_text

__all__ = [
    "RESET_OBSERVATION",
    "Action",
    "Command",
    "EnvArgs",
    "Observation",
    "RepoEnv",
    "SandboxRuntime",
    "TaskPatches",
    "task_instruction",
]

log = logging.getLogger(__name__)

#: What ``RepoEnv.reset`` returns (R2E-Gym's value); the prompt is in ``env.prompt``.
RESET_OBSERVATION = "Environment reset"
#: R2E-Gym's per-command default deadline (``CMD_TIMEOUT``), for ``runtime.run``.
CMD_TIMEOUT = 120
_ISSUE_OPEN, _ISSUE_CLOSE = "[ISSUE]", "[/ISSUE]"
_R2E_FORMATS = {"prompt_format": "r2egym", "action_format": "r2e", "observation_format": "r2egym"}


# --------------------------------------------------------------------------- args, runtime


@dataclass(frozen=True)
class EnvArgs:
    """R2E-Gym's environment arguments: the task row (``ds``). ``repo_path`` and
    ``docker_image`` are kept for ``dataclasses.asdict`` and not used."""

    ds: Mapping[str, Any]
    repo_path: str | None = None
    docker_image: str | None = None


@dataclass(frozen=True)
class Command:
    """A tool recorded by ``add_commands``: its sweworld ``name`` and where it came from."""

    name: str
    source: str = ""


def task_instruction(problem_statement: str) -> str:
    """The text between the first ``[ISSUE]`` and the last ``[/ISSUE]`` (as R2E-Gym's
    runtime extracts it), else the whole statement. Linear in its length."""
    text = clean_text(problem_statement or "")  # valid Unicode, as the observations
    start = text.find(_ISSUE_OPEN)
    end = text.rfind(_ISSUE_CLOSE)
    if start == -1 or end < start + len(_ISSUE_OPEN):
        return text
    return text[start + len(_ISSUE_OPEN) : end]


class TaskPatches:
    """``runtime.commit``: the task's reference diffs, split as R2E-Gym's parsed commit
    splits them (test files: ``test_patch``; the others: the gold ``patch``)."""

    def __init__(self, task: Any):
        self._task = task

    def get_patch(self, test_file: bool = True, non_test_file: bool = True) -> str:
        parts = []
        if non_test_file and self._task.patch:
            parts.append(self._task.patch)
        if test_file and self._task.test_patch:
            parts.append(self._task.test_patch)
        return "\n".join(p.rstrip("\n") for p in parts) + ("\n" if parts else "")


class SandboxRuntime:
    """``env.runtime``: the parts of R2E-Gym's ``DockerRuntime`` its agents use, on the
    episode's sandboxed session (``run`` is not an agent step: it is not counted)."""

    def __init__(self, env: RepoEnv):
        self._env = env
        task = env.task
        self.ds = env.args.ds
        self.repo_name = task.repo
        self.repo_path = "/testbed"
        self.docker_image = str(
            self.ds.get("docker_image") or self.ds.get("image_name") or f"sweworld:{task.repo}"
        )
        self.commit = TaskPatches(task)

    def get_task_instruction(self) -> str:
        return self._env.get_task_instruction()

    def get_patch(self) -> str:
        return self._env.get_patch()

    def run(
        self, code: str, timeout: float = CMD_TIMEOUT, args: str = "", workdir: str | None = None
    ) -> tuple[str, str]:
        """Run a shell command in the sandbox: ``(output, error_code)`` as R2E-Gym reports
        them (``"0"``, ``"Error: Exit code N"``; ``"-1"`` after a timeout)."""
        command = f"{code} {args}".strip() if args else code
        if workdir:
            command = f"cd {shlex.quote(workdir)} && {command}"
        return self._env._shell(command, timeout)

    def apply_patch(self, patch: str) -> tuple[str, str]:
        return self._env.apply_patch(patch)

    def reverse_patch(self, patch: str) -> tuple[str, str]:
        return self._env.apply_patch(patch, reverse=True)

    def _calculate_reward(self, get_test_output: bool = False, timeout: float | None = None) -> Any:
        reward = self._env.compute_reward(timeout)
        if not get_test_output:
            return reward
        final = self._env.last_reward
        evidence = json.dumps(final.to_dict(), indent=1, default=str) if final else ""
        return reward, evidence

    def close(self) -> None:
        self._env.close()


# --------------------------------------------------------------------------- the env


class RepoEnv:
    """R2E-Gym's ``RepoEnv`` on a sweworld episode (see the module docstring).

    Args:
        args: :class:`EnvArgs` holding the task row (``ds``); a bad row is a ``ValueError``
            naming the field.
        logger: where to log (``logging.getLogger(__name__)`` otherwise).
        backend: R2E-Gym's container backend; accepted, unused.
        verbose: False logs only failures (and sets a ``logger`` given here to CRITICAL,
            as R2E-Gym does; the module's own logger is left alone).
        step_timeout: seconds per step (the episode's ``step_timeout_s``); None keeps the
            config's.
        reward_timeout: seconds for the real test run of the reward; None keeps the
            rewarder's.
        config: the episode's rules (:class:`EpisodeConfig`); its prompt, action and
            observation formats are set to R2E-Gym's unless ``episode_options`` say otherwise.
        manager, executor, rewarder: shared backends (see :class:`Episode`).
        **episode_options: :class:`EpisodeConfig` fields (``executor="local"``,
            ``reward="real"``, ``max_steps=...``).
    """

    def __init__(
        self,
        args: EnvArgs,
        logger: logging.Logger | None = None,
        backend: str | None = "docker",
        verbose: bool = True,
        step_timeout: float | None = None,
        reward_timeout: float | None = None,
        *,
        config: EpisodeConfig | None = None,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        **episode_options: Any,
    ):
        if not isinstance(args, EnvArgs) and not hasattr(args, "ds"):
            raise TypeError(f"RepoEnv needs EnvArgs(ds=task_row), not {type(args).__name__}")
        if not isinstance(args.ds, Mapping) or not args.ds:
            raise ValueError("EnvArgs.ds must be a non-empty task row (a mapping)")
        self.args = args
        self.task = coerce_task(args.ds)  # ValueError naming a missing or bad field
        self.logger = logger or log
        self.verbose = verbose
        if not verbose and logger is not None:  # R2E-Gym silences the logger it is given
            logger.setLevel(logging.CRITICAL)
        self.backend = backend
        options: dict[str, Any] = dict(_R2E_FORMATS)
        if step_timeout is not None:
            options["step_timeout_s"] = float(step_timeout)
        options.update(episode_options)
        self.config = (config or EpisodeConfig()).replace(**options)
        self._own_manager = self._own_rewarder = False
        if reward_timeout is not None and self.config.world is not None:
            log.warning("RepoEnv: reward_timeout is ignored: the world service's deadline applies")
            reward_timeout = None
        if reward_timeout is not None and rewarder is None:
            if not reward_timeout > 0:
                raise ValueError(f"reward_timeout must be positive, got {reward_timeout!r}")
            if manager is None:
                from sweworld.sandbox.manager import SessionManager

                manager, self._own_manager = SessionManager(), True
            from sweworld.world import swr_lm_for

            rewarder = EpisodeRewarder(
                self.config,
                swr_lm=swr_lm_for(self.config),
                manager=manager,
                real_timeout_s=float(reward_timeout),
            )
            self._own_rewarder = True
        self.reward_timeout = reward_timeout
        self.episode = open_episode(
            self.task, self.config, manager=manager, executor=executor, rewarder=rewarder
        )
        self.commands: list[Command] = []
        self.done = False
        self.observation: Observation | str | None = None
        self.state = None
        self.prompt: str | None = None
        self.reset_info: dict[str, Any] = {}
        self.last_reward: FinalReward | None = None
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self.runtime = SandboxRuntime(self)

    # ------------------------------------------------------------------ plumbing

    @contextlib.contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            raise EpisodeBusy(
                f"RepoEnv {self.episode.id}: {what}() while another call of this env is "
                "running; use one env per thread"
            )
        try:
            if self._closed:
                raise EpisodeError(f"RepoEnv {self.episode.id} is closed")
            yield
        finally:
            self._lock.release()

    def _start(self) -> None:
        """Open the sandbox (the container of R2E-Gym, started with the env)."""
        self.prompt, self.reset_info = self.episode.reset()
        self._started = True
        self.done = False
        self.last_reward = None

    def _live_session(self, what: str) -> Any:
        if not self._started:
            self._start()
        if self.episode.done:
            raise EpisodeFinished(
                f"RepoEnv {self.episode.id}: {what}() after the episode ended "
                f"({self.episode.reason}); call reset() to start another"
            )
        return self.episode.session

    def _local_session(self, what: str) -> Any:
        """The live sandbox session, which only a local episode has."""
        if self.config.world is not None:
            raise EpisodeError(
                f"RepoEnv: {what}() needs the sandbox in this process, but the episode runs on "
                f"the world service {self.config.world} (remotely: reset, step, "
                "compute_reward, get_patch, close)"
            )
        return self._live_session(what)

    def _current_patch(self, what: str) -> str:
        session = self._live_session(what)
        if session is None:  # a remote episode: the service reads the workspace
            return self.episode.current_patch()
        return session.get_patch()

    def _shell(self, command: str, timeout: float | None) -> tuple[str, str]:
        with self._exclusive("runtime.run"):
            session = self._local_session("runtime.run")
            outcome = session.run(command, timeout=timeout, merge_stderr=True)
        if outcome.timed_out:
            return f"The command took too long to execute (>{timeout}s)", "-1"
        output = outcome.stdout + outcome.stderr
        if outcome.exit_code != 0:
            return output, f"Error: Exit code {outcome.exit_code}"
        return strip_ansi_cr(output), "0"

    # ------------------------------------------------------------------ R2E-Gym's API

    def reset(self) -> str:
        """Start the episode afresh on a new sandbox; returns ``"Environment reset"`` (the
        task prompt is ``self.prompt``, the reset info ``self.reset_info``)."""
        with self._exclusive("reset"):
            self._start()
            self.observation = RESET_OBSERVATION
            return RESET_OBSERVATION

    def add_commands(self, cmd_files: Sequence[Any]) -> None:
        """Record the tools named by R2E-Gym command files (paths, their stem is the tool:
        ``tools/file_editor.py``) or command objects (``.name``). sweworld's tools are built
        in: nothing is copied. A tool sweworld does not have is a ``ValueError``."""
        from sweworld.sandbox.tools import SPECS

        if isinstance(cmd_files, (str, os.PathLike)):
            cmd_files = [cmd_files]
        commands = []
        for item in cmd_files:
            if isinstance(item, (str, os.PathLike)):
                name, source = PurePath(os.fspath(item)).stem, os.fspath(item)
            elif isinstance(getattr(item, "name", None), str):
                name, source = item.name, repr(item)
            else:
                raise TypeError(f"a command is a file path or has a .name, not {item!r}")
            tool = FUNCTION_ALIASES.get(name, name)
            if tool not in SPECS:
                raise ValueError(
                    f"sweworld has no tool {name!r} (from {source}); its built-in tools are "
                    f"{', '.join(SPECS)} (aliases: {', '.join(FUNCTION_ALIASES)})"
                )
            commands.append(Command(tool, source))
        self.commands = commands
        if self.verbose:
            self.logger.info("recorded commands %s", [c.name for c in commands])

    def step(
        self, action: Action | str | Mapping[str, Any], timeout: float | None = None
    ) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Run one action: ``(Observation, reward, done, info)``.

        ``reward`` is 0.0 (plus the dense signal when the config turns it on); the final
        reward is :meth:`compute_reward`'s. ``info`` holds ``total_time`` and the episode's
        step info (``reason``, ``patch`` and ``reward`` evidence at the end).
        """
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        action_obj, payload = as_action(action)
        with self._exclusive("step"):
            if not self._started:
                self._start()
            started = time.perf_counter()
            outcome = self.episode.step(payload)  # EpisodeFinished after the end
            total = time.perf_counter() - started
        info = dict(outcome.info)
        info["total_time"] = total
        if timeout is not None:
            info["requested_timeout"] = timeout
        obs = Observation.from_episode(
            outcome.observation, info.get("exit_code", -1), action_obj, info.get("tool")
        )
        reward = float(info["signals"]["dense"]) if self.config.dense else 0.0
        self.observation = obs
        self.done = outcome.done
        if outcome.done:
            self.last_reward = self.episode.final
        return obs, reward, self.done, info

    def get_task_instruction(self) -> str:
        """The issue text (inside ``[ISSUE]...[/ISSUE]`` when the statement has them)."""
        return task_instruction(self.task.problem_statement)

    def compute_reward(self, timeout: float | None = None, *, submitted: bool = True) -> float:
        """The reward of the episode: the final one once it ended (computed then, cached),
        otherwise the configured reward of the current patch, scored now (``submitted``
        says whether to grade it as a submission; the episode goes on). ``timeout`` is
        accepted for R2E-Gym's call shape (the reward's deadline is ``reward_timeout``)."""
        with self._exclusive("compute_reward"):
            episode = self.episode
            if self._started and episode.done:
                final = episode.final or FinalReward(0.0, None, "none", "not_scored")
            elif not submitted and not self.config.score_unsubmitted:
                final = FinalReward(0.0, None, "none", "not_scored")
            else:
                patch = self._current_patch("compute_reward")
                final = episode.score(patch, submitted=submitted)  # under its deadline
            if final.error:
                self.logger.warning("RepoEnv %s: reward failed: %s", episode.id, final.error)
            self.last_reward = final
            return float(final.value)

    def get_patch(self) -> str:
        """The diff of the workspace against the base commit (the final one after the end;
        empty before the sandbox started)."""
        with self._exclusive("get_patch"):
            if not self._started:
                return ""
            if self.episode.done:
                return self.episode.patch or ""
            return self._current_patch("get_patch")

    def apply_patch(self, patch: str, *, reverse: bool = False) -> tuple[str, str]:
        """``git apply --whitespace=fix`` (``-R`` with ``reverse``) of ``patch`` in the
        workspace: ``(output, error_code)`` as R2E-Gym's runtime returns them."""
        if not isinstance(patch, str):
            raise TypeError(f"a patch is text (a unified diff), not {type(patch).__name__}")
        name = f"/tmp/.sweworld-{uuid.uuid4().hex}.patch"
        flags = "-R" if reverse else "--whitespace=fix"
        with self._exclusive("apply_patch"):
            session = self._local_session("apply_patch")
            session.write_file(name, patch)
            outcome = session.run(f"git apply {flags} {name}; s=$?; rm -f {name}; exit $s")
        output = outcome.stdout + outcome.stderr
        if outcome.exit_code != 0:
            return output, f"Error: Exit code {outcome.exit_code}"
        return strip_ansi_cr(output), "0"

    def check_done(self) -> bool:
        return self.done

    def get_stats(self) -> Mapping[str, Any]:
        return self.args.ds

    def close(self) -> None:
        """Free the sandbox (and the manager and rewarder the env made itself)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.episode.close()
            if self._own_rewarder:
                self.episode.rewarder.close()
            if self._own_manager:
                self.episode.manager.close_all()

    def __enter__(self) -> RepoEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RepoEnv {self.task.instance_id} via {self.episode!r}>"
