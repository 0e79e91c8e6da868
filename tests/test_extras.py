"""A missing optional dependency is one line naming the extra, exit 2, at the first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sweworld import cli, extras, task_commands

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = ROOT / "data" / "toy" / "demo_actions.jsonl"


def _cli_without(modules: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``sweworld ARGV`` in a fresh interpreter where ``modules`` cannot be imported (as after
    a plain ``pip install -e .``)."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None\n"
        "from sweworld.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_table_is_read_from_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    table = extras.extras()
    assert set(table) == set(project["optional-dependencies"])
    assert "torch" in table["model"] and "sklearn" in table["model"]
    # train includes model and data (sweworld[model,data]) besides its own pyyaml
    assert {"torch", "datasets", "yaml"} <= set(table["train"])


def test_extra_for_names_the_smallest_extra() -> None:
    assert extras.extra_for("torch") == "model"
    assert extras.extra_for("sklearn.metrics") == "model"
    assert extras.extra_for("yaml") == "train"
    assert extras.extra_for("fastapi") == "serve"
    assert extras.extra_for("datasets") == "data"
    assert extras.extra_for("no_such_module_anywhere") is None


def test_missing_extra_from_ignores_sweworld_and_unknown_modules() -> None:
    assert extras.missing_extra_from(ModuleNotFoundError("x", name="sweworld.nothing")) is None
    assert extras.missing_extra_from(ModuleNotFoundError("x", name="zzz_unknown")) is None
    found = extras.missing_extra_from(
        ModuleNotFoundError("No module named 'torch'", name="torch"), "sweworld train swt"
    )
    assert found is not None and found.extra == "model"
    assert str(found).startswith("sweworld train swt needs the 'model' extra")
    assert "pip install" in str(found)


def test_require_sees_a_hidden_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require(["json", "torch"], what="the embedded SWT model")
    assert caught.value.extra == "model" and caught.value.module == "torch"
    extras.require("json", what="nothing")  # installed: no error


def test_cli_turns_a_missing_module_into_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args):
        raise ModuleNotFoundError("No module named 'fastapi'", name="fastapi")

    monkeypatch.setattr(task_commands, "cmd_tasks", boom)
    assert cli.main(["tasks", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweworld: error: sweworld tasks list needs the 'serve' extra")


def test_cli_reraises_a_missing_module_of_sweworld(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(args):
        raise ModuleNotFoundError("No module named 'sweworld.gone'", name="sweworld.gone")

    monkeypatch.setattr(task_commands, "cmd_tasks", boom)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["tasks", "list"])


def test_simulated_episode_without_torch_exits_2_before_any_step(tmp_path: Path) -> None:
    argv = ["episode", "--id", "sweworld__stockroom-1", "--actions", str(ACTIONS)]
    done = _cli_without(["torch"], [*argv, "--executor", "simulated"], tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert "needs the 'model' extra (torch is not installed)" in line
    assert 'pip install -e ".[model]"' in line
    assert "== step" not in done.stdout  # said before the episode starts, not at every step


def test_simulate_without_transformers_exits_2(tmp_path: Path) -> None:
    argv = ["simulate", "--id", "sweworld__stockroom-1", "--command", "python -c 1"]
    done = _cli_without(["transformers"], [*argv, "--executor", "simulated"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "'model' extra (transformers" in _one_error_line(done.stderr)


def test_train_without_its_extra_exits_2(tmp_path: Path) -> None:
    done = _cli_without(["yaml"], ["train", "swt", "--data", str(tmp_path)], tmp_path)
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert "sweworld train swt needs the 'train' extra" in line


def test_data_commands_without_datasets_exit_2(tmp_path: Path) -> None:
    argv = ["data", "make-tasks", "--repo", str(tmp_path), "--out", str(tmp_path / "o")]
    done = _cli_without(["datasets"], argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "sweworld data make-tasks needs the 'data' extra" in _one_error_line(done.stderr)
    assert not (tmp_path / "o").exists()
