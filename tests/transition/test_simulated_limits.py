"""The SimulatedExecutor's limits, called directly on a copy of the toy repository (no
sandbox needed): every step has a deadline, failures are reported in ``info`` and in the
log, text leaving it is valid UTF-8 (and a lone surrogate does not break the next model
call), and prompt budgets are counted with the model's tokenizer when one is loaded."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweworld.models.base import LMError
from sweworld.models.replay import ReplayLM
from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.context import ContextConfig
from sweworld.transition.simulated import SimulatedExecutor
from sweworld.transition.validate import FALLBACK_EXIT_CODE
from tests.conftest import PROJECT

LOGGER = "sweworld.transition.simulated"
COMMAND = ("python", "-c", "import stockroom; print('ok')")


def answer(stdout="", stderr="", exit_code=0) -> str:
    return json.dumps({"stdout": stdout, "stderr": stderr, "exit_code": exit_code})


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return root, tmp


def request(workspace, argv=COMMAND, session="s1") -> ExecutionRequest:
    root, tmp = workspace
    return ExecutionRequest(argv=tuple(argv), workspace=root, tmp=tmp, session_id=session)


# --------------------------------------------------------------------------- deadline


def test_a_slow_model_hits_the_step_deadline(workspace, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    slow = ReplayLM([answer("late\n")], delay=3.0)
    sim = SimulatedExecutor(slow, step_timeout=0.5)
    started = time.perf_counter()
    result = sim.execute(request(workspace))
    elapsed = time.perf_counter() - started
    assert elapsed < 1.5, elapsed
    assert result.exit_code == FALLBACK_EXIT_CODE
    assert result.info["timed_out"] is True and result.info["fallback"] is True
    assert result.info["stage"] == "generation" and result.info["timeout_s"] == 0.5
    assert "could not be simulated" in result.stderr and "0.5 s" in result.info["error"]
    assert any("timed out" in r.getMessage() for r in caplog.records if r.name == LOGGER)
    time.sleep(3.0)  # the abandoned worker ends; it must not write its late answer anywhere
    assert sim.cache.hits == 0 and len(sim.cache) == 0
    history = sim.snapshot_session("s1").history
    assert [h.exit_code for h in history] == [FALLBACK_EXIT_CODE]
    # The executor stays usable: the next step (a fast model) is answered by the model.
    sim._lm = ReplayLM([answer("ok\n")])
    again = sim.execute(request(workspace))
    assert again.stdout == "ok\n" and again.info["source"] == "model"


def test_a_model_that_never_answers_does_not_leak_a_thread_per_step(workspace, caplog):
    """Each timed-out step left its worker waiting on the model forever: 40 steps, 41
    threads. Past MAX_STALLED_WORKERS the model is not asked until one returns."""
    from sweworld.transition.simulated import MAX_STALLED_WORKERS

    caplog.set_level(logging.WARNING, logger=LOGGER)
    release = threading.Event()

    def hang(messages):
        release.wait(30)
        return answer("late\n")

    sim = SimulatedExecutor(ReplayLM(hang), step_timeout=0.2)
    before = threading.active_count()
    results = [
        sim.execute(request(workspace, argv=(*COMMAND[:2], f"import stockroom; print({i})")))
        for i in range(MAX_STALLED_WORKERS + 6)
    ]
    # the workers of steps that were not asked end at once; those waiting on the model
    # stay (a machine under load may still be ending the last ones: they are waited for)
    settle = time.monotonic() + 10
    while threading.active_count() - before > MAX_STALLED_WORKERS and time.monotonic() < settle:
        time.sleep(0.05)
    assert threading.active_count() - before <= MAX_STALLED_WORKERS
    assert all(r.exit_code == FALLBACK_EXIT_CODE for r in results)
    # past the cap a step is answered at once, without its deadline (one that timed out
    # building its context on a loaded machine was not asked either)
    spared = [r for r in results[MAX_STALLED_WORKERS:] if not r.info.get("timed_out")]
    assert spared and all("not asked again" in r.info["error"] for r in spared)
    assert any("not asked again" in r.getMessage() for r in caplog.records)
    release.set()
    deadline = time.monotonic() + 10
    while sim._stalled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim._stalled == 0
    sim._lm = ReplayLM([answer("ok\n")])
    again = sim.execute(request(workspace))
    assert again.stdout == "ok\n" and again.info["source"] == "model"


def test_the_deadline_covers_every_resample(workspace):
    invalid = answer("x\n", exit_code=300)  # outside 0..255: rejected every time
    lm = ReplayLM([invalid], cycle=True, delay=0.2)
    schedule = tuple((0.7, i) for i in range(50))  # 50 attempts would take 10 s
    sim = SimulatedExecutor(lm, step_timeout=1.0, schedule=schedule)
    started = time.perf_counter()
    result = sim.execute(request(workspace))
    assert time.perf_counter() - started < 2.0
    assert result.info["timed_out"] is True
    assert 1 <= len(result.info["attempts"]) < 50
    time.sleep(0.5)
    assert len(lm.calls) < 12  # the worker stopped at its next stage boundary


def test_a_fast_step_is_unaffected_and_none_means_no_deadline(workspace):
    seen = []

    def model(messages):
        seen.append(threading.current_thread())
        return answer("ok\n")

    sim = SimulatedExecutor(ReplayLM(model), step_timeout=None)
    assert sim.execute(request(workspace)).stdout == "ok\n"
    assert seen == [threading.current_thread()]  # no worker thread without a deadline
    sim = SimulatedExecutor(ReplayLM(model), step_timeout=30)
    result = sim.execute(request(workspace))
    assert result.stdout == "ok\n" and "timed_out" not in result.info
    with pytest.raises(ValueError, match="step_timeout"):
        SimulatedExecutor(ReplayLM(model), step_timeout=0)


# --------------------------------------------------------------------------- failures reported


def test_a_model_that_is_down_is_reported_in_info_and_in_the_log(workspace, caplog):
    def down(messages):
        raise LMError("connection refused: the model server is down")

    caplog.set_level(logging.WARNING, logger=LOGGER)
    result = SimulatedExecutor(ReplayLM(down)).execute(request(workspace))
    assert result.info["source"] == "fallback"
    assert "server is down" in result.info["error"]
    assert any("server is down" in r.getMessage() for r in caplog.records if r.name == LOGGER)


def test_garbage_answers_are_reported_in_info_and_in_the_log(workspace, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    sim = SimulatedExecutor(ReplayLM(["{{{", "nope", "[]"]))
    result = sim.execute(request(workspace))
    assert result.info["fallback"] is True
    assert result.info["error"] == "no valid prediction in 3 attempt(s)"
    assert [a["issues"] for a in result.info["attempts"]] == [["unparsable"]] * 3
    assert any("no valid prediction" in r.getMessage() for r in caplog.records)


def test_an_internal_error_is_reported_in_info_and_in_the_log(workspace, caplog):
    def broken(messages):
        raise RuntimeError("a bug in a backend")

    caplog.set_level(logging.WARNING, logger=LOGGER)
    result = SimulatedExecutor(ReplayLM(broken)).execute(request(workspace))
    assert result.info["source"] == "error" and "a bug in a backend" in result.info["error"]
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


def test_the_log_is_quiet_by_default(tmp_path):
    script = (
        "import shutil, pathlib, sys\n"
        "from sweworld.models.replay import ReplayLM\n"
        "from sweworld.sandbox.executor import ExecutionRequest\n"
        "from sweworld.tasks.toy import toy_data_dir\n"
        "from sweworld.transition.simulated import SimulatedExecutor\n"
        f"root = pathlib.Path({str(tmp_path)!r}) / 'repo'\n"
        "shutil.copytree(toy_data_dir() / 'repo', root)\n"
        "sim = SimulatedExecutor(ReplayLM(['{{{', 'nope', '[]']))\n"
        "argv = ('python', '-c', 'import stockroom')\n"
        "r = sim.execute(ExecutionRequest(argv=argv, workspace=root))\n"
        "print(r.info['source'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=PROJECT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "fallback" and proc.stderr == ""


# --------------------------------------------------------------------------- surrogates


def test_lone_surrogates_never_leave_the_simulator_and_the_next_call_works(workspace):
    received = []

    def strict_model(messages):
        # What a tokenizer or an HTTP client does with the prompt: encode it strictly.
        json.dumps(messages, ensure_ascii=False).encode("utf-8")
        received.append(messages)
        if len(received) == 1:
            return '{"stdout": "bad \\ud800 byte\\n", "stderr": "\\udfff", "exit_code": 0}'
        return answer("fine\n")

    sim = SimulatedExecutor(ReplayLM(strict_model))
    first = sim.execute(request(workspace))
    first.stdout.encode("utf-8")
    first.stderr.encode("utf-8")
    assert first.stdout == "bad \ufffd byte\n" and first.info["source"] == "model"
    # The next call's prompt holds the first answer (history): it must reach the model.
    second = sim.execute(request(workspace, ("python", "-c", "import stockroom.money")))
    assert second.stdout == "fine\n" and second.info["source"] == "model"
    assert "bad \ufffd byte" in json.dumps(received[1], ensure_ascii=False)


def test_backends_never_return_lone_surrogates():
    lm = ReplayLM(["x\ud800y"])
    text = lm.complete([{"role": "user", "content": "q\udc00"}])
    assert text == "x\ufffdy"
    assert lm.calls[0].messages[0]["content"] == "q\ufffd"


# --------------------------------------------------------------------------- token counting


def test_prompt_budgets_use_the_models_tokenizer_when_one_is_loaded(workspace):
    root, _ = workspace
    lines = "".join(f"value_{i} = {i}  # a comment\n" for i in range(3000))
    (root / "big.py").write_text("import os\n" + lines + "print(os.getpid())\n")
    argv = ("python", "big.py")
    config = ContextConfig(executed_tokens=1000, total_tokens=4000)
    prompts = {}
    for name, tokenizer in (("approx", None), ("chars", len)):
        lm = ReplayLM([answer("ok\n")], tokenizer=tokenizer)
        sim = SimulatedExecutor(lm, context=config)
        assert sim.context_config().count_tokens == (lm.count_tokens if tokenizer else None)
        sim.execute(request(workspace, argv))
        prompts[name] = lm.calls[0].last_user_message()
    # One token per character is four times tighter than characters / 4.
    assert len(prompts["chars"]) < 0.5 * len(prompts["approx"])
    assert prompts["chars"].count("value_") < 1000 // 20


def test_backends_count_with_their_tokenizer(embedded_path):
    from transformers import AutoTokenizer

    from sweworld.models.openai_lm import OpenAILM
    from sweworld.models.transformers_lm import TransformersLM

    reference = AutoTokenizer.from_pretrained(str(embedded_path))
    text = "def slugify(value):\n    return value.lower().replace(' ', '-')  # é\n"
    expected = len(reference.encode(text, add_special_tokens=False))
    replay = ReplayLM(["x"], tokenizer=embedded_path)
    remote = OpenAILM("http://127.0.0.1:9", "m", tokenizer=embedded_path)
    assert replay.exact_tokens and remote.exact_tokens and TransformersLM.exact_tokens
    assert replay.count_tokens(text) == remote.count_tokens(text) == expected
    assert expected != (len(text) + 3) // 4  # the approximation would differ here
    assert not ReplayLM(["x"]).exact_tokens and not OpenAILM("http://h:1", "m").exact_tokens


def test_a_failing_shadow_run_is_reported_not_raised(workspace, caplog):
    from sweworld.transition.hybrid import HybridExecutor, Matching

    class Broken:
        name = "broken"

        def execute(self, request):
            raise OSError("the real executor's sandbox is gone")

    caplog.set_level(logging.WARNING, logger="sweworld.transition.hybrid")
    sim = SimulatedExecutor(ReplayLM([answer("ok\n")]))
    hybrid = HybridExecutor(sim, Broken(), policy=Matching("never-matches"), shadow=True)
    result = hybrid.execute(request(workspace))
    assert result.stdout == "ok\n" and "sandbox is gone" in result.info["hybrid_shadow_error"]
    assert "sandbox is gone" in hybrid.records[-1]["shadow_error"]
    assert any("shadow run" in r.getMessage() for r in caplog.records)


def test_the_process_waits_for_a_step_worker_given_up_at_its_deadline(workspace, tmp_path) -> None:
    """A step given up at its deadline leaves its worker finishing the model call; the
    process waits for it at exit (a torch call cut by interpreter finalization aborts the
    process with exit 134). The fake model writes a file when its call returns: it exists
    after the process exited."""
    done = tmp_path / "model-call-finished"
    script = f"""
import time
from pathlib import Path
from sweworld.sandbox.executor import ExecutionRequest
from sweworld.transition.simulated import SimulatedExecutor

class SlowLM:
    def generate(self, requests):
        time.sleep(2.0)
        Path({str(done)!r}).write_text("yes")
        return [["{{}}"] for _ in requests]

ex = SimulatedExecutor(SlowLM(), step_timeout=0.5)
result = ex.execute(ExecutionRequest(
    argv=("python", "-c", "print(1)"), workspace=Path({str(workspace[0])!r}),
    tmp=Path({str(workspace[1])!r}),
))
assert result.info.get("timed_out") or result.info.get("fallback"), result.info
print("answered", flush=True)
"""
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=PROJECT
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "answered" in run.stdout
    assert done.read_text() == "yes"
