"""Best-of-N verification: score N candidate patches per task and pick one to submit.

Each candidate is scored by the :class:`~sweworld.reward.model.RewardModel`; candidates whose
normalised change is identical form an equivalence class (the semantic stage's signature);
a class's value is its members' mean score blended with its share of the votes (how many of
the N candidates made that change), and the best-scored member of the best class is chosen.
Ties go to the candidate that came first, so the choice is deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Weight of the vote share in a class's value (the rest is the mean score).
DEFAULT_VOTE_WEIGHT = 0.2


@dataclass
class Selection:
    """The verifier's choice for one task.

    Attributes:
        instance_id: the task.
        index: position of the chosen candidate in the input list (-1: no candidates).
        patch: the chosen patch ("" when there were no candidates).
        score: the chosen candidate's score.
        value: the chosen class's value (mean score blended with its vote share).
        scores: every candidate's score, in input order.
        classes: equivalence classes as lists of candidate indices, with their value.
        results: every candidate's full RewardResult as a dict (per-stage evidence).
        latency_s: time spent on the task.
    """

    instance_id: str
    index: int
    patch: str
    score: float
    value: float
    scores: list[float] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    latency_s: float = 0.0

    def to_dict(self, *, with_results: bool = False) -> dict[str, Any]:
        out = {
            "instance_id": self.instance_id,
            "index": self.index,
            "score": self.score,
            "value": self.value,
            "scores": self.scores,
            "classes": self.classes,
            "latency_s": self.latency_s,
        }
        if with_results:
            out["results"] = self.results
        return out


def select_candidate(
    scores: Sequence[float],
    classes: Sequence[Sequence[int]],
    *,
    vote_weight: float = DEFAULT_VOTE_WEIGHT,
) -> tuple[int, float, list[dict[str, Any]]]:
    """Pick a candidate from per-candidate ``scores`` and equivalence ``classes``.

    A class's value is ``(1 - vote_weight) * mean(score) + vote_weight * size / N``;
    candidates scored 0 (stopped by an exact stage) cast no vote. Returns the chosen index
    (-1 when there are no candidates), its class's value and every class with its value,
    best first.
    """
    n = len(scores)
    if n == 0:
        return -1, 0.0, []
    if not 0.0 <= vote_weight <= 1.0:
        raise ValueError(f"vote_weight must be in [0, 1], got {vote_weight}")
    seen = sorted({i for group in classes for i in group})
    if seen != list(range(n)):
        raise ValueError("classes must partition the candidate indices 0..N-1")
    voters = sum(1 for s in scores if s > 0) or 1
    table = []
    for group in classes:
        members = sorted(group)
        mean = sum(scores[i] for i in members) / len(members)
        votes = sum(1 for i in members if scores[i] > 0)
        value = (1 - vote_weight) * mean + vote_weight * votes / voters
        best = max(members, key=lambda i: (scores[i], -i))
        table.append(
            {"members": members, "mean_score": mean, "votes": votes, "value": value, "best": best}
        )
    table.sort(key=lambda c: (-c["value"], c["members"][0]))
    chosen = table[0]
    return int(chosen["best"]), float(chosen["value"]), table


def classes_by_signature(results: Sequence[Any]) -> list[list[int]]:
    """Equivalence classes of scored candidates: indices grouped by ``info["signature"]``
    (a candidate whose scoring failed before it had one stands alone), in order of first
    member."""
    groups: dict[str, list[int]] = {}
    for index, result in enumerate(results):
        groups.setdefault(result.info.get("signature") or f"#{index}", []).append(index)
    return list(groups.values())


class Verifier:
    """Score candidates with a reward model and select one per task.

    ``model``: a :class:`~sweworld.reward.model.RewardModel` (made with default settings when
    None). ``vote_weight``: see :func:`select_candidate`.
    """

    def __init__(self, model: Any = None, *, vote_weight: float = DEFAULT_VOTE_WEIGHT):
        if model is None:
            from sweworld.reward.model import RewardModel

            model = RewardModel()
        self.model = model
        self.vote_weight = vote_weight

    def verify_task(self, task: Any, patches: Sequence[str]) -> Selection:
        """Score ``patches`` (the N candidates of ``task``) and choose one."""
        started = time.perf_counter()
        results = self.model.score_many(task, list(patches))
        classes = classes_by_signature(results)
        scores = [r.score for r in results]
        index, value, table = select_candidate(scores, classes, vote_weight=self.vote_weight)
        return Selection(
            instance_id=str(task.instance_id),
            index=index,
            patch=patches[index] if index >= 0 else "",
            score=scores[index] if index >= 0 else 0.0,
            value=value,
            scores=scores,
            classes=table,
            results=[r.to_dict() for r in results],
            latency_s=round(time.perf_counter() - started, 4),
        )

    def verify(
        self, tasks: Mapping[str, Any], candidates: Mapping[str, Sequence[Any]]
    ) -> dict[str, Selection]:
        """A selection for every task id in ``candidates`` (ids must be in ``tasks``).

        Candidates are patch strings or objects with a ``patch`` attribute."""
        missing = [i for i in candidates if i not in tasks]
        if missing:
            raise KeyError(
                f"{len(missing)} candidate id(s) not among the tasks, e.g. {missing[:3]}"
            )
        out: dict[str, Selection] = {}
        for instance_id, cands in candidates.items():
            patches = [c if isinstance(c, str) else (c.patch or "") for c in cands]
            out[instance_id] = self.verify_task(tasks[instance_id], patches)
        return out
