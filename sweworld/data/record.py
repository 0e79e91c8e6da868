"""Recording execution steps as SWT examples, with the context SWT would see.

:class:`RecordingExecutor` wraps the executor that gives the truth (the LocalExecutor or
the Docker executor running a command for real, or a replay executor answering from a
recorded trajectory). For each execution call it builds the SWT contexts (oracle and
blind) from the same request, workspace view, facts and history, with the same builder and
budgets as :class:`~sweworld.transition.simulated.SimulatedExecutor` at inference, asks the
truth executor, and hands one :class:`~sweworld.data.schema.SWTRecord` to a sink. With a
``predictor`` (a simulated executor) the simulator's answer is recorded beside the truth.

The history in a context is the truth's earlier results in the same session (what the agent
saw), newest last, as the simulator keeps its own.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sweworld.data.schema import SWTRecord, command_kind, record_id, to_json
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult, session_base

__all__ = ["RecordingExecutor", "context_config", "test_statuses"]

HISTORY_STEPS = 20
HISTORY_OUTPUT_CHARS = 4000
DIFF_LIMIT = 200_000
COUNT_CACHE_SIZE = 200_000  # token counts remembered by text (see _embedded_counter)


@functools.lru_cache(maxsize=1)
def _embedded_counter() -> Callable[[str], int] | None:
    """Exact token counts with the embedded model's tokenizer (what the simulator uses when
    the embedded model answers), or None when it is not installed."""
    try:
        from transformers import AutoTokenizer

        from sweworld.models.embedded import embedded_model_path

        tok = AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)
    except Exception:  # not installed, not convertible: budgets counted approximately
        return None
    lock = threading.Lock()
    known: dict[str, int] = {}

    def count(text: str) -> int:
        # The same lines and files are counted at every step of a session (a replay's
        # contexts re-read unchanged code): counts are remembered by text, which halves
        # the cost of building contexts. Bounded: cleared when full.
        n = known.get(text)
        if n is not None:
            return n
        with lock:
            n = len(tok(text, add_special_tokens=False)["input_ids"])
            if len(known) >= COUNT_CACHE_SIZE:
                known.clear()
            known[text] = n
        return n

    return count


def context_config(mode: str, model: str = "embedded") -> Any:
    """The context budgets the simulator uses for ``model`` in ``mode``: for the embedded
    model its small budgets counted with its tokenizer, else the defaults."""
    from sweworld.transition.context import ContextConfig
    from sweworld.transition.simulated import EMBEDDED_BUDGETS

    if model == "embedded":
        cfg = ContextConfig(mode=mode, **EMBEDDED_BUDGETS)
        counter = _embedded_counter()
        return replace(cfg, count_tokens=counter) if counter is not None else cfg
    return ContextConfig(mode=mode)


def test_statuses(command: str, output: str, repo: str | None) -> dict[str, str]:
    """Per-test statuses in a command's output, by the shared grader's parser for ``repo``
    (empty when the command is not a test run or no test line is in the output)."""
    from sweworld.execution.log_parsers import parse_log

    if command_kind(command) not in ("pytest", "unittest"):
        return {}
    try:
        return dict(parse_log(output, repo))
    except Exception:  # a parser never makes a record fail
        return {}


class RecordingExecutor:
    """An executor that answers with ``truth`` and records every call as an SWT example.

    Args:
        truth: the executor whose answers are the truth.
        sink: called with each :class:`SWTRecord` (e.g. ``RecordStore.add``).
        source: the records' ``source``.
        state_source: the records' ``state_source`` (``live`` or ``replay``).
        predictor: an executor whose answer is recorded beside the truth (``prediction``).
        model: whose context budgets to use (``embedded`` or anything else: the defaults).
        modes: which contexts to build (``oracle``, ``blind``); none (``()``) records the
            state (diff), the command and the truth only, several times faster on large
            repositories, with ``context_oracle`` / ``context_blind`` left empty.
        meta: extra JSON-able fields for every record.

    ``begin_step(n)`` tells it the agent's step index (call indexes restart at 0);
    ``annotate(**fields)`` overrides record fields of the calls that follow in the step
    (for example ``consistent=False`` or ``output_truncated=True``).
    """

    name = "recording"

    def __init__(
        self,
        truth: Any,
        sink: Callable[[SWTRecord], Any],
        *,
        source: str,
        state_source: str = "live",
        predictor: Any = None,
        model: str = "embedded",
        modes: tuple[str, ...] = ("oracle", "blind"),
        meta: dict[str, Any] | None = None,
    ):
        self.truth = truth
        self.sink = sink
        self.source = source
        self.state_source = state_source
        self.predictor = predictor
        self.modes = tuple(modes)
        self.configs = {m: context_config(m, model) for m in self.modes}
        self.meta = dict(meta or {})
        self._lock = threading.Lock()
        self._history: dict[str, list[Any]] = {}
        self._step: dict[str, int] = {}
        self._call: dict[str, int] = {}
        self._annotations: dict[str, dict[str, Any]] = {}
        self.records: list[SWTRecord] = []  # this executor's records, in order

    # -- step bookkeeping --------------------------------------------------------------

    def begin_step(self, step: int, session_id: str = "", **annotations: Any) -> None:
        with self._lock:
            self._step[session_id] = step
            self._call[session_id] = 0
            self._annotations[session_id] = dict(annotations)

    def prepare_base(self, task: Any, base: Any) -> Any:
        """The base the real side's sessions open on (:func:`~sweworld.sandbox.executor.
        session_base`)."""
        return session_base(self.truth, task, base)

    def close_session(self, session_id: str) -> None:
        with self._lock:
            for table in (self._history, self._step, self._call, self._annotations):
                table.pop(session_id, None)
        if hasattr(self.truth, "close_session"):
            self.truth.close_session(session_id)

    def _key(self, request: ExecutionRequest) -> str:
        # begin_step may be called before the session id is known: "" is every session's
        return request.session_id if request.session_id in self._step else ""

    # -- execution ---------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        from sweworld.transition.context import HistoryItem, build_context
        from sweworld.transition.facts import compute_facts
        from sweworld.transition.types import WorkspaceView

        view = WorkspaceView.from_request(request)
        # no context asked for (``modes=()``): the facts only feed the contexts
        facts = compute_facts(request, view) if self.configs else None
        with self._lock:
            key = self._key(request)
            history = tuple(self._history.get(request.session_id, ()))
            step = self._step.get(key, 0)
            call = self._call.get(key, 0)
            self._call[key] = call + 1
            annotations = dict(self._annotations.get(key, {}))
        contexts = {
            mode: build_context(
                request, view, task=request.task, history=history, facts=facts, config=cfg
            )
            for mode, cfg in self.configs.items()
        }
        diff = view.diff(limit=DIFF_LIMIT)
        result = self.truth.execute(request)
        prediction = ""
        if self.predictor is not None:
            pred = self.predictor.execute(request)
            prediction = to_json(
                {
                    "stdout": pred.stdout,
                    "stderr": pred.stderr,
                    "exit_code": pred.exit_code,
                    "source": pred.info.get("source"),
                }
            )
        task = request.task
        repo = getattr(task, "repo", "") or ""
        command = request.command
        output = result.stdout + "\n" + result.stderr
        statuses = test_statuses(command, output, repo or None)
        instance = getattr(task, "instance_id", "") or ""
        fields: dict[str, Any] = {
            "id": record_id(self.source, instance, request.session_id, step, call, command),
            "source": self.source,
            "instance_id": instance,
            "repo": repo,
            "base_commit": request.base_commit,
            "task": to_json(task.to_row()) if hasattr(task, "to_row") else "",
            "step": step,
            "call": call,
            "state_source": self.state_source,
            "command": command,
            "cwd": request.cwd,
            "stdin": request.stdin.decode("utf-8", "replace"),
            "env": to_json(dict(request.env)),
            "diff": diff,
            "history": to_json([h.__dict__ for h in history]),
            "context_oracle": json.dumps(contexts["oracle"].to_dict())
            if "oracle" in contexts
            else "",
            "context_blind": json.dumps(contexts["blind"].to_dict()) if "blind" in contexts else "",
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": int(result.exit_code),
            "ran_tests": bool(statuses) or command_kind(command) in ("pytest", "unittest"),
            "test_statuses": to_json(statuses),
            "command_kind": command_kind(command),
            "prediction": prediction,
            "meta": to_json({**self.meta, "executor": result.info.get("executor")}),
        }
        fields.update(annotations)
        record = SWTRecord(**fields)
        with self._lock:
            items = self._history.setdefault(request.session_id, [])
            items.append(
                HistoryItem(
                    command=command,
                    exit_code=int(result.exit_code),
                    output=(result.stdout + result.stderr)[-HISTORY_OUTPUT_CHARS:],
                )
            )
            del items[:-HISTORY_STEPS]
            self.records.append(record)
        self.sink(record)
        return result
