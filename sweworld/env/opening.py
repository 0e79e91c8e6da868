"""Opening an episode: a local :class:`~sweworld.env.episode.Episode`, or a remote one when
the config names a ``sweworld serve world`` service.

The environment layer never imports the service built on top of it: the remote episode
class is found by its short name ``remote`` among the worlds of the registry
(:mod:`sweworld.sandbox.registry`: the ``sweworld.worlds`` entry point that ``pyproject.toml``
declares, or the registration :mod:`sweworld.serve.remote` makes when imported).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sweworld.env.config import EpisodeConfig
from sweworld.env.episode import Episode

__all__ = ["REMOTE_WORLD", "open_episode", "remote_episode_class"]

#: The registry's world name of the remote episode class (``RemoteEpisode``).
REMOTE_WORLD = "remote"

#: Arguments of ``Episode`` that are objects of this process; a remote episode has the
#: service's (``manager`` is ignored for one: it only says where local sessions go).
_LOCAL_BACKENDS = ("executor", "rewarder", "open_session", "token_counter")


def open_episode(task: Any = None, config: EpisodeConfig | None = None, **shared: Any) -> Any:
    """The episode a config asks for: an :class:`~sweworld.env.Episode` in this process, or,
    when ``config.world`` names a ``sweworld serve world`` service, a remote episode
    (``sweworld.serve.remote.RemoteEpisode``) that runs there (same interface).

    ``shared`` takes what ``Episode`` takes (``manager``, ``executor``, ``rewarder``,
    ``open_session``, ``token_counter``, a :class:`~sweworld.world.World` as ``world=``, and
    EpisodeConfig overrides such as ``world=URL``). A remote episode cannot use local
    backends: giving one is a ``ValueError``; ``manager`` is ignored. The adapters and
    :class:`~sweworld.env.EnvPool` construct episodes here.
    """
    config = config or EpisodeConfig()
    names = {f.name for f in fields(EpisodeConfig)} - {"executor"}  # executor=: an instance
    if "world" in shared and not isinstance(shared["world"], (str, type(None))):
        names.discard("world")  # a World object, not the service's URL
    overrides = {name: shared.pop(name) for name in list(shared) if name in names}
    if isinstance(shared.get("executor"), str):  # a spec ("local", ...), not an instance
        overrides["executor"] = shared.pop("executor")
    if overrides:
        config = config.replace(**overrides)
    if config.world is None:
        return Episode(task, config, **shared)
    local = sorted(name for name in (*_LOCAL_BACKENDS, "world") if shared.get(name) is not None)
    unknown = sorted(set(shared) - set(_LOCAL_BACKENDS) - {"manager", "world"})
    if unknown:
        raise TypeError(f"open_episode() got unexpected argument(s) {unknown}")
    if local:
        raise ValueError(
            f"{', '.join(local)} run(s) in this process, but world={config.world!r} runs the "
            "episode on that service (with its own); leave them out or drop world="
        )
    return remote_episode_class().from_config(task, config)


def remote_episode_class() -> Any:
    """The class of episodes run on a world service (the registry's world ``remote``).
    ``ImportError`` when it is not installed (the ``serve`` extra)."""
    from sweworld.sandbox.registry import load_object, names

    target = names("world").get(REMOTE_WORLD)
    if target is None:
        raise ImportError(
            "a remote world needs the serve extra (pip install 'sweworld[serve]') and "
            "sweworld's entry points (pip install -e .): no world named 'remote' is registered"
        )
    try:
        return load_object(target)
    except ValueError as exc:  # httpx (extra "serve") is missing
        raise ImportError(
            f"a remote world needs the serve extra (pip install 'sweworld[serve]'): {exc}"
        ) from exc
