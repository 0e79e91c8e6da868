"""Adversarial inputs: the worst time per input kind, and the longest pause it causes to
another thread that steps a session, side by side with the targets in one run.

Targets: time linear in the input (each kind also runs at a tenth of its size: the growth
should be about 10x, and a case under 50 ms passes whatever its growth), and no pause over
100 ms for a thread that meanwhile steps its own session (a ``file_editor`` view, in
process, so it needs the GIL that a backtracking regular expression holds).

Input kinds: model answers and predictions through the public API of
``sweworld.transition.validate`` (``parse_prediction``, ``check_prediction`` with the facts of
``python -m pytest tests -rA`` on the toy repository), agent actions through
``sweworld.sandbox.actions.parse_action`` and ``Session.step``, the ``search`` tool, lone
surrogates, and a submission forged by the executor. Run as root on a machine with
bubblewrap:

    sweworld bench adversarial [--repeat 3] [--limit 120] [--json out.json]

A case that runs past ``--limit`` seconds is reported as such and the run stops (its thread
cannot be interrupted and would distort every later pause).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweworld.bench.summary import add_report_arguments, write_summary
from sweworld.execution.scripted import ScriptedExecutor, ScriptedRule
from sweworld.sandbox.actions import ActionParseError, parse_action
from sweworld.sandbox.executor import ExecutionRequest, ExecutionResult
from sweworld.sandbox.manager import SessionManager
from sweworld.transition.facts import compute_facts
from sweworld.transition.types import Prediction, WorkspaceView
from sweworld.transition.validate import check_prediction, parse_prediction

MB = 1_000_000
PAUSE_TARGET_S = 0.100
FAST_ENOUGH_S = 0.050
MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class Ticker(threading.Thread):
    """Steps a session in a loop and records when each step finished."""

    def __init__(self, session: Any, action: str) -> None:
        super().__init__(daemon=True)
        self.session = session
        self.action = action
        self.stamps: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.session.step(self.action)
            self.stamps.append(time.perf_counter())

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time between two step completions that overlaps ``[start, end]``."""
        stamps = list(self.stamps)
        worst = 0.0
        for before, after in itertools.pairwise(stamps):
            if after >= start and before <= end:
                worst = max(worst, after - before)
        return worst


@dataclass
class Case:
    """One input kind: ``make(size)`` builds a zero-argument call on an input of ``size``."""

    kind: str
    api: str
    size: int
    make: Callable[[int], Callable[[], Any]]
    outcome: Callable[[Any], str] = lambda result: type(result).__name__
    scale: bool = True  # also run at size / 10 for the growth
    bounded: bool = False  # a deadline caps the time (reported as such)


@dataclass
class Row:
    kind: str
    api: str
    size: int
    worst_s: float
    best_s: float
    tenth_s: float | None  # best of three runs at a tenth of the size
    pause_s: float
    outcome: str
    bounded: bool = False  # the time is capped by a deadline, not by the input's size

    @property
    def growth(self) -> float | None:
        if self.tenth_s is None or self.tenth_s <= 0:
            return None
        return self.best_s / self.tenth_s

    @property
    def linear(self) -> bool | None:
        """Whether the time is linear in the input; None for a fixed input (one real step
        with no size to scale: only its pause is judged)."""
        if self.best_s <= FAST_ENOUGH_S:
            return True
        if self.growth is None:
            return True if self.bounded else None
        return self.growth <= 20  # 10x the input, with room for noise on a shared machine

    @property
    def paused_ok(self) -> bool:
        return self.pause_s < PAUSE_TARGET_S


def run_call(call: Callable[[], Any], limit: float) -> tuple[float, Any, bool]:
    """Run ``call`` in a daemon thread; (seconds, result or exception, finished in time)."""
    box: dict[str, Any] = {}

    def target() -> None:
        started = time.perf_counter()
        try:
            box["result"] = call()
        except Exception as exc:  # the outcome column shows it
            box["result"] = exc
        box["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=target, daemon=True)
    started = time.perf_counter()
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        return time.perf_counter() - started, None, False
    return box["seconds"], box["result"], True


# --------------------------------------------------------------------------- outcomes


def prediction_outcome(result: Any) -> str:
    if isinstance(result, Exception):
        return f"raised {type(result).__name__}"
    pred, repairs = result
    if pred is None:
        return "refused: " + (repairs[0] if repairs else "")[:48]
    return f"parsed ({len(repairs)} repairs)"


def issues_outcome(result: Any) -> str:
    if isinstance(result, Exception):
        return f"raised {type(result).__name__}"
    return "issues: " + ",".join(sorted({issue.code for issue in result}))[:56]


def action_outcome(result: Any) -> str:
    if isinstance(result, ActionParseError):
        return "refused: " + result.message.strip().splitlines()[0][:48]
    if isinstance(result, Exception):
        return f"raised {type(result).__name__}"
    return f"{result.kind} {result.function or result.command[:20]!r}"


def step_outcome(result: Any) -> str:
    if isinstance(result, Exception):
        return f"raised {type(result).__name__}: {str(result)[:40]}"
    first = result.observation.strip().splitlines()[0] if result.observation.strip() else ""
    try:
        result.observation.encode("utf-8")
        utf8 = ""
    except UnicodeEncodeError:
        utf8 = " NOT UTF-8"
    return f"exit {result.exit_code} done={result.done}{utf8}: {first[:44]}"


# --------------------------------------------------------------------------- cases


def build_cases(attack: Any, forged: Any, view: WorkspaceView, facts: Any, request: Any) -> list:
    # each maker builds the input first (not timed), then returns the timed call on it
    def bind(fn: Callable[[Any], Any], build: Callable[[int], Any]) -> Callable[[int], Any]:
        def make(n: int) -> Callable[[], Any]:
            value = build(n)
            return lambda: fn(value)

        return make

    def answer(text_of: Callable[[int], str]) -> Callable[[int], Any]:
        return bind(parse_prediction, text_of)

    def check(pred_of: Callable[[int], Prediction]) -> Callable[[int], Any]:
        return bind(lambda pred: check_prediction(pred, facts, request, view), pred_of)

    def action(text_of: Callable[[int], str]) -> Callable[[int], Any]:
        return bind(parse_action, text_of)

    def step(session: Any, text_of: Callable[[int], Any]) -> Callable[[int], Any]:
        return bind(session.step, text_of)

    def search(term: str, path: str) -> str:
        return (
            "<function=search><parameter=search_term>" + term + "</parameter>"
            "<parameter=path>" + path + "</parameter></function>"
        )

    def json_answer(stdout: str, stderr: str = "", code: int = 1) -> str:
        return json.dumps({"stdout": stdout, "stderr": stderr, "exit_code": code})

    v, a = "validate.parse_prediction", "actions.parse_action"
    c = "validate.check_prediction"
    return [
        # ---- model answers (SWT output) and the validator
        Case("answer: 10 MB of newlines", v, 10 * MB, answer(lambda n: "\n" * n),
             prediction_outcome),
        Case("answer: 200k backticks", v, 200_000, answer(lambda n: "`" * n),
             prediction_outcome),
        Case("answer: unterminated fence + newlines", v, 240_000,
             answer(lambda n: "```json\n" + "\n" * n), prediction_outcome),
        Case("answer: JSON, stdout of newlines", v, 120_000,
             answer(lambda n: json_answer("\n" * n)), prediction_outcome),
        Case("answer: 35k open objects", v, 35_000,
             answer(lambda n: '{"a": "' * n + '{"stdout": "x"}'), prediction_outcome),
        Case("answer: exit code of 5,000 digits", v, 5_000,
             answer(lambda n: '{"stdout": "", "exit_code": ' + "9" * n + "}"),
             prediction_outcome, scale=False),
        Case("answer: lone surrogates", v, 40_000,
             answer(lambda n: json_answer("\ud800" * n, "\\udfff" * 8)), prediction_outcome),
        Case("answer: one huge line", v, 240_000,
             answer(lambda n: json_answer("a" * n)), prediction_outcome),
        Case("check: 10 MB of newlines", c, 10 * MB,
             check(lambda n: Prediction(stderr="\n" * n, exit_code=1)), issues_outcome),
        Case("check: 99k newlines (under the cap)", c, 99_000,
             check(lambda n: Prediction(stderr="\n" * n, exit_code=1)), issues_outcome),
        Case("check: 10 MB single line", c, 10 * MB,
             check(lambda n: Prediction(stderr='File "' + "a" * n, exit_code=1)),
             issues_outcome),
        Case("check: 99k single line (under the cap)", c, 99_000,
             check(lambda n: Prediction(stderr='File "' + "a" * n, exit_code=1)),
             issues_outcome),
        Case("check: traceback lines (under the cap)", c, 99_000,
             check(lambda n: Prediction(stderr='  File "x.py", line 1\n' * (n // 22),
                                        exit_code=1)), issues_outcome),
        Case("check: pytest rulers (under the cap)", c, 99_000,
             check(lambda n: Prediction(stdout="= " * (n // 2), exit_code=1)),
             issues_outcome),
        # ---- agent actions
        Case("action: 20,000 nested <parameter=", a, 20_000,
             action(lambda n: "<function=f>" + "<parameter=a>" * n), action_outcome),
        Case("action: 200k backticks", a, 200_000, action(lambda n: "`" * n),
             action_outcome),
        Case("action: unterminated ```bash + newlines", a, 900_000,
             action(lambda n: "THOUGHT\n```bash" + "\n" * n), action_outcome),
        Case("action: 100k unclosed <function=", a, 100_000,
             action(lambda n: "<function=" * n), action_outcome),
        Case("step: 10 MB answer of newlines", "Session.step", 10 * MB,
             step(attack, lambda n: "\n" * n), step_outcome),
        Case("step: 120 KB single-line command", "Session.step", 120_000,
             step(attack, lambda n: "echo " + "a" * n + " | wc -c"), step_outcome),
        Case("step: 900 KB single-line command", "Session.step", 900_000,
             step(attack, lambda n: "echo " + "a" * n + " | wc -c"), step_outcome),
        Case("step: lone surrogates", "Session.step", 1,
             step(attack, lambda n: "echo \ud800\udfff"), step_outcome, scale=False),
        Case("step: forged submission", "Session.step", 1,
             step(forged, lambda n: "```bash\npython -c 'print(1)'\n```"), step_outcome,
             scale=False),
        # ---- the search tool
        Case("search: \\(aa*\\)*b on 28 a", "search tool", 1,
             step(attack, lambda n: search("\\(aa*\\)*b", "/testbed/a28.txt")), step_outcome,
             scale=False),
        Case("search: back-references (deadline)", "search tool", 1,
             step(attack, lambda n: search("\\(a*\\)*\\(a*\\)*\\1\\2x", "/testbed/a200.txt")),
             step_outcome, scale=False, bounded=True),
        Case("search: dir with a 10 MB one-line file", "search tool", 10 * MB,
             lambda n: _write_then(attack, n, search("needle", "/testbed/big")), step_outcome),
    ]  # fmt: skip


def _write_then(session: Any, size: int, action: str) -> Callable[[], Any]:
    """Write a one-line ``.py`` file of ``size`` bytes under /testbed/big, then search."""
    big = session.root / "big"
    big.mkdir(exist_ok=True)
    (big / "one_line.py").write_text("x" * (size - 6) + "needle")
    return lambda: session.step(action)


# --------------------------------------------------------------------------- main


def measure(case: Case, ticker: Ticker, repeat: int, limit: float) -> tuple[Row, bool]:
    times: list[float] = []
    outcome = ""
    pause = 0.0
    for _ in range(repeat):
        call = case.make(case.size)
        start = time.perf_counter()
        seconds, result, finished = run_call(call, limit)
        time.sleep(0.03)  # let the ticker record the step that spans the end
        pause = max(pause, ticker.longest_pause(start, start + seconds))
        times.append(seconds)
        if not finished:
            row = Row(case.kind, case.api, case.size, seconds, seconds, None, pause, "")
            row.outcome = f"still running after {limit:g} s"
            return row, False
        outcome = case.outcome(result)
        if seconds > 5:
            break
    tenth = None
    if case.scale:
        tenth = min(run_call(case.make(max(1, case.size // 10)), limit)[0] for _ in range(3))
    row = Row(case.kind, case.api, case.size, max(times), min(times), tenth, pause, outcome)
    row.bounded = case.bounded
    return row, True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench adversarial``."""
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (worst kept)")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds per call at most")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench adversarial``."""

    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    task = load_tasks(toy_tasks_path())[0]
    runtime = Path(tempfile.mkdtemp(prefix="sweworld-adv-"))
    manager = SessionManager(runtime_root=runtime)
    quiet = ScriptedExecutor([], default=ExecutionResult(stdout="ok\n", exit_code=0))
    forging = ScriptedExecutor(
        [
            ScriptedRule(
                result=ExecutionResult(
                    stdout=f"{MARKER}\ndiff --git a/x b/x\n+invented\n", exit_code=0
                ),
                pattern=".",
            )
        ]
    )
    tick_session = manager.open(task, executor=quiet)
    attack = manager.open(task, executor=quiet)
    forged = manager.open(task, executor=forging)
    (attack.root / "a28.txt").write_text("a" * 28 + "\n")
    (attack.root / "a200.txt").write_text("a" * 200 + "x\n")
    py_file = sorted(p for p in tick_session.root.rglob("*.py") if ".git" not in p.parts)[0]
    rel = py_file.relative_to(tick_session.root).as_posix()
    view_action = (
        "<function=file_editor><parameter=command>view</parameter>"
        f"<parameter=path>/testbed/{rel}</parameter>"
        "<parameter=view_range>[1, 5]</parameter></function>"
    )
    request = ExecutionRequest(
        argv=("python", "-m", "pytest", "tests", "-rA"),
        cwd="/testbed",
        workspace=attack.root,
        tmp=attack.tmp_dir,
        base=attack.base.path,
        task=task,
    )
    view = WorkspaceView.from_request(request)
    facts = compute_facts(request, view)

    ticker = Ticker(tick_session, view_action)
    ticker.start()
    time.sleep(1.0)
    idle = ticker.longest_pause(time.perf_counter() - 1.0, time.perf_counter())
    print(f"# machine: {platform.node()} {platform.machine()}, Python {platform.python_version()}")
    print(
        f"# ticker: Session.step(file_editor view) in a loop; idle longest gap {idle * 1e3:.1f}ms"
    )
    print(
        f"# targets: linear (best time grows ~10x for 10x the input, or is under "
        f"{FAST_ENOUGH_S * 1e3:.0f} ms; 'bound': a deadline caps it), pause < "
        f"{PAUSE_TARGET_S * 1e3:.0f} ms; worst/best of --repeat runs, 1/10: best of 3\n"
    )
    header = (
        f"{'input kind':42} {'api':26} {'size':>10} {'worst':>9} {'best':>9} {'1/10':>9} "
        f"{'growth':>7} {'pause':>9}  {'linear':6} {'pause':6} outcome"
    )
    print(header)
    print("-" * len(header))
    rows: list[Row] = []
    cases = build_cases(attack, forged, view, facts, request)
    for case in cases:
        row, finished = measure(case, ticker, args.repeat, args.limit)
        rows.append(row)
        growth = f"{row.growth:6.1f}x" if row.growth is not None else "      -"
        tenth = f"{row.tenth_s * 1e3:7.1f}ms" if row.tenth_s is not None else "        -"
        if row.linear is None:
            linear = "n/a"
        else:
            linear = ("bound" if row.bounded else "ok") if row.linear else "NO"
        print(
            f"{row.kind:42} {row.api:26} {row.size:>10,} {row.worst_s * 1e3:7.1f}ms "
            f"{row.best_s * 1e3:7.1f}ms {tenth} {growth} {row.pause_s * 1e3:7.1f}ms  "
            f"{linear:6} {'ok' if row.paused_ok else 'NO':6} {row.outcome}",
            flush=True,
        )
        if not finished:
            print(f"\nstopped: '{case.kind}' ran past {args.limit:g} s; later cases not run")
            break
    ticker.stop.set()
    ticker.join(timeout=30)
    met = sum(r.linear is not False and r.paused_ok for r in rows)
    print(f"\n{met}/{len(rows)} input kinds meet both targets")
    result = {"idle_pause_s": idle, "rows": [r.__dict__ | {"growth": r.growth} for r in rows]}
    write_summary(args, "adversarial", result, title="Adversarial inputs")
    for session in (tick_session, attack, forged):
        session.destroy()
    manager.close_all()
    return 0
