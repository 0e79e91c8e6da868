"""Training throughput on this machine: tokens per second of LoRA fine-tuning of the
embedded model (SmolLM2-135M), SWT and SWR, with the settings printed beside the figure.

Examples come from ``--data`` (folders written by ``sweworld data``) or, without it, from
records built here: SWT records whose stored context carries ``--code-lines`` lines of code
(a prompt of roughly the embedded budgets' size) and SWR records of the toy tasks. The run
is the real trainer (``sweworld.train.main.train``) for ``--steps`` optimizer steps with
no evaluation; tokens/s counts every token of the rows the steps consumed (prompt and
answer: the forward and backward passes run over all of them).

    sweworld bench train [--target swt,swr] [--steps 4] [--threads 2]
        [--data D ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sweworld.bench.summary import add_report_arguments, write_summary

__all__ = ["add_arguments", "measure", "run", "synthetic_dataset"]


def synthetic_dataset(out: Path, code_lines: int, n: int = 24) -> Path:
    """SWT and SWR records in a finalized dataset folder (train split only)."""
    from sweworld.data.schema import SWRRecord, SWTRecord, record_id, to_json
    from sweworld.data.store import RecordStore, finalize
    from sweworld.tasks.schema import Task
    from sweworld.tasks.toy import load_toy_tasks
    from sweworld.transition.context import SWTContext

    code = "\n".join(
        f"{i + 1:4d} | def helper_{i}(value):  return value * {i} + len(str(value))"
        for i in range(code_lines)
    )
    tasks = [Task.from_row(row) for row in load_toy_tasks()]
    with RecordStore(out) as store:
        for i in range(n):
            command = f"python -m pytest -q tests/test_mod_{i}.py"
            ctx = {
                mode: json.dumps(
                    SWTContext(
                        command=command,
                        problem="The helper returns a wrong value for negative input.",
                        executed_code=code,
                        mode=mode,
                    ).to_dict()
                )
                for mode in ("oracle", "blind")
            }
            store.add(
                SWTRecord(
                    id=record_id("bench", i),
                    source="bench",
                    instance_id=f"bench-{i}",
                    repo="bench/lib",
                    command=command,
                    stdout="".join(f"tests/test_mod_{i}.py::test_{j} PASSED\n" for j in range(8))
                    + "8 passed in 0.02s\n",
                    stderr="",
                    exit_code=0,
                    context_oracle=ctx["oracle"],
                    context_blind=ctx["blind"],
                )
            )
            task = tasks[i % len(tasks)]
            resolved = i % 2 == 0
            tests = list(task.FAIL_TO_PASS) + list(task.PASS_TO_PASS)
            store.add(
                SWRRecord(
                    id=record_id("bench-swr", i),
                    source="bench",
                    instance_id=task.instance_id,
                    repo="bench/lib",
                    patch=task.patch,
                    resolved=resolved,
                    task=to_json(task.to_row()),
                    tests_status=to_json(
                        {
                            "FAIL_TO_PASS": {
                                "success": tests[:1] if resolved else [],
                                "failure": [] if resolved else tests[:1],
                            },
                            "PASS_TO_PASS": {"success": tests[1:], "failure": []},
                        }
                    ),
                )
            )
    finalize(out, heldout=())
    return out


def measure(target: str, data: list[str], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from sweworld.models.embedded import embedded_model_path
    from sweworld.train.config import TrainConfig
    from sweworld.train.main import build_examples, load_records, train

    config = TrainConfig(
        target=target,
        data=data,
        out=str(out / f"{target}-adapter"),
        max_steps=args.steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        packing=args.packing,
        mode=args.mode,
        eval=False,
        save_steps=10_000,
        logging_steps=10_000,
        threads=args.threads,
        lora_r=args.lora_r,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)
    records, _ = load_records(data, target, "train")
    examples, _ = build_examples(records, config, tokenizer)
    lengths = [len(e) for e in examples]
    started = time.perf_counter()
    metrics = train(config)
    wall = time.perf_counter() - started
    rows = args.steps * args.batch_size * args.grad_accum
    tokens = rows * statistics.mean(lengths)
    runtime = float(metrics["train_runtime_s"]) or wall
    return {
        "target": target,
        "examples": len(examples),
        "mean_example_tokens": round(statistics.mean(lengths), 1),
        "mean_answer_tokens": round(statistics.mean(e.target_tokens for e in examples), 1),
        "steps": args.steps,
        "rows_per_step": args.batch_size * args.grad_accum,
        "train_runtime_s": round(runtime, 1),
        "tokens_per_s": round(tokens / runtime, 1),
        "answer_tokens_per_s": round(
            rows * statistics.mean(e.target_tokens for e in examples) / runtime, 2
        ),
        "wall_s_including_load": round(wall, 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench train``."""
    parser.add_argument("--target", default="swt,swr", help="comma-separated: swt, swr")
    parser.add_argument("--data", action="append", default=[], help="a dataset folder (repeatable)")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=1, help="rows per device batch")
    parser.add_argument("--grad-accum", type=int, default=2, help="gradient accumulation")
    parser.add_argument("--packing", default="none", help="packing of examples")
    parser.add_argument("--mode", default="oracle", help="SWT context mode")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--lora-r", type=int, default=16, help="LoRA rank")
    parser.add_argument(
        "--code-lines", type=int, default=40, help="code lines per synthetic SWT context"
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench train``."""
    import torch

    with tempfile.TemporaryDirectory(prefix="sweworld-train-bench-") as tmp:
        tmp_path = Path(tmp)
        data = args.data or [str(synthetic_dataset(tmp_path / "data", args.code_lines))]
        settings = {
            "model": "embedded SmolLM2-135M-Instruct, LoRA on q,k,v,o,gate,up,down",
            "lora_r": args.lora_r,
            "threads": args.threads or torch.get_num_threads(),
            "batch_size": args.batch_size,
            "grad_accum": args.grad_accum,
            "packing": args.packing,
            "mode": args.mode,
            "dtype": "float32 (CPU)",
            "data": args.data or f"synthetic ({args.code_lines} code lines per SWT context)",
        }
        print("settings:", json.dumps(settings))
        results = []
        for target in args.target.split(","):
            result = measure(target, data, args, tmp_path)
            results.append(result)
            print(
                f"{target}: {result['tokens_per_s']} tokens/s "
                f"({result['answer_tokens_per_s']} answer tokens/s; "
                f"{result['mean_example_tokens']} tokens per example, {result['steps']} steps "
                f"of {result['rows_per_step']} rows in {result['train_runtime_s']} s)"
            )
    result = {"settings": settings, "results": results}
    write_summary(args, "train", result, title="Training throughput (LoRA, CPU)")
    return 0
