"""The Python client of the world service (``sweworld serve world``).

:class:`WorldClient` talks to one service (bearer token, timeouts, retries of connections
that could not be made, optional waiting out a quota);
:class:`~sweworld.serve.remote.RemoteEpisode` (in :mod:`sweworld.serve.remote`, re-exported
here) is an episode that runs there, with the public interface of
:class:`sweworld.env.Episode` that trainers and the adapters use, sync and async::

    client = WorldClient("http://host:8800", token)
    with client.create(task=row, config={"max_steps": 30}) as episode:
        obs, info = episode.observation, episode.reset_info     # started by create()
        obs, reward, terminated, truncated, info = episode.step(action)

The adapters switch to a remote world by configuration: ``EpisodeConfig(world=URL)`` (token
from ``world_token`` or ``$SWEWORLD_WORLD_TOKEN``) makes
:func:`sweworld.env.opening.open_episode` return a ``RemoteEpisode`` where it would
construct an :class:`~sweworld.env.Episode` (see :mod:`sweworld.serve.remote` for how the
two differ).

Errors: 401 / 403 :class:`WorldAuthError` (a ``PermissionError``); 404
:class:`WorldNotFound` (a ``KeyError``); 409 ``EpisodeBusy`` / ``EpisodeFinished`` /
``EpisodeError`` (sweworld.env's own classes, so code behaves the same remote or local);
400 :class:`WorldBadRequest` (an ``EpisodeError`` and a ``ValueError``); 413 / 422
:class:`WorldInvalid` (a ``ValueError``); 429 :class:`WorldQuotaExceeded` (with
``retry_after``); 503 and a service that cannot be reached :class:`WorldUnavailable` (a
``ConnectionError``); 504 and a read past the client's timeout :class:`WorldTimeout` (a
``TimeoutError``). Every one is also a :class:`WorldError` with ``status``, ``code`` and
``episode_id``.

The transport (errors, retries, timeouts) is :mod:`sweworld.serve.transport`'s
:class:`~sweworld.serve.transport.WorldConnection`; this module adds the episode calls and
re-exports the errors. Needs ``httpx`` (extra ``serve``); nothing in ``sweworld`` imports
this module eagerly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.serve.remote import RemoteEpisode, config_overrides
from sweworld.serve.transport import (
    CONNECT_TIMEOUT_S,
    TOKEN_ENV,
    ApiCall,
    WorldAuthError,
    WorldBadRequest,
    WorldConnection,
    WorldError,
    WorldInvalid,
    WorldNotFound,
    WorldQuotaExceeded,
    WorldTimeout,
    WorldUnavailable,
)
from sweworld.serve.world import schemas

__all__ = [
    "CONNECT_TIMEOUT_S",
    "TOKEN_ENV",
    "ApiCall",
    "RemoteEpisode",
    "WorldAuthError",
    "WorldBadRequest",
    "WorldClient",
    "WorldConnection",
    "WorldError",
    "WorldInvalid",
    "WorldNotFound",
    "WorldQuotaExceeded",
    "WorldTimeout",
    "WorldUnavailable",
    "config_overrides",
]


class WorldClient(WorldConnection):
    """A connection to one world service that opens episodes there (thread-safe; async
    calls share one client per event loop). The arguments are
    :class:`~sweworld.serve.transport.WorldConnection`'s.
    """

    def create(
        self,
        task: Any = None,
        instance_id: str | None = None,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> RemoteEpisode:
        """Open and start an episode on the service: a task row (or Task), or the id of a
        task the service was started with. Its first observation is ``.observation`` and
        ``.reset_info``; ``reset()`` starts it again."""
        episode = RemoteEpisode(self, task, config, instance_id=instance_id)
        episode.reset(seed=seed)
        return episode

    async def acreate(
        self,
        task: Any = None,
        instance_id: str | None = None,
        config: EpisodeConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> RemoteEpisode:
        """:meth:`create` for an event loop."""
        episode = RemoteEpisode(self, task, config, instance_id=instance_id)
        await episode.areset(seed=seed)
        return episode

    def attach(self, episode_id: str, config: EpisodeConfig | None = None) -> RemoteEpisode:
        """A handle on an episode that exists on the service (opened by this token, e.g.
        before a restart): ``KeyError`` (:class:`WorldNotFound`) for an unknown one."""
        state = self._send(
            ApiCall("GET", f"/v1/episodes/{episode_id}", None, schemas.EpisodeState.model_validate)
        )
        episode = RemoteEpisode(self, None, config, instance_id=state.instance_id)
        episode._remote_id = state.episode_id
        episode.steps, episode.reason = state.steps, state.reason
        return episode
