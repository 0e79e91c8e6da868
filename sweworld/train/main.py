"""The training run: records -> examples -> LoRA fine-tuning -> evaluation -> export.

transformers' ``Trainer`` with a peft LoRA model does the optimisation, checkpoints,
resume, mixed precision and gradient checkpointing, and runs unchanged under
``accelerate launch`` on several GPUs (its data-parallel wrapping; no loop is written
here). Examples are built in the inference format (:mod:`sweworld.train.examples`); the
``test`` split (the held-out repositories) is evaluated before and after training: the
loss on the answer tokens for SWT, and for SWR the scorer's P(resolved) against the real
labels (accuracy, balanced accuracy, ROC AUC).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sweworld.train.config import TrainConfig, config_from_args
from sweworld.train.examples import (
    Collator,
    Example,
    balance_classes,
    pack,
    swr_example,
    swt_example,
)
from sweworld.train.report import data_report, no_example_reason

__all__ = ["TrainingError", "build_examples", "load_records", "run", "train"]

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """A configuration or data problem that stops a run before training (exit code 2)."""


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------


def load_records(folders: list[str], kind: str, split: str) -> tuple[list[Any], dict[str, Any]]:
    """The records of ``split`` from every folder (duplicate ids kept once), and per-folder
    counts; a folder without records of ``kind`` is counted, not an error."""
    from sweworld.data.store import load_split

    records: list[Any] = []
    seen: set[str] = set()
    counts: dict[str, Any] = {}
    for folder in folders:
        try:
            rows = load_split(folder, kind, split)
        except FileNotFoundError as exc:
            counts[folder] = {"error": str(exc)}
            continue
        added = 0
        for rec in rows:
            if rec.id in seen:
                continue
            seen.add(rec.id)
            records.append(rec)
            added += 1
        counts[folder] = {"records": len(rows), "added": added, "duplicates": len(rows) - added}
    return records, counts


def build_examples(
    records: list[Any], config: TrainConfig, tokenizer: Any
) -> tuple[list[Example], Counter]:
    """Tokenized examples (one per record and mode) and the count of those left out, by
    reason. Never raises for a bad record: it is counted."""
    from sweworld.reward.swr import EMBEDDED_SWR_CONFIG

    skipped: Counter = Counter()
    out: list[Example] = []
    count = _counter(tokenizer)
    for rec in records:
        if (
            config.target == "swt"
            and not config.include_trajectory_state
            and getattr(rec, "state_source", "") == "trajectory"
        ):
            skipped["trajectory state (include_trajectory_state is off)"] += 1
            continue
        if config.target == "swt" and not config.include_inconsistent and not rec.consistent:
            # the step's recorded output was not reproduced by the replay (other commands of
            # the step printed into it, or the state drifted): not a clean target
            skipped["inconsistent replay (include_inconsistent is off)"] += 1
            continue
        for mode in config.modes:
            try:
                if config.target == "swt":
                    ex = swt_example(
                        rec,
                        mode,
                        tokenizer,
                        max_target_tokens=config.max_target_tokens,
                        count=count,
                    )
                else:
                    ex = swr_example(
                        rec,
                        mode,
                        tokenizer,
                        config=EMBEDDED_SWR_CONFIG,
                        statuses_loss=config.swr_statuses,
                        count=count,
                    )
            except Exception as exc:  # a malformed record is counted, never fatal
                skipped[f"unreadable record ({type(exc).__name__})"] += 1
                log.debug("record %s: %s", getattr(rec, "id", "?"), exc, exc_info=True)
                continue
            if ex is None:
                skipped[f"no {mode} context" if config.target == "swt" else "no task row"] += 1
                continue
            if len(ex) > config.max_length:
                skipped["longer than max_length"] += 1
                continue
            if ex.target_tokens == 0:
                skipped["no answer token"] += 1
                continue
            out.append(ex)
    return out, skipped


def _counter(tokenizer: Any):
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


class _ListDataset:
    """A list of examples as a map-style dataset (Trainer / DataLoader)."""

    def __init__(self, items: list[Example]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Example:
        return self.items[index]


# ------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------


def _base_path(config: TrainConfig) -> tuple[Path, str]:
    if config.base_model in ("embedded", "embedded:base"):
        from sweworld.models.embedded import MODEL_NAME, embedded_model_path

        return embedded_model_path(), f"embedded ({MODEL_NAME})"
    path = Path(config.base_model)
    if not (path / "config.json").is_file():
        raise TrainingError(f"base model {path}: no config.json (a save_pretrained folder)")
    return path, str(path)


def _check_hardware(config: TrainConfig) -> None:
    import torch

    cuda = torch.cuda.is_available()
    if (config.bf16 or config.fp16) and not cuda:
        raise TrainingError("--bf16/--fp16 need a CUDA GPU; on a CPU train in float32")
    if config.qlora:
        if not cuda:
            raise TrainingError("--qlora needs a CUDA GPU (4-bit weights by bitsandbytes)")
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as exc:
            raise TrainingError("--qlora needs bitsandbytes: pip install bitsandbytes") from exc


def _load_model(config: TrainConfig, path: Path) -> tuple[Any, Any]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    kwargs: dict[str, Any] = {"local_files_only": True, "dtype": torch.float32}
    if config.qlora:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16 if config.bf16 else torch.float16,
            bnb_4bit_use_double_quant=True,
        )
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    if config.qlora:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=config.gradient_checkpointing
        )
    layers = None
    if config.lora_layers > 0:
        total = int(model.config.num_hidden_layers)
        layers = list(range(max(total - config.lora_layers, 0), total))
    lora = LoraConfig(
        layers_to_transform=layers,
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        model = get_peft_model(model, lora)
    except ValueError as exc:
        raise TrainingError(f"LoRA target modules {config.target_modules}: {exc}") from exc
    return tokenizer, model


def _time_limit(minutes: float) -> Any:
    """A Trainer callback that ends training once ``minutes`` of steps have passed (the
    adapter is then saved and exported as after the last step)."""
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        def __init__(self) -> None:
            self.deadline: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.deadline = time.monotonic() + minutes * 60

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                _say(f"time limit of {minutes:g} min reached after step {state.global_step}")
                control.should_training_stop = True
                control.should_save = True

    return TimeLimit()


def _step_counter() -> Any:
    """A Trainer callback counting the optimizer steps this process ran (a resumed run
    runs only those after its checkpoint)."""
    from transformers import TrainerCallback

    class StepCounter(TrainerCallback):
        steps = 0

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps += 1

    return StepCounter()


def _checkpoint_step(checkpoint: str | None) -> int | None:
    """The global step a checkpoint folder was saved at (its ``trainer_state.json``)."""
    if not checkpoint:
        return None
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
        return int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _mask_dtype(model: Any) -> Any:
    """Boolean 4D masks for SDPA / flex attention, additive float ones for eager."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"
    if impl == "eager":
        return getattr(model, "dtype", None)
    return None


# ------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------


def evaluate_swr(model: Any, examples: list[Example]) -> dict[str, Any]:
    """The scorer on held-out examples: P(true) from the answer token's log-probabilities
    (as ``choice_logprobs`` reads it) against the real labels."""
    import torch

    probs: list[float] = []
    labels: list[int] = []
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for ex in examples:
            at = int(ex.meta["answer_at"])
            tails = ex.meta["choices"]
            scores = {}
            if all(len(t) == 1 for t in tails.values()):
                ids = torch.tensor([ex.input_ids[:at]], device=device)
                logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), dim=-1)
                scores = {c: float(logp[t[0]]) for c, t in tails.items()}
            else:
                for choice, tail in tails.items():
                    ids = torch.tensor([ex.input_ids[:at] + list(tail)], device=device)
                    logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
                    scores[choice] = sum(float(logp[at + j - 1, tok]) for j, tok in enumerate(tail))
            top = max(scores.values())
            z = sum(math.exp(v - top) for v in scores.values())
            probs.append(math.exp(scores["true"] - top) / z)
            labels.append(int(bool(ex.meta["resolved"])))
    if was_training:
        model.train()
    return _classifier_metrics(probs, labels)


def _classifier_metrics(probs: list[float], labels: list[int]) -> dict[str, Any]:
    n = len(labels)
    if not n:
        return {"n": 0}
    pred = [int(p >= 0.5) for p in probs]
    pos = sum(labels)
    tp = sum(1 for p, y in zip(pred, labels, strict=True) if p and y)
    tn = sum(1 for p, y in zip(pred, labels, strict=True) if not p and not y)
    out: dict[str, Any] = {
        "n": n,
        "positives": pos,
        "accuracy": round((tp + tn) / n, 4),
        "mean_p_true": round(sum(probs) / n, 4),
    }
    if 0 < pos < n:
        out["balanced_accuracy"] = round((tp / pos + tn / (n - pos)) / 2, 4)
        from sklearn.metrics import roc_auc_score

        out["roc_auc"] = round(float(roc_auc_score(labels, probs)), 4)
    return out


def _evaluate(trainer: Any, model: Any, config: TrainConfig, examples: list[Example]) -> dict:
    if not examples:
        return {"n": 0}
    if config.target == "swr":
        return evaluate_swr(model, examples)
    metrics = trainer.evaluate(eval_dataset=_ListDataset(examples))
    loss = float(metrics.get("eval_loss", float("nan")))
    return {"n": len(examples), "answer_loss": round(loss, 4), "perplexity": _ppl(loss)}


def _ppl(loss: float) -> float | None:
    try:
        return round(math.exp(loss), 3)
    except (OverflowError, ValueError):
        return None


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def _resume_path(config: TrainConfig, checkpoints: Path) -> str | None:
    if not config.resume:
        return None
    if config.resume == "last":
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
        if last is None:
            raise TrainingError(f"--resume last: no checkpoint under {checkpoints}")
        return last
    if not Path(config.resume).is_dir():
        raise TrainingError(f"--resume {config.resume}: no such checkpoint folder")
    return config.resume


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def train(config: TrainConfig) -> dict[str, Any]:
    """Run one training (see the module docstring); returns the metrics written to
    ``sweworld-adapter.json``. Raises :class:`TrainingError` for a configuration or data
    problem found before training."""
    import torch
    from transformers import Trainer, TrainingArguments, set_seed

    if not config.data:
        raise TrainingError("no --data folder given")
    _check_hardware(config)
    if config.threads:
        torch.set_num_threads(config.threads)
    set_seed(config.seed)
    started = time.perf_counter()
    kind = config.target
    path, base_name = _base_path(config)
    tokenizer, model = _load_model(config, path)
    train_records, train_counts = load_records(config.data, kind, "train")
    if config.max_examples and len(train_records) > config.max_examples:
        import random

        random.Random(config.seed).shuffle(train_records)
        train_records = train_records[: config.max_examples]
    # the test split is read even without evaluation: it says where the records went
    test_records, test_counts = load_records(config.data, kind, "test")
    test_repos = sorted({r.repo for r in test_records})
    if not config.eval:
        test_records = []
    train_examples, train_skipped = build_examples(train_records, config, tokenizer)
    test_examples, test_skipped = build_examples(test_records, config, tokenizer)
    limit = config.eval_limit
    if limit and len(test_examples) > limit:
        import random

        random.Random(config.seed).shuffle(test_examples)
        test_examples = test_examples[:limit]
    for line in data_report(config, train_records, train_examples, train_skipped, "train"):
        _say(line)
    if config.eval:
        for line in data_report(config, test_records, test_examples, test_skipped, "test"):
            _say(line)
    if not train_examples:
        raise TrainingError(
            no_example_reason(config, train_records, train_skipped, test_counts, test_repos)
        )
    rows = train_examples
    if kind == "swr" and config.balance:
        rows = balance_classes(rows, seed=config.seed)
    packing = config.packing
    if packing != "none":
        rows = pack(rows, config.max_length)
    out = Path(config.out)
    checkpoints = out / "checkpoints"
    resume = _resume_path(config, checkpoints)
    eval_on = bool(config.eval and test_examples)
    args = TrainingArguments(
        output_dir=str(checkpoints),
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=1,
        gradient_accumulation_steps=config.grad_accum,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        warmup_steps=config.warmup_ratio,
        lr_scheduler_type="linear",
        logging_steps=config.logging_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        eval_strategy="steps" if eval_on and config.eval_steps and kind == "swt" else "no",
        eval_steps=config.eval_steps or None,
        seed=config.seed,
        bf16=config.bf16,
        fp16=config.fp16,
        gradient_checkpointing=config.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False}
        if config.gradient_checkpointing
        else None,
        remove_unused_columns=False,
        report_to="none",
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=not sys.stderr.isatty(),
    )
    # eval batches are one example each: no packing, plain causal masks
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_ListDataset(rows),
        eval_dataset=_ListDataset(test_examples) if eval_on and kind == "swt" else None,
        data_collator=Collator(
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
            packing=packing,
            mask_dtype=_mask_dtype(model),
        ),
        processing_class=tokenizer,
    )
    if config.max_minutes > 0:
        trainer.add_callback(_time_limit(config.max_minutes))
    counter = _step_counter()
    trainer.add_callback(counter)
    metrics: dict[str, Any] = {}
    if eval_on and resume is None:
        metrics["eval_before"] = _evaluate(trainer, model, config, test_examples)
        _say(f"eval (base model, held-out repos): {metrics['eval_before']}")
    trained = trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - started
    train_tokens = sum(len(r) for r in rows)
    steps = int(trainer.state.global_step)
    epochs_done = float(trainer.state.epoch or 0.0)
    metrics.update(
        {
            "train_loss": round(float(trained.training_loss), 4),
            "steps": steps,
            "epochs": round(epochs_done, 3),
            "train_examples": len(train_examples),
            "train_rows": len(rows),
            "train_tokens_per_epoch": train_tokens,
            "train_runtime_s": round(float(trained.metrics.get("train_runtime", 0.0)), 1),
            "train_samples_per_s": trained.metrics.get("train_samples_per_second"),
            "steps_this_run": counter.steps,
            "resumed_from": resume,
            "resumed_at_step": _checkpoint_step(resume),
            "left_out": dict(train_skipped),
            "test_left_out": dict(test_skipped),
        }
    )
    if eval_on:
        metrics["eval_after"] = _evaluate(trainer, model, config, test_examples)
        _say(f"eval (adapter, held-out repos): {metrics['eval_after']}")
    data = {
        "folders": list(config.data),
        "train": train_counts,
        "test": test_counts,
        "heldout_repos": test_repos,
        "train_repos": len({r.repo for r in train_records}),
    }
    from sweworld.train.export import export_adapter, export_merged

    base_model = base_name
    metrics["wall_s"] = round(time.perf_counter() - started, 1)
    metrics["train_s"] = round(seconds, 1)
    if trainer.is_world_process_zero():
        export_adapter(
            model,
            tokenizer,
            out,
            config=config,
            base_model=base_model,
            metrics=metrics,
            data=data,
        )
        if config.merge:
            export_merged(model, tokenizer, out / "merged")
    _say(
        f"adapter written to {out}" + (f" (merged model: {out / 'merged'})" if config.merge else "")
    )
    return metrics


def run(args: argparse.Namespace) -> int:
    """``sweworld train swt|swr`` / ``python -m sweworld.train``: exit 0 on success, 2 for a
    configuration or data problem (one line on stderr)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sweworld.extras import extras, require

    target = getattr(args, "train_target", None) or "swt"
    require(extras().get("train", ()), "train", what=f"sweworld train {target}")
    try:
        config = config_from_args(args)
        metrics = train(config)
    except (TrainingError, ValueError, FileNotFoundError) as exc:
        _say(f"sweworld: error: {exc}")
        return 2
    print(json.dumps(metrics, indent=2, sort_keys=True, default=str))
    return 0
