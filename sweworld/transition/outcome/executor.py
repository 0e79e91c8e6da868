"""``OutcomeExecutor``: execution commands answered by the outcome model and the renderer.

One step: features of the command on the session's current state
(:mod:`~sweworld.transition.outcome.features`), the model's decision (exit-code class,
exception type, the status of every test pytest would collect), and the text in the real
tool's format (:mod:`~sweworld.transition.outcome.render`). No language model is called,
so a step costs milliseconds. ``info["route"]`` says what answered:

* ``outcome-model``: the model decided, the renderer wrote;
* ``exact``: a script that does not exist or does not compile (the interpreter's message);
* ``informational``: pytest's ``--help`` / ``--version``: exit 0, no test runs, no text;
* ``timeout``: the step's deadline passed first (exit 126, nothing claimed; ``info["stage"]``);
* ``conservative``: a command kind the model was not trained on (``pip``,
  ``python --version``, ...): exit 0 and no output, and ``info["reason"]`` says why;
* ``lm``: the same, with a language model configured (``outcome-lm``): the LM route's
  whole answer (``info["lm"]`` holds its own info).

``info["text_source"]`` says where a script's printed output came from: ``ledger`` (the last
real-looking output of the same command in this session with the same exit code), ``lm``
(``outcome-lm``: the language model wrote it, the outcome model having decided the exit code
and exception) or ``none``. Test runs (pytest, Django's ``runtests.py``, SymPy's
``bin/test``, ``python -m unittest``) get one consistent decision
(:meth:`~sweworld.transition.outcome.model.OutcomeModel.decide_tests`) rendered in the
runner's own format. The ledger of each session holds the outcomes this executor answered earlier.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweworld.sandbox.executor import (
    NO_EXECUTOR_EXIT_CODE,
    ExecutionRequest,
    ExecutionResult,
)
from sweworld.tasks.fields import task_field
from sweworld.tasks.patches import patch_hunks
from sweworld.transition.deadline import StepOverrun, check_deadline, step_deadline
from sweworld.transition.facts.pytest_args import env_addopts
from sweworld.transition.outcome.collect import collect_tests
from sweworld.transition.outcome.exact import (
    broken_import_answer,
    exact_answer,
    informational_answer,
    missing_target_answer,
    runner_absent_answer,
)
from sweworld.transition.outcome.features import (
    TEST_RUNNER_KINDS,
    Ledger,
    command_kind_of,
    per_test_rows,
    shlex_join,
    step_features,
)
from sweworld.transition.outcome.fixtures import environment_plugins, setup_errors
from sweworld.transition.outcome.graded import (
    RememberedJudge,
    graded_ids,
    graded_state,
    graded_tests,
    reconcile_statuses,
)
from sweworld.transition.outcome.marks import apply_marks, command_marks, summary_details
from sweworld.transition.outcome.model import OutcomeModel, load_shared
from sweworld.transition.outcome.priors import GENERIC_EXCEPTIONS, reported_exception
from sweworld.transition.outcome.pytest_terminal import command_layout
from sweworld.transition.outcome.render import (
    render_other_runner,
    render_pytest,
    render_traceback,
)
from sweworld.transition.outcome.state import FileState

__all__ = ["DEFAULT_MODEL", "OutcomeExecutor", "outcome_with_lm"]

#: The shipped model (trained by ``sweworld train outcome``; see its README).
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "adapters" / "outcome-default" / "model.json"
_MAX_TESTS = 5000
#: A command that may install packages (the environment's plugins are then unknown).
_INSTALLS = re.compile(r"\binstall\b|\bsetup\.py\s+develop\b")


class OutcomeExecutor:
    """Predicts an execution command's result with the outcome model (thread-safe).

    Args:
        model: a model file or folder (default: the shipped one), or a loaded model.
        mode: ``blind`` (no gold patch or test lists) or ``oracle``.
        judge: what decides whether a state resolves its task, so that a simulated run of
            the task's graded tests agrees with the reward (one state, one truth): a
            callable ``judge(task, patch) -> bool | None`` given the state's diff without
            the files the grader resets (None: no decision). :class:`~sweworld.world.World`
            passes its reward's; without one, the outcome model's own decision about those
            tests stands.
    """

    name = "outcome"

    def __init__(
        self,
        model: str | Path | OutcomeModel | None = None,
        mode: str = "oracle",
        *,
        text: Any = None,
        judge: Callable[[Any, str], bool | None] | None = None,
    ):
        if mode not in ("oracle", "blind"):
            raise ValueError(f"mode must be 'oracle' or 'blind', not {mode!r}")
        self.mode = mode
        #: an executor (the LM route) that writes a script's printed text where the session
        #: has none; the outcome model still decides the exit code and the exception
        self.text = text
        if isinstance(model, OutcomeModel):
            self.model, self.model_path = model, "<in memory>"
        else:
            path = Path(model) if model is not None else DEFAULT_MODEL
            self.model, self.model_path = load_shared(path), str(path)
        self.judge = judge
        self._ledgers: dict[str, Ledger] = {}
        self._outputs: dict[tuple[str, str, int], str] = {}
        self._lock = threading.Lock()

    @property
    def judge(self) -> Callable[[Any, str], bool | None] | None:
        """The judge of the task's graded tests (None: the outcome model decides them);
        setting one starts its memory afresh (asked once per task and diff)."""
        return None if self._judge is None else self._judge.judge

    @judge.setter
    def judge(self, judge: Callable[[Any, str], bool | None] | None) -> None:
        self._judge = None if judge is None else RememberedJudge(judge)

    @classmethod
    def from_spec(cls, arg: str, **kwargs: Any) -> OutcomeExecutor:
        """``outcome:oracle`` / ``outcome:blind`` / ``outcome:PATH``."""
        if arg in ("oracle", "blind"):
            kwargs["mode"] = arg  # the spec's mode wins over a config's default
            return cls(**kwargs)
        return cls(model=arg, **kwargs)

    def _ledger(self, session: str) -> Ledger:
        with self._lock:
            return self._ledgers.setdefault(session, Ledger())

    def forget(self, session_id: str) -> None:
        """Drop what a session's ledger holds (its episode ended)."""
        with self._lock:
            self._ledgers.pop(session_id, None)
            for key in [k for k in self._outputs if k[0] == session_id]:
                del self._outputs[key]

    # ------------------------------------------------------------------ one step

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        """The step's answer, by ``request.deadline`` give or take one collection or one
        model call: the loops whose length the input decides stop there, and the step is
        answered as not simulated (:meth:`_overrun`)."""
        start = time.perf_counter()
        with step_deadline(request.deadline):
            try:
                return self._execute(request, start)
            except StepOverrun as over:
                return self._overrun(request, over, start)

    def _execute(self, request: ExecutionRequest, start: float) -> ExecutionResult:
        argv = list(request.argv)
        kind = command_kind_of(argv)
        info = self._step_info(kind)
        changed: list[str] = []
        if request.changes is not None:
            try:
                changes = request.changes()
                changed = [*changes.written, *changes.deleted]
            except Exception:  # a changes() failure only loses features
                info["changes_unavailable"] = True
        state = FileState.from_dirs(
            request.workspace or Path("/nonexistent"),
            request.base,
            changed,
            request.tmp,
            exact_changes=request.changes is not None and not info.get("changes_unavailable"),
        )
        installed = self._ledger(request.session_id).installed
        exact = runner_absent_answer(request, kind, installed, info)
        exact = exact or exact_answer(request, kind, state, info)
        exact = exact or informational_answer(request, kind, info)
        if exact is not None:
            return self._answered(request, argv, exact, info, start)
        untrained = bool(self.model.kinds) and kind not in self.model.kinds
        if untrained and kind in TEST_RUNNER_KINDS and "pytest" in self.model.kinds:
            # another test runner: the tests' features are the runner's own; pytest's heads
            # decide (the command-kind feature is one the model never saw set)
            info["decided_as"] = "pytest"
            untrained = False
        if kind == "other":
            return self._not_trained(request, argv, kind, info, start)
        ledger = self._ledger(request.session_id)
        stdin = request.stdin.decode("utf-8", "replace") if request.stdin else ""
        check_deadline("reading the state")
        ids, layout, addopts, missing = (
            self._collect(request, argv, kind, info)
            if kind in TEST_RUNNER_KINDS
            else ([], {}, (), None)
        )
        check_deadline("collecting the tests")
        if missing is not None:  # exact: pytest stops at a target that does not exist
            answer = missing_target_answer(missing, layout, request.task, argv)
            info.update(route="exact", text_source="exact", tests=0,
                        reason="a test target does not exist")  # fmt: skip
            return self._answered(request, argv, answer, info, start)
        listing = informational_answer(request, kind, info, collected=state)
        if listing is not None:  # exact: a fixture listing runs no test
            return self._answered(request, argv, listing, info, start)
        step = step_features(
            argv,
            request.cwd,
            state,
            request.task,
            oracle=self.mode == "oracle",
            ledger=ledger,
            stdin=stdin,
            test_ids=ids,
        )
        broken = broken_import_answer(step, state, kind, info)
        if broken is not None:
            return self._answered(request, argv, broken, info, start)
        if untrained:
            return self._not_trained(request, argv, kind, info, start)
        exit_cls = self.model.predict_exit([step.values], self.mode)[0]
        info.update(route="outcome-model", exit_class=exit_cls, exception="none")

        def exception() -> str:  # asked only when a failure shows it (the widest head)
            head = self.model.predict_exception([step.values], self.mode)[0]
            reported = reported_exception(request.task) if head in GENERIC_EXCEPTIONS else None
            if reported:  # the exception stands for a generic answer
                head, info["exception_source"] = reported, "problem statement"
            info["exception"] = head
            return head

        if kind in TEST_RUNNER_KINDS:
            graded = self._graded(request, state, ids, info)
            result = self._tests(
                ids, step, state, ledger, exit_cls, exception, info, graded, request.task,
                layout, addopts,
            )  # fmt: skip
        else:
            result = self._script(request, step, state, exit_cls, exception, info)
        statuses = info.pop("_statuses", {})
        return self._answered(request, argv, result, info, start, statuses)

    def _answered(
        self,
        request: ExecutionRequest,
        argv: list[str],
        result: ExecutionResult,
        info: dict[str, Any],
        start: float,
        statuses: dict[str, str] | None = None,
    ) -> ExecutionResult:
        """``result`` as the step's answer: remembered in the session's ledger, with
        ``info`` (and the step's latency) attached."""
        self._remember(request, argv, result, statuses)
        info["latency_s"] = round(time.perf_counter() - start, 6)
        result.info = info
        return result

    def _step_info(self, kind: str) -> dict[str, Any]:
        """What every answer's ``info`` starts with."""
        return {"simulated": True, "executor": self.name, "model": self.model_path,
                "mode": self.mode, "kind": kind}  # fmt: skip

    def _overrun(
        self, request: ExecutionRequest, over: StepOverrun, start: float
    ) -> ExecutionResult:
        """The step's deadline passed before the answer was ready: nothing is claimed
        (exit :data:`~sweworld.sandbox.executor.NO_EXECUTOR_EXIT_CODE`, as a step that was
        not executed), ``info["timed_out"]`` and the stage it stopped in say why, and the
        session's ledger is left as it was."""
        info = self._step_info(command_kind_of(list(request.argv)))
        info.update(route="timeout", timed_out=True, stage=over.stage,
                    latency_s=round(time.perf_counter() - start, 6))  # fmt: skip
        message = (
            f"sweworld: the simulation of `{request.command}` did not finish within the "
            f"step's deadline (stopped during {over.stage}); nothing was executed and no "
            "result is claimed.\n"
        )
        return ExecutionResult("", message, NO_EXECUTOR_EXIT_CODE, info)

    def _not_trained(
        self,
        request: ExecutionRequest,
        argv: list[str],
        kind: str,
        info: dict[str, Any],
        start: float,
    ) -> ExecutionResult:
        """A command kind the model was not trained on: the LM route when there is one,
        else the conservative answer (exit 0, no text); ``info`` says which and why."""
        reason = f"command kind {kind!r} not trained"
        if self.text is not None:  # the LM route answers what the model cannot
            answer = self.text.execute(request)
            lm_info = {**info, "route": "lm", "reason": reason, "lm": answer.info}
            return self._answered(request, argv, answer, lm_info, start)
        info.update(route="conservative", reason=reason)
        return self._answered(request, argv, ExecutionResult("", "", 0), info, start)

    def _remember(
        self,
        request: ExecutionRequest,
        argv: list[str],
        result: ExecutionResult,
        statuses: dict[str, str] | None = None,
    ) -> None:
        """Every answered step goes into the session's ledger, as every recorded step does
        when the model's training rows are made (the step count and the command's last exit
        code are features)."""
        key = shlex_join(argv)
        ledger = self._ledger(request.session_id)
        with self._lock:
            if _INSTALLS.search(" ".join(argv)):
                ledger.installed = True
            ledger.record(key, result.exit_code, statuses or {})
            if result.stdout:
                self._outputs[(request.session_id, key, result.exit_code)] = result.stdout

    def _collect(
        self, request: ExecutionRequest, argv: list[str], kind: str, info: dict[str, Any]
    ) -> tuple[list[str], dict[str, Any], tuple[str, ...], str | None]:
        """The tests the command runs, as pytest ids (another runner's selection is collected
        through its pytest equivalent), what pytest's header says of the layout (its
        rootdir, ini-file and testpaths), the arguments pytest adds to the command's (the
        ini's ``addopts``, ``$PYTEST_ADDOPTS``) and pytest's message for a target that does
        not exist (None: every one does, or another runner); ``([], {}, (), None)`` when the
        selection cannot be known."""
        from sweworld.transition.types import WorkspaceView

        if request.workspace is None:
            return [], {}, (), None
        found = collect_tests(
            WorkspaceView.from_request(request), argv, request.cwd, request.task, limit=_MAX_TESTS
        )
        if found is None:
            return [], {}, (), None
        if found.deselected:
            info["deselected"] = found.deselected
        layout = {"rootdir": found.rootdir, "inifile": found.inifile, "testpaths": found.testpaths}
        if found.report_chars:  # the ini's addopts may name them
            layout["report_chars"] = found.report_chars
        missing = found.missing if found.missing and kind == "pytest" else None
        return found.ids, layout, (*found.addopts, *env_addopts(request.env)), missing

    def _graded(
        self, request: ExecutionRequest, state: FileState, ids: list[str], info: dict[str, Any]
    ) -> dict[str, str] | None:
        """In oracle mode, the statuses of the task's graded tests this run collects, as the
        reward decides them on this state (:mod:`~sweworld.transition.outcome.graded`: one
        state, one truth); None when the run collects none of them."""
        task = request.task
        if self.mode != "oracle" or task is None or not ids:
            return None
        f2p, p2p = graded_ids(task)
        if not set(ids) & {*f2p, *p2p}:
            return None
        test_patch = str(task_field(task, "test_patch") or "")
        grader = graded_state(state, test_patch)
        graded = graded_tests(self.model, task, grader, self.mode)
        if graded is None:
            return None
        info["graded"] = {"tests": len(graded.statuses), "fails": graded.fails}
        if self._judge is None:
            return graded.statuses
        # the files the grader resets are left out where the session holds what the grader
        # runs (the test patch applied as it is); an agent's other edit of them is its own
        reset = {p for p in patch_hunks(test_patch) if state.text(p) == grader.text(p)}
        decision = self._judge.decide(request, task, state, reset, info["graded"])
        if decision is None:
            return graded.statuses
        info["graded"]["fails"] = not decision
        return reconcile_statuses(graded.statuses, task, decision)

    def _tests(
        self,
        ids: list[str],
        step: Any,
        state: FileState,
        ledger: Ledger,
        exit_cls: str,
        exception: Callable[[], str],
        info: dict[str, Any],
        graded: dict[str, str] | None = None,
        task: Any = None,
        layout: dict[str, Any] | None = None,
        addopts: tuple[str, ...] = (),
    ) -> ExecutionResult:
        rows = per_test_rows(step, ids, state, ledger)
        _, predicted = self.model.decide_tests(step.values, rows, self.mode)
        check_deadline("deciding the tests")
        plugins = None if ledger.installed else environment_plugins(task)
        setup = {
            t: e
            for t, e in setup_errors(state.text, ids, plugins, argv=step.info.argv).items()
            if not graded or t not in graded  # the reward's decision stays the one truth
        }
        if setup:  # exact: pytest cannot resolve these tests' fixtures
            info["setup_errors"] = len(setup)
        # exact: with --pdb (and capture on) the debugger reads the end of stdin at the first
        # failure and pytest quits there, exit 2
        options = step.info.pytest
        debugger = bool(options and options.pdb and options.capture != "no")
        # -x / --maxfail=N: pytest stops the session at the N-th failure or error
        if debugger or step.values[step_index("exitfirst")]:
            maxfail = 1
        else:
            maxfail = max(options.maxfail or 0, 0) if options else 0
        # exact: what the tests' skip / xfail marks decide before they run
        marked = command_marks(state.text, ids, options, addopts) if step.kind == "pytest" else {}
        if marked:
            info["marked"] = len(marked)
            info["always_fail"] = sum(m.outcome == "fail" for m in marked.values())
        statuses: dict[str, str] = {}
        failures = 0
        for test, status in zip(ids, predicted, strict=True):
            status = apply_marks(status, marked[test]) if test in marked else status
            status = graded.get(test, status) if graded else status
            status = "ERROR" if test in setup else status
            statuses[test] = status
            failures += status in ("FAILED", "ERROR")
            if maxfail and failures >= maxfail:
                break
        failed = any(s in ("FAILED", "ERROR") for s in statuses.values())
        predicted_exc = exception() if failed else "none"
        exc = predicted_exc if predicted_exc != "none" else "AssertionError"
        errors = sorted(p for p in step.unparsable if p.endswith(".py"))[:5]
        if exit_cls == "2" and errors:
            statuses = {}
        if step.kind in ("django_runtests", "sympy_test", "unittest"):
            return self._other_runner(step, statuses, exc, info)
        terminal = {**command_layout(options, step.info.argv, task), **(layout or {})}
        if exit_cls in ("4", "5") and not statuses:
            stdout = render_pytest({}, **terminal)
            code = int(exit_cls)
        else:
            sources = {p: state.text(p) for p in {t.split("::", 1)[0] for t in statuses}}
            surely = {  # exact: the exception a test that always fails raises
                t: m.reason for t, m in marked.items() if m.outcome == "fail" and m.reason
            }
            stdout = render_pytest(
                statuses,
                exceptions={t: surely.get(t, exc) for t in statuses}
                | {p: "SyntaxError" for p in errors},
                sources=sources,
                collection_errors=errors if exit_cls == "2" else (),
                deselected=int(info.get("deselected", 0)),
                setup_errors=setup,
                debugger=debugger and failed,
                collected=len(ids),
                maxfail=0 if debugger else maxfail,
                **summary_details(statuses, marked, terminal.get("pytest_version", "")),
                **terminal,
            )
            if exit_cls == "2" and errors:
                code = 2
            elif not statuses:
                code = 5
            else:
                code = int(any(s in ("FAILED", "ERROR") for s in statuses.values()))
                if code and debugger:
                    code, info["pdb"] = 2, "quit at the first failure"
        info["tests"] = len(statuses)
        info["_statuses"] = statuses
        return ExecutionResult(stdout, "", code)

    def _other_runner(
        self, step: Any, statuses: dict[str, str], exc: str, info: dict[str, Any]
    ) -> ExecutionResult:
        """Django's, SymPy's or unittest's report of ``statuses`` (exit 1 iff one fails)."""
        info["tests"] = len(statuses)
        info["_statuses"] = statuses
        kind, argv, script = step.kind, step.info.argv, step.info.script
        stdout, stderr = render_other_runner(kind, argv, script, statuses, exc)
        code = int(any(s in ("FAILED", "ERROR") for s in statuses.values()))
        return ExecutionResult(stdout, stderr, code)

    def _script(
        self,
        request: ExecutionRequest,
        step: Any,
        state: FileState,
        exit_cls: str,
        exception: Callable[[], str],
        info: dict[str, Any],
    ) -> ExecutionResult:
        script = step.info.script or ""
        code = 0 if exit_cls == "0" else (2 if exit_cls == "2" else 1)
        key = (request.session_id, shlex_join(request.argv), code)
        with self._lock:
            stdout = self._outputs.get(key, "")
        info["text_source"] = "ledger" if stdout else "none"
        if not stdout and self.text is not None:
            stdout = self._lm_text(request, info)
        if code == 0:
            return ExecutionResult(stdout, "", 0)
        source: str | None = None
        shown = "-c"
        if step.kind == "python_c":
            source = step.info.code
        elif script:
            shown = (
                f"/testbed/{state.relative(script, request.cwd)}"
                if state.relative(script, request.cwd)
                else script
            )
            source = state.sandbox_text(script, request.cwd)[1]
        predicted_exc = exception()
        exc = predicted_exc if predicted_exc != "none" else "Exception"
        return ExecutionResult(stdout, render_traceback(exc, script=shown, source=source), code)

    def _lm_text(self, request: ExecutionRequest, info: dict[str, Any]) -> str:
        """The LM route's stdout for a script (its exit code and stderr are dropped: the
        outcome model decided those); "" when the LM gave no usable answer."""
        try:
            answer = self.text.execute(request)
        except Exception as exc:  # the text is optional: the decided outcome stands
            info["text_error"] = f"{type(exc).__name__}: {exc}"[:300]
            return ""
        lm_info = answer.info or {}
        if lm_info.get("fallback") or lm_info.get("timed_out") or lm_info.get("error"):
            info["text_error"] = str(lm_info.get("error") or "no valid prediction")[:300]
            return ""
        info["text_source"] = "lm"
        return answer.stdout

    def close(self) -> None:
        closer = getattr(self.text, "close", None)
        if callable(closer):
            closer()


def outcome_with_lm(
    lm: Any,
    mode: str = "oracle",
    model: str | Path | OutcomeModel | None = None,
    **simulated: Any,
) -> OutcomeExecutor:
    """The hybrid world (executor name ``outcome-lm``): the outcome model decides every
    step, and the language model ``lm`` (an LM object: :func:`sweworld.world.lm_from_spec`
    builds one from a spec) writes the printed text of a script whose output the
    session has not seen (``info["text_source"] == "lm"``). ``simulated``: options of
    :class:`~sweworld.transition.simulated.SimulatedExecutor` (``step_timeout``, ``seed``)."""
    from sweworld.transition.simulated import SimulatedExecutor

    return OutcomeExecutor(model, mode, text=SimulatedExecutor(lm, mode=mode, **simulated))


def step_index(name: str) -> int:
    """Position of a step feature by name."""
    from sweworld.transition.outcome.features import STEP_FEATURES

    return STEP_FEATURES.index(name)
