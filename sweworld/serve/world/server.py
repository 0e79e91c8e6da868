"""``sweworld serve world``: the world service under uvicorn.

``add_arguments(parser)`` adds the sub-command's options; ``run(args)`` starts the service
and returns its exit status. The first SIGTERM or SIGINT starts a graceful shutdown: new
requests get 503 while the steps in flight finish (at most ``--drain-timeout`` seconds),
then uvicorn stops and every episode and session is closed. A second signal stops at once:
requests in flight get 503 (JSON), the sandboxes are killed, the sessions closed best-effort
within ``--force-exit-timeout``, and the process exits with :data:`FORCED_EXIT`.

Every option is checked before anything listens (numbers finite and bounded, the executor
and model specs resolvable, the address bindable): a bad one is one line on stderr and exit
status 2. Connections go through :mod:`sweworld.serve.world.connections` (header, body and
keep-alive timeouts, a connection limit under the descriptor limit) and every error is JSON
(:class:`~sweworld.serve.world.app.JsonErrors`).

Requires the ``serve`` extra (FastAPI, uvicorn); imported lazily by ``sweworld serve``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import sys
from typing import Any

from sweworld.argtypes import bounded
from sweworld.serve.world.draining import draining_server

__all__ = ["add_arguments", "config_from_args", "draining_server", "main", "run"]

log = logging.getLogger("sweworld.serve.world")

#: The service's default disk quota and scratch-mount size per session (MiB), below the
#: library's (1024 / 64): each live session's disk is a tmpfs held against the disk budget
#: (half the memory by default), so these decide how many sessions a host serves
#: (256 + 64 control + 2 x 16 = 352 MiB each: about 34 on a 24 GiB host).
SERVICE_DISK_MB = 256
SERVICE_SCRATCH_MB = 16


#: Receive buffer of every connection (the kernel doubles it), bytes.
RECEIVE_BUFFER = 128 * 1024
#: Bounds of the numeric options of the other groups, checked after parsing (an option not
#: listed must still be finite and not negative): (lowest, highest).
NUMERIC_BOUNDS: dict[str, tuple[float, float]] = {
    "max_steps": (1, 100_000),
    "step_timeout": (0.1, 86_400),
    "max_episodes_per_token": (1, 100_000),
    "max_steps_per_minute": (1, 10_000_000),
    "max_creates_per_minute": (1, 1_000_000),
    "idle_timeout": (1, 7 * 86_400),
    "max_body_bytes": (1024, 1 << 30),
    "request_deadline": (0.1, 7 * 86_400),
    "workers": (1, 4096),
    "drain_timeout": (0, 86_400),
}


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level")
    return level


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option finite and within :data:`NUMERIC_BOUNDS` (not negative when it
    has none); ``ValueError`` naming the first that is not."""
    for name, value in sorted(vars(args).items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        low, high = NUMERIC_BOUNDS.get(name, (0, math.inf))
        if not math.isfinite(value) or not low <= value <= high:
            option = "--" + name.replace("_", "-")
            raise ValueError(f"{option} must be in [{low:g}, {high:g}], got {value!r}")


def check_components(episode: Any) -> None:
    """The executor and model specs of the server's episodes resolve, without building a
    model (:meth:`sweworld.world.WorldConfig.check`: a registered executor name, ``NAME:ARG``
    built to check ``ARG``, or a dotted path to an executor class or a Python factory
    function, not a builtin such as ``os.system``; the SWT and SWR specs checked).
    ``ValueError`` with one line otherwise."""
    from sweworld.world import WorldConfig

    try:
        WorldConfig.from_episode(episode).check()
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld serve world``."""
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    net.add_argument(
        "--port", type=bounded(int, 0, 65535), default=8765, help="port to listen on (8765; 0: any)"
    )
    net.add_argument(
        "--header-timeout", type=bounded(float, 0.1, 3600), default=10.0,
        help="close a connection whose request head is not complete this long after it "
        "began (slowloris; 10 s)",
    )  # fmt: skip
    net.add_argument(
        "--body-timeout", type=bounded(float, 0.1, 3600), default=30.0,
        help="answer 408 when a request body is not complete this long after its head (30 s)",
    )  # fmt: skip
    net.add_argument(
        "--keepalive-timeout", type=bounded(float, 0.1, 3600), default=75.0,
        help="close a kept-alive connection idle this long between requests (75 s: well "
        "past clients' own idle expiry, httpx's 5 s, so that none sends on a closing one)",
    )  # fmt: skip
    net.add_argument(
        "--max-connections", type=bounded(int, 1, 1 << 20), default=None,
        help="connections open at once; past it the longest-idle one is closed, or a new one "
        "gets 503 when all are answering (default: half of what the descriptor limit, "
        "RLIMIT_NOFILE, leaves after a reserve of 192; the other half is the sessions', "
        "about 11 descriptors each)",
    )  # fmt: skip
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
        default="outcome",
        help="what answers execution: outcome (the outcome model), simulated (the SWT "
        "language model), hybrid, local, none (outcome)",
    )
    ep.add_argument("--model", default="embedded", help="SWT model spec (embedded)")
    ep.add_argument("--reward", default="swr", help="swr, real, both or none (swr)")
    ep.add_argument("--swr-model", default="embedded", help="SWR model spec (embedded)")
    ep.add_argument("--mode", default="oracle", choices=("oracle", "blind"), help="(oracle)")
    ep.add_argument("--max-steps", type=int, default=50, help="steps per episode (50)")
    ep.add_argument("--step-timeout", type=float, default=300.0, help="deadline of a step (300 s)")
    ep.add_argument(
        "--allow-config-executor",
        action="store_true",
        help="let clients choose executor / model / swr_model per episode (even then: a "
        "registered executor name, never a dotted path; an embedded model)",
    )
    ep.add_argument(
        "--max-wall", type=bounded(float, 1, 30 * 24 * 3600), default=3600.0,
        help="seconds from reset after which an episode is truncated (3600)",
    )  # fmt: skip
    ep.add_argument(
        "--max-observation-chars", type=bounded(int, 200, 10_000_000), default=20_000,
        help="longest observation returned (20000)",
    )  # fmt: skip
    ep.add_argument(
        "--allow-task-rows",
        action="store_true",
        help="let clients send task rows of their own (default: only this server's tasks, "
        "by instance_id or by an identical row). A row names a repository, looked up only "
        "in the repo cache, and a commit id; each new one builds a checkout on this disk",
    )
    from sweworld.serve.world.policy import DEFAULT_CLIENT_KEYS

    ep.add_argument(
        "--client-config-keys",
        default=",".join(sorted(DEFAULT_CLIENT_KEYS)),
        help="comma-separated EpisodeConfig keys clients may change per episode; limits "
        "only downwards, reward only to fewer sources, mode only to blind ('' for none; "
        f"default: {','.join(sorted(DEFAULT_CLIENT_KEYS))})",
    )
    lim = parser.add_argument_group("limits")
    lim.add_argument("--max-episodes-per-token", type=int, default=64, help="live episodes (64)")
    lim.add_argument(
        "--max-live-episodes", type=bounded(int, 1, 100_000), default=None,
        help="live episodes of all tokens together, forks included; past it a create gets "
        "503 'capacity' (default: 256, or fewer when the descriptors the connections leave "
        "hold fewer sessions, about 11 each)",
    )  # fmt: skip
    lim.add_argument(
        "--disk-mb", type=bounded(int, 1, 1 << 20), default=None,
        help="each episode's disk quota in MiB: /testbed's changes, /tmp and snapshots "
        f"together, kernel-enforced (default: $SWEWORLD_DISK_MB or {SERVICE_DISK_MB}; the "
        f"scratch mounts: $SWEWORLD_SCRATCH_MB or {SERVICE_SCRATCH_MB})",
    )  # fmt: skip
    lim.add_argument(
        "--disk-budget-mb", type=bounded(int, 64, 1 << 30), default=None,
        help="MiB all live sessions' disks may hold together. Each session's disk is a RAM "
        "tmpfs (its quota, --disk-mb, plus 64 MiB of control files and two scratch mounts of "
        f"$SWEWORLD_SCRATCH_MB, {SERVICE_SCRATCH_MB} MiB, each), "
        "so sessions x quota must fit in memory; a create or fork that would not fit gets "
        "503 'unavailable'. Must not exceed the memory available at start (default: half "
        "of it)",
    )  # fmt: skip
    lim.add_argument("--max-steps-per-minute", type=int, default=6000, help="per token (6000)")
    lim.add_argument("--max-creates-per-minute", type=int, default=600, help="per token (600)")
    for option, default, what in (
        ("--max-ended-per-token", 64, "ended episodes kept per token (LRU closed past it)"),
        ("--max-configs-per-token", 4, "distinct executor/model/reward configs per token"),
        ("--max-forks-per-token", 16, "live forked episodes per token"),
        ("--max-snapshots-per-episode", 16, "snapshots one episode holds"),
        ("--max-snapshots-per-token", 128, "snapshots all episodes of a token hold"),
    ):
        lim.add_argument(
            option, type=bounded(int, 1, 1_000_000), default=default, help=f"{what} ({default})"
        )
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
    ops.add_argument(
        "--log-level", default="INFO", type=_log_level,
        help="DEBUG, INFO, WARNING, ERROR (INFO)",
    )  # fmt: skip
    ops.add_argument(
        "--force-exit-timeout", type=bounded(float, 0.1, 600), default=5.0,
        help="after a second SIGTERM / SIGINT: how long closing the sessions (best effort) "
        "may take before the process exits (5 s)",
    )  # fmt: skip
    ops.add_argument("--log-format", choices=("json", "text"), default="json", help="(json)")


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~sweworld.serve.world.config.ServiceConfig` the options describe."""
    from sweworld.env import EpisodeConfig
    from sweworld.serve.world.auth import read_tokens_file
    from sweworld.serve.world.config import ServiceConfig
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
        max_wall_s=args.max_wall,
        max_observation_chars=args.max_observation_chars,
    )
    return ServiceConfig(
        tokens=tuple(tokens),
        no_auth=args.no_auth,
        episode=episode,
        tasks=args.tasks or str(toy_tasks_path()),
        allow_config_executor=args.allow_config_executor,
        allow_task_rows=args.allow_task_rows,
        client_config_keys=args.client_config_keys,
        max_episodes_per_token=args.max_episodes_per_token,
        max_live_episodes=getattr(args, "max_live_episodes", None) or 256,
        disk_budget_mb=getattr(args, "disk_budget_mb", None),
        max_ended_per_token=args.max_ended_per_token,
        max_configs_per_token=args.max_configs_per_token,
        max_forks_per_token=args.max_forks_per_token,
        max_snapshots_per_episode=args.max_snapshots_per_episode,
        max_snapshots_per_token=args.max_snapshots_per_token,
        max_steps_per_minute=args.max_steps_per_minute,
        max_creates_per_minute=args.max_creates_per_minute,
        idle_timeout_s=args.idle_timeout,
        max_body_bytes=args.max_body_bytes,
        request_deadline_s=args.request_deadline,
        workers=args.workers,
        drain_timeout_s=args.drain_timeout,
        runtime_root=args.runtime_dir,
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket made with ``proto=IPPROTO_TCP``: asyncio turns Nagle off
    (``TCP_NODELAY``) only on accepted sockets whose proto says TCP, and
    ``socket.create_server`` leaves it 0, so every response (headers and body written
    apart) waited ~40 ms for the client's delayed ACK. Its receive buffer is
    :data:`RECEIVE_BUFFER` (inherited by accepted sockets)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted sockets inherit it: a client can push at most this much that nobody
        # reads (a body refused from its head), not the kernel's autotuned megabytes
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
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

        from sweworld.serve.world.app import JsonErrors, create_app
        from sweworld.serve.world.connections import fd_limit
        from sweworld.serve.world.handler import WorldHandler
        from sweworld.serve.world.logs import configure_logging
    except ImportError as exc:
        print(
            f"sweworld serve world needs the serve extra (pip install 'sweworld[serve]'): {exc}",
            file=sys.stderr,
        )
        return 2
    from sweworld.serve.world.config import check_disk_budget, sessions_that_fit
    from sweworld.serve.world.connections import (
        ACCEPT_BURST,
        ConnectionLimits,
        ConnectionTracker,
        protocol_class,
    )

    configure_logging(args.log_level, json=args.log_format == "json")
    try:  # every option checked before anything listens: one line and status 2 otherwise
        check_numbers(args)
        # read by every session this process opens: the service's own defaults are smaller
        # than the library's, since every live session's disk is RAM held against the budget
        disk_mb = getattr(args, "disk_mb", None) or os.environ.get("SWEWORLD_DISK_MB")
        os.environ["SWEWORLD_DISK_MB"] = str(disk_mb or SERVICE_DISK_MB)
        os.environ.setdefault("SWEWORLD_SCRATCH_MB", str(SERVICE_SCRATCH_MB))
        config = config_from_args(args)
        check_disk_budget(config.disk_budget_mb)
        check_components(config.episode)
        limits = ConnectionLimits(
            header_timeout_s=getattr(args, "header_timeout", 10.0),
            body_timeout_s=getattr(args, "body_timeout", 30.0),
            keepalive_timeout_s=getattr(args, "keepalive_timeout", 75.0),
            max_connections=getattr(args, "max_connections", None),
        )
    except (ValueError, TypeError, OSError) as exc:
        print(f"sweworld serve world: {exc}", file=sys.stderr)
        return 2
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        print(f"sweworld serve world: cannot listen on {args.host}:{args.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)  # fmt: skip
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
        sock.close()
        print(f"sweworld serve world: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    app = create_app(config, world)
    tracker = ConnectionTracker(limits, world.metrics)
    fit = sessions_that_fit(tracker.max_connections)
    if getattr(args, "max_live_episodes", None) is None:
        config.max_live_episodes = min(config.max_live_episodes, fit)
    elif config.max_live_episodes > fit:
        log.warning("--max-live-episodes %d: the descriptor limit holds about %d sessions; "
                    "creates past it get 503 (raise `ulimit -n`)", config.max_live_episodes,
                    fit)  # fmt: skip
    host, port = sock.getsockname()[:2]
    uv_config = uvicorn.Config(
        JsonErrors(app),
        http=protocol_class(tracker),
        backlog=ACCEPT_BURST,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=limits.keepalive_timeout_s,  # type: ignore[arg-type]
    )
    server = draining_server(uv_config, world, tracker, getattr(args, "force_exit_timeout", 5.0))
    log.info("connections: at most %d open (descriptor limit %d); header %.0f s, body %.0f s, "
             "keep-alive %.0f s", tracker.max_connections, fd_limit(), limits.header_timeout_s,
             limits.body_timeout_s, limits.keepalive_timeout_s)  # fmt: skip
    if config.disk_budget_mb is not None:
        from sweworld.sandbox.quota import session_memory_mb

        each = session_memory_mb()
        log.info("sessions' disks (RAM): budget %d MiB, %d MiB each (quota, control files, "
                 "scratch mounts): at most %d live sessions", config.disk_budget_mb, each,
                 config.disk_budget_mb // each)  # fmt: skip
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
