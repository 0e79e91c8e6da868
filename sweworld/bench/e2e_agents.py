"""The agents of ``sweworld bench e2e`` and what they need: a candidate pool
(:mod:`sweworld.bench.e2e_candidates`), the reading of a test run, and the executor that
re-runs the simulated test commands for real.

Two agents drive an :class:`~sweworld.env.Episode` through its ordinary actions:

- :class:`CandidateAgent`, the *scripted test-driven candidate agent*: it writes the task's
  test patch into the workspace (when the task has one), runs the task's test command, then
  tries candidate patches in a seeded order: apply with ``git apply`` (a file operation,
  real in every world), run the tests, read the observation, submit the first candidate
  whose run reads as passing, else revert it and try the next; the last one is submitted
  when none passes. Its choice depends on the feedback only, so the gap between its real
  resolved rate on simulated and on real feedback measures the simulator.
- :class:`EndpointAgent`: any OpenAI-compatible chat endpoint (``openai:URL#MODEL``), given
  the episode's prompt and tools; each answer is the action, each observation the next
  user message.

:class:`ShadowedExecutor` answers every command with the simulator and also runs the test
commands (pytest / unittest) for real on the same workspace, after the simulated answer was
made, so the agent's view of each test run can be set against reality.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweworld.bench.e2e_candidates import Candidate
from sweworld.sandbox.executor import session_base

__all__ = [
    "CandidateAgent",
    "EndpointAgent",
    "EpisodeRun",
    "ScriptedAgents",
    "ShadowedExecutor",
    "TestRun",
    "call_counts",
    "pool_row",
    "read_test_run",
    "run_episode",
    "usable_pool",
]

#: How an observation of a test run reads: ``pass`` (exit 0 and none of the task's tests
#: seen failing), ``fail`` (test results or a failing exit code), ``no_result`` (no test
#: result could be read and the command did not succeed: a simulator that declined).
VERDICTS = ("pass", "fail", "no_result")

_HEREDOC = "SWEWORLD_E2E_EOF"
_SUBMIT = "<function=finish>\n<parameter=command>submit</parameter>\n</function>"


def read_test_run(output: str, exit_code: int | None, task: Any) -> str:
    """The verdict of one test run as an agent reads it (see :data:`VERDICTS`): the output
    is parsed with the task repository's log parser; a run passes when it exited 0 and none
    of the task's FAIL_TO_PASS / PASS_TO_PASS tests is reported failing."""
    from sweworld.execution.grading import parse_log

    statuses = parse_log(output, task.repo)
    listed = set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS)
    failing = any(
        str(getattr(status, "value", status)) in ("FAILED", "ERROR")
        for test, status in statuses.items()
        if test in listed
    )
    if exit_code == 0 and not failing:
        return "pass"
    if statuses or exit_code in (1, 2):
        return "fail"
    return "no_result"


def is_test_command(command: str) -> bool:
    """Whether a command runs tests (pytest or unittest, by the data schema's kinds)."""
    from sweworld.data.schema import command_kind

    return command_kind(command) in ("pytest", "unittest")


@dataclass
class TestRun:
    """One test command of an episode: what the agent saw and, when shadowed, reality."""

    step: int
    command: str
    seen_exit_code: int | None
    seen: str
    source: str | None = None
    real_exit_code: int | None = None
    real: str | None = None
    agree: dict[str, Any] = field(default_factory=dict)
    shadow_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---------------------------------------------------------------------- shadow runs


class ShadowedExecutor:
    """The simulator for every command, plus a real run of each test command on the same
    workspace (after the simulated answer, which the agent gets); the pairs are kept per
    session until :meth:`take` hands them over. Other commands are not run for real (their
    real effects would leak into the simulated world)."""

    name = "simulated"

    def __init__(self, simulated: Any, real: Any):
        self.simulated = simulated
        self.real = real
        self._pairs: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def execute(self, request: Any) -> Any:
        result = self.simulated.execute(request)
        if is_test_command(request.command):
            self._shadow(request, result)
        return result

    def _shadow(self, request: Any, simulated: Any) -> None:
        from sweworld.transition.hybrid import compare

        started = time.perf_counter()
        pair: dict[str, Any] = {"command": request.command, "simulated": simulated}
        try:
            real = self.real.execute(request)
            pair["real"] = real
            pair["agree"] = compare(real, simulated)
        except Exception as exc:  # the comparison must not fail the agent's step
            pair["error"] = f"{type(exc).__name__}: {exc}"
        pair["shadow_s"] = time.perf_counter() - started
        with self._lock:
            self._pairs.setdefault(request.session_id, []).append(pair)

    def take(self, session_id: str) -> list[dict[str, Any]]:
        """The shadowed runs of ``session_id`` since the last call (oldest first)."""
        with self._lock:
            return self._pairs.pop(session_id, [])

    def prepare_base(self, task: Any, base: Any) -> Any:
        """The base the real side's sessions open on (:func:`~sweworld.sandbox.executor.
        session_base`)."""
        return session_base(self.real, task, base)

    def close_session(self, session_id: str) -> None:
        with self._lock:
            self._pairs.pop(session_id, None)
        for side in (self.simulated, self.real):
            hook = getattr(side, "close_session", None)
            if hook is not None:
                hook(session_id)

    def fork_session(self, source_id: str, new_id: str) -> None:
        hook = getattr(self.simulated, "fork_session", None)
        if hook is not None:
            hook(source_id, new_id)

    def snapshot_session(self, session_id: str) -> Any:
        hook = getattr(self.simulated, "snapshot_session", None)
        return hook(session_id) if hook is not None else None

    def restore_session(self, session_id: str, state: Any) -> None:
        hook = getattr(self.simulated, "restore_session", None)
        if hook is not None and state is not None:
            hook(session_id, state)


# ---------------------------------------------------------------------- the episode


class EpisodeRun:
    """The episode proxy an agent drives: every step outcome is kept, and with shadowed
    feedback each test run is paired with its real re-run."""

    def __init__(self, episode: Any, task: Any, shadow: Any = None):
        self.episode = episode
        self.task = task
        self.shadow = shadow
        self.outcomes: list[Any] = []
        self.test_runs: list[Any] = []

    @property
    def seed(self) -> Any:
        return self.episode.seed

    @property
    def done(self) -> bool:
        return self.episode.done

    def step(self, action: Any) -> Any:
        session = self.episode.session
        session_id = session.id if session is not None else ""
        outcome = self.episode.step(action)
        self.outcomes.append(outcome)
        pairs = self.shadow.take(session_id) if self.shadow is not None and session_id else []
        self._test_run(outcome, pairs)
        return outcome

    def end(self, reason: str, *, error: str | None = None) -> Any:
        outcome = self.episode.end(reason, error=error)
        self.outcomes.append(outcome)
        return outcome

    def _test_run(self, outcome: Any, pairs: list[dict[str, Any]]) -> None:
        calls = outcome.info.get("execution_calls") or []
        commands = [str(c.get("command") or "") for c in calls]
        command = next((c for c in commands if is_test_command(c)), "")
        if not command:
            return
        sources = [str((c.get("info") or {}).get("source", "real")) for c in calls]
        seen = read_test_run(outcome.observation, outcome.info.get("exit_code"), self.task)
        run = TestRun(outcome.info.get("step", 0), command, outcome.info.get("exit_code"), seen)
        run.source = ",".join(sources) or None
        if len(pairs) == 1 and "real" in pairs[0]:
            real = pairs[0]["real"]
            run.real_exit_code = real.exit_code
            run.real = read_test_run(real.stdout + "\n" + real.stderr, real.exit_code, self.task)
            run.agree = dict(pairs[0].get("agree") or {})
        run.shadow_s = sum(p.get("shadow_s", 0.0) for p in pairs)
        self.test_runs.append(run)


def call_counts(outcomes: Sequence[Any]) -> dict[str, Any]:
    """Execution calls of an episode's steps by answer source, executor errors, timeouts."""
    sources: Counter[str] = Counter()
    executor_errors = timed_out = 0
    for outcome in outcomes:
        for call in outcome.info.get("execution_calls") or []:
            info = call.get("info") or {}
            source = info.get("source") or info.get("route") or call.get("executor")
            sources[str(source or "real")] += 1
            timed_out += bool(info.get("timed_out"))
        executor_errors += bool(outcome.info.get("executor_error"))
    return {"sources": dict(sources), "executor_errors": executor_errors, "timed_out": timed_out}


# ---------------------------------------------------------------------- agents


@dataclass
class AgentResult:
    """What an agent did: the final step outcome, its choice, and why it stopped early."""

    final: Any = None
    chosen: str | None = None
    tried: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def _ended(outcome: Any) -> bool:
    return bool(outcome.terminated or outcome.truncated)


def _write_file_action(path: str, text: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    return f"cat > {path} <<'{_HEREDOC}'\n{body}{_HEREDOC}"


class CandidateAgent:
    """The scripted test-driven candidate agent (see the module docstring)."""

    name = "scripted test-driven candidate agent"

    def __init__(self, candidates: Sequence[Candidate], test_command: str):
        self.candidates = list(candidates)
        self.test_command = test_command

    def solve(self, episode: Any, task: Any) -> AgentResult:
        """Drive ``episode`` (already reset) to its end; returns what was chosen."""
        result = AgentResult()

        def step(action: Any) -> Any:
            result.final = episode.step(action)
            return result.final

        def run_tests() -> str | None:
            outcome = step({"name": "execute_bash", "arguments": {"cmd": self.test_command}})
            if _ended(outcome):
                return None
            return read_test_run(outcome.observation, outcome.info.get("exit_code"), task)

        has_tests = bool(task.test_patch)
        if has_tests:
            for action in (
                _write_file_action("/tmp/sweworld_tests.patch", task.test_patch),
                "cd /testbed && git apply /tmp/sweworld_tests.patch",
            ):
                if _ended(step(action)):
                    return result
            if result.final.info.get("exit_code") != 0:
                has_tests = False  # the tests are not in the workspace; run what is there
        if run_tests() is None:
            return result
        applied: Candidate | None = None
        for number, candidate in enumerate(self.candidates):
            path = f"/tmp/sweworld_candidate_{number}.patch"
            if _ended(step(_write_file_action(path, candidate.patch))):
                return result
            outcome = step(f"cd /testbed && git apply {path}")
            if _ended(outcome):
                return result
            if outcome.info.get("exit_code") != 0:
                result.tried.append({"label": candidate.label, "seen": "did_not_apply"})
                continue
            applied = candidate
            seen = run_tests()
            if seen is None:
                return result
            result.tried.append({"label": candidate.label, "seen": seen})
            if seen == "pass":
                break
            if number < len(self.candidates) - 1:  # the last one stays if none passes
                if _ended(step(f"cd /testbed && git apply -R {path}")):
                    return result
                applied = None
        result.chosen = applied.label if applied is not None else None
        if has_tests and _ended(step("cd /testbed && git apply -R /tmp/sweworld_tests.patch")):
            return result
        step(_SUBMIT)
        return result


class EndpointAgent:
    """An agent behind an OpenAI-compatible chat endpoint (``openai:URL#MODEL``)."""

    def __init__(self, spec: str, *, max_tokens: int = 1024, temperature: float = 0.0):
        from sweworld.world import lm_from_spec

        self.spec = spec
        self.model_name = spec.rpartition("#")[2]
        self.name = f"{self.model_name} (OpenAI-compatible endpoint {spec.partition(':')[2]})"
        self.lm = lm_from_spec(spec, max_retries=1, timeout=120.0)
        self.max_tokens = max_tokens
        self.temperature = temperature

    def solve(self, episode: Any, task: Any, messages: list[dict[str, str]]) -> AgentResult:
        """Ask the endpoint for an action, step, show it the observation; until the end."""
        from sweworld.models.base import ContextTooLong, GenerationRequest, LMError

        result = AgentResult()
        chat = [dict(m) for m in messages]
        while True:
            try:
                request = GenerationRequest(
                    chat,
                    max_tokens=self.max_tokens,
                    temperature=self.temperature,
                    seed=episode.seed,
                )
                text = self.lm.generate([request])[0][0].text
            except ContextTooLong as exc:  # the work so far is still graded
                result.final = episode.end("max_tokens", error=f"agent: {exc}")
                return result
            except LMError as exc:
                result.error = f"agent endpoint {self.spec}: {type(exc).__name__}: {exc}"
                result.final = episode.end("error", error=result.error)
                return result
            outcome = episode.step(text)
            result.final = outcome
            if _ended(outcome):
                return result
            chat += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": outcome.observation},
            ]

    def close(self) -> None:
        self.lm.close()


# ---------------------------------------------------------------------- one episode


def run_episode(task: Any, feedback: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """One episode of ``ctx['agent']`` on ``task`` with ``feedback``; the row (never raises:
    a failure is the row's ``error``)."""
    from sweworld.env.episode import Episode

    started = time.perf_counter()
    agent = ctx["agent"]
    row: dict[str, Any] = {
        "instance_id": task.instance_id,
        "repo": task.repo,
        "feedback": feedback,
        "agent": agent.name,
    }
    shadow = None
    try:
        if feedback == "real":
            executor = ctx["real_executor"]
        else:
            executor = ctx["simulated_executor"]()
            shadow = executor if hasattr(executor, "take") else None
        episode = Episode(
            task, ctx["config"], manager=ctx["manager"], executor=executor, rewarder=ctx["rewarder"]
        )
    except Exception as exc:  # the world model cannot load, ...
        row.update(status="error", error=f"setup: {type(exc).__name__}: {exc}"[:2000])
        return row
    proxy = EpisodeRun(episode, task, shadow)
    try:
        _, info = episode.reset(seed=ctx["seed"])
        if hasattr(agent, "candidates_for"):
            result = agent.candidates_for(task).solve(proxy, task)
        else:
            result = agent.solve(proxy, task, info["messages"])
        final = result.final
        if not episode.done:
            final = proxy.end("max_steps")
        reward = final.info.get("reward") or {}
        error = result.error or final.info.get("error")
        row.update(
            status="error" if final.info.get("reason") == "error" else "ok",
            error=error,
            reason=final.info.get("reason"),
            resolved=reward.get("resolved"),
            grade_status=reward.get("status"),
            patch_chars=len(final.info.get("patch") or ""),
            chosen=getattr(result, "chosen", None),
            tried=getattr(result, "tried", []),
        )
    except Exception as exc:  # an executor or session failure ends this episode only
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:2000])
    finally:
        episode.close()
    shadow_s = sum(r.shadow_s for r in proxy.test_runs)
    row.update(
        steps=episode.steps,
        wall_s=time.perf_counter() - started - shadow_s,
        shadow_s=shadow_s,
        test_runs=[r.to_dict() for r in proxy.test_runs],
        **call_counts(proxy.outcomes),
    )
    return row


#: Real grading statuses that say nothing about a patch (the environment or run failed).
UNGRADED = ("error", "env_failed", "exec_failed", "timeout", "test_patch_failed")


def pool_row(task: Any, candidates: Sequence[Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """The real grade of every candidate of the pool (the floors and the oracle); with
    ``error`` set when some candidate could not be graded (the environment failed, ...)."""
    from sweworld.reward.real import real_reward

    graded, error = [], None
    for cand in candidates:
        result = real_reward(task, cand.patch, manager=ctx["manager"], timeout=ctx["grade_timeout"])
        graded.append({"label": cand.label, "origin": cand.origin,
                       "resolved": result.resolved, "status": result.status})  # fmt: skip
        if result.status in UNGRADED:
            reason = result.info.get("reason") or result.info.get("error") or ""
            error = f"{result.status}: {str(reason).splitlines()[0] if reason else ''}"[:300]
            break  # the others would fail the same way
    return {"instance_id": task.instance_id, "candidates": graded, "error": error}


def usable_pool(row: dict[str, Any] | None) -> bool:
    """Whether a pool row holds a real grade of every candidate (else it is graded again)."""
    candidates = (row or {}).get("candidates") or []
    return bool(candidates) and all(c.get("status") not in UNGRADED for c in candidates)


class ScriptedAgents:
    """The candidate agent per task (its pool is the task's); what ``run_episode`` runs."""

    name = "scripted test-driven candidate agent"

    def __init__(self, pools: dict[str, list[Any]]):
        self.pools = pools

    def candidates_for(self, task: Any) -> CandidateAgent:
        """The candidate agent of ``task``: its pool, the task's own test command."""
        from sweworld.execution.testspec import test_spec

        command = "cd /testbed && " + test_spec(task).command
        return CandidateAgent(self.pools[task.instance_id], command)
