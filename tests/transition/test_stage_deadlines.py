"""A step's deadline stops its stages, not only the wait for them: the request's own
deadline (a client's per-step ``timeout``) reaches the simulator, an HTTP model call is
cancelled at it, and an in-process model stops generating at it, leaving the model free.

Bounds on elapsed time are generous (several times the deadline).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from sweworld.models.base import GenerationRequest, LMTimeout
from sweworld.models.openai_lm import OpenAILM
from sweworld.models.replay import ReplayLM
from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.simulated import SimulatedExecutor
from tests.model_fixtures import ChatServer

COMMAND = ("python", "-c", "import stockroom; print('ok')")  # needs the model
ANSWER = json.dumps({"stdout": "ok\n", "stderr": "", "exit_code": 0})


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    (tmp_path / "tmp").mkdir()
    return root, tmp_path / "tmp"


def request(workspace, deadline: float | None = None, argv=COMMAND) -> ExecutionRequest:
    root, tmp = workspace
    return ExecutionRequest(
        argv=tuple(argv), workspace=root, tmp=tmp, session_id="s1", deadline=deadline
    )


@pytest.fixture
def server():
    made = ChatServer(ReplayLM([ANSWER], cycle=True))
    yield made
    made.httpd.shutdown()


def test_the_request_deadline_bounds_the_step_below_the_executors_own(workspace):
    sim = SimulatedExecutor(ReplayLM([ANSWER], delay=30.0), step_timeout=300)
    started = time.monotonic()
    result = sim.execute(request(workspace, deadline=time.monotonic() + 1.0))
    assert time.monotonic() - started < 10
    assert result.info["timed_out"] is True and result.info["timeout_s"] <= 1.0
    assert "did not finish within 1 s" in result.stderr  # the deadline applied, not 300 s
    assert "300" not in result.info["error"]
    fast = SimulatedExecutor(ReplayLM([ANSWER]), step_timeout=300)
    assert fast.execute(request(workspace, deadline=time.monotonic() + 60)).stdout == "ok\n"
    assert request(workspace).time_left(5.0) == 5.0  # no deadline: the executor's own
    assert request(workspace, deadline=time.monotonic() - 1).time_left(5.0) == 0.0


def test_an_http_model_call_is_cancelled_at_max_time_and_the_client_stays_usable(server):
    lm = OpenAILM(server.url, "swt", max_retries=0, timeout=60)
    try:
        server.delay = 20.0
        started = time.monotonic()
        with pytest.raises(LMTimeout, match=r"0.5 s"):
            lm.generate([GenerationRequest([{"role": "user", "content": "hi"}])], max_time=0.5)
        assert time.monotonic() - started < 10  # not the server's 20 s nor the 60 s timeout
        server.delay = 0.0
        out = lm.generate([GenerationRequest([{"role": "user", "content": "hi"}])], max_time=30)
        assert out[0][0].text == ANSWER
    finally:
        lm.close()


def test_the_simulator_gives_an_http_model_what_is_left_of_the_deadline(workspace, server):
    server.delay = 20.0
    lm = OpenAILM(server.url, "swt", max_retries=0, timeout=60)
    sim = SimulatedExecutor(lm, step_timeout=300, prefill=False)
    try:
        started = time.monotonic()
        result = sim.execute(request(workspace, deadline=time.monotonic() + 1.5))
        assert time.monotonic() - started < 10
        assert result.info["timed_out"] is True and result.info["stage"] == "generation"
        deadline = time.monotonic() + 10  # the worker saw LMTimeout and ended, not at 20 s
        while sim._stalled and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim._stalled == 0
    finally:
        sim.close()


@pytest.mark.slow
def test_an_in_process_model_stops_at_the_deadline_and_is_free_afterwards(workspace, embedded_path):
    from sweworld.models.embedded import load_embedded

    lm = load_embedded(False)
    sim = SimulatedExecutor(lm, step_timeout=300, max_tokens=4000)
    try:
        started = time.monotonic()
        result = sim.execute(request(workspace, deadline=time.monotonic() + 2.0))
        assert time.monotonic() - started < 20
        assert result.info["timed_out"] is True
        # the generation stopped at its budget: the model's lock is free again soon (a
        # generation run to its 4,000 tokens would hold it for minutes on this CPU)
        assert lm._lock.acquire(timeout=20)
        lm._lock.release()
        free = threading.Event()

        def again() -> None:
            lm.generate([GenerationRequest([{"role": "user", "content": "hi"}], max_tokens=2)])
            free.set()

        threading.Thread(target=again, daemon=True).start()
        assert free.wait(60)
        # a long prompt is read in chunks, the budget checked between them: it stops there
        long = [{"role": "user", "content": "count the words: " + "word " * 5000}]
        started = time.monotonic()
        gen = lm.generate([GenerationRequest(long, max_tokens=50)], max_time=0.05)[0][0]
        assert gen.finish_reason == "timeout" and gen.completion_tokens == 0
        assert time.monotonic() - started < 20  # one chunk or so, not the whole prompt
        # with time to spare, reading in chunks gives what one pass gives
        medium = [{"role": "user", "content": "Repeat: " + "alpha beta gamma " * 400}]
        ask = GenerationRequest(medium, max_tokens=8)
        assert lm.generate([ask], max_time=600)[0][0].text == lm.generate([ask])[0][0].text
    finally:
        lm.close()
