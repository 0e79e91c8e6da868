"""What the command line prints besides its own output: dependencies kept quiet by default.

By default (no ``-v``) the libraries sweworld drives do not speak: transformers' and
peft's ``FutureWarning`` / ``UserWarning`` lines, "Loading weights" bars, datasets'
"Saving the dataset" bars and the hub's download bars are turned off. ``-v`` lets their
warnings through, and their bars too when stderr is a terminal. When stderr is not a
terminal, no tqdm bar is drawn at all (``TQDM_DISABLE=1``: transformers' GGUF conversion
bar is a plain tqdm one). sweworld's own progress
bars (``make-tasks``, ``verify``) are drawn only on a terminal.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import TextIO

__all__ = ["DEPENDENCIES", "plain", "progress_enabled", "quiet_dependencies"]

#: The libraries whose warnings and bars are filtered by default.
DEPENDENCIES = (
    "transformers",
    "peft",
    "accelerate",
    "torch",
    "datasets",
    "huggingface_hub",
    "trl",
    "sklearn",
    "gguf",
)

#: Environment switches the libraries read when they are imported (sweworld imports them
#: lazily, after the command line is parsed).
_QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether a progress bar may be drawn on ``stream`` (default stderr): a terminal."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


def quiet_dependencies(verbose: int = 0) -> None:
    """Silence the dependencies' warnings and bars (``verbose`` 0), or let their warnings
    through and their bars on a terminal (``-v``). A variable the user set is kept."""
    bars = verbose > 0 and progress_enabled()
    for key, value in _QUIET_ENV.items():
        if key.endswith("PROGRESS_BARS") and bars:
            continue
        if key.startswith("TRANSFORMERS_") and verbose > 0:
            continue
        os.environ.setdefault(key, value)
    if not progress_enabled():  # no terminal: no tqdm bar of any library (transformers'
        os.environ.setdefault("TQDM_DISABLE", "1")  # GGUF conversion uses tqdm directly)
    if verbose > 0:
        return
    pattern = r"(" + "|".join(DEPENDENCIES) + r")(\..*)?$"
    for category in (FutureWarning, UserWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=pattern)
    for name in ("transformers", "datasets", "huggingface_hub"):
        module = sys.modules.get(name)  # already imported: its own switches too
        if module is None:
            continue
        utils = getattr(getattr(module, "utils", None), "logging", None)
        for switch in ("set_verbosity_error", "disable_progress_bar"):
            func = getattr(utils, switch, None)
            if callable(func):
                func()


_ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|obj|exc):`~?([^`]+)`")


def plain(text: str | None) -> str | None:
    """Help text without Sphinx markup (for ``--help`` built from docstrings):
    ``:mod:`a.b``` -> ``a.b``, double backquotes dropped."""
    if not text:
        return text
    return _ROLE.sub(lambda m: m.group(1), text).replace("``", "")
