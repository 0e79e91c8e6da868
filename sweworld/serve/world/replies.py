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
    "capacity_error",
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


def capacity_error(held: int, retry_after: float) -> WorldError:
    """503: the service holds as many live episodes (of all tokens) as it allows."""
    wait = max(1, math.ceil(retry_after))
    return WorldError(503, "capacity", f"the service holds {held} live episodes, the most it "
                      f"allows (all tokens together); retry in {wait} s",
                      headers={"Retry-After": str(wait)})  # fmt: skip


def client_error(exc: Exception, inner_id: str, episode_id: str | None) -> WorldError | None:
    """The status of an episode's exception (its message names the service's id, and no
    host path); None for an exception that is the server's fault (a 500)."""
    from sweworld.sandbox.launch import SandboxUnavailable
    from sweworld.sandbox.overlay import QuotaExceeded
    from sweworld.sandbox.quota import PatchTooLarge, SnapshotLimitReached
    from sweworld.sandbox.repos import RepoError

    if isinstance(exc, RepoError):  # a row whose repository or commit cannot be checked out
        text = exc.public or "the task's repository could not be checked out"
        return WorldError(422, "invalid_task", f"task: {text}", episode_id or None)
    if isinstance(exc, PatchTooLarge):  # the agent's changes: its own patch, too long
        return WorldError(422, "patch_too_large", str(exc), episode_id or None)
    if isinstance(exc, (QuotaExceeded, SnapshotLimitReached)):  # too many saved layers
        return WorldError(429, "quota", str(exc), episode_id or None)
    if isinstance(exc, SandboxUnavailable) or _out_of_resources(exc):
        # the host is full (the sessions' disk budget, descriptors, processes): not the
        # client's fault, and it passes as sessions close
        text = str(exc) if isinstance(exc, SandboxUnavailable) else "the host is out of resources"
        return WorldError(503, "unavailable", f"{text}", episode_id or None,
                          headers={"Retry-After": "5"})  # fmt: skip
    if isinstance(exc, (RuntimeError, OSError)) and not isinstance(exc, EpisodeError):
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


def _out_of_resources(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is the host running out of descriptors,
    processes or memory."""
    import errno

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (
            errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM
        ):  # fmt: skip
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


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
