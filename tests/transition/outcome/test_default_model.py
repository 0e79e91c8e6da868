"""The shipped outcome model loads (JSON only) and answers through the executor."""

from __future__ import annotations

import pytest

from sweworld.transition.outcome.executor import DEFAULT_MODEL, OutcomeExecutor
from sweworld.transition.outcome.model import OutcomeModel

pytestmark = pytest.mark.skipif(not DEFAULT_MODEL.exists(), reason="no shipped outcome model")


def test_shipped_model_loads_and_says_what_it_was_trained_on() -> None:
    model = OutcomeModel.load(DEFAULT_MODEL)
    for mode in ("oracle", "blind"):  # one set of heads per mode
        assert {f"exit@{mode}", f"exception@{mode}", f"test@{mode}"} <= set(model.heads)
    assert "pytest" in model.kinds
    assert model.meta["heldout_repos"] and model.meta["train_repos"]
    assert not set(model.meta["heldout_repos"]) & set(model.meta["train_repos"])


def test_default_executor_runs_a_test_command(manager, toy_task) -> None:
    with manager.open(toy_task, executor=OutcomeExecutor()) as s:
        out = s.run("python -m pytest -rA tests/test_money.py")
        info = out.info["execution_calls"][-1]["info"]
        assert info["route"] == "outcome-model" and info["tests"] > 0
        assert out.exit_code in (0, 1) and "short test summary info" in out.stdout
