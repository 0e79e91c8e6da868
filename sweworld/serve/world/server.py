"""``sweworld serve world``: the world service under uvicorn.

``add_arguments(parser)`` adds the sub-command's options; ``run(args)`` starts the service
and returns its exit status. The first SIGTERM or SIGINT starts a graceful shutdown: new
requests get 503 while the steps in flight finish (at most ``--drain-timeout`` seconds),
then uvicorn stops and every episode and session is closed; a second signal stops at once.

Requires the ``serve`` extra (FastAPI, uvicorn); imported lazily by ``sweworld serve``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["add_arguments", "config_from_args", "draining_server", "main", "run"]

log = logging.getLogger("sweworld.serve.world")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld serve world``."""
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    net.add_argument("--port", type=int, default=8765, help="port to listen on (8765; 0: any)")
    auth = parser.add_argument_group("authentication")
    auth.add_argument(
        "--token", action="append", default=[], help="a bearer token clients must send (repeatable)"
    )
    auth.add_argument("--tokens-file", help="a file of bearer tokens, one per line")
    auth.add_argument(
        "--no-auth",
        action="store_true",
        help="accept requests without a token (DANGEROUS beyond loopback)",
    )
    ep = parser.add_argument_group("episodes")
    ep.add_argument(
        "--tasks",
        help="a tasks file or folder clients may open by instance_id (default: the toy tasks)",
    )
    ep.add_argument(
        "--executor",
        default="simulated",
        help="what answers execution: simulated, hybrid, local, none (simulated)",
    )
    ep.add_argument("--model", default="embedded", help="SWT model spec (embedded)")
    ep.add_argument("--reward", default="swr", help="swr, real, both or none (swr)")
    ep.add_argument("--swr-model", default="embedded", help="SWR model spec (embedded)")
    ep.add_argument("--mode", default="blind", choices=("blind", "oracle"), help="(blind)")
    ep.add_argument("--max-steps", type=int, default=50, help="steps per episode (50)")
    ep.add_argument("--step-timeout", type=float, default=300.0, help="deadline of a step (300 s)")
    ep.add_argument(
        "--allow-config-executor",
        action="store_true",
        help="let clients choose executor / model / swr_model per episode",
    )
    lim = parser.add_argument_group("limits")
    lim.add_argument("--max-episodes-per-token", type=int, default=64, help="live episodes (64)")
    lim.add_argument("--max-steps-per-minute", type=int, default=6000, help="per token (6000)")
    lim.add_argument("--max-creates-per-minute", type=int, default=600, help="per token (600)")
    lim.add_argument(
        "--idle-timeout", type=float, default=900.0, help="close episodes idle this long (900 s)"
    )
    lim.add_argument(
        "--max-body-bytes", type=int, default=4 * 1024 * 1024, help="largest request body (4 MiB)"
    )
    lim.add_argument(
        "--request-deadline",
        type=float,
        default=None,
        help="longest wait for one call before 504 (default: by the step deadline)",
    )
    lim.add_argument("--workers", type=int, default=256, help="threads for episode calls (256)")
    lim.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="how long shutdown waits for steps in flight (60 s)",
    )
    ops = parser.add_argument_group("operations")
    ops.add_argument("--runtime-dir", help="where session state goes (the sandbox default)")
    ops.add_argument("--log-level", default="INFO", help="INFO")
    ops.add_argument("--log-format", choices=("json", "text"), default="json", help="(json)")


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~sweworld.serve.world.config.WorldConfig` the options describe."""
    from sweworld.env import EpisodeConfig
    from sweworld.serve.world.auth import read_tokens_file
    from sweworld.serve.world.config import WorldConfig
    from sweworld.tasks.toy import toy_tasks_path

    tokens = list(args.token or [])
    if args.tokens_file:
        tokens += read_tokens_file(args.tokens_file)
    episode = EpisodeConfig(
        executor=args.executor,
        model=args.model,
        reward=args.reward,
        swr_model=args.swr_model,
        mode=args.mode,
        max_steps=args.max_steps,
        step_timeout_s=args.step_timeout,
    )
    return WorldConfig(
        tokens=tuple(tokens),
        no_auth=args.no_auth,
        episode=episode,
        tasks=args.tasks or str(toy_tasks_path()),
        allow_config_executor=args.allow_config_executor,
        max_episodes_per_token=args.max_episodes_per_token,
        max_steps_per_minute=args.max_steps_per_minute,
        max_creates_per_minute=args.max_creates_per_minute,
        idle_timeout_s=args.idle_timeout,
        max_body_bytes=args.max_body_bytes,
        request_deadline_s=args.request_deadline,
        workers=args.workers,
        drain_timeout_s=args.drain_timeout,
        runtime_root=args.runtime_dir,
    )


def _uvicorn_server_class() -> type:
    import uvicorn

    class _DrainingServer(uvicorn.Server):
        """uvicorn's server whose first exit signal drains the world before stopping."""

        def __init__(self, config: Any, world: Any) -> None:
            super().__init__(config)
            self.world = world
            self._drain_started = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self._drain_started:  # a second signal: stop now
                self.should_exit = self.force_exit = True
                return
            self._drain_started = True
            self.world.start_draining()
            log.warning("signal %d: draining (new requests get 503)", sig)
            threading.Thread(target=self._drain, name="sweworld-drain", daemon=True).start()

        def _drain(self) -> None:
            if not self.world.wait_idle(self.world.config.drain_timeout_s):
                log.warning(
                    "drain: calls still running after %.0f s; stopping anyway",
                    self.world.config.drain_timeout_s,
                )
            self.should_exit = True

    return _DrainingServer


def draining_server(config: Any, world: Any) -> Any:
    """A uvicorn ``Server`` whose first SIGTERM / SIGINT drains ``world`` (503 to new
    requests, steps in flight finish), then stops; the app's shutdown closes everything."""
    return _uvicorn_server_class()(config, world)


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket made with ``proto=IPPROTO_TCP``: asyncio turns Nagle off
    (``TCP_NODELAY``) only on accepted sockets whose proto says TCP, and
    ``socket.create_server`` leaves it 0, so every response (headers and body written
    apart) waited ~40 ms for the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def run(args: argparse.Namespace) -> int:
    """Start the world service; returns 0 after a graceful shutdown, 2 for bad options."""
    try:
        import uvicorn

        from sweworld.serve.world.app import create_app
        from sweworld.serve.world.handler import WorldHandler
        from sweworld.serve.world.logs import configure_logging
    except ImportError as exc:
        print(
            f"sweworld serve world needs the serve extra (pip install 'sweworld[serve]'): {exc}",
            file=sys.stderr,
        )
        return 2
    configure_logging(args.log_level, json=args.log_format == "json")
    try:
        config = config_from_args(args)
    except (ValueError, OSError) as exc:
        print(f"sweworld serve world: {exc}", file=sys.stderr)
        return 2
    if config.no_auth:
        log.warning(
            "NO AUTHENTICATION (--no-auth): anyone who reaches %s:%d runs episodes",
            args.host,
            args.port,
        )
    try:
        world = WorldHandler(config)
    except Exception as exc:  # a tasks file that cannot be read, no bubblewrap, ...
        print(f"sweworld serve world: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    app = create_app(config, world)
    sock = listening_socket(args.host, args.port)
    host, port = sock.getsockname()[:2]
    # keep-alive well past clients' idle-connection expiry (httpx: 5 s), so that a client
    # never sends a step on a connection the server is closing
    uv_config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=75,
    )
    server = draining_server(uv_config, world)
    print(f"sweworld world service on http://{host}:{port} (docs: /docs)", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        world.close()  # idempotent: the app's shutdown closed it already
        sock.close()
    log.info("world service stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m sweworld.serve.world.server ...`` (the same as ``sweworld serve world``)."""
    parser = argparse.ArgumentParser(prog="sweworld serve world", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
