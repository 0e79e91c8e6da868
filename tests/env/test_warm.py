"""WarmSessions: budget, freshness, one hand-out per session, close, use by episodes and pools."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sweworld.data.policies import ScriptedPolicy
from sweworld.env import Episode
from sweworld.env.pool import EnvPool
from sweworld.env.warm import MIN_FOOTPRINT_BYTES, WarmSessions
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_manager(tmp_path):
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=tmp_path / "runtime")
    yield manager
    manager.close_all()


def _state_dirs(manager) -> list[str]:
    return sorted(p.name for p in manager.sessions_dir.iterdir())


def test_fills_per_task_measures_a_footprint_and_close_destroys_all(toy_task, own_manager):
    warm = WarmSessions(own_manager, tasks=[toy_task], per_task=3, memory_budget_mb=64)
    assert warm.fill(timeout=60) == 3
    stats = warm.stats()
    footprint = stats["footprint"]
    assert footprint["disk_bytes"] > 0 and footprint["total_bytes"] >= MIN_FOOTPRINT_BYTES
    assert stats["capacity"] == 3 and stats["failures"] == 0
    assert len(_state_dirs(own_manager)) == 3
    warm.close()
    warm.close()
    assert own_manager.sessions == [] and _state_dirs(own_manager) == []
    with pytest.raises(RuntimeError, match="closed"):
        warm.acquire(toy_task)


def test_the_memory_budget_caps_the_warm_sessions(toy_task, own_manager):
    budget_mb = 2 * MIN_FOOTPRINT_BYTES / (1024 * 1024)  # room for two at the smallest size
    with WarmSessions(
        own_manager, tasks=[toy_task], per_task=8, memory_budget_mb=budget_mb
    ) as warm:
        warm.fill(timeout=60)
        capacity = warm.capacity
        assert 1 <= capacity <= 2
        assert capacity == min(8, warm.memory_budget_bytes // warm.footprint.total_bytes)
        assert warm.warm_count == capacity == len(own_manager.sessions)


def test_sessions_are_handed_out_once_and_fresh(toy_task, own_manager):
    with WarmSessions(own_manager, tasks=[toy_task], per_task=4, memory_budget_mb=64) as warm:
        warm.fill(timeout=60)
        for session in own_manager.sessions:  # someone steps a session while it waits
            session.step("echo used > /testbed/used.txt")
            break
        taken: list = []
        lock = threading.Lock()

        def take() -> None:
            session = warm.acquire(toy_task)
            with lock:
                taken.append(session)

        threads = [threading.Thread(target=take) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(taken) == 12 and len({s.id for s in taken}) == 12
        assert all(s.steps == 0 and not s.closed for s in taken)
        assert all(s.get_patch() == "" for s in taken)
        stats = warm.stats()
        assert stats["hits"] + stats["misses"] == 12 and stats["hits"] >= 1
        for session in taken:
            session.destroy()
    assert own_manager.sessions == [] and _state_dirs(own_manager) == []


def test_an_episode_takes_warm_sessions_faster_than_cold_ones(toy_task, own_manager):
    with WarmSessions(own_manager, tasks=[toy_task], per_task=2, memory_budget_mb=64) as warm:
        warm.fill(timeout=60)
        with Episode(
            toy_task, executor="none", reward="none", manager=own_manager, open_session=warm.acquire
        ) as episode:
            episode.reset()
            outcome = episode.step("echo warm > /testbed/w.txt && cat /testbed/w.txt")
            assert "warm" in outcome.observation
        other = {
            "instance_id": "sweworld__stockroom-other",
            **{k: v for k, v in toy_task.to_row().items() if k != "instance_id"},
        }
        cold = warm.acquire(other)  # a task never seen: opened now, kept warm from now on
        cold.destroy()
        stats = warm.stats()
        assert stats["hits"] == 1 and stats["misses"] == 1
        assert stats["acquire_warm_s"] < stats["acquire_cold_s"]
        warm.fill(timeout=60)
        assert warm.acquire(other).steps == 0 and warm.stats()["hits"] == 2


def test_a_pool_binds_an_unbound_warm_pool_and_rollouts_take_from_it(toy_task, own_manager):
    demo = [
        json.loads(line)
        for line in (PROJECT / "data/toy/demo_actions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    warm = WarmSessions(tasks=[toy_task], per_task=2, memory_budget_mb=64)
    with pytest.raises(RuntimeError, match="no session manager"):
        warm.acquire(toy_task)
    try:
        with EnvPool(
            size=2, manager=own_manager, warm=warm, executor="local", reward="real"
        ) as pool:
            assert warm.manager is own_manager and warm.executor is pool.executor
            warm.fill(timeout=60)
            results = pool.rollout([toy_task] * 2, lambda: ScriptedPolicy(demo))
        assert all(r.resolved for r in results)
        assert warm.stats()["hits"] >= 1
    finally:
        warm.close()
    assert _state_dirs(own_manager) == []


def test_bad_input(toy_task, own_manager):
    with pytest.raises(ValueError):
        WarmSessions(own_manager, per_task=0)
    with pytest.raises(ValueError):
        WarmSessions(own_manager, memory_budget_mb=0)
    with WarmSessions(own_manager) as warm, pytest.raises(ValueError):
        warm.acquire({"instance_id": "no-repo"})
