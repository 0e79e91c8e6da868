"""Fine-tuning SWT and SWR: LoRA adapters for the embedded model (or any causal LM).

``sweworld train swt|swr --data D [--data D2 ...] --out A`` (also ``python -m
sweworld.train swt|swr ...``) reads the datasets written by ``sweworld data``, builds
examples in exactly the format inference uses (:mod:`sweworld.train.examples`), trains a
LoRA adapter with transformers' ``Trainer`` (:mod:`sweworld.train.main`; several GPUs
under ``accelerate launch``), evaluates it on the held-out repositories and writes it
(:mod:`sweworld.train.export`) where ``--model embedded+A`` or ``hf:BASE+A`` loads it.
The configuration (:class:`~sweworld.train.config.TrainConfig`) comes from defaults, a
YAML file (``--config``) and command-line options, in that order. See docs/TRAINING.md.

Imports: the lower layers (tasks ... reward) and :mod:`sweworld.data`'s schema; nothing
that serves or runs episodes.
"""

from sweworld.train.config import TrainConfig, add_arguments, config_from_args

__all__ = ["TrainConfig", "add_arguments", "config_from_args"]
