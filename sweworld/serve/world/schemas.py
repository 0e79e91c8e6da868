"""The world service's wire format: pydantic request and response models, and the routes.

Routes (all under bearer-token authentication except ``/health``; JSON bodies):

=======  ==================================  =====================  =======================
method   path                                body                   response
=======  ==================================  =====================  =======================
GET      /health                             -                      :class:`Health`
GET      /metrics                            -                      Prometheus text
POST     /v1/episodes                        :class:`CreateEpisode` :class:`EpisodeStarted`
POST     /v1/episodes/{id}/reset             :class:`ResetEpisode`  :class:`EpisodeStarted`
POST     /v1/episodes/{id}/step              :class:`StepRequest`   :class:`StepResponse`
POST     /v1/episodes/{id}/end               :class:`EndRequest`    :class:`StepResponse`
POST     /v1/episodes/{id}/snapshot          -                      :class:`SnapshotTaken`
POST     /v1/episodes/{id}/restore           :class:`RestoreRequest` :class:`EpisodeState`
POST     /v1/episodes/{id}/fork              -                      :class:`EpisodeStarted`
GET      /v1/episodes/{id}/patch             -                      :class:`PatchResponse`
POST     /v1/episodes/{id}/reward            :class:`RewardRequest` :class:`RewardResponse`
GET      /v1/episodes/{id}                   -                      :class:`EpisodeState`
GET      /v1/episodes/{id}/trajectory        -                      :class:`TrajectoryResponse`
DELETE   /v1/episodes/{id}                   -                      :class:`Closed`
=======  ==================================  =====================  =======================

Errors are :class:`ErrorBody` with these statuses: 400 bad request, 401 missing or wrong
token, 404 unknown episode, task or snapshot (an episode of another token answers 404 too,
so that no token learns which ids exist), 409 the episode is
busy (another call of it is running) or has ended, 413 body too large, 422 invalid fields,
429 a quota is exhausted, 503 the service is shutting down or a backend (the model server)
is unavailable, 504 a step passed its deadline. A 500 never carries a traceback.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "API_VERSION",
    "Closed",
    "CreateEpisode",
    "EndRequest",
    "EpisodeStarted",
    "EpisodeState",
    "ErrorBody",
    "Health",
    "PatchResponse",
    "ResetEpisode",
    "RestoreRequest",
    "RewardRequest",
    "RewardResponse",
    "SnapshotTaken",
    "StepRequest",
    "StepResponse",
    "TrajectoryResponse",
]

API_VERSION = "sweworld-world/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: Longest per-request command timeout a client may send (a week; the episode bounds it
#: again by its own step deadline).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Seeds are integers in [0, 2**63).
MAX_SEED = 2**63 - 1


class _Request(_Strict):
    """A client's request: unknown fields, ``Infinity`` and ``NaN`` refused everywhere
    (Python's JSON parser accepts both literals; nested dicts are walked too)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data: Any) -> Any:
        from sweworld.serve.world.policy import finite_everywhere

        where = finite_everywhere(data)
        if where is not None:
            raise ValueError(f"{where}: Infinity and NaN are not accepted")
        return data


class CreateEpisode(_Request):
    """Open an episode: a task row, or the id of a task the server was started with."""

    task: dict[str, Any] | None = Field(None, description="a task row (SWE-bench shaped)")
    instance_id: str | None = Field(None, description="a task of the server's tasks file")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="EpisodeConfig overrides: only the keys the server allows, and limits "
        "only lowered (see sweworld.serve.world.policy)",
    )
    seed: int | None = Field(None, ge=0, le=MAX_SEED)


class ResetEpisode(_Request):
    """Start the episode again, on its task or on another."""

    task: dict[str, Any] | None = None
    instance_id: str | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED)


class EpisodeStarted(_Strict):
    """An episode's id and first observation."""

    episode_id: str
    observation: str
    info: dict[str, Any] = Field(default_factory=dict)


class StepRequest(_Request):
    """One agent action: text or a tool-call object."""

    action: str | dict[str, Any]
    timeout: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, description="bound of a bash command (s)"
    )


class StepResponse(_Strict):
    """Gymnasium's 5-tuple by name."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = Field(default_factory=dict)


class EndRequest(_Request):
    """End a running episode without an action (graded like any end)."""

    reason: Literal["max_steps", "timeout", "max_tokens", "error", "submitted"] = "max_steps"
    error: str | None = None


class SnapshotTaken(_Strict):
    snapshot_id: str


class RestoreRequest(_Request):
    snapshot_id: str


class EpisodeState(_Strict):
    """Where an episode stands."""

    episode_id: str
    instance_id: str | None
    steps: int
    done: bool
    reason: str | None = None
    idle_s: float = 0.0


class PatchResponse(_Strict):
    patch: str


class RewardRequest(_Request):
    """Score a patch (the episode's current one when absent) without ending the episode."""

    patch: str | None = None
    submitted: bool = True


class RewardResponse(_Strict):
    """A :class:`~sweworld.env.rewards.FinalReward` as a dict."""

    value: float
    resolved: bool | None
    source: str
    status: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    latency_s: float = 0.0


class TrajectoryResponse(_Strict):
    """The episode's trajectory in the data schema (``Trajectory`` as a dict)."""

    trajectory: dict[str, Any]


class Closed(_Strict):
    episode_id: str
    closed: bool = True


class Health(_Strict):
    status: Literal["ok", "draining"]
    version: str = API_VERSION
    episodes: int = 0
    uptime_s: float = 0.0


class ErrorBody(_Strict):
    """Every error response: a machine-readable code and a sentence for people."""

    error: str
    message: str
    episode_id: str | None = None
