"""The world service's errors and response bodies: what a client is told.

:class:`WorldError` is every refused request (a status, a machine-readable code and a
sentence without host paths); :func:`client_error` maps an episode's exception to one.
:func:`json_safe` and :func:`text_safe` make every response serializable: a NaN becomes
null, a lone surrogate (an agent may echo ``"\\ud800"``) becomes U+FFFD, so that a step
that ran always returns its observation.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sweworld.env import Episode, EpisodeBusy, EpisodeError, EpisodeFinished
from sweworld.serve.world import schemas as s
from sweworld.serve.world.policy import public_text

__all__ = [
    "WorldError",
    "client_error",
    "current_patch",
    "json_safe",
    "quota_error",
    "step_response",
    "text_safe",
]


class WorldError(Exception):
    """A request the service answers with an error status and an :class:`ErrorBody`."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        episode_id: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        message = public_text(message)  # no host path, no lone surrogate reaches a client
        super().__init__(message)
        self.status = status
        self.body = s.ErrorBody(error=error, message=message, episode_id=episode_id)
        self.headers = headers or {}


def quota_error(what: str, retry_after: float) -> WorldError:
    wait = max(1, math.ceil(retry_after))
    headers = {"Retry-After": str(wait)}
    return WorldError(429, "quota", f"{what}; retry in {wait} s", headers=headers)


def client_error(exc: Exception, inner_id: str, episode_id: str | None) -> WorldError | None:
    """The status of an episode's exception (its message names the service's id, and no
    host path); None for an exception that is the server's fault (a 500)."""
    from sweworld.sandbox.repos import RepoError

    if isinstance(exc, RepoError):  # a row whose repository or commit cannot be checked out
        text = exc.public or "the task's repository could not be checked out"
        return WorldError(422, "invalid_task", f"task: {text}", episode_id or None)
    if isinstance(exc, RuntimeError) and not isinstance(exc, EpisodeError):
        return None
    text = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
    if inner_id:
        text = text.replace(f"episode {inner_id}", f"episode {episode_id}")
    episode_id = episode_id or None
    if isinstance(exc, EpisodeBusy):
        return WorldError(409, "busy", text, episode_id)
    if isinstance(exc, EpisodeFinished):
        return WorldError(409, "finished", text, episode_id)
    if isinstance(exc, EpisodeError):
        return WorldError(409, "not_running", text, episode_id)
    if isinstance(exc, KeyError):
        return WorldError(404, "unknown_snapshot", text, episode_id)
    return WorldError(422, "invalid", text, episode_id)


def current_patch(episode: Episode) -> str:
    if episode.session is not None:
        return episode.session.get_patch() or ""
    if episode.task is None:
        raise EpisodeError(f"episode {episode.id}: no episode has started")
    return episode.patch or ""


SURROGATE = re.compile("[\ud800-\udfff]")


def text_safe(text: Any) -> Any:
    """``text`` with lone surrogates (a JSON response cannot carry them: the client would
    get a 500 and lose the observation) replaced by U+FFFD."""
    return SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


def json_safe(value: Any) -> Any:
    """``value`` with everything JSON cannot hold turned into text (a NaN into None, a
    lone surrogate into U+FFFD)."""

    def clean(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return None
        if isinstance(item, str):
            return text_safe(item)
        if isinstance(item, dict):
            return {text_safe(str(k)): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        return item

    return clean(json.loads(json.dumps(value, default=str)))


def step_response(outcome: Any) -> s.StepResponse:
    reward = outcome.reward if math.isfinite(outcome.reward) else 0.0
    return s.StepResponse(
        observation=text_safe(outcome.observation),
        reward=reward,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        info=json_safe(outcome.info),
    )
