"""A tiny GRPO run with TRL on sweworld: ``GRPOTrainer(environment_factory=...)`` on the CPU.

What it shows: TRL's own trainer resets sweworld environments (one per rollout), runs the
tool calls the policy writes (``file_editor``, ``search``, ``execute_bash``, ``finish``) as
episode steps in the sandbox, reads each rollout's reward from the environment's
``get_reward`` (here the real test run of the toy task), and takes one optimisation step.

The policy is a tiny random ``LlamaForCausalLM`` with the embedded SmolLM2 tokenizer and TRL's
Qwen2.5 chat template (SmolLM2's own template cannot render tool calls). A random model never
writes a tool call, so its sampling is steered to a scripted answer per rollout (rollout 0
fixes the bug and submits, rollout 1 only looks and submits): the point is the plumbing, not
the learning. Nothing is downloaded. Runs in about half a minute on two cores::

    python examples/trl_grpo.py

To train for real, on a GPU machine:

* a tool-calling instruct model instead of the tiny one:
  ``python examples/trl_grpo.py --model Qwen/Qwen2.5-Coder-7B-Instruct`` (any model whose chat
  template TRL can parse tool calls from; no scripted steering is applied then), with more
  ``--steps``, ``--generations`` and a larger ``max_completion_length``;
* the simulated world instead of real execution: ``--executor simulated --reward swr``
  (SWT predicts what commands print, SWR scores the patch; ``--model-spec`` picks the world
  model, e.g. ``openai:http://localhost:8000/v1#swt`` for a vLLM server; the embedded default
  runs on a CPU but takes seconds per call);
* your tasks instead of the toy one: ``--tasks path/to/tasks.jsonl`` (SWE-bench, SWE-Gym,
  SWE-smith or R2E-Gym rows).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

OLD = '    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
NEW = (
    '    slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n'
    "    return slug.strip(separator)"
)
TEXTUTIL = "/testbed/stockroom/textutil.py"


def tool_call(name: str, **arguments: object) -> str:
    """A tool call as the Qwen2.5 chat template writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


SCRIPTS = [
    [
        tool_call("file_editor", command="str_replace", path=TEXTUTIL, old_str=OLD, new_str=NEW),
        tool_call("finish"),
    ],
    [
        tool_call("file_editor", command="view", path=TEXTUTIL, view_range=[16, 27]),
        tool_call("finish"),
    ],
]


def tiny_tokenizer():
    """The embedded SmolLM2 tokenizer with TRL's Qwen2.5 (ChatML, tool-calling) template."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from sweworld.models.embedded import embedded_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_path()))
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    return tokenizer


def scripted_tiny_llama(tokenizer, scripts: list[list[str]]):
    """A tiny random LlamaForCausalLM whose sampling is steered to ``scripts`` (one per
    rollout of a generation batch; later turns continue the script already followed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    encoded = [[tokenizer.encode(t, add_special_tokens=False) for t in s] for s in scripts]
    done_ids = tokenizer.encode("Done.", add_special_tokens=False)
    eos = tokenizer.eos_token_id

    class Script(LogitsProcessor):
        def __init__(self) -> None:
            self.plan: list[list[int]] | None = None
            self.start = 0

        def _plan_row(self, index: int, ids: list[int]) -> list[int]:
            text = tokenizer.decode(ids)
            turn = text.count("<|im_start|>assistant") - 1
            followed = [k for k, script in enumerate(scripts) if turn and script[0] in text]
            turns = encoded[followed[0] if followed else index % len(scripts)]
            return (turns[turn] if turn < len(turns) else done_ids) + [eos]

        def __call__(self, input_ids, scores):
            if self.plan is None:
                self.start = input_ids.shape[1]
                self.plan = [self._plan_row(i, row.tolist()) for i, row in enumerate(input_ids)]
            step = input_ids.shape[1] - self.start
            forced = torch.full_like(scores, float("-inf"))
            for i, plan in enumerate(self.plan):
                forced[i, plan[min(step, len(plan) - 1)]] = 0.0
            return forced

    class ScriptedLlama(LlamaForCausalLM):
        def generate(self, *args, **kwargs):
            processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
            processors.append(Script())
            return super().generate(*args, logits_processor=processors, **kwargs)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=16384,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    return ScriptedLlama(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a tool-calling model (default: the scripted tiny one)")
    parser.add_argument("--tasks", help="a task file (default: the toy task)")
    parser.add_argument("--executor", default="local", help="local | simulated | hybrid")
    parser.add_argument("--reward", default="real", help="real | swr | both")
    parser.add_argument("--model-spec", default="embedded", help="the world model (simulated)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=3000)
    args = parser.parse_args()

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from sweworld import load_tasks
    from sweworld.env.trl_env import grpo_dataset, make_environment_factory
    from sweworld.tasks.toy import toy_tasks_path

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    started = time.perf_counter()
    tasks = load_tasks(args.tasks or toy_tasks_path())
    if args.tasks is None:
        tasks = tasks[:1]
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(args.model)
    else:
        tokenizer = tiny_tokenizer()
        model = scripted_tiny_llama(tokenizer, SCRIPTS)
    factory = make_environment_factory(
        tasks, executor=args.executor, reward=args.reward, model=args.model_spec, max_steps=20
    )
    with tempfile.TemporaryDirectory() as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=args.generations,
            num_generations=args.generations,
            max_completion_length=args.max_completion_length,
            max_tool_calling_iterations=8,
            max_steps=args.steps,
            learning_rate=1e-5,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=not torch.cuda.is_available(),
            bf16=False,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            train_dataset=grpo_dataset(tasks, repeat=args.generations * args.steps),
            processing_class=tokenizer,
            environment_factory=factory,
        )
        try:
            trainer.train()
        finally:
            factory.close()

    for number, env in enumerate(e for e in factory.instances if e.resets):
        info = env.last_info
        reward = info.get("reward") or {}
        print(
            f"rollout {number}: {env.resets} reset(s), {env.tool_calls} tool call(s), "
            f"end: {info.get('reason')} (by the {info.get('ended_by')}), "
            f"reward {reward.get('value')} (resolved={reward.get('resolved')}, "
            f"source={reward.get('source')})"
        )
    for row in trainer.state.log_history:
        if "rewards/SWEWorldToolEnv/mean" in row:
            keys = (
                "reward",
                "rewards/SWEWorldToolEnv/mean",
                "tools/call_frequency",
                "loss",
                "completions/mean_length",
            )
            print("TRL logged:", {k: row.get(k) for k in keys})
    print(f"wall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
