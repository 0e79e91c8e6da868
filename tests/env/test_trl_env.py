"""The TRL adapter: its tools called directly, and TRL's own GRPOTrainer driving it.

The GRPO test runs ``GRPOTrainer(environment_factory=...)`` for one real training step on the
CPU. The policy is a tiny random ``LlamaForCausalLM`` with the embedded SmolLM2 tokenizer and
TRL's own Qwen2.5 chat template (SmolLM2's template has no tool calls; the Qwen2.5 one is
ChatML like SmolLM2's and is the template TRL knows how to parse tool calls from). A random
model never writes a tool call, so its sampling is steered by a logits processor that spells a
scripted answer per turn; TRL still parses the calls, runs the tools, builds the multi-turn
completion, reads the rewards and computes the loss with the model's own log-probabilities.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl")

from sweworld.env import EpisodeError, EpisodeFinished
from sweworld.env.trl_env import (
    SWEWorldToolEnv,
    grpo_dataset,
    make_environment_factory,
)

OLD = '    return re.sub(r"[^a-z0-9]", separator, ascii_text.lower())'
NEW = (
    '    slug = re.sub(r"[^a-z0-9]+", separator, ascii_text.lower())\n'
    "    return slug.strip(separator)"
)
TEXTUTIL = "/testbed/stockroom/textutil.py"


def test_tools_fix_the_toy_task_and_reward_is_real(manager, toy_task):
    with make_environment_factory(
        [toy_task], executor="local", reward="real", manager=manager
    ) as factory:
        env = factory()
        issue = env.reset(prompt=[{"role": "user", "content": "fix it"}])  # no task column
        assert "<github_issue>" in issue and "slugify" in issue
        assert "def slugify" in env.search("def slugify", "/testbed/stockroom")
        assert "16" in env.file_editor("view", TEXTUTIL, view_range=[16, 27])
        edited = env.file_editor("str_replace", TEXTUTIL, old_str=OLD, new_str=NEW)
        assert "has been edited" in edited
        assert "passed" in env.execute_bash("python -m pytest tests/test_textutil.py -q")
        env.finish()
        assert env.get_reward() == 1.0
        assert env.last_info["reason"] == "submitted" and env.last_info["ended_by"] == "agent"
        assert env.last_info["reward"]["source"] == "real"
        with pytest.raises(EpisodeFinished):
            env.execute_bash("ls")
        # the same instance, reset for the next rollout: a fresh checkout, ended by the trainer
        env.reset(task=json.dumps(toy_task.to_row()))
        assert '[^a-z0-9]"' in env.file_editor("view", TEXTUTIL)
        assert env.get_reward() == 0.0
        assert env.last_info["ended_by"] == "trainer"
        assert env.resets == 2 and env.tool_calls == 6


def test_tool_schemas_are_what_transformers_reads():
    from transformers.utils import get_json_schema

    env = SWEWorldToolEnv()
    schemas = {m: get_json_schema(getattr(env, m))["function"] for m in ("file_editor", "search")}
    editor = schemas["file_editor"]["parameters"]
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["view_range"]["type"] == "array"
    assert editor["properties"]["insert_line"]["type"] == "integer"
    assert schemas["search"]["parameters"]["required"] == ["search_term"]


def test_bad_input(manager, toy_task):
    with make_environment_factory(executor="none", reward="none", manager=manager) as factory:
        env = factory()
        with pytest.raises(EpisodeError, match="reset"):
            env.execute_bash("ls")  # before reset
        with pytest.raises(EpisodeError, match="reset"):
            env.get_reward()
        with pytest.raises(EpisodeError, match="no task"):
            env.reset(prompt=[])  # no task column and no tasks
        with pytest.raises(ValueError, match="not a task row"):
            env.reset(task={"instance_id": "x"})  # a row missing its fields
        with pytest.raises(ValueError, match="not among"):
            env.reset(instance_id="nope")
        env.reset(task=toy_task.to_row())
        out = env.file_editor("explode", TEXTUTIL)  # a bad command is answered, not raised
        assert "explode" in out and not env.episode.done
        out = env.file_editor("view", TEXTUTIL, view_range=[5])
        assert not env.episode.done and out
        other = factory()
        other.reset(task=toy_task.to_row())
        env.file_editor("create", "/testbed/mine.txt", file_text="x")
        assert "does not exist" in other.file_editor("view", "/testbed/mine.txt")
        assert env.episode.session.id != other.episode.session.id


@pytest.mark.slow
def test_grpo_trainer_drives_the_environment(manager, toy_task, tmp_path, monkeypatch):
    """TRL's GRPOTrainer resets, steps (tool calls) and scores sweworld, one training step."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch = pytest.importorskip("torch")
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    tokenizer = _tokenizer()
    scripts = [
        # rollout 0 fixes the bug and submits; rollout 1 looks, then submits nothing
        [
            _call("file_editor", command="str_replace", path=TEXTUTIL, old_str=OLD, new_str=NEW),
            _call("finish"),
        ],
        [_call("file_editor", command="view", path=TEXTUTIL, view_range=[16, 27]), _call("finish")],
    ]
    model = _scripted_tiny_llama(tokenizer, scripts)
    factory = make_environment_factory(
        [toy_task], executor="local", reward="real", manager=manager, max_steps=8
    )
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=3000,
        max_tool_calling_iterations=4,
        max_steps=1,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        args=args,
        train_dataset=grpo_dataset([toy_task], repeat=2),
        processing_class=tokenizer,
        environment_factory=factory,
    )
    try:
        trainer.train()
    finally:
        factory.close()
    used = [env for env in factory.instances if env.resets]
    assert len(used) == 2  # one instance per rollout, reset by TRL
    assert sorted(env.tool_calls for env in used) == [2, 2]  # both calls of each script, run
    by_reward = sorted(used, key=lambda env: env.last_info["reward"]["value"])
    assert by_reward[0].last_info["reward"]["resolved"] is False
    assert by_reward[1].last_info["reward"]["resolved"] is True
    assert "stockroom/textutil.py" in by_reward[1].last_info["patch"]
    assert all(env.last_info["ended_by"] == "agent" for env in used)
    logged = [row for row in trainer.state.log_history if "rewards/SWEWorldToolEnv/mean" in row]
    assert logged and logged[0]["rewards/SWEWorldToolEnv/mean"] == pytest.approx(0.5)
    assert logged[0]["reward"] == pytest.approx(0.5)  # sweworld's reward is TRL's reward
    assert logged[0]["tools/call_frequency"] > 0 and logged[0]["tools/failure_frequency"] == 0


# ---------------------------------------------------------------------- the scripted policy


def _call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _tokenizer():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from sweworld.models.embedded import embedded_model_path

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_path()))
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    return tokenizer


def _scripted_tiny_llama(tokenizer, scripts):
    """A tiny random LlamaForCausalLM whose ``generate`` is steered to the scripts: rollout
    ``i`` of the first generation writes ``scripts[i][0]``, later turns continue the script the
    conversation already follows, then a plain answer ends the rollout."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    encoded = [[tokenizer.encode(turn, add_special_tokens=False) for turn in s] for s in scripts]
    done_ids = tokenizer.encode("Done.", add_special_tokens=False)
    eos = tokenizer.eos_token_id

    class Script(LogitsProcessor):
        def __init__(self):
            self.plan = None
            self.start = 0

        def _plan_row(self, index, ids):
            text = tokenizer.decode(ids)
            turn = text.count("<|im_start|>assistant") - 1  # assistant turns already written
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


class BrokenExecutor:
    """An executor whose backend is down (every call raises)."""

    name = "broken"

    def execute(self, request):
        raise RuntimeError("the model server is down")


def test_failing_executor_and_reward_end_with_the_reason(manager, toy_task):
    from sweworld.env import EpisodeConfig, EpisodeRewarder

    with make_environment_factory(
        [toy_task], executor="local", reward="real", manager=manager
    ) as factory:
        assert factory.shared.config.executor == "local"  # a spec string is config
    with make_environment_factory(
        [toy_task], executor=BrokenExecutor(), end_on_executor_error=True, manager=manager
    ) as factory:
        env = factory()
        env.reset()
        env.execute_bash("python -V")
        assert env.episode.done and env.last_info["reason"] == "error"
        assert "model server is down" in env.last_info["error"]
        assert env.get_reward() == 0.0
    broken = EpisodeRewarder(
        EpisodeConfig(reward="real"), manager=manager, real_executor="no_such_executor"
    )
    with make_environment_factory(
        [toy_task], executor="none", manager=manager, rewarder=broken
    ) as factory:
        env = factory()
        env.reset()
        env.finish()
        assert env.get_reward() == 0.0
        assert env.last_info["reason"] == "error" and "reward failed" in env.last_info["error"]
