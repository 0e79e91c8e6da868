"""TRL adapter: the environment ``GRPOTrainer(environment_factory=...)`` takes (TRL 1.x).

TRL's contract (``trl/trainer/grpo_trainer.py``): the factory is called with no argument and
returns an object with a ``reset(**row)`` method, whose returned string is appended to the
last user message of the row's prompt; every other public method is a tool the model may
call (exposed through the chat template from its type hints and Google-style docstring, run
as ``method(**arguments)``, its return value shown as a ``tool`` message; an exception is
shown as ``{"error": ...}``); ``get_reward()`` (no argument, a float) is called once per
finished rollout and logged as ``rewards/<class name>/mean``. One instance serves one rollout
at a time and is reset for the next ("construct once, reset often").

:class:`SWEWorldToolEnv` is that object over one :class:`~sweworld.env.Episode`: its tools are
sweworld's (``file_editor``, ``search``, ``execute_bash``, ``finish``), each one episode step;
``get_reward`` is the episode's final reward (the real test run or SWR, as configured). A
rollout that ends without ``finish`` (the model answered without a tool call, or TRL cut it
at ``max_completion_length`` / ``max_tool_calling_iterations``) is ended by ``get_reward``
with a real ``finish`` step, so its patch is graded as it stands (``info["ended_by"]`` says
``trainer``).

Use :func:`make_environment_factory` so the instances TRL makes share one session manager,
executor and reward backend (the embedded models load once). The task of a rollout comes
from its dataset row (a ``task`` column holding a task row or its JSON, as
:func:`grpo_dataset` writes it; or an ``instance_id`` found in the factory's tasks; or the
task's own fields as columns), else the factory's tasks in turn (training without a dataset).

This module imports neither TRL nor transformers; the tool methods' signatures follow what
transformers' ``get_json_schema`` reads.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import Episode, EpisodeError, coerce_task
from sweworld.env.opening import open_episode
from sweworld.env.rewards import EpisodeRewarder
from sweworld.sandbox.types import clean_text
from sweworld.tasks.schema import Task
from sweworld.world import World

__all__ = [
    "INSTRUCTION",
    "SWEWorldEnvironmentFactory",
    "SWEWorldToolEnv",
    "grpo_dataset",
    "make_environment_factory",
]

#: The instruction a row's prompt carries (the issue is appended by ``reset``).
INSTRUCTION = (
    "You are working in a Python repository checked out at /testbed. Use the tools to read "
    "the code, change it so that the issue below is resolved, and call finish when you are "
    "done. Change only non-test files."
)


def _issue_text(task: Task) -> str:
    problem = clean_text(task.problem_statement or "").strip()
    problem = problem or "(the task has no problem statement)"
    return f"\n\n<github_issue>\n{problem}\n</github_issue>"


class _Shared:
    """What the instances of one factory share: backends, tasks and their turn."""

    def __init__(
        self,
        config: EpisodeConfig,
        tasks: list[Task],
        manager: Any,
        executor: Any,
        rewarder: EpisodeRewarder | None,
    ):
        self.config = config
        self.tasks = tasks
        self.by_id = {task.instance_id: task for task in tasks}
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._given = {"manager": manager, "executor": executor, "rewarder": rewarder}
        self._world: World | None = None

    def next_task(self) -> Task | None:
        if not self.tasks:
            return None
        with self._lock:
            return self.tasks[next(self._turn) % len(self.tasks)]

    def backends(self) -> tuple[Any, Any, EpisodeRewarder]:
        """The shared manager, executor and rewarder: one :class:`~sweworld.world.World`'s
        (built on first use from the config, with the parts given to the constructor)."""
        with self._lock:
            if self._world is None:
                self._world = World.for_episode(self.config, **self._given)
            world = self._world
            return world.manager, world.executor, world.rewarder

    def close(self) -> None:
        with self._lock:
            world, self._world = self._world, None
        if world is not None:
            world.close()  # what it built; the parts given stay open


class SWEWorldToolEnv:
    """One rollout at a time of a sweworld episode, as TRL's ``environment_factory`` wants.

    Public methods other than ``reset`` and ``get_reward`` are the model's tools (TRL exposes
    every public method), so helpers here are private or properties.

    Args:
        tasks: tasks (or task rows) for rows that only name an ``instance_id``, or to take in
            turn when rows carry no task.
        config: the episode rules (:class:`~sweworld.env.EpisodeConfig`); keyword overrides
            are applied on top (``executor=``, ``reward=``, ``max_steps=``, ...).
        manager, rewarder: backends to share (a factory passes its own).
        executor: an executor instance to share, or a spec string (``local``,
            ``simulated``, ...: the config's ``executor``).
    """

    def __init__(
        self,
        tasks: Iterable[Any] | None = None,
        config: EpisodeConfig | None = None,
        *,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        _shared: _Shared | None = None,
        **overrides: Any,
    ):
        if isinstance(executor, str):  # a spec ("local", "simulated", ...), not an instance
            overrides["executor"], executor = executor, None
        if _shared is None:
            config = config or EpisodeConfig()
            config = config.replace(**overrides) if overrides else config
            _shared = _Shared(
                config, [coerce_task(t) for t in tasks or ()], manager, executor, rewarder
            )
        self._shared_state = _shared
        self._episode: Episode | None = None
        self._ended_by: str | None = None
        #: The last step's ``info`` (at the end: ``reason``, ``patch``, ``reward`` evidence).
        self.last_info: dict[str, Any] = {}
        #: Rollouts started and tool calls run by this instance (for logs and tests).
        self.resets = 0
        self.tool_calls = 0

    # ------------------------------------------------------------------ TRL's interface

    def reset(self, **row: Any) -> str:
        """Start a rollout on the row's task (see the module docstring); returns the issue
        text TRL appends to the prompt's last user message."""
        task = self._task_of(row)
        if self._episode is None:
            config = self._shared_state.config
            if config.world is not None:  # the service's backends
                self._episode = open_episode(task, config)
            else:
                manager, executor, rewarder = self._shared_state.backends()
                self._episode = open_episode(
                    task, config, manager=manager, executor=executor, rewarder=rewarder
                )
        self._episode.reset(task)
        self._ended_by = None
        self.last_info = {}
        self.resets += 1
        return _issue_text(task)

    def get_reward(self) -> float:
        """The rollout's final reward; a rollout that did not call ``finish`` is ended here
        with a ``finish`` step and graded as it stands."""
        episode = self._require_episode()
        if not episode.done:
            self._ended_by = "trainer"
            self._run("finish", {"command": "submit"}, count=False)
        self.last_info["ended_by"] = self._ended_by or "agent"
        return float(episode.final.value) if episode.final is not None else 0.0

    # ------------------------------------------------------------------ tools

    def file_editor(
        self,
        command: str,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
        concise: bool | None = None,
    ) -> str:
        """View, create and edit files in the repository.

        Args:
            command: One of view, create, str_replace, insert, undo_edit.
            path: Absolute path of the file or directory, e.g. /testbed/pkg/module.py.
            file_text: Content of the new file (create).
            old_str: Exact text to replace, whitespace included; it must occur once (str_replace).
            new_str: Replacement text (str_replace) or the text to insert (insert).
            insert_line: Line number after which new_str is inserted (insert).
            view_range: First and last line to show; last -1 means to the end (view).
            concise: True for a skeleton of a long file (view).

        Returns:
            What the editor printed.
        """
        params = {
            "command": command,
            "path": path,
            "file_text": file_text,
            "old_str": old_str,
            "new_str": new_str,
            "insert_line": insert_line,
            "view_range": view_range,
            "concise": concise,
        }
        return self._run("file_editor", params)

    def search(self, search_term: str, path: str | None = None) -> str:
        """Find a term in a file (with line numbers) or in every file under a directory.

        Args:
            search_term: The text to look for.
            path: A file or directory; the repository root when omitted.

        Returns:
            The matches found.
        """
        return self._run("search", {"search_term": search_term, "path": path})

    def execute_bash(self, cmd: str) -> str:
        """Run a bash command in /testbed and return its output and exit code.

        Args:
            cmd: The command line.

        Returns:
            The command's output and exit code.
        """
        return self._run("execute_bash", {"cmd": cmd})

    def finish(self, result: str | None = None) -> str:
        """Submit the current state of the repository as the fix and end the episode.

        Args:
            result: An optional final message.

        Returns:
            A confirmation; no tool can be called after it.
        """
        return self._run("finish", {"command": "submit", "result": result})

    # ------------------------------------------------------------------ internals

    @property
    def episode(self) -> Episode | None:
        """The episode behind the current rollout (None before the first ``reset``)."""
        return self._episode

    def _require_episode(self) -> Episode:
        if self._episode is None:
            raise EpisodeError("call reset() before the tools or get_reward()")
        return self._episode

    def _run(self, tool: str, params: Mapping[str, Any], *, count: bool = True) -> str:
        episode = self._require_episode()
        args = {key: value for key, value in params.items() if value is not None}
        out = episode.step({"function": tool, "parameters": args})
        if count:
            self.tool_calls += 1
        self.last_info = dict(out.info)
        if out.done and self._ended_by is None:
            self._ended_by = "agent"
        return out.observation

    def _task_of(self, row: Mapping[str, Any]) -> Task:
        shared = self._shared_state
        task = row.get("task")
        if task is not None:
            try:
                return coerce_task(task)
            except ValueError as exc:
                raise ValueError(f"the row's 'task' is not a task row: {exc}") from exc
        instance_id = row.get("instance_id")
        if instance_id is not None and "problem_statement" in row:
            return coerce_task({k: v for k, v in row.items() if k != "prompt"})
        if instance_id is not None:
            if instance_id not in shared.by_id:
                raise ValueError(
                    f"the row names instance_id {instance_id!r}, which is not among this "
                    f"environment's {len(shared.tasks)} task(s)"
                )
            return shared.by_id[instance_id]
        task = shared.next_task()
        if task is None:
            raise EpisodeError(
                "reset() found no task: give the dataset a 'task' column (see grpo_dataset) "
                "or an 'instance_id' column, or give the environment tasks"
            )
        return task

    def _close(self) -> None:
        """Free the rollout's session (private: TRL would expose a public method as a tool)."""
        if self._episode is not None:
            self._episode.close()
            self._episode = None


class SWEWorldEnvironmentFactory:
    """``environment_factory=``: each call makes a :class:`SWEWorldToolEnv` sharing this
    factory's backends and tasks; ``instances`` lists them; ``close()`` frees them all."""

    def __init__(
        self,
        tasks: Iterable[Any] | None = None,
        config: EpisodeConfig | None = None,
        *,
        manager: Any = None,
        executor: Any = None,
        rewarder: EpisodeRewarder | None = None,
        env_class: type[SWEWorldToolEnv] = SWEWorldToolEnv,
        **overrides: Any,
    ):
        if isinstance(executor, str):  # a spec ("local", "simulated", ...), not an instance
            overrides["executor"], executor = executor, None
        config = config or EpisodeConfig()
        config = config.replace(**overrides) if overrides else config
        tasks_list = [coerce_task(t) for t in tasks or ()]
        self.shared = _Shared(config, tasks_list, manager, executor, rewarder)
        self.env_class = env_class
        self.instances: list[SWEWorldToolEnv] = []

    def __call__(self) -> SWEWorldToolEnv:
        env = self.env_class(_shared=self.shared)
        self.instances.append(env)
        return env

    def close(self) -> None:
        for env in self.instances:
            env._close()
        self.shared.close()

    def __enter__(self) -> SWEWorldEnvironmentFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_environment_factory(
    tasks: Iterable[Any] | None = None, config: EpisodeConfig | None = None, **overrides: Any
) -> SWEWorldEnvironmentFactory:
    """A factory for ``GRPOTrainer(environment_factory=...)`` (see
    :class:`SWEWorldEnvironmentFactory`); keyword overrides are EpisodeConfig fields."""
    return SWEWorldEnvironmentFactory(tasks, config, **overrides)


def grpo_dataset(tasks: Iterable[Any], *, repeat: int = 1, instruction: str = INSTRUCTION) -> Any:
    """A ``datasets.Dataset`` for GRPO: ``prompt`` (one user message with ``instruction``;
    ``reset`` appends the issue) and ``task`` (the task row as JSON), each task ``repeat``
    times."""
    from datasets import Dataset

    rows = []
    for task in tasks:
        row = coerce_task(task)
        entry = {
            "prompt": [{"role": "user", "content": instruction}],
            "task": json.dumps(row.to_row()),
            "instance_id": row.instance_id,
        }
        rows.extend(dict(entry) for _ in range(repeat))
    if not rows:
        raise ValueError("grpo_dataset needs at least one task")
    return Dataset.from_list(rows)
