"""``sweworld doctor``: one line per check, exit 0 only when the default path works."""

from __future__ import annotations

import json
import sys
import time

import pytest

from sweworld import doctor
from sweworld.cli import main


def _fine() -> doctor.Check:
    return doctor.Check("outcome model", "ok", "stub", True)


def test_doctor_prints_every_check_and_says_the_default_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "_outcome_model", _fine)  # the shipped model is checked below
    started = time.perf_counter()
    code = main(["doctor"])
    took = time.perf_counter() - started
    out = capsys.readouterr().out.splitlines()
    names = {line.split()[1] for line in out[:-1]}
    expected = {"sandbox", "workspace", "outcome", "verdict", "embedded", "extra", "docker", "vllm"}
    assert expected <= names
    assert all(line.split()[0] in ("ok", "missing", "failed") for line in out[:-1])
    sandbox = next(line for line in out if line.split()[1] == "sandbox")
    if sandbox.startswith("ok"):
        assert code == 0 and out[-1].endswith("works")
    else:
        assert code == 1 and "does NOT work: sandbox" in out[-1]
    assert took < 10  # no language model is loaded


def test_a_broken_default_path_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> doctor.Check:
        raise ValueError("model.json: trained on another feature set")

    monkeypatch.setattr(doctor, "_outcome_model", broken)
    monkeypatch.setattr(doctor, "_sandbox", lambda: doctor.Check("sandbox", "ok", "stub", True))
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["default_path_ok"] is False
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert failed == [
        {
            "name": "outcome model",
            "status": "failed",
            "detail": "ValueError: model.json: trained on another feature set",
            "required": True,
        }
    ]


def test_missing_bubblewrap_is_said_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    check = doctor._sandbox()
    assert check.status == "missing" and check.required
    assert "apt-get install bubblewrap" in check.detail


def test_a_missing_extra_names_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    checks = {c.name: c for c in doctor._extras()}
    assert checks["extra serve"].status == "missing"
    assert checks["extra serve"].detail.startswith("fastapi not installed: pip install")
    assert ".[serve]" in checks["extra serve"].detail
    assert "download.pytorch.org/whl/cpu" in checks["extra model"].detail  # torch's CPU index
    assert not checks["extra serve"].required


def test_docker_without_an_engine_is_missing_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    check = doctor._docker()
    assert check.status == "missing" and not check.required
    assert "/nonexistent/docker.sock" in check.detail


def test_vllm_python_that_is_not_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEWORLD_VLLM_PYTHON", "/nonexistent/python")
    check = doctor._vllm()
    assert check.status == "missing" and "$SWEWORLD_VLLM_PYTHON" in check.detail
    monkeypatch.setenv("SWEWORLD_VLLM_PYTHON", sys.executable)
    assert doctor._vllm().status in ("ok", "missing")  # this python, probed for real


def test_the_shipped_outcome_and_verdict_models_load() -> None:
    """The default world's two models, read for real (JSON only: fast)."""
    for check in (doctor._outcome_model(), doctor._verdict_model()):
        assert check.status == "ok" and check.required, check
    assert "verdict-default" in doctor._verdict_model().detail
    assert "outcome-default" in doctor._outcome_model().detail


def test_a_corrupt_verdict_model_fails_the_default_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sweworld.reward.verdict as verdict

    bad = tmp_path / "model.json"
    bad.write_text("{")
    monkeypatch.setattr(verdict, "DEFAULT_VERDICT", bad)
    check = doctor._verdict_model()
    assert check.status == "failed" and check.required and str(bad) in check.detail
    monkeypatch.setattr(doctor, "_sandbox", lambda: doctor.Check("sandbox", "ok", "stub", True))
    assert main(["doctor"]) == 1
    assert "does NOT work: verdict model" in capsys.readouterr().out.splitlines()[-1]
