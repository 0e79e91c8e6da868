"""The world service's configuration (:class:`ServiceConfig`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sweworld.env import EpisodeConfig
from sweworld.serve.world.policy import ALL_CLIENT_KEYS, CODE_KEYS, DEFAULT_CLIENT_KEYS

__all__ = ["SESSION_FDS", "ServiceConfig", "check_disk_budget", "sessions_that_fit"]


@dataclass
class ServiceConfig:
    """How the world service runs.

    Attributes:
        tokens: accepted bearer tokens (``--token``, repeatable, or ``--tokens-file``).
        no_auth: accept requests without a token (every episode then has one owner).
        episode: the episode defaults (executor, model, reward, mode, limits).
        tasks: a tasks file or folder whose tasks clients may open by ``instance_id``.
        allow_task_rows: let clients send task rows of their own (off by default: a row
            must then be one of ``tasks``, by its ``instance_id`` and with the same
            repository, commit and patches). A client's row names a repository (resolved
            only in the repo cache) and a commit id, never a folder; each new (repository,
            commit, setup patch) builds a checkout on this server's disk, so the operator
            opts in.
        allow_config_executor: let clients override ``executor``, ``model`` and
            ``swr_model`` (they name code and models on this server; off by default).
            Even then an executor is a registered short name, a model ``embedded``.
        client_config_keys: the EpisodeConfig keys clients may change (see
            :mod:`~sweworld.serve.world.policy`: limits only downwards, ``reward`` only to
            fewer sources, ``mode`` only to blind).
        max_episodes_per_token: live episodes (holding a session) one token may hold.
        max_live_episodes: live episodes all tokens together may hold (503 ``capacity``
            past it, forks included).
        disk_budget_mb: the most all live sessions' disks may hold together, in MiB (a
            session's disk is a RAM tmpfs: quota, ``$SWEWORLD_DISK_MB`` or 1 GiB, plus
            64 MiB of control files and its sandbox's two ``$SWEWORLD_SCRATCH_MB`` (64 MiB)
            scratch mounts); a create or fork that would not fit gets 503
            ``unavailable``. None: half of the memory available when the service starts.
        max_ended_per_token: ended episodes (no session; their trajectory and patch are
            kept for the client) one token may hold; past it, its least recently used
            ended episode is closed.
        max_configs_per_token: distinct non-default component configs (executor, model,
            mode, reward, ...) one token's episodes may use at once.
        max_forks_per_token: live forked episodes one token may hold (they count as
            episodes too).
        max_snapshots_per_episode: snapshots one episode may hold (until reset or end).
        max_snapshots_per_token: snapshots all episodes of one token may hold.
        max_steps_per_minute: steps one token may take per minute.
        max_creates_per_minute: episodes one token may create, fork or reset per minute.
        idle_timeout_s: an episode without a call for this long is closed.
        reap_interval_s: how often idle episodes are looked for.
        max_body_bytes: largest request body accepted (413 past it).
        request_deadline_s: longest wait for one blocking call before 504 (None: twice the
            episode's step deadline plus a minute for a step, the reward's deadline to end).
        workers: threads that run the episodes' blocking calls.
        drain_timeout_s: how long shutdown waits for calls in flight.
        runtime_root: where the sessions' state goes (the manager's default otherwise).
    """

    tokens: tuple[str, ...] = ()
    no_auth: bool = False
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    tasks: str | None = None
    allow_task_rows: bool = False
    allow_config_executor: bool = False
    client_config_keys: frozenset[str] = DEFAULT_CLIENT_KEYS
    max_episodes_per_token: int = 64
    max_live_episodes: int = 256
    disk_budget_mb: int | None = None
    max_ended_per_token: int = 64
    max_configs_per_token: int = 4
    max_forks_per_token: int = 16
    max_snapshots_per_episode: int = 16
    max_snapshots_per_token: int = 128
    max_steps_per_minute: int = 6000
    max_creates_per_minute: int = 600
    idle_timeout_s: float = 900.0
    reap_interval_s: float = 5.0
    max_body_bytes: int = 4 * 1024 * 1024
    request_deadline_s: float | None = None
    workers: int = 256
    drain_timeout_s: float = 60.0
    runtime_root: str | None = None

    def __post_init__(self) -> None:
        self.tokens = tuple(self.tokens)
        if not self.tokens and not self.no_auth:
            raise ValueError(
                "the world service needs a token (--token / --tokens-file) or --no-auth"
            )
        if self.disk_budget_mb is None:
            from sweworld.sandbox.quota import default_disk_budget_mb

            self.disk_budget_mb = default_disk_budget_mb()
        if self.disk_budget_mb is not None and (
            not isinstance(self.disk_budget_mb, int) or self.disk_budget_mb < 1
        ):
            raise ValueError(
                f"disk_budget_mb must be a positive integer, got {self.disk_budget_mb!r}"
            )
        for name in ("max_episodes_per_token", "max_live_episodes", "max_steps_per_minute",
                     "max_creates_per_minute", "max_body_bytes", "workers", "max_ended_per_token",
                     "max_configs_per_token", "max_forks_per_token", "max_snapshots_per_episode",
                     "max_snapshots_per_token"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("idle_timeout_s", "reap_interval_s", "drain_timeout_s", "request_deadline_s"):
            value = getattr(self, name)
            if value is None and name == "request_deadline_s":
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(self.client_config_keys, str):
            self.client_config_keys = frozenset(
                k.strip() for k in self.client_config_keys.split(",") if k.strip()
            )
        self.client_config_keys = frozenset(self.client_config_keys)
        unknown = sorted(self.client_config_keys - ALL_CLIENT_KEYS)
        if unknown:
            raise ValueError(
                f"client_config_keys: unknown option(s) {unknown}; known: {sorted(ALL_CLIENT_KEYS)}"
            )

    @property
    def disk_budget_bytes(self) -> int | None:
        return None if self.disk_budget_mb is None else self.disk_budget_mb << 20

    @property
    def allowed_client_keys(self) -> frozenset[str]:
        """What clients may change: :attr:`client_config_keys`, plus the executor and
        models with :attr:`allow_config_executor`."""
        if self.allow_config_executor:
            return self.client_config_keys | CODE_KEYS
        return self.client_config_keys


#: Descriptors one live session holds (its namespace, disks, views, a warm sandbox's pipes).
SESSION_FDS = 11


def sessions_that_fit(max_connections: int) -> int:
    """Live sessions the descriptor limit holds once the connections and the reserve have
    theirs (at least 1)."""
    from sweworld.serve.world.connections import ACCEPT_BURST, FD_RESERVE, fd_limit

    left = fd_limit() - FD_RESERVE - 2 * ACCEPT_BURST - max_connections
    return max(1, left // SESSION_FDS)


def check_disk_budget(budget_mb: int | None) -> None:
    """The sessions' disk budget fits in the memory available now (their disks are RAM
    tmpfs: a budget past it lets clients make the kernel kill the service, or more) and
    holds at least one session; ``ValueError`` with one line otherwise."""
    from sweworld.sandbox.quota import MIB, memory_available_bytes, session_memory_mb

    available = memory_available_bytes()
    if budget_mb is None:
        if available is None:
            return
        raise ValueError("cannot size the sessions' disk budget: give --disk-budget-mb")
    if available is not None and budget_mb * MIB > available:
        raise ValueError(
            f"--disk-budget-mb {budget_mb} is more than the {available // MIB} MiB of memory "
            "available (sessions' disks are RAM): the host could run out of memory"
        )
    one = session_memory_mb()
    if budget_mb < one:
        raise ValueError(
            f"--disk-budget-mb {budget_mb} holds no session: each needs {one} MiB "
            "(its quota, 64 MiB of control files and two scratch mounts)"
        )
