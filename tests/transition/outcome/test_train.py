"""``sweworld train outcome`` end to end on records made in the test."""

from __future__ import annotations

from sweworld.train.outcome import main, wilson
from sweworld.transition.outcome.model import OutcomeModel


def test_train_prints_figures_beside_floors(calc_data, tmp_path, capsys) -> None:
    out = tmp_path / "model"
    argv = ["--data", str(calc_data["data"]), "--out", str(out),
            "--repos", str(calc_data["repo"]), "--cache", str(tmp_path / "bases"),
            "--heldout", "acme/heldout", "--max-iter", "20"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "train acme/train: 36 records" in text and "test  acme/heldout: 36 records" in text
    for key in ("exit_all_floor0", "exit_pytest_floor0", "tests_floor_base", "mode=blind"):
        assert key in text
    model = OutcomeModel.load(out)
    figures = model.meta["heldout_figures"]
    oracle = figures[f"{model.meta['learner']}/oracle"]
    # the held-out repository is the same code: the states' features decide its outcomes
    assert oracle["exit_pytest"]["agree"] == 1.0
    assert oracle["exit_pytest_executor"]["agree"] == 1.0
    # the two python -c commands have the same features (nothing tells a ZeroDivisionError)
    assert oracle["exit_all"]["agree"] >= 0.83
    assert oracle["tests"]["agree"] == 1.0
    assert oracle["exit_all_floor0"]["agree"] < 1.0
    assert sorted(model.kinds) == ["pytest", "python_c"]


def test_wilson_interval() -> None:
    lo, hi = wilson(50, 100)
    assert round(lo, 3) == 0.404 and round(hi, 3) == 0.596
    assert wilson(10, 10)[1] == 1.0
