"""Speed of the embedded SWT path, option by option, on the same real SWT prompts.

The prompts are built by the simulator itself on the toy task (several workspace states,
the commands agents run: the test command, one test, a script, ``python -c``): a
SimulatedExecutor drives sessions with the embedded model, whose ``generate`` records each
request instead of answering (the step then falls back at once). Every option then answers
every prompt greedily, in session order, and is printed beside the baseline (today's path:
float32, decoding on to ``max_tokens``, no prompt reuse):

  * prompt / generated tokens, prefill tokens/s (a 1-token call on the first prompt),
    decoding tokens/s (the answer's time less its estimated prefill), wall and CPU seconds
    per answer (p50 / p95), prompt tokens reused from the previous call;
  * fidelity against the baseline: the answer's text identical, or identical up to where
    the option stopped (a prefix of the baseline's), and agreement of the parsed answer
    (exit code, per-test statuses) where the text differs.

Options: fp32 (baseline), t1 (one thread), json (stop when the answer's JSON object is
complete), json+reuse (also start from the previous prompt's KV cache), int8 (dynamic int8
linear layers, with json+reuse), bf16 (with json+reuse), default (what TransformersLM does
without arguments), llama.cpp (the package's GGUF with llama-cpp-python, when installed;
base model only).

    sweworld bench embedded-speed [--options fp32,json,...] [--max-tokens 256]
        [--adapter PATH] [--limit 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from sweworld.bench.summary import add_report_arguments, write_summary

OPTIONS = {
    # name: TransformersLM keyword arguments (threads: torch threads for the option)
    "fp32": {"json_stop": False, "prefix_cache": False},
    "t1": {"json_stop": False, "prefix_cache": False, "threads": 1},
    "json": {"json_stop": True, "prefix_cache": False},
    "json+reuse": {"json_stop": True, "prefix_cache": True},
    "int8": {"json_stop": True, "prefix_cache": True, "quantize": "int8"},
    "bf16": {"json_stop": True, "prefix_cache": True, "dtype": "bfloat16"},
    "default": {},
}


def collect_prompts(adapter: str | None, limit: int | None) -> list[tuple[str, object]]:
    """(label, GenerationRequest) of the SWT prompts the simulator builds on the toy task."""
    from sweworld.bench.swt_live import apply, commands, states
    from sweworld.models import LMError, load_embedded
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path
    from sweworld.transition.simulated import SimulatedExecutor

    lm = load_embedded(adapter=adapter or False)
    seen: list[tuple[str, object]] = []
    label = ["-"]

    def record(requests, **_):
        seen.append((label[0], requests[0]))
        raise LMError("recording the prompt only")

    lm.generate = record  # the instance's: the simulator still sees a TransformersLM
    sim = SimulatedExecutor(lm, mode="blind", schedule=((0.0, 0),))
    task = load_tasks(toy_tasks_path())[0]
    manager = SessionManager()
    for state, patch in list(states(task).items())[:3]:
        with manager.open(task, executor=sim, history="none") as session:
            if not apply(session, patch):
                continue
            for command in commands(task):
                label[0] = f"{state}: {command.splitlines()[-1][:50]}"
                session.run(command)
    manager.close_all()
    lm.close()
    return seen[:limit]


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (:func:`~sweworld.bench.similarity.percentile`); 0 for none."""
    from sweworld.bench.similarity import percentile

    return percentile(values, q) if values else 0.0


def prediction(prefill: str, text: str) -> tuple[int | None, dict[str, str]]:
    from sweworld.execution.grading import parse_pytest_log
    from sweworld.transition.validate import parse_prediction

    pred, _ = parse_prediction(prefill + text)
    if pred is None:
        return None, {}
    return pred.exit_code, parse_pytest_log(pred.stdout + "\n" + pred.stderr)


def run_transformers(name: str, prompts, adapter, max_tokens: int) -> list[dict]:
    import torch

    from sweworld.models import GenerationRequest, load_embedded

    kwargs = dict(OPTIONS[name])
    threads = kwargs.pop("threads", None)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        lm = load_embedded(adapter=adapter or False, **kwargs)
        probe = lm.__class__(lm.model_path, adapter=lm.adapter, prefix_cache=False, **{
            k: v for k, v in kwargs.items() if k in ("dtype", "quantize")
        })  # fmt: skip
        warm = GenerationRequest([{"role": "user", "content": "hi"}], max_tokens=4)
        lm.generate([warm])
        probe.generate([warm])
        rows = []
        rate = None  # prefill tokens/s, measured on the first prompt (a 1-token call)
        for label, request in prompts:
            if rate is None:
                one = GenerationRequest(request.messages, max_tokens=1)
                t0 = time.perf_counter()
                gen = probe.generate([one])[0][0]
                rate = gen.prompt_tokens / max(time.perf_counter() - t0, 1e-6)
            full = GenerationRequest(request.messages, max_tokens=max_tokens)
            c0, t0 = time.process_time(), time.perf_counter()
            gen = lm.generate([full])[0][0]
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            reused = gen.info.get("prompt_tokens_reused", 0)
            prefill_s = (gen.prompt_tokens - reused) / rate
            rows.append(row(label, gen.text, gen.prompt_tokens, gen.completion_tokens, wall, cpu,
                            prefill_s, reused))  # fmt: skip
        lm.close()
        probe.close()
        return rows
    finally:
        torch.set_num_threads(before)


def run_llama_cpp(prompts, max_tokens: int) -> list[dict] | None:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    from sweworld.models import load_embedded
    from sweworld.models.embedded import gguf_path

    renderer = load_embedded(adapter=False)
    llm = Llama(str(gguf_path()), n_ctx=4096, n_threads=2, verbose=False, seed=0)
    rows = []
    for label, request in prompts:
        text = renderer.render_prompt(request.messages)
        tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        prefill_s = time.perf_counter() - t0
        llm.reset()
        c0, t0 = time.process_time(), time.perf_counter()
        out = llm.create_completion(tokens, max_tokens=max_tokens, temperature=0.0, top_k=1)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        usage = out["usage"]
        rows.append(row(label, out["choices"][0]["text"], usage["prompt_tokens"],
                        usage["completion_tokens"], wall, cpu, prefill_s, 0))  # fmt: skip
    renderer.close()
    return rows


def row(label, text, prompt_tokens, completion_tokens, wall, cpu, prefill_s, reused) -> dict:
    decode_s = max(wall - prefill_s, 1e-6)
    return {
        "prompt": label, "text": text, "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens, "wall_s": wall, "cpu_s": cpu,
        "prefill_s": prefill_s, "prefill_tps": (prompt_tokens - reused) / max(prefill_s, 1e-6),
        "decode_tps": max(completion_tokens - 1, 0) / decode_s, "reused": reused,
    }  # fmt: skip


def fidelity(rows: list[dict], base: list[dict], prefills: list[str]) -> dict:
    same = prefix = parsed = 0
    for r, b, prefill in zip(rows, base, prefills, strict=True):
        if r["text"] == b["text"]:
            same += 1
        elif b["text"].startswith(r["text"]) and r["text"]:
            prefix += 1
        if prediction(prefill, r["text"]) == prediction(prefill, b["text"]):
            parsed += 1
    n = len(rows)
    return {"identical": same / n, "prefix_of_baseline": prefix / n, "answer_agrees": parsed / n}


def summary(name: str, rows: list[dict], fid: dict) -> dict:
    med = statistics.median
    return {
        "option": name,
        "prompt_tokens_p50": med(r["prompt_tokens"] for r in rows),
        "generated_tokens_p50": med(r["completion_tokens"] for r in rows),
        "reused_tokens_p50": med(r["reused"] for r in rows),
        "prefill_tps_p50": med(r["prefill_tps"] for r in rows),
        "decode_tps_p50": med(r["decode_tps"] for r in rows),
        "wall_p50_s": pct([r["wall_s"] for r in rows], 50),
        "wall_p95_s": pct([r["wall_s"] for r in rows], 95),
        "cpu_p50_s": pct([r["cpu_s"] for r in rows], 50),
        **fid,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench embedded-speed``."""
    parser.add_argument(
        "--options", default="fp32,t1,json,json+reuse,int8,bf16,llama.cpp",
        help="options compared (comma-separated; fp32 is the baseline)",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the simulator's")
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder (default: none)")
    parser.add_argument("--limit", type=int, default=8, help="most prompts")
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench embedded-speed``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from sweworld.transition.simulated import EMBEDDED_MAX_TOKENS

    max_tokens = args.max_tokens or EMBEDDED_MAX_TOKENS
    load = os.getloadavg()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}, load {load[0]:.1f}, "
          f"max_tokens {max_tokens}, adapter {args.adapter}")  # fmt: skip
    prompts = collect_prompts(args.adapter, args.limit)
    prefills = [
        r.messages[-1]["content"] if r.messages[-1]["role"] == "assistant" else ""
        for _, r in prompts
    ]
    print(f"{len(prompts)} SWT prompts from the simulator: {[p[0] for p in prompts]}")
    names = [n.strip() for n in args.options.split(",") if n.strip()]
    if "fp32" not in names:
        names.insert(0, "fp32")
    results: dict[str, dict] = {}
    base: list[dict] = []
    header = (
        f"{'option':<11}{'prompt':>7}{'gen':>5}{'reuse':>6}{'prefill/s':>10}{'dec/s':>7}"
        f"{'p50 s':>7}{'p95 s':>7}{'cpu50':>7}{'same':>6}{'prefix':>7}{'agree':>6}  load"
    )
    print(header)
    for name in names:
        if name == "llama.cpp":
            if args.adapter:
                print("llama.cpp      skipped: the adapter is not converted to GGUF")
                continue
            rows = run_llama_cpp(prompts, max_tokens)
            if rows is None:
                print("llama.cpp      skipped: llama-cpp-python is not installed")
                continue
        elif name in OPTIONS:
            rows = run_transformers(name, prompts, args.adapter, max_tokens)
        else:
            print(f"{name:<11}unknown option; known: {sorted(OPTIONS)} and llama.cpp")
            continue
        if name == "fp32":
            base = rows
        s = summary(name, rows, fidelity(rows, base, prefills))
        s["load"] = os.getloadavg()[0]
        s["rows"] = rows
        results[name] = s
        print(f"{name:<11}{s['prompt_tokens_p50']:>7.0f}{s['generated_tokens_p50']:>5.0f}"
              f"{s['reused_tokens_p50']:>6.0f}{s['prefill_tps_p50']:>10.0f}"
              f"{s['decode_tps_p50']:>7.1f}{s['wall_p50_s']:>7.2f}{s['wall_p95_s']:>7.2f}"
              f"{s['cpu_p50_s']:>7.2f}{s['identical']:>6.2f}{s['prefix_of_baseline']:>7.2f}"
              f"{s['answer_agrees']:>6.2f}  {s['load']:.1f}", flush=True)  # fmt: skip
    write_summary(args, "embedded-speed", results, title="Embedded SWT speed by option")
    return 0
