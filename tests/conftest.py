"""Fixtures shared by the whole suite: toy tasks, a session manager, sessions."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# The model fixtures (offline hub, embedded model, LoRA adapter, a real chat server) serve the
# models, transition and reward tests alike.
pytest_plugins = ["tests.model_fixtures"]

PROJECT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``$SWEWORLD_SHARED_DATA`` or ``../shared/data`` beside the project checkout."""
    env = os.environ.get("SWEWORLD_SHARED_DATA")
    return Path(env) if env else PROJECT.parent / "shared" / "data"


def sandbox_available() -> bool:
    return shutil.which("bwrap") is not None


requires_sandbox = pytest.mark.skipif(
    not sandbox_available() and os.environ.get("SWEWORLD_REQUIRE_SANDBOX") != "1",
    reason="bubblewrap is not installed (apt-get install bubblewrap)",
)


@pytest.fixture(scope="session")
def toy_tasks():
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    return load_tasks(toy_tasks_path())


@pytest.fixture(scope="session")
def toy_task(toy_tasks):
    return toy_tasks[0]


@pytest.fixture(scope="session")
def manager(tmp_path_factory):
    """One manager for the suite (base checkouts are shared; sessions are per test)."""
    if not sandbox_available() and os.environ.get("SWEWORLD_REQUIRE_SANDBOX") != "1":
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    from sweworld.sandbox.manager import SessionManager

    mgr = SessionManager(runtime_root=tmp_path_factory.mktemp("runtime"))
    yield mgr
    mgr.close_all()


@pytest.fixture
def session(manager, toy_task):
    sess = manager.open(toy_task)
    yield sess
    sess.destroy()


@pytest.fixture(scope="session")
def mini_swe_agent_trajectories() -> list[dict]:
    """Every trajectory of the shared mini-swe-agent runs (skips when the data is absent)."""
    import json
    import tarfile

    path = shared_data_dir() / "mini-swe-agent-gemini3-verified.tar.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    out = []
    with tarfile.open(path, "r:gz") as tf:
        for member in tf:
            if member.name.endswith(".traj.json"):
                handle = tf.extractfile(member)
                assert handle is not None
                out.append(json.load(handle))
    assert out
    return out
